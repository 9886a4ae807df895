/*
 * The verbs that make, change and free objects, and the event channels.
 * Each asks the device over the control socket; errors are the errno the
 * device answers (as the kernel's), returned or set as libibverbs' man
 * pages say for each verb.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "goroce.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define PAGE 4096UL

static void *fail_null(int err)
{
	errno = err;
	return NULL;
}

/* PD */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	if (!context)
		return fail_null(EINVAL);
	struct gr_context *ctx = to_ctx(context);
	struct gr_pd *pd = calloc(1, sizeof *pd);
	if (!pd)
		return fail_null(ENOMEM);
	struct goroce_handle_reply rep;
	int r = gr_call(ctx, GOROCE_OP_ALLOC_PD, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(pd);
		return fail_null(r);
	}
	pd->h = rep.handle;
	pd->pd.context = context;
	pd->pd.handle = rep.handle;
	return &pd->pd;
}

static int destroy_handle(struct ibv_context *context, uint32_t op, uint32_t h)
{
	struct goroce_handle_req req = {.handle = h};
	return gr_call(to_ctx(context), op, &req, sizeof req, NULL, 0, NULL, 0, NULL);
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	int r = destroy_handle(pd->context, GOROCE_OP_DEALLOC_PD, to_pd(pd)->h);
	if (r == EIO)
		r = 0; /* the device went, and what it held with it */
	if (!r)
		free(to_pd(pd));
	return r;
}

/* MR */

static int mr_writable(unsigned access)
{
	return !!(access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
			    IBV_ACCESS_MW_BIND | GR_ACCESS_FLUSH_GLOBAL | GR_ACCESS_FLUSH_PERSISTENT));
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	if (!pd || !length)
		return fail_null(EINVAL);
	uintptr_t a = (uintptr_t)addr;
	if (a + length < a)
		return fail_null(EINVAL);
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_mr *mr = calloc(1, sizeof *mr);
	if (!mr)
		return fail_null(ENOMEM);
	mr->start = a & ~(PAGE - 1);
	mr->end = (a + length + PAGE - 1) & ~(PAGE - 1);
	int r = gr_mem_share(mr->start, mr->end, mr_writable(access));
	if (r) {
		free(mr);
		return fail_null(r);
	}
	struct goroce_reg_mr_req req = {
		.pd = to_pd(pd)->h, .access = access & ~IBV_ACCESS_OPTIONAL_RANGE, .addr = a, .length = length, .iova = iova};
	struct goroce_reg_mr_reply rep;
	r = gr_call(ctx, GOROCE_OP_REG_MR, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		gr_mem_unshare(mr->start, mr->end);
		free(mr);
		return fail_null(r);
	}
	mr->h = rep.handle;
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.handle = rep.handle;
	mr->mr.lkey = rep.lkey;
	mr->mr.rkey = rep.rkey;
	mr->access = access;
	gr_tab_add(ctx, rep.handle, GR_MR, mr);
	return &mr->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	return fail_null(EOPNOTSUPP); /* no device memory behind a dma-buf in a soft device */
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	struct gr_mr *m = to_mr(mr);
	int r = destroy_handle(mr->context, GOROCE_OP_DEREG_MR, m->h);
	if (r && r != EIO) /* EIO: the device went, and the region with it */
		return r;
	gr_tab_del(to_ctx(mr->context), m->h);
	gr_mem_unshare(m->start, m->end);
	free(m);
	return 0;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	if (!mr || flags <= 0 || flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
					      IBV_REREG_MR_CHANGE_ACCESS) ||
	    (flags & IBV_REREG_MR_CHANGE_PD && !pd) || (flags & IBV_REREG_MR_CHANGE_TRANSLATION && (!addr || !length))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	struct gr_mr *m = to_mr(mr);
	struct gr_context *ctx = to_ctx(mr->context);
	uintptr_t start = m->start, end = m->end;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		uintptr_t a = (uintptr_t)addr;
		start = a & ~(PAGE - 1);
		end = (a + length + PAGE - 1) & ~(PAGE - 1);
		int writable = mr_writable(flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned)access : m->access);
		int r = gr_mem_share(start, end, writable);
		if (r) {
			errno = r;
			return IBV_REREG_MR_ERR_INPUT;
		}
	}
	struct goroce_rereg_mr_req req = {.handle = m->h,
					  .flags = (uint32_t)flags,
					  .pd = flags & IBV_REREG_MR_CHANGE_PD ? to_pd(pd)->h : 0,
					  .access = (uint32_t)access & ~IBV_ACCESS_OPTIONAL_RANGE,
					  .addr = (uintptr_t)addr,
					  .length = length,
					  .iova = (uintptr_t)addr};
	struct goroce_reg_mr_reply rep;
	int r = gr_call(ctx, GOROCE_OP_REREG_MR, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		if (flags & IBV_REREG_MR_CHANGE_TRANSLATION)
			gr_mem_unshare(start, end);
		errno = r;
		return r == EINVAL ? IBV_REREG_MR_ERR_INPUT : IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		gr_mem_unshare(m->start, m->end);
		m->start = start;
		m->end = end;
		mr->addr = addr;
		mr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		m->access = (unsigned)access;
	mr->lkey = rep.lkey;
	mr->rkey = rep.rkey;
	return 0;
}

