/*
 * rdmaex_server: a server that speaks rdma-example's protocol (see
 * rdmaex.h) with rdma_server's command line and output lines, written for
 * goroce's interop tests.
 *
 *   rdmaex_server [-a ADDRESS] [-p PORT]      (default 0.0.0.0, port 20886)
 *
 * One client: accept it with a receive posted for its description, read
 * the length it asks for, allocate and register that many bytes, SEND
 * their description back, and wait for the client to disconnect.
 */
#include "peers.h"
#include "rdmaex.h"

static const char *who = "rdmaex_server";

static void usage(void)
{
	printf("Usage:\n");
	printf("rdmaex_server: [-a <server_addr>] [-p <server_port>]\n");
	printf("(default port is %d)\n", RDMAEX_PORT);
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *peer_mr = NULL, *buf_mr = NULL, *own_mr = NULL;
	struct rdmaex_meta peer = { 0 }, own = { 0 };
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	void *buf = NULL;
	int tmo = peer_timeout_ms(), rc = 1, opt, port = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "a:p:")) != -1) {
		switch (opt) {
		case 'a':
			if (peer_resolve(who, optarg, NULL, &addr))
				return 1;
			break;
		case 'p':
			port = (int)strtol(optarg, NULL, 0);
			break;
		default:
			usage();
		}
	}
	addr.sin_port = htons(port ? port : RDMAEX_PORT);

	ec = rdma_create_event_channel();
	if (!ec || peer_nonblock(ec->fd)) {
		fprintf(stderr, "%s: rdma_create_event_channel: %s\n", who, strerror(errno));
		return 1;
	}
	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 8)) {
		fprintf(stderr, "%s: cannot listen on %s:%d: %s\n", who, inet_ntoa(addr.sin_addr),
			ntohs(addr.sin_port), strerror(errno));
		goto out;
	}
	printf("Server is listening successfully at: %s , port: %d \n", inet_ntoa(addr.sin_addr), ntohs(addr.sin_port));

	if (peer_cm_event(who, ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, tmo))
		goto out;
	id = ev->id;
	rdma_ack_cm_event(ev);

	/* Resources for the client, and the receive for its description,
	 * before the connection is accepted. */
	pd = ibv_alloc_pd(id->verbs);
	ch = pd ? ibv_create_comp_channel(id->verbs) : NULL;
	cq = ch ? ibv_create_cq(id->verbs, RDMAEX_CQ_DEPTH, NULL, ch, 0) : NULL;
	if (!cq || peer_nonblock(ch->fd) || ibv_req_notify_cq(cq, 0)) {
		fprintf(stderr, "%s: cannot set up PD and CQ: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_qp_init_attr qpa = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = RDMAEX_MAX_WR, .max_recv_wr = RDMAEX_MAX_WR,
			 .max_send_sge = RDMAEX_MAX_SGE, .max_recv_sge = RDMAEX_MAX_SGE },
	};
	if (rdma_create_qp(id, pd, &qpa)) {
		fprintf(stderr, "%s: rdma_create_qp: %s\n", who, strerror(errno));
		goto out;
	}
	peer_mr = ibv_reg_mr(pd, &peer, sizeof(peer), IBV_ACCESS_LOCAL_WRITE);
	if (!peer_mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_sge rsge = { .addr = (uintptr_t)&peer, .length = sizeof(peer), .lkey = peer_mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rsge, .num_sge = 1 }, *bad_rwr;
	if (ibv_post_recv(id->qp, &rwr, &bad_rwr)) {
		fprintf(stderr, "%s: ibv_post_recv failed\n", who);
		goto out;
	}
	struct rdma_conn_param cp = { .initiator_depth = RDMAEX_DEPTH, .responder_resources = RDMAEX_DEPTH };
	if (rdma_accept(id, &cp)) {
		fprintf(stderr, "%s: rdma_accept: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);
	struct sockaddr_in *from = (struct sockaddr_in *)rdma_get_peer_addr(id);
	printf("A new connection is accepted from %s \n", inet_ntoa(from->sin_addr));

	/* The client's description, then a buffer of the length it asks for. */
	if (peer_wait_wcs(who, ch, cq, &wc, 1, tmo))
		goto out;
	if (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(peer)) {
		fprintf(stderr, "%s: expected the client's %zu-byte description, got opcode %d of %u bytes\n", who,
			sizeof(peer), wc.opcode, wc.byte_len);
		goto out;
	}
	printf("Client side buffer information is received...\n");
	rdmaex_show(&peer);
	printf("The client has requested buffer length of : %u bytes \n", peer.len);
	buf = calloc(1, peer.len ? peer.len : 1);
	buf_mr = buf ? ibv_reg_mr(pd, buf, peer.len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
		     : NULL;
	if (!buf_mr) {
		fprintf(stderr, "%s: cannot register a buffer of %u bytes: %s\n", who, peer.len, strerror(errno));
		goto out;
	}
	own.addr = (uintptr_t)buf;
	own.len = peer.len;
	own.stag = buf_mr->rkey;
	own_mr = ibv_reg_mr(pd, &own, sizeof(own), IBV_ACCESS_LOCAL_WRITE);
	if (!own_mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	struct ibv_sge ssge = { .addr = (uintptr_t)&own, .length = sizeof(own), .lkey = own_mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED },
			   *bad_swr;
	if (ibv_post_send(id->qp, &swr, &bad_swr)) {
		fprintf(stderr, "%s: ibv_post_send failed\n", who);
		goto out;
	}
	if (peer_wait_wcs(who, ch, cq, &wc, 1, tmo))
		goto out;

	/* The client WRITEs and READs; the server only waits for it to leave. */
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_DISCONNECTED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);
	printf("A disconnect event is received from the client...\n");
	rc = 0;
out:
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (id)
		rdma_destroy_id(id);
	if (own_mr)
		ibv_dereg_mr(own_mr);
	if (buf_mr)
		ibv_dereg_mr(buf_mr);
	if (peer_mr)
		ibv_dereg_mr(peer_mr);
	free(buf);
	if (cq)
		ibv_destroy_cq(cq);
	if (ch)
		ibv_destroy_comp_channel(ch);
	if (pd)
		ibv_dealloc_pd(pd);
	if (listen_id)
		rdma_destroy_id(listen_id);
	if (ec)
		rdma_destroy_event_channel(ec);
	if (rc == 0)
		printf("Server shut-down is complete \n");
	return rc;
}
