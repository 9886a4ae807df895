/*
 * libgoroce: the libibverbs ABI in front of goroce's soft RDMA device.
 *
 * A program loads this library (LD_PRELOAD) in place of libibverbs'
 * entry points. Each ibv_open_device opens a session with a device
 * process (`roce device`) over its Unix control socket; the slow verbs are
 * requests on that socket, the fast ones (post, poll, notify) work on
 * rings in memory shared with the device, as a NIC's provider library
 * works on the NIC's queues. goroce_abi.h, generated from Go, is the
 * contract; package uverbs is the other side.
 *
 * Files: device.c (device list, open and close, queries, the control
 * socket), mem.c (sharing registered memory with the device, fork),
 * verbs.c (PD, MR, MW, AH, CQ, QP, SRQ, channels, events), data.c (post,
 * poll, notify, the extended QP and CQ interfaces), misc.c (the pure
 * helpers libibverbs exports, and what goroce does not have).
 */
#ifndef GOROCE_H
#define GOROCE_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>

#include "goroce_abi.h"

#define EXPORT __attribute__((visibility("default")))

/* What rdma-core 45 added (FLUSH, ATOMIC_WRITE's QP flag is in 44), for
 * a build against older headers. */
#define GR_WR_FLUSH 14
#define GR_WR_ATOMIC_WRITE 15
#define GR_WC_FLUSH 8
#define GR_WC_ATOMIC_WRITE 9
#define GR_QP_EX_WITH_FLUSH (1 << 11)
#define GR_QP_EX_WITH_ATOMIC_WRITE (1 << 12)
#define GR_ACCESS_FLUSH_GLOBAL (1 << 8)
#define GR_ACCESS_FLUSH_PERSISTENT (1 << 9)

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* A device found in the socket directory. */
struct gr_device {
	struct ibv_device ibdev; /* what programs hold: first */
	char sock[108];
	struct goroce_hello_reply info;
	int index;
	struct gr_device *next;
};

/* The objects' kinds, for the handle table. */
enum gr_kind { GR_PD = 1, GR_MR, GR_MW, GR_CQ, GR_QP, GR_SRQ, GR_AH, GR_CHAN };

/* An entry of a context's handle table. */
struct gr_handle {
	uint32_t h;
	uint32_t kind;
	void *obj;
};

struct gr_context {
	struct verbs_context vctx; /* ends with the ibv_context programs hold */
	struct gr_device *dev;
	int sock;
	int doorbell;
	int ringfd;
	unsigned gen; /* gr_fork_gen when opened: a forked child's contexts are dead */
	_Atomic int gone;       /* the device closed the session: it stopped or died */
	_Atomic int fatal_told; /* ibv_get_async_event reported IBV_EVENT_DEVICE_FATAL */
	pthread_mutex_t call_lock;
	struct goroce_session_page *page;
	struct goroce_hello_reply info;
	pthread_mutex_t tab_lock;
	struct gr_handle *tab;
	size_t tab_len; /* a power of two, or 0 */
	size_t tab_used;
	struct gr_context *next, *prev; /* every open context */
};

struct gr_pd {
	struct ibv_pd pd;
	uint32_t h;
};

struct gr_mr {
	struct ibv_mr mr;
	uint32_t h;
	uintptr_t start, end; /* the shared pages it holds */
	unsigned access;
};

struct gr_mw {
	struct ibv_mw mw;
	uint32_t h;
};

struct gr_ah {
	struct ibv_ah ah;
	uint32_t h;
};

/* A ring mapped from the ring file. */
struct gr_ring {
	struct goroce_ring_header *hdr;
	uint8_t *slots;
	void *map;
	size_t map_len;
	uint32_t entries;
	uint32_t stride;
};

struct gr_chan {
	struct ibv_comp_channel ch;
	uint32_t h;
};

struct gr_cq {
	struct ibv_cq_ex cq; /* its ibv_cq is what ibv_create_cq returns */
	uint32_t h;
	pthread_spinlock_t lock;
	struct gr_ring r;
	uint32_t cons;
	uint32_t empty; /* polls in a row that found nothing */
	uint32_t events_reported; /* completion events ibv_get_cq_event returned */
	uint32_t async_reported;
	uint64_t wc_flags; /* what an ibv_create_cq_ex program asked to read */
	struct goroce_cqe cur; /* ibv_start_poll's current completion */
	int polling;
};