/* MW */

struct ibv_mw *gr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	if (!pd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2))
		return fail_null(EINVAL);
	struct gr_mw *mw = calloc(1, sizeof *mw);
	if (!mw)
		return fail_null(ENOMEM);
	struct goroce_alloc_mw_req req = {.pd = to_pd(pd)->h, .type = type};
	struct goroce_alloc_mw_reply rep;
	int r = gr_call(to_ctx(pd->context), GOROCE_OP_ALLOC_MW, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(mw);
		return fail_null(r);
	}
	mw->h = rep.handle;
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.rkey = rep.rkey;
	mw->mw.handle = rep.handle;
	mw->mw.type = type;
	return &mw->mw;
}

int gr_dealloc_mw(struct ibv_mw *mw)
{
	if (!mw)
		return EINVAL;
	int r = destroy_handle(mw->context, GOROCE_OP_DEALLOC_MW, to_mw(mw)->h);
	if (r == EIO)
		r = 0; /* the device went, and what it held with it */
	if (!r)
		free(to_mw(mw));
	return r;
}

/* AH */

static int ah_attr(const struct ibv_ah_attr *a, struct goroce_ah_attr *g)
{
	memset(g, 0, sizeof *g);
	if (!a->is_global)
		return EINVAL; /* RoCE addresses by GID: the kernel refuses an AH without a GRH */
	memcpy(g->dgid, a->grh.dgid.raw, 16);
	g->flow_label = a->grh.flow_label;
	g->dlid = a->dlid;
	g->sgid_index = a->grh.sgid_index;
	g->hop_limit = a->grh.hop_limit;
	g->traffic_class = a->grh.traffic_class;
	g->sl = a->sl;
	g->src_path_bits = a->src_path_bits;
	g->static_rate = a->static_rate;
	g->is_global = 1;
	g->port = a->port_num;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!pd || !attr)
		return fail_null(EINVAL);
	struct goroce_create_ah_req req = {.pd = to_pd(pd)->h};
	int r = ah_attr(attr, &req.attr);
	if (r)
		return fail_null(r);
	struct gr_ah *ah = calloc(1, sizeof *ah);
	if (!ah)
		return fail_null(ENOMEM);
	struct goroce_handle_reply rep;
	r = gr_call(to_ctx(pd->context), GOROCE_OP_CREATE_AH, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(ah);
		return fail_null(r);
	}
	ah->h = rep.handle;
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = rep.handle;
	return &ah->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	if (!ah)
		return EINVAL;
	int r = destroy_handle(ah->context, GOROCE_OP_DESTROY_AH, to_ah(ah)->h);
	if (r == EIO)
		r = 0; /* the device went, and what it held with it */
	if (!r)
		free(to_ah(ah));
	return r;
}

/* The index of the GID gid in the port's table, or -1. */
static int gid_index(struct ibv_context *context, const uint8_t *gid)
{
	const struct goroce_hello_reply *info = &to_ctx(context)->info;
	for (uint32_t i = 0; i < info->num_gids; i++)
		if (!memcmp(info->gid[i].gid, gid, 16))
			return (int)i;
	return -1;
}

EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah_attr)
{
	if (!context || !wc || !ah_attr)
		return EINVAL;
	memset(ah_attr, 0, sizeof *ah_attr);
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	if (!grh)
		return EINVAL;
	ah_attr->is_global = 1;
	ah_attr->grh.hop_limit = 0xff;
	uint32_t vtf = be32toh(grh->version_tclass_flow);
	uint8_t dgid[16];
	if (vtf >> 28 == 6) {
		ah_attr->grh.dgid = grh->sgid;
		memcpy(dgid, grh->dgid.raw, 16);
		ah_attr->grh.flow_label = vtf & 0xfffff;
		ah_attr->grh.traffic_class = (vtf >> 20) & 0xff;
	} else {
		/* RoCE v2 over IPv4: the 40 bytes hold the IPv4 header in their
		 * last 20, as rxe and goroce write it. */
		const uint8_t *ip = (const uint8_t *)grh + 20;
		if (ip[0] >> 4 != 4)
			return EINVAL;
		memset(ah_attr->grh.dgid.raw, 0, 10);
		ah_attr->grh.dgid.raw[10] = ah_attr->grh.dgid.raw[11] = 0xff;
		memcpy(ah_attr->grh.dgid.raw + 12, ip + 12, 4);
		memset(dgid, 0, 10);
		dgid[10] = dgid[11] = 0xff;
		memcpy(dgid + 12, ip + 16, 4);
		ah_attr->grh.traffic_class = ip[1];
	}
	int i = gid_index(context, dgid);
	if (i < 0)
		return EINVAL;
	ah_attr->grh.sgid_index = (uint8_t)i;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;
	if (!pd)
		return fail_null(EINVAL);
	int r = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a);
	if (r)
		return fail_null(r);
	return ibv_create_ah(pd, &a);
}

