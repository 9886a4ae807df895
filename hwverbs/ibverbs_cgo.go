//go:build hwverbs && cgo && linux

package hwverbs

/*
#cgo LDFLAGS: -libverbs
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <endian.h>
#include <infiniband/verbs.h>

// goroce's verbs use ibverbs' numbering; these fail the build if a
// header ever disagrees.
_Static_assert(IBV_WR_RDMA_WRITE == 0 && IBV_WR_RDMA_WRITE_WITH_IMM == 1 && IBV_WR_SEND == 2 &&
	IBV_WR_SEND_WITH_IMM == 3 && IBV_WR_RDMA_READ == 4 && IBV_WR_ATOMIC_CMP_AND_SWP == 5 &&
	IBV_WR_ATOMIC_FETCH_AND_ADD == 6 && IBV_WR_LOCAL_INV == 7 && IBV_WR_SEND_WITH_INV == 9, "ibv_wr_opcode");
_Static_assert(IBV_SEND_FENCE == 1 && IBV_SEND_SIGNALED == 2 && IBV_SEND_SOLICITED == 4 &&
	IBV_SEND_INLINE == 8, "ibv_send_flags");
_Static_assert(IBV_WC_SEND == 0 && IBV_WC_RDMA_WRITE == 1 && IBV_WC_RDMA_READ == 2 && IBV_WC_COMP_SWAP == 3 &&
	IBV_WC_FETCH_ADD == 4 && IBV_WC_BIND_MW == 5 && IBV_WC_LOCAL_INV == 6 && IBV_WC_RECV == 128 &&
	IBV_WC_RECV_RDMA_WITH_IMM == 129, "ibv_wc_opcode");
_Static_assert(IBV_WC_SUCCESS == 0 && IBV_WC_WR_FLUSH_ERR == 5 && IBV_WC_REM_ACCESS_ERR == 10 &&
	IBV_WC_RETRY_EXC_ERR == 12 && IBV_WC_REM_ABORT_ERR == 16 && IBV_WC_GENERAL_ERR == 21, "ibv_wc_status");
_Static_assert(IBV_WC_GRH == 1 && IBV_WC_WITH_IMM == 2 && IBV_WC_WITH_INV == 8, "ibv_wc_flags");
_Static_assert(IBV_QP_STATE == 1 && IBV_QP_AV == (1 << 7) && IBV_QP_SQ_PSN == (1 << 16) &&
	IBV_QP_DEST_QPN == (1 << 20), "ibv_qp_attr_mask");
_Static_assert(IBV_ACCESS_LOCAL_WRITE == 1 && IBV_ACCESS_REMOTE_WRITE == 2 && IBV_ACCESS_REMOTE_READ == 4 &&
	IBV_ACCESS_REMOTE_ATOMIC == 8, "ibv_access_flags");
_Static_assert(IBV_QPS_RESET == 0 && IBV_QPS_ERR == 6 && IBV_MTU_256 == 1 && IBV_MTU_4096 == 5, "states, MTUs");
_Static_assert(IBV_EVENT_CQ_ERR == 0 && IBV_EVENT_QP_FATAL == 1 && IBV_EVENT_QP_REQ_ERR == 2 &&
	IBV_EVENT_QP_ACCESS_ERR == 3 && IBV_EVENT_COMM_EST == 4 && IBV_EVENT_SQ_DRAINED == 5 &&
	IBV_EVENT_SRQ_LIMIT_REACHED == 15 && IBV_EVENT_QP_LAST_WQE_REACHED == 16, "ibv_event_type");

// gr_swr is a send work request as Go fills it in: flat, with no unions.
typedef struct {
	uint64_t id, remote_addr, compare_add, swap;
	struct ibv_ah *ah;
	uint32_t imm; // immediate (host order) or the key to invalidate
	uint32_t rkey, remote_qpn, remote_qkey, opcode, flags, num_sge, pad;
} gr_swr;

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

static void gr_sq_free(gr_sq *s) {
	if (!s)
		return;
	free(s->swr);
	free(s->sge);
	free(s->wr);
	free(s->inl);
	free(s);
}

static gr_sq *gr_sq_new(struct ibv_qp *qp, int max, int max_sge, int max_inline, int ud) {
	gr_sq *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->qp = qp;
	s->max = max;
	s->max_sge = max_sge;
	s->max_inline = max_inline;
	s->ud = ud;
	s->swr = calloc(max, sizeof *s->swr);
	s->sge = calloc((size_t)max * max_sge, sizeof *s->sge);
	s->wr = calloc(max, sizeof *s->wr);
	if (max_inline > 0)
		s->inl = calloc(max, max_inline);
	if (!s->swr || !s->sge || !s->wr || (max_inline > 0 && !s->inl)) {
		gr_sq_free(s);
		return NULL;
	}
	return s;
}

// gr_post_send posts the first n requests of the batch as one list. It
// returns 0, or the errno with the refused request's index in s->bad.
static int gr_post_send(gr_sq *s, int n) {
	for (int i = 0; i < n; i++) {
		gr_swr *g = &s->swr[i];
		struct ibv_send_wr *w = &s->wr[i];
		memset(w, 0, sizeof *w);
		w->wr_id = g->id;
		w->next = i + 1 < n ? &s->wr[i + 1] : NULL;
		w->sg_list = &s->sge[(size_t)i * s->max_sge];
		w->num_sge = g->num_sge;
		w->opcode = g->opcode;
		w->send_flags = g->flags;
		if (g->opcode == IBV_WR_SEND_WITH_INV || g->opcode == IBV_WR_LOCAL_INV)
			w->invalidate_rkey = g->imm;
		else
			w->imm_data = htobe32(g->imm);
		if (s->ud) {
			w->wr.ud.ah = g->ah;
			w->wr.ud.remote_qpn = g->remote_qpn;
			w->wr.ud.remote_qkey = g->remote_qkey;
		} else if (g->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || g->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w->wr.atomic.remote_addr = g->remote_addr;
			w->wr.atomic.compare_add = g->compare_add;
			w->wr.atomic.swap = g->swap;
			w->wr.atomic.rkey = g->rkey;
		} else {
			w->wr.rdma.remote_addr = g->remote_addr;
			w->wr.rdma.rkey = g->rkey;
		}
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(s->qp, s->wr, &bad);
	if (rc) {
		s->bad = bad ? (int)(bad - s->wr) : 0;
		if (rc < 0)
			rc = -rc;
	}
	return rc;
}

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

static void gr_rq_free(gr_rq *r) {
	if (!r)
		return;
	free(r->rwr);
	free(r->sge);
	free(r->wr);
	free(r);
}

static gr_rq *gr_rq_new(struct ibv_qp *qp, struct ibv_srq *srq, int max, int max_sge) {
	gr_rq *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->qp = qp;
	r->srq = srq;
	r->max = max;
	r->max_sge = max_sge;
	r->rwr = calloc(max, sizeof *r->rwr);
	r->sge = calloc((size_t)max * max_sge, sizeof *r->sge);
	r->wr = calloc(max, sizeof *r->wr);
	if (!r->rwr || !r->sge || !r->wr) {
		gr_rq_free(r);
		return NULL;
	}
	return r;
}

static int gr_post_recv(gr_rq *r, int n) {
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &r->wr[i];
		w->wr_id = r->rwr[i].id;
		w->next = i + 1 < n ? &r->wr[i + 1] : NULL;
		w->sg_list = &r->sge[(size_t)i * r->max_sge];
		w->num_sge = r->rwr[i].num_sge;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = r->srq ? ibv_post_srq_recv(r->srq, r->wr, &bad) : ibv_post_recv(r->qp, r->wr, &bad);
	if (rc) {
		r->bad = bad ? (int)(bad - r->wr) : 0;
		if (rc < 0)
			rc = -rc;
	}
	return rc;
}

// gr_wc is a completion as Go reads it: the immediate in host order.
typedef struct {
	uint64_t id;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
} gr_wc;

typedef struct {
	struct ibv_cq *cq;
	struct ibv_wc *wc;
	gr_wc *out;
	int max;
} gr_cqb;

static void gr_cqb_free(gr_cqb *b) {
	if (!b)
		return;
	free(b->wc);
	free(b->out);
	free(b);
}

static gr_cqb *gr_cqb_new(struct ibv_cq *cq, int max) {
	gr_cqb *b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	b->cq = cq;
	b->max = max;
	b->wc = calloc(max, sizeof *b->wc);
	b->out = calloc(max, sizeof *b->out);
	if (!b->wc || !b->out) {
		gr_cqb_free(b);
		return NULL;
	}
	return b;
}

// gr_poll polls up to n completions into b->out; it returns how many, or
// a negative number when the poll failed.
static int gr_poll(gr_cqb *b, int n) {
	int k = ibv_poll_cq(b->cq, n, b->wc);
	for (int i = 0; i < k; i++) {
		struct ibv_wc *w = &b->wc[i];
		gr_wc *o = &b->out[i];
		o->id = w->wr_id;
		o->status = w->status;
		o->opcode = w->opcode;
		o->vendor_err = w->vendor_err;
		o->byte_len = w->byte_len;
		if (w->wc_flags & IBV_WC_WITH_IMM)
			o->imm = be32toh(w->imm_data);
		else if (w->wc_flags & IBV_WC_WITH_INV)
			o->imm = w->invalidated_rkey;
		else
			o->imm = 0;
		o->qp_num = w->qp_num;
		o->src_qp = w->src_qp;
		o->flags = w->wc_flags;
		o->pkey_index = w->pkey_index;
		o->slid = w->slid;
		o->sl = w->sl;
		o->dlid_path_bits = w->dlid_path_bits;
	}
	return k;
}

// gr_cq_event takes one completion event and acknowledges it at once. It
// returns the CQ's context (its id), 0 when no event is waiting, or
// -errno.
static int64_t gr_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -(int64_t)(errno ? errno : EIO);
	ibv_ack_cq_events(cq, 1);
	return (int64_t)(uintptr_t)ctx;
}

typedef struct {
	int64_t ctx;
	uint32_t ev_type, qpn;
	int port;
} gr_aev;

// gr_async_event takes one asynchronous event, copies what Go needs and
// acknowledges it. It returns 0, EAGAIN when none is waiting, or errno.
static int gr_async_event(struct ibv_context *c, gr_aev *out) {
	struct ibv_async_event e;
	if (ibv_get_async_event(c, &e))
		return errno ? errno : EIO;
	out->ev_type = e.event_type;
	out->ctx = 0;
	out->qpn = 0;
	out->port = 0;
	switch (e.event_type) {
	case IBV_EVENT_CQ_ERR:
		out->ctx = (int64_t)(uintptr_t)e.element.cq->cq_context;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->qpn = e.element.qp->qp_num;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->ctx = (int64_t)(uintptr_t)e.element.srq->srq_context;
		break;
	case IBV_EVENT_WQ_FATAL:
		break;
	default:
		out->port = e.element.port_num;
	}
	ibv_ack_async_event(&e);
	return 0;
}

typedef struct {
	uint32_t state, active_mtu, link_layer;
	int gid_tbl_len;
} gr_port;

static int gr_query_port(struct ibv_context *c, uint8_t port, gr_port *out) {
	struct ibv_port_attr a;
	int rc = ibv_query_port(c, port, &a);
	if (rc)
		return rc < 0 ? -rc : rc;
	out->state = a.state;
	out->active_mtu = a.active_mtu;
	out->link_layer = a.link_layer;
	out->gid_tbl_len = a.gid_tbl_len;
	return 0;
}

// gr_query_gid reads one GID table entry; *roce2 tells whether it is a
// RoCE v2 GID. It returns 0 or errno (ENODATA for an empty entry).
static int gr_query_gid(struct ibv_context *c, uint8_t port, int index, uint8_t *gid, int *roce2) {
	struct ibv_gid_entry e;
	int rc = ibv_query_gid_ex(c, port, index, &e, 0);
	if (rc == 0) {
		memcpy(gid, e.gid.raw, 16);
		*roce2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
		return 0;
	}
	if (rc != EOPNOTSUPP && rc != ENOSYS)
		return rc < 0 ? -rc : rc;
	union ibv_gid g;
	if (ibv_query_gid(c, port, index, &g))
		return errno ? errno : EINVAL;
	memcpy(gid, g.raw, 16);
	*roce2 = 0;
	return 0;
}

static struct ibv_mr *gr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static struct ibv_cq *gr_create_cq(struct ibv_context *c, int cqe, uint64_t id, struct ibv_comp_channel *ch) {
	return ibv_create_cq(c, cqe, (void *)(uintptr_t)id, ch, 0);
}

static struct ibv_srq *gr_create_srq(struct ibv_pd *pd, uint64_t id, uint32_t max_wr, uint32_t max_sge) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.srq_context = (void *)(uintptr_t)id;
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	struct ibv_srq *s = ibv_create_srq(pd, &a);
	return s;
}

static int gr_modify_srq(struct ibv_srq *s, uint32_t limit) {
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof a);
	a.srq_limit = limit;
	int rc = ibv_modify_srq(s, &a, IBV_SRQ_LIMIT);
	return rc < 0 ? -rc : rc;
}

typedef struct {
	struct ibv_cq *send_cq, *recv_cq;
	struct ibv_srq *srq;
	uint32_t qp_type, sig_all;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
} gr_qpinit;

// gr_create_qp creates a QP; the capabilities it got are written back.
static struct ibv_qp *gr_create_qp(struct ibv_pd *pd, gr_qpinit *in) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = in->send_cq;
	a.recv_cq = in->recv_cq;
	a.srq = in->srq;
	a.qp_type = in->qp_type;
	a.sq_sig_all = in->sig_all;
	a.cap.max_send_wr = in->max_send_wr;
	a.cap.max_recv_wr = in->max_recv_wr;
	a.cap.max_send_sge = in->max_send_sge;
	a.cap.max_recv_sge = in->max_recv_sge;
	a.cap.max_inline_data = in->max_inline;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp) {
		in->max_send_wr = a.cap.max_send_wr;
		in->max_recv_wr = a.cap.max_recv_wr;
		in->max_send_sge = a.cap.max_send_sge;
		in->max_recv_sge = a.cap.max_recv_sge;
		in->max_inline = a.cap.max_inline_data;
	}
	return qp;
}

// gr_ah is an address vector, always with a GRH.
typedef struct {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, sl, port;
} gr_ah;

static void gr_fill_ah(struct ibv_ah_attr *a, const gr_ah *g) {
	memset(a, 0, sizeof *a);
	memcpy(a->grh.dgid.raw, g->dgid, 16);
	a->grh.flow_label = g->flow_label;
	a->grh.sgid_index = g->sgid_index;
	a->grh.hop_limit = g->hop_limit;
	a->grh.traffic_class = g->traffic_class;
	a->sl = g->sl;
	a->is_global = 1;
	a->port_num = g->port;
}

static void gr_read_ah(gr_ah *g, const struct ibv_ah_attr *a) {
	memcpy(g->dgid, a->grh.dgid.raw, 16);
	g->flow_label = a->grh.flow_label;
	g->sgid_index = a->grh.sgid_index;
	g->hop_limit = a->grh.hop_limit;
	g->traffic_class = a->grh.traffic_class;
	g->sl = a->sl;
	g->port = a->port_num;
}

static struct ibv_ah *gr_create_ah(struct ibv_pd *pd, gr_ah *g) {
	struct ibv_ah_attr a;
	gr_fill_ah(&a, g);
	return ibv_create_ah(pd, &a);
}

typedef struct {
	uint32_t state, cur_state, path_mtu, qkey, rq_psn, sq_psn, dest_qpn, access;
	uint16_t pkey_index;
	uint8_t port, timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, sqd_notify;
	gr_ah ah;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
} gr_qpattr;

static int gr_modify_qp(struct ibv_qp *qp, const gr_qpattr *g, int mask) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = g->state;
	a.cur_qp_state = g->cur_state;
	a.path_mtu = g->path_mtu;
	a.qkey = g->qkey;
	a.rq_psn = g->rq_psn;
	a.sq_psn = g->sq_psn;
	a.dest_qp_num = g->dest_qpn;
	a.qp_access_flags = g->access;
	a.pkey_index = g->pkey_index;
	a.port_num = g->port;
	a.timeout = g->timeout;
	a.retry_cnt = g->retry_cnt;
	a.rnr_retry = g->rnr_retry;
	a.min_rnr_timer = g->min_rnr_timer;
	a.max_rd_atomic = g->max_rd_atomic;
	a.max_dest_rd_atomic = g->max_dest_rd_atomic;
	a.en_sqd_async_notify = g->sqd_notify;
	gr_fill_ah(&a.ah_attr, &g->ah);
	int rc = ibv_modify_qp(qp, &a, mask);
	return rc < 0 ? -rc : rc;
}

static int gr_query_qp(struct ibv_qp *qp, gr_qpattr *g) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	memset(&a, 0, sizeof a);
	int mask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
		IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
		IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP | IBV_QP_DEST_QPN;
	int rc = ibv_query_qp(qp, &a, mask, &init);
	if (rc)
		return rc < 0 ? -rc : rc;
	g->state = a.qp_state;
	g->cur_state = a.cur_qp_state;
	g->path_mtu = a.path_mtu;
	g->qkey = a.qkey;
	g->rq_psn = a.rq_psn;
	g->sq_psn = a.sq_psn;
	g->dest_qpn = a.dest_qp_num;
	g->access = a.qp_access_flags;
	g->pkey_index = a.pkey_index;
	g->port = a.port_num;
	g->timeout = a.timeout;
	g->retry_cnt = a.retry_cnt;
	g->rnr_retry = a.rnr_retry;
	g->min_rnr_timer = a.min_rnr_timer;
	g->max_rd_atomic = a.max_rd_atomic;
	g->max_dest_rd_atomic = a.max_dest_rd_atomic;
	g->sqd_notify = a.sq_draining;
	gr_read_ah(&g->ah, &a.ah_attr);
	g->max_send_wr = init.cap.max_send_wr;
	g->max_recv_wr = init.cap.max_recv_wr;
	g->max_send_sge = init.cap.max_send_sge;
	g->max_recv_sge = init.cap.max_recv_sge;
	g->max_inline = init.cap.max_inline_data;
	return 0;
}

static int gr_async_fd(struct ibv_context *c) { return c->async_fd; }
static int gr_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }
static int gr_errno_ret(int rc) { return rc < 0 ? -rc : rc; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Built reports whether this build has the libibverbs backend.
const Built = true

const (
	postBatch  = 32  // work requests translated and posted per C call
	pollBatch  = 32  // completions polled per C call
	eventBatch = 256 // events taken per wakeup before polling the fds again
	linkEth    = 2   // IBV_LINK_LAYER_ETHERNET
	linkIB     = 1   // IBV_LINK_LAYER_INFINIBAND
)

// Devices returns the names of the RDMA devices libibverbs sees, such as
// rxe0 or mlx5_0; none is not an error.
func Devices() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, nil // no kernel RDMA support: no devices
		}
		return nil, &Error{Op: "ibv_get_device_list", Errno: errnoOf(err)}
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		names = append(names, C.GoString(C.ibv_get_device_name(d)))
	}
	return names, nil
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// cErr returns the *Error of a call that returned NULL, from the errno cgo
// captured.
func cErr(op string, err error) *Error { return errnoError(op, errnoOf(err)) }

// Device is an RDMA device opened through libibverbs. It is safe for
// concurrent use.
type Device struct {
	name   string
	port   uint8
	gidIdx int
	log    *slog.Logger

	ctx  *C.struct_ibv_context
	ch   *C.struct_ibv_comp_channel
	aev  *C.gr_aev // the event goroutine's out parameter, in C memory
	wake int       // eventfd that stops the event goroutine

	events  chan verbs.Event
	dropped atomic.Uint64
	stop    atomic.Bool
	wg      sync.WaitGroup

	// life is held for reading by every control-path call and for
	// writing by Close, so nothing is created while Close tears down.
	life   sync.RWMutex
	closed bool

	mu     sync.RWMutex // the tables below
	nextID uint64
	pds    map[*PD]struct{}
	mrs    map[*MR]struct{}
	cqs    map[uint64]*CQ
	qps    map[*QP]struct{}
	srqs   map[uint64]*SRQ
	ahs    map[*AH]struct{}
}

// Open opens the RDMA device of the given name ("" for the first one)
// through libibverbs, with cfg (nil for the defaults: port 1, the GID
// chosen as the package documentation says).
func Open(name string, cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Port == 0 {
		c.Port = 1
	}
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, fmt.Errorf("%w (the kernel has no RDMA support)", ErrNoDevice)
		}
		return nil, &Error{Op: "ibv_get_device_list", Errno: errnoOf(err)}
	}
	var dev *C.struct_ibv_device
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		dn := C.GoString(C.ibv_get_device_name(d))
		names = append(names, dn)
		if dev == nil && (name == "" || name == dn) {
			dev, name = d, dn
		}
	}
	if dev == nil {
		C.ibv_free_device_list(list)
		if name == "" {
			return nil, ErrNoDevice
		}
		return nil, fmt.Errorf("%w named %q (have %v)", ErrNoDevice, name, names)
	}
	ctx, err := C.ibv_open_device(dev)
	C.ibv_free_device_list(list)
	if ctx == nil {
		return nil, cErr("ibv_open_device", err)
	}
	d := &Device{name: name, port: c.Port, log: c.Logger, ctx: ctx, wake: -1,
		events: make(chan verbs.Event, 64), nextID: 1,
		pds: map[*PD]struct{}{}, mrs: map[*MR]struct{}{}, cqs: map[uint64]*CQ{},
		qps: map[*QP]struct{}{}, srqs: map[uint64]*SRQ{}, ahs: map[*AH]struct{}{}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if err := d.setup(&c); err != nil {
		d.release()
		return nil, err
	}
	d.wg.Add(1)
	go d.run()
	gid, _ := d.GID(0)
	d.log.Debug("open device", "device", name, "port", c.Port, "gid_index", d.gidIdx,
		"gid", netip.AddrFrom16(gid).Unmap())
	return d, nil
}

// setup checks the port, chooses the GID and makes the completion
// channel and the event goroutine's file descriptors.
func (d *Device) setup(c *Config) error {
	var pa C.gr_port
	if rc := C.gr_query_port(d.ctx, C.uint8_t(d.port), &pa); rc != 0 {
		e := errnoError("ibv_query_port", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("%s port %d", d.name, d.port)
		return e
	}
	if pa.link_layer == linkIB {
		return fmt.Errorf("%w: %s port %d is InfiniBand; goroce speaks RoCE (Ethernet)", ErrUnsupported, d.name, d.port)
	}
	var entries []gidEntry
	var raw [16]C.uint8_t
	var v2 C.int
	for i := 0; i < int(pa.gid_tbl_len); i++ {
		if C.gr_query_gid(d.ctx, C.uint8_t(d.port), C.int(i), &raw[0], &v2) != 0 {
			continue
		}
		e := gidEntry{index: i, roce2: v2 != 0}
		for j := range raw {
			e.gid[j] = byte(raw[j])
		}
		entries = append(entries, e)
	}
	idx, err := chooseGID(entries, c)
	if err != nil {
		return fmt.Errorf("%w (%s port %d)", err, d.name, d.port)
	}
	d.gidIdx = idx
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return cErr("ibv_create_comp_channel", err)
	}
	d.ch = ch
	for _, fd := range []C.int{C.gr_channel_fd(ch), C.gr_async_fd(d.ctx)} {
		if err := unix.SetNonblock(int(fd), true); err != nil {
			return fmt.Errorf("hwverbs: event descriptor: %w", err)
		}
	}
	if d.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("hwverbs: eventfd: %w", err)
	}
	d.aev = (*C.gr_aev)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gr_aev{}))))
	if d.aev == nil {
		return errnoError("calloc", syscall.ENOMEM)
	}
	return nil
}

// release frees what setup made and closes the device.
func (d *Device) release() error {
	var err error
	if d.ch != nil {
		if rc := C.ibv_destroy_comp_channel(d.ch); rc != 0 {
			err = errnoError("ibv_destroy_comp_channel", syscall.Errno(C.gr_errno_ret(rc)))
		}
		d.ch = nil
	}
	if d.wake >= 0 {
		unix.Close(d.wake)
		d.wake = -1
	}
	if d.aev != nil {
		C.free(unsafe.Pointer(d.aev))
		d.aev = nil
	}
	if d.ctx != nil {
		if rc := C.ibv_close_device(d.ctx); rc != 0 && err == nil {
			err = errnoError("ibv_close_device", syscall.Errno(C.gr_errno_ret(rc)))
		}
		d.ctx = nil
	}
	return err
}

// run is the event goroutine: completion events to the CQs' channels,
// asynchronous events to Events. Each poll waits at most a second, and
// Close wakes it at once through the eventfd.
func (d *Device) run() {
	defer d.wg.Done()
	fds := []unix.PollFd{
		{Fd: int32(C.gr_channel_fd(d.ch)), Events: unix.POLLIN},
		{Fd: int32(C.gr_async_fd(d.ctx)), Events: unix.POLLIN},
		{Fd: int32(d.wake), Events: unix.POLLIN},
	}
	for !d.stop.Load() {
		_, err := unix.Poll(fds, 1000)
		if d.stop.Load() {
			return
		}
		if err != nil {
			if err != unix.EINTR {
				d.log.Warn("event poll failed", "device", d.name, "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		for i, what := range [2]string{"completion channel", "async events"} {
			if fds[i].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				// The device is gone or broken: stop polling this
				// descriptor rather than spin on it.
				d.log.Warn("event descriptor failed; no more events from it", "device", d.name,
					"fd", what, "revents", fds[i].Revents)
				fds[i].Fd = -1
				continue
			}
			if fds[i].Revents == 0 {
				continue
			}
			if i == 0 {
				d.cqEvents()
			} else {
				d.asyncEvents()
			}
		}
	}
}

func (d *Device) cqEvents() {
	for range eventBatch {
		id := int64(C.gr_cq_event(d.ch))
		if id == 0 {
			return
		}
		if id < 0 {
			d.log.Warn("ibv_get_cq_event failed", "device", d.name, "err", syscall.Errno(-id))
			return
		}
		d.mu.RLock()
		cq := d.cqs[uint64(id)]
		d.mu.RUnlock()
		if cq != nil {
			select {
			case cq.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (d *Device) asyncEvents() {
	for range eventBatch {
		rc := C.gr_async_event(d.ctx, d.aev)
		if rc == C.EAGAIN || rc == C.EWOULDBLOCK {
			return
		}
		if rc != 0 {
			d.log.Warn("ibv_get_async_event failed", "device", d.name, "err", syscall.Errno(rc))
			return
		}
		a := *d.aev
		t, ok := eventType(int(a.ev_type))
		if !ok {
			d.log.Debug("async event", "device", d.name, "type", int(a.ev_type), "port", int(a.port))
			continue
		}
		ev := verbs.Event{Type: t, QPN: uint32(a.qpn)}
		d.mu.RLock()
		switch t {
		case verbs.EventCQErr:
			if cq := d.cqs[uint64(a.ctx)]; cq != nil {
				ev.CQ = cq
			}
		case verbs.EventSRQLimitReached:
			if s := d.srqs[uint64(a.ctx)]; s != nil {
				ev.SRQ = s
			}
		}
		d.mu.RUnlock()
		d.log.Debug("async event", "device", d.name, "type", t, "qpn", ev.QPN)
		select {
		case d.events <- ev:
		default:
			d.dropped.Add(1)
			d.log.Warn("async event dropped: Events() is full", "device", d.name, "type", t)
		}
	}
}

// Name returns the device's name, such as rxe0.
func (d *Device) Name() string { return d.name }

// Port returns the port the device uses.
func (d *Device) Port() uint8 { return d.port }

// GIDIndex returns the GID table index behind GID index 0.
func (d *Device) GIDIndex() int { return d.gidIdx }

// DroppedEvents returns how many asynchronous events found Events full.
func (d *Device) DroppedEvents() uint64 { return d.dropped.Load() }

// GID returns the GID of the given index: 0 is the device's chosen GID,
// any other index the port's table entry.
func (d *Device) GID(index int) ([16]byte, error) {
	if index < 0 || index > 255 {
		return [16]byte{}, fmt.Errorf("%w: GID index %d", verbs.ErrInvalidAttr, index)
	}
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return [16]byte{}, verbs.ErrClosed
	}
	var raw [16]C.uint8_t
	var v2 C.int
	if rc := C.gr_query_gid(d.ctx, C.uint8_t(d.port), C.int(tableIndex(index, d.gidIdx)), &raw[0], &v2); rc != 0 {
		e := errnoError("ibv_query_gid", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("index %d", index)
		return [16]byte{}, e
	}
	var g [16]byte
	for i := range raw {
		g[i] = byte(raw[i])
	}
	return g, nil
}

// Addr returns the IP address of the device's GID (index 0).
func (d *Device) Addr() netip.Addr {
	g, err := d.GID(0)
	if err != nil {
		return netip.Addr{}
	}
	return netip.AddrFrom16(g).Unmap()
}

// ActiveMTU returns the port's active MTU, or 0 if it cannot be read.
func (d *Device) ActiveMTU() verbs.MTU {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return 0
	}
	var pa C.gr_port
	if C.gr_query_port(d.ctx, C.uint8_t(d.port), &pa) != 0 {
		return 0
	}
	return verbs.MTU(pa.active_mtu)
}

// Events returns the channel of asynchronous events. Events that find it
// full are dropped and counted (DroppedEvents); Close closes it.
func (d *Device) Events() <-chan verbs.Event { return d.events }

func (d *Device) newID() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	return id
}

// Close destroys every object made from the device (QPs, SRQs, AHs, MRs,
// CQs, PDs, in that order), stops the event goroutine, closes the
// device, and closes Events. Closing twice is harmless.
func (d *Device) Close() error {
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.stop.Store(true)
	var one = [8]byte{1}
	unix.Write(d.wake, one[:])
	d.wg.Wait()

	d.mu.RLock()
	qps, srqs, ahs := keys(d.qps), values(d.srqs), keys(d.ahs)
	mrs, cqs, pds := keys(d.mrs), values(d.cqs), keys(d.pds)
	d.mu.RUnlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.destroy())
	}
	for _, s := range srqs {
		errs = append(errs, s.destroy())
	}
	for _, a := range ahs {
		errs = append(errs, a.destroy())
	}
	for _, m := range mrs {
		errs = append(errs, m.dereg())
	}
	for _, c := range cqs {
		errs = append(errs, c.destroy())
	}
	for _, p := range pds {
		errs = append(errs, p.dealloc())
	}
	errs = append(errs, d.release())
	close(d.events)
	d.log.Debug("close device", "device", d.name)
	return errors.Join(errs...)
}

func keys[K comparable, V any](m map[K]V) []K {
	s := make([]K, 0, len(m))
	for k := range m {
		s = append(s, k)
	}
	return s
}

func values[K comparable, V any](m map[K]V) []V {
	s := make([]V, 0, len(m))
	for _, v := range m {
		s = append(s, v)
	}
	return s
}

// PD is a protection domain. It is safe for concurrent use.
type PD struct {
	dev  *Device
	pd   *C.struct_ibv_pd
	mu   sync.Mutex
	dead bool
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return nil, verbs.ErrClosed
	}
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, cErr("ibv_alloc_pd", err)
	}
	p := &PD{dev: d, pd: pd}
	d.mu.Lock()
	d.pds[p] = struct{}{}
	d.mu.Unlock()
	return p, nil
}

// Dealloc frees the PD; it fails with verbs.ErrBusy while objects use it.
func (p *PD) Dealloc() error {
	p.dev.life.RLock()
	defer p.dev.life.RUnlock()
	return p.dealloc()
}

func (p *PD) dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoError("ibv_dealloc_pd", syscall.Errno(C.gr_errno_ret(rc)))
	}
	p.dead = true
	p.dev.mu.Lock()
	delete(p.dev.pds, p)
	p.dev.mu.Unlock()
	return nil
}

// usable reports an error if the PD cannot make objects: destroyed, or
// its device closed. The caller holds dev.life.
func (p *PD) usable() error {
	if p.dev.closed {
		return verbs.ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return verbs.ErrDestroyed
	}
	return nil
}

// MR is a registered memory region. It is safe for concurrent use.
type MR struct {
	pd   *PD
	mr   *C.struct_ibv_mr
	buf  []byte
	pin  runtime.Pinner
	addr uint64
	lkey uint32
	rkey uint32
	mu   sync.Mutex
	dead bool
}

// RegMR registers buf, which must not be empty. Memory from Alloc is
// registered as it is; Go memory is pinned until Dereg (see the package
// documentation).
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	p.dev.life.RLock()
	defer p.dev.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", verbs.ErrInvalidAttr)
	}
	if access&^verbs.KnownAccess != 0 {
		return nil, fmt.Errorf("%w: access %v", verbs.ErrInvalidAttr, access)
	}
	m := &MR{pd: p, buf: buf}
	m.pin.Pin(&buf[0])
	mr, err := C.gr_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		m.pin.Unpin()
		e := cErr("ibv_reg_mr", err)
		e.Detail = fmt.Sprintf("%d bytes, %v", len(buf), access)
		return nil, e
	}
	m.mr, m.addr = mr, uint64(uintptr(unsafe.Pointer(&buf[0])))
	m.lkey, m.rkey = uint32(mr.lkey), uint32(mr.rkey)
	p.dev.mu.Lock()
	p.dev.mrs[m] = struct{}{}
	p.dev.mu.Unlock()
	return m, nil
}

// Addr returns the address of Bytes()[0], which peers and SGEs use.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length.
func (m *MR) Len() int { return len(m.buf) }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// Dereg deregisters the region and unpins Go memory.
func (m *MR) Dereg() error {
	m.pd.dev.life.RLock()
	defer m.pd.dev.life.RUnlock()
	return m.dereg()
}

func (m *MR) dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoError("ibv_dereg_mr", syscall.Errno(C.gr_errno_ret(rc)))
	}
	m.dead = true
	m.pin.Unpin()
	d := m.pd.dev
	d.mu.Lock()
	delete(d.mrs, m)
	d.mu.Unlock()
	return nil
}

// CQ is a completion queue. It is safe for concurrent use.
type CQ struct {
	dev *Device
	id  uint64
	ch  chan struct{}

	mu     sync.Mutex
	cq     *C.struct_ibv_cq
	b      *C.gr_cqb
	out    []C.gr_wc // b.out, as Go sees it
	ph, pn int       // completions polled by Wait and not yet returned: out[ph:ph+pn]
	dead   bool
}

// CreateCQ creates a completion queue of at least cqe entries, attached
// to the device's completion channel.
func (d *Device) CreateCQ(cqe int) (verbs.CQ, error) {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return nil, verbs.ErrClosed
	}
	if cqe < 1 || cqe > 1<<30 {
		return nil, fmt.Errorf("%w: %d entries", verbs.ErrInvalidCap, cqe)
	}
	c := &CQ{dev: d, id: d.newID(), ch: make(chan struct{}, 1)}
	cq, err := C.gr_create_cq(d.ctx, C.int(cqe), C.uint64_t(c.id), d.ch)
	if cq == nil {
		e := cErr("ibv_create_cq", err)
		e.Detail = fmt.Sprintf("%d entries", cqe)
		return nil, e
	}
	c.cq = cq
	c.b = C.gr_cqb_new(cq, pollBatch)
	if c.b == nil {
		C.ibv_destroy_cq(cq)
		return nil, errnoError("calloc", syscall.ENOMEM)
	}
	c.out = unsafe.Slice(c.b.out, pollBatch)
	d.mu.Lock()
	d.cqs[c.id] = c
	d.mu.Unlock()
	return c, nil
}

func fromCWC(w *verbs.WC, c *C.gr_wc) {
	*w = verbs.WC{
		ID: uint64(c.id), Status: verbs.Status(c.status), Opcode: verbs.WCOpcode(c.opcode),
		VendorErr: uint32(c.vendor_err), ByteLen: uint32(c.byte_len), Imm: uint32(c.imm),
		QPN: uint32(c.qp_num), SrcQP: uint32(c.src_qp), Flags: verbs.WCFlags(c.flags),
		PKeyIndex: uint16(c.pkey_index), SLID: uint16(c.slid), SL: uint8(c.sl),
		DLIDPathBits: uint8(c.dlid_path_bits),
	}
}

// Poll moves up to len(wc) completions into wc and returns how many. It
// does not block and allocates nothing.
func (c *CQ) Poll(wc []verbs.WC) int {
	if len(wc) == 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return 0
	}
	got := 0
	for c.pn > 0 && got < len(wc) {
		fromCWC(&wc[got], &c.out[c.ph])
		c.ph++
		c.pn--
		got++
	}
	if c.pn > 0 {
		return got
	}
	for got < len(wc) {
		want := min(len(wc)-got, pollBatch)
		k := int(C.gr_poll(c.b, C.int(want)))
		if k <= 0 {
			break
		}
		for i := range k {
			fromCWC(&wc[got+i], &c.out[i])
		}
		got += k
		if k < want {
			break
		}
	}
	return got
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (only a
// solicited one, if solicitedOnly) sends a value on C.
func (c *CQ) ReqNotify(solicitedOnly bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	if rc := C.ibv_req_notify_cq(c.cq, so); rc != 0 {
		c.dev.log.Warn("ibv_req_notify_cq failed", "err", syscall.Errno(C.gr_errno_ret(rc)))
	}
}

// C returns the completion channel: a value arrives on it after an armed
// CQ gets a completion.
func (c *CQ) C() <-chan struct{} { return c.ch }

// ready polls into the CQ's own buffer; it reports whether a completion
// is waiting there.
func (c *CQ) ready(arm bool) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false, verbs.ErrDestroyed
	}
	if c.pn > 0 {
		return true, nil
	}
	if arm {
		if rc := C.ibv_req_notify_cq(c.cq, 0); rc != 0 {
			return false, errnoError("ibv_req_notify_cq", syscall.Errno(C.gr_errno_ret(rc)))
		}
	}
	k := int(C.gr_poll(c.b, pollBatch))
	if k > 0 {
		c.ph, c.pn = 0, k
		return true, nil
	}
	return false, nil
}

// Wait blocks until a completion is waiting or ctx is done. It arms the
// CQ and takes values from C while it waits.
func (c *CQ) Wait(ctx context.Context) error {
	for {
		if ok, err := c.ready(false); ok || err != nil {
			return err
		}
		if ok, err := c.ready(true); ok || err != nil {
			return err
		}
		select {
		case <-c.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Destroy frees the CQ; it fails with verbs.ErrBusy while QPs use it.
// Completions not yet polled are lost.
func (c *CQ) Destroy() error {
	c.dev.life.RLock()
	defer c.dev.life.RUnlock()
	return c.destroy()
}

func (c *CQ) destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
		return errnoError("ibv_destroy_cq", syscall.Errno(C.gr_errno_ret(rc)))
	}
	c.dead = true
	C.gr_cqb_free(c.b)
	c.b, c.out, c.pn = nil, nil, 0
	select { // wake a Wait, which then sees the CQ is gone
	case c.ch <- struct{}{}:
	default:
	}
	c.dev.mu.Lock()
	delete(c.dev.cqs, c.id)
	c.dev.mu.Unlock()
	return nil
}

// QP is a queue pair. It is safe for concurrent use: posts to the send
// queue, posts to the receive queue and the control path each have their
// own lock.
type QP struct {
	dev *Device
	pd  *PD
	typ verbs.QPType
	qpn uint32
	cap verbs.QPCap
	srq *SRQ
	qp  *C.struct_ibv_qp

	amu  sync.Mutex // Modify, Query, Destroy
	dead atomic.Bool

	smu       sync.Mutex
	sq        *C.gr_sq
	swr       []C.gr_swr
	sge       []C.struct_ibv_sge
	inl       []byte
	inlAddr   uint64
	maxSGE    int
	maxInline int

	rmu sync.Mutex
	rq  recvBatch
}

// recvBatch is the Go view of a gr_rq.
type recvBatch struct {
	r      *C.gr_rq
	rwr    []C.gr_rwr
	sge    []C.struct_ibv_sge
	max    int
	maxSGE int
	op     string
}

func newRecvBatch(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, max, maxSGE int) (recvBatch, bool) {
	r := C.gr_rq_new(qp, srq, C.int(max), C.int(maxSGE))
	if r == nil {
		return recvBatch{}, false
	}
	op := "ibv_post_recv"
	if srq != nil {
		op = "ibv_post_srq_recv"
	}
	return recvBatch{r: r, rwr: unsafe.Slice(r.rwr, max), sge: unsafe.Slice(r.sge, max*maxSGE),
		max: max, maxSGE: maxSGE, op: op}, true
}

func (b *recvBatch) free() {
	C.gr_rq_free(b.r)
	*b = recvBatch{}
}

// post posts wrs in batches; the caller holds the queue's lock.
func (b *recvBatch) post(wrs []verbs.RecvWR) error {
	for base := 0; base < len(wrs); {
		n := min(len(wrs)-base, b.max)
		for i := range n {
			wr := &wrs[base+i]
			if len(wr.SGL) > b.maxSGE {
				if i > 0 {
					if err := b.flush(base, i); err != nil {
						return err
					}
				}
				return &verbs.PostError{Index: base + i, Err: verbs.ErrTooManySGE}
			}
			b.rwr[i].id = C.uint64_t(wr.ID)
			b.rwr[i].num_sge = C.uint32_t(len(wr.SGL))
			sge := b.sge[i*b.maxSGE:]
			for j, s := range wr.SGL {
				sge[j].addr, sge[j].length, sge[j].lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
			}
		}
		if err := b.flush(base, n); err != nil {
			return err
		}
		base += n
	}
	return nil
}

func (b *recvBatch) flush(base, n int) error {
	if rc := C.gr_post_recv(b.r, C.int(n)); rc != 0 {
		return &verbs.PostError{Index: base + int(b.r.bad), Err: errnoError(b.op, syscall.Errno(rc))}
	}
	return nil
}

// CreateQP creates a queue pair in the RESET state. Its CQs (and SRQ)
// must come from the same device; a GSI QP cannot be made (the kernel
// owns QP 1).
func (p *PD) CreateQP(init *verbs.QPInitAttr) (verbs.QP, error) {
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("%w: send and receive CQs of this device are required", verbs.ErrForeign)
	}
	var srq *SRQ
	if init.SRQ != nil {
		s, ok := init.SRQ.(*SRQ)
		if !ok || s == nil || s.pd != p {
			return nil, fmt.Errorf("%w: SRQ of another PD or backend", verbs.ErrForeign)
		}
		srq = s
	}
	var qt C.uint32_t
	switch init.Type {
	case verbs.RC:
		qt = C.IBV_QPT_RC
	case verbs.UC:
		qt = C.IBV_QPT_UC
	case verbs.UD:
		qt = C.IBV_QPT_UD
	case verbs.GSI:
		return nil, fmt.Errorf("%w: a GSI QP (QP 1 belongs to the kernel)", ErrUnsupported)
	default:
		return nil, fmt.Errorf("%w: QP type %v", verbs.ErrInvalidAttr, init.Type)
	}
	c := init.Cap
	c.MaxSendWR, c.MaxSendSGE, c.MaxRecvSGE = max(c.MaxSendWR, 1), max(c.MaxSendSGE, 1), max(c.MaxRecvSGE, 1)
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else {
		c.MaxRecvWR = max(c.MaxRecvWR, 1)
	}
	in := C.gr_qpinit{send_cq: scq.cq, recv_cq: rcq.cq, qp_type: qt,
		max_send_wr: C.uint32_t(c.MaxSendWR), max_recv_wr: C.uint32_t(c.MaxRecvWR),
		max_send_sge: C.uint32_t(c.MaxSendSGE), max_recv_sge: C.uint32_t(c.MaxRecvSGE),
		max_inline: C.uint32_t(c.MaxInlineData)}
	if srq != nil {
		in.srq = srq.srq
	}
	if init.SignalAll {
		in.sig_all = 1
	}
	qp, err := C.gr_create_qp(p.pd, &in)
	if qp == nil {
		e := cErr("ibv_create_qp", err)
		e.Detail = fmt.Sprintf("%v %+v", init.Type, init.Cap)
		return nil, e
	}
	q := &QP{dev: d, pd: p, typ: init.Type, qpn: uint32(qp.qp_num), srq: srq, qp: qp,
		cap: verbs.QPCap{MaxSendWR: uint32(in.max_send_wr), MaxRecvWR: uint32(in.max_recv_wr),
			MaxSendSGE: uint32(in.max_send_sge), MaxRecvSGE: uint32(in.max_recv_sge),
			MaxInlineData: uint32(in.max_inline)}}
	if err := q.makeBatches(); err != nil {
		q.freeBatches()
		C.ibv_destroy_qp(qp)
		return nil, err
	}
	d.mu.Lock()
	d.qps[q] = struct{}{}
	d.mu.Unlock()
	d.log.Debug("create QP", "qpn", q.qpn, "type", q.typ, "cap", q.cap)
	return q, nil
}

func (q *QP) makeBatches() error {
	c := q.cap
	q.maxSGE = max(int(c.MaxSendSGE), 1)
	q.maxInline = int(min(c.MaxInlineData, 1<<16))
	n := int(min(max(c.MaxSendWR, 1), postBatch))
	ud := C.int(0)
	if q.typ == verbs.UD {
		ud = 1
	}
	q.sq = C.gr_sq_new(q.qp, C.int(n), C.int(q.maxSGE), C.int(q.maxInline), ud)
	if q.sq == nil {
		return errnoError("calloc", syscall.ENOMEM)
	}
	q.swr = unsafe.Slice(q.sq.swr, n)
	q.sge = unsafe.Slice(q.sq.sge, n*q.maxSGE)
	if q.maxInline > 0 {
		q.inl = unsafe.Slice((*byte)(unsafe.Pointer(q.sq.inl)), n*q.maxInline)
		q.inlAddr = uint64(uintptr(unsafe.Pointer(q.sq.inl)))
	}
	if q.srq == nil {
		var ok bool
		if q.rq, ok = newRecvBatch(q.qp, nil, int(min(max(c.MaxRecvWR, 1), postBatch)), max(int(c.MaxRecvSGE), 1)); !ok {
			return errnoError("calloc", syscall.ENOMEM)
		}
	}
	return nil
}

func (q *QP) freeBatches() {
	C.gr_sq_free(q.sq)
	q.sq, q.swr, q.sge, q.inl = nil, nil, nil, nil
	if q.rq.r != nil {
		q.rq.free()
	}
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the QP's transport service.
func (q *QP) Type() verbs.QPType { return q.typ }

// Cap returns the queue sizes the device gave the QP.
func (q *QP) Cap() verbs.QPCap { return q.cap }

func (d *Device) toCAH(g *C.gr_ah, a *verbs.AHAttr) {
	for i, b := range a.DGID {
		g.dgid[i] = C.uint8_t(b)
	}
	g.flow_label = C.uint32_t(a.FlowLabel)
	g.sgid_index = C.uint8_t(tableIndex(int(a.SGIDIndex), d.gidIdx))
	g.hop_limit = C.uint8_t(a.HopLimit)
	g.traffic_class = C.uint8_t(a.TrafficClass)
	g.sl = C.uint8_t(a.SL)
	g.port = C.uint8_t(a.Port)
	if a.Port == 0 {
		g.port = C.uint8_t(d.port)
	}
}

func (d *Device) fromCAH(a *verbs.AHAttr, g *C.gr_ah) {
	for i := range a.DGID {
		a.DGID[i] = byte(g.dgid[i])
	}
	a.FlowLabel = uint32(g.flow_label)
	a.SGIDIndex = uint8(verbsIndex(int(g.sgid_index), d.gidIdx))
	a.HopLimit, a.TrafficClass = uint8(g.hop_limit), uint8(g.traffic_class)
	a.SL, a.Port = uint8(g.sl), uint8(g.port)
}

// Modify changes attributes and state (ibv_modify_qp). GID index 0 in the
// address vector is the device's GID. When the device refuses with
// EINVAL, the error says why where the transition table can tell
// (verbs.ErrInvalidTransition, ErrMissingAttr, ErrExtraAttr), and is
// verbs.ErrInvalidAttr otherwise.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	if mask&verbs.AttrRQPSN != 0 && !attr.RQPSN.Valid() || mask&verbs.AttrSQPSN != 0 && !attr.SQPSN.Valid() {
		return fmt.Errorf("%w: PSN beyond 24 bits", verbs.ErrInvalidAttr)
	}
	if mask&verbs.AttrDestQPN != 0 && attr.DestQPN > bth.MaxQPN {
		return fmt.Errorf("%w: dest QPN %#x", verbs.ErrInvalidAttr, attr.DestQPN)
	}
	a := C.gr_qpattr{state: C.uint32_t(attr.State), cur_state: C.uint32_t(attr.CurState),
		path_mtu: C.uint32_t(attr.PathMTU), qkey: C.uint32_t(attr.QKey), rq_psn: C.uint32_t(attr.RQPSN),
		sq_psn: C.uint32_t(attr.SQPSN), dest_qpn: C.uint32_t(attr.DestQPN), access: C.uint32_t(attr.Access),
		pkey_index: C.uint16_t(attr.PKeyIndex), port: C.uint8_t(attr.Port), timeout: C.uint8_t(attr.Timeout),
		retry_cnt: C.uint8_t(attr.RetryCnt), rnr_retry: C.uint8_t(attr.RNRRetry),
		min_rnr_timer: C.uint8_t(attr.MinRNRTimer), max_rd_atomic: C.uint8_t(attr.MaxRDAtomic),
		max_dest_rd_atomic: C.uint8_t(attr.MaxDestRDAtomic)}
	if attr.SQDrainNotify {
		a.sqd_notify = 1
	}
	q.dev.toCAH(&a.ah, &attr.AH)
	if rc := C.gr_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		e := errnoError("ibv_modify_qp", syscall.Errno(rc))
		if e.Errno == syscall.EINVAL {
			if cur, err := q.query(); err == nil {
				next := cur.State
				if mask&verbs.AttrState != 0 {
					next = attr.State
				}
				if k := classifyModify(q.typ, cur.State, next, mask); k != nil {
					e.Kind = k
				}
			}
		}
		e.Detail = fmt.Sprintf("QP %d mask %v", q.qpn, mask)
		return e
	}
	if mask&verbs.AttrState != 0 {
		q.dev.log.Debug("modify QP", "qpn", q.qpn, "state", attr.State, "mask", mask,
			"sq_psn", uint32(attr.SQPSN), "rq_psn", uint32(attr.RQPSN))
	}
	return nil
}

// Query returns the QP's current attributes (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, error) {
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	if q.dead.Load() {
		return verbs.QPAttr{}, verbs.ErrDestroyed
	}
	return q.query()
}

func (q *QP) query() (verbs.QPAttr, error) {
	var g C.gr_qpattr
	if rc := C.gr_query_qp(q.qp, &g); rc != 0 {
		return verbs.QPAttr{}, errnoError("ibv_query_qp", syscall.Errno(rc))
	}
	a := verbs.QPAttr{State: verbs.QPState(g.state), CurState: verbs.QPState(g.cur_state),
		PathMTU: verbs.MTU(g.path_mtu), QKey: uint32(g.qkey), RQPSN: bth.PSN(g.rq_psn),
		SQPSN: bth.PSN(g.sq_psn), DestQPN: uint32(g.dest_qpn), Access: verbs.Access(g.access),
		PKeyIndex: uint16(g.pkey_index), Port: uint8(g.port), Timeout: uint8(g.timeout),
		RetryCnt: uint8(g.retry_cnt), RNRRetry: uint8(g.rnr_retry), MinRNRTimer: uint8(g.min_rnr_timer),
		MaxRDAtomic: uint8(g.max_rd_atomic), MaxDestRDAtomic: uint8(g.max_dest_rd_atomic),
		SQDrainNotify: g.sqd_notify != 0,
		Cap: verbs.QPCap{MaxSendWR: uint32(g.max_send_wr), MaxRecvWR: uint32(g.max_recv_wr),
			MaxSendSGE: uint32(g.max_send_sge), MaxRecvSGE: uint32(g.max_recv_sge),
			MaxInlineData: uint32(g.max_inline)}}
	q.dev.fromCAH(&a.AH, &g.ah)
	return a, nil
}

// PostSend posts send work requests. They are checked and translated
// into the QP's C batch, up to 32 at a time, and posted with one
// ibv_post_send per batch; a refused one is a *verbs.PostError, and it
// and those after it are not posted. PostSend allocates nothing unless it
// fails.
func (q *QP) PostSend(wrs []verbs.SendWR) error {
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	for base := 0; base < len(wrs); {
		n := min(len(wrs)-base, len(q.swr))
		for i := range n {
			if err := q.fillSend(i, &wrs[base+i]); err != nil {
				if i > 0 {
					if perr := q.flushSend(base, i); perr != nil {
						return perr
					}
				}
				return &verbs.PostError{Index: base + i, Err: err}
			}
		}
		if err := q.flushSend(base, n); err != nil {
			return err
		}
		base += n
	}
	return nil
}

func (q *QP) flushSend(base, n int) error {
	if rc := C.gr_post_send(q.sq, C.int(n)); rc != 0 {
		return &verbs.PostError{Index: base + int(q.sq.bad), Err: errnoError("ibv_post_send", syscall.Errno(rc))}
	}
	return nil
}

// fillSend checks wr and writes it into slot i of the send batch.
func (q *QP) fillSend(i int, wr *verbs.SendWR) error {
	if err := checkSendOp(q.typ, wr.Opcode); err != nil {
		return err
	}
	g := &q.swr[i]
	sge := q.sge[i*q.maxSGE : (i+1)*q.maxSGE]
	if wr.Flags&verbs.Inline != 0 {
		if len(wr.InlineData) > q.maxInline {
			return verbs.ErrInlineTooLong
		}
		if wr.Opcode.NeedsResponse() {
			return fmt.Errorf("%w: inline %v", verbs.ErrInvalidWR, wr.Opcode)
		}
		off := i * q.maxInline
		n := copy(q.inl[off:off+q.maxInline], wr.InlineData)
		sge[0].addr, sge[0].length, sge[0].lkey = C.uint64_t(q.inlAddr+uint64(off)), C.uint32_t(n), 0
		g.num_sge = 0
		if n > 0 {
			g.num_sge = 1
		}
	} else {
		if len(wr.SGL) > q.maxSGE {
			return verbs.ErrTooManySGE
		}
		for j, s := range wr.SGL {
			sge[j].addr, sge[j].length, sge[j].lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
		}
		g.num_sge = C.uint32_t(len(wr.SGL))
	}
	if wr.Opcode.IsAtomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		return fmt.Errorf("%w: an atomic takes one 8-byte SGE", verbs.ErrInvalidWR)
	}
	g.id, g.opcode, g.flags = C.uint64_t(wr.ID), C.uint32_t(wr.Opcode), C.uint32_t(wr.Flags)
	g.imm = C.uint32_t(wr.Imm)
	if wr.Opcode == verbs.OpSendInv || wr.Opcode == verbs.OpLocalInv {
		g.imm = C.uint32_t(wr.InvRKey)
	}
	g.remote_addr, g.rkey = C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey)
	g.compare_add, g.swap = C.uint64_t(wr.CompareAdd), C.uint64_t(wr.Swap)
	g.ah = nil
	if q.typ == verbs.UD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah == nil {
			return fmt.Errorf("%w: a UD send needs an address handle of this backend", verbs.ErrInvalidWR)
		}
		if ah.pd.dev != q.dev || ah.dead.Load() {
			return fmt.Errorf("%w: address handle of another device, or destroyed", verbs.ErrInvalidWR)
		}
		if wr.RemoteQPN > bth.MaxQPN {
			return fmt.Errorf("%w: remote QPN %#x", verbs.ErrInvalidWR, wr.RemoteQPN)
		}
		g.ah, g.remote_qpn, g.remote_qkey = ah.ah, C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	}
	return nil
}

// PostRecv posts receive work requests to the QP's own receive queue,
// batched like PostSend; it fails with verbs.ErrHasSRQ on a QP with an
// SRQ.
func (q *QP) PostRecv(wrs []verbs.RecvWR) error {
	if q.srq != nil {
		return verbs.ErrHasSRQ
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	return q.rq.post(wrs)
}

// Destroy destroys the QP (ibv_destroy_qp); outstanding work requests
// complete no more.
func (q *QP) Destroy() error {
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	return q.destroy()
}

func (q *QP) destroy() error {
	q.amu.Lock()
	defer q.amu.Unlock()
	q.smu.Lock()
	defer q.smu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoError("ibv_destroy_qp", syscall.Errno(C.gr_errno_ret(rc)))
	}
	q.dead.Store(true)
	q.freeBatches()
	q.dev.mu.Lock()
	delete(q.dev.qps, q)
	q.dev.mu.Unlock()
	q.dev.log.Debug("destroy QP", "qpn", q.qpn)
	return nil
}

// SRQ is a shared receive queue. It is safe for concurrent use.
type SRQ struct {
	pd   *PD
	id   uint64
	srq  *C.struct_ibv_srq
	mu   sync.Mutex
	rq   recvBatch
	dead bool
}

// CreateSRQ creates a shared receive queue; a Limit above 0 arms the SRQ
// limit event at once (ibv_modify_srq, since ibv_create_srq ignores it).
func (p *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	if attr.MaxWR == 0 || attr.Limit > attr.MaxWR {
		return nil, fmt.Errorf("%w: SRQ max_wr %d limit %d", verbs.ErrInvalidCap, attr.MaxWR, attr.Limit)
	}
	attr.MaxSGE = max(attr.MaxSGE, 1)
	s := &SRQ{pd: p, id: d.newID()}
	srq, err := C.gr_create_srq(p.pd, C.uint64_t(s.id), C.uint32_t(attr.MaxWR), C.uint32_t(attr.MaxSGE))
	if srq == nil {
		e := cErr("ibv_create_srq", err)
		e.Detail = fmt.Sprintf("%+v", attr)
		return nil, e
	}
	s.srq = srq
	var ok bool
	if s.rq, ok = newRecvBatch(nil, srq, int(min(attr.MaxWR, postBatch)), int(attr.MaxSGE)); !ok {
		C.ibv_destroy_srq(srq)
		return nil, errnoError("calloc", syscall.ENOMEM)
	}
	if attr.Limit > 0 {
		if rc := C.gr_modify_srq(srq, C.uint32_t(attr.Limit)); rc != 0 {
			s.rq.free()
			C.ibv_destroy_srq(srq)
			return nil, errnoError("ibv_modify_srq", syscall.Errno(rc))
		}
	}
	d.mu.Lock()
	d.srqs[s.id] = s
	d.mu.Unlock()
	return s, nil
}

// PostRecv posts receives to the SRQ, batched like QP.PostRecv.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	return s.rq.post(wrs)
}

// Modify arms the SRQ limit event: when fewer than limit receives remain,
// the device reports verbs.EventSRQLimitReached once.
func (s *SRQ) Modify(limit uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.gr_modify_srq(s.srq, C.uint32_t(limit)); rc != 0 {
		e := errnoError("ibv_modify_srq", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("limit %d", limit)
		return e
	}
	return nil
}

// Destroy destroys the SRQ; it fails with verbs.ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	s.pd.dev.life.RLock()
	defer s.pd.dev.life.RUnlock()
	return s.destroy()
}

func (s *SRQ) destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
		return errnoError("ibv_destroy_srq", syscall.Errno(C.gr_errno_ret(rc)))
	}
	s.dead = true
	s.rq.free()
	d := s.pd.dev
	d.mu.Lock()
	delete(d.srqs, s.id)
	d.mu.Unlock()
	return nil
}

// AH is an address handle, for UD sends. It is safe for concurrent use.
type AH struct {
	pd   *PD
	ah   *C.struct_ibv_ah
	attr verbs.AHAttr
	mu   sync.Mutex
	dead atomic.Bool
}

// CreateAH creates an address handle with a GRH towards attr.DGID.
// SGIDIndex 0 is the device's GID; Port 0 means the device's port.
func (p *PD) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	var g C.gr_ah
	d.toCAH(&g, &attr)
	ah, err := C.gr_create_ah(p.pd, &g)
	if ah == nil {
		e := cErr("ibv_create_ah", err)
		e.Detail = fmt.Sprintf("to %v", attr.DestAddr())
		return nil, e
	}
	a := &AH{pd: p, ah: ah, attr: attr}
	d.mu.Lock()
	d.ahs[a] = struct{}{}
	d.mu.Unlock()
	return a, nil
}

// Attr returns the attributes the handle was created with.
func (a *AH) Attr() verbs.AHAttr { return a.attr }

// Destroy destroys the address handle.
func (a *AH) Destroy() error {
	a.pd.dev.life.RLock()
	defer a.pd.dev.life.RUnlock()
	return a.destroy()
}

func (a *AH) destroy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dead.Load() {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_ah(a.ah); rc != 0 {
		return errnoError("ibv_destroy_ah", syscall.Errno(C.gr_errno_ret(rc)))
	}
	a.dead.Store(true)
	d := a.pd.dev
	d.mu.Lock()
	delete(d.ahs, a)
	d.mu.Unlock()
	return nil
}
