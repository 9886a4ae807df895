/*
 * rdmalib: a program that speaks the protocol of rdma-lib, the
 * communication-library seed (see rdmalib.h), with its command line and
 * output lines, written for goroce's interop tests.
 *
 *   rdmalib send|write|read            server
 *   rdmalib send|write|read HOST       client of HOST
 *
 * A client reads its messages (send, write) or "START END" ranges (read)
 * from standard input, one per line, until its end; a read server takes
 * the text it serves from its first line. Unlike the original, every wait
 * is bounded (PEER_TIMEOUT seconds, default 60), a server ends (status 0)
 * when its client closes the second TCP connection instead of running
 * until a signal, a read server reads its text before the connection is
 * set up (so it is in place before the first READ can come), a send client
 * fails when the answer is not "ACK", and a failed completion ends either
 * side with status 1. The lambda mode is refused: it executes machine code
 * that came over the wire. RDMALIB_GID_INDEX in the environment changes
 * the GID index (default 1).
 */
#include "peers.h"
#include "rdmalib.h"

#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>

static const char *who = "rdmalib";

enum mode { SEND, WRITE, READ };

/* struct conn: one of the two connections: its verbs resources, buffer and TCP socket. */
struct conn {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
	int sock;
};

static int gid_index(void)
{
	const char *s = getenv("RDMALIB_GID_INDEX");
	return s && *s ? (int)strtol(s, NULL, 10) : RDMALIB_GID_INDEX;
}

static int access_of(enum mode m)
{
	return IBV_ACCESS_LOCAL_WRITE | (m == WRITE ? IBV_ACCESS_REMOTE_WRITE : 0) |
	       (m == READ ? IBV_ACCESS_REMOTE_READ : 0);
}

/* open_conn: the first device's context, PD, CQ (armed, on a non-blocking
 * channel), RC QP, registered buffer and GID. */
static int open_conn(struct conn *c, enum mode m)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	c->ctx = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	if (list)
		ibv_free_device_list(list);
	if (!c->ctx) {
		fprintf(stderr, "%s: no RDMA device to open\n", who);
		return -1;
	}
	c->pd = ibv_alloc_pd(c->ctx);
	c->ch = c->pd ? ibv_create_comp_channel(c->ctx) : NULL;
	c->cq = c->ch ? ibv_create_cq(c->ctx, RDMALIB_CQE, NULL, c->ch, 0) : NULL;
	if (!c->cq || peer_nonblock(c->ch->fd) || ibv_req_notify_cq(c->cq, 0)) {
		fprintf(stderr, "%s: cannot set up PD and CQ: %s\n", who, strerror(errno));
		return -1;
	}
	struct ibv_qp_init_attr qpa = { .send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = RDMALIB_CQE, .max_recv_wr = RDMALIB_CQE,
						 .max_send_sge = 1, .max_recv_sge = 1 } };
	c->qp = ibv_create_qp(c->pd, &qpa);
	/* One more byte than registered, so the buffer always prints as a string. */
	c->buf = c->qp ? calloc(1, RDMALIB_BUF + 1) : NULL;
	c->mr = c->buf ? ibv_reg_mr(c->pd, c->buf, RDMALIB_BUF, access_of(m)) : NULL;
	if (!c->mr || ibv_query_gid(c->ctx, 1, gid_index(), &c->gid)) {
		fprintf(stderr, "%s: cannot create the QP and buffer or read GID %d: %s\n", who, gid_index(),
			strerror(errno));
		return -1;
	}
	return 0;
}

static void close_conn(struct conn *c)
{
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	free(c->buf);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->ch)
		ibv_destroy_comp_channel(c->ch);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->ctx)
		ibv_close_device(c->ctx);
	if (c->sock > 0)
		close(c->sock);
	memset(c, 0, sizeof(*c));
}

/* tcp_port: rdma-lib's TCP port, 18515, or RDMALIB_PORT's (for tests that
 * run beside others on one host). */