/* Completion channels and completion events */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	if (!context)
		return fail_null(EINVAL);
	struct gr_chan *ch = calloc(1, sizeof *ch);
	int p[2];
	if (!ch)
		return fail_null(ENOMEM);
	if (pipe2(p, O_CLOEXEC)) {
		int e = errno;
		free(ch);
		return fail_null(e);
	}
	struct goroce_create_comp_channel_req req = {0};
	struct goroce_handle_reply rep;
	int r = gr_call(to_ctx(context), GOROCE_OP_CREATE_COMP_CHANNEL, &req, sizeof req, &rep, sizeof rep, &p[1], 1, NULL);
	close(p[1]);
	if (r) {
		close(p[0]);
		free(ch);
		return fail_null(r);
	}
	ch->h = rep.handle;
	ch->ch.context = context;
	ch->ch.fd = p[0];
	ch->ch.refcnt = 0;
	return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	if (!channel)
		return EINVAL;
	if (channel->refcnt)
		return EBUSY;
	struct gr_chan *ch = container_of(channel, struct gr_chan, ch);
	int r = destroy_handle(channel->context, GOROCE_OP_DESTROY_COMP_CHANNEL, ch->h);
	if (r && r != EIO)
		return r;
	close(channel->fd);
	free(ch);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		struct goroce_comp_event ev;
		if (read(channel->fd, &ev, sizeof ev) != sizeof ev)
			return -1;
		struct gr_cq *c = gr_tab_get(to_ctx(channel->context), ev.cq, GR_CQ);
		if (!c)
			continue; /* an event of a CQ destroyed since */
		pthread_mutex_lock(&c->cq.mutex);
		c->events_reported++;
		pthread_mutex_unlock(&c->cq.mutex);
		*cq = ibv_cq_ex_to_cq(&c->cq);
		*cq_context = c->cq.cq_context;
		return 0;
	}
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_broadcast(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* CQ */

static struct gr_cq *create_cq(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			       int comp_vector, uint64_t wc_flags)
{
	if (!context || cqe < 1)
		return fail_null(EINVAL);
	if (comp_vector < 0 || comp_vector >= context->num_comp_vectors)
		return fail_null(EINVAL);
	if (channel && channel->context != context)
		return fail_null(EINVAL);
	struct gr_context *ctx = to_ctx(context);
	struct gr_cq *cq = calloc(1, sizeof *cq);
	if (!cq)
		return fail_null(ENOMEM);
	struct goroce_create_cq_req req = {.cqe = (uint32_t)cqe,
					   .channel = channel ? container_of(channel, struct gr_chan, ch)->h : 0,
					   .comp_vector = (uint32_t)comp_vector};
	struct goroce_create_cq_reply rep;
	int r = gr_call(ctx, GOROCE_OP_CREATE_CQ, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(cq);
		return fail_null(r);
	}
	r = gr_map_ring(ctx, &rep.ring, &cq->r);
	if (!r)
		r = gr_tab_add(ctx, rep.handle, GR_CQ, cq);
	if (r) {
		gr_unmap_ring(&cq->r);
		destroy_handle(context, GOROCE_OP_DESTROY_CQ, rep.handle);
		free(cq);
		return fail_null(r);
	}
	cq->h = rep.handle;
	cq->wc_flags = wc_flags;
	cq->cons = atomic_load((_Atomic uint32_t *)&cq->r.hdr->cons);
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = rep.handle;
	cq->cq.cqe = (int)rep.cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	gr_cq_ex_ops(cq);
	if (channel)
		channel->refcnt++;
	return cq;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct gr_cq *cq = create_cq(context, cqe, cq_context, channel, comp_vector, IBV_WC_STANDARD_FLAGS);
	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

/* The wc_flags an ibv_create_cq_ex CQ may ask to read. */
#define GR_WC_FLAGS                                                                                                   \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |               \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *gr_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	if (!context || !attr)
		return fail_null(EINVAL);
	if (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return fail_null(EINVAL);
	if (attr->wc_flags & ~(uint64_t)GR_WC_FLAGS)
		return fail_null(EOPNOTSUPP); /* timestamps, VLANs, flow tags, tag matching */
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS &&
	    attr->flags & ~(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))
		return fail_null(EOPNOTSUPP);
	struct gr_cq *cq = create_cq(context, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector,
				     attr->wc_flags);
	return cq ? &cq->cq : NULL;
}

EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	if (!ibcq || cqe < 1)
		return EINVAL;
	struct gr_cq *cq = to_cq(ibcq);
	struct gr_context *ctx = to_ctx(ibcq->context);
	pthread_spin_lock(&cq->lock);
	/* The device takes what is left from the consumer index it reads. */
	atomic_store((_Atomic uint32_t *)&cq->r.hdr->cons, cq->cons);
	struct goroce_resize_cq_req req = {.handle = cq->h, .cqe = (uint32_t)cqe};
	struct goroce_resize_cq_reply rep;
	int r = gr_call(ctx, GOROCE_OP_RESIZE_CQ, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (!r) {
		struct gr_ring nr;
		r = gr_map_ring(ctx, &rep.ring, &nr);
		if (!r) {
			gr_unmap_ring(&cq->r);
			cq->r = nr;
			ibcq->cqe = (int)rep.cqe;
		}
	}
	pthread_spin_unlock(&cq->lock);
	return r;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	if (!ibcq)
		return EINVAL;
	struct gr_cq *cq = to_cq(ibcq);
	int r = destroy_handle(ibcq->context, GOROCE_OP_DESTROY_CQ, cq->h);
	if (r && r != EIO)
		return r;
	/* As libibverbs does: wait until every event returned is acked. */
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed != cq->events_reported || ibcq->async_events_completed != cq->async_reported)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	if (ibcq->channel)
		ibcq->channel->refcnt--;
	gr_tab_del(to_ctx(ibcq->context), cq->h);
	gr_unmap_ring(&cq->r);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

/* QP */

static int wq_init(struct gr_context *ctx, struct gr_wq *wq, const struct goroce_ring_reply *rr, uint32_t max_wr,
		   uint32_t max_sge)
{
	memset(wq, 0, sizeof *wq);
	pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
	if (!rr->entries)
		return 0;
	int r = gr_map_ring(ctx, rr, &wq->r);
	if (r)
		return r;
	wq->wrid = calloc(rr->entries, sizeof *wq->wrid);
	if (!wq->wrid) {
		gr_unmap_ring(&wq->r);
		return ENOMEM;
	}
	wq->prod = atomic_load((_Atomic uint32_t *)&wq->r.hdr->prod);
	atomic_store(&wq->retired, wq->prod);
	wq->max_wr = max_wr;
	wq->max_sge = max_sge;
	return 0;
}

static void wq_free(struct gr_wq *wq)
{
	gr_unmap_ring(&wq->r);
	free(wq->wrid);
	pthread_spin_destroy(&wq->lock);
}

/* The send operations an ibv_create_qp_ex QP may build with ibv_wr_*. */
#define GR_SEND_OPS                                                                                                   \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                       \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |                    \
	 IBV_QP_EX_WITH_SEND_WITH_INV | GR_QP_EX_WITH_FLUSH | GR_QP_EX_WITH_ATOMIC_WRITE)

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr_ex *a, uint64_t send_ops)
{
	if (!pd || !a || !a->send_cq || !a->recv_cq)
		return fail_null(EINVAL);
	struct ibv_context *context = pd->context;
	struct gr_context *ctx = to_ctx(context);
	if (a->send_cq->context != context || a->recv_cq->context != context || (a->srq && a->srq->context != context))
		return fail_null(EINVAL);
	struct gr_qp *qp = calloc(1, sizeof *qp);
	if (!qp)
		return fail_null(ENOMEM);
	struct goroce_create_qp_req req = {.pd = to_pd(pd)->h,
					   .type = a->qp_type,
					   .send_cq = to_cq(a->send_cq)->h,
					   .recv_cq = to_cq(a->recv_cq)->h,
					   .srq = a->srq ? to_srq(a->srq)->h : 0,
					   .sig_all = a->sq_sig_all ? 1 : 0,
					   .cap = {.max_send_wr = a->cap.max_send_wr,
						   .max_recv_wr = a->cap.max_recv_wr,
						   .max_send_sge = a->cap.max_send_sge,
						   .max_recv_sge = a->cap.max_recv_sge,
						   .max_inline = a->cap.max_inline_data}};
	struct goroce_create_qp_reply rep;
	int r = gr_call(ctx, GOROCE_OP_CREATE_QP, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(qp);
		return fail_null(r);
	}
	r = wq_init(ctx, &qp->sq, &rep.sq, rep.cap.max_send_wr, rep.cap.max_send_sge);
	if (!r)
		r = wq_init(ctx, &qp->rq, &rep.rq, rep.cap.max_recv_wr, rep.cap.max_recv_sge);
	if (!r)
		r = gr_tab_add(ctx, rep.handle, GR_QP, qp);
	if (r) {
		wq_free(&qp->sq);
		wq_free(&qp->rq);
		destroy_handle(context, GOROCE_OP_DESTROY_QP, rep.handle);
		free(qp);
		return fail_null(r);
	}
	qp->h = rep.handle;
	qp->doorbell = rep.doorbell;
	qp->max_inline = rep.cap.max_inline;
	qp->sig_all = a->sq_sig_all;
	qp->send_ops = send_ops;
	struct ibv_qp *q = &qp->qpx.qp_base;
	q->context = context;
	q->qp_context = a->qp_context;
	q->pd = pd;
	q->send_cq = a->send_cq;
	q->recv_cq = a->recv_cq;
	q->srq = a->srq;
	q->handle = rep.handle;
	q->qp_num = rep.qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	gr_qp_ex_ops(qp);
	a->cap.max_send_wr = rep.cap.max_send_wr;
	a->cap.max_recv_wr = rep.cap.max_recv_wr;
	a->cap.max_send_sge = rep.cap.max_send_sge;
	a->cap.max_recv_sge = rep.cap.max_recv_sge;
	a->cap.max_inline_data = rep.cap.max_inline;
	return q;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!pd || !attr)
		return fail_null(EINVAL);
	struct ibv_qp_init_attr_ex a = {.qp_context = attr->qp_context,
					.send_cq = attr->send_cq,
					.recv_cq = attr->recv_cq,
					.srq = attr->srq,
					.cap = attr->cap,
					.qp_type = attr->qp_type,
					.sq_sig_all = attr->sq_sig_all,
					.comp_mask = IBV_QP_INIT_ATTR_PD,
					.pd = pd};
	struct ibv_qp *q = create_qp(pd, &a, 0);
	if (q)
		attr->cap = a.cap;
	return q;
}

