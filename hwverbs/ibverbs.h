//go:build hwverbs && cgo && linux

// ibverbs.h declares the C side of package hwverbs (ibverbs.c): flat
// structs Go fills in and reads (no unions, no pointers into Go memory),
// and one function per libibverbs call or batch, so that the data path
// crosses into C once per batch of work requests or completions.

#ifndef GOROCE_HWVERBS_H
#define GOROCE_HWVERBS_H

#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs.h>

// gr_swr is a send work request as Go fills it in: flat, with no unions.
// A BIND_MW's window, region, range, rights and new key are the mw_
// fields.
typedef struct {
	uint64_t id, remote_addr, compare_add, swap;
	struct ibv_ah *ah;
	uint32_t imm; // immediate (host order) or the key to invalidate
	uint32_t rkey, remote_qpn, remote_qkey, opcode, flags, num_sge, pad;
	struct ibv_mw *mw;
	struct ibv_mr *mw_mr;
	uint64_t mw_addr, mw_length;
	uint32_t mw_rkey, mw_access;
	uint32_t flush_len; // a FLUSH's length, placement type and level
	uint8_t flush_type, flush_level;
} gr_swr;

// The numbers of IBTA 1.5's FLUSH and ATOMIC_WRITE in libibverbs
// (rdma-core 45 and later; the host's rdma-core 44 has ATOMIC_WRITE only):
// work request and completion opcodes, and the send_ops_flags bits that
// ask ibv_create_qp_ex for them.
#define GR_WR_FLUSH 14
#define GR_WR_ATOMIC_WRITE 15
#define GR_QP_EX_WITH_FLUSH (1 << 11)
#define GR_QP_EX_WITH_ATOMIC_WRITE (1 << 12)

// gr_post_ex posts one FLUSH or ATOMIC_WRITE through the ibv_wr_* API of
// qp, made by gr_create_qp with the op in ex_ops. It returns 0 or errno
// (EOPNOTSUPP when the QP has no such builder).
int gr_post_ex(struct ibv_qp *qp, const gr_swr *g);

// gr_sq is a QP's send batch: max requests of max_sge SGEs each, and
// max_inline bytes of inline data each.
typedef struct {
	struct ibv_qp *qp;
	gr_swr *swr;
	struct ibv_sge *sge;
	struct ibv_send_wr *wr;
	char *inl;
	int max, max_sge, max_inline, ud, bad;
} gr_sq;

// gr_sq_new allocates a send batch for qp; gr_sq_free frees one (NULL
// is fine).
void gr_sq_free(gr_sq *s);

gr_sq *gr_sq_new(struct ibv_qp *qp, int max, int max_sge, int max_inline, int ud);

// gr_post_send posts the first n requests of the batch as one list. It
// returns 0, or the errno with the refused request's index in s->bad.
int gr_post_send(gr_sq *s, int n);

// gr_rwr is a receive work request as Go fills it in.
typedef struct {
	uint64_t id;
	uint32_t num_sge, pad;
} gr_rwr;

// gr_rq is a receive batch, for a QP's receive queue or an SRQ.
typedef struct {
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	gr_rwr *rwr;
	struct ibv_sge *sge;
	struct ibv_recv_wr *wr;
	int max, max_sge, bad;
} gr_rq;

// gr_rq_new allocates a receive batch for qp or srq; gr_rq_free frees one.
void gr_rq_free(gr_rq *r);

gr_rq *gr_rq_new(struct ibv_qp *qp, struct ibv_srq *srq, int max, int max_sge);

// gr_post_recv posts the first n receives of the batch as one list, to
// the SRQ when r has one. It returns 0, or the errno with the refused
// request's index in r->bad.
int gr_post_recv(gr_rq *r, int n);

// gr_wc is a completion as Go reads it: the immediate in host order.
typedef struct {
	uint64_t id;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
} gr_wc;

// gr_cqb is a CQ's poll batch: ibv_poll_cq fills wc, gr_poll copies it
// to out.
typedef struct {
	struct ibv_cq *cq;
	struct ibv_wc *wc;
	gr_wc *out;
	int max;
} gr_cqb;

// gr_cqb_new allocates a poll batch for cq; gr_cqb_free frees one.
void gr_cqb_free(gr_cqb *b);

gr_cqb *gr_cqb_new(struct ibv_cq *cq, int max);

// gr_poll polls up to n completions into b->out; it returns how many, or
// a negative number when the poll failed.
int gr_poll(gr_cqb *b, int n);

// gr_cq_event takes one completion event and acknowledges it at once. It
// returns the CQ's context (its id), 0 when no event is waiting, or
// -errno.
int64_t gr_cq_event(struct ibv_comp_channel *ch);