static int tcp_port(void)
{
	const char *s = getenv("RDMALIB_PORT");
	int p = s ? atoi(s) : 0;
	return p > 0 && p < 65536 ? p : RDMALIB_TCP_PORT;
}

/* tcp_connect: a TCP connection to host's port 18515, in up to 3 attempts 1 s apart. */
static int tcp_connect(const char *host)
{
	struct sockaddr_in a;
	char port[8];
	snprintf(port, sizeof(port), "%d", tcp_port());
	if (peer_resolve(who, host, port, &a))
		return -1;
	for (int left = RDMALIB_CONNECT_TRIES - 1; left >= 0; left--) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			break;
		struct timeval tv = { .tv_sec = 5 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
		close(fd);
		if (left > 0) {
			fprintf(stderr, "Connection failed, retrying in 1 second... (%d attempts left)\n", left);
			sleep(1);
		}
	}
	fprintf(stderr, "Failed to connect after multiple attempts\n");
	return -1;
}

/* tcp_accept: one connection on port 18515 of every address, within timeout_ms. */
static int tcp_accept(int timeout_ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(tcp_port()),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1;
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1)) {
		fprintf(stderr, "%s: cannot listen on TCP port %d: %s\n", who, tcp_port(), strerror(errno));
	} else if (peer_wait_fd(fd, peer_now_ms() + timeout_ms)) {
		fprintf(stderr, "%s: no client within %d ms\n", who, timeout_ms);
	} else {
		c = accept(fd, NULL, NULL);
	}
	close(fd);
	return c;
}

/* io_full: reads (rd) or writes all n bytes of p on fd within timeout_ms. */
static int io_full(int fd, uint8_t *p, size_t n, int rd, int timeout_ms)
{
	long long deadline = peer_now_ms() + timeout_ms;
	size_t done = 0;
	while (done < n && peer_now_ms() < deadline) {
		ssize_t r = rd ? read(fd, p + done, n - done) : write(fd, p + done, n - done);
		if (r > 0)
			done += (size_t)r;
		else if (r == 0 || (errno != EINTR && errno != EAGAIN))
			break;
	}
	return done == n ? 0 : -1;
}

/* exchange: the 40-byte descriptions; the client writes first, the server reads first. */
static int exchange(struct conn *c, int client, struct rdmalib_info *remote, int tmo)
{
	struct rdmalib_info local = { .qpn = c->qp->qp_num, .addr = (uintptr_t)c->buf, .rkey = c->mr->rkey };
	uint8_t out[RDMALIB_INFO_LEN], in[RDMALIB_INFO_LEN];
	memcpy(local.gid, c->gid.raw, 16);
	rdmalib_pack(out, &local);
	if (client ? io_full(c->sock, out, sizeof(out), 0, tmo) || io_full(c->sock, in, sizeof(in), 1, tmo)
		   : io_full(c->sock, in, sizeof(in), 1, tmo) || io_full(c->sock, out, sizeof(out), 0, tmo)) {
		fprintf(stderr, "Failed to exchange QP info\n");
		return -1;
	}
	rdmalib_unpack(in, remote);
	return 0;
}

