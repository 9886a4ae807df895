/*
 * imm_client: a client that speaks the rdma-roce-lab Example 2 protocol
 * (WRITE_WITH_IMM + RECV; see imm.h) with rdma_client_imm's command line
 * and output lines, written for goroce's interop tests.
 *
 *   imm_client SERVER PORT     (the sample's scripts use port 7472)
 *
 * RDMA_SRC_IP in the environment names the local address;
 * RDMA_INITIATOR_DEPTH and RDMA_RESPONDER_RESOURCES what the connect
 * offers (default 0 and 0), as in the sample. Exit status 0 after the
 * WRITE_WITH_IMM completed, 1 on a failure, 2 when the server's accept
 * carried no address and rkey.
 */
#include "peers.h"
#include "imm.h"

static const char *who = "imm_client";

/* resolve: rdma_resolve_addr and _route to dst, from RDMA_SRC_IP if set. */
static int resolve(struct rdma_event_channel *ec, struct rdma_cm_id **id, struct sockaddr_in *dst, int tmo)
{
	const char *src_ip = getenv("RDMA_SRC_IP");
	struct sockaddr_in src;
	struct rdma_cm_event *ev;

	if (!src_ip || !*src_ip)
		return peer_client_id(who, ec, id, dst, tmo);
	if (peer_resolve(who, src_ip, NULL, &src))
		return -1;
	if (rdma_create_id(ec, id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(*id, (struct sockaddr *)&src, (struct sockaddr *)dst, tmo)) {
		fprintf(stderr, "%s: rdma_resolve_addr: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ADDR_RESOLVED, -1, &ev, tmo + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(*id, tmo)) {
		fprintf(stderr, "%s: rdma_resolve_route: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ROUTE_RESOLVED, -1, &ev, tmo + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	return 0;
}

/* connect_read: rdma_connect, then the server's address and rkey from the
 * ESTABLISHED event's private data; 2 when there are none. */
static int connect_read(struct rdma_event_channel *ec, struct rdma_cm_id *id, uint64_t *raddr, uint32_t *rkey,
			int tmo)
{
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp = { .initiator_depth = imm_env_u8("RDMA_INITIATOR_DEPTH", 0),
				      .responder_resources = imm_env_u8("RDMA_RESPONDER_RESOURCES", 0),
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	imm_log("main", "SLOW", "rdma_connect");
	imm_log("main", "SLOW", "  initiator_depth=%u", cp.initiator_depth);
	imm_log("main", "SLOW", "  responder_resources=%u", cp.responder_resources);
	if (rdma_connect(id, &cp)) {
		fprintf(stderr, "%s: rdma_connect: %s\n", who, strerror(errno));
		return 1;
	}
	imm_log("main", "SLOW", "wait ESTABLISHED");
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_CONNECT_RESPONSE, &ev, tmo))
		return 1;
	if (ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		rdma_ack_cm_event(ev);
		if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
			return 1;
	}
	imm_log("main", "SLOW", "read private_data (remote addr/rkey)");
	if (!ev->param.conn.private_data || ev->param.conn.private_data_len < MINIMAL_INFO_LEN) {
		rdma_ack_cm_event(ev);
		fprintf(stderr, "No private_data\n");
		return 2;
	}
	minimal_unpack(ev->param.conn.private_data, raddr, rkey);
	rdma_ack_cm_event(ev);
	imm_log("main", "SLOW", "remote addr=%#lx", (unsigned long)*raddr);
	imm_log("main", "SLOW", "remote rkey=0x%x", *rkey);
	return 0;
}

/* write_imm: the WRITE_WITH_IMM of the NUL-terminated text at tx (in mr),
 * the immediate its length, and its completion. */
static int write_imm(struct ibv_qp *qp, struct peer_res *res, struct ibv_mr *mr, char *tx, uint64_t raddr,
		     uint32_t rkey, int tmo)
{
	uint32_t len = (uint32_t)strlen(tx) + 1;
	struct ibv_sge sge = { .addr = (uintptr_t)tx, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htonl(len) },
			   *bad;
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	imm_log("main", "DATA", "post RDMA_WRITE_WITH_IMM len=%u", len);
	imm_log("main", "DATA", "  imm_data host=%u", len);
	imm_log("main", "DATA", "  imm_data net=0x%x", wr.imm_data);
	if (ibv_post_send(qp, &wr, &bad)) {
		fprintf(stderr, "%s: ibv_post_send write_with_imm failed\n", who);
		return -1;
	}
	imm_log("main", "DATA", "poll RDMA_WRITE_WITH_IMM");
	if (peer_wait_wcs(who, res->ch, res->cq, &wc, 1, tmo))
		return -1;
	imm_log("main", "DATA", "RDMA_WRITE_WITH_IMM completed");
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *mr = NULL;
	char *tx = NULL;
	uint64_t raddr = 0;
	uint32_t rkey = 0;
	int tmo = peer_timeout_ms(), rc = 1, r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "Usage: %s <server-ip> <port>\n", argv[0]);
		return 1;
	}
	imm_log("main", "SLOW", "create CM channel + ID");
	if (peer_resolve(who, argv[1], argv[2], &addr))
		return 1;
	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	imm_log("main", "SLOW", "resolve %s:%s", argv[1], argv[2]);
	if (resolve(ec, &id, &addr, 5000))
		goto out;
	imm_log("main", "SLOW", "build PD/CQ/QP");
	if (peer_setup_rc(who, id, &res, 1, 64, 32, 1))
		goto out;
	r = connect_read(ec, id, &raddr, &rkey, tmo);
	if (r) {
		rc = r;
		if (r == 2)
			rdma_disconnect(id);
		goto out;
	}
	imm_log("main", "FAST", "register local TX");
	tx = calloc(1, IMM_BUF);
	mr = tx ? peer_reg_local(who, res.pd, tx, IMM_BUF) : NULL;
	if (!mr)
		goto disconnect;
	strcpy(tx, IMM_CLIENT_TEXT);
	if (write_imm(id->qp, &res, mr, tx, raddr, rkey, tmo) == 0)
		rc = 0;
disconnect:
	rdma_disconnect(id);
out:
	peer_drop_id(id);
	peer_dereg(1, mr);
	free(tx);
	peer_teardown(&res, NULL, ec);
	imm_log("main", "INFO", "Done");
	return rc;
}
