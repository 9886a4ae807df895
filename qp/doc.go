// Package qp is goroce's software RNIC: it runs the InfiniBand transport
// of RC, UC and UD queue pairs (PSNs, ACKs and NAKs, go-back-N
// retransmission, RNR waits, READ and atomic responder resources) over a
// transport.Transport, behind the verbs API of package verbs.
//
// The engine is cut as Linux's soft-RoCE driver (rxe) cuts it:
//
//   - Device.receive (rxe_recv.c) checks each packet's headers (transport
//     version, destination QP, the QP's type and state, addresses, P_Key,
//     Q_Key) and hands requests to the QP's responder, responses to its
//     completer;
//   - the requester (requester.go, rxe_req.c) turns send work requests
//     into request packets, within the window, fences and the READ/atomic
//     limit, and goes back to an earlier PSN when told to;
//   - the completer (completer.go, rxe_comp.c) matches ACKs, NAKs, READ
//     responses and atomic ACKs with the requests they answer, completes
//     work requests, and decides retries;
//   - the responder (responder.go, rxe_resp.c) checks and carries out
//     inbound requests, fills receives and answers.
//
// One mutex per QP covers all three, so a QP's packets are handled, and
// sent, in order.
//
// # Asynchronous events
//
// Device.Events delivers what ibv_get_async_event would:
//
//   - EventQPReqErr: the responder NAKed an invalid request (opcode out
//     of sequence, an operation the QP does not allow, a bad length or
//     pad, a READ or atomic without responder resources, a misaligned
//     atomic, an unknown key to invalidate) and the QP went to ERR;
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
