/*
 * What the library relies on of the layouts in the system's
 * <infiniband/verbs.h>, checked as it compiles: a header whose structs
 * differ stops the build here rather than corrupting a program's memory.
 */
#include <stddef.h>

#include "goroce.h"

/* SGEs are copied into the rings as the program gives them. */
_Static_assert(sizeof(struct ibv_sge) == sizeof(struct goroce_sge), "ibv_sge");
_Static_assert(offsetof(struct ibv_sge, addr) == offsetof(struct goroce_sge, addr), "ibv_sge.addr");
_Static_assert(offsetof(struct ibv_sge, length) == offsetof(struct goroce_sge, length), "ibv_sge.length");
_Static_assert(offsetof(struct ibv_sge, lkey) == offsetof(struct goroce_sge, lkey), "ibv_sge.lkey");

/* Programs hold &verbs_context.context, which must be its last field,
 * with sz just before it (verbs_get_ctx). */
_Static_assert(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) == sizeof(struct verbs_context),
	       "verbs_context.context last");
_Static_assert(offsetof(struct verbs_context, sz) + sizeof(size_t) == offsetof(struct verbs_context, context),
	       "verbs_context.sz before context");

/* ibv_qp_to_qp_ex and ibv_cq_ex_to_cq convert by pointer. */
_Static_assert(offsetof(struct ibv_qp_ex, qp_base) == 0, "ibv_qp_ex.qp_base");
_Static_assert(offsetof(struct ibv_cq_ex, context) == offsetof(struct ibv_cq, context), "ibv_cq_ex.context");
_Static_assert(offsetof(struct ibv_cq_ex, channel) == offsetof(struct ibv_cq, channel), "ibv_cq_ex.channel");
_Static_assert(offsetof(struct ibv_cq_ex, cq_context) == offsetof(struct ibv_cq, cq_context), "ibv_cq_ex.cq_context");
_Static_assert(offsetof(struct ibv_cq_ex, cqe) == offsetof(struct ibv_cq, cqe), "ibv_cq_ex.cqe");
_Static_assert(offsetof(struct ibv_cq_ex, mutex) == offsetof(struct ibv_cq, mutex), "ibv_cq_ex.mutex");
_Static_assert(offsetof(struct ibv_cq_ex, cond) == offsetof(struct ibv_cq, cond), "ibv_cq_ex.cond");
_Static_assert(offsetof(struct ibv_cq_ex, async_events_completed) == offsetof(struct ibv_cq, async_events_completed),
	       "ibv_cq_ex.async_events_completed");

/* The device reads ibverbs' numbers as they are (package verbs has the
 * same). */
_Static_assert(IBV_WR_RDMA_WRITE == 0 && IBV_WR_RDMA_WRITE_WITH_IMM == 1 && IBV_WR_SEND == 2 &&
		       IBV_WR_SEND_WITH_IMM == 3 && IBV_WR_RDMA_READ == 4 && IBV_WR_ATOMIC_CMP_AND_SWP == 5 &&
		       IBV_WR_ATOMIC_FETCH_AND_ADD == 6 && IBV_WR_LOCAL_INV == 7 && IBV_WR_BIND_MW == 8 &&
		       IBV_WR_SEND_WITH_INV == 9,
	       "ibv_wr_opcode");
_Static_assert(IBV_SEND_FENCE == 1 && IBV_SEND_SIGNALED == 2 && IBV_SEND_SOLICITED == 4 && IBV_SEND_INLINE == 8,
	       "ibv_send_flags");
_Static_assert(IBV_WC_SUCCESS == 0 && IBV_WC_WR_FLUSH_ERR == 5 && IBV_WC_GENERAL_ERR == 21, "ibv_wc_status");
_Static_assert(IBV_WC_SEND == 0 && IBV_WC_RDMA_WRITE == 1 && IBV_WC_RDMA_READ == 2 && IBV_WC_COMP_SWAP == 3 &&
		       IBV_WC_FETCH_ADD == 4 && IBV_WC_BIND_MW == 5 && IBV_WC_LOCAL_INV == 6 && IBV_WC_RECV == 128 &&
		       IBV_WC_RECV_RDMA_WITH_IMM == 129,
	       "ibv_wc_opcode");
_Static_assert(IBV_WC_GRH == 1 && IBV_WC_WITH_IMM == 2 && IBV_WC_WITH_INV == 8, "ibv_wc_flags");
_Static_assert(IBV_ACCESS_LOCAL_WRITE == 1 && IBV_ACCESS_REMOTE_WRITE == 2 && IBV_ACCESS_REMOTE_READ == 4 &&
		       IBV_ACCESS_REMOTE_ATOMIC == 8 && IBV_ACCESS_MW_BIND == 16 && IBV_ACCESS_ZERO_BASED == 32,
	       "ibv_access_flags");
_Static_assert(IBV_QP_STATE == 1 && IBV_QP_AV == 1 << 7 && IBV_QP_DEST_QPN == 1 << 20, "ibv_qp_attr_mask");
_Static_assert(IBV_QPS_RESET == 0 && IBV_QPS_ERR == 6 && IBV_MTU_256 == 1 && IBV_MTU_4096 == 5, "ibv_qp_state, ibv_mtu");
_Static_assert(IBV_EVENT_CQ_ERR == 0 && IBV_EVENT_SRQ_LIMIT_REACHED == 15 && IBV_EVENT_QP_LAST_WQE_REACHED == 16,
	       "ibv_event_type");

/* The slot of ibv_qp_ex's builders after wr_atomic_write is wr_flush
 * (rdma-core 45 and later) or gr_qp's qpx_more[0]: either way the library
 * fills it. */
_Static_assert(offsetof(struct gr_qp, qpx) == 0, "gr_qp.qpx");
_Static_assert(offsetof(struct ibv_qp_ex, wr_atomic_write) + sizeof(void *) <= sizeof(struct ibv_qp_ex) ||
		       offsetof(struct gr_qp, qpx_more) == sizeof(struct ibv_qp_ex),
	       "the slot after wr_atomic_write");
