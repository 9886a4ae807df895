/*
 * flush_client: the client of the flush protocol (see flush.h), written
 * for goroce's interop tests: it posts FLUSH and ATOMIC_WRITE (and the
 * WRITE and READs around them) through ibv_qp_ex's ibv_wr_* builders.
 *
 *   flush_client SERVER PORT [qp|mr]
 *
 * Exit status 0 when every step completed as flush.h says (the last with
 * the NAK's status), 1 otherwise, 2 when built without FLUSH.
 */
#include "peers.h"
#include "flush.h"

static const char *who = "flush_client";

#ifndef HAVE_IBV_FLUSH
int main(void) { return flush_without(who); }
#else
/* wait_one: the next completion on r's CQ, whatever its status. */
static int wait_one(struct peer_res *r, struct ibv_wc *wc, int tmo)
{
	long long deadline = peer_now_ms() + tmo;
	for (int i = 0; i < 1000000; i++) {
		int n = ibv_poll_cq(r->cq, 1, wc);
		if (n < 0)
			return -1;
		if (n == 1)
			return 0;
		if (peer_wait_fd(r->ch->fd, deadline))
			break;
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(r->ch, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			ibv_req_notify_cq(cq, 0);
		}
	}
	fprintf(stderr, "%s: no completion within %d ms\n", who, tmo);
	return -1;
}

/* op is one step's work request, as the ibv_wr_* builders take it. */
struct op {
	enum ibv_wr_opcode code;
	uint64_t raddr;
	uint32_t rkey;
	uint8_t *local; /* WRITE and READ: the bytes, in mr */
	uint32_t len;   /* WRITE and READ: the bytes; FLUSH: the range */
	uint8_t type, level;
};

/* post_ex posts one signaled request through the ibv_wr_* API and waits
 * for its completion into *wc. */
static int post_ex(struct ibv_qp_ex *x, struct ibv_mr *mr, struct peer_res *r, const struct op *o, uint64_t id,
		   struct ibv_wc *wc, int tmo)
{
	uint64_t v = FLUSH_VALUE;
	ibv_wr_start(x);
	x->wr_id = id;
	x->wr_flags = IBV_SEND_SIGNALED;
	switch (o->code) {
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(x, o->rkey, o->raddr);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)o->local, o->len);
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(x, o->rkey, o->raddr);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)o->local, o->len);
		break;
	case IBV_WR_ATOMIC_WRITE:
		ibv_wr_atomic_write(x, o->rkey, o->raddr, &v);
		break;
	case IBV_WR_FLUSH:
		ibv_wr_flush(x, o->rkey, o->raddr, o->len, o->type, o->level);
		break;
	default:
		ibv_wr_abort(x);
		return -1;
	}
	int rc = ibv_wr_complete(x);
	if (rc) {
		fprintf(stderr, "%s: ibv_wr_complete: %s\n", who, strerror(rc < 0 ? -rc : rc));
		return -1;
	}
	return wait_one(r, wc, tmo);
}

