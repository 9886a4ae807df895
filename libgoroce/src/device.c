/*
 * Devices: the list, open and close, the control socket, and the queries
 * answered from what the device said when the context opened.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "goroce.h"

#undef ibv_query_port

atomic_uint gr_fork_gen;

static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gr_device *devs; /* every device ever found: programs keep their pointers */
static struct gr_context *ctxs; /* every open context, under devs_lock */

/* gr_ctx_forked runs in a forked child: it closes the child's copies of
 * the contexts' own descriptors, so that a session ends when its process
 * does. The descriptors the program knows (async_fd, channels) stay.
 * gr_fork_prepare took devs_lock; this releases it. */
void gr_ctx_forked(void)
{
	for (struct gr_context *c = ctxs; c; c = c->next) {
		close(c->sock);
		close(c->doorbell);
		close(c->ringfd);
	}
	ctxs = NULL;
	pthread_mutex_unlock(&devs_lock);
}

void gr_fork_prepare(void) { pthread_mutex_lock(&devs_lock); }
void gr_fork_parent(void) { pthread_mutex_unlock(&devs_lock); }

void gr_debug(const char *fmt, ...)
{
	static int on = -1;
	if (on < 0)
		on = getenv("GOROCE_DEBUG") != NULL;
	if (!on)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "libgoroce: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* The directory of the devices' sockets, as uverbs.SocketDir has it. */
static void socket_dir(char *buf, size_t n)
{
	const char *d = getenv("GOROCE_DIR");
	if (d && *d)
		snprintf(buf, n, "%s", d);
	else
		snprintf(buf, n, "/tmp/goroce-%u", (unsigned)getuid());
}

/* A directory is safe when it is this user's (or root's) and nobody else
 * may write to it. */
static int safe_dir(const char *dir)
{
	struct stat st;
	if (lstat(dir, &st) || !S_ISDIR(st.st_mode))
		return 0;
	if (st.st_uid != getuid() && st.st_uid != 0) {
		gr_debug("%s belongs to uid %u: not using it", dir, (unsigned)st.st_uid);
		return 0;
	}
	if (st.st_mode & 022) {
		gr_debug("others may write to %s: not using it", dir);
		return 0;
	}
	return 1;
}

static int connect_sock(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* One request and its reply on fd; the caller keeps others off fd. It
 * returns the reply's errno, or EIO when the device is gone. */
static int call_fd(int fd, uint32_t op, const void *req, size_t req_len, void *rep, size_t rep_len, const int *fds,
		   int nfds, int *rfd)
{
	uint8_t buf[GOROCE_MAX_MESSAGE];
	struct goroce_header h = {.op = op, .size = (uint32_t)req_len};
	if (req_len + sizeof h > sizeof buf)
		return EINVAL;
	memcpy(buf, &h, sizeof h);
	if (req_len)
		memcpy(buf + sizeof h, req, req_len);
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof h + req_len};
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cb;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds) {
		memset(&cb, 0, sizeof cb);
		m.msg_control = cb.b;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return EIO;
	iov.iov_len = sizeof buf;
	memset(&m, 0, sizeof m);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cb.b;
	m.msg_controllen = sizeof cb.b;
	do
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < (ssize_t)sizeof(struct goroce_reply))
		return EIO;
	int got = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < nf; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
			if (got < 0 && rfd)
				got = f;
			else
				close(f);
		}
	}
	struct goroce_reply r;
	memcpy(&r, buf, sizeof r);
	if (r.err) {
		if (got >= 0)
			close(got);
		return r.err;
	}
	if (r.size != rep_len || (size_t)n != sizeof r + rep_len) {
		if (got >= 0)
			close(got);
		return EIO;
	}
	if (rep_len)
		memcpy(rep, buf + sizeof r, rep_len);
	if (rfd)
		*rfd = got;
	return 0;
}

