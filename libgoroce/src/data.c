/*
 * The data path: posting work requests into the rings the device drains,
 * and polling the completions it writes. No system call unless the device
 * sleeps (then one write to its doorbell).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "goroce.h"

/* How many empty polls in a row before ibv_poll_cq gives its core away
 * (sched_yield): a program that spins on its CQ on a machine with fewer
 * cores than spinners would otherwise keep the device from running. */
#define YIELD_EVERY 16

static inline uint8_t *slot(struct gr_ring *r, uint32_t i) { return r->slots + (size_t)(i & (r->entries - 1)) * r->stride; }

static inline void publish(struct gr_ring *r, uint32_t prod)
{
	atomic_store_explicit((_Atomic uint32_t *)&r->hdr->prod, prod, memory_order_release);
}

/* A work queue is full when max_wr requests are outstanding (posted and
 * not retired by a completion), or its ring has no free slot. */
int gr_wq_full(struct gr_wq *wq)
{
	uint32_t retired = atomic_load_explicit(&wq->retired, memory_order_acquire);
	if (wq->prod - retired >= wq->max_wr)
		return 1;
	uint32_t cons = atomic_load_explicit((_Atomic uint32_t *)&wq->r.hdr->cons, memory_order_acquire);
	return wq->prod - cons >= wq->r.entries;
}

/* Which operations each QP type takes (IBTA: UD sends only; UC no READ or
 * atomics). */
static int op_ok(enum ibv_qp_type t, enum ibv_wr_opcode op)
{
	switch ((int)op) {
	case GR_WR_FLUSH:
	case GR_WR_ATOMIC_WRITE:
		return t == IBV_QPT_RC;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return 1;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
	case IBV_WR_BIND_MW:
		return t == IBV_QPT_RC || t == IBV_QPT_UC;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return t == IBV_QPT_RC;
	default:
		return 0;
	}
}

/* fill_send writes one work request into slot b, as rxe's provider checks
 * it (validate_send_wr): 0, or the errno ibv_post_send returns. */
static int fill_send(struct gr_qp *qp, struct ibv_send_wr *wr, uint8_t *b, uint32_t cookie)
{
	struct ibv_qp *q = &qp->qpx.qp_base;
	struct goroce_send_wqe *e = (struct goroce_send_wqe *)b;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->sq.max_sge)
		return EINVAL;
	if (!op_ok(q->qp_type, wr->opcode) || (int)wr->opcode == GR_WR_FLUSH || (int)wr->opcode == GR_WR_ATOMIC_WRITE)
		return EINVAL; /* those two take arguments ibv_send_wr has no room for: ibv_wr_flush, ibv_wr_atomic_write */
	uint64_t len = 0;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	int inl = wr->send_flags & IBV_SEND_INLINE && wr->opcode != IBV_WR_RDMA_READ &&
		  wr->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD &&
		  wr->opcode != IBV_WR_BIND_MW && wr->opcode != IBV_WR_LOCAL_INV;
	if (inl && len > qp->max_inline)
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (wr->num_sge != 1 || len < 8 || wr->wr.atomic.remote_addr & 7)
			return EINVAL;
		break;
	case IBV_WR_BIND_MW:
		if (wr->num_sge || !wr->bind_mw.mw || wr->bind_mw.mw->type != IBV_MW_TYPE_2)
			return EINVAL;
		break;
	default:
		break;
	}
	if (q->qp_type == IBV_QPT_UD && (!wr->wr.ud.ah || wr->wr.ud.remote_qpn > 0xffffff))
		return EINVAL;
	memset(e, 0, sizeof *e);
	e->wr_id = cookie;
	e->opcode = wr->opcode;
	e->flags = wr->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | (inl ? IBV_SEND_INLINE : 0));
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		e->remote_addr = wr->wr.rdma.remote_addr;
		e->rkey = wr->wr.rdma.rkey;
		e->imm = wr->imm_data;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		e->remote_addr = wr->wr.atomic.remote_addr;
		e->rkey = wr->wr.atomic.rkey;
		e->compare_add = wr->wr.atomic.compare_add;
		e->swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		e->imm = wr->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW: {
		struct goroce_bind_info *bi = (struct goroce_bind_info *)(b + sizeof *e);
		struct ibv_mw_bind_info *i = &wr->bind_mw.bind_info;
		memset(bi, 0, sizeof *bi);
		bi->mw = to_mw(wr->bind_mw.mw)->h;
		bi->rkey = wr->bind_mw.rkey;
		bi->mr = i->mr ? to_mr(i->mr)->h : 0;
		bi->access = i->mw_access_flags;
		bi->addr = i->addr;
		bi->length = i->length;
		return 0;
	}
	default:
		e->imm = wr->imm_data;
		break;
	}
	if (q->qp_type == IBV_QPT_UD) {
		e->ah = to_ah(wr->wr.ud.ah)->h;
		e->remote_qpn = wr->wr.ud.remote_qpn;
		e->remote_qkey = wr->wr.ud.remote_qkey;
	}
	uint8_t *p = b + sizeof *e;
	if (inl) {
		/* The bytes are copied now: the program may reuse its buffer
		 * as soon as ibv_post_send returns. */
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			p += wr->sg_list[i].length;
		}
		e->num_sge = (uint32_t)len;
	} else {
		memcpy(p, wr->sg_list, wr->num_sge * sizeof(struct ibv_sge));
		e->num_sge = (uint32_t)wr->num_sge;
	}
	return 0;
}

