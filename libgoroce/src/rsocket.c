/* librdmacm's rsocket API on the goroce device.
 *
 * An rsocket here is one end of a UNIX stream socket pair: a real
 * descriptor, which the program reads, writes, polls and selects as it
 * would librdmacm's rsocket. The other end goes to the device with
 * rconnect or raccept, and the device carries the bytes between it and
 * an rsocket connection of its own, which speaks librdmacm's rsocket
 * protocol on the wire (package rsocket; uverbs/abi/rsocket.go has the
 * protocol). A listening rsocket's other end goes to the device with
 * rlisten: the device writes a byte to it for each connection waiting to
 * be accepted, so that poll and select see the listener readable.
 *
 * A datagram rsocket (SOCK_DGRAM) is one end of a UNIX sequenced-packet
 * socket pair: its other end goes to the device when the rsocket is bound
 * (rbind, or its first rsendto or rconnect), and the device carries
 * datagrams between it and a datagram rsocket of its own (librdmacm's UD
 * protocol on the wire). Each message on the pair is a
 * goroce_rs_dgram_header (the datagram's destination or source) and the
 * datagram.
 *
 * riomap shares the buffer's pages with the device, as ibv_reg_mr does, so
 * that the peer's riowrites land in the program's memory; riowrite copies
 * its bytes into a buffer of the library's, shared likewise, and the
 * device writes them to the peer. Both act after the bytes the program
 * sent before them (the library counts them).
 *
 * What differs from librdmacm: riowrite waits for room in the send queue
 * also on a non-blocking rsocket; a datagram the device cannot send is
 * lost, as one may be on the wire, rather than failing rsendto (but for
 * EMSGSIZE); rconnect
 * returns when the connection is made or has failed, also on a
 * non-blocking rsocket; socket options are taken and, but for the
 * buffer sizes, have no effect. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "goroce.h"

struct gr_context *gr_rs_ctx(const struct sockaddr *local, const struct sockaddr *dst);
int gr_rs_devices(void);

/* rs is what the library knows of an rsocket, by its descriptor. */
struct rs {
	int used;
	int family;
	int dgram;		 /* SOCK_DGRAM */
	uint32_t max;		 /* a bound datagram rsocket's largest datagram */
	int listening;
	uint32_t handle;	 /* a listener's or a connection's, on the device of ctx */
	struct gr_context *ctx;	 /* its device */
	int dev_end;		 /* the pair's other end, until the device has it (-1 after) */
	int bound, connected;
	struct sockaddr_storage local, peer;
	uint64_t sent;		 /* a stream's bytes the program has sent (riomap, riowrite) */
	uint32_t iomap_size;	 /* RDMA_IOMAPSIZE */
	struct rs_map *maps;	 /* riomap's buffers */
	size_t nmaps;
	char *stage;		 /* riowrite's buffer, shared with the device (STAGE bytes) */
};

/* rs_map is a buffer riomap mapped. */
struct rs_map {
	uintptr_t buf;
	size_t len;
	int prot;
};

#define PAGE 4096UL
#define STAGE (256UL << 10)

/* io_share and io_unshare give the device, and take back, the pages of len
 * bytes at buf. */
static int io_share(uintptr_t buf, size_t len)
{
	return gr_mem_share(buf & ~(PAGE - 1), (buf + len + PAGE - 1) & ~(PAGE - 1), 1);
}

static void io_unshare(uintptr_t buf, size_t len) { gr_mem_unshare(buf & ~(PAGE - 1), (buf + len + PAGE - 1) & ~(PAGE - 1)); }


static pthread_mutex_t rs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rs *rs_tab;
static int rs_cap;

static int rs_err(int e)
{
	errno = e;
	return -1;
}

/* rs_get returns the rsocket of descriptor s with rs_lock held, or NULL
 * (lock released, errno EBADF). */
static struct rs *rs_get(int s)
{
	pthread_mutex_lock(&rs_lock);
	if (s < 0 || s >= rs_cap || !rs_tab[s].used) {
		pthread_mutex_unlock(&rs_lock);
		errno = EBADF;
		return NULL;
	}
	return &rs_tab[s];
}

