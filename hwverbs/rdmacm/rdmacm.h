//go:build hwverbs && cgo && linux

// rdmacm.h declares the C side of package rdmacm (rdmacm.c): flat structs
// Go fills in and reads (no unions, no sockaddrs, no pointers into Go
// memory kept after a call), and one function per librdmacm call that
// takes or returns them.

#ifndef GOROCE_RDMACM_H
#define GOROCE_RDMACM_H

#include <stdint.h>
#include <stddef.h>
#include <rdma/rdma_cma.h>

// gc_addr is an IP address and port: the address as 16 bytes (IPv4
// mapped into IPv6), v4 set for an IPv4 address, the port in host order.
typedef struct {
	uint8_t ip[16];
	uint16_t port;
	uint8_t v4;
} gc_addr;

// gc_event is an rdma_cm event as Go reads it, copied out before the
// event is acknowledged: for a connection request the new id, and the
// connection parameters with the private data.
typedef struct {
	struct rdma_cm_id *id; // the new id of a connection request
	int32_t event, status;
	uint32_t qp_num;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
	uint8_t pdata_len;
	uint8_t pdata[256];
} gc_event;

// gc_get_event takes one event from the channel (its descriptor is
// non-blocking), copies it into out and acknowledges it. It returns 0,
// EAGAIN when none is waiting, or errno.
int gc_get_event(struct rdma_event_channel *ch, gc_event *out);

// gc_channel_fd returns the channel's descriptor.
int gc_channel_fd(struct rdma_event_channel *ch);

// gc_create_id creates an RC id (RDMA_PS_TCP) on ch; NULL and errno on
// failure.
struct rdma_cm_id *gc_create_id(struct rdma_event_channel *ch);

// gc_bind binds id to a (an unspecified address binds to every device),
// gc_listen then listens; gc_resolve_addr resolves dst from src (NULL:
// the route's choice). Each returns 0 or errno.
int gc_bind(struct rdma_cm_id *id, const gc_addr *a);

int gc_listen(struct rdma_cm_id *id, int backlog);

int gc_resolve_addr(struct rdma_cm_id *id, const gc_addr *src, const gc_addr *dst, int timeout_ms);

int gc_resolve_route(struct rdma_cm_id *id, int timeout_ms);

// gc_local and gc_peer read the id's local and peer address and port.
void gc_local(struct rdma_cm_id *id, gc_addr *out);

void gc_peer(struct rdma_cm_id *id, gc_addr *out);

// gc_device is the device the id is bound to: it copies its name (n
// bytes at most, NUL-terminated) and returns the port number, or 0 when
// the id has no device yet (bound to an unspecified address).
int gc_device(struct rdma_cm_id *id, char *name, size_t n);

// gc_path_mtu returns the MTU of the id's path record (ibv_mtu), or 0.
int gc_path_mtu(struct rdma_cm_id *id);

// gc_qpattr is what rdma_init_qp_attr gives, flattened; sgid_index is an
// index of the port's GID table.
typedef struct {
	uint32_t state, path_mtu, rq_psn, sq_psn, dest_qpn, access, mask, flow_label;
	uint16_t pkey_index;
	uint8_t port, timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic;
	uint8_t dgid[16];
	uint8_t sgid_index, hop_limit, traffic_class, sl, ah_port, is_global;
} gc_qpattr;

// gc_init_qp_attr asks the kernel for the attributes of a QP moving to
// state for this id's connection. It returns 0 or errno.
int gc_init_qp_attr(struct rdma_cm_id *id, int state, gc_qpattr *out);

// gc_conn is rdma_conn_param without pointers: the private data is
// copied in by gc_connect, gc_accept and gc_reject.
typedef struct {
	uint32_t qp_num;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
} gc_conn;

// gc_connect, gc_accept, gc_reject, gc_disconnect and gc_establish are
// rdma_connect, rdma_accept, rdma_reject, rdma_disconnect and
// rdma_establish for an id without a QP of librdmacm's (the program's
// QP is named by its number); each returns 0 or errno.
int gc_connect(struct rdma_cm_id *id, const gc_conn *p, const void *pdata, uint8_t len);

int gc_accept(struct rdma_cm_id *id, const gc_conn *p, const void *pdata, uint8_t len);

int gc_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len);

int gc_disconnect(struct rdma_cm_id *id);

int gc_establish(struct rdma_cm_id *id);

// gc_migrate moves id to channel ch; gc_destroy_id destroys id. Each
// returns 0 or errno.
int gc_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch);

int gc_destroy_id(struct rdma_cm_id *id);

// gc_create_channel makes an event channel; NULL and errno on failure.
struct rdma_event_channel *gc_create_channel(void);

#endif
