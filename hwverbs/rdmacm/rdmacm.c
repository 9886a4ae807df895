//go:build hwverbs && cgo && linux

// rdmacm.c is the C side of package rdmacm: the librdmacm calls that take
// sockaddrs, unions or pointers, behind the flat structs of rdmacm.h,
// which says what each function does.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdmacm.h"

_Static_assert(RDMA_CM_EVENT_ADDR_RESOLVED == 0 && RDMA_CM_EVENT_CONNECT_REQUEST == 4 &&
	RDMA_CM_EVENT_REJECTED == 8 && RDMA_CM_EVENT_ESTABLISHED == 9 && RDMA_CM_EVENT_DISCONNECTED == 10 &&
	RDMA_CM_EVENT_DEVICE_REMOVAL == 11 && RDMA_CM_EVENT_TIMEWAIT_EXIT == 15, "rdma_cm_event_type");
_Static_assert(IBV_QPS_INIT == 1 && IBV_QPS_RTR == 2 && IBV_QPS_RTS == 3, "ibv_qp_state");

// rc turns librdmacm's -1-and-errno into an errno (EIO when errno is 0).
static int rc(int ret) {
	if (ret == 0)
		return 0;
	return errno ? errno : EIO;
}

int gc_get_event(struct rdma_event_channel *ch, gc_event *out) {
	struct rdma_cm_event *ev;
	memset(out, 0, sizeof *out);
	errno = 0;
	if (rdma_get_cm_event(ch, &ev))
		return errno ? errno : EIO;
	out->event = ev->event;
	out->status = ev->status;
	if (ev->listen_id)
		out->id = ev->id;
	const struct rdma_conn_param *c = &ev->param.conn;
	out->qp_num = c->qp_num;
	out->responder_resources = c->responder_resources;
	out->initiator_depth = c->initiator_depth;
	out->retry_count = c->retry_count;
	out->rnr_retry_count = c->rnr_retry_count;
	out->srq = c->srq;
	if (c->private_data && c->private_data_len) {
		out->pdata_len = c->private_data_len;
		memcpy(out->pdata, c->private_data, c->private_data_len);
	}
	rdma_ack_cm_event(ev);
	return 0;
}

int gc_channel_fd(struct rdma_event_channel *ch) { return ch->fd; }

struct rdma_cm_id *gc_create_id(struct rdma_event_channel *ch) {
	struct rdma_cm_id *id = NULL;
	errno = 0;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		if (!errno)
			errno = EIO;
		return NULL;
	}
	return id;
}

// to_sockaddr fills ss from a; it returns the address length.
static socklen_t to_sockaddr(const gc_addr *a, struct sockaddr_storage *ss) {
	memset(ss, 0, sizeof *ss);
	if (a->v4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->ip + 12, 4);
		return sizeof *s;
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(a->port);
	memcpy(&s->sin6_addr, a->ip, 16);
	return sizeof *s;
}

static void from_sockaddr(const struct sockaddr *sa, gc_addr *out) {
	memset(out, 0, sizeof *out);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		out->ip[10] = out->ip[11] = 0xff;
		memcpy(out->ip + 12, &s->sin_addr, 4);
		out->port = ntohs(s->sin_port);
		out->v4 = 1;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(out->ip, &s->sin6_addr, 16);
		out->port = ntohs(s->sin6_port);
	}
}

int gc_bind(struct rdma_cm_id *id, const gc_addr *a) {
	struct sockaddr_storage ss;
	to_sockaddr(a, &ss);
	errno = 0;
	return rc(rdma_bind_addr(id, (struct sockaddr *)&ss));
}

int gc_listen(struct rdma_cm_id *id, int backlog) {
	errno = 0;
	return rc(rdma_listen(id, backlog));
}

int gc_resolve_addr(struct rdma_cm_id *id, const gc_addr *src, const gc_addr *dst, int timeout_ms) {
	struct sockaddr_storage s, d;
	to_sockaddr(dst, &d);
	if (src)
		to_sockaddr(src, &s);
	errno = 0;
	return rc(rdma_resolve_addr(id, src ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d, timeout_ms));
}