/* rs_new records descriptor s as an rsocket; the caller holds rs_lock. */
static struct rs *rs_new(int s, int family, int dgram)
{
	if (s >= rs_cap) {
		int n = rs_cap ? rs_cap : 64;
		while (n <= s)
			n *= 2;
		struct rs *t = realloc(rs_tab, n * sizeof *t);
		if (!t)
			return NULL;
		memset(t + rs_cap, 0, (n - rs_cap) * sizeof *t);
		rs_tab = t;
		rs_cap = n;
	}
	struct rs *r = &rs_tab[s];
	memset(r, 0, sizeof *r);
	r->used = 1;
	r->family = family;
	r->dgram = dgram;
	r->dev_end = -1;
	return r;
}

static socklen_t addr_len(int family) { return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6); }

static void put_addr(uint8_t out[GOROCE_SOCKADDR_SIZE], const struct sockaddr_storage *ss)
{
	memset(out, 0, GOROCE_SOCKADDR_SIZE);
	memcpy(out, ss, addr_len(ss->ss_family));
}

static void get_addr(struct sockaddr_storage *ss, const uint8_t in[GOROCE_SOCKADDR_SIZE])
{
	memset(ss, 0, sizeof *ss);
	memcpy(ss, in, GOROCE_SOCKADDR_SIZE);
}

/* copy_addr gives the caller's sockaddr buffer the address ss, cut to
 * *len, and *len its length, as the kernel's getsockname does (a NULL
 * buffer of length 0 asks only the length). */
static void copy_addr(struct sockaddr *addr, socklen_t *len, const struct sockaddr_storage *ss)
{
	if (!len)
		return;
	socklen_t n = addr_len(ss->ss_family);
	if (addr && *len)
		memcpy(addr, ss, *len < n ? *len : n);
	*len = n;
}

/* check_addr checks a sockaddr a program passes for family. */
static int check_addr(const struct sockaddr *addr, socklen_t len, int family)
{
	if (!addr)
		return EFAULT;
	if (len < sizeof(sa_family_t) || addr->sa_family != family || len < addr_len(family))
		return addr->sa_family != family ? EAFNOSUPPORT : EINVAL;
	return 0;
}

/* pair makes the two ends of a new rsocket of type (SOCK_STREAM or
 * SOCK_DGRAM). */
static int pair(int type, int sv[2])
{
	if (socketpair(AF_UNIX, (type == SOCK_DGRAM ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0, sv))
		return -1;
	int size = 4 << 20; /* room for a window of rsocket traffic */
	for (int i = 0; i < 2; i++) {
		setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
		setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	}
	return 0;
}

EXPORT int rsocket(int domain, int type, int protocol)
{
	int flags = type & (SOCK_CLOEXEC | SOCK_NONBLOCK);
	type &= ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	if ((domain != AF_INET && domain != AF_INET6) || (type != SOCK_STREAM && type != SOCK_DGRAM) ||
	    (type == SOCK_STREAM && protocol && protocol != IPPROTO_TCP) ||
	    (type == SOCK_DGRAM && protocol && protocol != IPPROTO_UDP))
		return rs_err(ENOTSUP);
	if (gr_rs_devices())
		return -1; /* ENODEV: no device at all, as librdmacm's rsocket with no RDMA device */
	int sv[2];
	if (pair(type, sv))
		return -1;
	if (!(flags & SOCK_CLOEXEC))
		fcntl(sv[0], F_SETFD, 0);
	if (flags & SOCK_NONBLOCK)
		fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	pthread_mutex_lock(&rs_lock);
	struct rs *r = rs_new(sv[0], domain, type == SOCK_DGRAM);
	if (!r) {
		pthread_mutex_unlock(&rs_lock);
		close(sv[0]);
		close(sv[1]);
		return rs_err(ENOMEM);
	}
	r->dev_end = sv[1];
	pthread_mutex_unlock(&rs_lock);
	return sv[0];
}

/* dgram_bind binds datagram rsocket s, whose rs_lock the caller holds
 * (it is released), at local (NULL: any address of its family, port 0,
 * on the device that reaches dst): its pair's other end goes to the
 * device. 0, or -1 with errno. */
static int dgram_bind(int s, const struct sockaddr_storage *local, const struct sockaddr *dst)
{
	struct rs *r = &rs_tab[s];
	if (r->bound || r->dev_end < 0) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(EINVAL);
	}
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	if (local)
		ss = *local;
	else
		ss.ss_family = r->family;
	int dev_end = r->dev_end;
	pthread_mutex_unlock(&rs_lock);
	struct gr_context *ctx = gr_rs_ctx(local ? (struct sockaddr *)&ss : NULL, dst);
	if (!ctx)
		return -1;
	struct goroce_rs_bind_req req;
	put_addr(req.addr, &ss);
	struct goroce_rs_bind_reply rep;
	int e = gr_call(ctx, GOROCE_OP_RS_BIND, &req, sizeof req, &rep, sizeof rep, &dev_end, 1, NULL);
	if (e)
		return rs_err(e);
	if (!(r = rs_get(s)))
		return -1;
	close(r->dev_end);
	r->dev_end = -1;
	r->ctx = ctx;
	r->handle = rep.handle;
	r->max = rep.max;
	get_addr(&r->local, rep.addr);
	r->bound = 1;
	pthread_mutex_unlock(&rs_lock);
	return 0;
}