int gr_call(struct gr_context *ctx, uint32_t op, const void *req, size_t req_len, void *rep, size_t rep_len,
	    const int *fds, int nfds, int *rfd)
{
	if (gr_dead(ctx))
		return EIO;
	/* A signal handler of the program's that calls a verb must not find
	 * this thread in the middle of a round trip: hold signals off. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_mutex_lock(&ctx->call_lock);
	int r = call_fd(ctx->sock, op, req, req_len, rep, rep_len, fds, nfds, rfd);
	if (r == EIO)
		atomic_store(&ctx->gone, 1); /* the session's socket failed: the device went */
	pthread_mutex_unlock(&ctx->call_lock);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

/* gr_gone reports whether ctx's device closed its session (it stopped,
 * or its process died), looking at the session's socket without taking
 * anything from it. */
int gr_gone(struct gr_context *ctx)
{
	if (atomic_load(&ctx->gone))
		return 1;
	struct pollfd p = {.fd = ctx->sock, .events = POLLRDHUP};
	if (poll(&p, 1, 0) == 1 && p.revents & (POLLHUP | POLLRDHUP | POLLERR)) {
		atomic_store(&ctx->gone, 1);
		return 1;
	}
	return 0;
}

/* Device list. */

static struct gr_device *find_or_add(const char *sock, const struct goroce_hello_reply *info)
{
	for (struct gr_device *d = devs; d; d = d->next)
		if (!strcmp(d->sock, sock)) {
			d->info = *info;
			return d;
		}
	struct gr_device *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	snprintf(d->sock, sizeof d->sock, "%s", sock);
	d->info = *info;
	d->ibdev.node_type = IBV_NODE_CA;
	d->ibdev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->ibdev.name, sizeof d->ibdev.name, "%.63s", (const char *)info->device.name);
	snprintf(d->ibdev.dev_name, sizeof d->ibdev.dev_name, "uverbs_%.50s", d->ibdev.name);
	snprintf(d->ibdev.dev_path, sizeof d->ibdev.dev_path, "/sys/class/infiniband_verbs/%s", d->ibdev.dev_name);
	snprintf(d->ibdev.ibdev_path, sizeof d->ibdev.ibdev_path, "/sys/class/infiniband/%s", d->ibdev.name);
	d->next = devs;
	devs = d;
	return d;
}

static int cmp_dev(const void *a, const void *b)
{
	const struct gr_device *x = *(const struct gr_device **)a, *y = *(const struct gr_device **)b;
	return strcmp(x->ibdev.name, y->ibdev.name);
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	char dir[PATH_MAX];
	socket_dir(dir, sizeof dir);
	struct gr_device *found[256];
	int n = 0;
	gr_mem_init();
	pthread_mutex_lock(&devs_lock);
	DIR *dp = safe_dir(dir) ? opendir(dir) : NULL;
	struct dirent *e;
	while (dp && (e = readdir(dp)) && n < 256) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".sock"))
			continue;
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof(((struct gr_device *)0)->sock))
			continue; /* longer than a socket address holds */
		int fd = connect_sock(path);
		if (fd < 0) {
			gr_debug("%s: no device answers", path);
			continue;
		}
		struct goroce_hello_reply info;
		int r = call_fd(fd, GOROCE_OP_INFO, NULL, 0, &info, sizeof info, NULL, 0, NULL);
		close(fd);
		if (r) {
			gr_debug("%s: %s", path, strerror(r));
			continue;
		}
		struct gr_device *d = find_or_add(path, &info);
		if (d)
			found[n++] = d;
	}
	if (dp)
		closedir(dp);
	qsort(found, n, sizeof found[0], cmp_dev);
	struct ibv_device **list = calloc(n + 1, sizeof *list);
	if (list)
		for (int i = 0; i < n; i++) {
			found[i]->index = i;
			list[i] = &found[i]->ibdev;
		}
	pthread_mutex_unlock(&devs_lock);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (num)
		*num = n;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device ? device->name : NULL; }

static struct gr_device *to_dev(struct ibv_device *d) { return container_of(d, struct gr_device, ibdev); }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device)
		return 0;
	return (__be64)to_dev(device)->info.device.node_guid;
}

EXPORT int ibv_get_device_index(struct ibv_device *device) { return device ? to_dev(device)->index : -1; }

/* Open and close. */

