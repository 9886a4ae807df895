/*
 * procs: processes and the device. Each mode is one check of the Go test
 * (procs_test.go):
 *
 *	procs fork-after DEV	fork with the device open: the parent keeps
 *				working, the child's use of the parent's
 *				objects fails cleanly, and it opens its own
 *	procs fork-before DEV	fork, then each process opens the device
 *	procs kill DEV		a child killed with SIGKILL in the middle of
 *				WRITEs: its peer here sees an error
 *				completion; then it waits for a line on
 *				standard input before it tears down
 *	procs wild DEV		wild addresses in SGEs and remote addresses:
 *				error completions, no byte touched outside
 *				the regions, the device fine after
 *	procs deregkey DEV	a deregistered region's keys: LOC_PROT_ERR and
 *				REM_ACCESS_ERR, as rxe
 *	procs signals DEV	a plain signal(SIGALRM) handler firing during
 *				RDMA, then a SIGINT handler (the test sends
 *				SIGINT) that tears everything down
 */
#include "gtest.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>

#define LW IBV_ACCESS_LOCAL_WRITE
#define RW IBV_ACCESS_REMOTE_WRITE

static const char *dev;

/* A process's objects: a PD, a CQ, a region and two RC QPs connected to
 * each other. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void *pages(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

static void side_open(struct side *s, int pair)
{
	s->ctx = open_named(dev);
	MUST(ibv_query_gid(s->ctx, 1, 0, &s->gid));
	s->pd = OK(ibv_alloc_pd(s->ctx));
	s->cq = OK(ibv_create_cq(s->ctx, 256, NULL, NULL, 0));
	s->buf = pages(8192);
	s->mr = OK(ibv_reg_mr(s->pd, s->buf, 8192, LW | RW | IBV_ACCESS_REMOTE_READ));
	s->a = OK(make_qp(s->pd, IBV_QPT_RC, s->cq, s->cq, NULL, 64, 2));
	if (pair) {
		s->b = OK(make_qp(s->pd, IBV_QPT_RC, s->cq, s->cq, NULL, 64, 2));
		MUST(connect_pair(s->a, s->b, &s->gid, LW | RW | IBV_ACCESS_REMOTE_READ));
	}
}

static void side_close(struct side *s)
{
	MUST(ibv_destroy_qp(s->a));
	if (s->b)
		MUST(ibv_destroy_qp(s->b));
	MUST(ibv_dereg_mr(s->mr));
	MUST(ibv_destroy_cq(s->cq));
	MUST(ibv_dealloc_pd(s->pd));
	MUST(ibv_close_device(s->ctx));
	munmap(s->buf, 8192);
}

/* loop_write WRITEs a message from the first half of the region to the
 * second over the side's pair and reports the completion's status. */
static int loop_write(struct side *s, const char *msg)
{
	size_t n = strlen(msg) + 1;
	memcpy(s->buf, msg, n);
	memset(s->buf + 4096, 0, n);
	if (post_write(s->a, 1, s->buf, (uint32_t)n, s->mr->lkey, (uintptr_t)s->buf + 4096, s->mr->rkey))
		return -1;
	struct ibv_wc wc;
	if (poll_n(s->cq, &wc, 1, 5000) != 1)
		return -2;
	if (wc.status == IBV_WC_SUCCESS && memcmp(s->buf + 4096, msg, n))
		return -3;
	return wc.status;
}

static int fork_after(void)
{
	struct side p = {0};
	side_open(&p, 1);
	CHECK(loop_write(&p, "parent before fork") == IBV_WC_SUCCESS, "the parent's WRITE before fork");
	memcpy(p.buf + 2048, "parent's", 9);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		/* The child's copy of the parent's objects is dead: every use
		 * fails, none crashes or reaches the parent's. */
		struct ibv_send_wr wr = {.opcode = IBV_WR_SEND}, *bad;
		struct ibv_wc wc;
		CHECK(ibv_post_send(p.a, &wr, &bad) != 0, "the child posted to the parent's QP");
		CHECK(ibv_poll_cq(p.cq, 1, &wc) < 0, "the child polled the parent's CQ");
		NULL_ERR(ibv_alloc_pd(p.ctx), EIO);
		NULL_ERR(ibv_reg_mr(p.pd, p.buf, 4096, LW), EIO);
		CHECK(ibv_req_notify_cq(p.cq, 0) != 0, "the child armed the parent's CQ");
		/* Its copy of the parent's registered memory is its own. */
		CHECK(!strcmp(p.buf + 2048, "parent's"), "the child's copy of registered memory");
		strcpy(p.buf + 2048, "child's!");
		/* Its own context works. */
		struct side c = {0};
		side_open(&c, 1);
		for (int i = 0; i < 20; i++)
			CHECK(loop_write(&c, "child's own WRITE") == IBV_WC_SUCCESS, "the child's WRITE %d", i);
		side_close(&c);
		EQ_ERR(ibv_close_device(p.ctx), 0);
		_exit(report("procs fork-after child"));
	}
	for (int i = 0; i < 20; i++)
		CHECK(loop_write(&p, "parent while the child runs") == IBV_WC_SUCCESS, "the parent's WRITE %d", i);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	CHECK(!strcmp(p.buf + 2048, "parent's"), "the child's write reached the parent's memory");
	CHECK(loop_write(&p, "parent after the child") == IBV_WC_SUCCESS, "the parent's WRITE after the child");
	side_close(&p);
	return report("procs fork-after");
}

