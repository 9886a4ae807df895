/*
 * peers.h: what goroce's C interop peers share. The peers are small
 * librdmacm/libibverbs programs that speak the wire protocols of two seed
 * programs (rdma-example's rdma_server/rdma_client and the rdma-roce-lab
 * minimal sample), written for goroce's interop matrix. Every wait here is
 * bounded: CM events and completions are waited for with poll(2) and a
 * deadline, PEER_TIMEOUT seconds (environment, default 60) unless the
 * caller says otherwise.
 */
#ifndef GOROCE_PEERS_H
#define GOROCE_PEERS_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* peer_timeout_ms: the bound on every wait, from PEER_TIMEOUT (seconds). */
static inline int peer_timeout_ms(void)
{
	const char *s = getenv("PEER_TIMEOUT");
	long v = s && *s ? strtol(s, NULL, 10) : 60;
	if (v < 1 || v > 3600)
		v = 60;
	return (int)(v * 1000);
}

static inline long long peer_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* peer_wait_fd: waits until fd is readable; 0, or -1 on timeout or error. */
static inline int peer_wait_fd(int fd, long long deadline)
{
	for (int i = 0; i < 1000000; i++) {
		long long left = deadline - peer_now_ms();
		if (left <= 0)
			return -1;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
	}
	return -1;
}

/*
 * peer_cm_event: the next CM event on ec, which must be want (or, when
 * also is not -1, also) with status 0; *out holds it, to be acked by the
 * caller. Anything else is reported on stderr with who's name and is -1.
 */
static inline int peer_cm_event(const char *who, struct rdma_event_channel *ec,
				enum rdma_cm_event_type want, int also,
				struct rdma_cm_event **out, int timeout_ms)
{
	struct rdma_cm_event *ev = NULL;
	if (peer_wait_fd(ec->fd, peer_now_ms() + timeout_ms)) {
		fprintf(stderr, "%s: no %s event within %d ms\n", who,
			rdma_event_str(want), timeout_ms);
		return -1;
	}
	if (rdma_get_cm_event(ec, &ev)) {
		fprintf(stderr, "%s: rdma_get_cm_event: %s\n", who, strerror(errno));
		return -1;
	}
	if (ev->status != 0 || (ev->event != want && (also < 0 || ev->event != (enum rdma_cm_event_type)also))) {
		fprintf(stderr, "%s: cma event %s, error %d (waiting for %s)\n", who,
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return -1;
	}
	*out = ev;
	return 0;
}

/* peer_nonblock: makes a channel's fd non-blocking (the waits poll it). */
static inline int peer_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/*
 * peer_wait_wcs: reaps n completions from cq, whose events arrive on ch
 * (cq armed with ibv_req_notify_cq), within timeout_ms; every one must be
 * successful. Returns 0, or -1 after saying why on stderr.
 */
static inline int peer_wait_wcs(const char *who, struct ibv_comp_channel *ch, struct ibv_cq *cq,
				struct ibv_wc *wc, int n, int timeout_ms)
{
	long long deadline = peer_now_ms() + timeout_ms;
	int got = 0;
	for (int i = 0; got < n && i < 1000000; i++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", who);
			return -1;
		}
		got += r;
		if (got >= n)
			break;
		if (peer_wait_fd(ch->fd, deadline)) {
			fprintf(stderr, "%s: %d of %d completions within %d ms\n", who, got, n, timeout_ms);
			return -1;
		}
		struct ibv_cq *ev_cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ctx) == 0) {
			ibv_ack_cq_events(ev_cq, 1);
			if (ibv_req_notify_cq(ev_cq, 0)) {
				fprintf(stderr, "%s: ibv_req_notify_cq failed\n", who);
				return -1;
			}
		}
	}
	if (got < n)
		return -1;
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: work completion %d (wr_id %llu) failed: %s\n", who, i,
				(unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
			return -1;
		}
	}
	return 0;
}

/* peer_resolve: addr := host (a name or an IPv4 address) and port. */
static inline int peer_resolve(const char *who, const char *host, const char *port, struct sockaddr_in *addr)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *res = NULL;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "%s: %s: %s\n", who, host, gai_strerror(rc));
		return -1;
	}
	memcpy(addr, res->ai_addr, sizeof(*addr));
	freeaddrinfo(res);
	return 0;
}