int gc_resolve_route(struct rdma_cm_id *id, int timeout_ms) {
	errno = 0;
	return rc(rdma_resolve_route(id, timeout_ms));
}

void gc_local(struct rdma_cm_id *id, gc_addr *out) { from_sockaddr(rdma_get_local_addr(id), out); }

void gc_peer(struct rdma_cm_id *id, gc_addr *out) { from_sockaddr(rdma_get_peer_addr(id), out); }

int gc_device(struct rdma_cm_id *id, char *name, size_t n) {
	if (n)
		name[0] = 0;
	if (!id->verbs || !id->verbs->device || !n)
		return 0;
	strncpy(name, ibv_get_device_name(id->verbs->device), n - 1);
	name[n - 1] = 0;
	return id->port_num;
}

int gc_path_mtu(struct rdma_cm_id *id) {
	if (id->route.num_paths < 1 || !id->route.path_rec)
		return 0;
	return id->route.path_rec[0].mtu;
}

int gc_init_qp_attr(struct rdma_cm_id *id, int state, gc_qpattr *out) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof a);
	memset(out, 0, sizeof *out);
	a.qp_state = state;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno ? errno : EIO;
	out->mask = mask;
	out->state = a.qp_state;
	out->path_mtu = a.path_mtu;
	out->rq_psn = a.rq_psn;
	out->sq_psn = a.sq_psn;
	out->dest_qpn = a.dest_qp_num;
	out->access = a.qp_access_flags;
	out->pkey_index = a.pkey_index;
	out->port = a.port_num;
	out->timeout = a.timeout;
	out->retry_cnt = a.retry_cnt;
	out->rnr_retry = a.rnr_retry;
	out->min_rnr_timer = a.min_rnr_timer;
	out->max_rd_atomic = a.max_rd_atomic;
	out->max_dest_rd_atomic = a.max_dest_rd_atomic;
	memcpy(out->dgid, a.ah_attr.grh.dgid.raw, 16);
	out->flow_label = a.ah_attr.grh.flow_label;
	out->sgid_index = a.ah_attr.grh.sgid_index;
	out->hop_limit = a.ah_attr.grh.hop_limit;
	out->traffic_class = a.ah_attr.grh.traffic_class;
	out->sl = a.ah_attr.sl;
	out->ah_port = a.ah_attr.port_num;
	out->is_global = a.ah_attr.is_global;
	return 0;
}

static void to_param(struct rdma_conn_param *c, const gc_conn *p, const void *pdata, uint8_t len) {
	memset(c, 0, sizeof *c);
	c->private_data = len ? pdata : NULL;
	c->private_data_len = len;
	c->responder_resources = p->responder_resources;
	c->initiator_depth = p->initiator_depth;
	c->retry_count = p->retry_count;
	c->rnr_retry_count = p->rnr_retry_count;
	c->srq = p->srq;
	c->qp_num = p->qp_num;
}

int gc_connect(struct rdma_cm_id *id, const gc_conn *p, const void *pdata, uint8_t len) {
	struct rdma_conn_param c;
	to_param(&c, p, pdata, len);
	errno = 0;
	return rc(rdma_connect(id, &c));
}

int gc_accept(struct rdma_cm_id *id, const gc_conn *p, const void *pdata, uint8_t len) {
	struct rdma_conn_param c;
	to_param(&c, p, pdata, len);
	errno = 0;
	return rc(rdma_accept(id, &c));
}

int gc_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len) {
	errno = 0;
	return rc(rdma_reject(id, len ? pdata : NULL, len));
}

int gc_disconnect(struct rdma_cm_id *id) {
	errno = 0;
	return rc(rdma_disconnect(id));
}

int gc_establish(struct rdma_cm_id *id) {
	errno = 0;
	return rc(rdma_establish(id));
}

int gc_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch) {
	errno = 0;
	return rc(rdma_migrate_id(id, ch));
}

int gc_destroy_id(struct rdma_cm_id *id) {
	errno = 0;
	return rc(rdma_destroy_id(id));
}

struct rdma_event_channel *gc_create_channel(void) {
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch && !errno)
		errno = EIO;
	return ch;
}