EXPORT int rbind(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int e = check_addr(addr, addrlen, r->family);
	if (!e && (r->bound || r->listening || r->connected))
		e = EINVAL;
	if (!e && r->dgram) {
		struct sockaddr_storage ss;
		memset(&ss, 0, sizeof ss);
		memcpy(&ss, addr, addr_len(r->family));
		return dgram_bind(s, &ss, NULL);
	}
	if (!e) {
		struct sockaddr_storage ss;
		memset(&ss, 0, sizeof ss);
		memcpy(&ss, addr, addr_len(r->family));
		pthread_mutex_unlock(&rs_lock);
		if (!gr_rs_ctx((struct sockaddr *)&ss, NULL))
			return -1; /* EADDRNOTAVAIL: no device has that address */
		if (!(r = rs_get(s)))
			return -1;
		r->local = ss;
		r->bound = 1;
	}
	pthread_mutex_unlock(&rs_lock);
	return e ? rs_err(e) : 0;
}

EXPORT int rlisten(int s, int backlog)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	if (r->dgram) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(EOPNOTSUPP);
	}
	if (r->listening) {
		pthread_mutex_unlock(&rs_lock);
		return 0;
	}
	if (r->connected || r->dev_end < 0) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(EINVAL);
	}
	if (!r->bound)
		r->local.ss_family = r->family; /* any address, a port the device chooses */
	struct sockaddr_storage local = r->local;
	int dev_end = r->dev_end;
	uint32_t iomap_size = r->iomap_size;
	pthread_mutex_unlock(&rs_lock);
	struct gr_context *ctx = gr_rs_ctx((struct sockaddr *)&local, NULL);
	if (!ctx)
		return -1;
	struct goroce_rs_listen_req req = {.backlog = backlog > 0 ? backlog : 1, .iomap_size = iomap_size};
	put_addr(req.addr, &local);
	struct goroce_rs_listen_reply rep;
	int e = gr_call(ctx, GOROCE_OP_RS_LISTEN, &req, sizeof req, &rep, sizeof rep, &dev_end, 1, NULL);
	if (e)
		return rs_err(e);
	if (!(r = rs_get(s)))
		return -1;
	close(r->dev_end);
	r->dev_end = -1;
	r->listening = 1;
	r->ctx = ctx;
	r->handle = rep.handle;
	get_addr(&r->local, rep.addr);
	r->bound = 1;
	pthread_mutex_unlock(&rs_lock);
	return 0;
}

EXPORT int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	if (!r->listening) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(r->dgram ? EOPNOTSUPP : EINVAL);
	}
	struct gr_context *ctx = r->ctx;
	uint32_t handle = r->handle;
	int family = r->family;
	pthread_mutex_unlock(&rs_lock);
	for (;;) {
		/* A byte from the device for each connection waiting; none
		 * yet: wait, or EAGAIN on a non-blocking listener. */
		char b;
		ssize_t n = read(s, &b, 1);
		if (n == 0)
			return rs_err(EINVAL); /* the device stopped listening */
		if (n < 0)
			return -1;
		int sv[2];
		if (pair(SOCK_STREAM, sv))
			return -1;
		struct goroce_rs_accept_req req = {.handle = handle};
		struct goroce_rs_accept_reply rep;
		int e = gr_call(ctx, GOROCE_OP_RS_ACCEPT, &req, sizeof req, &rep, sizeof rep, &sv[1], 1, NULL);
		close(sv[1]);
		if (e == EAGAIN) {
			close(sv[0]);
			continue;
		}
		if (e) {
			close(sv[0]);
			return rs_err(e);
		}
		pthread_mutex_lock(&rs_lock);
		struct rs *c = rs_new(sv[0], family, 0);
		if (!c) {
			pthread_mutex_unlock(&rs_lock);
			close(sv[0]);
			return rs_err(ENOMEM);
		}
		get_addr(&c->local, rep.local);
		get_addr(&c->peer, rep.peer);
		c->bound = c->connected = 1;
		c->ctx = ctx;
		c->handle = rep.handle;
		if (s < rs_cap && rs_tab[s].used)
			c->iomap_size = rs_tab[s].iomap_size;
		copy_addr(addr, addrlen, &c->peer);
		pthread_mutex_unlock(&rs_lock);
		return sv[0];
	}
}

