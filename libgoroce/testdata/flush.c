/*
 * flush: IBTA 1.5's ATOMIC_WRITE and FLUSH through the extended QP's
 * builders, on two RC QPs of one device connected to each other: the 8
 * bytes land, the FLUSH completes after them, and a FLUSH of a region
 * without the right is refused as rxe refuses it (a remote access error).
 * It builds against rdma-core 44's headers, which have ibv_wr_atomic_write
 * but not ibv_wr_flush: that builder is called through the slot rdma-core
 * 45 appended to ibv_qp_ex. Exit 0 on success; each failure says what.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

typedef void (*flush_fn)(struct ibv_qp_ex *, uint32_t, uint64_t, size_t, uint8_t, uint8_t);

static flush_fn wr_flush_of(struct ibv_qp_ex *q)
{
	return *(flush_fn *)((char *)&q->wr_atomic_write + sizeof(void *));
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE | (1 << 11) /* FLUSH */,
	};
	struct ibv_qp *q = ibv_create_qp_ex(ctx, &a);
	if (!q)
		FAIL("ibv_create_qp_ex with FLUSH and ATOMIC_WRITE: %m");
	return q;
}

static void connect_qp(struct ibv_qp *q, uint32_t dest, union ibv_gid *gid, int rights)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = rights};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				      IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("RTS");
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			FAIL("ibv_poll_cq");
		if (n)
			return wc;
		if (time(NULL) > end)
			FAIL("no completion in 10 s");
	}
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || !n)
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_device_attr_ex dx;
	if (!ctx || ibv_query_device_ex(ctx, NULL, &dx))
		FAIL("open, query");
	if (!(dx.device_cap_flags_ex & (1ULL << 38)) || !(dx.device_cap_flags_ex & (1ULL << 40)))
		FAIL("device_cap_flags_ex %#llx lacks FLUSH_GLOBAL or ATOMIC_WRITE", (unsigned long long)dx.device_cap_flags_ex);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	static uint64_t target[512] __attribute__((aligned(4096)));
	static uint64_t plain[512] __attribute__((aligned(4096)));
	struct ibv_mr *mr = ibv_reg_mr(pd, target, sizeof target,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (1 << 8) /* FLUSH_GLOBAL */);
	struct ibv_mr *mr2 = ibv_reg_mr(pd, plain, sizeof plain, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !cq || !mr || !mr2)
		FAIL("pd, cq, mr: %m");
	if (ibv_reg_mr(pd, plain, 64, IBV_ACCESS_LOCAL_WRITE | (1 << 9)))
		FAIL("a region with FLUSH_PERSISTENT registered: goroce's memory is not persistent");
	struct ibv_qp *a = make_qp(ctx, pd, cq), *b = make_qp(ctx, pd, cq);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	connect_qp(a, b->qp_num, &gid, 0);
	connect_qp(b, a->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE | (1 << 8));
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	if (!x)
		FAIL("ibv_qp_to_qp_ex");
	uint64_t v = 0x1122334455667788ULL;
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, mr->rkey, (uintptr_t)&target[3], &v);
	x->wr_id = 2;
	wr_flush_of(x)(x, mr->rkey, (uintptr_t)target, sizeof target, 1 /* IBV_FLUSH_GLOBAL */, 0 /* IBV_FLUSH_RANGE */);
	if (ibv_wr_complete(x))
		FAIL("ibv_wr_complete: %m");
	struct ibv_wc w1 = wait_wc(cq), w2 = wait_wc(cq);
	if (w1.status || w1.wr_id != 1 || w1.opcode != 9 || w2.status || w2.wr_id != 2 || w2.opcode != 8)
		FAIL("completions: %s id %llu opcode %d, %s id %llu opcode %d", ibv_wc_status_str(w1.status),
		     (unsigned long long)w1.wr_id, w1.opcode, ibv_wc_status_str(w2.status), (unsigned long long)w2.wr_id,
		     w2.opcode);
	if (target[3] != v)
		FAIL("ATOMIC_WRITE left %#llx, want %#llx", (unsigned long long)target[3], (unsigned long long)v);
	/* A FLUSH of a region without the right: a remote access error. */
	ibv_wr_start(x);
	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED;
	wr_flush_of(x)(x, mr2->rkey, (uintptr_t)plain, 64, 1, 0);
	if (ibv_wr_complete(x))
		FAIL("ibv_wr_complete: %m");
	struct ibv_wc w3 = wait_wc(cq);
	if (w3.status != IBV_WC_REM_ACCESS_ERR || w3.wr_id != 3)
		FAIL("FLUSH without the region's right: %s, want remote access error", ibv_wc_status_str(w3.status));
	/* ibv_post_send takes neither: their arguments have no room there. */
	struct ibv_qp *c = make_qp(ctx, pd, cq);
	connect_qp(c, b->qp_num, &gid, 0);
	struct ibv_send_wr wr = {.opcode = 15 /* IBV_WR_ATOMIC_WRITE */}, *bad;
	if (ibv_post_send(c, &wr, &bad) != EINVAL || bad != &wr)
		FAIL("ibv_post_send of an ATOMIC_WRITE: want EINVAL");
	printf("flush: ATOMIC_WRITE and FLUSH ok\n");
	return 0;
}
