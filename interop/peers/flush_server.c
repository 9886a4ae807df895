/*
 * flush_server: the server of the flush protocol (see flush.h), written
 * for goroce's interop tests.
 *
 *   flush_server [PORT]          (default 7473; listens on every address)
 *
 * RDMA_BIND_IP in the environment names the address to listen on. One
 * client; exit status 0 when the WRITE before the client's FLUSH and the
 * ATOMIC_WRITE's 8 bytes are in place once it has gone, 1 otherwise, 2
 * when built without FLUSH.
 */
#include "peers.h"
#include "flush.h"

static const char *who = "flush_server";

#ifndef HAVE_IBV_FLUSH
int main(void) { return flush_without(who); }
#else
int main(int argc, char **argv)
{
	const char *port = argc >= 2 ? argv[1] : FLUSH_PORT;
	const char *bind_ip = getenv("RDMA_BIND_IP");
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct rdma_event_channel *ec = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct peer_res res = { 0 };
	struct ibv_mr *fmr = NULL, *pmr = NULL, *note_mr = NULL;
	struct rdma_cm_event *ev;
	uint8_t *fbuf = NULL, *pbuf = NULL, want[FLUSH_WR_LEN];
	char note[64] = FLUSH_READY, rep[196];
	int tmo = peer_timeout_ms(), rc = 1;
	long p = strtol(port, NULL, 10);

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (p < 1 || p > 65535) {
		fprintf(stderr, "%s: bad port %s\n", who, port);
		return 1;
	}
	if (bind_ip && *bind_ip && peer_resolve(who, bind_ip, port, &addr))
		return 1;
	addr.sin_port = htons((uint16_t)p);
	ec = peer_event_channel(who);
	if (!ec)
		return 1;
	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) || rdma_bind_addr(listen_id, (struct sockaddr *)&addr) ||
	    rdma_listen(listen_id, 1)) {
		fprintf(stderr, "%s: cannot listen on port %s: %s\n", who, port, strerror(errno));
		goto out;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_CONNECT_REQUEST, -1, &ev, tmo))
		goto out;
	id = ev->id;
	if (!ev->param.conn.private_data || ev->param.conn.private_data_len < 7 ||
	    memcmp(ev->param.conn.private_data, "m=flush", 7)) {
		fprintf(stderr, "%s: the client's private data does not ask for m=flush\n", who);
		rdma_ack_cm_event(ev);
		rdma_reject(id, NULL, 0);
		goto out;
	}
	rdma_ack_cm_event(ev);
	if (peer_setup_rc(who, id, &res, 1, 64, 32, 1))
		goto out;
	if (posix_memalign((void **)&fbuf, 4096, FLUSH_REGION) || posix_memalign((void **)&pbuf, 4096, FLUSH_REGION)) {
		fprintf(stderr, "%s: out of memory\n", who);
		goto out;
	}
	memset(fbuf, 0, FLUSH_REGION);
	memset(pbuf, 0, FLUSH_REGION);
	int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	fmr = ibv_reg_mr(res.pd, fbuf, FLUSH_REGION, remote | IBV_ACCESS_FLUSH_GLOBAL);
	pmr = ibv_reg_mr(res.pd, pbuf, FLUSH_REGION, remote);
	note_mr = peer_reg_local(who, res.pd, note, sizeof note);
	if (!fmr || !pmr || !note_mr) {
		fprintf(stderr, "%s: ibv_reg_mr (FLUSH_GLOBAL needs kernel 6.2's rxe): %s\n", who, strerror(errno));
		goto out;
	}
	int n = snprintf(rep, sizeof rep, "m=flush a=%llx k=%x l=%d fa=%llx fk=%x pa=%llx pk=%x",
			 (unsigned long long)(uintptr_t)fbuf, fmr->rkey, FLUSH_REGION, (unsigned long long)(uintptr_t)fbuf,
			 fmr->rkey, (unsigned long long)(uintptr_t)pbuf, pmr->rkey);
	struct rdma_conn_param cp = { .private_data = rep, .private_data_len = (uint8_t)(n + 1),
				      .responder_resources = 16, .initiator_depth = 16, .retry_count = 7,
				      .rnr_retry_count = 7 };
	if (peer_accept(who, ec, id, &cp, tmo))
		goto out;
	struct ibv_qp_attr qa = { .qp_access_flags = remote & ~IBV_ACCESS_LOCAL_WRITE };
	qa.qp_access_flags |= IBV_ACCESS_FLUSH_GLOBAL;
	if (ibv_modify_qp(id->qp, &qa, IBV_QP_ACCESS_FLAGS)) {
		fprintf(stderr, "%s: ibv_modify_qp (FLUSH_GLOBAL on the QP): %s\n", who, strerror(errno));
		goto out;
	}
	if (peer_post_wait(who, id->qp, &res, IBV_WR_SEND, 1, note_mr, note, (uint32_t)strlen(FLUSH_READY), 0, 0, tmo))
		goto out;
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_DISCONNECTED, -1, &ev, tmo))
		goto out;
	rdma_ack_cm_event(ev);
	uint64_t v;
	memcpy(&v, fbuf + FLUSH_AW_OFF, 8);
	printf("ATOMIC_WRITE landed: %#llx\n", (unsigned long long)v);
	flush_pattern(want);
	if (memcmp(fbuf + FLUSH_WR_OFF, want, FLUSH_WR_LEN)) {
		printf("the WRITE before the FLUSH is NOT in place\n");
		goto out;
	}
	printf("the WRITE before the FLUSH is in place\n");
	rc = v == FLUSH_VALUE ? 0 : 1;
out:
	peer_drop_id(id);
	peer_dereg(3, fmr, pmr, note_mr);
	free(fbuf);
	free(pbuf);
	peer_teardown(&res, listen_id, ec);
	return rc;
}
#endif
