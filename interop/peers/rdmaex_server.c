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
	struct peer_res res = { 0 };
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

	ec = peer_event_channel(who);
	if (!ec)
		return 1;
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
	if (peer_setup_rc(who, id, &res, 1, RDMAEX_CQ_DEPTH, RDMAEX_MAX_WR, RDMAEX_MAX_SGE) ||
	    peer_post_recv(who, id, res.pd, &peer, sizeof(peer), 1, &peer_mr))
		goto out;
	struct rdma_conn_param cp = { .initiator_depth = RDMAEX_DEPTH, .responder_resources = RDMAEX_DEPTH };
	if (peer_accept(who, ec, id, &cp, tmo))
		goto out;
	struct sockaddr_in *from = (struct sockaddr_in *)rdma_get_peer_addr(id);
	printf("A new connection is accepted from %s \n", inet_ntoa(from->sin_addr));

	/* The client's description, then a buffer of the length it asks for. */
	if (peer_wait_wcs(who, res.ch, res.cq, &wc, 1, tmo))
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
	buf_mr = buf ? ibv_reg_mr(res.pd, buf, peer.len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
		     : NULL;
	if (!buf_mr) {
		fprintf(stderr, "%s: cannot register a buffer of %u bytes: %s\n", who, peer.len, strerror(errno));
		goto out;
	}
	own.addr = (uintptr_t)buf;
	own.len = peer.len;
	own.stag = buf_mr->rkey;
	own_mr = peer_reg_local(who, res.pd, &own, sizeof(own));
	if (!own_mr || peer_post_wait(who, id->qp, &res, IBV_WR_SEND, 2, own_mr, &own, sizeof(own), 0, 0, tmo))
		goto out;

	/* The client WRITEs and READs; the server only waits for it to leave. */
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_DISCONNECTED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);
	printf("A disconnect event is received from the client...\n");
	rc = 0;
out:
	peer_drop_id(id);
	peer_dereg(3, own_mr, buf_mr, peer_mr);
	free(buf);
	peer_teardown(&res, listen_id, ec);
	if (rc == 0)
		printf("Server shut-down is complete \n");
	return rc;
}