static void ctx_fill_device(struct gr_context *ctx)
{
	ctx->vctx.context.device = &ctx->dev->ibdev;
	ctx->vctx.context.cmd_fd = ctx->sock;
	ctx->vctx.context.num_comp_vectors = 1;
	pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
	ctx->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof ctx->vctx;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct gr_device *dev = to_dev(device);
	struct gr_context *ctx = calloc(1, sizeof *ctx);
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	int pipefd[2] = {-1, -1};
	ctx->sock = ctx->doorbell = ctx->ringfd = -1;
	ctx->vctx.context.async_fd = -1;
	ctx->dev = dev;
	ctx->gen = atomic_load(&gr_fork_gen);
	pthread_mutex_init(&ctx->call_lock, NULL);
	pthread_mutex_init(&ctx->tab_lock, NULL);
	int err = ENODEV;
	int mem = gr_mem_fd();
	if (mem < 0) {
		err = errno;
		goto fail;
	}
	ctx->sock = connect_sock(dev->sock);
	if (ctx->sock < 0)
		goto fail;
	ctx->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ctx->doorbell < 0 || pipe2(pipefd, O_CLOEXEC)) {
		err = errno;
		goto fail;
	}
	struct goroce_hello_req req = {.version = GOROCE_VERSION, .pid = (uint32_t)getpid()};
	int fds[3] = {mem, ctx->doorbell, pipefd[1]};
	err = call_fd(ctx->sock, GOROCE_OP_HELLO, &req, sizeof req, &ctx->info, sizeof ctx->info, fds, 3, &ctx->ringfd);
	close(pipefd[1]);
	pipefd[1] = -1;
	if (err)
		goto fail;
	if (ctx->ringfd < 0) {
		err = EIO;
		goto fail;
	}
	ctx->page = mmap(NULL, GOROCE_SESSION_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, ctx->ringfd, 0);
	if (ctx->page == MAP_FAILED) {
		ctx->page = NULL;
		err = errno;
		goto fail;
	}
	ctx->vctx.context.async_fd = pipefd[0];
	ctx_fill_device(ctx);
	gr_set_ops(ctx);
	pthread_mutex_lock(&devs_lock);
	ctx->next = ctxs;
	if (ctxs)
		ctxs->prev = ctx;
	ctxs = ctx;
	pthread_mutex_unlock(&devs_lock);
	gr_debug("opened %s (%s)", device->name, dev->sock);
	return &ctx->vctx.context;
fail:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (ctx->sock >= 0)
		close(ctx->sock);
	if (ctx->doorbell >= 0)
		close(ctx->doorbell);
	if (ctx->ringfd >= 0)
		close(ctx->ringfd);
	free(ctx);
	gr_debug("open %s: %s", device->name, strerror(err));
	errno = err;
	return NULL;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	if (!context)
		return EINVAL;
	struct gr_context *ctx = to_ctx(context);
	/* Closing the socket ends the session: the device frees what is
	 * left, as the kernel does when a device file closes. */
	if (!gr_forked(ctx)) {
		pthread_mutex_lock(&devs_lock);
		if (ctx->prev)
			ctx->prev->next = ctx->next;
		else
			ctxs = ctx->next;
		if (ctx->next)
			ctx->next->prev = ctx->prev;
		pthread_mutex_unlock(&devs_lock);
		close(ctx->sock);
		close(ctx->doorbell);
		close(ctx->ringfd);
		close(context->async_fd);
	}
	if (ctx->page)
		munmap(ctx->page, GOROCE_SESSION_PAGE_SIZE);
	free(ctx->tab);
	free(ctx);
	return 0;
}

/* The doorbell: set work queue d's bit and wake the device if it sleeps.
 * When the bit is set already, whoever set it has announced it. */
void gr_doorbell(struct gr_context *ctx, uint32_t d)
{
	struct goroce_session_page *p = ctx->page;
	uint64_t bit = 1ULL << (d % 64);
	if (atomic_fetch_or((_Atomic uint64_t *)&p->dirty[d / 64], bit) & bit)
		return;
	atomic_fetch_or((_Atomic uint64_t *)&p->summary[d / 4096], 1ULL << (d / 64 % 64));
	if (atomic_load((_Atomic uint32_t *)&p->sleeping)) {
		uint64_t one = 1;
		if (write(ctx->doorbell, &one, sizeof one) < 0 && errno != EAGAIN)
			gr_debug("doorbell: %s", strerror(errno));
	}
}