EXPORT int rconnect(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int e = check_addr(addr, addrlen, r->family);
	if (!e && r->dgram) {
		/* A datagram rsocket's default destination; bound first if it
		 * is not. */
		struct sockaddr_storage dst;
		memset(&dst, 0, sizeof dst);
		memcpy(&dst, addr, addr_len(r->family));
		if (r->bound)
			pthread_mutex_unlock(&rs_lock);
		else if (dgram_bind(s, NULL, (struct sockaddr *)&dst))
			return -1;
		if (!(r = rs_get(s)))
			return -1;
		r->peer = dst;
		r->connected = 1;
		pthread_mutex_unlock(&rs_lock);
		return 0;
	}
	if (!e && r->connected)
		e = EISCONN;
	if (!e && (r->listening || r->dev_end < 0))
		e = EINVAL;
	if (e) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(e);
	}
	struct sockaddr_storage local = r->local, dst;
	int bound = r->bound, dev_end = r->dev_end;
	uint32_t iomap_size = r->iomap_size;
	memset(&dst, 0, sizeof dst);
	memcpy(&dst, addr, addr_len(r->family));
	pthread_mutex_unlock(&rs_lock);
	struct gr_context *ctx = gr_rs_ctx(bound ? (struct sockaddr *)&local : NULL, (struct sockaddr *)&dst);
	if (!ctx)
		return -1;
	struct goroce_rs_connect_req req;
	memset(&req, 0, sizeof req);
	if (bound)
		put_addr(req.src, &local);
	put_addr(req.dst, &dst);
	req.iomap_size = iomap_size;
	if ((e = gr_call(ctx, GOROCE_OP_RS_CONNECT, &req, sizeof req, NULL, 0, &dev_end, 1, NULL)))
		return rs_err(e);
	if (!(r = rs_get(s)))
		return -1;
	close(r->dev_end);
	r->dev_end = -1;
	pthread_mutex_unlock(&rs_lock);
	/* The device's answer comes first on the connection: wait for it,
	 * a non-blocking rsocket too. */
	int fl = fcntl(s, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK))
		fcntl(s, F_SETFL, fl & ~O_NONBLOCK);
	struct goroce_rs_header h;
	size_t got = 0;
	while (got < sizeof h) {
		ssize_t n = read(s, (char *)&h + got, sizeof h - got);
		if (n > 0) {
			got += n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	if (fl >= 0 && (fl & O_NONBLOCK))
		fcntl(s, F_SETFL, fl);
	if (got < sizeof h)
		return rs_err(ECONNREFUSED); /* the device went */
	if (h.error)
		return rs_err(h.error);
	if (!(r = rs_get(s)))
		return -1;
	get_addr(&r->local, h.local);
	get_addr(&r->peer, h.peer);
	r->bound = r->connected = 1;
	r->ctx = ctx;
	r->handle = h.handle;
	pthread_mutex_unlock(&rs_lock);
	return 0;
}

EXPORT int rshutdown(int s, int how)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int ok = r->connected, dgram = r->dgram;
	pthread_mutex_unlock(&rs_lock);
	if (!ok)
		return rs_err(ENOTCONN);
	if (dgram)
		return 0; /* as librdmacm's: nothing to end */
	return shutdown(s, how);
}

EXPORT int rclose(int s)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	if (r->dev_end >= 0)
		close(r->dev_end);
	struct rs_map *maps = r->maps;
	size_t nmaps = r->nmaps;
	char *stage = r->stage;
	memset(r, 0, sizeof *r);
	pthread_mutex_unlock(&rs_lock);
	int ret = close(s); /* the device ends the connection, and its mappings */
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].prot & PROT_WRITE)
			io_unshare(maps[i].buf, maps[i].len);
	free(maps);
	if (stage) {
		io_unshare((uintptr_t)stage, STAGE);
		munmap(stage, STAGE);
	}
	return ret;
}

