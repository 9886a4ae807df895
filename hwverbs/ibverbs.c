//go:build hwverbs && cgo && linux

// ibverbs.c is the C side of package hwverbs: the batches of work requests
// and completions the Go side fills and reads, and the calls to
// libibverbs that take structs with unions. ibverbs.h says what each
// function does.

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include "ibverbs.h"

// goroce's verbs use ibverbs' numbering; these fail the build if a
// header ever disagrees.
_Static_assert(IBV_WR_RDMA_WRITE == 0 && IBV_WR_RDMA_WRITE_WITH_IMM == 1 && IBV_WR_SEND == 2 &&
	IBV_WR_SEND_WITH_IMM == 3 && IBV_WR_RDMA_READ == 4 && IBV_WR_ATOMIC_CMP_AND_SWP == 5 &&
	IBV_WR_ATOMIC_FETCH_AND_ADD == 6 && IBV_WR_LOCAL_INV == 7 && IBV_WR_BIND_MW == 8 && IBV_WR_SEND_WITH_INV == 9,
	"ibv_wr_opcode");
_Static_assert(IBV_WR_ATOMIC_WRITE == GR_WR_ATOMIC_WRITE && IBV_WC_ATOMIC_WRITE == 9 &&
	IBV_QP_EX_WITH_ATOMIC_WRITE == GR_QP_EX_WITH_ATOMIC_WRITE, "ATOMIC_WRITE (rdma-core 44 has it)");
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
	IBV_ACCESS_REMOTE_ATOMIC == 8 && IBV_ACCESS_MW_BIND == 16 && IBV_ACCESS_ZERO_BASED == 32, "ibv_access_flags");
_Static_assert(IBV_MW_TYPE_1 == 1 && IBV_MW_TYPE_2 == 2 && IBV_WC_MW_BIND_ERR == 6 && IBV_WC_LOC_QP_OP_ERR == 2,
	"ibv_mw_type, MW statuses");
_Static_assert(IBV_QPS_RESET == 0 && IBV_QPS_ERR == 6 && IBV_MTU_256 == 1 && IBV_MTU_4096 == 5, "states, MTUs");
_Static_assert(IBV_EVENT_CQ_ERR == 0 && IBV_EVENT_QP_FATAL == 1 && IBV_EVENT_QP_REQ_ERR == 2 &&
	IBV_EVENT_QP_ACCESS_ERR == 3 && IBV_EVENT_COMM_EST == 4 && IBV_EVENT_SQ_DRAINED == 5 &&
	IBV_EVENT_SRQ_LIMIT_REACHED == 15 && IBV_EVENT_QP_LAST_WQE_REACHED == 16, "ibv_event_type");

void gr_sq_free(gr_sq *s) {
	if (!s)
		return;
	free(s->swr);
	free(s->sge);
	free(s->wr);
	free(s->inl);
	free(s);
}