struct ibv_qp *gr_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	if (!context || !a)
		return fail_null(EINVAL);
	if (a->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return fail_null(EOPNOTSUPP); /* XRC domains, TSO, RSS, indirection tables */
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != context)
		return fail_null(EINVAL);
	if (a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS && a->create_flags)
		return fail_null(EOPNOTSUPP);
	uint64_t ops = 0;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = a->send_ops_flags;
		if (ops & ~(uint64_t)GR_SEND_OPS)
			return fail_null(EOPNOTSUPP);
		if (a->qp_type != IBV_QPT_RC && ops & (GR_QP_EX_WITH_FLUSH | GR_QP_EX_WITH_ATOMIC_WRITE))
			return fail_null(EINVAL); /* RC only, as rxe */
		if (a->qp_type == IBV_QPT_UD && ops & ~(uint64_t)(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM))
			return fail_null(EINVAL);
		if (a->qp_type == IBV_QPT_UC &&
		    ops & ~(uint64_t)(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
				      IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV |
				      IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV))
			return fail_null(EINVAL);
	}
	struct ibv_qp *q = create_qp(a->pd, a, ops);
	if (q && ops)
		to_qp(q)->qpx.comp_mask = 0;
	return q;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp || !to_qp(qp)->send_ops)
		return NULL; /* as libibverbs: only a QP made with send_ops_flags has the builders */
	return &to_qp(qp)->qpx;
}

