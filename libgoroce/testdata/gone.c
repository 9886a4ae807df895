/*
 * A program whose device goes (it stops, or its process dies) while the
 * program waits on it: it prints "ready" once its QPs are connected and a
 * receive is posted, then polls a CQ that nothing will fill. The device
 * going must show at once, as a NIC's catastrophic error does: the poll
 * fails, ibv_get_async_event reports IBV_EVENT_DEVICE_FATAL (once), a
 * completion channel's read fails, posting fails with EIO, and the
 * program can still tear everything down and close the device.
 *
 * usage: gone DEVICE [events]   (events: wait on the completion channel
 * instead of polling)
 */
#include <poll.h>

#include "gtest.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: gone DEVICE [events]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int events = argc > 2 && !strcmp(argv[2], "events");
	struct ibv_context *ctx = open_named(argv[1]);
	struct ibv_pd *pd = OK(ibv_alloc_pd(ctx));
	struct ibv_comp_channel *ch = OK(ibv_create_comp_channel(ctx));
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 16, NULL, ch, 0));
	struct ibv_qp *a = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 4, 1)), *b = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 4, 1));
	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid));
	MUST(connect_pair(a, b, &gid, IBV_ACCESS_LOCAL_WRITE));
	static char buf[4096];
	struct ibv_mr *mr = OK(ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	MUST(ibv_post_recv(b, &rwr, &bad));
	MUST(ibv_req_notify_cq(cq, 0));
	printf("ready\n");

	double t0 = now_ms();
	if (events) {
		struct ibv_cq *ecq;
		void *ectx;
		errno = 0;
		int r = ibv_get_cq_event(ch, &ecq, &ectx);
		CHECK(r == -1, "ibv_get_cq_event = %d once the device went, want -1", r);
	} else {
		struct ibv_wc wc;
		int r;
		while ((r = ibv_poll_cq(cq, 1, &wc)) == 0 && now_ms() - t0 < 20000)
			;
		CHECK(r < 0, "ibv_poll_cq = %d once the device went (after %.0f ms), want < 0", r, now_ms() - t0);
	}
	printf("noticed after %.0f ms\n", now_ms() - t0);

	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 5000) == 1, "the async fd is not readable once the device went");
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev) == 0) {
		CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL, "async event %s, want IBV_EVENT_DEVICE_FATAL",
		      ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	} else {
		CHECK(0, "ibv_get_async_event failed (%s), want IBV_EVENT_DEVICE_FATAL", strerror(errno));
	}
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1, "a second async event after IBV_EVENT_DEVICE_FATAL");

	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	EQ_ERR(ibv_post_send(a, &swr, &sbad), EIO);
	EQ_ERR(ibv_post_recv(b, &rwr, &bad), EIO);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) < 0, "ibv_poll_cq succeeds after the device went");
	CHECK(ibv_req_notify_cq(cq, 0) != 0, "ibv_req_notify_cq succeeds after the device went");
	NULL_ERR(ibv_alloc_pd(ctx), EIO);

	EQ_ERR(ibv_destroy_qp(a), 0);
	EQ_ERR(ibv_destroy_qp(b), 0);
	EQ_ERR(ibv_dereg_mr(mr), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
	EQ_ERR(ibv_destroy_comp_channel(ch), 0);
	EQ_ERR(ibv_dealloc_pd(pd), 0);
	EQ_ERR(ibv_close_device(ctx), 0);
	/* What was registered is the program's own again. */
	memset(buf, 7, sizeof buf);
	CHECK(buf[100] == 7, "the registered buffer");
	return report("gone");
}