/* A work queue: the library produces, the device consumes. */
struct gr_wq {
	struct gr_ring r;
	uint32_t prod;
	_Atomic uint32_t retired; /* index after the last completed request */
	uint32_t max_wr;
	uint32_t max_sge;
	uint64_t *wrid;
	pthread_spinlock_t lock;
};

struct gr_qp {
	struct ibv_qp_ex qpx; /* its qp_base is what ibv_create_qp returns */
	/* Room for the builders later rdma-core releases append to ibv_qp_ex
	 * (wr_flush, rdma-core 45): a program built with newer headers than
	 * the library's reads them here. */
	void (*qpx_more[8])(void);
	uint32_t h;
	uint32_t doorbell;
	struct gr_wq sq, rq;
	uint32_t max_inline;
	uint32_t async_reported;
	int sig_all;
	uint64_t send_ops;
	/* The ibv_wr_* builders' state, between wr_start and wr_complete. */
	struct goroce_send_wqe *cur;
	uint32_t start_prod;
	int wr_err;
};

struct gr_srq {
	struct ibv_srq srq;
	uint32_t h;
	uint32_t doorbell;
	struct gr_ring r;
	uint32_t prod;
	uint32_t max_wr, max_sge;
	uint32_t async_reported;
	pthread_spinlock_t lock;
	uint64_t *wrid;
	uint32_t *free; /* a stack of free slots of wrid */
	uint32_t nfree;
};

static inline struct gr_context *to_ctx(struct ibv_context *c)
{
	return container_of(c, struct gr_context, vctx.context);
}
static inline struct gr_cq *to_cq(struct ibv_cq *c) { return container_of(c, struct gr_cq, cq); }
static inline struct gr_qp *to_qp(struct ibv_qp *q) { return container_of(q, struct gr_qp, qpx.qp_base); }
static inline struct gr_srq *to_srq(struct ibv_srq *s) { return container_of(s, struct gr_srq, srq); }
static inline struct gr_pd *to_pd(struct ibv_pd *p) { return container_of(p, struct gr_pd, pd); }
static inline struct gr_mr *to_mr(struct ibv_mr *m) { return container_of(m, struct gr_mr, mr); }
static inline struct gr_mw *to_mw(struct ibv_mw *m) { return container_of(m, struct gr_mw, mw); }
static inline struct gr_ah *to_ah(struct ibv_ah *a) { return container_of(a, struct gr_ah, ah); }

/* device.c */
extern atomic_uint gr_fork_gen;
int gr_call(struct gr_context *ctx, uint32_t op, const void *req, size_t req_len, void *rep, size_t rep_len,
	    const int *fds, int nfds, int *rfd);
int gr_gone(struct gr_context *ctx);
void gr_qp_attr_from(struct ibv_qp_attr *attr, const struct goroce_qp_attr *g);
int gr_map_ring(struct gr_context *ctx, const struct goroce_ring_reply *rr, struct gr_ring *r);
void gr_unmap_ring(struct gr_ring *r);
int gr_tab_add(struct gr_context *ctx, uint32_t h, uint32_t kind, void *obj);
void *gr_tab_get(struct gr_context *ctx, uint32_t h, uint32_t kind);
void gr_tab_del(struct gr_context *ctx, uint32_t h);
void gr_doorbell(struct gr_context *ctx, uint32_t d);
int gr_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr, size_t len);
int gr_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size);
void gr_ctx_forked(void);
void gr_fork_prepare(void);
void gr_fork_parent(void);
void gr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* mem.c */
int gr_mem_fd(void);
int gr_mem_share(uintptr_t start, uintptr_t end, int writable);
void gr_mem_unshare(uintptr_t start, uintptr_t end);
void gr_mem_init(void);

/* verbs.c and data.c: the context's operations */
void gr_set_ops(struct gr_context *ctx);
int gr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int gr_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int gr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int gr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int gr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int gr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int gr_dealloc_mw(struct ibv_mw *mw);
struct ibv_cq_ex *gr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *gr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_srq *gr_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
void gr_cq_ex_ops(struct gr_cq *cq);
void gr_qp_ex_ops(struct gr_qp *qp);
int gr_wq_full(struct gr_wq *wq);

/* A context made before the process forked is dead in the child. */
static inline int gr_forked(struct gr_context *ctx)
{
	return ctx->gen != atomic_load_explicit(&gr_fork_gen, memory_order_relaxed);
}

/* A context is dead in a forked child, and once its device went. */
static inline int gr_dead(struct gr_context *ctx)
{
	return gr_forked(ctx) || atomic_load_explicit(&ctx->gone, memory_order_relaxed);
}

#endif