static void qp_attr_to(const struct ibv_qp_attr *a, struct goroce_qp_attr *g, int mask)
{
	memset(g, 0, sizeof *g);
	g->state = a->qp_state;
	g->cur_state = a->cur_qp_state;
	g->path_mtu = a->path_mtu;
	g->path_mig_state = a->path_mig_state;
	g->qkey = a->qkey;
	g->rq_psn = a->rq_psn;
	g->sq_psn = a->sq_psn;
	g->dest_qpn = a->dest_qp_num;
	g->access = a->qp_access_flags;
	g->pkey_index = a->pkey_index;
	g->alt_pkey_index = a->alt_pkey_index;
	if (mask & IBV_QP_AV) {
		/* A missing GRH is refused by the device (RoCE needs one). */
		struct goroce_ah_attr ga;
		if (!ah_attr(&a->ah_attr, &ga))
			g->ah = ga;
	}
	g->sqd_notify = a->en_sqd_async_notify;
	g->max_rd_atomic = a->max_rd_atomic;
	g->max_dest_rd_atomic = a->max_dest_rd_atomic;
	g->min_rnr_timer = a->min_rnr_timer;
	g->port = a->port_num;
	g->timeout = a->timeout;
	g->retry_cnt = a->retry_cnt;
	g->rnr_retry = a->rnr_retry;
	g->alt_port = a->alt_port_num;
	g->alt_timeout = a->alt_timeout;
	g->rate_limit = a->rate_limit;
}

