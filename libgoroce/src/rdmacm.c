/*
 * librdmacm's rdma_cm on the device: ids, address and route resolution,
 * listening, connecting, accepting, rejecting and disconnecting, and
 * their events. The device's connection manager (package cm, on its QP 1)
 * carries out the IB CM exchange and moves the ids' QPs; this side keeps
 * librdmacm's objects and their fields as programs read them.
 *
 * As librdmacm does, the library opens one verbs context per device for
 * the ids on it (id->verbs); an id is on the device of the address it is
 * bound or resolved to. An event channel is an epoll descriptor on a pipe
 * per device with ids on it, which the device writes its events to (see
 * uverbs/abi/cm.go); a device that goes closes its pipe, and each id on
 * it gets DEVICE_REMOVAL.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "goroce.h"

#define MAX_CM_DEVS 16

/* A device's context for its ids, opened at their first use. */
struct cm_dev {
	struct gr_device *dev;
	struct ibv_context *ctx;
	struct ibv_pd *pd; /* for rdma_create_qp without a PD */
	int index;
};

/* An event channel: ch.fd is an epoll descriptor (what programs poll) on
 * one pipe per device with ids on the channel, which the device writes
 * its events to; a device that goes closes its end. */
struct cm_channel {
	struct rdma_event_channel ch; /* what programs hold */
	int rfd[MAX_CM_DEVS];         /* each device's pipe's read end, -1: none */
	uint32_t reg[MAX_CM_DEVS];    /* the channel's handle on each device, 0: not registered */
	uint8_t dead[MAX_CM_DEVS];    /* the device closed its pipe */
	struct goroce_cm_event *gone; /* the DEVICE_REMOVAL events to report, oldest first */
	size_t ngone, capgone;
	int destroyed;       /* rdma_destroy_event_channel took it; it lies in graves */
	pthread_t destroyer; /* the thread that did */
};

/* graves holds the channels destroyed last, their memory kept a while: a
 * thread that calls rdma_get_cm_event a moment after another destroyed
 * its channel (librdmacm's rping of rdma-core 44 does, its event thread
 * against its main thread's teardown) finds it destroyed rather than
 * freed. */
#define GRAVES 64
static struct cm_channel *graves[GRAVES];
static unsigned ngraves;

struct cm_id {
	struct rdma_cm_id id; /* what programs hold */
	struct cm_dev *cd;    /* NULL until bound or resolved */
	uint32_t h;           /* on cd's device; 0: not made there yet */
	struct cm_channel *chan;
	int sync; /* the id's channel is its own: calls wait for their events */
	uint8_t tos, ack_timeout;
	struct ibv_qp_init_attr ep_attr; /* rdma_create_ep's, for rdma_get_request's QPs */
	int has_ep_attr;
	struct ibv_sa_path_rec path;
	int own_cqs;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	unsigned out;       /* events given to the program and not acked */
	struct cm_mc *mcs;  /* multicast joins, under cm_lock */
	struct cm_id *next; /* in ids */
};

/* A multicast join of an id (rdma_join_multicast). */
struct cm_mc {
	struct sockaddr_storage addr;
	void *context;
	uint16_t flags;
	int attached;
	union ibv_gid mgid;
	struct cm_mc *next;
};

struct cm_event {
	struct rdma_cm_event ev;
	uint8_t pd[GOROCE_MAX_PRIVATE_DATA];
	struct cm_id *held; /* the id whose count holds the event: the listener for a request */
};

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cm_dev cm_devs[MAX_CM_DEVS];
static int n_cm_devs;
static struct cm_id *ids; /* every id, under cm_lock */

static int fail(int err)
{
	errno = err;
	return -1;
}

/* cm_init fails with ENODEV until a device is there, as librdmacm's
 * ucma_init does for channels, ids, rdma_getaddrinfo and
 * rdma_get_devices. */
static int cm_init(void)
{
	static int ready;
	pthread_mutex_lock(&cm_lock);
	if (!ready) {
		int n = 0;
		struct ibv_device **list = ibv_get_device_list(&n);
		ready = list && n > 0;
		ibv_free_device_list(list);
	}
	int r = ready;
	pthread_mutex_unlock(&cm_lock);
	return r ? 0 : fail(ENODEV);
}

/* cm_dev_of returns the id context of device d, opening it first. The
 * caller holds cm_lock. */
static struct cm_dev *cm_dev_of(struct gr_device *d)
{
	for (int i = 0; i < n_cm_devs; i++)
		if (cm_devs[i].dev == d)
			return &cm_devs[i];
	if (n_cm_devs == MAX_CM_DEVS)
		return NULL;
	struct ibv_context *ctx = ibv_open_device(&d->ibdev);
	if (!ctx)
		return NULL;
	struct cm_dev *cd = &cm_devs[n_cm_devs];
	cd->dev = d;
	cd->ctx = ctx;
	cd->index = n_cm_devs++;
	return cd;
}

/* The device one of whose GIDs is addr (NULL: none). The caller holds
 * cm_lock. */
static struct cm_dev *cm_dev_for(const struct sockaddr *sa)
{
	uint8_t gid[16] = {0};
	if (sa->sa_family == AF_INET) {
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		return NULL;
	}
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct cm_dev *found = NULL;
	for (int i = 0; list && i < n && !found; i++) {
		struct gr_device *d = container_of(list[i], struct gr_device, ibdev);
		for (uint32_t j = 0; j < d->info.num_gids; j++)
			if (!memcmp(d->info.gid[j].gid, gid, 16)) {
				found = cm_dev_of(d);
				break;
			}
	}
	ibv_free_device_list(list);
	return found;
}

/* cm_dev_route returns the device to reach dst from: the one holding dst
 * (a connection to oneself), else the one holding the address the kernel
 * would send from, else the first of dst's family. */
static struct cm_dev *cm_dev_route(const struct sockaddr *dst)
{
	struct cm_dev *cd = cm_dev_for(dst);
	if (cd)
		return cd;
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		size_t dl = dst->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		if (!connect(fd, dst, dl) && !getsockname(fd, (struct sockaddr *)&ss, &len))
			cd = cm_dev_for((struct sockaddr *)&ss);
		close(fd);
	}
	if (cd)
		return cd;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !cd; i++) {
		struct gr_device *d = container_of(list[i], struct gr_device, ibdev);
		for (uint32_t j = 0; j < d->info.num_gids && !cd; j++) {
			const uint8_t *g = d->info.gid[j].gid;
			int v4 = !memcmp(g, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
			if (v4 == (dst->sa_family == AF_INET))
				cd = cm_dev_of(d);
		}
	}
	ibv_free_device_list(list);
	return cd;
}