// gr_aev is an asynchronous event as Go reads it: the context (id) of
// its CQ or SRQ, its QP number, or its port.
typedef struct {
	int64_t ctx;
	uint32_t ev_type, qpn;
	int port;
} gr_aev;

// gr_async_event takes one asynchronous event, copies what Go needs and
// acknowledges it. It returns 0, EAGAIN when none is waiting, or errno.
int gr_async_event(struct ibv_context *c, gr_aev *out);

// gr_port is what Go reads of a port's attributes.
typedef struct {
	uint32_t state, active_mtu, link_layer;
	int gid_tbl_len;
} gr_port;

// gr_query_device_caps reads the device's device_cap_flags_ex
// (ibv_query_device_ex) into *caps; it returns 0 or errno.
int gr_query_device_caps(struct ibv_context *c, uint64_t *caps);

// gr_query_port reads a port's attributes; it returns 0 or errno.
int gr_query_port(struct ibv_context *c, uint8_t port, gr_port *out);

// gr_query_gid reads one GID table entry; *roce2 tells whether it is a
// RoCE v2 GID. It returns 0 or errno (ENODATA for an empty entry).
int gr_query_gid(struct ibv_context *c, uint8_t port, int index, uint8_t *gid, int *roce2);

// gr_reg_mr, gr_create_cq (its context the CQ's id) and gr_create_srq
// (its context the SRQ's id) return NULL and set errno on failure;
// gr_modify_srq arms the SRQ limit and returns 0 or errno.
struct ibv_mr *gr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);

struct ibv_cq *gr_create_cq(struct ibv_context *c, int cqe, uint64_t id, struct ibv_comp_channel *ch);

struct ibv_srq *gr_create_srq(struct ibv_pd *pd, uint64_t id, uint32_t max_wr, uint32_t max_sge);

int gr_modify_srq(struct ibv_srq *s, uint32_t limit);

// gr_qpinit is ibv_qp_init_attr as Go fills it in.
typedef struct {
	struct ibv_cq *send_cq, *recv_cq;
	struct ibv_srq *srq;
	uint32_t qp_type, sig_all;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	// ex_ops, GR_QP_EX_WITH_* bits, asks ibv_create_qp_ex for those
	// operations of the ibv_wr_* API; where the library or the device
	// refuses them, the QP is made without, and ex_ops comes back 0.
	uint32_t ex_ops;
} gr_qpinit;

// gr_create_qp creates a QP; the capabilities it got are written back.
struct ibv_qp *gr_create_qp(struct ibv_pd *pd, gr_qpinit *in);

// gr_ah is an address vector, always with a GRH.
typedef struct {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, sl, port;
} gr_ah;

// gr_create_ah creates an address handle; NULL and errno on failure.
struct ibv_ah *gr_create_ah(struct ibv_pd *pd, gr_ah *g);

// gr_qpattr is ibv_qp_attr as Go fills it in and reads it, with the QP's
// capabilities.
typedef struct {
	uint32_t state, cur_state, path_mtu, qkey, rq_psn, sq_psn, dest_qpn, access;
	uint16_t pkey_index;
	uint8_t port, timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, sqd_notify;
	gr_ah ah;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
} gr_qpattr;

// gr_modify_qp is ibv_modify_qp, gr_query_qp ibv_query_qp (every
// attribute); both return 0 or errno.
int gr_modify_qp(struct ibv_qp *qp, const gr_qpattr *g, int mask);

int gr_query_qp(struct ibv_qp *qp, gr_qpattr *g);

// gr_async_fd and gr_channel_fd return the file descriptors of the
// device's asynchronous events and of a completion channel.
int gr_async_fd(struct ibv_context *c);

int gr_channel_fd(struct ibv_comp_channel *ch);

// gr_alloc_mw is ibv_alloc_mw (NULL and errno on failure), gr_dealloc_mw
// ibv_dealloc_mw (0 or errno).
struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, int type);

int gr_dealloc_mw(struct ibv_mw *mw);

// gr_mwbind is what ibv_bind_mw takes: the request's id and flags, the
// region, range and rights.
typedef struct {
	uint64_t id, addr, length;
	struct ibv_mr *mr;
	uint32_t flags, access;
} gr_mwbind;

// gr_bind_mw is ibv_bind_mw; it returns 0 or the errno, and the window's
// new key in *rkey.
int gr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, const gr_mwbind *b, uint32_t *rkey);

// gr_errno_ret turns a libibverbs return code into an errno: some
// providers return -errno.
int gr_errno_ret(int rc);

#endif
