/*
 * minimal_client: a client that speaks the rdma-roce-lab minimal sample's
 * protocol (see minimal.h) with rdma_min_client's command line and output
 * line, written for goroce's interop tests.
 *
 *   minimal_client SERVER PORT
 *
 * Exit status 0 after the READ, 1 on a failure, 2 when the server's accept
 * carried no address and rkey.
 */
#include "peers.h"
#include "minimal.h"

static const char *who = "minimal_client";

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *tx_mr = NULL, *rx_mr = NULL;
	struct rdma_cm_event *ev;
	char *tx = NULL, *rx = NULL;
	uint64_t raddr = 0;
	uint32_t rkey = 0;
	int tmo = peer_timeout_ms(), rc = 1, connected = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "Usage: %s <server-ip> <port>\n", argv[0]);
		return 1;
	}
	if (peer_resolve(who, argv[1], argv[2], &addr))
		return 1;
	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	if (peer_client_id(who, ec, &id, &addr, 5000))
		goto out;

	if (peer_setup_rc(who, id, &res, 1, 64, 32, 1))
		goto out;
	struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1, .retry_count = 7,
				      .rnr_retry_count = 7 };
	if (rdma_connect(id, &cp)) {
		fprintf(stderr, "%s: rdma_connect: %s\n", who, strerror(errno));
		goto out;
	}
	/* ESTABLISHED carries the accept's private data; a CONNECT_RESPONSE
	 * (no QP attached) would come first, then ESTABLISHED. */
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_CONNECT_RESPONSE, &ev, tmo))
		goto out;
	if (ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		rdma_ack_cm_event(ev);
		if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
			goto out;
	}
	connected = 1;
	if (!ev->param.conn.private_data || ev->param.conn.private_data_len < MINIMAL_INFO_LEN) {
		rdma_ack_cm_event(ev);
		fprintf(stderr, "No or short private_data\n");
		rc = 2;
		goto out;
	}
	minimal_unpack(ev->param.conn.private_data, &raddr, &rkey);
	rdma_ack_cm_event(ev);

	/* One more byte than registered, so what is read always prints as a string. */
	if (posix_memalign((void **)&tx, 4096, MINIMAL_BUF) || posix_memalign((void **)&rx, 4096, MINIMAL_BUF + 4096)) {
		fprintf(stderr, "%s: out of memory\n", who);
		goto out;
	}
	memset(tx, 0, MINIMAL_BUF);
	memset(rx, 0, MINIMAL_BUF + 1);
	tx_mr = ibv_reg_mr(res.pd, tx, MINIMAL_BUF, IBV_ACCESS_LOCAL_WRITE);
	rx_mr = ibv_reg_mr(res.pd, rx, MINIMAL_BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!tx_mr || !rx_mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	strcpy(tx, "client-wrote-this");
	if (peer_post_wait(who, id->qp, &res, IBV_WR_RDMA_WRITE, 1, tx_mr, tx, (uint32_t)strlen(tx) + 1,
			   raddr, rkey, tmo) ||
	    peer_post_wait(who, id->qp, &res, IBV_WR_RDMA_READ, 2, rx_mr, rx, MINIMAL_BUF, raddr, rkey, tmo))
		goto out;
	printf("Client read back: '%s'\n", rx);
	rc = 0;
out:
	if (connected)
		rdma_disconnect(id);
	peer_drop_id(id);
	peer_dereg(2, tx_mr, rx_mr);
	free(tx);
	free(rx);
	peer_teardown(&res, NULL, ec);
	return rc;
}
