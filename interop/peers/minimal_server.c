/*
 * minimal_server: a server that speaks the rdma-roce-lab minimal sample's
 * protocol (see minimal.h) with rdma_min_server's command line and output
 * line, written for goroce's interop tests.
 *
 *   minimal_server [PORT]          (default 7471; listens on every address)
 *
 * RDMA_RESPONDER_RESOURCES and RDMA_INITIATOR_DEPTH in the environment
 * change what the accept offers (default 1 and 1), as in the sample.
 */
#include "peers.h"
#include "minimal.h"

static const char *who = "minimal_server";

static uint8_t env_u8(const char *name, uint8_t def)
{
	const char *s = getenv(name);
	return s && *s ? (uint8_t)strtoul(s, NULL, 10) : def;
}

int main(int argc, char **argv)
{
	const char *port = argc >= 2 ? argv[1] : MINIMAL_PORT;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	struct rdma_cm_event *ev;
	char *buf = NULL;
	uint8_t info[MINIMAL_INFO_LEN];
	int tmo = peer_timeout_ms(), rc = 1;
	char *end;
	long p = strtol(port, &end, 10);

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (*end || p < 1 || p > 65535) {
		fprintf(stderr, "%s: bad port %s\n", who, port);
		return 1;
	}
	addr.sin_port = htons((uint16_t)p);
	ec = rdma_create_event_channel();
	if (!ec || peer_nonblock(ec->fd)) {
		fprintf(stderr, "%s: rdma_create_event_channel: %s\n", who, strerror(errno));
		return 1;
	}
	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 1)) {
		fprintf(stderr, "%s: cannot listen on port %s: %s\n", who, port, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, tmo))
		goto out;
	id = ev->id;
	rdma_ack_cm_event(ev);

	pd = ibv_alloc_pd(id->verbs);
	cq = pd ? ibv_create_cq(id->verbs, 64, NULL, NULL, 0) : NULL;
	if (!cq) {
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
	/* One more byte than registered, so the buffer always prints as a string. */
	if (posix_memalign((void **)&buf, 4096, MINIMAL_BUF + 4096)) {
		fprintf(stderr, "%s: out of memory\n", who);
		buf = NULL;
		goto out;
	}
	memset(buf, 0, MINIMAL_BUF + 1);
	mr = ibv_reg_mr(pd, buf, MINIMAL_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		fprintf(stderr, "%s: ibv_reg_mr: %s\n", who, strerror(errno));
		goto out;
	}
	strcpy(buf, "server-initial");

	minimal_pack(info, (uintptr_t)buf, mr->rkey);
	struct rdma_conn_param cp = {
		.private_data = info,
		.private_data_len = sizeof(info),
		.responder_resources = env_u8("RDMA_RESPONDER_RESOURCES", 1),
		.initiator_depth = env_u8("RDMA_INITIATOR_DEPTH", 1),
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	if (rdma_accept(id, &cp)) {
		fprintf(stderr, "%s: rdma_accept: %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ESTABLISHED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);

	/* The client WRITEs and READs on its own; the sample gives it 2 s. */
	sleep(2);
	printf("Server buffer after client ops: '%s'\n", buf);
	rdma_disconnect(id);
	rc = 0;
out:
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (id)
		rdma_destroy_id(id);
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (listen_id)
		rdma_destroy_id(listen_id);
	if (ec)
		rdma_destroy_event_channel(ec);
	return rc;
}