/* field returns the hex value of key=... in the private data pd. */
static int field(const char *pd, const char *key, unsigned long long *v)
{
	char pat[8];
	snprintf(pat, sizeof pat, " %s=", key);
	const char *p = strstr(pd, pat);
	return p && sscanf(p + strlen(pat), "%llx", v) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *mr = NULL;
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	uint8_t *buf = NULL, want[FLUSH_WR_LEN];
	char req[56], rep[200];
	unsigned long long fa, fk, pa, pk;
	int tmo = peer_timeout_ms(), rc = 1, connected = 0;
	const char *nak = argc >= 4 ? argv[3] : "qp";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3 || (strcmp(nak, "qp") && strcmp(nak, "mr"))) {
		fprintf(stderr, "Usage: %s <server-ip> <port> [qp|mr]\n", argv[0]);
		return 1;
	}
	if (peer_resolve(who, argv[1], argv[2], &addr))
		return 1;
	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	if (peer_client_id(who, ec, &id, &addr, 5000))
		goto out;
	res.pd = ibv_alloc_pd(id->verbs);
	res.ch = res.pd ? ibv_create_comp_channel(id->verbs) : NULL;
	res.cq = res.ch ? ibv_create_cq(id->verbs, 64, NULL, res.ch, 0) : NULL;
	if (!res.cq || peer_nonblock(res.ch->fd) || ibv_req_notify_cq(res.cq, 0)) {
		fprintf(stderr, "%s: cannot set up PD and CQ: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_qp_init_attr_ex qpa = {
		.send_cq = res.cq, .recv_cq = res.cq, .qp_type = IBV_QPT_RC, .pd = res.pd,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_FLUSH |
				  IBV_QP_EX_WITH_ATOMIC_WRITE,
	};
	if (rdma_create_qp_ex(id, &qpa)) {
		fprintf(stderr, "%s: rdma_create_qp_ex with FLUSH and ATOMIC_WRITE (kernel 6.2's rxe, rdma-core 45): %s\n",
			who, strerror(errno));
		goto out;
	}
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(id->qp);
	if (posix_memalign((void **)&buf, 4096, FLUSH_REGION)) {
		fprintf(stderr, "%s: out of memory\n", who);
		goto out;
	}
	memset(buf, 0, FLUSH_REGION);
	mr = ibv_reg_mr(res.pd, buf, FLUSH_REGION, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 100, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(id->qp, &rwr, &bad)) {
		fprintf(stderr, "%s: ibv_post_recv failed\n", who);
		goto out;
	}
	int n = snprintf(req, sizeof req, "m=flush a=%llx k=%x l=%d", (unsigned long long)(uintptr_t)buf, mr->rkey,
			 FLUSH_REGION);
	struct rdma_conn_param cp = { .private_data = req, .private_data_len = (uint8_t)(n + 1),
				      .initiator_depth = 16, .responder_resources = 16, .retry_count = 7,
				      .rnr_retry_count = 7 };
	if (rdma_connect(id, &cp)) {
		fprintf(stderr, "%s: rdma_connect: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_CONNECT_RESPONSE, &ev, tmo))
		goto out;
	if (ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		rdma_ack_cm_event(ev);
		if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
			goto out;
	}
	connected = 1;
	memset(rep, 0, sizeof rep);
	if (ev->param.conn.private_data)
		memcpy(rep, ev->param.conn.private_data,
		       ev->param.conn.private_data_len < sizeof rep - 1 ? ev->param.conn.private_data_len : sizeof rep - 1);
	rdma_ack_cm_event(ev);
	if (strncmp(rep, "m=flush", 7) || field(rep, "fa", &fa) || field(rep, "fk", &fk) || field(rep, "pa", &pa) ||
	    field(rep, "pk", &pk)) {
		fprintf(stderr, "%s: the server's private data is not a flush server's: %.60s\n", who, rep);
		goto out;
	}
	if (wait_one(&res, &wc, tmo) || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) {
		fprintf(stderr, "%s: no %s from the server\n", who, FLUSH_READY);
		goto out;
	}
	flush_pattern(buf + FLUSH_WR_OFF);
	const struct op steps[] = {
		{ IBV_WR_RDMA_WRITE, fa + FLUSH_WR_OFF, (uint32_t)fk, buf + FLUSH_WR_OFF, FLUSH_WR_LEN, 0, 0 },
		{ IBV_WR_FLUSH, fa + FLUSH_WR_OFF, (uint32_t)fk, NULL, FLUSH_WR_LEN, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE },
		{ IBV_WR_ATOMIC_WRITE, fa + FLUSH_AW_OFF, (uint32_t)fk, NULL, 8, 0, 0 },
		{ IBV_WR_RDMA_READ, fa + FLUSH_AW_OFF, (uint32_t)fk, buf + 2048, 8, 0, 0 },
		{ IBV_WR_RDMA_READ, fa + FLUSH_WR_OFF, (uint32_t)fk, buf + 2056, FLUSH_WR_LEN, 0, 0 },
		{ IBV_WR_FLUSH, 0, (uint32_t)fk, NULL, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR },
	};
	const char *say[] = { NULL, "FLUSH global range", "ATOMIC_WRITE", NULL, NULL, "FLUSH global whole region" };
	for (int i = 0; i < (int)(sizeof steps / sizeof steps[0]); i++) {
		if (post_ex(x, mr, &res, &steps[i], (uint64_t)i + 1, &wc, tmo))
			goto out;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: step %d completed with %s\n", who, i + 1, flush_status_name(wc.status));
			goto out;
		}
		if (say[i])
			printf("%s: SUCCESS\n", say[i]);
		if (i == 4) {
			uint64_t v;
			memcpy(&v, buf + 2048, 8);
			flush_pattern(want);
			if (v != FLUSH_VALUE || memcmp(buf + 2056, want, FLUSH_WR_LEN)) {
				fprintf(stderr, "%s: read back %#llx and the WRITE's bytes %s\n", who, (unsigned long long)v,
					memcmp(buf + 2056, want, FLUSH_WR_LEN) ? "differ" : "match");
				goto out;
			}
			printf("read back: %#llx and %d bytes as written\n", (unsigned long long)v, FLUSH_WR_LEN);
		}
	}
	struct op last = { IBV_WR_FLUSH, fa, (uint32_t)fk, NULL, 8, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE };
	const char *what = "FLUSH persistent to a QP without FLUSH_PERSISTENT";
	enum ibv_wc_status expect = IBV_WC_REM_INV_REQ_ERR;
	if (!strcmp(nak, "mr")) {
		last.raddr = pa;
		last.rkey = (uint32_t)pk;
		last.type = IBV_FLUSH_GLOBAL;
		what = "FLUSH to a region without FLUSH_GLOBAL";
		expect = IBV_WC_REM_ACCESS_ERR;
	}
	if (post_ex(x, mr, &res, &last, 12, &wc, tmo))
		goto out;
	if (wc.status != expect) {
		fprintf(stderr, "%s: %s: %s, want %s\n", who, what, flush_status_name(wc.status), flush_status_name(expect));
		goto out;
	}
	printf("%s: %s (as expected)\n", what, flush_status_name(wc.status));
	printf("flush: all as expected\n");
	rc = 0;
out:
	if (connected)
		rdma_disconnect(id);
	peer_drop_id(id);
	peer_dereg(1, mr);
	free(buf);
	peer_teardown(&res, NULL, ec);
	return rc;
}
#endif
