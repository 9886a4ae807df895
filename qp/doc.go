// Package qp is goroce's software RNIC: it runs the InfiniBand transport
// of RC, UC and UD queue pairs (PSNs, ACKs and NAKs, go-back-N
// retransmission, RNR waits, READ and atomic responder resources) over a
// transport.Transport, behind the verbs API of package verbs.
//
// The engine is cut as Linux's soft-RoCE driver (rxe) cuts it, one job
// to a file:
//
//   - recv.go (rxe_recv.c): Device.receive, the transport's handler,
//     takes each packet as its transport parsed it when checking its
//     ICRC (transport.Packet.Parsed: a packet is parsed once), checks
//     its headers (transport version, destination QP, the QP's type and
//     state, addresses, P_Key, Q_Key) and hands requests to the QP's
//     responder, responses to its completer (a batch's responses
//     first); it holds the locks of the QPs a batch reaches and sends
//     what they answered in one go;
//   - requester.go (rxe_req.c): PostSend, and the requester, which turns
//     send work requests into request packets, within the window,
//     fences and the READ/atomic limit, and goes back to an earlier PSN
//     when told to; admit.go: the turns many sending QPs take at the
//     device's shared window;
//   - completer.go (rxe_comp.c): the completer matches ACKs, NAKs, READ
//     responses and atomic ACKs with the requests they answer, completes
//     work requests in order, and decides retries and RNR waits;
//   - responder.go (rxe_resp.c): PostRecv, and the responder, which
//     checks PSNs, carries out inbound requests, fills receives, answers
//     duplicates and READs, and sends ACKs and NAKs;
//   - mw.go (rxe_mw.c): memory windows: PD.AllocMW, QP.BindMW (a type 1
//     window's bind), the checks of a BIND_MW request as it is posted,
//     and the local operations (LOCAL_INV and BIND_MW), which the
//     requester carries out in order with no packet;
//   - mcast.go (rxe_mcast.c, rxe_recv.c's rxe_rcv_mcast_pkt): UD
//     multicast: QP.AttachMcast and DetachMcast, the groups the link
//     joins and leaves for them, and the delivery of a datagram to the
//     multicast QPN to each QP attached to its group;
//   - flush.go: IBTA 1.5's FLUSH and ATOMIC_WRITE, which rxe has from
//     kernel 6.2 (rxe_req.c's packets, rxe_resp.c's process_flush and
//     atomic_write_reply, rxe_comp.c's answers), and Device.Caps;
//   - timers.go: the retransmission timer and the RNR wait; probe.go:
//     the RTT samples, and the loss probes that resend the oldest
//     unacknowledged packet, alone, when nothing answers for the RTT
//     estimate, long before the local ACK timeout;
//   - cc.go: each QP's congestion control (package congestion's
//     machines, Config.Congestion); cnp.go: ECN's notification point,
//     the CNPs it sends for CE marks and takes from the peer; pace.go:
//     pacing at DCQCN's rate with one lazily moved timer per QP, and the
//     bounded turns of a requester the receive path moves on; respq.go:
//     READ responses sent a turn at a time, paced, with what the
//     responder owes after them queued behind them in PSN order;
//   - deferack.go: in busy-poll mode, the ACKs that wait for the polling
//     thread's next post;
//   - device.go: the Device (New, Close, busy-poll Progress, Linger), the
//     QP table and number allocation, and the send batches the engine
//     fills and the transport sends;
//   - qp.go: the QP's lifecycle: CreateQP, Modify (the ibv_modify_qp
//     rules), Destroy, and the move to ERR with its flushes; notify.go:
//     OnExit, for watchers of a QP leaving service;
//   - queue.go: the rings of send and receive work requests;
//   - cq.go, srq.go, ah.go: completion queues, shared receive queues,
//     address handles; pd.go: protection domains, and the copies between
//     SGEs and registered memory (package mr holds the regions and keys);
//   - stats.go: per-QP counters named after rxe's, and the device's
//     drops; limits.go: the device's limits.
//
// One mutex per QP covers its requester, completer and responder, so a
// QP's packets are handled, and sent, in order.
//
// # Memory windows
//
// A request's R_Key may name a region or a memory window (package mr
// holds both, and checks a window's key against the window: its
// binding, protection domain, the QP a type 2 window is bound to, its
// rights and range). Through a window, as through a region, the key is
// looked up for every packet of a message and every READ response: a
// window invalidated or deallocated between two packets stops the rest
// with a remote access error NAK, and what came before stays. LOCAL_INV
// waits for the requests before it on its QP, as rxe's does; a BIND_MW
// does not, and binds when the requester reaches it. A bind the device
// refuses completes MW_BIND_ERR, a LOCAL_INV LOC_QP_OP_ERR, a SEND with
// invalidate of a key it may not invalidate is NAKed as an invalid
// request (REM_INV_REQ_ERR at the sender); each then moves its QP to
// ERR. Where goroce differs from rxe: an access through a window is
// checked against the window's range (rxe checks the region's only, so
// a window's key reaches the whole region there), and a SEND with
// invalidate of a type 2 window is refused unless it comes on the QP the
// window is bound to (rxe checks neither the QP nor the PD).
//
// # Asynchronous events
//
// Device.Events delivers what ibv_get_async_event would:
//
//   - EventQPReqErr: the responder NAKed an invalid request (opcode out
//     of sequence, an operation the QP does not allow, a bad length or
//     pad, a READ, atomic, FLUSH or ATOMIC_WRITE without responder
//     resources, a misaligned atomic or ATOMIC_WRITE, an unknown key to
//     invalidate) and the QP went to ERR;
//   - EventQPAccessErr: the responder NAKed a remote access error (R_Key,
//     protection domain, rights or range of the memory a request names)
//     and the QP went to ERR;
//   - EventQPFatal: the responder could not use a receive (its SGEs name
//     memory it may not write), or a completion of the QP found its CQ
//     full and was lost; the QP went to ERR;
//   - EventCQErr: a completion found its CQ full and was lost (once until
//     the CQ has had room again; see CQ);
//   - EventCommEstablished: the first request reached a QP in RTR;
//   - EventSQDrained: a QP moved to SQD with SQDrainNotify has nothing
//     in flight any more;
//   - EventLastWQEReached: a QP on an SRQ went to ERR and takes no more
//     receives from it;
//   - EventSRQLimitReached: an SRQ armed with a limit fell below it.
//
// Errors of the requester's own work requests (NAKs received, retries
// exhausted, bad responses) are reported by the failed work request's
// completion status, as on hardware, and need no event.
package qp
