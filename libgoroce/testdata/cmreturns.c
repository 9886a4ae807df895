/*
 * rdma_cm's returns and events on the device, in one process: both ends
 * of each connection on the address given (a connection to oneself, as
 * on rxe0), each end with its own event channel. What librdmacm and the
 * kernel's rdma_cm give: REJECTED with reason 8 (invalid service ID)
 * from a port nobody listens on and 28 (consumer defined) from
 * rdma_reject; EINVAL from calls on a destroyed id; one DISCONNECTED per end however the connection ends;
 * rdma_disconnect's returns; multicast joins (IPv4); ids with no QP, the program moving its own
 * with rdma_init_qp_attr and ending the handshake with rdma_establish;
 * ENODEV from every entry point while no
 * device is there (mode "nodev"); DEVICE_REMOVAL for every id when the
 * device goes (mode "gone").
 *
 * usage: cmreturns ADDR PORT [gone] | cmreturns nodev
 */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <rdma/rdma_cma.h>

#include "gtest.h"

static struct sockaddr_storage addr;

/* next returns the type of ch's next event within ms (its status in
 * *status and its id in *id), or -1. */
static int next(struct rdma_event_channel *ch, int ms, int *status, struct rdma_cm_id **id)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	if (poll(&p, 1, ms) != 1)
		return -1;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	int t = ev->event;
	if (status)
		*status = ev->status;
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	return t;
}

/* expect checks that ch's next event is want, and returns its status. */
static int expect_ev(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id **id,
		     const char *what)
{
	int st = 0;
	int t = next(ch, 5000, &st, id);
	CHECK(t == (int)want, "%s: event %s (%d, status %d), want %s", what, t < 0 ? "none" : rdma_event_str(t), t, st,
	      rdma_event_str(want));
	return st;
}

static void set_port(int port)
{
	if (addr.ss_family == AF_INET)
		((struct sockaddr_in *)&addr)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&addr)->sin6_port = htons(port);
}

/* RMUST: an rdma_cm call succeeds; the test cannot go on without it. */
#define RMUST(expr)                                                                                                   \
	do {                                                                                                          \
		errno = 0;                                                                                            \
		if ((expr)) {                                                                                         \
			fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strerror(errno));        \
			exit(2);                                                                                      \
		}                                                                                                     \
	} while (0)

/* create_qp gives id an RC QP on CQs of its own (rdma_create_qp writes
 * the CQs it made into the attributes). */
static void create_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	RMUST(rdma_create_qp(id, NULL, &a));
}

/* dial resolves and connects a new id on ch to addr; it returns the id
 * with its QP once rdma_connect is called. */
static struct rdma_cm_id *dial(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;
	RMUST(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	RMUST(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 2000));
	expect_ev(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, "resolve_addr");
	RMUST(rdma_resolve_route(id, 2000));
	expect_ev(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, "resolve_route");
	create_qp(id);
	struct rdma_conn_param p = {.retry_count = 7, .rnr_retry_count = 7};
	RMUST(rdma_connect(id, &p));
	return id;
}

static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;
	RMUST(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	RMUST(rdma_bind_addr(id, (struct sockaddr *)&addr));
	RMUST(rdma_listen(id, 8));
	return id;
}

/* accept_next takes ch's next CONNECT_REQUEST and accepts it. */
static struct rdma_cm_id *accept_next(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;
	expect_ev(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &id, "listener");
	if (!id)
		exit(2);
	create_qp(id);
	struct rdma_conn_param p = {.retry_count = 7, .rnr_retry_count = 7};
	RMUST(rdma_accept(id, &p));
	return id;
}

static void close_id(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	EQ_ERR(rdma_destroy_id(id), 0);
}

/* connected makes a connection: the active end on cch, the passive one
 * on sch from listener ln. */
static void connected(struct rdma_event_channel *cch, struct rdma_event_channel *sch, struct rdma_cm_id **c,
		      struct rdma_cm_id **s)
{
	*c = dial(cch);
	*s = accept_next(sch);
	expect_ev(cch, RDMA_CM_EVENT_ESTABLISHED, NULL, "active end");
	expect_ev(sch, RDMA_CM_EVENT_ESTABLISHED, NULL, "passive end");
}