gr_sq *gr_sq_new(struct ibv_qp *qp, int max, int max_sge, int max_inline, int ud) {
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

int gr_post_send(gr_sq *s, int n) {
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
		if (g->opcode == IBV_WR_BIND_MW) {
			w->bind_mw.mw = g->mw;
			w->bind_mw.rkey = g->mw_rkey;
			w->bind_mw.bind_info.mr = g->mw_mr;
			w->bind_mw.bind_info.addr = g->mw_addr;
			w->bind_mw.bind_info.length = g->mw_length;
			w->bind_mw.bind_info.mw_access_flags = g->mw_access;
		} else if (s->ud) {
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

void gr_rq_free(gr_rq *r) {
	if (!r)
		return;
	free(r->rwr);
	free(r->sge);
	free(r->wr);
	free(r);
}

gr_rq *gr_rq_new(struct ibv_qp *qp, struct ibv_srq *srq, int max, int max_sge) {
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

int gr_post_recv(gr_rq *r, int n) {
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

void gr_cqb_free(gr_cqb *b) {
	if (!b)
		return;
	free(b->wc);
	free(b->out);
	free(b);
}

gr_cqb *gr_cqb_new(struct ibv_cq *cq, int max) {
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

int gr_poll(gr_cqb *b, int n) {
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

int64_t gr_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -(int64_t)(errno ? errno : EIO);
	ibv_ack_cq_events(cq, 1);
	return (int64_t)(uintptr_t)ctx;
}

int gr_async_event(struct ibv_context *c, gr_aev *out) {
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

int gr_query_port(struct ibv_context *c, uint8_t port, gr_port *out) {
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

int gr_query_gid(struct ibv_context *c, uint8_t port, int index, uint8_t *gid, int *roce2) {
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

struct ibv_mr *gr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

struct ibv_cq *gr_create_cq(struct ibv_context *c, int cqe, uint64_t id, struct ibv_comp_channel *ch) {
	return ibv_create_cq(c, cqe, (void *)(uintptr_t)id, ch, 0);
}

struct ibv_srq *gr_create_srq(struct ibv_pd *pd, uint64_t id, uint32_t max_wr, uint32_t max_sge) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.srq_context = (void *)(uintptr_t)id;
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	struct ibv_srq *s = ibv_create_srq(pd, &a);
	return s;
}

int gr_modify_srq(struct ibv_srq *s, uint32_t limit) {
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof a);
	a.srq_limit = limit;
	int rc = ibv_modify_srq(s, &a, IBV_SRQ_LIMIT);
	return rc < 0 ? -rc : rc;
}

struct ibv_qp *gr_create_qp(struct ibv_pd *pd, gr_qpinit *in) {
	struct ibv_qp_init_attr_ex a;
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
	a.pd = pd;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	struct ibv_qp *qp = NULL;
	if (in->ex_ops) {
		// Only FLUSH and ATOMIC_WRITE go through the ibv_wr_* API: the
		// rest keeps ibv_post_send, which may interleave with it.
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = in->ex_ops;
		qp = ibv_create_qp_ex(pd->context, &a);
		if (!qp) {
			// A library or device without these operations: make the
			// QP without them.
			in->ex_ops = 0;
			a.comp_mask = IBV_QP_INIT_ATTR_PD;
			a.send_ops_flags = 0;
		}
	}
	if (!qp)
		qp = ibv_create_qp_ex(pd->context, &a);
	if (qp) {
		in->max_send_wr = a.cap.max_send_wr;
		in->max_recv_wr = a.cap.max_recv_wr;
		in->max_send_sge = a.cap.max_send_sge;
		in->max_recv_sge = a.cap.max_recv_sge;
		in->max_inline = a.cap.max_inline_data;
	}
	return qp;
}

// gr_wr_flush_fn is ibv_qp_ex's wr_flush, which rdma-core 45 appended to
// the struct right after wr_atomic_write (the struct only ever grows at
// its end); the host's rdma-core 44 headers end it before. The slot is
// read only on a QP made with GR_QP_EX_WITH_FLUSH, which a library
// without wr_flush refuses to make.
typedef void (*gr_wr_flush_fn)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len,
	uint8_t type, uint8_t level);

static gr_wr_flush_fn gr_wr_flush(struct ibv_qp_ex *x) {
	gr_wr_flush_fn f;
	memcpy(&f, (char *)x + offsetof(struct ibv_qp_ex, wr_atomic_write) + sizeof x->wr_atomic_write, sizeof f);
	return f;
}

int gr_post_ex(struct ibv_qp *qp, const gr_swr *g) {
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	if (!x)
		return EOPNOTSUPP;
	gr_wr_flush_fn flush = NULL;
	if (g->opcode == GR_WR_FLUSH && !(flush = gr_wr_flush(x)))
		return EOPNOTSUPP;
	if (g->opcode == GR_WR_ATOMIC_WRITE && !x->wr_atomic_write)
		return EOPNOTSUPP;
	ibv_wr_start(x);
	x->wr_id = g->id;
	x->wr_flags = g->flags;
	if (g->opcode == GR_WR_ATOMIC_WRITE) {
		uint64_t v = g->compare_add; // the builder copies the 8 bytes at once
		ibv_wr_atomic_write(x, g->rkey, g->remote_addr, &v);
	} else {
		flush(x, g->rkey, g->remote_addr, g->flush_len, g->flush_type, g->flush_level);
	}
	return gr_errno_ret(ibv_wr_complete(x));
}

int gr_query_device_caps(struct ibv_context *c, uint64_t *caps) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_device_ex(c, NULL, &a);
	if (rc)
		return gr_errno_ret(rc);
	*caps = a.device_cap_flags_ex;
	return 0;
}

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

struct ibv_ah *gr_create_ah(struct ibv_pd *pd, gr_ah *g) {
	struct ibv_ah_attr a;
	gr_fill_ah(&a, g);
	return ibv_create_ah(pd, &a);
}

int gr_modify_qp(struct ibv_qp *qp, const gr_qpattr *g, int mask) {
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

int gr_query_qp(struct ibv_qp *qp, gr_qpattr *g) {
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

int gr_async_fd(struct ibv_context *c) { return c->async_fd; }

int gr_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }

int gr_errno_ret(int rc) { return rc < 0 ? -rc : rc; }

struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, int type) {
	return ibv_alloc_mw(pd, (enum ibv_mw_type)type);
}

int gr_dealloc_mw(struct ibv_mw *mw) {
	return gr_errno_ret(ibv_dealloc_mw(mw));
}

int gr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, const gr_mwbind *b, uint32_t *rkey) {
	struct ibv_mw_bind mb;
	memset(&mb, 0, sizeof mb);
	mb.wr_id = b->id;
	mb.send_flags = b->flags;
	mb.bind_info.mr = b->mr;
	mb.bind_info.addr = b->addr;
	mb.bind_info.length = b->length;
	mb.bind_info.mw_access_flags = b->access;
	int rc = ibv_bind_mw(qp, mw, &mb);
	*rkey = mw->rkey;
	return gr_errno_ret(rc);
}