int gr_map_ring(struct gr_context *ctx, const struct goroce_ring_reply *rr, struct gr_ring *r)
{
	memset(r, 0, sizeof *r);
	if (!rr->entries)
		return 0;
	if (rr->size < GOROCE_RING_HEADER_SIZE + (uint64_t)rr->entries * rr->stride)
		return EIO;
	void *m = mmap(NULL, rr->size, PROT_READ | PROT_WRITE, MAP_SHARED, ctx->ringfd, (off_t)rr->offset);
	if (m == MAP_FAILED)
		return errno;
	r->map = m;
	r->map_len = rr->size;
	r->hdr = m;
	r->slots = (uint8_t *)m + GOROCE_RING_HEADER_SIZE;
	r->entries = rr->entries;
	r->stride = rr->stride;
	return 0;
}

void gr_unmap_ring(struct gr_ring *r)
{
	if (r->map)
		munmap(r->map, r->map_len);
	memset(r, 0, sizeof *r);
}

/* The handle table: open addressing on the handle, for the completions'
 * and events' way back from a handle to its object. */

static size_t slot_of(uint32_t h, size_t len) { return (h * 2654435761u) & (len - 1); }

static int tab_grow(struct gr_context *ctx)
{
	size_t len = ctx->tab_len ? 2 * ctx->tab_len : 64;
	struct gr_handle *t = calloc(len, sizeof *t);
	if (!t)
		return ENOMEM;
	for (size_t i = 0; i < ctx->tab_len; i++) {
		struct gr_handle *e = &ctx->tab[i];
		if (!e->h || !e->obj)
			continue;
		size_t j = slot_of(e->h, len);
		while (t[j].h)
			j = (j + 1) & (len - 1);
		t[j] = *e;
	}
	free(ctx->tab);
	ctx->tab = t;
	ctx->tab_len = len;
	ctx->tab_used = 0;
	for (size_t i = 0; i < len; i++)
		ctx->tab_used += t[i].h != 0;
	return 0;
}

int gr_tab_add(struct gr_context *ctx, uint32_t h, uint32_t kind, void *obj)
{
	pthread_mutex_lock(&ctx->tab_lock);
	if ((ctx->tab_used + 1) * 2 > ctx->tab_len && tab_grow(ctx)) {
		pthread_mutex_unlock(&ctx->tab_lock);
		return ENOMEM;
	}
	size_t j = slot_of(h, ctx->tab_len);
	while (ctx->tab[j].h)
		j = (j + 1) & (ctx->tab_len - 1);
	ctx->tab[j] = (struct gr_handle){.h = h, .kind = kind, .obj = obj};
	ctx->tab_used++;
	pthread_mutex_unlock(&ctx->tab_lock);
	return 0;
}

void *gr_tab_get(struct gr_context *ctx, uint32_t h, uint32_t kind)
{
	void *obj = NULL;
	pthread_mutex_lock(&ctx->tab_lock);
	if (ctx->tab_len && h)
		for (size_t j = slot_of(h, ctx->tab_len); ctx->tab[j].h; j = (j + 1) & (ctx->tab_len - 1))
			if (ctx->tab[j].h == h) {
				if (ctx->tab[j].kind == kind)
					obj = ctx->tab[j].obj;
				break;
			}
	pthread_mutex_unlock(&ctx->tab_lock);
	return obj;
}

/* gr_tab_del leaves a tombstone (obj NULL), which the next growth drops. */
void gr_tab_del(struct gr_context *ctx, uint32_t h)
{
	pthread_mutex_lock(&ctx->tab_lock);
	if (ctx->tab_len && h)
		for (size_t j = slot_of(h, ctx->tab_len); ctx->tab[j].h; j = (j + 1) & (ctx->tab_len - 1))
			if (ctx->tab[j].h == h) {
				ctx->tab[j].obj = NULL;
				ctx->tab[j].kind = 0;
				break;
			}
	pthread_mutex_unlock(&ctx->tab_lock);
}