/* rs_kind is 1 for a stream rsocket, 2 for a datagram one, 0 for a
 * descriptor that is not an rsocket (errno EBADF). */
static int rs_kind(int s)
{
	struct rs *r = rs_get(s);
	if (!r)
		return 0;
	int k = r->dgram ? 2 : 1;
	pthread_mutex_unlock(&rs_lock);
	return k;
}

/* again passes on what a call returned, yielding the processor when it
 * is -1 with EAGAIN: a program that polls with non-blocking calls
 * (udpong's server and rstream -T n do) gives the device the core it
 * needs to make progress each time it finds nothing to do. */
static ssize_t again(ssize_t n)
{
	if (n < 0 && errno == EAGAIN)
		sched_yield(); /* leaves errno alone */
	return n;
}

/* ended is what a read that returned n (0: the end of the peer's bytes)
 * on stream rsocket s gives the program: -1 with ECONNRESET when the
 * peer reset the connection or went, as librdmacm's read does, else n. */
static ssize_t ended(int s, ssize_t n, size_t len)
{
	if (n != 0 || len == 0)
		return again(n);
	struct rs *r = rs_get(s);
	if (!r)
		return n;
	struct gr_context *ctx = r->connected ? r->ctx : NULL;
	struct goroce_rs_status_req req = {.handle = r->handle};
	pthread_mutex_unlock(&rs_lock);
	if (ctx && gr_call(ctx, GOROCE_OP_RS_STATUS, &req, sizeof req, NULL, 0, NULL, 0, NULL) == ECONNRESET)
		return rs_err(ECONNRESET);
	return n;
}

/* dgram_recvmsg reads the next datagram of datagram rsocket s into msg's
 * buffers (cut to their length, MSG_TRUNC in msg_flags) and its source
 * into msg_name. */
static ssize_t dgram_recvmsg(int s, struct msghdr *msg, int flags)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int bound = r->bound;
	pthread_mutex_unlock(&rs_lock);
	if (!msg)
		return rs_err(EFAULT);
	if (!bound)
		return rs_err(EINVAL); /* as librdmacm's: nothing to read before it is bound */
	if (msg->msg_iovlen >= IOV_MAX || (msg->msg_iovlen && !msg->msg_iov))
		return rs_err(msg->msg_iovlen >= IOV_MAX ? EMSGSIZE : EFAULT);
	struct goroce_rs_dgram_header h;
	struct iovec iov[msg->msg_iovlen + 1];
	iov[0] = (struct iovec){.iov_base = &h, .iov_len = sizeof h};
	if (msg->msg_iovlen)
		memcpy(iov + 1, msg->msg_iov, msg->msg_iovlen * sizeof *iov);
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = msg->msg_iovlen + 1};
	ssize_t n = recvmsg(s, &m, flags & (MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL));
	if (again(n) < 0)
		return -1;
	if ((size_t)n < sizeof h)
		return rs_err(ENODEV); /* the device went */
	if (msg->msg_name) {
		struct sockaddr_storage from;
		get_addr(&from, h.addr);
		copy_addr(msg->msg_name, &msg->msg_namelen, &from);
	}
	msg->msg_flags = m.msg_flags;
	return n - sizeof h;
}

/* dgram_sendmsg sends msg's buffers as one datagram from datagram
 * rsocket s to msg_name, or to its rconnect address when msg_name is
 * NULL; an unbound rsocket is bound first. */