static int sockaddr_len(const struct sockaddr *sa)
{
	switch (sa ? sa->sa_family : 0) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

static void put_sockaddr(uint8_t out[GOROCE_SOCKADDR_SIZE], const struct sockaddr *sa)
{
	memset(out, 0, GOROCE_SOCKADDR_SIZE);
	int n = sockaddr_len(sa);
	if (n)
		memcpy(out, sa, n);
}

static void get_sockaddr(struct sockaddr_storage *ss, const uint8_t in[GOROCE_SOCKADDR_SIZE])
{
	memset(ss, 0, sizeof *ss);
	memcpy(ss, in, GOROCE_SOCKADDR_SIZE);
}

static struct gr_context *cd_ctx(struct cm_dev *cd) { return to_ctx(cd->ctx); }

/* Event channels */

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	if (cm_init())
		return NULL;
	struct cm_channel *c = calloc(1, sizeof *c);
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	if (c->ch.fd < 0) {
		int e = errno;
		free(c);
		errno = e;
		return NULL;
	}
	for (int i = 0; i < MAX_CM_DEVS; i++)
		c->rfd[i] = -1;
	return &c->ch;
}

static struct cm_channel *to_chan(struct rdma_event_channel *ch) { return container_of(ch, struct cm_channel, ch); }

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_channel *c = to_chan(channel);
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < n_cm_devs; i++)
		if (c->reg[i]) {
			struct goroce_handle_req req = {.handle = c->reg[i]};
			gr_call(cd_ctx(&cm_devs[i]), GOROCE_OP_CM_UNREGISTER_CHANNEL, &req, sizeof req, NULL, 0, NULL, 0,
				NULL);
		}
	for (int i = 0; i < MAX_CM_DEVS; i++)
		if (c->rfd[i] >= 0) {
			close(c->rfd[i]);
			c->rfd[i] = -1;
		}
	close(c->ch.fd);
	free(c->gone);
	c->gone = NULL;
	c->ngone = c->capgone = 0;
	c->destroyed = 1;
	c->destroyer = pthread_self();
	struct cm_channel **grave = &graves[ngraves++ % GRAVES];
	free(*grave);
	*grave = c;
	pthread_mutex_unlock(&cm_lock);
}

/* destroyed reports whether c was destroyed, for next_event, which then
 * fails with EBADF, as a read of the closed descriptor does, in the thread
 * that destroyed it; another thread, which raced the destroy, waits for
 * good, as its read would had it come a moment sooner (and rping's main
 * thread then ends the program). The caller holds cm_lock. */
static int destroyed(struct cm_channel *c)
{
	if (!c->destroyed)
		return 0;
	if (pthread_equal(c->destroyer, pthread_self())) {
		pthread_mutex_unlock(&cm_lock);
		return fail(EBADF);
	}
	pthread_mutex_unlock(&cm_lock);
	for (;;)
		pause();
}

/* reg_channel registers c with cd's device; the caller holds cm_lock. */
static int reg_channel(struct cm_channel *c, struct cm_dev *cd)
{
	if (c->reg[cd->index])
		return 0;
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return errno;
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)cd->index};
	int r = 0;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) || epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, p[0], &ev))
		r = errno;
	struct goroce_cm_register_channel_req req = {.tag = (uint32_t)cd->index};
	struct goroce_handle_reply rep;
	if (!r)
		r = gr_call(cd_ctx(cd), GOROCE_OP_CM_REGISTER_CHANNEL, &req, sizeof req, &rep, sizeof rep, &p[1], 1, NULL);
	close(p[1]);
	if (r) {
		close(p[0]);
		return r;
	}
	c->rfd[cd->index] = p[0];
	c->reg[cd->index] = rep.handle;
	return 0;
}

/* Ids */

static struct cm_id *to_id(struct rdma_cm_id *id) { return container_of(id, struct cm_id, id); }

/* live_id returns cid's id if it is one of ids, else NULL: a call on a
 * pointer that is not a live id (NULL, or one rdma_destroy_id took, which
 * perftest 4.5's rdma_cm client reuses when it retries a rejected
 * connection) fails with EINVAL instead of reading freed memory. */
static struct cm_id *live_id(struct rdma_cm_id *cid)
{
	if (!cid)
		return NULL;
	struct cm_id *id = to_id(cid), *x;
	pthread_mutex_lock(&cm_lock);
	for (x = ids; x && x != id; x = x->next)
		;
	pthread_mutex_unlock(&cm_lock);
	return x;
}

static struct cm_id *new_id(struct cm_channel *chan, void *context, enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_id *id = calloc(1, sizeof *id);
	if (!id)
		return NULL;
	id->chan = chan;
	id->id.channel = &chan->ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qpt;
	id->id.route.path_rec = &id->path;
	pthread_mutex_init(&id->mu, NULL);
	pthread_cond_init(&id->cond, NULL);
	pthread_mutex_lock(&cm_lock);
	id->next = ids;
	ids = id;
	pthread_mutex_unlock(&cm_lock);
	return id;
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	if (!id)
		return fail(EINVAL);
	if (cm_init())
		return -1;
	enum ibv_qp_type qpt;
	switch (ps) {
	case RDMA_PS_TCP:
		qpt = IBV_QPT_RC;
		break;
	case RDMA_PS_UDP:
		qpt = IBV_QPT_UD;
		break;
	case RDMA_PS_IB:
	case RDMA_PS_IPOIB:
		return fail(EOPNOTSUPP); /* InfiniBand's own port spaces: not on RoCE here */
	default:
		return fail(EINVAL);
	}
	int sync = !channel;
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct cm_id *x = new_id(to_chan(channel), context, ps, qpt);
	if (!x) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return fail(ENOMEM);
	}
	x->sync = sync;
	*id = &x->id;
	return 0;
}

/* on_device makes id on cd's device, if it is not there yet; the caller
 * holds cm_lock. */
static int on_device(struct cm_id *id, struct cm_dev *cd)
{
	if (id->cd)
		return id->cd == cd ? 0 : EINVAL;
	int r = reg_channel(id->chan, cd);
	if (r)
		return r;
	struct goroce_cm_create_id_req req = {.channel = id->chan->reg[cd->index],
					      .ps = (uint32_t)id->id.ps,
					      .qp_type = (uint32_t)id->id.qp_type,
					      .cookie = (uintptr_t)id};
	struct goroce_cm_new_id_reply rep;
	r = gr_call(cd_ctx(cd), GOROCE_OP_CM_CREATE_ID, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r)
		return r;
	id->cd = cd;
	id->h = rep.id;
	id->id.verbs = cd->ctx;
	id->id.port_num = 1;
	return 0;
}

