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
	struct peer_res res = { 0 };
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
	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 1)) {
		fprintf(stderr, "%s: cannot listen on port %s: %s\n", who, port, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, tmo))
		goto out;
	id = ev->id;
	rdma_ack_cm_event(ev);

	/* No completion channel: the server never waits for a completion. */
	if (peer_setup_rc(who, id, &res, 0, 64, 32, 1))
		goto out;
	/* One more byte than registered, so the buffer always prints as a string. */
	if (posix_memalign((void **)&buf, 4096, MINIMAL_BUF + 4096)) {
		fprintf(stderr, "%s: out of memory\n", who);
		buf = NULL;
		goto out;
	}
	memset(buf, 0, MINIMAL_BUF + 1);
	mr = ibv_reg_mr(res.pd, buf, MINIMAL_BUF,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
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
	if (peer_accept(who, ec, id, &cp, tmo))
		goto out;

	/* The client WRITEs and READs on its own; the sample gives it 2 s. */
	sleep(2);
	printf("Server buffer after client ops: '%s'\n", buf);
	rdma_disconnect(id);
	rc = 0;
out:
	peer_drop_id(id);
	peer_dereg(1, mr);
	free(buf);
	peer_teardown(&res, listen_id, ec);
	return rc;
}