int gr_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	if (!bad_wr)
		return EINVAL;
	*bad_wr = wr;
	if (!q || !wr)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	struct gr_context *ctx = to_ctx(q->context);
	if (gr_dead(ctx))
		return EIO;
	/* The kernel's rxe refuses a send before RTS. */
	if (q->state == IBV_QPS_RESET || q->state == IBV_QPS_INIT || q->state == IBV_QPS_RTR)
		return EINVAL;
	int r = 0;
	struct gr_wq *sq = &qp->sq;
	pthread_spin_lock(&sq->lock);
	uint32_t start = sq->prod;
	for (; wr; wr = wr->next) {
		if (gr_wq_full(sq)) {
			r = ENOMEM;
			break;
		}
		r = fill_send(qp, wr, slot(&sq->r, sq->prod), sq->prod);
		if (r)
			break;
		sq->wrid[sq->prod & (sq->r.entries - 1)] = wr->wr_id;
		sq->prod++;
	}
	if (sq->prod != start) {
		publish(&sq->r, sq->prod);
		gr_doorbell(ctx, qp->doorbell);
	}
	pthread_spin_unlock(&sq->lock);
	*bad_wr = r ? wr : NULL;
	return r;
}

static void fill_recv(struct ibv_recv_wr *wr, uint8_t *b, uint32_t cookie)
{
	struct goroce_recv_wqe *e = (struct goroce_recv_wqe *)b;
	e->wr_id = cookie;
	e->num_sge = (uint32_t)wr->num_sge;
	memcpy(b + sizeof *e, wr->sg_list, wr->num_sge * sizeof(struct ibv_sge));
}

int gr_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (!bad_wr)
		return EINVAL;
	*bad_wr = wr;
	if (!q || !wr)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	struct gr_context *ctx = to_ctx(q->context);
	if (gr_dead(ctx))
		return EIO;
	if (q->srq || q->state == IBV_QPS_RESET) /* C10-97.2.1, as rxe */
		return EINVAL;
	int r = 0;
	struct gr_wq *rq = &qp->rq;
	pthread_spin_lock(&rq->lock);
	uint32_t start = rq->prod;
	for (; wr; wr = wr->next) {
		if (gr_wq_full(rq)) {
			r = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge) {
			r = EINVAL;
			break;
		}
		fill_recv(wr, slot(&rq->r, rq->prod), rq->prod);
		rq->wrid[rq->prod & (rq->r.entries - 1)] = wr->wr_id;
		rq->prod++;
	}
	if (rq->prod != start) {
		publish(&rq->r, rq->prod);
		gr_doorbell(ctx, qp->doorbell);
	}
	pthread_spin_unlock(&rq->lock);
	*bad_wr = r ? wr : NULL;
	return r;
}

