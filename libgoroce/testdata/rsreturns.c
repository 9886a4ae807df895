/* rsreturns checks what librdmacm's rsocket calls return on the goroce
 * device, where they differ from a kernel socket's only as rsockets do:
 *
 *   rsreturns ADDR PORT    (ADDR an address of the device)
 *   rsreturns ADDR PORT serve | send
 *
 * an rsocket is a real descriptor (poll sees it); a connection to a port
 * nobody listens on is refused; bad descriptors, addresses and families
 * are EBADF, EADDRNOTAVAIL, ENOTSUP; riomap's buffer takes the peer's
 * riowrite before the bytes sent after it, and the iomap calls fail as
 * librdmacm's do where nothing is mapped; datagram rsockets carry datagrams both
 * ways, with their sources, bound by rbind or by their first rsendto,
 * and fail as librdmacm's do before they are bound or above their
 * largest datagram; a
 * connection carries bytes both ways, with the addresses getsockname and
 * getpeername give, a half close (rshutdown) reaches the peer as an end
 * of stream, and a send to a peer that has gone fails with EPIPE, never
 * SIGPIPE. It prints "rsreturns: N checks, M failed".
 *
 * "serve" accepts one connection and reads it until it ends, then says
 * how ("ended: ..."); "send" connects and sends until killed: a test
 * kills the sender and looks for the server's end. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>

static int checks, failed;
#define CHECK(c, ...)                                                                 \
	do {                                                                          \
		checks++;                                                             \
		if (!(c)) {                                                           \
			failed++;                                                     \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);                   \
			printf(__VA_ARGS__);                                          \
			printf("\n");                                                 \
		}                                                                     \
	} while (0)
#define ERRNO(call, want) \
	do { errno = 0; long r_ = (long)(call); CHECK(r_ == -1 && errno == (want), #call ": %ld, errno %d (%s), want %d", r_, errno, strerror(errno), (want)); } while (0)

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: rsreturns ADDR PORT [serve|send]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would end the program: sends must not raise it */
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	inet_pton(AF_INET, argv[1], &a.sin_addr);
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 4 && !strcmp(argv[3], "serve")) {
		int l = rsocket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || rbind(l, (struct sockaddr *)&a, sizeof a) || rlisten(l, 1)) {
			perror("listen");
			return 1;
		}
		int s = raccept(l, NULL, NULL);
		if (s < 0) {
			perror("raccept");
			return 1;
		}
		printf("accepted\n");
		static char b[65536];
		long total = 0;
		ssize_t n;
		while ((n = rrecv(s, b, sizeof b, 0)) > 0)
			total += n;
		printf("ended: rrecv %zd, errno %d (%s) after %ld bytes\n", n, n < 0 ? errno : 0, n < 0 ? strerror(errno) : "",
		       total);
		rclose(s);
		rclose(l);
		return n == 0 || errno == ECONNRESET ? 0 : 1;
	}
	if (argc == 4 && !strcmp(argv[3], "send")) {
		int c = rsocket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || rconnect(c, (struct sockaddr *)&a, sizeof a)) {
			perror("rconnect");
			return 1;
		}
		printf("connected\n");
		static char b[65536];
		for (;;)
			if (rsend(c, b, sizeof b, 0) < 0) {
				perror("rsend");
				return 1;
			}
	}

	ERRNO(rsocket(AF_UNIX, SOCK_STREAM, 0), ENOTSUP);
	ERRNO(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), ENOTSUP);
	ERRNO(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), ENOTSUP);
	int f = rsocket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0); /* as Python's socket module asks */
	CHECK(f >= 0 && (fcntl(f, F_GETFD) & FD_CLOEXEC) && (fcntl(f, F_GETFL) & O_NONBLOCK),
	      "rsocket with SOCK_CLOEXEC | SOCK_NONBLOCK: %d, %s", f, strerror(errno));
	rclose(f);
	ERRNO(rsend(12345, "x", 1, 0), EBADF);
	ERRNO(rclose(12345), EBADF);

	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0, "rsocket: %s", strerror(errno));
	struct sockaddr_in bad = {.sin_family = AF_INET};
	inet_pton(AF_INET, "192.0.2.1", &bad.sin_addr);
	ERRNO(rbind(c, (struct sockaddr *)&bad, sizeof bad), EADDRNOTAVAIL);
	ERRNO(rconnect(c, NULL, sizeof a), EFAULT);
	ERRNO(rconnect(c, (struct sockaddr *)&a, sizeof a), ECONNREFUSED); /* nobody listens yet */
	rclose(c);
	ERRNO(riomap(rsocket(AF_INET, SOCK_STREAM, 0), NULL, 0, 0, 0, 0), EINVAL); /* not connected */

	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(!rbind(l, (struct sockaddr *)&a, sizeof a), "rbind: %s", strerror(errno));
	CHECK(!rlisten(l, 4), "rlisten: %s", strerror(errno));
	struct pollfd p = {.fd = l, .events = POLLIN};
	CHECK(rpoll(&p, 1, 0) == 0, "a listener with no connection is readable");

	c = rsocket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	CHECK(!rsetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), "TCP_NODELAY: %s", strerror(errno));
	ERRNO(rgetpeername(c, (struct sockaddr *)&bad, &(socklen_t){sizeof bad}), ENOTCONN);
	socklen_t zero = 0; /* a NULL buffer of length 0 asks the length only, as librspreload does */
	CHECK(!rgetsockname(c, NULL, &zero) && zero == sizeof(struct sockaddr_in), "rgetsockname(NULL, 0): %s, %u",
	      strerror(errno), zero);
	ERRNO(rgetsockname(c, NULL, &(socklen_t){sizeof bad}), EFAULT);
	CHECK(!rconnect(c, (struct sockaddr *)&a, sizeof a), "rconnect: %s", strerror(errno));
	CHECK(rpoll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "the listener is not readable with a connection waiting");
	struct sockaddr_in peer;
	socklen_t pl = sizeof peer;
	int s = raccept(l, (struct sockaddr *)&peer, &pl);
	CHECK(s >= 0, "raccept: %s", strerror(errno));
	struct sockaddr_in cl, cp;
	socklen_t n1 = sizeof cl, n2 = sizeof cp;
	CHECK(!rgetsockname(c, (struct sockaddr *)&cl, &n1) && !rgetpeername(c, (struct sockaddr *)&cp, &n2) &&
		      cp.sin_port == a.sin_port && cl.sin_port == peer.sin_port &&
		      cl.sin_addr.s_addr == peer.sin_addr.s_addr,
	      "the addresses: client %s:%d, accepted from port %d", inet_ntoa(cl.sin_addr), ntohs(cl.sin_port),
	      ntohs(peer.sin_port));

	char buf[100000], got[100000];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (char)(i * 7 + 3);
	CHECK(rsend(c, buf, sizeof buf, 0) == (ssize_t)sizeof buf, "rsend: %s", strerror(errno));
	size_t have = 0;
	while (have < sizeof got) {
		ssize_t k = rrecv(s, got + have, sizeof got - have, 0);
		if (k <= 0)
			break;
		have += k;
	}
	CHECK(have == sizeof got && !memcmp(buf, got, sizeof got), "%zu bytes came of %zu, or not as sent", have,
	      sizeof got);
	CHECK(rwrite(s, "pong", 4) == 4 && rread(c, got, 4) == 4 && !memcmp(got, "pong", 4), "the answer");
	CHECK(!rshutdown(c, SHUT_WR), "rshutdown: %s", strerror(errno));
	CHECK(rrecv(s, got, 1, 0) == 0, "the half close did not reach the peer as an end of stream");
	CHECK(rsend(s, "late", 4, 0) == 4 && rrecv(c, got, 4, 0) == 4, "the other direction after the half close");
	rclose(s);
	CHECK(rrecv(c, got, 1, 0) == 0, "the peer's close did not reach the client as an end of stream");
	/* The peer is gone: sends fail with EPIPE (or ECONNRESET) before long, and no SIGPIPE ends the program. */
	int e = 0;
	for (int i = 0; i < 200 && !e; i++) {
		if (rsend(c, buf, 1000, 0) < 0)
			e = errno;
		else
			usleep(10000);
	}
	CHECK(e == EPIPE || e == ECONNRESET, "a send to a closed connection: errno %d (%s)", e, strerror(e));
	ERRNO(rsendto(c, "x", 1, 0, (struct sockaddr *)&a, sizeof a), EISCONN);
	rclose(c);
	rclose(l);

	/* The iomap extension: a listener takes RDMA_IOMAPSIZE after rlisten,
	 * as riostream sets it. */
	int il = rsocket(AF_INET, SOCK_STREAM, 0), ic = rsocket(AF_INET, SOCK_STREAM, 0), one1 = 1;
	struct sockaddr_in ia = a;
	ia.sin_port = htons(ntohs(a.sin_port) + 1);
	CHECK(!rbind(il, (struct sockaddr *)&ia, sizeof ia), "rbind for iomap: %s", strerror(errno));
	CHECK(!rlisten(il, 1), "rlisten for iomap: %s", strerror(errno));
	CHECK(!rsetsockopt(il, SOL_RDMA, RDMA_IOMAPSIZE, &one1, sizeof one1), "RDMA_IOMAPSIZE on a listener: %s",
	      strerror(errno));
	CHECK(!rsetsockopt(ic, SOL_RDMA, RDMA_IOMAPSIZE, &one1, sizeof one1), "RDMA_IOMAPSIZE before rconnect: %s",
	      strerror(errno));
	CHECK(!rconnect(ic, (struct sockaddr *)&ia, sizeof ia), "rconnect for iomap: %s", strerror(errno));
	int is = raccept(il, NULL, NULL);
	CHECK(is >= 0 && !rsetsockopt(is, SOL_RDMA, RDMA_IOMAPSIZE, &one1, sizeof one1), "raccept: %s", strerror(errno));
	static char target[3 * 4096 + 100] __attribute__((aligned(4096)));
	char *tb = target + 100; /* not page-aligned, over pages shared with its neighbours */
	ERRNO(riounmap(is, tb, 8192), EINVAL);
	ERRNO(riowrite(ic, buf, 100, 0, 0), EINVAL); /* the peer mapped nothing */
	ERRNO(riomap(is, tb, 8192, PROT_READ, 0, 0), EINVAL);
	off_t io = riomap(is, tb, 8192, PROT_WRITE, 0, 4096);
	CHECK(io == 4096, "riomap: %lld, %s", (long long)io, strerror(errno));
	CHECK(rsend(ic, "x", 1, 0) == 1 && rrecv(is, got, 1, 0) == 1, "a message after riomap");
	CHECK(riowrite(ic, buf, 8000, 4096 + 100, 0) == 8000, "riowrite: %s", strerror(errno));
	CHECK(rsend(ic, "y", 1, 0) == 1 && rrecv(is, got, 1, 0) == 1 && got[0] == 'y', "the message after riowrite");
	CHECK(!memcmp(tb + 100, buf, 8000), "riowrite's bytes are not in the mapped buffer when the message after them came");
	ERRNO(riowrite(ic, buf, 200, 4096 + 8100, 0), EINVAL); /* past the mapping: nothing written */
	/* A non-blocking riowrite does not wait, as librdmacm's: with the
	 * peer not reading, the client's stream fills until rsend says
	 * EAGAIN for 200 ms on end, and riowrite, whose bytes go after the
	 * ones sent before it, says EAGAIN too. Once the peer has read them
	 * it goes. */
	int icfl = rfcntl(ic, F_GETFL);
	CHECK(icfl >= 0 && !rfcntl(ic, F_SETFL, icfl | O_NONBLOCK), "rfcntl O_NONBLOCK: %s", strerror(errno));
	static char fill[65536];
	size_t filled = 0;
	int stuck = 0;
	for (int i = 0; i < 100000 && stuck < 200; i++) {
		ssize_t k = rsend(ic, fill, sizeof fill, 0);
		if (k > 0) {
			filled += k, stuck = 0;
		} else if (errno == EAGAIN) {
			stuck++, usleep(1000);
		} else {
			break;
		}
	}
	CHECK(stuck == 200, "rsend on a non-blocking rsocket whose peer does not read: %zu bytes, then %s", filled,
	      strerror(errno));
	ERRNO(riowrite(ic, buf, 100, 4096, 0), EAGAIN);
	ERRNO(riowrite(ic, buf, 100, 4096, MSG_DONTWAIT), EAGAIN);
	size_t drained = 0;
	while (drained < filled) {
		ssize_t k = rrecv(is, fill, sizeof fill < filled - drained ? sizeof fill : filled - drained, 0);
		if (k <= 0)
			break;
		drained += k;
	}
	CHECK(drained == filled, "the peer read %zu of %zu bytes", drained, filled);
	ssize_t w = -1;
	for (int i = 0; i < 5000 && w < 0 && errno == EAGAIN; i++) {
		if ((w = riowrite(ic, buf, 100, 4096, 0)) < 0)
			usleep(1000);
	}
	CHECK(w == 100, "a non-blocking riowrite once the peer read: %zd, %s", w, strerror(errno));
	CHECK(!rfcntl(ic, F_SETFL, icfl), "rfcntl: %s", strerror(errno));
	/* That riowrite returned once its WRITE was posted: the message
	 * after it says it has landed, and only then may the server unmap
	 * (unmapped first, the WRITE meets no region, as a late one would on
	 * librdmacm: the peer's QP fails with a remote access error). */
	CHECK(rsend(ic, "z", 1, 0) == 1 && rrecv(is, got, 1, 0) == 1 && got[0] == 'z',
	      "the message after the non-blocking riowrite");
	CHECK(!memcmp(tb, buf, 100), "the non-blocking riowrite's bytes are not in the mapped buffer");
	CHECK(!riounmap(is, tb, 8192), "riounmap: %s", strerror(errno));
	ERRNO(riounmap(is, tb, 8192), EINVAL);
	ERRNO(riowrite(is, buf, 10, 0, 0), EINVAL); /* the client mapped nothing */
	rclose(is);
	rclose(ic);
	rclose(il);

	/* Datagram rsockets. */
	int d1 = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(d1 >= 0, "rsocket SOCK_DGRAM: %s", strerror(errno));
	ERRNO(rrecv(d1, got, 10, MSG_DONTWAIT), EINVAL); /* not bound: nothing to read, as librdmacm's */
	ERRNO(rsend(d1, "x", 1, 0), EDESTADDRREQ);
	ERRNO(rlisten(d1, 1), EOPNOTSUPP);
	ERRNO(rbind(d1, (struct sockaddr *)&bad, sizeof bad), EADDRNOTAVAIL);
	struct sockaddr_in da = a, n1a, n2a, from;
	da.sin_port = 0;
	socklen_t l1 = sizeof n1a, l2 = sizeof n2a, fl = sizeof from;
	CHECK(!rbind(d1, (struct sockaddr *)&da, sizeof da) && !rgetsockname(d1, (struct sockaddr *)&n1a, &l1) &&
		      n1a.sin_port && n1a.sin_addr.s_addr == a.sin_addr.s_addr,
	      "rbind of a datagram rsocket, port 0: %s, bound to %s:%d", strerror(errno), inet_ntoa(n1a.sin_addr),
	      ntohs(n1a.sin_port));
	ERRNO(rbind(d1, (struct sockaddr *)&da, sizeof da), EINVAL);
	int d2 = rsocket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	CHECK(d2 >= 0 && (fcntl(d2, F_GETFL) & O_NONBLOCK), "rsocket SOCK_DGRAM | SOCK_NONBLOCK: %s", strerror(errno));
	CHECK(rsendto(d2, "hello", 5, 0, (struct sockaddr *)&n1a, sizeof n1a) == 5, "rsendto, not bound: %s",
	      strerror(errno));
	CHECK(!rgetsockname(d2, (struct sockaddr *)&n2a, &l2) && n2a.sin_port, "rgetsockname after rsendto: %s",
	      strerror(errno));
	p = (struct pollfd){.fd = d1, .events = POLLIN};
	CHECK(rpoll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "the datagram did not make its rsocket readable");
	memset(got, 0, 16);
	CHECK(rrecvfrom(d1, got, sizeof got, 0, (struct sockaddr *)&from, &fl) == 5 && !memcmp(got, "hello", 5) &&
		      fl == sizeof from && from.sin_port == n2a.sin_port && from.sin_addr.s_addr == a.sin_addr.s_addr,
	      "rrecvfrom: %.5s from %s:%d, want hello from port %d", got, inet_ntoa(from.sin_addr), ntohs(from.sin_port),
	      ntohs(n2a.sin_port));
	ERRNO(rrecv(d2, got, sizeof got, 0), EAGAIN); /* non-blocking, nothing yet */
	CHECK(rsendto(d1, "world!", 6, 0, (struct sockaddr *)&from, fl) == 6, "rsendto the answer: %s", strerror(errno));
	p = (struct pollfd){.fd = d2, .events = POLLIN};
	CHECK(rpoll(&p, 1, 5000) == 1 && rrecv(d2, got, sizeof got, 0) == 6 && !memcmp(got, "world!", 6),
	      "the answer did not come: %s", strerror(errno));
	CHECK(!rconnect(d2, (struct sockaddr *)&n1a, sizeof n1a) && !rgetpeername(d2, (struct sockaddr *)&from, &fl) &&
		      from.sin_port == n1a.sin_port,
	      "rconnect of a datagram rsocket: %s", strerror(errno));
	CHECK(rsend(d2, "0123456789", 10, 0) == 10, "rsend after rconnect: %s", strerror(errno));
	p = (struct pollfd){.fd = d1, .events = POLLIN};
	CHECK(rpoll(&p, 1, 5000) == 1 && rrecv(d1, got, 4, 0) == 4 && !memcmp(got, "0123", 4),
	      "a datagram read into 4 bytes is not cut to them: %s", strerror(errno));
	static char huge[65000];
	ERRNO(rsendto(d1, huge, sizeof huge, 0, (struct sockaddr *)&n2a, sizeof n2a), EMSGSIZE);
	/* Many datagrams in a row come in order (a bounded burst: the device's queue holds them). */
	int sent = 0, came = 0;
	for (int i = 0; i < 50; i++)
		sent += rsend(d2, &i, sizeof i, 0) == sizeof i;
	for (int i = 0; i < 50; i++) {
		int v = -1;
		p = (struct pollfd){.fd = d1, .events = POLLIN};
		if (rpoll(&p, 1, 5000) != 1 || rrecv(d1, &v, sizeof v, 0) != sizeof v || v != i)
			break;
		came++;
	}
	CHECK(sent == 50 && came == 50, "a burst of 50 datagrams: %d sent, %d came in order", sent, came);
	rclose(d1);
	rclose(d2);
	printf("rsreturns: %d checks, %d failed\n", checks, failed);
	return failed != 0;
}