static int fork_before(void)
{
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	struct side s = {0};
	side_open(&s, 1);
	for (int i = 0; i < 50; i++)
		CHECK(loop_write(&s, pid ? "the parent's WRITE" : "the child's WRITE") == IBV_WC_SUCCESS, "%s WRITE %d",
		      pid ? "the parent's" : "the child's", i);
	side_close(&s);
	if (pid == 0)
		_exit(report("procs fork-before child"));
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	return report("procs fork-before");
}

/* What two processes tell each other to connect. */
struct card {
	uint32_t qpn, rkey;
	uint64_t addr;
};

static void exchange(int fd, struct card *mine, struct card *theirs)
{
	if (write(fd, mine, sizeof *mine) != sizeof *mine || read(fd, theirs, sizeof *theirs) != sizeof *theirs) {
		perror("exchange");
		exit(2);
	}
}

static int kill_mid_transfer(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("socketpair");
		return 2;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* The victim: WRITEs to its peer until it is killed. */
		close(sv[0]);
		struct side v = {0};
		side_open(&v, 0);
		struct card me = {v.a->qp_num, v.mr->rkey, (uintptr_t)v.buf}, peer;
		exchange(sv[1], &me, &peer);
		if (qp_init(v.a, LW | RW) || qp_rtr(v.a, peer.qpn, &v.gid) || qp_rts(v.a, 12, 3))
			_exit(3);
		char c = 1;
		if (write(sv[1], &c, 1) != 1)
			_exit(3);
		for (uint64_t n = 0;; n++) {
			struct ibv_wc wc[16];
			if (post_write(v.a, n, v.buf, 4096, v.mr->lkey, peer.addr, peer.rkey) == 0)
				continue;
			int k = ibv_poll_cq(v.cq, 16, wc);
			for (int i = 0; i < k; i++)
				if (wc[i].status != IBV_WC_SUCCESS)
					_exit(4);
		}
	}
	close(sv[1]);
	struct side p = {0};
	side_open(&p, 0);
	struct card me = {p.a->qp_num, p.mr->rkey, (uintptr_t)p.buf}, victim;
	exchange(sv[0], &me, &victim);
	/* A short timeout and few retries: a peer that does not answer is
	 * RETRY_EXC_ERR in about a second. */
	MUST(qp_init(p.a, LW | RW));
	MUST(qp_rtr(p.a, victim.qpn, &p.gid));
	MUST(qp_rts(p.a, 12, 3));
	char c;
	if (read(sv[0], &c, 1) != 1) {
		fprintf(stderr, "the victim did not connect\n");
		return 2;
	}
	/* The peer WRITEs back while the victim's WRITEs land. */
	int ok = 0;
	struct ibv_wc wc[16];
	for (int i = 0; i < 200 && ok < 100; i++) {
		MUST(post_write(p.a, i, p.buf, 64, p.mr->lkey, victim.addr, victim.rkey));
		int n = poll_n(p.cq, wc, 1, 5000);
		ok += n == 1 && wc[0].status == IBV_WC_SUCCESS;
	}
	CHECK(ok == 100, "the peer's WRITEs to the victim before the kill: %d", ok);
	printf("RUNNING\n");
	usleep(300 * 1000);
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim: status %#x", st);
	printf("KILLED\n");
	/* The victim's QP is gone with its process: the peer's WRITEs go
	 * unanswered, and the first completes with RETRY_EXC_ERR. */
	double t0 = now_ms();
	int status = -1;
	for (int i = 0; status < 0 && now_ms() - t0 < 20000; i++) {
		if (post_write(p.a, 1000 + i, p.buf, 64, p.mr->lkey, victim.addr, victim.rkey))
			break;
		if (poll_n(p.cq, wc, 1, 10000) == 1 && wc[0].status != IBV_WC_SUCCESS)
			status = wc[0].status;
	}
	double dt = now_ms() - t0;
	CHECK(status == IBV_WC_RETRY_EXC_ERR, "the peer's completion after the kill: %d (%s), want RETRY_EXC_ERR", status,
	      ibv_wc_status_str(status));
	CHECK(dt < 10000, "the error took %.0f ms", dt);
	printf("PEER-ERR %s after %.0f ms\n", ibv_wc_status_str(status), dt);
	/* Wait for the test to look at the device. */
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		fprintf(stderr, "no go-ahead on stdin\n");
	side_close(&p);
	return report("procs kill");
}