EXPORT int ibv_modify_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int attr_mask)
{
	if (!q || !attr)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	struct goroce_modify_qp_req req = {.handle = qp->h, .mask = (uint32_t)attr_mask};
	qp_attr_to(attr, &req.attr, attr_mask);
	if (attr_mask & IBV_QP_AV && !attr->ah_attr.is_global)
		return EINVAL;
	/* A reset QP forgets what it had posted: its queues' credit comes
	 * back. Hold them while the device empties its rings. */
	int reset = attr_mask & IBV_QP_STATE && attr->qp_state == IBV_QPS_RESET;
	if (reset) {
		pthread_spin_lock(&qp->sq.lock);
		pthread_spin_lock(&qp->rq.lock);
	}
	int r = gr_call(to_ctx(q->context), GOROCE_OP_MODIFY_QP, &req, sizeof req, NULL, 0, NULL, 0, NULL);
	if (reset) {
		if (!r) {
			atomic_store(&qp->sq.retired, qp->sq.prod);
			atomic_store(&qp->rq.retired, qp->rq.prod);
		}
		pthread_spin_unlock(&qp->rq.lock);
		pthread_spin_unlock(&qp->sq.lock);
	}
	if (!r && attr_mask & IBV_QP_STATE)
		q->state = attr->qp_state;
	return r;
}

/* gr_qp_attr_from fills attr from the device's g. */
void gr_qp_attr_from(struct ibv_qp_attr *attr, const struct goroce_qp_attr *g)
{
	memset(attr, 0, sizeof *attr);
	attr->qp_state = g->state;
	attr->cur_qp_state = g->cur_state;
	attr->path_mtu = g->path_mtu;
	attr->path_mig_state = g->path_mig_state;
	attr->qkey = g->qkey;
	attr->rq_psn = g->rq_psn;
	attr->sq_psn = g->sq_psn;
	attr->dest_qp_num = g->dest_qpn;
	attr->qp_access_flags = g->access;
	attr->cap.max_send_wr = g->cap.max_send_wr;
	attr->cap.max_recv_wr = g->cap.max_recv_wr;
	attr->cap.max_send_sge = g->cap.max_send_sge;
	attr->cap.max_recv_sge = g->cap.max_recv_sge;
	attr->cap.max_inline_data = g->cap.max_inline;
	if (g->ah.is_global) {
		attr->ah_attr.is_global = 1;
		memcpy(attr->ah_attr.grh.dgid.raw, g->ah.dgid, 16);
		attr->ah_attr.grh.flow_label = g->ah.flow_label;
		attr->ah_attr.grh.sgid_index = g->ah.sgid_index;
		attr->ah_attr.grh.hop_limit = g->ah.hop_limit;
		attr->ah_attr.grh.traffic_class = g->ah.traffic_class;
		attr->ah_attr.sl = g->ah.sl;
		attr->ah_attr.port_num = g->ah.port;
	}
	attr->pkey_index = g->pkey_index;
	attr->en_sqd_async_notify = g->sqd_notify;
	attr->sq_draining = g->sq_draining;
	attr->max_rd_atomic = g->max_rd_atomic;
	attr->max_dest_rd_atomic = g->max_dest_rd_atomic;
	attr->min_rnr_timer = g->min_rnr_timer;
	attr->port_num = g->port;
	attr->timeout = g->timeout;
	attr->retry_cnt = g->retry_cnt;
	attr->rnr_retry = g->rnr_retry;
}

EXPORT int ibv_query_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	if (!q || !attr || !init_attr)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	struct goroce_query_qp_req req = {.handle = qp->h, .mask = (uint32_t)attr_mask};
	struct goroce_query_qp_reply rep;
	int r = gr_call(to_ctx(q->context), GOROCE_OP_QUERY_QP, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r)
		return r;
	gr_qp_attr_from(attr, &rep.attr);
	memset(init_attr, 0, sizeof *init_attr);
	init_attr->qp_context = q->qp_context;
	init_attr->send_cq = q->send_cq;
	init_attr->recv_cq = q->recv_cq;
	init_attr->srq = q->srq;
	init_attr->cap = attr->cap;
	init_attr->qp_type = q->qp_type;
	init_attr->sq_sig_all = rep.sig_all;
	if (attr_mask & IBV_QP_STATE)
		q->state = attr->qp_state;
	return 0;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0; /* data is not guaranteed to be written in order */
}

