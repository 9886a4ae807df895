// Package roce opens goroce's RDMA device and connects its queue pairs:
// RDMA verbs over RoCEv2, in pure Go.
//
// Open returns a *Device that speaks RoCEv2 over the link Config names:
// UDP sockets (the default; no privileges needed), raw Ethernet frames
// (AFPacket) or an in-memory network (Mem, for tests). The device is a
// verbs.Device, with the shape of libibverbs: protection domains, memory
// regions, completion queues, queue pairs (RC, UC, UD), shared receive
// queues and address handles, with the same work requests, completions
// and attribute rules, so code written against ibverbs reads the same
// here. Those types, their constants and errors are package verbs'.
// Package hwverbs gives the same interfaces over libibverbs, for real
// RNICs and kernel rxe, so a program switches backend in one line.
//
//	dev, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("198.18.0.1")}})
//	...
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(64)
//	qp, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: ...})
//	// exchange QPN, PSN and GID with the peer, then:
//	err = roce.Connect(qp, &roce.Remote{QPN: peerQPN, PSN: peerPSN, GID: peerGID}, &roce.ConnParams{PSN: myPSN})
//
// Connect (or ModifyToInit, ModifyToRTR and ModifyToRTS) moves a QP to RTS
// towards a peer once the two sides have exchanged their QP numbers, PSNs
// and GIDs, out of band or through package cm's rdma_cm-compatible
// connection manager. Poll, PollSpin and PollOne wait for completions.
// Trace (or Config.Trace) logs each step a program takes through
// log/slog, the way the tutorials narrate an RDMA program.
package roce