static ssize_t dgram_sendmsg(int s, const struct msghdr *msg, int flags)
{
	if (!msg)
		return rs_err(EFAULT);
	if (msg->msg_iovlen >= IOV_MAX || (msg->msg_iovlen && !msg->msg_iov))
		return rs_err(msg->msg_iovlen >= IOV_MAX ? EMSGSIZE : EFAULT);
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	struct sockaddr_storage dst;
	memset(&dst, 0, sizeof dst);
	int e = 0;
	if (msg->msg_name) {
		e = check_addr(msg->msg_name, msg->msg_namelen, r->family);
		if (!e)
			memcpy(&dst, msg->msg_name, addr_len(r->family));
	} else if (r->connected) {
		dst = r->peer;
	} else {
		e = EDESTADDRREQ;
	}
	if (e) {
		pthread_mutex_unlock(&rs_lock);
		return rs_err(e);
	}
	if (!r->bound) {
		if (dgram_bind(s, NULL, (struct sockaddr *)&dst))
			return -1;
		if (!(r = rs_get(s)))
			return -1;
	}
	size_t max = r->max;
	pthread_mutex_unlock(&rs_lock);
	size_t len = 0;
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		len += msg->msg_iov[i].iov_len;
	if (len > max)
		return rs_err(EMSGSIZE);
	struct goroce_rs_dgram_header h;
	memset(&h, 0, sizeof h);
	put_addr(h.addr, &dst);
	struct iovec iov[msg->msg_iovlen + 1];
	iov[0] = (struct iovec){.iov_base = &h, .iov_len = sizeof h};
	if (msg->msg_iovlen)
		memcpy(iov + 1, msg->msg_iov, msg->msg_iovlen * sizeof *iov);
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = msg->msg_iovlen + 1};
	ssize_t n = again(sendmsg(s, &m, (flags & MSG_DONTWAIT) | MSG_NOSIGNAL));
	if (n < 0)
		return errno == EPIPE ? rs_err(ENODEV) : -1; /* EPIPE: the device went */
	return n - sizeof h;
}

EXPORT ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	switch (rs_kind(s)) {
	case 1:
		return ended(s, recvmsg(s, msg, flags), msg && msg->msg_iovlen ? 1 : 0);
	case 2:
		return dgram_recvmsg(s, msg, flags);
	}
	return -1;
}

EXPORT ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	switch (rs_kind(s)) {
	case 1: {
		ssize_t n = ended(s, recv(s, buf, len, flags), len);
		if (n >= 0 && src_addr && addrlen) {
			struct rs *r = rs_get(s);
			if (r) {
				copy_addr(src_addr, addrlen, &r->peer);
				pthread_mutex_unlock(&rs_lock);
			}
		}
		return n;
	}
	case 2: {
		struct iovec v = {.iov_base = buf, .iov_len = len};
		struct msghdr m = {.msg_name = addrlen ? src_addr : NULL, .msg_namelen = addrlen ? *addrlen : 0,
				   .msg_iov = &v, .msg_iovlen = 1};
		ssize_t n = dgram_recvmsg(s, &m, flags);
		if (n >= 0 && addrlen && src_addr)
			*addrlen = m.msg_namelen;
		return n;
	}
	}
	return -1;
}

EXPORT ssize_t rrecv(int s, void *buf, size_t len, int flags) { return rrecvfrom(s, buf, len, flags, NULL, NULL); }

EXPORT ssize_t rread(int s, void *buf, size_t count) { return rrecvfrom(s, buf, count, 0, NULL, NULL); }

EXPORT ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0)
		return rs_err(EINVAL);
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = iovcnt};
	return rrecvmsg(s, &m, 0);
}

/* Sends never raise SIGPIPE: an rsocket whose peer has gone fails with
 * EPIPE, as librdmacm's does. */
EXPORT ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	switch (rs_kind(s)) {
	case 1:
		if (msg && msg->msg_name)
			return rs_err(EISCONN); /* a stream's peer is its own */
		ssize_t n = again(sendmsg(s, msg, flags | MSG_NOSIGNAL));
		if (n > 0) {
			struct rs *r = rs_get(s);
			if (r) {
				r->sent += n;
				pthread_mutex_unlock(&rs_lock);
			}
		}
		return n;
	case 2:
		return dgram_sendmsg(s, msg, flags);
	}
	return -1;
}

EXPORT ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr, socklen_t addrlen)
{
	struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_name = (void *)dest_addr, .msg_namelen = addrlen, .msg_iov = &v, .msg_iovlen = 1};
	if (!dest_addr && addrlen && rs_kind(s) == 1)
		return rs_err(EISCONN);
	return rsendmsg(s, &m, flags);
}

EXPORT ssize_t rsend(int s, const void *buf, size_t len, int flags) { return rsendto(s, buf, len, flags, NULL, 0); }

EXPORT ssize_t rwrite(int s, const void *buf, size_t count) { return rsendto(s, buf, count, 0, NULL, 0); }