/* query fills id->route from what the device knows of it. */
static void query(struct cm_id *id)
{
	if (!id->cd)
		return;
	struct goroce_handle_req req = {.handle = id->h};
	struct goroce_cm_query_reply rep;
	if (gr_call(cd_ctx(id->cd), GOROCE_OP_CM_QUERY, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL))
		return;
	get_sockaddr(&id->id.route.addr.src_storage, rep.src);
	get_sockaddr(&id->id.route.addr.dst_storage, rep.dst);
	struct ibv_sa_path_rec *p = &id->path;
	memset(p, 0, sizeof *p);
	memcpy(p->sgid.raw, rep.sgid, 16);
	memcpy(p->dgid.raw, rep.dgid, 16);
	p->pkey = htobe16(0xffff);
	p->hop_limit = 64;
	p->mtu_selector = 2; /* exactly */
	p->mtu = rep.path_mtu ? (uint8_t)rep.path_mtu : IBV_MTU_1024;
	p->rate_selector = 2;
	p->rate = IBV_RATE_10_GBPS;
	p->packet_life_time_selector = 2;
	p->packet_life_time = 18;
	p->reversible = 1;
	p->numb_path = 1;
	memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, rep.sgid, 16);
	memcpy(id->id.route.addr.addr.ibaddr.dgid.raw, rep.dgid, 16);
	id->id.route.addr.addr.ibaddr.pkey = 0xffff;
	if (rep.dgid[0] || rep.dgid[10] || rep.dgid[15] || rep.dgid[12])
		id->id.route.num_paths = 1;
}

static void free_own_cqs(struct cm_id *id);

EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (cid->event) {
		struct rdma_cm_event *e = cid->event;
		cid->event = NULL;
		rdma_ack_cm_event(e);
	}
	pthread_mutex_lock(&cm_lock);
	if (id->cd) {
		struct goroce_handle_req req = {.handle = id->h};
		gr_call(cd_ctx(id->cd), GOROCE_OP_CM_DESTROY_ID, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	}
	for (struct cm_id **p = &ids; *p; p = &(*p)->next)
		if (*p == id) {
			*p = id->next;
			break;
		}
	pthread_mutex_unlock(&cm_lock);
	/* As librdmacm: wait until every event of the id is acked. */
	pthread_mutex_lock(&id->mu);
	while (id->out)
		pthread_cond_wait(&id->cond, &id->mu);
	pthread_mutex_unlock(&id->mu);
	if (id->sync)
		rdma_destroy_event_channel(cid->channel);
	free_own_cqs(id);
	for (struct cm_mc *mc = id->mcs, *next; mc; mc = next) {
		next = mc->next;
		free(mc);
	}
	free(id);
	return 0;
}

/* Events */

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const s[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",	   "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR",	 "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",	   "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED",	 "RDMA_CM_EVENT_DISCONNECTED",	   "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	 "RDMA_CM_EVENT_MULTICAST_ERROR",  "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof s / sizeof s[0])
		return s[event];
	return "UNKNOWN EVENT";
}

/* lookup returns the id of handle h on device index tag. The caller holds
 * cm_lock. */
static struct cm_id *lookup(uint32_t tag, uint32_t h)
{
	for (struct cm_id *x = ids; x; x = x->next)
		if (x->cd && x->cd->index == (int)tag && x->h == h)
			return x;
	return NULL;
}

/* removal queues a DEVICE_REMOVAL for each of c's ids on device i,
 * which closed its pipe (it stopped, or its process died), as the
 * kernel's rdma_cm reports a device removed. The pipe stays in the epoll
 * set, readable, until they are read. The caller holds cm_lock. */
static void drop_pipe(struct cm_channel *c, int i)
{
	epoll_ctl(c->ch.fd, EPOLL_CTL_DEL, c->rfd[i], NULL);
	close(c->rfd[i]);
	c->rfd[i] = -1;
}

static void removal(struct cm_channel *c, int i)
{
	if (c->dead[i])
		return;
	c->dead[i] = 1;
	size_t before = c->ngone;
	for (struct cm_id *id = ids; id; id = id->next) {
		if (id->chan != c || id->cd != &cm_devs[i] || !id->h)
			continue;
		if (c->ngone == c->capgone) {
			size_t n = c->capgone ? 2 * c->capgone : 8;
			struct goroce_cm_event *g = realloc(c->gone, n * sizeof *g);
			if (!g)
				return;
			c->gone = g;
			c->capgone = n;
		}
		c->gone[c->ngone++] = (struct goroce_cm_event){
			.type = RDMA_CM_EVENT_DEVICE_REMOVAL, .tag = (uint32_t)i, .id = id->h};
	}
	if (c->ngone == before)
		drop_pipe(c, i); /* no id to tell */
}

/* next_event reads c's next event into g: 0, or -1 with errno (EAGAIN:
 * none waits on a non-blocking channel). */
static int next_event(struct cm_channel *c, struct goroce_cm_event *g)
{
	pthread_mutex_lock(&cm_lock);
	if (destroyed(c))
		return -1;
	int fl = fcntl(c->ch.fd, F_GETFL);
	pthread_mutex_unlock(&cm_lock);
	if (fl < 0)
		return -1;
	int timeout = fl & O_NONBLOCK ? 0 : -1;
	for (;;) {
		pthread_mutex_lock(&cm_lock);
		if (destroyed(c))
			return -1;
		if (c->ngone) {
			*g = c->gone[0];
			memmove(c->gone, c->gone + 1, --c->ngone * sizeof *g);
			for (int i = 0; !c->ngone && i < MAX_CM_DEVS; i++)
				if (c->dead[i] && c->rfd[i] >= 0)
					drop_pipe(c, i);
			pthread_mutex_unlock(&cm_lock);
			return 0;
		}
		pthread_mutex_unlock(&cm_lock);
		struct epoll_event ev[MAX_CM_DEVS];
		int n = epoll_wait(c->ch.fd, ev, MAX_CM_DEVS, timeout);
		if (n < 0) {
			/* Another thread may have destroyed the channel while this
			 * one waited (rping's main thread does, its event thread
			 * blocked here): librdmacm's read of the closed descriptor
			 * goes on waiting, and so does destroyed. */
			int e = errno;
			pthread_mutex_lock(&cm_lock);
			if (destroyed(c))
				return -1;
			pthread_mutex_unlock(&cm_lock);
			if (e == EINTR)
				continue; /* as the kernel's read restarts */
			return fail(e);
		}
		if (!n)
			return fail(EAGAIN);
		for (int k = 0; k < n; k++) {
			uint32_t i = ev[k].data.u32;
			pthread_mutex_lock(&cm_lock);
			int fd = i < MAX_CM_DEVS ? c->rfd[i] : -1;
			ssize_t r = fd < 0 ? -1 : read(fd, g, sizeof *g);
			if (r == 0)
				removal(c, (int)i);
			pthread_mutex_unlock(&cm_lock);
			if (r == sizeof *g)
				return 0;
			if (r > 0)
				return fail(EIO);
			/* r < 0: another thread took it (EAGAIN), or the pipe went. */
		}
	}
}