/* canary fills a buffer that no region holds and checks it after. */
static int intact(const char *b, size_t n, int v)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (char)v)
			return 0;
	return 1;
}

static int wild(void)
{
	struct side s = {0};
	side_open(&s, 1);
	/* Three pages: the region is the middle one; its neighbours are the
	 * program's but no region's. */
	char *g = pages(3 * 4096);
	memset(g, 0x5c, 3 * 4096);
	struct ibv_mr *mid = OK(ibv_reg_mr(s.pd, g + 4096, 4096, LW | RW | IBV_ACCESS_REMOTE_READ));
	memset(g + 4096, 0x11, 4096);
	struct ibv_wc wc;
	struct ibv_send_wr *bad;
	struct {
		const char *what;
		uint64_t addr;
		uint32_t len, lkey;
		uint64_t raddr;
		uint32_t rkey;
		enum ibv_wr_opcode op;
		int want;
	} cases[] = {
		{"a wild local address", 0xdead0000000ULL, 64, mid->lkey, (uintptr_t)s.buf + 4096, s.mr->rkey,
		 IBV_WR_RDMA_WRITE, IBV_WC_LOC_PROT_ERR},
		{"a local address before the region", (uintptr_t)g + 4096 - 64, 64, mid->lkey, (uintptr_t)s.buf + 4096,
		 s.mr->rkey, IBV_WR_RDMA_WRITE, IBV_WC_LOC_PROT_ERR},
		{"a local length past the region", (uintptr_t)g + 4096 + 4000, 200, mid->lkey, (uintptr_t)s.buf + 4096,
		 s.mr->rkey, IBV_WR_RDMA_WRITE, IBV_WC_LOC_PROT_ERR},
		{"a READ into memory past the region", (uintptr_t)g + 4096 + 4000, 200, mid->lkey, (uintptr_t)s.buf,
		 s.mr->rkey, IBV_WR_RDMA_READ, IBV_WC_LOC_PROT_ERR},
		{"a wild key", (uintptr_t)g + 4096, 64, 0x12345678, (uintptr_t)s.buf + 4096, s.mr->rkey, IBV_WR_RDMA_WRITE,
		 IBV_WC_LOC_PROT_ERR},
		{"a wild remote address", (uintptr_t)s.buf, 64, s.mr->lkey, 0xdead0000000ULL, mid->rkey, IBV_WR_RDMA_WRITE,
		 IBV_WC_REM_ACCESS_ERR},
		{"a remote WRITE past the region", (uintptr_t)s.buf, 200, s.mr->lkey, (uintptr_t)g + 2 * 4096 - 100,
		 mid->rkey, IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR},
		{"a remote WRITE before the region", (uintptr_t)s.buf, 64, s.mr->lkey, (uintptr_t)g + 4096 - 32, mid->rkey,
		 IBV_WR_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR},
		{"a remote READ past the region", (uintptr_t)s.buf, 200, s.mr->lkey, (uintptr_t)g + 2 * 4096 - 100,
		 mid->rkey, IBV_WR_RDMA_READ, IBV_WC_REM_ACCESS_ERR},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct ibv_sge sg = {.addr = cases[i].addr, .length = cases[i].len, .lkey = cases[i].lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sg, .num_sge = 1, .opcode = cases[i].op,
					 .send_flags = IBV_SEND_SIGNALED};
		wr.wr.rdma.remote_addr = cases[i].raddr;
		wr.wr.rdma.rkey = cases[i].rkey;
		int r = ibv_post_send(s.a, &wr, &bad);
		CHECK(r == 0, "%s: ibv_post_send = %d", cases[i].what, r);
		int n = poll_n(s.cq, &wc, 1, 5000);
		CHECK(n == 1 && (int)wc.status == cases[i].want, "%s: status %d (%s), want %d (%s)", cases[i].what,
		      n == 1 ? (int)wc.status : -1, n == 1 ? ibv_wc_status_str(wc.status) : "none", cases[i].want,
		      ibv_wc_status_str(cases[i].want));
		CHECK(intact(g, 4096, 0x5c) && intact(g + 2 * 4096, 4096, 0x5c), "%s: bytes outside the region changed",
		      cases[i].what);
		CHECK(intact(g + 4096, 4096, 0x11), "%s: the region's bytes changed", cases[i].what);
		/* The failed request took its QPs to ERR: a new pair. */
		MUST(ibv_destroy_qp(s.a));
		MUST(ibv_destroy_qp(s.b));
		while (ibv_poll_cq(s.cq, 1, &wc) > 0)
			;
		s.a = OK(make_qp(s.pd, IBV_QPT_RC, s.cq, s.cq, NULL, 64, 2));
		s.b = OK(make_qp(s.pd, IBV_QPT_RC, s.cq, s.cq, NULL, 64, 2));
		MUST(connect_pair(s.a, s.b, &s.gid, LW | RW | IBV_ACCESS_REMOTE_READ));
	}
	/* The device is fine: a good WRITE goes. */
	CHECK(loop_write(&s, "after the wild ones") == IBV_WC_SUCCESS, "a WRITE after the wild ones");
	MUST(ibv_dereg_mr(mid));
	side_close(&s);
	return report("procs wild");
}

