/*
 * rdmaex_client: a client that speaks rdma-example's protocol (see
 * rdmaex.h) with rdma_client's command line and output lines, written for
 * goroce's interop tests.
 *
 *   rdmaex_client [-a ADDRESS] [-p PORT] -s STRING   (default 127.0.0.1, port 20886)
 *
 * It posts the receive for the server's description before connecting,
 * connects, SENDs the description of its source buffer (the string),
 * RDMA WRITEs the string into the server's buffer, READs it back into a
 * second buffer, compares the two and disconnects. Exit status 0 when the
 * buffers match, 1 otherwise.
 */
#include "peers.h"
#include "rdmaex.h"

static const char *who = "rdmaex_client";

static void usage(void)
{
	printf("Usage:\n");
	printf("rdmaex_client: [-a <server_addr>] [-p <server_port>] -s string (required)\n");
	printf("(default IP is 127.0.0.1 and port is %d)\n", RDMAEX_PORT);
	exit(1);
}

/* rdma_op WRITEs or READs len bytes between local (in mr) and the server's
 * buffer, and waits for its completion (the opcode is the wr_id). */
static int rdma_op(struct ibv_qp *qp, struct peer_res *res, enum ibv_wr_opcode op, struct ibv_mr *mr, void *local,
		   uint32_t len, const struct rdmaex_meta *server, int tmo)
{
	return peer_post_wait(who, qp, res, op, op, mr, local, len, server->addr, server->stag, tmo);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *server_mr = NULL, *own_mr = NULL, *src_mr = NULL, *dst_mr = NULL;
	struct rdmaex_meta server = { 0 }, own = { 0 };
	struct rdma_cm_event *ev;
	struct ibv_wc wc[2];
	char *src = NULL, *dst = NULL;
	uint32_t n = 0;
	int tmo = peer_timeout_ms(), rc = 1, opt, port = 0, connected = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "s:a:p:")) != -1) {
		switch (opt) {
		case 's':
			printf("Passed string is : %s , with count %u \n", optarg, (unsigned int)strlen(optarg));
			free(src);
			free(dst);
			n = (uint32_t)strlen(optarg);
			src = calloc(1, n + 1);
			dst = calloc(1, n + 1);
			if (!src || !dst) {
				fprintf(stderr, "%s: out of memory\n", who);
				return 1;
			}
			memcpy(src, optarg, n);
			break;
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
	if (!src) {
		printf("Please provide a string to copy \n");
		usage();
	}
	if (n == 0) {
		fprintf(stderr, "%s: the string is empty\n", who);
		return 1;
	}
	addr.sin_port = htons(port ? port : RDMAEX_PORT);

	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	if (peer_client_id(who, ec, &id, &addr, 2000))
		goto out;
	printf("Trying to connect to server at : %s port: %d \n", inet_ntoa(addr.sin_addr), ntohs(addr.sin_port));

	if (peer_setup_rc(who, id, &res, 1, RDMAEX_CQ_DEPTH, RDMAEX_MAX_WR, RDMAEX_MAX_SGE))
		goto out;
	/* The receive for the server's description goes up before connecting. */
	if (peer_post_recv(who, id, res.pd, &server, sizeof(server), 1, &server_mr))
		goto out;
	/* rdma-example's connection parameters: 3 outstanding READs each way,
	 * 3 transport retries, no RNR retry. */
	struct rdma_conn_param cp = { .initiator_depth = RDMAEX_DEPTH, .responder_resources = RDMAEX_DEPTH,
				      .retry_count = 3 };
	if (rdma_connect(id, &cp)) {
		fprintf(stderr, "%s: rdma_connect: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);
	connected = 1;
	printf("The client is connected successfully \n");

	/* Our description out, the server's in: two completions. */
	src_mr = ibv_reg_mr(res.pd, src, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	dst_mr = ibv_reg_mr(res.pd, dst, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	own.addr = (uintptr_t)src;
	own.len = n;
	own.stag = src_mr ? src_mr->rkey : 0;
	own_mr = ibv_reg_mr(res.pd, &own, sizeof(own), IBV_ACCESS_LOCAL_WRITE);
	if (!src_mr || !dst_mr || !own_mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_post_send(who, id->qp, IBV_WR_SEND, 2, own_mr, &own, sizeof(own), 0, 0) ||
	    peer_wait_wcs(who, res.ch, res.cq, wc, 2, tmo))
		goto out;
	rdmaex_show(&server);
	if (server.len < n) {
		fprintf(stderr, "%s: the server's buffer holds %u bytes, the string %u\n", who, server.len, n);
		goto out;
	}

	if (rdma_op(id->qp, &res, IBV_WR_RDMA_WRITE, src_mr, src, n, &server, tmo) ||
	    rdma_op(id->qp, &res, IBV_WR_RDMA_READ, dst_mr, dst, n, &server, tmo))
		goto out;
	if (memcmp(src, dst, n)) {
		fprintf(stderr, "%s: src and dst buffers do not match\n", who);
	} else {
		printf("...\nSUCCESS, source and destination buffers match \n");
		rc = 0;
	}
out:
	if (connected) {
		if (rdma_disconnect(id))
			fprintf(stderr, "%s: rdma_disconnect: %s\n", who, strerror(errno));
		else if (peer_cm_event(who, ec, RDMA_CM_EVENT_DISCONNECTED, -1, &ev, tmo) == 0)
			rdma_ack_cm_event(ev);
	}
	peer_drop_id(id);
	peer_dereg(4, src_mr, dst_mr, own_mr, server_mr);
	peer_teardown(&res, NULL, ec);
	free(src);
	free(dst);
	if (connected)
		printf("Client resource clean up is complete \n");
	return rc;
}