static void test_refused(struct rdma_event_channel *cch, int port)
{
	set_port(port);
	struct rdma_cm_id *c = dial(cch);
	int st = expect_ev(cch, RDMA_CM_EVENT_REJECTED, NULL, "connect to a port nobody listens on");
	CHECK(st == 8, "REJECTED status %d from a port nobody listens on, want 8 (invalid service ID)", st);
	close_id(c);
}

static void test_rejected(struct rdma_event_channel *cch, struct rdma_event_channel *sch, int port)
{
	set_port(port);
	struct rdma_cm_id *ln = listen_on(sch), *s = NULL;
	struct rdma_cm_id *c = dial(cch);
	expect_ev(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &s, "listener");
	if (!s)
		exit(2);
	const char why[] = "busy";
	EQ_ERR(rdma_reject(s, why, sizeof why), 0);
	int st = expect_ev(cch, RDMA_CM_EVENT_REJECTED, NULL, "connect to a program that rejects");
	CHECK(st == 28, "REJECTED status %d after rdma_reject, want 28 (consumer defined)", st);
	EQ_ERR(rdma_destroy_id(s), 0);
	close_id(c);
	EQ_ERR(rdma_destroy_id(ln), 0);
}

/* test_stale calls the entry points with an id rdma_destroy_id took, as
 * perftest 4.5's rdma_cm client does when it retries a rejected
 * connection: each fails with EINVAL and touches nothing, where
 * librdmacm reads freed memory. */
static void test_stale(struct rdma_event_channel *cch, int port)
{
	set_port(port);
	struct rdma_cm_id *c = dial(cch);
	expect_ev(cch, RDMA_CM_EVENT_REJECTED, NULL, "connect to a port nobody listens on");
	close_id(c);
	struct rdma_conn_param p = {.retry_count = 7};
	int opt = 1;
#define STALE(call)                                                                                                   \
	do {                                                                                                          \
		errno = 0;                                                                                            \
		int r_ = (call);                                                                                      \
		CHECK(r_ == -1 && errno == EINVAL, "%s on a destroyed id = %d, errno %d (%s), want -1 and EINVAL", #call, \
		      r_, errno, strerror(errno));                                                                    \
	} while (0)
	STALE(rdma_resolve_addr(c, NULL, (struct sockaddr *)&addr, 2000));
	STALE(rdma_bind_addr(c, (struct sockaddr *)&addr));
	STALE(rdma_resolve_route(c, 2000));
	STALE(rdma_listen(c, 1));
	STALE(rdma_connect(c, &p));
	STALE(rdma_accept(c, &p));
	STALE(rdma_reject(c, NULL, 0));
	STALE(rdma_disconnect(c));
	STALE(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &opt, sizeof opt));
	STALE(rdma_destroy_id(c));
#undef STALE
	rdma_destroy_qp(c); /* void: nothing to check but that it returns */
}

/* test_disconnect ends connections each way, and both ends at once:
 * each end gets one DISCONNECTED, and rdma_disconnect again returns 0. */
static void test_disconnect(struct rdma_event_channel *cch, struct rdma_event_channel *sch, int port)
{
	set_port(port);
	struct rdma_cm_id *ln = listen_on(sch);
	for (int how = 0; how < 3; how++) {
		struct rdma_cm_id *c, *s;
		connected(cch, sch, &c, &s);
		errno = 0;
		CHECK(rdma_establish(c) == -1 && errno == EINVAL, "rdma_establish of an id with a QP: errno %d", errno);
		if (how != 1)
			EQ_ERR(rdma_disconnect(c), 0);
		if (how != 0)
			EQ_ERR(rdma_disconnect(s), 0);
		expect_ev(cch, RDMA_CM_EVENT_DISCONNECTED, NULL, "active end");
		expect_ev(sch, RDMA_CM_EVENT_DISCONNECTED, NULL, "passive end");
		/* The end that did not disconnect answers the DREQ with its
		 * own rdma_disconnect, as programs do on DISCONNECTED. */
		EQ_ERR(rdma_disconnect(how == 0 ? s : c), 0);
		EQ_ERR(rdma_disconnect(c), 0);
		int t1 = next(cch, 300, NULL, NULL), t2 = next(sch, 300, NULL, NULL);
		CHECK(t1 < 0 && t2 < 0, "disconnect %d: a second event: %s on the active end, %s on the passive end", how,
		      t1 < 0 ? "none" : rdma_event_str(t1), t2 < 0 ? "none" : rdma_event_str(t2));
		close_id(c);
		close_id(s);
	}
	EQ_ERR(rdma_destroy_id(ln), 0);
}

