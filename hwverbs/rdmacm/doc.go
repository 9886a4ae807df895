// Package rdmacm connects RC queue pairs of a libibverbs device (package
// hwverbs: a real RNIC or the kernel's soft-RoCE) through librdmacm, the
// kernel's rdma_cm, with the API of package cm, goroce's own rdma_cm for
// its software device:
//
//	dev, err := hwverbs.Open("rxe0", nil)
//	// passive side: rdma_bind_addr, rdma_listen; per request
//	// rdma_accept, then ESTABLISHED
//	ln, err := rdmacm.Listen(ctx, dev, netip.MustParseAddrPort("198.18.0.11:7174"), nil)
//	conn, err := ln.Accept(ctx)
//	// active side: rdma_resolve_addr, rdma_resolve_route, rdma_connect,
//	// then on the REP rdma_establish
//	conn, err := rdmacm.Dial(ctx, dev, netip.MustParseAddrPort("198.18.0.12:7174"), &rdmacm.Params{QP: qp})
//	// either side: rdma_disconnect
//	err = conn.Close()
//
// The peer may be any rdma_cm program (rping, perftest -R, NVMe-oF),
// goroce's cm on its software device, or this package: the kernel speaks
// the IB CM on the wire. ListenConfig.OnRequest decides each request and
// sees its private data; Params brings a QP, the depths, the retry
// counts and private data, as cm.Params do; cm.Reject refuses with a REJ
// that carries private data.
//
// This package builds with the hwverbs build tag (cgo, Linux) and links
// librdmacm (apt-get install librdmacm-dev to build; librdmacm1 where it
// runs). Otherwise Listen and Dial return hwverbs.ErrNotBuilt.
//
// # Queue pairs
//
// The QP is always a hwverbs QP of the device given to Listen or Dial:
// the caller's (Params.QP, in RESET or INIT, receives posted or not), or
// one the connection creates in the caller's PD with the caller's CQs
// (Params.PD, SendCQ, RecvCQ) or in ones it creates too, which Conn.PD
// and Conn.CQs return and Close destroys. The connection does what
// rdma_create_qp's QP gets from librdmacm, through the verbs.QP
// interface: it moves the QP to INIT before the REQ or REP, and to RTR
// and RTS with the attributes the kernel gives (rdma_init_qp_attr: the
// peer's QPN and PSN, the path, the negotiated depths), and to ERR when
// the connection ends; rdma_connect and rdma_accept name it by its
// number, and the dialling side sends the RTU with rdma_establish. (A QP
// made by rdma_create_qp itself would have to be in a PD of librdmacm's
// own ibv_context, which no hwverbs device shares: librdmacm refuses
// another context's PD.) The route to the peer must leave through the
// device; Dial and Listen say so otherwise.
//
// # Events and errors
//
// Each Listener and each Conn has its own rdma_cm event channel, read by
// one goroutine that waits in Go's poller on the channel's descriptor
// and acknowledges each event at once; a request's new id moves to a
// channel of its own (rdma_migrate_id) before Accept sees it, so that a
// connection outlives its listener. Close stops the goroutine and
// destroys the id and the channel; no goroutine outlives it. Every wait
// of Dial, Accept and CloseContext is bounded by its context.
//
// The rdma_cm events become these errors, checkable with errors.Is and
// errors.As (cm's sentinels where the meaning is cm's):
//
//   - RDMA_CM_EVENT_REJECTED: a *cm.RejectError with the REJ's reason
//     and private data; it matches cm.ErrRejected, and cm.ErrConnRefused
//     for reason 8 (invalid service ID: nobody listens on that port).
//     librdmacm rejects with reason 28 (consumer defined) only.
//   - RDMA_CM_EVENT_UNREACHABLE: status -ETIMEDOUT (the peer answered
//     neither the REQ nor the REP through the CM's retries) is
//     cm.ErrTimeout; another status is cm.ErrUnreachable.
//   - RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR: no route to
//     the peer, or its address answered no ARP: cm.ErrUnreachable, within
//     2 s.
//   - RDMA_CM_EVENT_CONNECT_ERROR: ErrConnect (also when the QP refuses
//     the attributes rdma_cm gives).
//   - RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_TIMEWAIT_EXIT (and a REJ
//     once connected): the connection ends with cm.ErrDisconnected, which
//     matches io.EOF; this side answers the DREQ with the DREP.
//   - RDMA_CM_EVENT_DEVICE_REMOVAL: ErrDeviceRemoved, for connections and
//     listeners.
//
// Failed librdmacm calls are *hwverbs.Error values holding the errno
// (and cm.ErrAddr for addresses that cannot be bound or resolved).
// Arguments out of range wrap cm.ErrInvalid, private data too long
// cm.ErrPrivateData, a caller's QP not in RESET or INIT cm.ErrQPState.
//
// # Import graph
//
// This package sits above both hwverbs and cm and imports them; neither
// imports it. hwverbs stays a verbs backend that needs only bth and verbs
// (so that the engine's packages could one day import it), and this
// package reuses cm's errors and its RejectError and Reject rather than
// define look-alikes: a program checks the errors of both connection
// managers alike.
package rdmacm