/* mc_event gives a multicast event the join's context, and for a join
 * attaches the id's QP, as librdmacm's ucma_process_join does (an attach
 * that fails makes it MULTICAST_ERROR). It reports false for a join the
 * program has left. */
static int mc_event(struct cm_id *id, const struct goroce_cm_event *g, struct cm_event *e)
{
	pthread_mutex_lock(&cm_lock);
	struct cm_mc *mc = id->mcs;
	while (mc && (uintptr_t)mc != g->uid)
		mc = mc->next;
	if (!mc) {
		pthread_mutex_unlock(&cm_lock);
		return 0;
	}
	e->ev.param.ud.private_data = mc->context;
	e->ev.param.ud.private_data_len = 0;
	if (g->type == RDMA_CM_EVENT_MULTICAST_JOIN) {
		memcpy(mc->mgid.raw, g->ud.dgid, 16);
		if (id->id.qp && mc->flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER && !mc->attached) {
			int r = ibv_attach_mcast(id->id.qp, &mc->mgid, 0);
			if (r) {
				errno = r;
				e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
				e->ev.status = -1;
			} else {
				mc->attached = 1;
			}
		}
	}
	pthread_mutex_unlock(&cm_lock);
	return 1;
}

/* count_event counts an event of id given to the program (d 1) or acked
 * (d -1); rdma_destroy_id waits until none is out. */
static void count_event(struct cm_id *id, int d)
{
	pthread_mutex_lock(&id->mu);
	id->out += d;
	if (!id->out)
		pthread_cond_broadcast(&id->cond);
	pthread_mutex_unlock(&id->mu);
}

/* read_event reads the next event of channel c and makes it the program's. */
static int read_event(struct cm_channel *c, struct rdma_cm_event **event)
{
	for (;;) {
		struct goroce_cm_event g;
		if (next_event(c, &g))
			return -1;
		pthread_mutex_lock(&cm_lock);
		if (g.tag >= (uint32_t)n_cm_devs) {
			pthread_mutex_unlock(&cm_lock);
			continue;
		}
		struct cm_dev *cd = &cm_devs[g.tag];
		struct cm_id *id = lookup(g.tag, g.id), *listen = NULL;
		if (g.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			listen = lookup(g.tag, g.listen_id);
			if (!listen || id) {
				pthread_mutex_unlock(&cm_lock);
				continue; /* a request of a listener destroyed since */
			}
			/* As librdmacm's, the request counts on the listener. */
			count_event(listen, 1);
			pthread_mutex_unlock(&cm_lock);
			id = new_id(listen->chan, listen->id.context, listen->id.ps, listen->id.qp_type);
			if (!id) {
				count_event(listen, -1);
				return fail(ENOMEM);
			}
			pthread_mutex_lock(&cm_lock);
			id->cd = cd;
			id->h = g.id;
			id->id.verbs = cd->ctx;
			id->id.port_num = 1;
			id->id.pd = listen->id.pd;
		} else if (id) {
			/* Counted under cm_lock, where rdma_destroy_id takes the id
			 * out of the list: a destroy either finds this event to wait
			 * for or the event finds no id, never an id freed under it. */
			count_event(id, 1);
		}
		pthread_mutex_unlock(&cm_lock);
		if (!id)
			continue; /* an event of an id destroyed since */
		struct cm_id *held = listen ? listen : id;
		struct cm_event *e = calloc(1, sizeof *e);
		if (!e) {
			count_event(held, -1);
			return fail(ENOMEM);
		}
		e->held = held;
		e->ev.id = &id->id;
		e->ev.listen_id = listen ? &listen->id : NULL;
		e->ev.event = (enum rdma_cm_event_type)g.type;
		e->ev.status = g.status;
		size_t pdl = g.param.private_data_len;
		memcpy(e->pd, g.param.private_data, pdl);
		if (id->id.ps == RDMA_PS_UDP) {
			struct rdma_ud_param *u = &e->ev.param.ud;
			u->private_data = pdl ? e->pd : NULL;
			u->private_data_len = (uint8_t)pdl;
			u->ah_attr.is_global = 1;
			memcpy(u->ah_attr.grh.dgid.raw, g.ud.dgid, 16);
			u->ah_attr.grh.sgid_index = g.ud.sgid_index;
			u->ah_attr.grh.hop_limit = g.ud.hop_limit;
			u->ah_attr.grh.traffic_class = g.ud.traffic_class;
			u->ah_attr.port_num = 1;
			u->qp_num = g.ud_qpn;
			u->qkey = g.ud_qkey;
		} else {
			struct rdma_conn_param *p = &e->ev.param.conn;
			p->private_data = pdl ? e->pd : NULL;
			p->private_data_len = (uint8_t)pdl;
			p->responder_resources = g.param.responder_resources;
			p->initiator_depth = g.param.initiator_depth;
			p->flow_control = g.param.flow_control;
			p->retry_count = g.param.retry_count;
			p->rnr_retry_count = g.param.rnr_retry_count;
			p->srq = g.param.srq;
			p->qp_num = g.param.qp_num;
		}
		if (g.type == RDMA_CM_EVENT_MULTICAST_JOIN || g.type == RDMA_CM_EVENT_MULTICAST_ERROR) {
			if (!mc_event(id, &g, e)) {
				free(e);
				count_event(held, -1);
				continue; /* a join left since */
			}
		}
		switch (g.type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			query(id);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (id->id.qp)
				id->id.qp->state = IBV_QPS_RTS; /* the device's CM moved it */
			query(id);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_UNREACHABLE:
			if (id->id.qp && g.type == RDMA_CM_EVENT_DISCONNECTED)
				id->id.qp->state = IBV_QPS_ERR;
			break;
		}
		*event = &e->ev;
		return 0;
	}
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return fail(EINVAL);
	return read_event(to_chan(channel), event);
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL);
	struct cm_event *e = container_of(event, struct cm_event, ev);
	count_event(e->held, -1);
	free(e);
	return 0;
}