int gr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (!bad_wr)
		return EINVAL;
	*bad_wr = wr;
	if (!srq || !wr)
		return EINVAL;
	struct gr_srq *s = to_srq(srq);
	struct gr_context *ctx = to_ctx(srq->context);
	if (gr_dead(ctx))
		return EIO;
	int r = 0;
	pthread_spin_lock(&s->lock);
	uint32_t start = s->prod;
	for (; wr; wr = wr->next) {
		uint32_t cons = atomic_load_explicit((_Atomic uint32_t *)&s->r.hdr->cons, memory_order_acquire);
		if (!s->nfree || s->prod - cons >= s->r.entries) {
			r = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge) {
			r = EINVAL;
			break;
		}
		uint32_t id = s->free[--s->nfree];
		s->wrid[id] = wr->wr_id;
		fill_recv(wr, slot(&s->r, s->prod), id);
		s->prod++;
	}
	if (s->prod != start) {
		publish(&s->r, s->prod);
		gr_doorbell(ctx, s->doorbell);
	}
	pthread_spin_unlock(&s->lock);
	*bad_wr = r ? wr : NULL;
	return r;
}

/* ibv_bind_mw: a type 1 window's bind is a work request of the QP's send
 * queue, as rxe's provider posts it. */
int gr_bind_mw(struct ibv_qp *q, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	if (!q || !mw || !bind)
		return EINVAL;
	if (mw->type != IBV_MW_TYPE_1 || bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	if (q->qp_type != IBV_QPT_RC && q->qp_type != IBV_QPT_UC)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	struct gr_context *ctx = to_ctx(q->context);
	if (gr_dead(ctx))
		return EIO;
	if (q->state == IBV_QPS_RESET || q->state == IBV_QPS_INIT || q->state == IBV_QPS_RTR)
		return EINVAL;
	struct gr_wq *sq = &qp->sq;
	pthread_spin_lock(&sq->lock);
	if (gr_wq_full(sq)) {
		pthread_spin_unlock(&sq->lock);
		return ENOMEM;
	}
	uint8_t *b = slot(&sq->r, sq->prod);
	struct goroce_send_wqe *e = (struct goroce_send_wqe *)b;
	struct goroce_bind_info *bi = (struct goroce_bind_info *)(b + sizeof *e);
	memset(e, 0, sizeof *e);
	memset(bi, 0, sizeof *bi);
	e->wr_id = sq->prod;
	e->opcode = IBV_WR_BIND_MW;
	e->flags = bind->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED);
	bi->mw = to_mw(mw)->h;
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	bi->rkey = rkey;
	bi->mr = bind->bind_info.mr ? to_mr(bind->bind_info.mr)->h : 0;
	bi->access = bind->bind_info.mw_access_flags;
	bi->addr = bind->bind_info.addr;
	bi->length = bind->bind_info.length;
	bi->type1 = 1;
	sq->wrid[sq->prod & (sq->r.entries - 1)] = bind->wr_id;
	sq->prod++;
	publish(&sq->r, sq->prod);
	gr_doorbell(ctx, qp->doorbell);
	pthread_spin_unlock(&sq->lock);
	mw->rkey = rkey; /* as rxe's provider: the program undoes it if the bind fails */
	return 0;
}

/* Completions */

/* retire takes the completion e out of its queue's books and returns the
 * program's wr_id. */