/* qp_connect: INIT, RTR and RTS towards remote, with rdma-lib's attributes. */
static int qp_connect(struct conn *c, const struct rdmalib_info *remote, enum mode m)
{
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access_of(m) };
	struct ibv_qp_attr rtr = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = remote->qpn,
				   .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				   .ah_attr = { .is_global = 1, .port_num = 1,
						.grh = { .hop_limit = 1, .sgid_index = (uint8_t)gid_index() } } };
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				   .max_rd_atomic = 1 };
	memcpy(rtr.ah_attr.grh.dgid.raw, remote->gid, 16);
	if (ibv_modify_qp(c->qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		fprintf(stderr, "Failed to modify QP to INIT\n");
		return -1;
	}
	if (ibv_modify_qp(c->qp, &rtr,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		fprintf(stderr, "Failed to modify QP to RTR\n");
		return -1;
	}
	if (ibv_modify_qp(c->qp, &rts,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC)) {
		fprintf(stderr, "Failed to modify QP to RTS\n");
		return -1;
	}
	return 0;
}

/* setup: one connection: resources, TCP, exchange, QP to RTS. */
static int setup(struct conn *c, const char *host, enum mode m, struct rdmalib_info *remote, int tmo)
{
	if (open_conn(c, m))
		return -1;
	c->sock = host ? tcp_connect(host) : tcp_accept(tmo);
	if (c->sock < 0)
		return -1;
	return exchange(c, host != NULL, remote, tmo) || qp_connect(c, remote, m) ? -1 : 0;
}

/* closed: 1 when the peer has closed sock (data, if any, is read and dropped). */
static int closed(int sock)
{
	char b[64];
	ssize_t r = recv(sock, b, sizeof(b), MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* reap: one completion from c's CQ into wc: 1 if there was one, 0 if not,
 * -1 on an error (a failed completion included). */
static int reap(struct conn *c, struct ibv_wc *wc)
{
	int r = ibv_poll_cq(c->cq, 1, wc);
	if (r < 0) {
		fprintf(stderr, "%s: ibv_poll_cq failed\n", who);
		return -1;
	}
	if (r == 1 && wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "Completion error: %s\n", ibv_wc_status_str(wc->status));
		return -1;
	}
	return r;
}

/*
 * wait_wc: the next completion on c's CQ (0), within timeout_ms. With
 * watch, the end of c's TCP connection ends the wait too (1), once the
 * CQ is empty. -1 on a failed completion or the timeout.
 */
static int wait_wc(struct conn *c, struct ibv_wc *wc, int watch, int timeout_ms)
{
	long long deadline = peer_now_ms() + timeout_ms;
	for (int i = 0; i < 1000000; i++) {
		int r = reap(c, wc);
		if (r != 0)
			return r < 0 ? -1 : 0;
		long long left = deadline - peer_now_ms();
		if (left <= 0)
			break;
		struct pollfd p[2] = { { .fd = c->ch->fd, .events = POLLIN }, { .fd = c->sock, .events = POLLIN } };
		if (poll(p, watch ? 2 : 1, (int)left) < 0 && errno != EINTR)
			return -1;
		struct ibv_cq *cq;
		void *ctx;
		if ((p[0].revents & POLLIN) && ibv_get_cq_event(c->ch, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			ibv_req_notify_cq(cq, 0);
		}
		if (watch && p[1].revents && closed(c->sock)) {
			r = reap(c, wc);
			return r == 0 ? 1 : r < 0 ? -1 : 0;
		}
	}
	fprintf(stderr, "%s: no completion within %d ms\n", who, timeout_ms);
	return -1;
}

/* post: one signaled work request op of len bytes at the start of c's
 * buffer (data copied there first when given); a WRITE or READ goes to
 * offset off of the remote buffer, a WRITE_WITH_IMM with the length as
 * its immediate. */
static int post(struct conn *c, enum ibv_wr_opcode op, const char *data, uint32_t len,
		const struct rdmalib_info *remote, uint64_t off)
{
	if (data)
		memcpy(c->buf, data, len);
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = len, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htonl(len);
	if (remote) {
		wr.wr.rdma.remote_addr = remote->addr + off;
		wr.wr.rdma.rkey = remote->rkey;
	}
	if (ibv_post_send(c->qp, &wr, &bad)) {
		fprintf(stderr, "Failed to post operation\n");
		return -1;
	}
	return 0;
}

static int post_recv(struct conn *c)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = RDMALIB_BUF, .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(c->qp, &wr, &bad)) {
		fprintf(stderr, "Failed to post RR\n");
		return -1;
	}
	return 0;
}

/* next_line: the next non-empty line of standard input without its
 * newline, in line (RDMALIB_BUF bytes); 0 at the end of the input. */
static int next_line(char *line)
{
	while (fgets(line, RDMALIB_BUF, stdin)) {
		size_t n = strlen(line);
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n > 0)
			return 1;
	}
	return 0;
}