/* wait_sync waits on a synchronous id's own channel for the event that
 * ends a call, and returns 0 when it is want, else -1 with errno as
 * librdmacm sets it. */
static int wait_sync(struct cm_id *id, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	for (;;) {
		if (read_event(id->chan, &ev))
			return -1;
		if (ev->id != &id->id) {
			rdma_ack_cm_event(ev); /* not this id's: a request on a sync listener waits in rdma_get_request */
			continue;
		}
		enum rdma_cm_event_type t = ev->event;
		int st = ev->status;
		rdma_ack_cm_event(ev);
		if (t == want)
			return 0;
		switch (t) {
		case RDMA_CM_EVENT_REJECTED:
			return fail(ECONNREFUSED);
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			return fail(ENODEV);
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_MULTICAST_ERROR:
			return fail(st < 0 ? -st : EHOSTUNREACH);
		default:
			continue;
		}
	}
}

/* Addresses and routes */

EXPORT int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	if (!live_id(cid) || !sockaddr_len(addr))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	pthread_mutex_lock(&cm_lock);
	int any = addr->sa_family == AF_INET ? ((struct sockaddr_in *)addr)->sin_addr.s_addr == htonl(INADDR_ANY)
					      : IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)addr)->sin6_addr);
	struct cm_dev *cd = any ? NULL : cm_dev_for(addr);
	if (!any && !cd) {
		pthread_mutex_unlock(&cm_lock);
		return fail(EADDRNOTAVAIL); /* no device has that address */
	}
	if (any) {
		/* A wildcard listens on the first device: goroce serves one
		 * device per address. */
		int n;
		struct ibv_device **list = ibv_get_device_list(&n);
		if (list && n)
			cd = cm_dev_of(container_of(list[0], struct gr_device, ibdev));
		ibv_free_device_list(list);
		if (!cd) {
			pthread_mutex_unlock(&cm_lock);
			return fail(ENODEV);
		}
	}
	int r = on_device(id, cd);
	if (!r) {
		struct goroce_cm_addr_req req = {.id = id->h};
		put_sockaddr(req.src, addr);
		r = gr_call(cd_ctx(cd), GOROCE_OP_CM_BIND, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	}
	if (!r)
		memcpy(&cid->route.addr.src_storage, addr, sockaddr_len(addr));
	pthread_mutex_unlock(&cm_lock);
	return r ? fail(r) : 0;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *cid, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	if (!live_id(cid) || !sockaddr_len(dst_addr) || (src_addr && src_addr->sa_family && !sockaddr_len(src_addr)))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	pthread_mutex_lock(&cm_lock);
	struct cm_dev *cd = id->cd;
	if (!cd && src_addr && src_addr->sa_family) {
		int any = src_addr->sa_family == AF_INET
				  ? ((struct sockaddr_in *)src_addr)->sin_addr.s_addr == htonl(INADDR_ANY)
				  : IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)src_addr)->sin6_addr);
		if (!any && !(cd = cm_dev_for(src_addr))) {
			pthread_mutex_unlock(&cm_lock);
			return fail(EADDRNOTAVAIL);
		}
	}
	if (!cd)
		cd = cm_dev_route(dst_addr);
	if (!cd) {
		pthread_mutex_unlock(&cm_lock);
		return fail(ENODEV); /* no device of the destination's family */
	}
	int r = on_device(id, cd);
	if (!r) {
		struct goroce_cm_addr_req req = {.id = id->h, .timeout_ms = (uint32_t)timeout_ms};
		if (src_addr && src_addr->sa_family)
			put_sockaddr(req.src, src_addr);
		put_sockaddr(req.dst, dst_addr);
		r = gr_call(cd_ctx(cd), GOROCE_OP_CM_RESOLVE_ADDR, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	}
	if (!r)
		memcpy(&cid->route.addr.dst_storage, dst_addr, sockaddr_len(dst_addr));
	pthread_mutex_unlock(&cm_lock);
	if (r)
		return fail(r);
	return id->sync ? wait_sync(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (!id->cd)
		return fail(EINVAL);
	struct goroce_cm_addr_req req = {.id = id->h, .timeout_ms = (uint32_t)timeout_ms};
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_RESOLVE_ROUTE, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (r)
		return fail(r);
	return id->sync ? wait_sync(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

EXPORT uint16_t rdma_get_src_port(struct rdma_cm_id *id)
{
	if (!id)
		return 0;
	const struct sockaddr *sa = &id->route.addr.src_addr;
	return sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					 : ((const struct sockaddr_in *)sa)->sin_port;
}

EXPORT uint16_t rdma_get_dst_port(struct rdma_cm_id *id)
{
	if (!id)
		return 0;
	const struct sockaddr *sa = &id->route.addr.dst_addr;
	return sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					 : ((const struct sockaddr_in *)sa)->sin_port;
}

/* Listening, connecting, accepting */

EXPORT int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (!id->cd) {
		/* rdma_listen without a bind listens on the wildcard, port 0. */
		struct sockaddr_in any = {.sin_family = AF_INET};
		if (rdma_bind_addr(cid, (struct sockaddr *)&any))
			return -1;
	}
	struct goroce_cm_listen_req req = {.id = id->h, .backlog = backlog > 0 ? (uint32_t)backlog : 0};
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_LISTEN, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (r)
		return fail(r);
	query(id);
	return 0;
}

static int conn_req(struct cm_id *id, struct rdma_conn_param *p, struct goroce_cm_connect_req *req)
{
	memset(req, 0, sizeof *req);
	req->id = id->h;
	req->tos = id->tos;
	req->ack_timeout = id->ack_timeout;
	if (id->id.qp) {
		if (id->id.qp->context != id->id.verbs)
			return EINVAL;
		req->qp = to_qp(id->id.qp)->h;
	}
	if (!p) {
		req->param.responder_resources = req->param.initiator_depth = 16;
		req->param.retry_count = req->param.rnr_retry_count = 7;
		return 0;
	}
	if (p->private_data_len && !p->private_data)
		return EINVAL;
	req->param.private_data_len = p->private_data_len;
	if (p->private_data_len)
		memcpy(req->param.private_data, p->private_data, p->private_data_len);
	req->param.responder_resources = p->responder_resources;
	req->param.initiator_depth = p->initiator_depth;
	req->param.flow_control = p->flow_control;
	req->param.retry_count = p->retry_count;
	req->param.rnr_retry_count = p->rnr_retry_count;
	req->param.srq = p->srq;
	req->param.qp_num = p->qp_num;
	return 0;
}

EXPORT int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *conn_param)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (!id->cd)
		return fail(EINVAL);
	struct goroce_cm_connect_req req;
	int r = conn_req(id, conn_param, &req);
	if (!r)
		r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_CONNECT, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (r)
		return fail(r);
	/* An id with no QP gets CONNECT_RESPONSE, and rdma_establish ends the
	 * handshake. */
	return id->sync ? wait_sync(id, cid->qp ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_CONNECT_RESPONSE) : 0;
}