EXPORT int ibv_destroy_qp(struct ibv_qp *q)
{
	if (!q)
		return EINVAL;
	struct gr_qp *qp = to_qp(q);
	int r = destroy_handle(q->context, GOROCE_OP_DESTROY_QP, qp->h);
	if (r && r != EIO)
		return r;
	pthread_mutex_lock(&q->mutex);
	while (q->events_completed != qp->async_reported)
		pthread_cond_wait(&q->cond, &q->mutex);
	pthread_mutex_unlock(&q->mutex);
	gr_tab_del(to_ctx(q->context), qp->h);
	wq_free(&qp->sq);
	wq_free(&qp->rq);
	free(qp);
	return 0;
}

/* SRQ */

static struct ibv_srq *create_srq(struct ibv_pd *pd, void *srq_context, struct ibv_srq_attr *attr)
{
	if (!pd || !attr)
		return fail_null(EINVAL);
	struct gr_context *ctx = to_ctx(pd->context);
	struct gr_srq *s = calloc(1, sizeof *s);
	if (!s)
		return fail_null(ENOMEM);
	struct goroce_create_srq_req req = {
		.pd = to_pd(pd)->h, .max_wr = attr->max_wr, .max_sge = attr->max_sge, .limit = attr->srq_limit};
	struct goroce_create_srq_reply rep;
	int r = gr_call(ctx, GOROCE_OP_CREATE_SRQ, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r) {
		free(s);
		return fail_null(r);
	}
	r = gr_map_ring(ctx, &rep.ring, &s->r);
	s->wrid = calloc(rep.max_wr, sizeof *s->wrid);
	s->free = calloc(rep.max_wr, sizeof *s->free);
	if (!r && (!s->wrid || !s->free))
		r = ENOMEM;
	if (!r)
		r = gr_tab_add(ctx, rep.handle, GR_SRQ, s);
	if (r) {
		gr_unmap_ring(&s->r);
		free(s->wrid);
		free(s->free);
		destroy_handle(pd->context, GOROCE_OP_DESTROY_SRQ, rep.handle);
		free(s);
		return fail_null(r);
	}
	for (uint32_t i = 0; i < rep.max_wr; i++)
		s->free[i] = rep.max_wr - 1 - i;
	s->nfree = rep.max_wr;
	s->h = rep.handle;
	s->doorbell = rep.doorbell;
	s->max_wr = rep.max_wr;
	s->max_sge = rep.max_sge;
	s->prod = atomic_load((_Atomic uint32_t *)&s->r.hdr->prod);
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = rep.handle;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	attr->max_wr = rep.max_wr;
	attr->max_sge = rep.max_sge;
	return &s->srq;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return fail_null(EINVAL);
	return create_srq(pd, attr->srq_context, &attr->attr);
}

struct ibv_srq *gr_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *a)
{
	if (!context || !a)
		return fail_null(EINVAL);
	if (a->comp_mask & ~(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD))
		return fail_null(EOPNOTSUPP); /* XRC, tag matching */
	if (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE && a->srq_type != IBV_SRQT_BASIC)
		return fail_null(EOPNOTSUPP);
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != context)
		return fail_null(EINVAL);
	return create_srq(a->pd, a->srq_context, &a->attr);
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int attr_mask)
{
	if (!srq || !attr)
		return EINVAL;
	struct goroce_modify_srq_req req = {
		.handle = to_srq(srq)->h, .mask = (uint32_t)attr_mask, .max_wr = attr->max_wr, .limit = attr->srq_limit};
	return gr_call(to_ctx(srq->context), GOROCE_OP_MODIFY_SRQ, &req, sizeof req, NULL, 0, NULL, 0, NULL);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	struct goroce_handle_req req = {.handle = to_srq(srq)->h};
	struct goroce_query_srq_reply rep;
	int r = gr_call(to_ctx(srq->context), GOROCE_OP_QUERY_SRQ, &req, sizeof req, &rep, sizeof rep, NULL, 0, NULL);
	if (r)
		return r;
	attr->max_wr = rep.max_wr;
	attr->max_sge = rep.max_sge;
	attr->srq_limit = rep.limit;
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	if (!srq)
		return EINVAL;
	struct gr_srq *s = to_srq(srq);
	int r = destroy_handle(srq->context, GOROCE_OP_DESTROY_SRQ, s->h);
	if (r && r != EIO)
		return r;
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != s->async_reported)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	gr_tab_del(to_ctx(srq->context), s->h);
	gr_unmap_ring(&s->r);
	free(s->wrid);
	free(s->free);
	pthread_spin_destroy(&s->lock);
	free(s);
	return 0;
}