static uint64_t retire(struct gr_context *ctx, const struct goroce_cqe *e)
{
	switch (e->kind) {
	case GOROCE_KIND_SEND:
	case GOROCE_KIND_RECV: {
		struct gr_qp *qp = gr_tab_get(ctx, e->handle, GR_QP);
		if (!qp)
			return 0;
		struct gr_wq *wq = e->kind == GOROCE_KIND_SEND ? &qp->sq : &qp->rq;
		if (!wq->wrid)
			return 0;
		uint32_t next = e->seq + 1, old = atomic_load(&wq->retired);
		/* A send completion retires the unsignaled requests before it
		 * too; never go back. */
		while ((int32_t)(next - old) > 0 && !atomic_compare_exchange_weak(&wq->retired, &old, next))
			;
		return wq->wrid[e->seq & (wq->r.entries - 1)];
	}
	case GOROCE_KIND_SRQ: {
		struct gr_srq *s = gr_tab_get(ctx, e->handle, GR_SRQ);
		if (!s || e->seq >= s->max_wr)
			return 0;
		pthread_spin_lock(&s->lock);
		uint64_t id = s->wrid[e->seq];
		if (s->nfree < s->max_wr)
			s->free[s->nfree++] = e->seq;
		pthread_spin_unlock(&s->lock);
		return id;
	}
	}
	return 0;
}

static void fill_wc(struct ibv_wc *wc, const struct goroce_cqe *e, uint64_t wr_id)
{
	wc->wr_id = wr_id;
	wc->status = (enum ibv_wc_status)e->status;
	wc->opcode = (enum ibv_wc_opcode)e->opcode;
	wc->vendor_err = e->vendor_err;
	wc->byte_len = e->byte_len;
	if (e->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = e->imm;
	else
		wc->imm_data = htobe32(e->imm);
	wc->qp_num = e->qpn;
	wc->src_qp = e->src_qp;
	wc->wc_flags = e->wc_flags;
	wc->pkey_index = e->pkey_index;
	wc->slid = e->slid;
	wc->sl = e->sl;
	wc->dlid_path_bits = e->dlid_path_bits;
}

int gr_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct gr_cq *cq = to_cq(ibcq);
	struct gr_context *ctx = to_ctx(ibcq->context);
	if (gr_forked(ctx) || n < 0)
		return -1;
	if (!n)
		return 0;
	pthread_spin_lock(&cq->lock);
	uint32_t prod = atomic_load_explicit((_Atomic uint32_t *)&cq->r.hdr->prod, memory_order_acquire);
	int i = 0;
	for (; i < n && cq->cons != prod; i++) {
		const struct goroce_cqe *e = (const struct goroce_cqe *)slot(&cq->r, cq->cons);
		fill_wc(&wc[i], e, retire(ctx, e));
		cq->cons++;
	}
	int yield = 0;
	if (i) {
		atomic_store_explicit((_Atomic uint32_t *)&cq->r.hdr->cons, cq->cons, memory_order_release);
		cq->empty = 0;
	} else {
		yield = ++cq->empty % YIELD_EVERY == 0;
	}
	pthread_spin_unlock(&cq->lock);
	if (!i && (atomic_load_explicit(&ctx->gone, memory_order_relaxed) || (yield && gr_gone(ctx)))) {
		/* Nothing left, and nothing will come: the device went. */
		errno = EIO;
		return -1;
	}
	if (yield)
		sched_yield();
	return i;
}

int gr_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct gr_cq *cq = to_cq(ibcq);
	if (gr_dead(to_ctx(ibcq->context)))
		return EIO;
	_Atomic uint32_t *armed = (_Atomic uint32_t *)&cq->r.hdr->armed;
	if (!solicited_only) {
		atomic_store(armed, GOROCE_ARM_ANY);
	} else {
		uint32_t zero = 0; /* an arm for any completion stays */
		atomic_compare_exchange_strong(armed, &zero, GOROCE_ARM_SOLICITED);
	}
	return 0;
}

/* The extended CQ (ibv_create_cq_ex): ibv_start_poll, ibv_next_poll and
 * ibv_end_poll walk the ring under the CQ's lock. */

static void take(struct gr_cq *cq)
{
	const struct goroce_cqe *e = (const struct goroce_cqe *)slot(&cq->r, cq->cons);
	cq->cur = *e;
	cq->cq.wr_id = retire(to_ctx(cq->cq.context), e);
	cq->cq.status = (enum ibv_wc_status)e->status;
	cq->cons++;
}