EXPORT ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0)
		return rs_err(EINVAL);
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = iovcnt};
	return rsendmsg(s, &m, 0);
}

EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }

EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

EXPORT int rgetpeername(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int e = !r->connected ? ENOTCONN : (!addrlen || (!addr && *addrlen)) ? EFAULT : 0;
	if (!e)
		copy_addr(addr, addrlen, &r->peer);
	pthread_mutex_unlock(&rs_lock);
	return e ? rs_err(e) : 0;
}

EXPORT int rgetsockname(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	int e = (!addrlen || (!addr && *addrlen)) ? EFAULT : 0;
	if (!e) {
		struct sockaddr_storage ss = r->local;
		ss.ss_family = r->family;
		copy_addr(addr, addrlen, &ss);
	}
	pthread_mutex_unlock(&rs_lock);
	return e ? rs_err(e) : 0;
}

EXPORT int rsetsockopt(int s, int level, int optname, const void *optval, socklen_t optlen)
{
	if (!rs_kind(s))
		return -1;
	if (!optval && optlen)
		return rs_err(EFAULT);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_SNDBUF:
		case SO_RCVBUF:
			return setsockopt(s, level, optname, optval, optlen);
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
		case SO_LINGER:
			return 0;
		}
		break;
	case IPPROTO_TCP:
		if (optname == TCP_NODELAY || optname == TCP_MAXSEG)
			return 0;
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			return 0;
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_IOMAPSIZE: {
			if (optlen < sizeof(int))
				return rs_err(EINVAL);
			int v;
			memcpy(&v, optval, sizeof v);
			struct rs *r = rs_get(s);
			if (!r)
				return -1;
			/* As librdmacm's: for a connection it takes before it
			 * connects, for a listener the ones it takes from then
			 * on; on a connection made it changes nothing. */
			r->iomap_size = v < 0 ? 0 : v > 0x7f00 ? 0x7f00 : v;
			struct goroce_rs_option_req req = {.handle = r->handle, .iomap_size = r->iomap_size};
			struct gr_context *ctx = r->listening ? r->ctx : NULL;
			pthread_mutex_unlock(&rs_lock);
			int e = ctx ? gr_call(ctx, GOROCE_OP_RS_OPTION, &req, sizeof req, NULL, 0, NULL, 0, NULL) : 0;
			return e ? rs_err(e) : 0;
		}
		case RDMA_SQSIZE:
		case RDMA_RQSIZE:
		case RDMA_INLINE:
		case RDMA_ROUTE:
			return 0;
		}
		break;
	}
	return rs_err(ENOTSUP);
}

EXPORT int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	if (!rs_kind(s))
		return -1;
	if (!optval || !optlen)
		return rs_err(EFAULT);
	int v = 0;
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_SNDBUF:
		case SO_RCVBUF:
			return getsockopt(s, level, optname, optval, optlen);
		case SO_ERROR:
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			goto put;
		}
		break;
	case IPPROTO_TCP:
		if (optname == TCP_NODELAY) {
			v = 1;
			goto put;
		}
		break;
	}
	return rs_err(ENOTSUP);
put:
	if (*optlen < sizeof v)
		return rs_err(EINVAL);
	memcpy(optval, &v, sizeof v);
	*optlen = sizeof v;
	return 0;
}

EXPORT int rfcntl(int s, int cmd, ... /* arg */)
{
	if (!rs_kind(s))
		return -1;
	switch (cmd) {
	case F_GETFL:
		return fcntl(s, F_GETFL);
	case F_SETFL: {
		va_list ap;
		va_start(ap, cmd);
		int arg = va_arg(ap, int);
		va_end(ap);
		return fcntl(s, F_SETFL, arg);
	}
	}
	return rs_err(ENOTSUP);
}

/* conn returns connected stream rsocket s with rs_lock held, or NULL
 * (lock released; errno EBADF, or EINVAL for one that is not such). */
static struct rs *conn(int s)
{
	struct rs *r = rs_get(s);
	if (r && (r->dgram || !r->connected)) {
		pthread_mutex_unlock(&rs_lock);
		errno = EINVAL;
		return NULL;
	}
	return r;
}