/* Asynchronous events */

EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	struct gr_context *ctx = to_ctx(context);
	for (;;) {
		struct goroce_async_event ev;
		ssize_t n = read(context->async_fd, &ev, sizeof ev);
		if (n == 0 && !atomic_exchange(&ctx->fatal_told, 1)) {
			/* The device closed its end: it stopped or died, as a
			 * NIC's catastrophic error, which the kernel reports
			 * once. */
			atomic_store(&ctx->gone, 1);
			memset(event, 0, sizeof *event);
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		if (n != sizeof ev) {
			if (n >= 0)
				errno = EIO;
			return -1;
		}
		memset(event, 0, sizeof *event);
		event->event_type = (enum ibv_event_type)ev.type;
		switch (ev.type) {
		case IBV_EVENT_CQ_ERR: {
			struct gr_cq *c = gr_tab_get(ctx, ev.handle, GR_CQ);
			if (!c)
				continue;
			pthread_mutex_lock(&c->cq.mutex);
			c->async_reported++;
			pthread_mutex_unlock(&c->cq.mutex);
			event->element.cq = ibv_cq_ex_to_cq(&c->cq);
			return 0;
		}
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED: {
			struct gr_qp *q = gr_tab_get(ctx, ev.handle, GR_QP);
			if (!q)
				continue;
			pthread_mutex_lock(&q->qpx.qp_base.mutex);
			q->async_reported++;
			pthread_mutex_unlock(&q->qpx.qp_base.mutex);
			event->element.qp = &q->qpx.qp_base;
			return 0;
		}
		case IBV_EVENT_SRQ_ERR:
		case IBV_EVENT_SRQ_LIMIT_REACHED: {
			struct gr_srq *s = gr_tab_get(ctx, ev.handle, GR_SRQ);
			if (!s)
				continue;
			pthread_mutex_lock(&s->srq.mutex);
			s->async_reported++;
			pthread_mutex_unlock(&s->srq.mutex);
			event->element.srq = &s->srq;
			return 0;
		}
		default:
			event->element.port_num = (int)ev.handle;
			return 0;
		}
	}
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	pthread_mutex_t *mu = NULL;
	pthread_cond_t *cv = NULL;
	uint32_t *n = NULL;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		if (event->element.cq) {
			mu = &event->element.cq->mutex;
			cv = &event->element.cq->cond;
			n = &event->element.cq->async_events_completed;
		}
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (event->element.qp) {
			mu = &event->element.qp->mutex;
			cv = &event->element.qp->cond;
			n = &event->element.qp->events_completed;
		}
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		if (event->element.srq) {
			mu = &event->element.srq->mutex;
			cv = &event->element.srq->cond;
			n = &event->element.srq->events_completed;
		}
		break;
	default:
		return;
	}
	if (!mu)
		return;
	pthread_mutex_lock(mu);
	(*n)++;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(mu);
}

/* Multicast: the device attaches the QP to the group through the engine,
 * which joins the group's IP address on its link. */

static int mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid, uint32_t op)
{
	if (!qp || !gid)
		return EINVAL;
	if (qp->qp_type != IBV_QPT_UD)
		return EINVAL;
	struct goroce_mcast_req req = {.qp = to_qp(qp)->h, .lid = lid};
	memcpy(req.gid, gid->raw, 16);
	return gr_call(to_ctx(qp->context), op, &req, sizeof req, NULL, 0, NULL, 0, NULL);
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, gid, lid, GOROCE_OP_ATTACH_MCAST);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, gid, lid, GOROCE_OP_DETACH_MCAST);
}

/* The context's operations: what the inline verbs of verbs.h call. */
void gr_set_ops(struct gr_context *ctx)
{
	struct ibv_context_ops *o = &ctx->vctx.context.ops;
	o->_compat_query_device = ibv_query_device;
	o->_compat_query_port = ibv_query_port;
	o->alloc_mw = gr_alloc_mw;
	o->bind_mw = gr_bind_mw;
	o->dealloc_mw = gr_dealloc_mw;
	o->poll_cq = gr_poll_cq;
	o->req_notify_cq = gr_req_notify_cq;
	o->post_srq_recv = gr_post_srq_recv;
	o->post_send = gr_post_send;
	o->post_recv = gr_post_recv;
	struct verbs_context *v = &ctx->vctx;
	v->query_port = gr_query_port;
	v->query_device_ex = gr_query_device_ex;
	v->create_cq_ex = gr_create_cq_ex;
	v->create_qp_ex = gr_create_qp_ex;
	v->create_srq_ex = gr_create_srq_ex;
}