/* serve: the send and write servers: a receive, its completion, a line (and
 * for send the "ACK"), until the client leaves. */
static int serve(struct conn *c, enum mode m, int tmo)
{
	struct ibv_wc wc;
	printf(m == SEND ? "Send-Receive Server ready.\n" : "Write Server ready.\n");
	for (int i = 0; i < 1000000; i++) {
		if (post_recv(c))
			return -1;
		int r = wait_wc(c, &wc, 1, tmo);
		if (r != 0)
			return r < 0 ? -1 : 0;
		if (m == WRITE) {
			printf("Received (%u bytes): %s\n", ntohl(wc.imm_data), c->buf);
			continue;
		}
		printf("Received: %s\n", c->buf);
		if (post(c, IBV_WR_SEND, "ACK", 4, NULL, 0) || wait_wc(c, &wc, 0, tmo))
			return -1;
	}
	return -1;
}

/* serve_read: the read server: its text is in place; it waits for the client to leave. */
static int serve_read(struct conn *c, int have_text, int tmo)
{
	printf("Read Server ready.\n");
	printf("Enter text to store: ");
	fflush(stdout);
	if (!have_text)
		return 0;
	printf("Waiting for client read requests...\n");
	if (peer_wait_fd(c->sock, peer_now_ms() + tmo) || !closed(c->sock)) {
		fprintf(stderr, "%s: the client did not leave within %d ms\n", who, tmo);
		return -1;
	}
	return 0;
}

/* send_lines: the send and write clients: each input line to the server. */
static int send_lines(struct conn *c, enum mode m, const struct rdmalib_info *remote, int tmo)
{
	struct ibv_wc wc;
	char line[RDMALIB_BUF];
	printf("Connected to server. Enter messages (Ctrl+D to stop):\n");
	while (next_line(line)) {
		uint32_t len = (uint32_t)strlen(line) + 1;
		if (m == WRITE) {
			if (post(c, IBV_WR_RDMA_WRITE_WITH_IMM, line, len, remote, 0) || wait_wc(c, &wc, 0, tmo))
				return -1;
			printf("Message sent successfully\n");
			continue;
		}
		if (post(c, IBV_WR_SEND, line, len, NULL, 0) || wait_wc(c, &wc, 0, tmo) || post_recv(c) ||
		    wait_wc(c, &wc, 0, tmo))
			return -1;
		if (strcmp(c->buf, "ACK") != 0) {
			fprintf(stderr, "%s: the server answered '%s', not 'ACK'\n", who, c->buf);
			return -1;
		}
		printf("Server acknowledged\n");
	}
	return 0;
}

/* read_ranges: the read client: an RDMA READ per "START END" line. */
static int read_ranges(struct conn *c, const struct rdmalib_info *remote, int tmo)
{
	struct ibv_wc wc;
	char line[RDMALIB_BUF];
	int start, end;
	printf("Connected to server.\n");
	printf("Enter character range to read (format: start_pos end_pos):\n");
	printf("Example: 0 5 to read first 6 characters\n");
	while (next_line(line)) {
		if (sscanf(line, "%d %d", &start, &end) != 2) {
			printf("Invalid input. Please enter two numbers: start_pos end_pos\n");
			continue;
		}
		if (start < 0 || end < start || end >= RDMALIB_BUF) {
			printf("Invalid range. start must be >= 0, end must be >= start and < %d\n", RDMALIB_BUF);
			continue;
		}
		uint32_t len = (uint32_t)(end - start + 1);
		if (post(c, IBV_WR_RDMA_READ, NULL, len, remote, (uint64_t)start) || wait_wc(c, &wc, 0, tmo))
			return -1;
		printf("Read data (%u bytes from position %d): %.*s\n", len, start, (int)len, c->buf);
	}
	return 0;
}

