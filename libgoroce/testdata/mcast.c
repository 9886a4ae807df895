/*
 * mcast: UD multicast through ibv_attach_mcast and ibv_detach_mcast on
 * one device, as a program on rxe sees it: the device's limits in
 * ibv_query_device, the attach rules (UD QPs and multicast GIDs only,
 * attaching twice succeeds, detaching what is not attached is EINVAL, an
 * attached QP cannot be destroyed: EBUSY), and delivery: a SEND to the
 * group reaches each QP attached once, the sender's own included, and no
 * QP that is not. Group ::ffff:239.255.45.1 on the device's loopback
 * address. Exit 0 on success; each failure says what.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define QKEY 0x11111111
#define SLOT 256

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		FAIL("ibv_create_qp: %m");
	return q;
}

static void ud_up(struct ibv_qp *q)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		FAIL("INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE))
		FAIL("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		FAIL("RTS");
}

static struct ibv_mr *mr;

static void post_recv(struct ibv_qp *q, int slot)
{
	struct ibv_sge s = {.addr = (uintptr_t)mr->addr + slot * SLOT, .length = SLOT, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &s, .num_sge = 1}, *bad;
	if (ibv_post_recv(q, &wr, &bad))
		FAIL("ibv_post_recv");
}

static void send_to(struct ibv_qp *q, struct ibv_ah *ah, int slot, const char *msg)
{
	char *buf = (char *)mr->addr + slot * SLOT;
	strcpy(buf, msg);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = strlen(msg) + 1, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1000 + slot, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = QKEY;
	struct ibv_send_wr *bad;
	if (ibv_post_send(q, &wr, &bad))
		FAIL("ibv_post_send: %m");
}

/* expect takes want receive completions (and the send completions that
 * come) within 5 s, checks each one's QP and message, and that no other
 * receive comes within 300 ms more. qpns lists the QPs that must receive,
 * once each; each has receives enough posted. */
static void expect(struct ibv_cq *cq, const uint32_t *qpns, int want, const char *msg)
{
	int got = 0, seen[8] = {0};
	struct timespec now, end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 5;
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			FAIL("ibv_poll_cq");
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (n == 0) {
			if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec > end.tv_nsec))
				break;
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("completion of %llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		if (wc.opcode != IBV_WC_RECV)
			continue;
		int i;
		for (i = 0; i < want && qpns[i] != wc.qp_num; i++)
			;
		if (i == want)
			FAIL("\"%s\": QP %u received, and is not attached (or is the sender and not attached)", msg,
			     wc.qp_num);
		if (seen[i]++)
			FAIL("\"%s\": QP %u received twice", msg, wc.qp_num);
		const char *data = (char *)mr->addr + wc.wr_id * SLOT + 40; /* after the GRH */
		if (!(wc.wc_flags & IBV_WC_GRH) || strcmp(data, msg) != 0)
			FAIL("QP %u received \"%.*s\", want \"%s\"", wc.qp_num, 40, data, msg);
		got++;
		if (got == want) {
			clock_gettime(CLOCK_MONOTONIC, &end);
			end.tv_nsec += 300 * 1000000L;
			if (end.tv_nsec >= 1000000000L) {
				end.tv_sec++;
				end.tv_nsec -= 1000000000L;
			}
		}
	}
	if (got != want)
		FAIL("\"%s\": %d of %d QPs received", msg, got, want);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("ibv_open_device: %m");
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		FAIL("ibv_query_device");
	if (da.max_mcast_grp != 8192 || da.max_mcast_qp_attach != 56 || da.max_total_mcast_qp_attach != 0x70000)
		FAIL("multicast limits %d %d %d, want rxe's 8192 56 458752", da.max_mcast_grp, da.max_mcast_qp_attach,
		     da.max_total_mcast_qp_attach);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("PD or CQ");
	static char mem[32 * SLOT];
	if (!(mr = ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE)))
		FAIL("ibv_reg_mr: %m");
	struct ibv_qp *rc = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_UD), *b = make_qp(pd, cq, IBV_QPT_UD), *c = make_qp(pd, cq, IBV_QPT_UD);

	union ibv_gid group = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, [13] = 255, [14] = 45, [15] = 1}};
	union ibv_gid unicast = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1}};
	if ((n = ibv_attach_mcast(rc, &group, 0)) != EINVAL)
		FAIL("attach of an RC QP: %d, want EINVAL", n);
	if ((n = ibv_attach_mcast(a, &unicast, 0)) != EINVAL)
		FAIL("attach to a unicast GID: %d, want EINVAL", n);
	if ((n = ibv_attach_mcast(a, &group, 0)) != 0)
		FAIL("attach: %s", strerror(n));
	if ((n = ibv_attach_mcast(a, &group, 0)) != 0)
		FAIL("second attach: %d, want 0 (the kernel's uverbs)", n);
	if ((n = ibv_attach_mcast(b, &group, 0)) != 0)
		FAIL("attach of b: %s", strerror(n));
	if ((n = ibv_detach_mcast(c, &group, 0)) != EINVAL)
		FAIL("detach of a QP not attached: %d, want EINVAL", n);
	if ((n = ibv_destroy_qp(a)) != EBUSY)
		FAIL("destroy of an attached QP: %d, want EBUSY", n);

	struct ibv_qp *qps[3] = {a, b, c};
	for (int i = 0; i < 3; i++) {
		ud_up(qps[i]);
		for (int j = 0; j < 8; j++)
			post_recv(qps[i], i * 8 + j);
	}
	/* The session's worker hands posted receives to the engine after
	 * ibv_post_recv returns, and a UD datagram that finds none is lost:
	 * let it. */
	struct timespec settle = {0, 100 * 1000000L};
	nanosleep(&settle, NULL);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = group, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		FAIL("ibv_create_ah to the group: %m");

	uint32_t ab[2] = {a->qp_num, b->qp_num}, only_a[1] = {a->qp_num};
	send_to(c, ah, 24, "from c, not attached");
	expect(cq, ab, 2, "from c, not attached");
	send_to(a, ah, 25, "from a, attached");
	expect(cq, ab, 2, "from a, attached");
	if ((n = ibv_detach_mcast(b, &group, 0)) != 0)
		FAIL("detach of b: %s", strerror(n));
	send_to(c, ah, 26, "after b left");
	expect(cq, only_a, 1, "after b left");
	if ((n = ibv_detach_mcast(a, &group, 0)) != 0 || (n = ibv_detach_mcast(a, &group, 0)) != EINVAL)
		FAIL("detach of a, twice: %d, want 0 then EINVAL", n);
	ibv_destroy_ah(ah);
	for (int i = 0; i < 3; i++)
		if ((n = ibv_destroy_qp(qps[i])) != 0)
			FAIL("destroy: %s", strerror(n));
	printf("multicast ok\n");
	return 0;
}