static int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct gr_cq *cq = container_of(c, struct gr_cq, cq);
	if (attr && attr->comp_mask)
		return EINVAL;
	struct gr_context *ctx = to_ctx(c->context);
	if (gr_forked(ctx))
		return EIO;
	pthread_spin_lock(&cq->lock);
	uint32_t prod = atomic_load_explicit((_Atomic uint32_t *)&cq->r.hdr->prod, memory_order_acquire);
	if (cq->cons == prod) {
		int yield = ++cq->empty % YIELD_EVERY == 0;
		pthread_spin_unlock(&cq->lock);
		if (atomic_load_explicit(&ctx->gone, memory_order_relaxed) || (yield && gr_gone(ctx)))
			return EIO; /* nothing left, and nothing will come: the device went */
		if (yield)
			sched_yield();
		return ENOENT;
	}
	cq->empty = 0;
	take(cq);
	return 0;
}

static int next_poll(struct ibv_cq_ex *c)
{
	struct gr_cq *cq = container_of(c, struct gr_cq, cq);
	uint32_t prod = atomic_load_explicit((_Atomic uint32_t *)&cq->r.hdr->prod, memory_order_acquire);
	if (cq->cons == prod)
		return ENOENT;
	take(cq);
	return 0;
}

static void end_poll(struct ibv_cq_ex *c)
{
	struct gr_cq *cq = container_of(c, struct gr_cq, cq);
	atomic_store_explicit((_Atomic uint32_t *)&cq->r.hdr->cons, cq->cons, memory_order_release);
	pthread_spin_unlock(&cq->lock);
}

#define CUR(c) (&container_of(c, struct gr_cq, cq)->cur)
static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return (enum ibv_wc_opcode)CUR(c)->opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *c) { return CUR(c)->vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *c) { return CUR(c)->byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	const struct goroce_cqe *e = CUR(c);
	return e->wc_flags & IBV_WC_WITH_INV ? e->imm : htobe32(e->imm);
}
static uint32_t read_qp_num(struct ibv_cq_ex *c) { return CUR(c)->qpn; }
static uint32_t read_src_qp(struct ibv_cq_ex *c) { return CUR(c)->src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *c) { return CUR(c)->wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *c) { return CUR(c)->slid; }
static uint8_t read_sl(struct ibv_cq_ex *c) { return CUR(c)->sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c) { return CUR(c)->dlid_path_bits; }

void gr_cq_ex_ops(struct gr_cq *cq)
{
	struct ibv_cq_ex *c = &cq->cq;
	c->start_poll = start_poll;
	c->next_poll = next_poll;
	c->end_poll = end_poll;
	c->read_opcode = read_opcode;
	c->read_vendor_err = read_vendor_err;
	c->read_byte_len = read_byte_len;
	c->read_imm_data = read_imm_data;
	c->read_qp_num = read_qp_num;
	c->read_src_qp = read_src_qp;
	c->read_wc_flags = read_wc_flags;
	c->read_slid = read_slid;
	c->read_sl = read_sl;
	c->read_dlid_path_bits = read_dlid_path_bits;
}

/* The extended QP's builders (ibv_wr_start ... ibv_wr_complete): each
 * operation opens a work request in the next slot, the setters fill it,
 * and ibv_wr_complete publishes them all, or ibv_wr_abort none. An error
 * (a full queue, a bad argument) is kept and returned by ibv_wr_complete,
 * as the providers do. */

#define QPX(q) container_of(q, struct gr_qp, qpx)

static void wr_start(struct ibv_qp_ex *q)
{
	struct gr_qp *qp = QPX(q);
	pthread_spin_lock(&qp->sq.lock);
	qp->start_prod = qp->sq.prod;
	qp->cur = NULL;
	qp->wr_err = gr_dead(to_ctx(q->qp_base.context)) ? EIO : 0;
}