/* ack_own acks the request rdma_get_request left on the id. */
static void ack_own(struct rdma_cm_id *cid)
{
	if (cid->event) {
		struct rdma_cm_event *e = cid->event;
		cid->event = NULL;
		rdma_ack_cm_event(e);
	}
}

EXPORT int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *conn_param)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	ack_own(cid);
	if (!id->cd)
		return fail(EINVAL);
	if (!cid->qp && !conn_param)
		return fail(EINVAL); /* an id with no QP names the program's in conn_param->qp_num */
	struct goroce_cm_connect_req req;
	int r = conn_req(id, conn_param, &req);
	if (!r)
		r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_ACCEPT, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (r)
		return fail(r);
	if (cid->qp && cid->qp->qp_type != IBV_QPT_UD)
		cid->qp->state = IBV_QPS_RTS; /* the device's CM moved it before it sent the REP */
	return id->sync ? wait_sync(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

EXPORT int rdma_reject(struct rdma_cm_id *cid, const void *private_data, uint8_t private_data_len)
{
	if (!live_id(cid) || (private_data_len && !private_data) || private_data_len > 148)
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	ack_own(cid);
	if (!id->cd)
		return fail(EINVAL);
	struct goroce_cm_reject_req req = {.id = id->h, .private_data_len = private_data_len};
	if (private_data_len)
		memcpy(req.private_data, private_data, private_data_len);
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_REJECT, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	return r ? fail(r) : 0;
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

EXPORT int rdma_disconnect(struct rdma_cm_id *cid)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (!id->cd)
		return fail(EINVAL);
	if (cid->qp)
		cid->qp->state = IBV_QPS_ERR; /* as librdmacm moves it before the DREQ */
	struct goroce_handle_req req = {.handle = id->h};
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_DISCONNECT, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	return r ? fail(r) : 0;
}

EXPORT int rdma_establish(struct rdma_cm_id *cid)
{
	if (!live_id(cid) || !to_id(cid)->cd || cid->qp)
		return fail(EINVAL); /* an id with a QP: the handshake is done already */
	struct cm_id *id = to_id(cid);
	struct goroce_handle_req req = {.handle = id->h};
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_ESTABLISH, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	return r ? fail(r) : 0;
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **cid)
{
	if (!live_id(listen) || !cid)
		return fail(EINVAL);
	struct cm_id *l = to_id(listen);
	if (!l->sync)
		return fail(EINVAL);
	struct rdma_cm_event *ev;
	for (;;) {
		if (read_event(l->chan, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == listen)
			break;
		rdma_ack_cm_event(ev);
	}
	struct cm_id *id = to_id(ev->id);
	/* The new id is synchronous: its own channel. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		rdma_reject(ev->id, NULL, 0);
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (rdma_migrate_id(ev->id, ch)) {
		int e = errno;
		rdma_reject(ev->id, NULL, 0);
		rdma_ack_cm_event(ev);
		rdma_destroy_event_channel(ch);
		return fail(e);
	}
	id->sync = 1;
	if (l->has_ep_attr) {
		struct ibv_qp_init_attr a = l->ep_attr;
		if (rdma_create_qp(ev->id, listen->pd, &a)) {
			int e = errno;
			rdma_reject(ev->id, NULL, 0);
			rdma_ack_cm_event(ev);
			return fail(e);
		}
	}
	ev->id->event = ev; /* as librdmacm: the request is the id's until rdma_accept or rdma_reject acks it */
	*cid = ev->id;
	return 0;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *cid, struct rdma_event_channel *channel)
{
	if (!live_id(cid))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	int sync = !channel;
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct cm_channel *c = to_chan(channel);
	pthread_mutex_lock(&cm_lock);
	int r = 0;
	if (id->cd) {
		r = reg_channel(c, id->cd);
		if (!r) {
			struct goroce_cm_migrate_req req = {.id = id->h, .channel = c->reg[id->cd->index]};
			r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_MIGRATE, &req, sizeof req, NULL, 0, NULL, 0, NULL);
		}
	}
	struct rdma_event_channel *old = id->sync ? cid->channel : NULL;
	if (!r) {
		id->chan = c;
		cid->channel = channel;
		id->sync = sync;
	}
	pthread_mutex_unlock(&cm_lock);
	if (r) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return fail(r);
	}
	if (old)
		rdma_destroy_event_channel(old);
	return 0;
}

/* QPs on ids */

EXPORT int rdma_init_qp_attr(struct rdma_cm_id *cid, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!live_id(cid) || !qp_attr || !qp_attr_mask || !to_id(cid)->cd)
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	struct goroce_cm_init_qp_attr_req req = {.id = id->h, .state = qp_attr->qp_state};
	struct goroce_cm_init_qp_attr_reply rep;
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_INIT_QP_ATTR, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r)
		return fail(r);
	gr_qp_attr_from(qp_attr, &rep.attr);
	*qp_attr_mask = (int)rep.mask;
	return 0;
}

static struct ibv_pd *default_pd(struct cm_id *id)
{
	if (id->id.pd)
		return id->id.pd;
	pthread_mutex_lock(&cm_lock);
	if (!id->cd->pd)
		id->cd->pd = ibv_alloc_pd(id->cd->ctx);
	struct ibv_pd *pd = id->cd->pd;
	pthread_mutex_unlock(&cm_lock);
	return pd;
}

static void free_own_cqs(struct cm_id *id)
{
	if (!id->own_cqs)
		return;
	struct rdma_cm_id *c = &id->id;
	if (c->recv_cq && c->recv_cq != c->send_cq)
		ibv_destroy_cq(c->recv_cq);
	if (c->send_cq)
		ibv_destroy_cq(c->send_cq);
	if (c->recv_cq_channel && c->recv_cq_channel != c->send_cq_channel)
		ibv_destroy_comp_channel(c->recv_cq_channel);
	if (c->send_cq_channel)
		ibv_destroy_comp_channel(c->send_cq_channel);
	c->send_cq = c->recv_cq = NULL;
	c->send_cq_channel = c->recv_cq_channel = NULL;
	id->own_cqs = 0;
}

