/*
 * What the test programs share: checks that count and report, a clock,
 * and QPs connected to each other on one device (as two processes'
 * QPs are on rxe0). The programs are built against the system's
 * <infiniband/verbs.h> and run with libgoroce preloaded.
 */
#ifndef GTEST_H
#define GTEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_checks, g_fails;

#define CHECK(c, ...)                                                                                                 \
	do {                                                                                                          \
		g_checks++;                                                                                           \
		if (!(c)) {                                                                                           \
			g_fails++;                                                                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                          \
			fprintf(stderr, __VA_ARGS__);                                                                 \
			fputc('\n', stderr);                                                                          \
		}                                                                                                     \
	} while (0)

/* EQ_ERR: a verb that returns an errno returns want. */
#define EQ_ERR(expr, want)                                                                                            \
	do {                                                                                                          \
		int r_ = (expr);                                                                                      \
		CHECK(r_ == (want), "%s = %d (%s), want %d (%s)", #expr, r_, strerror(r_), (want), strerror(want));    \
	} while (0)

/* NULL_ERR: a verb that returns a pointer fails with errno want. */
#define NULL_ERR(expr, want)                                                                                          \
	do {                                                                                                          \
		errno = 0;                                                                                            \
		void *p_ = (void *)(expr);                                                                            \
		int e_ = errno;                                                                                       \
		CHECK(!p_ && e_ == (want), "%s = %p, errno %d (%s), want NULL and errno %d (%s)", #expr, p_, e_,        \
		      strerror(e_), (want), strerror(want));                                                         \
	} while (0)

/* OK: a pointer verb succeeds; the test cannot go on without it. */
#define OK(expr)                                                                                                      \
	({                                                                                                            \
		errno = 0;                                                                                            \
		__typeof__(expr) p_ = (expr);                                                                         \
		if (!p_) {                                                                                            \
			fprintf(stderr, "FATAL %s:%d: %s = NULL, errno %d (%s)\n", __FILE__, __LINE__, #expr, errno,  \
				strerror(errno));                                                                     \
			exit(2);                                                                                      \
		}                                                                                                     \
		p_;                                                                                                   \
	})

/* MUST: a verb returning an errno succeeds; the test cannot go on without
 * it. */
#define MUST(expr)                                                                                                    \
	do {                                                                                                          \
		int r_ = (expr);                                                                                      \
		if (r_) {                                                                                             \
			fprintf(stderr, "FATAL %s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #expr, r_, strerror(r_));  \
			exit(2);                                                                                      \
		}                                                                                                     \
	} while (0)

static inline double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* poll_n polls cq until it has n completions or ms pass; it returns how
 * many it got. */
static inline int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
	int got = 0;
	double end = now_ms() + ms;
	while (got < n && now_ms() < end) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return r;
		got += r;
		if (!r)
			usleep(100);
	}
	return got;
}

static inline struct ibv_context *open_named(const char *name)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; l && i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	if (l)
		ibv_free_device_list(l);
	if (!ctx) {
		fprintf(stderr, "FATAL: cannot open %s: %s\n", name, strerror(errno));
		exit(2);
	}
	return ctx;
}

/* The attributes of each step of a QP's way to RTS. */
static inline int qp_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = access,
				.qkey = 0x11111111};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, mask);
}

static inline void av_to(struct ibv_ah_attr *ah, const union ibv_gid *gid)
{
	memset(ah, 0, sizeof *ah);
	ah->is_global = 1;
	ah->grh.dgid = *gid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 64;
	ah->port_num = 1;
}

static inline int qp_rtr(struct ibv_qp *qp, uint32_t dqpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dqpn, .rq_psn = 100,
				.max_dest_rd_atomic = 4, .min_rnr_timer = 1};
	av_to(&a.ah_attr, gid);
	int mask = IBV_QP_STATE;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
	else if (qp->qp_type == IBV_QPT_UC)
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	return ibv_modify_qp(qp, &a, mask);
}

static inline int qp_rts(struct ibv_qp *qp, int timeout, int retry)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = 100, .timeout = timeout, .retry_cnt = retry,
				.rnr_retry = 7, .max_rd_atomic = 4};
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	return ibv_modify_qp(qp, &a, mask);
}

/* connect_pair takes two QPs of one type in RESET to RTS, each the
 * other's peer (UD: just to RTS). */
static inline int connect_pair(struct ibv_qp *a, struct ibv_qp *b, const union ibv_gid *gid, int access)
{
	int r;
	if ((r = qp_init(a, access)) || (r = qp_init(b, access)) || (r = qp_rtr(a, b->qp_num, gid)) ||
	    (r = qp_rtr(b, a->qp_num, gid)) || (r = qp_rts(a, 14, 7)) || (r = qp_rts(b, 14, 7)))
		return r;
	return 0;
}

static inline struct ibv_qp *make_qp(struct ibv_pd *pd, enum ibv_qp_type t, struct ibv_cq *scq, struct ibv_cq *rcq,
				     struct ibv_srq *srq, int wr, int sge)
{
	struct ibv_qp_init_attr ia = {.send_cq = scq,
				      .recv_cq = rcq,
				      .srq = srq,
				      .qp_type = t,
				      .cap = {.max_send_wr = wr, .max_recv_wr = srq ? 0 : wr, .max_send_sge = sge,
					      .max_recv_sge = sge, .max_inline_data = 64}};
	return ibv_create_qp(pd, &ia);
}

/* post_write posts one signaled RDMA WRITE. */
static inline int post_write(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
			     uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int post_send_op(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *buf, uint32_t len,
			       uint32_t lkey, int flags)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED | flags};
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int post_recv1(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
	struct ibv_recv_wr *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

static inline int report(const char *prog)
{
	printf("%s: %d checks, %d failed\n", prog, g_checks, g_fails);
	return g_fails ? 1 : 0;
}

#endif