/* test_relisten destroys a listener and listens on its port again: a
 * request that comes between goes to the new listener; one that comes
 * when nobody listens again is refused. */
static void test_relisten(struct rdma_event_channel *cch, struct rdma_event_channel *sch, int port)
{
	set_port(port);
	struct rdma_cm_id *ln = listen_on(sch), *c, *s;
	connected(cch, sch, &c, &s);
	EQ_ERR(rdma_destroy_id(ln), 0);
	struct rdma_cm_id *c2 = dial(cch);
	usleep(50 * 1000);
	ln = listen_on(sch);
	struct rdma_cm_id *s2 = accept_next(sch);
	expect_ev(cch, RDMA_CM_EVENT_ESTABLISHED, NULL, "a connect between two listeners");
	expect_ev(sch, RDMA_CM_EVENT_ESTABLISHED, NULL, "the second listener");
	EQ_ERR(rdma_destroy_id(ln), 0);
	struct rdma_cm_id *c3 = dial(cch);
	int st = expect_ev(cch, RDMA_CM_EVENT_REJECTED, NULL, "connect after the last listener went");
	CHECK(st == 8, "REJECTED status %d after the listener went, want 8", st);
	close_id(c3);
	struct rdma_cm_id *ends[] = {c, s, c2, s2};
	for (int i = 0; i < 4; i++) {
		EQ_ERR(rdma_disconnect(ends[i]), 0);
		expect_ev(i % 2 ? sch : cch, RDMA_CM_EVENT_DISCONNECTED, NULL, "an end of the relisten test");
	}
	for (int i = 0; i < 4; i++)
		close_id(ends[i]);
}

/* own_qp makes an RC QP of the program's own on id's device, with a CQ,
 * a PD and a registered buffer, and moves it to state with
 * rdma_init_qp_attr's attributes, state by state. */