/* own_cqs makes the CQs (and their completion channels) of a QP whose
 * creator gave none, as librdmacm does for rdma_verbs.h's helpers. */
static int own_cqs(struct cm_id *id, struct ibv_qp_init_attr_ex *a)
{
	struct rdma_cm_id *c = &id->id;
	if (a->send_cq && a->recv_cq)
		return 0;
	if (!a->send_cq) {
		c->send_cq_channel = ibv_create_comp_channel(c->verbs);
		c->send_cq = c->send_cq_channel
				     ? ibv_create_cq(c->verbs, a->cap.max_send_wr ? (int)a->cap.max_send_wr : 1, c,
						     c->send_cq_channel, 0)
				     : NULL;
		if (!c->send_cq)
			goto fail;
		a->send_cq = c->send_cq;
		id->own_cqs = 1;
	}
	if (!a->recv_cq) {
		c->recv_cq_channel = ibv_create_comp_channel(c->verbs);
		c->recv_cq = c->recv_cq_channel
				     ? ibv_create_cq(c->verbs, a->cap.max_recv_wr ? (int)a->cap.max_recv_wr : 1, c,
						     c->recv_cq_channel, 0)
				     : NULL;
		if (!c->recv_cq)
			goto fail;
		a->recv_cq = c->recv_cq;
		id->own_cqs = 1;
	}
	return 0;
fail:
	id->own_cqs = 1;
	free_own_cqs(id);
	return errno ? errno : ENOMEM;
}

/* init_qp moves a new QP as librdmacm does: a connected one to INIT, a
 * datagram one through to RTS with rdma_cm's Q_Key. */
static int init_qp(struct cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT};
	int mask;
	if (rdma_init_qp_attr(&id->id, &a, &mask))
		return errno;
	int r = ibv_modify_qp(qp, &a, mask);
	if (r || qp->qp_type != IBV_QPT_UD)
		return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return r;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *attr)
{
	if (!live_id(cid) || !attr || !cid->verbs)
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (cid->qp)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = default_pd(id);
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (!attr->pd || attr->pd->context != cid->verbs)
		return fail(EINVAL);
	if (!attr->qp_type)
		attr->qp_type = cid->qp_type;
	int r = own_cqs(id, attr);
	if (r)
		return fail(r);
	struct ibv_qp *qp = ibv_create_qp_ex(cid->verbs, attr);
	if (!qp) {
		r = errno;
		free_own_cqs(id);
		return fail(r);
	}
	if ((r = init_qp(id, qp))) {
		ibv_destroy_qp(qp);
		free_own_cqs(id);
		return fail(r);
	}
	cid->qp = qp;
	cid->pd = attr->pd;
	return 0;
}

EXPORT int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!cid || !qp_init_attr)
		return fail(EINVAL);
	struct ibv_qp_init_attr_ex a = {.qp_context = qp_init_attr->qp_context,
					.send_cq = qp_init_attr->send_cq,
					.recv_cq = qp_init_attr->recv_cq,
					.srq = qp_init_attr->srq,
					.cap = qp_init_attr->cap,
					.qp_type = qp_init_attr->qp_type,
					.sq_sig_all = qp_init_attr->sq_sig_all,
					.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0,
					.pd = pd};
	if (rdma_create_qp_ex(cid, &a))
		return -1;
	qp_init_attr->cap = a.cap;
	qp_init_attr->send_cq = a.send_cq;
	qp_init_attr->recv_cq = a.recv_cq;
	return 0;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	if (!live_id(cid) || !cid->qp)
		return;
	ibv_destroy_qp(cid->qp);
	cid->qp = NULL;
	free_own_cqs(to_id(cid));
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *cid, struct ibv_srq_init_attr_ex *attr)
{
	if (!live_id(cid) || !attr || !cid->verbs)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = default_pd(to_id(cid));
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	struct ibv_srq *srq = ibv_create_srq_ex(cid->verbs, attr);
	if (!srq)
		return -1;
	cid->srq = srq;
	cid->pd = attr->pd;
	return 0;
}

EXPORT int rdma_create_srq(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!cid || !attr)
		return fail(EINVAL);
	struct ibv_srq_init_attr_ex a = {.srq_context = attr->srq_context,
					 .attr = attr->attr,
					 .comp_mask = pd ? IBV_SRQ_INIT_ATTR_PD : 0,
					 .pd = pd};
	if (rdma_create_srq_ex(cid, &a))
		return -1;
	attr->attr = a.attr;
	return 0;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *cid)
{
	if (!cid || !cid->srq)
		return;
	ibv_destroy_srq(cid->srq);
	cid->srq = NULL;
}

/* Options */

EXPORT int rdma_set_option(struct rdma_cm_id *cid, int level, int optname, void *optval, size_t optlen)
{
	if (!live_id(cid) || (!optval && optlen))
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			id->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			return 0; /* ports are reused once free; a wildcard is of one family */
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t) || *(uint8_t *)optval > 31)
				return fail(EINVAL);
			id->ack_timeout = *(uint8_t *)optval;
			return 0;
		}
	} else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		return 0; /* RoCE's path is the route the device resolved */
	}
	return fail(ENOSYS); /* as the kernel answers an option it does not know */
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : fail(EINVAL);
}

EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return fail(EOPNOTSUPP);
}

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return fail(EOPNOTSUPP);
}

/* Multicast: not in the engine yet. */

/* Multicast: the device answers a join with MULTICAST_JOIN at once (no
 * SA on RoCE), and the id's QP is attached when the program reads it
 * (mc_event), as librdmacm attaches it. */