static void on_signal(int sig)
{
	static const char term[] = "\nCaught signal 15, cleaning up...\n", intr[] = "\nCaught signal 2, cleaning up...\n";
	if (write(1, sig == SIGTERM ? term : intr, sig == SIGTERM ? sizeof(term) - 1 : sizeof(intr) - 1) < 0)
		_exit(1);
	_exit(0);
}

static void usage(void)
{
	printf("Usage:\n");
	printf("  Server mode:\n");
	printf("    rdmalib send              - Run send-receive server\n");
	printf("    rdmalib write             - Run RDMA write server\n");
	printf("    rdmalib read              - Run RDMA read server\n");
	printf("\n");
	printf("  Client mode:\n");
	printf("    rdmalib send <host>       - Run send-receive client\n");
	printf("    rdmalib write <host>      - Run RDMA write client\n");
	printf("    rdmalib read <host>       - Run RDMA read client\n");
}

static void banner(const char *mode, const char *host)
{
	printf("\n=== RDMA Communication Program Started ===\n");
	printf("Mode: %s (%s)\n", mode, host ? "Client" : "Server");
	printf("Configuration:\n");
	printf("  Buffer size: %d bytes\n", RDMALIB_BUF);
	printf("  IB port: %d\n", 1);
	printf("  GID index: %d\n", gid_index());
	printf("  TCP port: %d\n", RDMALIB_TCP_PORT);
	printf(host ? "Connecting to %s...\n" : "Starting server...\n", host);
}

/* run: both connections, then the mode's traffic on the second. */
static int run(enum mode m, const char *host, const char *text, int tmo)
{
	struct conn first = { 0 }, second = { 0 };
	struct rdmalib_info r1, r2;
	int rc = -1;
	if (setup(&first, host, m, &r1, tmo) == 0 && open_conn(&second, m) == 0) {
		if (text)
			strcpy(second.buf, text);
		second.sock = host ? tcp_connect(host) : tcp_accept(tmo);
		if (second.sock >= 0 && exchange(&second, host != NULL, &r2, tmo) == 0 && qp_connect(&second, &r2, m) == 0) {
			if (m == READ)
				rc = host ? read_ranges(&second, &r2, tmo) : serve_read(&second, text != NULL, tmo);
			else
				rc = host ? send_lines(&second, m, &r2, tmo) : serve(&second, m, tmo);
		}
	}
	close_conn(&second);
	close_conn(&first);
	return rc;
}

int main(int argc, char **argv)
{
	char text[RDMALIB_BUF];
	const char *host = argc > 2 ? argv[2] : NULL;
	int have_text = 0, rc;
	enum mode m;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || argc > 3) {
		usage();
		return 1;
	}
	if (strcmp(argv[1], "send") == 0) {
		m = SEND;
	} else if (strcmp(argv[1], "write") == 0) {
		m = WRITE;
	} else if (strcmp(argv[1], "read") == 0) {
		m = READ;
	} else if (strcmp(argv[1], "lambda") == 0) {
		fprintf(stderr, "%s: lambda is not supported: its server executes machine code sent over the wire, "
				"which this peer never does\n", who);
		return 1;
	} else {
		printf("Unknown mode: %s\n", argv[1]);
		usage();
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* The read server's text, before the connection (see the top). */
	if (m == READ && !host)
		have_text = next_line(text);
	banner(argv[1], host);
	rc = run(m, host, have_text ? text : NULL, peer_timeout_ms());
	if (rc != 0) {
		fprintf(stderr, "%s operation failed with error code: %d\n", host ? "Client" : "Server", rc);
		return 1;
	}
	return 0;
}