struct own {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

static void own_qp(struct rdma_cm_id *id, struct own *o)
{
	o->pd = OK(ibv_alloc_pd(id->verbs));
	o->cq = OK(ibv_create_cq(id->verbs, 16, NULL, NULL, 0));
	struct ibv_qp_init_attr a = {.send_cq = o->cq, .recv_cq = o->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	o->qp = OK(ibv_create_qp(o->pd, &a));
	o->mr = OK(ibv_reg_mr(o->pd, o->buf, sizeof o->buf,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
}

static void move_qp(struct rdma_cm_id *id, struct ibv_qp *qp, const char *who)
{
	enum ibv_qp_state states[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
	for (int k = 0; k < 3; k++) {
		struct ibv_qp_attr a = {.qp_state = states[k]};
		int mask = 0;
		EQ_ERR(rdma_init_qp_attr(id, &a, &mask) ? errno : 0, 0);
		CHECK(a.qp_state == states[k] && (mask & IBV_QP_STATE), "%s: rdma_init_qp_attr(%d) gave state %d, mask %#x",
		      who, states[k], a.qp_state, mask);
		EQ_ERR(ibv_modify_qp(qp, &a, mask), 0);
	}
}

static void free_own(struct own *o)
{
	EQ_ERR(ibv_destroy_qp(o->qp), 0);
	EQ_ERR(ibv_dereg_mr(o->mr), 0);
	EQ_ERR(ibv_destroy_cq(o->cq), 0);
	EQ_ERR(ibv_dealloc_pd(o->pd), 0);
}

/* test_manual connects ids that have no QP, each end naming a QP of its
 * own (conn_param.qp_num) and moving it with rdma_init_qp_attr: the
 * active end gets CONNECT_RESPONSE and ends the handshake with
 * rdma_establish, the passive end then gets ESTABLISHED; data flows both
 * ways. */
static void test_manual(struct rdma_event_channel *cch, struct rdma_event_channel *sch, int port)
{
	set_port(port);
	struct rdma_cm_id *ln = listen_on(sch), *c, *s = NULL;
	RMUST(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	int mask;
	errno = 0;
	CHECK(rdma_init_qp_attr(c, &a, &mask) == -1 && errno == EINVAL, "rdma_init_qp_attr(RTR) of an unbound id: errno %d",
	      errno);
	RMUST(rdma_resolve_addr(c, NULL, (struct sockaddr *)&addr, 2000));
	expect_ev(cch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, "resolve_addr");
	RMUST(rdma_resolve_route(c, 2000));
	expect_ev(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, "resolve_route");
	static struct own co, so;
	own_qp(c, &co);
	struct rdma_conn_param p = {.qp_num = co.qp->qp_num, .responder_resources = 1, .initiator_depth = 1,
				    .retry_count = 7, .rnr_retry_count = 7};
	errno = 0;
	CHECK(rdma_establish(c) == -1 && errno == EINVAL, "rdma_establish before connecting: errno %d", errno);
	RMUST(rdma_connect(c, &p));

	expect_ev(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &s, "listener");
	if (!s)
		exit(2);
	own_qp(s, &so);
	move_qp(s, so.qp, "passive end, on the request");
	errno = 0;
	CHECK(rdma_accept(s, NULL) == -1 && errno == EINVAL, "rdma_accept with no QP and no conn_param: errno %d", errno);
	struct rdma_conn_param sp = {.qp_num = so.qp->qp_num, .responder_resources = 1, .initiator_depth = 1};
	RMUST(rdma_accept(s, &sp));

	expect_ev(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL, "the active end with no QP");
	move_qp(c, co.qp, "active end, on the response");
	CHECK(co.qp->state == IBV_QPS_RTS, "the active QP is %d", co.qp->state);
	EQ_ERR(rdma_establish(c) ? errno : 0, 0);
	expect_ev(sch, RDMA_CM_EVENT_ESTABLISHED, NULL, "the passive end after rdma_establish");
	int t = next(cch, 200, NULL, NULL);
	CHECK(t < 0, "the active end got %s after rdma_establish", t < 0 ? "none" : rdma_event_str(t));

	/* A SEND from the active end, an RDMA WRITE back into its buffer. */
	struct ibv_sge rs = {.addr = (uintptr_t)so.buf, .length = 64, .lkey = so.mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	EQ_ERR(ibv_post_recv(so.qp, &rwr, &rbad), 0);
	strcpy(co.buf, "hello with no QP on the id");
	struct ibv_sge ss = {.addr = (uintptr_t)co.buf, .length = 27, .lkey = co.mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	EQ_ERR(ibv_post_send(co.qp, &swr, &sbad), 0);
	struct ibv_wc wc[2];
	CHECK(poll_n(co.cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS, "the SEND did not complete");
	CHECK(poll_n(so.cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS && !strcmp(so.buf, co.buf),
	      "the receive: %s", so.buf);
	strcpy(so.buf + 100, "written back");
	struct ibv_sge ws = {.addr = (uintptr_t)so.buf + 100, .length = 13, .lkey = so.mr->lkey};
	struct ibv_send_wr wwr = {.wr_id = 3, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED};
	wwr.wr.rdma.remote_addr = (uintptr_t)co.buf + 200;
	wwr.wr.rdma.rkey = co.mr->rkey;
	EQ_ERR(ibv_post_send(so.qp, &wwr, &sbad), 0);
	CHECK(poll_n(so.cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS, "the WRITE did not complete");
	CHECK(!strcmp(co.buf + 200, "written back"), "the WRITE left %s", co.buf + 200);

	EQ_ERR(rdma_disconnect(c), 0);
	expect_ev(cch, RDMA_CM_EVENT_DISCONNECTED, NULL, "the active end with no QP");
	expect_ev(sch, RDMA_CM_EVENT_DISCONNECTED, NULL, "the passive end with no QP");
	EQ_ERR(rdma_disconnect(s), 0);
	EQ_ERR(rdma_destroy_id(c), 0);
	EQ_ERR(rdma_destroy_id(s), 0);
	EQ_ERR(rdma_destroy_id(ln), 0);
	free_own(&co);
	free_own(&so);
}

/* test_mcast joins a UD id to 239.255.60.1 and sends to the group from
 * another: MULTICAST_JOIN carries the join's context and the group's
 * address vector (its GID, QPN 0xFFFFFF, rdma_cm's Q_Key), the id's QP
 * is attached and gets the datagram; a send-only join attaches nothing;
 * the errors librdmacm and the kernel give. */
static void test_mcast(struct rdma_event_channel *ch)
{
	struct sockaddr_in grp = {.sin_family = AF_INET};
	inet_pton(AF_INET, "239.255.60.1", &grp.sin_addr);
	struct rdma_cm_id *tcp, *rx, *tx;
	RMUST(rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP));
	RMUST(rdma_create_id(ch, &rx, NULL, RDMA_PS_UDP));
	RMUST(rdma_create_id(ch, &tx, NULL, RDMA_PS_UDP));
	errno = 0;
	CHECK(rdma_join_multicast(rx, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL,
	      "a join of an unbound id: errno %d, want EINVAL", errno);
	set_port(0);
	RMUST(rdma_bind_addr(rx, (struct sockaddr *)&addr));
	RMUST(rdma_bind_addr(tx, (struct sockaddr *)&addr));
	RMUST(rdma_bind_addr(tcp, (struct sockaddr *)&addr));
	errno = 0;
	CHECK(rdma_join_multicast(tcp, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL,
	      "a join of a TCP id: errno %d, want EINVAL", errno);
	errno = 0;
	CHECK(rdma_join_multicast(rx, (struct sockaddr *)&addr, NULL) == -1 && errno == EINVAL,
	      "a join of a unicast address: errno %d, want EINVAL", errno);
	struct rdma_cm_join_mc_attr_ex bad = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS, .addr = (struct sockaddr *)&grp};
	errno = 0;
	CHECK(rdma_join_multicast_ex(rx, &bad, NULL) == -1 && errno == EINVAL, "a join with no flags: errno %d", errno);
	errno = 0;
	CHECK(rdma_leave_multicast(rx, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL,
	      "leaving a group not joined: errno %d, want EADDRNOTAVAIL", errno);

	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	RMUST(rdma_create_qp(rx, NULL, &qa));
	struct ibv_qp_init_attr qb = qa;
	qb.send_cq = qb.recv_cq = NULL;
	RMUST(rdma_create_qp(tx, NULL, &qb));
	static char rbuf[40 + 64], sbuf[64] = "to the group";
	struct ibv_mr *rmr = OK(ibv_reg_mr(rx->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *smr = OK(ibv_reg_mr(tx->pd, sbuf, sizeof sbuf, 0));
	struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = rmr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	EQ_ERR(ibv_post_recv(rx->qp, &rwr, &rbad), 0);

	int ctx_rx, ctx_tx;
	RMUST(rdma_join_multicast(rx, (struct sockaddr *)&grp, &ctx_rx));
	struct rdma_cm_join_mc_attr_ex so = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					     .addr = (struct sockaddr *)&grp,
					     .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER};
	RMUST(rdma_join_multicast_ex(tx, &so, &ctx_tx));
	struct rdma_ud_param ud[2];
	for (int k = 0; k < 2; k++) {
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		struct rdma_cm_event *ev;
		if (poll(&p, 1, 5000) != 1 || rdma_get_cm_event(ch, &ev)) {
			CHECK(0, "no MULTICAST_JOIN event");
			exit(2);
		}
		CHECK(ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && !ev->status, "event %s, status %d",
		      rdma_event_str(ev->event), ev->status);
		int who = ev->id == tx;
		CHECK(ev->param.ud.private_data == (who ? (void *)&ctx_tx : (void *)&ctx_rx), "the join's context");
		ud[who] = ev->param.ud;
		rdma_ack_cm_event(ev);
	}
	union ibv_gid want = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, [13] = 255, [14] = 60, [15] = 1}};
	CHECK(!memcmp(ud[0].ah_attr.grh.dgid.raw, want.raw, 16) && ud[0].ah_attr.is_global && ud[0].qp_num == 0xFFFFFF &&
		      ud[0].qkey == 0x01234567,
	      "the join's address vector: qpn %#x qkey %#x", ud[0].qp_num, ud[0].qkey);
	/* The send-only join attached nothing: detaching is an error. */
	CHECK(ibv_detach_mcast(tx->qp, &ud[1].ah_attr.grh.dgid, 0) != 0, "a send-only join attached its QP");

	struct ibv_ah *ah = OK(ibv_create_ah(tx->pd, &ud[1].ah_attr));
	struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = ud[1].qp_num;
	swr.wr.ud.remote_qkey = ud[1].qkey;
	EQ_ERR(ibv_post_send(tx->qp, &swr, &sbad), 0);
	struct ibv_wc wc;
	CHECK(poll_n(tx->send_cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS, "the group's SEND");
	CHECK(poll_n(rx->recv_cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS && !strcmp(rbuf + 40, sbuf),
	      "the member's receive: %s", rbuf + 40);

	EQ_ERR(rdma_leave_multicast(rx, (struct sockaddr *)&grp) ? errno : 0, 0);
	EQ_ERR(rdma_leave_multicast(tx, (struct sockaddr *)&grp) ? errno : 0, 0);
	errno = 0;
	CHECK(rdma_leave_multicast(rx, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL, "a second leave: errno %d",
	      errno);
	CHECK(ibv_detach_mcast(rx->qp, &want, 0) != 0, "the leave did not detach the QP");
	EQ_ERR(ibv_destroy_ah(ah), 0);
	EQ_ERR(ibv_dereg_mr(rmr), 0);
	EQ_ERR(ibv_dereg_mr(smr), 0);
	rdma_destroy_qp(rx);
	rdma_destroy_qp(tx);
	EQ_ERR(rdma_destroy_id(rx), 0);
	EQ_ERR(rdma_destroy_id(tx), 0);
	EQ_ERR(rdma_destroy_id(tcp), 0);
}

/* gone connects to itself, says "ready", and waits for the device to go:
 * each id gets DEVICE_REMOVAL, the listener's too, and tears down. */
/* Teardown as rping's threads of rdma-core 44 do it: an event thread
 * that holds an event while the main thread destroys the event's id, and
 * one that calls rdma_get_cm_event after the main thread destroyed the
 * channel. */
static struct rdma_event_channel *td_ch;
static atomic_int td_held, td_acked, td_go, td_returned, td_errno;

static void *td_holder(void *arg)
{
	(void)arg;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(td_ch, &ev))
		return NULL;
	td_held = ev->event == RDMA_CM_EVENT_DISCONNECTED ? 1 : -1;
	usleep(200 * 1000);
	td_acked = 1;
	rdma_ack_cm_event(ev);
	return NULL;
}

static void *td_late(void *arg)
{
	(void)arg;
	while (!td_go)
		usleep(1000);
	struct rdma_cm_event *ev;
	int r = rdma_get_cm_event(td_ch, &ev);
	td_errno = errno;
	td_returned = r ? -1 : 1;
	return NULL;
}

static void test_teardown(int port)
{
	set_port(port);
	struct rdma_event_channel *cch = OK(rdma_create_event_channel()), *sch = OK(rdma_create_event_channel());
	struct rdma_cm_id *ln = listen_on(sch), *c, *s;
	connected(cch, sch, &c, &s);
	td_ch = cch;
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, td_holder, NULL), "pthread_create");
	EQ_ERR(rdma_disconnect(s), 0);
	for (int i = 0; i < 5000 && !td_held; i++)
		usleep(1000);
	CHECK(td_held == 1, "the event thread's event: %d, want DISCONNECTED within 5 s", td_held);
	rdma_destroy_qp(c);
	EQ_ERR(rdma_destroy_id(c), 0);
	CHECK(td_acked, "rdma_destroy_id returned while its DISCONNECTED event was not acked");
	pthread_join(t, NULL);
	expect_ev(sch, RDMA_CM_EVENT_DISCONNECTED, NULL, "passive end");
	close_id(s);
	EQ_ERR(rdma_destroy_id(ln), 0);
	rdma_destroy_event_channel(sch);

	CHECK(!pthread_create(&t, NULL, td_late, NULL), "pthread_create");
	rdma_destroy_event_channel(cch);
	td_go = 1;
	usleep(300 * 1000);
	CHECK(!td_returned, "rdma_get_cm_event in another thread after the channel's destroy returned %d (errno %d), "
			    "want it to wait as a read of the closed descriptor that had begun does",
	      td_returned, td_errno);
	struct rdma_cm_event *ev;
	errno = 0;
	int r = rdma_get_cm_event(cch, &ev);
	CHECK(r == -1 && errno == EBADF, "rdma_get_cm_event after this thread destroyed the channel: %d, errno %d, want EBADF",
	      r, errno);
	pthread_detach(t); /* it waits for good; the program's end ends it */
}

static int gone(int port)
{
	struct rdma_event_channel *cch = OK(rdma_create_event_channel()), *sch = OK(rdma_create_event_channel());
	set_port(port);
	struct rdma_cm_id *ln = listen_on(sch), *c, *s;
	connected(cch, sch, &c, &s);
	printf("ready\n");
	struct rdma_cm_id *id = NULL;
	expect_ev(cch, RDMA_CM_EVENT_DEVICE_REMOVAL, &id, "the active end once the device went");
	CHECK(id == c, "DEVICE_REMOVAL of %p, want the active end %p", (void *)id, (void *)c);
	int got = 0;
	for (int k = 0; k < 2; k++) {
		id = NULL;
		expect_ev(sch, RDMA_CM_EVENT_DEVICE_REMOVAL, &id, "the passive side once the device went");
		got |= (id == ln) | (id == s) << 1;
	}
	CHECK(got == 3, "DEVICE_REMOVAL for the listener and the passive end: %d", got);
	close_id(c);
	close_id(s);
	EQ_ERR(rdma_destroy_id(ln), 0);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	return report("cmreturns gone");
}

static int nodev(void)
{
	NULL_ERR(rdma_create_event_channel(), ENODEV);
	struct rdma_cm_id *id;
	errno = 0;
	int r = rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP);
	CHECK(r == -1 && errno == ENODEV, "rdma_create_id with no device = %d, errno %d, want -1 and ENODEV", r, errno);
	int n = -1;
	struct ibv_context **l = rdma_get_devices(&n);
	CHECK(!l && n == 0, "rdma_get_devices with no device = %p, %d devices", (void *)l, n);
	return report("cmreturns nodev");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "nodev"))
		return nodev();
	int go = argc == 4 && !strcmp(argv[3], "gone");
	if (argc != 3 && !go) {
		fprintf(stderr, "usage: cmreturns ADDR PORT [gone] | cmreturns nodev\n");
		return 2;
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
	if (inet_pton(AF_INET, argv[1], &a4->sin_addr) == 1)
		a4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, argv[1], &a6->sin6_addr) == 1)
		a6->sin6_family = AF_INET6;
	else {
		fprintf(stderr, "cmreturns: %s is not an address\n", argv[1]);
		return 2;
	}
	int port = atoi(argv[2]);
	if (go)
		return gone(port);
	struct rdma_event_channel *cch = OK(rdma_create_event_channel()), *sch = OK(rdma_create_event_channel());
	test_refused(cch, port);
	test_stale(cch, port);
	test_rejected(cch, sch, port + 1);
	test_disconnect(cch, sch, port + 2);
	test_relisten(cch, sch, port + 3);
	test_manual(cch, sch, port + 4);
	if (addr.ss_family == AF_INET)
		test_mcast(cch);
	test_teardown(port + 5);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	return report("cmreturns");
}