static int join(struct rdma_cm_id *cid, struct sockaddr *addr, uint16_t flags, void *context)
{
	int n = sockaddr_len(addr);
	if (!live_id(cid) || !n)
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	if (!id->cd)
		return fail(EINVAL); /* bind or resolve it first */
	struct cm_mc *mc = calloc(1, sizeof *mc);
	if (!mc)
		return fail(ENOMEM);
	memcpy(&mc->addr, addr, n);
	mc->context = context;
	mc->flags = flags;
	pthread_mutex_lock(&cm_lock);
	mc->next = id->mcs;
	id->mcs = mc;
	struct goroce_cm_join_mcast_req req = {.id = id->h, .join_flags = flags, .uid = (uintptr_t)mc};
	put_sockaddr(req.addr, addr);
	int r = gr_call(cd_ctx(id->cd), GOROCE_OP_CM_JOIN_MCAST, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (r) {
		id->mcs = mc->next;
		free(mc);
	}
	pthread_mutex_unlock(&cm_lock);
	if (r)
		return fail(r);
	return id->sync ? wait_sync(id, RDMA_CM_EVENT_MULTICAST_JOIN) : 0;
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!attr)
		return fail(EINVAL);
	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return fail(EOPNOTSUPP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return fail(EINVAL);
	return join(id, attr->addr, (uint16_t)attr->join_flags, context);
}

EXPORT int rdma_leave_multicast(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	int n = sockaddr_len(addr);
	if (!live_id(cid) || !n)
		return fail(EINVAL);
	struct cm_id *id = to_id(cid);
	pthread_mutex_lock(&cm_lock);
	struct cm_mc **p = &id->mcs;
	while (*p && memcmp(&(*p)->addr, addr, n))
		p = &(*p)->next;
	struct cm_mc *mc = *p;
	if (mc)
		*p = mc->next;
	pthread_mutex_unlock(&cm_lock);
	if (!mc)
		return fail(EADDRNOTAVAIL);
	if (cid->qp && mc->attached)
		ibv_detach_mcast(cid->qp, &mc->mgid, 0);
	if (id->cd) {
		struct goroce_cm_leave_mcast_req req = {.id = id->h, .uid = (uintptr_t)mc};
		gr_call(cd_ctx(id->cd), GOROCE_OP_CM_LEAVE_MCAST, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	}
	free(mc);
	return 0;
}

/* Devices */

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	if (num_devices)
		*num_devices = 0;
	if (cm_init())
		return NULL;
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	struct ibv_context **out = calloc(n + 1, sizeof *out);
	int k = 0;
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; out && i < n; i++) {
		struct cm_dev *cd = cm_dev_of(container_of(list[i], struct gr_device, ibdev));
		if (cd)
			out[k++] = cd->ctx;
	}
	pthread_mutex_unlock(&cm_lock);
	ibv_free_device_list(list);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	if (num_devices)
		*num_devices = k;
	return out;
}

EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

/* rdma_getaddrinfo: names resolved as getaddrinfo resolves them, with
 * rdma_cm's port space and QP type. */

static struct rdma_addrinfo *rai_of(const struct addrinfo *ai, const struct rdma_addrinfo *hints, int passive)
{
	struct rdma_addrinfo *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
				 : r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP
							      : RDMA_PS_TCP;
	struct sockaddr *sa = malloc(ai->ai_addrlen);
	if (!sa) {
		free(r);
		return NULL;
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	if (passive) {
		r->ai_src_addr = sa;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = sa;
		r->ai_dst_len = ai->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
	}
	if (ai->ai_canonname)
		r->ai_dst_canonname = strdup(ai->ai_canonname);
	return r;
}

EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	if (!res || (!node && !service))
		return EAI_NONAME;
	if (cm_init())
		return -1;
	struct addrinfo h = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int passive = hints && hints->ai_flags & RAI_PASSIVE;
	if (hints) {
		h.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_flags & RAI_PASSIVE)
			h.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_FAMILY)
			h.ai_family = hints->ai_family;
		if (hints->ai_flags & ~(RAI_PASSIVE | RAI_NUMERICHOST | RAI_NOROUTE | RAI_FAMILY))
			return EAI_BADFLAGS;
	}
	int r = getaddrinfo(node, service, &h, &ai);
	if (r)
		return r;
	struct rdma_addrinfo *head = NULL, **tail = &head;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		struct rdma_addrinfo *x = rai_of(a, hints, passive);
		if (!x) {
			rdma_freeaddrinfo(head);
			freeaddrinfo(ai);
			return EAI_MEMORY;
		}
		*tail = x;
		tail = &x->ai_next;
	}
	freeaddrinfo(ai);
	if (!head)
		return EAI_NONAME;
	*res = head;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

/* Endpoints */

EXPORT int rdma_create_ep(struct rdma_cm_id **cid, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	if (!cid || !res)
		return fail(EINVAL);
	struct rdma_cm_id *c;
	if (rdma_create_id(NULL, &c, NULL, (enum rdma_port_space)res->ai_port_space))
		return -1;
	struct cm_id *id = to_id(c);
	int r;
	if (res->ai_flags & RAI_PASSIVE) {
		r = rdma_bind_addr(c, res->ai_src_addr);
		if (!r && qp_init_attr) {
			id->ep_attr = *qp_init_attr;
			id->has_ep_attr = 1;
		}
		c->pd = pd;
	} else {
		r = rdma_resolve_addr(c, res->ai_src_addr, res->ai_dst_addr, 2000);
		if (!r)
			r = rdma_resolve_route(c, 2000);
		if (!r && qp_init_attr)
			r = rdma_create_qp(c, pd, qp_init_attr);
		if (!r && pd)
			c->pd = pd;
	}
	if (r) {
		int e = errno;
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
		return fail(e);
	}
	*cid = c;
	return 0;
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* gr_rs_devices is 0 when there is a device, else -1 with errno ENODEV. */
int gr_rs_devices(void) { return cm_init(); }

/* gr_rs_ctx returns the session of the device an rsocket uses (rsocket.c):
 * the one holding local when it is a specific address, else the one to
 * reach dst from, else the first of local's family; NULL, with errno,
 * when there is none. */
struct gr_context *gr_rs_ctx(const struct sockaddr *local, const struct sockaddr *dst)
{
	if (cm_init())
		return NULL;
	if (!local && !dst) {
		errno = EINVAL;
		return NULL;
	}
	int any = !local;
	if (local && local->sa_family == AF_INET)
		any = ((const struct sockaddr_in *)local)->sin_addr.s_addr == htonl(INADDR_ANY);
	else if (local && local->sa_family == AF_INET6)
		any = IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)local)->sin6_addr);
	pthread_mutex_lock(&cm_lock);
	struct cm_dev *cd = NULL;
	if (!any)
		cd = cm_dev_for(local);
	else if (dst)
		cd = cm_dev_route(dst);
	else
		cd = cm_dev_route(local);
	pthread_mutex_unlock(&cm_lock);
	if (!cd) {
		errno = any ? ENODEV : EADDRNOTAVAIL;
		return NULL;
	}
	return cd_ctx(cd);
}