EXPORT off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)flags;
	struct rs *r = conn(s);
	if (!r)
		return -1;
	struct gr_context *ctx = r->ctx;
	uint32_t h = r->handle;
	uint64_t sent = r->sent;
	pthread_mutex_unlock(&rs_lock);
	uintptr_t a = (uintptr_t)buf;
	if ((prot & ~(PROT_WRITE | PROT_NONE)) || !len || a + len < a || offset < -1)
		return rs_err(EINVAL);
	if (prot & PROT_WRITE) {
		int e = io_share(a, len);
		if (e)
			return rs_err(e);
		struct goroce_rs_map_req req = {.handle = h, .addr = a, .length = len, .offset = offset, .sent = sent};
		struct goroce_rs_map_reply rep;
		if ((e = gr_call(ctx, GOROCE_OP_RS_MAP, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL))) {
			io_unshare(a, len);
			return rs_err(e);
		}
		offset = rep.offset;
	} else if (offset == -1) {
		offset = (off_t)a; /* a local buffer for riowrite: nothing for the peer */
	}
	if (!(r = rs_get(s)))
		return -1;
	struct rs_map *m = realloc(r->maps, (r->nmaps + 1) * sizeof *m);
	if (m) {
		r->maps = m;
		m[r->nmaps++] = (struct rs_map){.buf = a, .len = len, .prot = prot};
	}
	pthread_mutex_unlock(&rs_lock);
	return offset;
}

EXPORT int riounmap(int s, void *buf, size_t len)
{
	struct rs *r = rs_get(s);
	if (!r)
		return -1;
	struct rs_map m = {0};
	for (size_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].buf == (uintptr_t)buf && r->maps[i].len == len) {
			m = r->maps[i];
			r->maps[i] = r->maps[--r->nmaps];
			break;
		}
	struct gr_context *ctx = r->ctx;
	uint32_t h = r->handle;
	pthread_mutex_unlock(&rs_lock);
	if (!m.len)
		return rs_err(EINVAL);
	if (m.prot & PROT_WRITE) {
		struct goroce_rs_unmap_req req = {.handle = h, .addr = m.buf, .length = m.len};
		gr_call(ctx, GOROCE_OP_RS_UNMAP, &req, sizeof req, NULL, 0, NULL, 0, NULL);
		io_unshare(m.buf, m.len);
	}
	return 0;
}

static pthread_mutex_t rs_io_lock = PTHREAD_MUTEX_INITIALIZER; /* one riowrite at a time: the buffers */

EXPORT size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rs *r = conn(s);
	if (!r)
		return (size_t)-1;
	pthread_mutex_unlock(&rs_lock);
	if (offset < 0 || (count && !buf)) {
		errno = offset < 0 ? EINVAL : EFAULT;
		return (size_t)-1;
	}
	pthread_mutex_lock(&rs_io_lock);
	if (!(r = conn(s))) {
		pthread_mutex_unlock(&rs_io_lock);
		return (size_t)-1;
	}
	if (!r->stage) {
		char *st = mmap(NULL, STAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int e = st == MAP_FAILED ? ENOMEM : io_share((uintptr_t)st, STAGE);
		if (e) {
			if (st != MAP_FAILED)
				munmap(st, STAGE);
			pthread_mutex_unlock(&rs_lock);
			pthread_mutex_unlock(&rs_io_lock);
			errno = e;
			return (size_t)-1;
		}
		r->stage = st;
	}
	char *stage = r->stage;
	struct gr_context *ctx = r->ctx;
	/* A non-blocking rsocket's riowrite does not wait, as librdmacm's
	 * (rs_nonblocking): for room, nor for the bytes written before it to
	 * go. */
	int fl = fcntl(s, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK))
		flags |= MSG_DONTWAIT;
	struct goroce_rs_write_req req = {.handle = r->handle, .flags = flags & MSG_DONTWAIT, .sent = r->sent};
	pthread_mutex_unlock(&rs_lock);
	size_t done = 0;
	int e = 0;
	while (done < count) {
		size_t n = count - done < STAGE ? count - done : STAGE;
		memcpy(stage, (const char *)buf + done, n);
		req.addr = (uintptr_t)stage;
		req.length = n;
		req.offset = offset + done;
		struct goroce_rs_write_reply rep;
		if ((e = gr_call(ctx, GOROCE_OP_RS_IOWRITE, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL)))
			break;
		done += rep.n;
		if (rep.n < n)
			break;
	}
	pthread_mutex_unlock(&rs_io_lock);
	if (!done && count) {
		errno = e ? e : EAGAIN;
		return (size_t)-1;
	}
	return done;
}