static struct goroce_send_wqe *wr_open(struct ibv_qp_ex *q, enum ibv_wr_opcode op)
{
	struct gr_qp *qp = QPX(q);
	qp->cur = NULL;
	if (qp->wr_err)
		return NULL;
	struct gr_wq *sq = &qp->sq;
	if (!op_ok(q->qp_base.qp_type, op)) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	if (gr_wq_full(sq)) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	struct goroce_send_wqe *e = (struct goroce_send_wqe *)slot(&sq->r, sq->prod);
	memset(e, 0, sizeof *e);
	e->wr_id = sq->prod;
	e->opcode = op;
	e->flags = q->wr_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
	sq->wrid[sq->prod & (sq->r.entries - 1)] = q->wr_id;
	sq->prod++;
	qp->cur = e;
	return e;
}

static void wr_rdma(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct goroce_send_wqe *e = wr_open(q, op);
	if (e) {
		e->rkey = rkey;
		e->remote_addr = addr;
		e->imm = imm;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { wr_rdma(q, IBV_WR_RDMA_WRITE, rkey, addr, 0); }
static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}
static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { wr_rdma(q, IBV_WR_RDMA_READ, rkey, addr, 0); }

static void wr_atomic(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swp)
{
	if (addr & 7 && !QPX(q)->wr_err) {
		QPX(q)->wr_err = EINVAL;
		return;
	}
	struct goroce_send_wqe *e = wr_open(q, op);
	if (e) {
		e->rkey = rkey;
		e->remote_addr = addr;
		e->compare_add = cmp;
		e->swap = swp;
	}
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void wr_send(struct ibv_qp_ex *q) { wr_open(q, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct goroce_send_wqe *e = wr_open(q, IBV_WR_SEND_WITH_IMM);
	if (e)
		e->imm = imm;
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct goroce_send_wqe *e = wr_open(q, IBV_WR_SEND_WITH_INV);
	if (e)
		e->imm = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct goroce_send_wqe *e = wr_open(q, IBV_WR_LOCAL_INV);
	if (e)
		e->imm = rkey;
}

static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	if (!mw || !info || mw->type != IBV_MW_TYPE_2) {
		if (!QPX(q)->wr_err)
			QPX(q)->wr_err = EINVAL;
		return;
	}
	struct goroce_send_wqe *e = wr_open(q, IBV_WR_BIND_MW);
	if (!e)
		return;
	struct goroce_bind_info *bi = (struct goroce_bind_info *)((uint8_t *)e + sizeof *e);
	memset(bi, 0, sizeof *bi);
	bi->mw = to_mw(mw)->h;
	bi->rkey = rkey;
	bi->mr = info->mr ? to_mr(info->mr)->h : 0;
	bi->access = info->mw_access_flags;
	bi->addr = info->addr;
	bi->length = info->length;
	QPX(q)->cur = NULL; /* a bind takes no SGE */
}

static void wr_unsupported(struct ibv_qp_ex *q)
{
	if (!QPX(q)->wr_err)
		QPX(q)->wr_err = EOPNOTSUPP;
}

static void wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	wr_unsupported(q);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	(void)srqn;
	wr_unsupported(q);
}

static void wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *atomic_wr)
{
	if (!atomic_wr) {
		if (!QPX(q)->wr_err)
			QPX(q)->wr_err = EINVAL;
		return;
	}
	struct goroce_send_wqe *e = wr_open(q, GR_WR_ATOMIC_WRITE);
	if (!e)
		return;
	e->rkey = rkey;
	e->remote_addr = addr;
	memcpy(&e->compare_add, atomic_wr, 8); /* the 8 bytes as they lie in memory */
	QPX(q)->cur = NULL; /* it takes no SGE */
}

/* wr_flush has rdma-core 45's signature (ibv_wr_flush). */
static void wr_flush(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, size_t len, uint8_t type, uint8_t level)
{
	if (len > UINT32_MAX) {
		if (!QPX(q)->wr_err)
			QPX(q)->wr_err = EINVAL;
		return;
	}
	struct goroce_send_wqe *e = wr_open(q, GR_WR_FLUSH);
	if (!e)
		return;
	e->rkey = rkey;
	e->remote_addr = addr;
	e->compare_add = len;
	e->swap = type | (uint64_t)level << 8;
	QPX(q)->cur = NULL;
}