/* peer_route: resolves the address and the route of a client's id. */
static inline int peer_route(const char *who, struct rdma_event_channel *ec, struct rdma_cm_id *id,
			     struct sockaddr_in *dst, int timeout_ms)
{
	struct rdma_cm_event *ev;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, timeout_ms)) {
		fprintf(stderr, "%s: rdma_resolve_addr: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ADDR_RESOLVED, -1, &ev, timeout_ms + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, timeout_ms)) {
		fprintf(stderr, "%s: rdma_resolve_route: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ROUTE_RESOLVED, -1, &ev, timeout_ms + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	return 0;
}

/* peer_event_channel: a new CM event channel with a non-blocking fd, or
 * NULL after saying why (the caller then exits). */
static inline struct rdma_event_channel *peer_event_channel(const char *who)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	if (!ec || peer_nonblock(ec->fd)) {
		fprintf(stderr, "%s: rdma_create_event_channel: %s\n", who, strerror(errno));
		return NULL;
	}
	return ec;
}

/*
 * peer_client_id: a client's id on ec (RDMA_PS_TCP) in *id, its address
 * and route to dst resolved (peer_route). On -1 *id, when made, is left
 * for the caller to destroy.
 */
static inline int peer_client_id(const char *who, struct rdma_event_channel *ec, struct rdma_cm_id **id,
				 struct sockaddr_in *dst, int timeout_ms)
{
	if (rdma_create_id(ec, id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "%s: rdma_create_id: %s\n", who, strerror(errno));
		return -1;
	}
	return peer_route(who, ec, *id, dst, timeout_ms);
}

/* peer_accept: a server's rdma_accept of id with cp, and the ESTABLISHED
 * event that follows (acked). */
static inline int peer_accept(const char *who, struct rdma_event_channel *ec, struct rdma_cm_id *id,
			      struct rdma_conn_param *cp, int timeout_ms)
{
	struct rdma_cm_event *ev;
	if (rdma_accept(id, cp)) {
		fprintf(stderr, "%s: rdma_accept: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, timeout_ms))
		return -1;
	rdma_ack_cm_event(ev);
	return 0;
}

/* struct peer_res: the verbs resources of one connection's QP. */
struct peer_res {
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch; /* NULL when the CQ has no channel */
	struct ibv_cq *cq;
};

/*
 * peer_setup_rc: allocates r's PD, with_ch a completion channel (its fd
 * non-blocking, the CQ armed for peer_wait_wcs), a CQ of cqe entries, and
 * creates an RC QP on id (rdma_create_qp) whose send and receive queues
 * both use that CQ and hold max_wr work requests of max_sge SGEs. On -1
 * what was made is in r, for peer_teardown.
 */
static inline int peer_setup_rc(const char *who, struct rdma_cm_id *id, struct peer_res *r, int with_ch, int cqe,
				uint32_t max_wr, uint32_t max_sge)
{
	r->pd = ibv_alloc_pd(id->verbs);
	if (with_ch) {
		r->ch = r->pd ? ibv_create_comp_channel(id->verbs) : NULL;
		r->cq = r->ch ? ibv_create_cq(id->verbs, cqe, NULL, r->ch, 0) : NULL;
	} else {
		r->ch = NULL;
		r->cq = r->pd ? ibv_create_cq(id->verbs, cqe, NULL, NULL, 0) : NULL;
	}
	if (!r->cq || (with_ch && (peer_nonblock(r->ch->fd) || ibv_req_notify_cq(r->cq, 0)))) {
		fprintf(stderr, "%s: cannot set up PD and CQ: %s\n", who, strerror(errno));
		return -1;
	}
	struct ibv_qp_init_attr qpa = {
		.send_cq = r->cq,
		.recv_cq = r->cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = max_wr, .max_recv_wr = max_wr,
			 .max_send_sge = max_sge, .max_recv_sge = max_sge },
	};
	if (rdma_create_qp(id, r->pd, &qpa)) {
		fprintf(stderr, "%s: rdma_create_qp: %s\n", who, strerror(errno));
		return -1;
	}
	return 0;
}

/* peer_reg_local: registers len bytes at buf for local writes (a small
 * buffer that is sent or received into); NULL after saying why. */
static inline struct ibv_mr *peer_reg_local(const char *who, struct ibv_pd *pd, void *buf, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
	return mr;
}

/*
 * peer_post_recv: registers len bytes at buf for local writes (*mr, for
 * the caller to deregister) and posts one receive into them, as wr_id,
 * on id's QP.
 */
static inline int peer_post_recv(const char *who, struct rdma_cm_id *id, struct ibv_pd *pd, void *buf, uint32_t len,
				 uint64_t wr_id, struct ibv_mr **mr)
{
	*mr = peer_reg_local(who, pd, buf, len);
	if (!*mr)
		return -1;
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = (*mr)->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(id->qp, &wr, &bad)) {
		fprintf(stderr, "%s: ibv_post_recv failed\n", who);
		return -1;
	}
	return 0;
}

/*
 * peer_post_send: posts one signaled send-queue work request op (SEND,
 * RDMA WRITE or READ), as wr_id, of len bytes at local (in mr); raddr and
 * rkey name the peer's buffer of a WRITE or READ (0 for a SEND).
 */
static inline int peer_post_send(const char *who, struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
				 struct ibv_mr *mr, void *local, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad)) {
		fprintf(stderr, "%s: ibv_post_send failed\n", who);
		return -1;
	}
	return 0;
}

/* peer_post_wait: peer_post_send, then waits for its completion on r's CQ. */
static inline int peer_post_wait(const char *who, struct ibv_qp *qp, struct peer_res *r, enum ibv_wr_opcode op,
				 uint64_t wr_id, struct ibv_mr *mr, void *local, uint32_t len, uint64_t raddr,
				 uint32_t rkey, int timeout_ms)
{
	struct ibv_wc wc;
	if (peer_post_send(who, qp, op, wr_id, mr, local, len, raddr, rkey))
		return -1;
	return peer_wait_wcs(who, r->ch, r->cq, &wc, 1, timeout_ms);
}

/* peer_drop_id: destroys id's QP, when it has one, and id (NULL: nothing). */
static inline void peer_drop_id(struct rdma_cm_id *id)
{
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (id)
		rdma_destroy_id(id);
}

/* peer_dereg: deregisters the n MRs that follow, in order, skipping NULLs. */
static inline void peer_dereg(int n, ...)
{
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		struct ibv_mr *mr = va_arg(ap, struct ibv_mr *);
		if (mr)
			ibv_dereg_mr(mr);
	}
	va_end(ap);
}

/*
 * peer_teardown: destroys what of r there is (CQ, completion channel, PD),
 * then listen_id (a server's; NULL for a client) and ec, when there. The
 * QP and the MRs go first (peer_drop_id, peer_dereg).
 */
static inline void peer_teardown(struct peer_res *r, struct rdma_cm_id *listen_id, struct rdma_event_channel *ec)
{
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->ch)
		ibv_destroy_comp_channel(r->ch);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (listen_id)
		rdma_destroy_id(listen_id);
	if (ec)
		rdma_destroy_event_channel(ec);
}

#endif /* GOROCE_PEERS_H */