static int deregkey(void)
{
	struct side s = {0};
	side_open(&s, 1);
	char *b = pages(4096);
	struct ibv_mr *m = OK(ibv_reg_mr(s.pd, b, 4096, LW | RW));
	uint32_t lkey = m->lkey, rkey = m->rkey;
	MUST(ibv_dereg_mr(m));
	struct ibv_wc wc;
	/* A send from a deregistered region: rxe's LOC_PROT_ERR. */
	CHECK(post_write(s.a, 1, b, 64, lkey, (uintptr_t)s.buf + 4096, s.mr->rkey) == 0, "the post");
	CHECK(poll_n(s.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 1,
	      "a WRITE from a deregistered lkey: status %d (%s)", wc.status, ibv_wc_status_str(wc.status));
	MUST(ibv_destroy_qp(s.a));
	MUST(ibv_destroy_qp(s.b));
	while (ibv_poll_cq(s.cq, 1, &wc) > 0)
		;
	s.a = OK(make_qp(s.pd, IBV_QPT_RC, s.cq, s.cq, NULL, 64, 2));
	s.b = OK(make_qp(s.pd, IBV_QPT_RC, s.cq, s.cq, NULL, 64, 2));
	MUST(connect_pair(s.a, s.b, &s.gid, LW | RW));
	/* A WRITE to a deregistered rkey: REM_ACCESS_ERR. */
	memset(b, 0x77, 4096);
	CHECK(post_write(s.a, 2, s.buf, 64, s.mr->lkey, (uintptr_t)b, rkey) == 0, "the post");
	CHECK(poll_n(s.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 2,
	      "a WRITE to a deregistered rkey: status %d (%s)", wc.status, ibv_wc_status_str(wc.status));
	CHECK(intact(b, 4096, 0x77), "a WRITE to a deregistered rkey changed the bytes");
	munmap(b, 4096);
	side_close(&s);
	return report("procs deregkey");
}

static volatile sig_atomic_t alarms;
static struct side *torn;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void on_int(int sig)
{
	(void)sig;
	/* Tear everything down from the handler, as programs do. */
	side_close(torn);
	printf("torn down after %d alarms\n", (int)alarms);
	fflush(stdout);
	_exit(report("procs signals"));
}

static int signals(void)
{
	static struct side s;
	side_open(&s, 1);
	torn = &s;
	signal(SIGALRM, on_alarm); /* plain signal(), as perftest's -D */
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, NULL);
	int bad = 0, n = 0;
	for (double end = now_ms() + 1000; now_ms() < end; n++)
		bad += loop_write(&s, "under alarms") != IBV_WC_SUCCESS;
	CHECK(bad == 0 && alarms > 10, "%d of %d WRITEs failed under %d alarms", bad, n, (int)alarms);
	struct sigaction sa = {.sa_handler = on_int};
	sigaction(SIGINT, &sa, NULL);
	printf("READY\n");
	fflush(stdout);
	/* WRITEs until SIGINT comes. */
	for (double end = now_ms() + 20000; now_ms() < end;)
		bad += loop_write(&s, "until SIGINT") != IBV_WC_SUCCESS;
	fprintf(stderr, "no SIGINT came\n");
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: procs MODE DEVICE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = argv[2];
	const char *m = argv[1];
	if (!strcmp(m, "fork-after"))
		return fork_after();
	if (!strcmp(m, "fork-before"))
		return fork_before();
	if (!strcmp(m, "kill"))
		return kill_mid_transfer();
	if (!strcmp(m, "wild"))
		return wild();
	if (!strcmp(m, "deregkey"))
		return deregkey();
	if (!strcmp(m, "signals"))
		return signals();
	fprintf(stderr, "procs: unknown mode %s\n", m);
	return 2;
}