/* Queries. */

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
	if (!context || !a)
		return EINVAL;
	const struct goroce_device_attr *d = &to_ctx(context)->info.device;
	memset(a, 0, sizeof *a);
	snprintf(a->fw_ver, sizeof a->fw_ver, "%.63s", (const char *)d->fw_ver);
	a->node_guid = d->node_guid;
	a->sys_image_guid = d->sys_image_guid;
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = d->page_size_cap;
	a->vendor_id = d->vendor_id;
	a->vendor_part_id = d->vendor_part_id;
	a->hw_ver = d->hw_ver;
	a->max_qp = d->max_qp;
	a->max_qp_wr = d->max_qp_wr;
	a->device_cap_flags = (unsigned)d->cap_flags;
	a->max_sge = d->max_sge;
	a->max_sge_rd = d->max_sge_rd;
	a->max_cq = d->max_cq;
	a->max_cqe = d->max_cqe;
	a->max_mr = d->max_mr;
	a->max_pd = d->max_pd;
	a->max_qp_rd_atom = d->max_qp_rd_atom;
	a->max_res_rd_atom = d->max_res_rd_atom;
	a->max_qp_init_rd_atom = d->max_qp_init_rd;
	a->atomic_cap = (enum ibv_atomic_cap)d->atomic_cap;
	a->max_mw = d->max_mw;
	a->max_ah = d->max_ah;
	a->max_srq = d->max_srq;
	a->max_srq_wr = d->max_srq_wr;
	a->max_srq_sge = d->max_srq_sge;
	a->max_pkeys = d->max_pkeys;
	a->local_ca_ack_delay = d->local_ack_dly;
	a->phys_port_cnt = d->port_cnt;
	a->max_mcast_grp = d->max_mcast_grp;
	a->max_mcast_qp_attach = d->max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = d->max_total_mcast_qp_attach;
	return 0;
}

int gr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	if (!context || !attr || attr_size < sizeof attr->orig_attr)
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	int r = ibv_query_device(context, &a.orig_attr);
	if (r)
		return r;
	a.device_cap_flags_ex = to_ctx(context)->info.device.cap_flags;
	a.phys_port_cnt_ex = 1;
	memcpy(attr, &a, attr_size < sizeof a ? attr_size : sizeof a);
	if (attr_size > sizeof a)
		memset((char *)attr + sizeof a, 0, attr_size - sizeof a);
	return 0;
}

int gr_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr, size_t len)
{
	if (!context || !attr)
		return EINVAL;
	if (port_num != 1)
		return EINVAL;
	struct gr_context *ctx = to_ctx(context);
	struct goroce_query_port_req req = {.port = 1};
	struct goroce_port_attr p;
	int r = gr_call(ctx, GOROCE_OP_QUERY_PORT, &req, sizeof req, &p, sizeof p, NULL, 0, NULL);
	if (r)
		return r;
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	a.state = (enum ibv_port_state)p.state;
	a.max_mtu = (enum ibv_mtu)p.max_mtu;
	a.active_mtu = (enum ibv_mtu)p.active_mtu;
	a.gid_tbl_len = GOROCE_MAX_GIDS;
	a.port_cap_flags = p.cap_flags;
	a.max_msg_sz = p.max_msg_sz;
	a.pkey_tbl_len = p.pkey_tbl_len;
	a.active_width = p.active_width;
	a.active_speed = p.active_speed;
	a.phys_state = p.phys_state;
	a.link_layer = p.link_layer;
	a.max_vl_num = p.max_vl_num;
	a.port_cap_flags2 = p.cap_flags2;
	memcpy(attr, &a, len < sizeof a ? len : sizeof a);
	return 0;
}

/* ibv_query_port's symbol, for programs built before the macro: their
 * struct ends before port_cap_flags2. */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	return gr_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
			     offsetof(struct ibv_port_attr, port_cap_flags2));
}

