/*
 * imm_server: a server that speaks the rdma-roce-lab Example 2 protocol
 * (WRITE_WITH_IMM + RECV; see imm.h) with rdma_server_imm's command line
 * and output lines, written for goroce's interop tests.
 *
 *   imm_server [PORT]          (default 7472; listens on every address)
 *
 * RDMA_BIND_IP in the environment names the address to listen on;
 * RDMA_RESPONDER_RESOURCES and RDMA_INITIATOR_DEPTH change what the accept
 * offers (default 1 and 1), as in the sample. Exit status 0 after the
 * client's WRITE_WITH_IMM, 1 on a failure, 3 when the receive completed
 * without an immediate (the sample prints that and exits 0).
 */
#include "peers.h"
#include "imm.h"

static const char *who = "imm_server";

/* listen_on: a listening id on ec for port (and RDMA_BIND_IP, if set). */
static int listen_on(struct rdma_event_channel *ec, struct rdma_cm_id **id, const char *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	const char *bind_ip = getenv("RDMA_BIND_IP");
	char *end;
	long p = strtol(port, &end, 10);

	if (*end || p < 1 || p > 65535) {
		fprintf(stderr, "%s: bad port %s\n", who, port);
		return -1;
	}
	if (bind_ip && *bind_ip && peer_resolve(who, bind_ip, port, &addr))
		return -1;
	addr.sin_port = htons((uint16_t)p);
	if (rdma_create_id(ec, id, NULL, RDMA_PS_TCP) || rdma_bind_addr(*id, (struct sockaddr *)&addr) ||
	    rdma_listen(*id, 1)) {
		fprintf(stderr, "%s: cannot listen on port %s: %s\n", who, port, strerror(errno));
		return -1;
	}
	return 0;
}

/* report: the sample's lines for the receive's completion; 0 when it
 * carried an immediate. */
static int report(const struct ibv_wc *wc, const char *buf)
{
	int rc = 0;
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM || (wc->wc_flags & IBV_WC_WITH_IMM)) {
		imm_log("main", "DATA", "got RECV with IMM");
		imm_log("main", "DATA", "  imm_data net=0x%x", wc->imm_data);
		imm_log("main", "DATA", "  imm_data host=%u", ntohl(wc->imm_data));
	} else {
		imm_log("main", "DATA", "got RECV without IMM: opcode=%d", wc->opcode);
		rc = 3;
	}
	imm_log("main", "DATA", "after WRITE_WITH_IMM, buf='%s'", buf);
	return rc;
}

int main(int argc, char **argv)
{
	const char *port = argc >= 2 ? argv[1] : IMM_PORT;
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *mr = NULL, *note_mr = NULL;
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	char *buf = NULL, note[IMM_NOTE_LEN];
	uint8_t info[MINIMAL_INFO_LEN];
	int tmo = peer_timeout_ms(), rc = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	imm_log("main", "SLOW", "create CM channel + listen");
	ec = peer_event_channel(who);
	if (!ec || listen_on(ec, &listen_id, port))
		goto out;
	imm_log("main", "SLOW", "wait CONNECT_REQUEST");
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, tmo))
		goto out;
	id = ev->id;
	rdma_ack_cm_event(ev);

	imm_log("main", "SLOW", "build PD/CQ/QP");
	if (peer_setup_rc(who, id, &res, 1, 64, 32, 1))
		goto out;
	imm_log("main", "SLOW", "register remote-exposed MR");
	/* One more byte than registered, so the buffer always prints as a string. */
	buf = calloc(1, IMM_BUF + 1);
	mr = buf ? ibv_reg_mr(res.pd, buf, IMM_BUF,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
		 : NULL;
	if (!mr) {
		fprintf(stderr, "%s: cannot register the buffer: %s\n", who, strerror(errno));
		goto out;
	}
	strcpy(buf, IMM_SERVER_TEXT);
	imm_log("main", "SLOW", "register and post RECV buffer (notification-only)");
	if (peer_post_recv(who, id, res.pd, note, sizeof(note), IMM_NOTE_WR_ID, &note_mr))
		goto out;

	minimal_pack(info, (uintptr_t)buf, mr->rkey);
	imm_log("main", "SLOW", "accept with private_data");
	imm_log("main", "SLOW", "  addr=%#lx", (unsigned long)(uintptr_t)buf);
	imm_log("main", "SLOW", "  rkey=0x%x", mr->rkey);
	struct rdma_conn_param cp = {
		.private_data = info,
		.private_data_len = sizeof(info),
		.responder_resources = imm_env_u8("RDMA_RESPONDER_RESOURCES", 1),
		.initiator_depth = imm_env_u8("RDMA_INITIATOR_DEPTH", 1),
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	if (peer_accept(who, ec, id, &cp, tmo))
		goto out;
	imm_log("main", "SLOW", "wait ESTABLISHED");

	imm_log("main", "FAST", "wait for RECV (WRITE_WITH_IMM notification)");
	if (peer_wait_wcs(who, res.ch, res.cq, &wc, 1, tmo))
		goto out;
	rc = report(&wc, buf);
	rdma_disconnect(id);
out:
	peer_drop_id(id);
	peer_dereg(2, note_mr, mr);
	free(buf);
	peer_teardown(&res, listen_id, ec);
	imm_log("main", "INFO", "Done");
	return rc;
}
