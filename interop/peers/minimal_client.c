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

/* post_rdma posts one signaled WRITE or READ and waits for it. */
static int post_rdma(struct ibv_qp *qp, struct ibv_comp_channel *ch, struct ibv_cq *cq, enum ibv_wr_opcode op,
		     uint64_t id, struct ibv_mr *mr, void *local, uint32_t len, uint64_t raddr, uint32_t rkey, int tmo)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct ibv_wc wc;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad)) {
		fprintf(stderr, "%s: ibv_post_send failed\n", who);
		return -1;
	}
	return peer_wait_wcs(who, ch, cq, &wc, 1, tmo);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *id = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *cq = NULL;
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
	ec = rdma_create_event_channel();
	if (!ec || peer_nonblock(ec->fd)) {
		fprintf(stderr, "%s: rdma_create_event_channel: %s\n", who, strerror(errno));
		return 1;
	}
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "%s: rdma_create_id: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_route(who, ec, id, &addr, 5000))
		goto out;

	pd = ibv_alloc_pd(id->verbs);
	ch = pd ? ibv_create_comp_channel(id->verbs) : NULL;
	cq = ch ? ibv_create_cq(id->verbs, 64, NULL, ch, 0) : NULL;
	if (!cq || peer_nonblock(ch->fd) || ibv_req_notify_cq(cq, 0)) {
		fprintf(stderr, "%s: cannot set up PD and CQ: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_qp_init_attr qpa = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (rdma_create_qp(id, pd, &qpa)) {
		fprintf(stderr, "%s: rdma_create_qp: %s\n", who, strerror(errno));
		goto out;
	}
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
	tx_mr = ibv_reg_mr(pd, tx, MINIMAL_BUF, IBV_ACCESS_LOCAL_WRITE);
	rx_mr = ibv_reg_mr(pd, rx, MINIMAL_BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!tx_mr || !rx_mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	strcpy(tx, "client-wrote-this");
	if (post_rdma(id->qp, ch, cq, IBV_WR_RDMA_WRITE, 1, tx_mr, tx, (uint32_t)strlen(tx) + 1, raddr, rkey, tmo) ||
	    post_rdma(id->qp, ch, cq, IBV_WR_RDMA_READ, 2, rx_mr, rx, MINIMAL_BUF, raddr, rkey, tmo))
		goto out;
	printf("Client read back: '%s'\n", rx);
	rc = 0;
out:
	if (connected)
		rdma_disconnect(id);
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (id)
		rdma_destroy_id(id);
	if (tx_mr)
		ibv_dereg_mr(tx_mr);
	if (rx_mr)
		ibv_dereg_mr(rx_mr);
	free(tx);
	free(rx);
	if (cq)
		ibv_destroy_cq(cq);
	if (ch)
		ibv_destroy_comp_channel(ch);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ec)
		rdma_destroy_event_channel(ec);
	return rc;
}