static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct goroce_send_wqe *e = QPX(q)->cur;
	if (!e)
		return;
	if (!ah || qpn > 0xffffff) {
		QPX(q)->wr_err = EINVAL;
		return;
	}
	e->ah = to_ah(ah)->h;
	e->remote_qpn = qpn;
	e->remote_qkey = qkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sge)
{
	struct gr_qp *qp = QPX(q);
	struct goroce_send_wqe *e = qp->cur;
	if (!e)
		return;
	if (n > qp->sq.max_sge || (n && !sge)) {
		qp->wr_err = EINVAL;
		return;
	}
	if (e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		if (n != 1 || sge[0].length < 8) {
			qp->wr_err = EINVAL;
			return;
		}
	}
	memcpy((uint8_t *)e + sizeof *e, sge, n * sizeof *sge);
	e->num_sge = (uint32_t)n;
	e->flags &= ~IBV_SEND_INLINE;
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(q, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *buf)
{
	struct gr_qp *qp = QPX(q);
	struct goroce_send_wqe *e = qp->cur;
	if (!e)
		return;
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += buf[i].length;
	if (len > qp->max_inline || e->opcode == IBV_WR_RDMA_READ || e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	    e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		qp->wr_err = EINVAL;
		return;
	}
	uint8_t *p = (uint8_t *)e + sizeof *e;
	for (size_t i = 0; i < n; i++) {
		memcpy(p, buf[i].addr, buf[i].length);
		p += buf[i].length;
	}
	e->num_sge = (uint32_t)len;
	e->flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(q, 1, &b);
}

static int wr_complete(struct ibv_qp_ex *q)
{
	struct gr_qp *qp = QPX(q);
	int r = qp->wr_err;
	if (r)
		qp->sq.prod = qp->start_prod;
	else if (qp->sq.prod != qp->start_prod) {
		if (q->qp_base.state == IBV_QPS_RESET || q->qp_base.state == IBV_QPS_INIT ||
		    q->qp_base.state == IBV_QPS_RTR) {
			qp->sq.prod = qp->start_prod;
			r = EINVAL;
		} else {
			publish(&qp->sq.r, qp->sq.prod);
			gr_doorbell(to_ctx(q->qp_base.context), qp->doorbell);
		}
	}
	qp->cur = NULL;
	pthread_spin_unlock(&qp->sq.lock);
	return r;
}

static void wr_abort(struct ibv_qp_ex *q)
{
	struct gr_qp *qp = QPX(q);
	qp->sq.prod = qp->start_prod;
	qp->cur = NULL;
	pthread_spin_unlock(&qp->sq.lock);
}

void gr_qp_ex_ops(struct gr_qp *qp)
{
	struct ibv_qp_ex *q = &qp->qpx;
	q->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	q->wr_atomic_fetch_add = wr_atomic_fetch_add;
	q->wr_bind_mw = wr_bind_mw;
	q->wr_local_inv = wr_local_inv;
	q->wr_rdma_read = wr_rdma_read;
	q->wr_rdma_write = wr_rdma_write;
	q->wr_rdma_write_imm = wr_rdma_write_imm;
	q->wr_send = wr_send;
	q->wr_send_imm = wr_send_imm;
	q->wr_send_inv = wr_send_inv;
	q->wr_send_tso = wr_send_tso;
	q->wr_set_ud_addr = wr_set_ud_addr;
	q->wr_set_xrc_srqn = wr_set_xrc_srqn;
	q->wr_set_inline_data = wr_set_inline_data;
	q->wr_set_inline_data_list = wr_set_inline_data_list;
	q->wr_set_sge = wr_set_sge;
	q->wr_set_sge_list = wr_set_sge_list;
	q->wr_start = wr_start;
	q->wr_complete = wr_complete;
	q->wr_abort = wr_abort;
	q->wr_atomic_write = wr_atomic_write;
	/* wr_flush: the slot after wr_atomic_write, in ibv_qp_ex of rdma-core
	 * 45 and later, in qpx_more with older headers (layout.c). */
	void (**after)(void) = (void (**)(void))((char *)&q->wr_atomic_write + sizeof(void *));
	*after = (void (*)(void))wr_flush;
}
