/*
 * peers.h: what goroce's C interop peers share. The peers are small
 * librdmacm/libibverbs programs that speak the wire protocols of two seed
 * programs (rdma-example's rdma_server/rdma_client and the rdma-roce-lab
 * minimal sample), written for goroce's interop matrix. Every wait here is
 * bounded: CM events and completions are waited for with poll(2) and a
 * deadline, PEER_TIMEOUT seconds (environment, default 60) unless the
 * caller says otherwise.
 */
#ifndef GOROCE_PEERS_H
#define GOROCE_PEERS_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* peer_timeout_ms: the bound on every wait, from PEER_TIMEOUT (seconds). */
static inline int peer_timeout_ms(void)
{
	const char *s = getenv("PEER_TIMEOUT");
	long v = s && *s ? strtol(s, NULL, 10) : 60;
	if (v < 1 || v > 3600)
		v = 60;
	return (int)(v * 1000);
}

static inline long long peer_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* peer_wait_fd: waits until fd is readable; 0, or -1 on timeout or error. */
static inline int peer_wait_fd(int fd, long long deadline)
{
	for (int i = 0; i < 1000000; i++) {
		long long left = deadline - peer_now_ms();
		if (left <= 0)
			return -1;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
	}
	return -1;
}

/*
 * peer_cm_event: the next CM event on ec, which must be want (or, when
 * also is not -1, also) with status 0; *out holds it, to be acked by the
 * caller. Anything else is reported on stderr with who's name and is -1.
 */
static inline int peer_cm_event(const char *who, struct rdma_event_channel *ec,
				enum rdma_cm_event_type want, int also,
				struct rdma_cm_event **out, int timeout_ms)
{
	struct rdma_cm_event *ev = NULL;
	if (peer_wait_fd(ec->fd, peer_now_ms() + timeout_ms)) {
		fprintf(stderr, "%s: no %s event within %d ms\n", who,
			rdma_event_str(want), timeout_ms);
		return -1;
	}
	if (rdma_get_cm_event(ec, &ev)) {
		fprintf(stderr, "%s: rdma_get_cm_event: %s\n", who, strerror(errno));
		return -1;
	}
	if (ev->status != 0 || (ev->event != want && (also < 0 || ev->event != (enum rdma_cm_event_type)also))) {
		fprintf(stderr, "%s: cma event %s, error %d (waiting for %s)\n", who,
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return -1;
	}
	*out = ev;
	return 0;
}

/* peer_nonblock: makes a channel's fd non-blocking (the waits poll it). */
static inline int peer_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/*
 * peer_wait_wcs: reaps n completions from cq, whose events arrive on ch
 * (cq armed with ibv_req_notify_cq), within timeout_ms; every one must be
 * successful. Returns 0, or -1 after saying why on stderr.
 */
static inline int peer_wait_wcs(const char *who, struct ibv_comp_channel *ch, struct ibv_cq *cq,
				struct ibv_wc *wc, int n, int timeout_ms)
{
	long long deadline = peer_now_ms() + timeout_ms;
	int got = 0;
	for (int i = 0; got < n && i < 1000000; i++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", who);
			return -1;
		}
		got += r;
		if (got >= n)
			break;
		if (peer_wait_fd(ch->fd, deadline)) {
			fprintf(stderr, "%s: %d of %d completions within %d ms\n", who, got, n, timeout_ms);
			return -1;
		}
		struct ibv_cq *ev_cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ctx) == 0) {
			ibv_ack_cq_events(ev_cq, 1);
			if (ibv_req_notify_cq(ev_cq, 0)) {
				fprintf(stderr, "%s: ibv_req_notify_cq failed\n", who);
				return -1;
			}
		}
	}
	if (got < n)
		return -1;
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: work completion %d (wr_id %llu) failed: %s\n", who, i,
				(unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
			return -1;
		}
	}
	return 0;
}

/* peer_resolve: addr := host (a name or an IPv4 address) and port. */
static inline int peer_resolve(const char *who, const char *host, const char *port, struct sockaddr_in *addr)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *res = NULL;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "%s: %s: %s\n", who, host, gai_strerror(rc));
		return -1;
	}
	memcpy(addr, res->ai_addr, sizeof(*addr));
	freeaddrinfo(res);
	return 0;
}

/* peer_route: resolves the address and the route of a client's id. */
static inline int peer_route(const char *who, struct rdma_event_channel *ec, struct rdma_cm_id *id,
			     struct sockaddr_in *dst, int timeout_ms)
{
	struct rdma_cm_event *ev;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, timeout_ms)) {
		fprintf(stderr, "%s: rdma_resolve_addr: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ADDR_RESOLVED, -1, &ev, timeout_ms + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, timeout_ms)) {
		fprintf(stderr, "%s: rdma_resolve_route: %s\n", who, strerror(errno));
		return -1;
	}
	if (peer_cm_event(who, ec, RDMA_CM_EVENT_ROUTE_RESOLVED, -1, &ev, timeout_ms + 1000))
		return -1;
	rdma_ack_cm_event(ev);
	return 0;
}

#endif /* GOROCE_PEERS_H */