static int gid_entry(struct ibv_context *context, uint32_t port_num, uint32_t index, struct ibv_gid_entry *e)
{
	if (!context || port_num != 1 || index >= GOROCE_MAX_GIDS)
		return EINVAL;
	const struct goroce_hello_reply *info = &to_ctx(context)->info;
	memset(e, 0, sizeof *e);
	e->gid_index = index;
	e->port_num = port_num;
	if (index >= info->num_gids)
		return ENODATA;
	memcpy(e->gid.raw, info->gid[index].gid, 16);
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = info->gid[index].ifindex;
	return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	struct ibv_gid_entry e;
	if (!gid || index < 0)
		return -1;
	int r = gid_entry(context, port_num, (uint32_t)index, &e);
	if (r == ENODATA) {
		memset(gid, 0, sizeof *gid); /* an empty entry of the table */
		return 0;
	}
	if (r)
		return -1;
	*gid = e.gid;
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (!entry || flags || entry_size < sizeof *entry)
		return EINVAL;
	return gid_entry(context, port_num, gid_index, entry);
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries,
				    uint32_t flags, size_t entry_size)
{
	if (!context || (!entries && max_entries) || flags || entry_size < sizeof *entries)
		return -EINVAL;
	const struct goroce_hello_reply *info = &to_ctx(context)->info;
	if (max_entries < info->num_gids)
		return -EINVAL;
	for (uint32_t i = 0; i < info->num_gids; i++) {
		struct ibv_gid_entry *e = (struct ibv_gid_entry *)((char *)entries + i * entry_size);
		gid_entry(context, 1, i, e);
	}
	return info->num_gids;
}

/* ibv_query_gid_type is libibverbs' private API (ibv_devinfo uses it):
 * type is an enum ibv_gid_type_sysfs, 1 for RoCE v2. */
EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, unsigned int *type)
{
	struct ibv_gid_entry e;
	if (!type)
		return -1;
	int r = gid_entry(context, port_num, index, &e);
	if (r == ENODATA) {
		*type = 0;
		return 0;
	}
	if (r)
		return -1;
	*type = 1; /* IBV_GID_TYPE_SYSFS_ROCE_V2 */
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (!context || port_num != 1)
		return -EINVAL;
	return be16toh(pkey) == 0xffff ? 0 : -ENOENT;
}

/* sysfs: what libibverbs reads from the kernel's files, for a goroce
 * device answered here; any other path is read from the file. */
static int virtual_sysfs(const char *dir, const char *file, char *buf, size_t size)
{
	const char *prefix = "/sys/class/infiniband/";
	if (strncmp(dir, prefix, strlen(prefix)))
		return -2;
	const char *name = dir + strlen(prefix);
	struct gr_device *d;
	pthread_mutex_lock(&devs_lock);
	for (d = devs; d; d = d->next)
		if (!strcmp(d->ibdev.name, name))
			break;
	pthread_mutex_unlock(&devs_lock);
	if (!d)
		return -2;
	const uint8_t *g = (const uint8_t *)&d->info.device.node_guid;
	char v[128];
	if (!strcmp(file, "board_id"))
		snprintf(v, sizeof v, "goroce soft RoCE\n");
	else if (!strcmp(file, "node_type"))
		snprintf(v, sizeof v, "1: CA\n");
	else if (!strcmp(file, "fw_ver"))
		snprintf(v, sizeof v, "%.63s\n", (const char *)d->info.device.fw_ver);
	else if (!strcmp(file, "node_guid"))
		snprintf(v, sizeof v, "%02x%02x:%02x%02x:%02x%02x:%02x%02x\n", g[0], g[1], g[2], g[3], g[4], g[5], g[6],
			 g[7]);
	else if (!strcmp(file, "hw_rev"))
		snprintf(v, sizeof v, "%u\n", d->info.device.hw_ver);
	else if (!strcmp(file, "hca_type"))
		snprintf(v, sizeof v, "goroce\n");
	else
		return -1;
	size_t n = strlen(v);
	if (n > size)
		n = size;
	memcpy(buf, v, n);
	if (n < size)
		buf[n] = 0;
	return (int)n;
}

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	if (!dir || !file || !buf)
		return -1;
	int v = virtual_sysfs(dir, file, buf, size);
	if (v != -2)
		return v;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n > 0 && (size_t)n < size)
		buf[n] = 0;
	return (int)n;
}

EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct ibv_device *dev, const char *fnfmt, ...)
{
	if (!dev || !fnfmt)
		return -1;
	char file[PATH_MAX];
	va_list ap;
	va_start(ap, fnfmt);
	vsnprintf(file, sizeof file, fnfmt, ap);
	va_end(ap);
	return ibv_read_sysfs_file(dev->ibdev_path, file, buf, size);
}

EXPORT int ibv_get_sysfs_path(char *buf, size_t size)
{
	if (!buf || size < 5)
		return -1;
	snprintf(buf, size, "/sys");
	return 0;
}
