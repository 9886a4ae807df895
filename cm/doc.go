// Package cm is an rdma_cm-compatible connection manager for goroce's
// software RDMA device: it connects RC queue pairs with the InfiniBand
// Communication Manager's messages (IBTA Vol. 1 chapter 12), which it
// sends and receives as management datagrams on QP 1, so that a goroce
// program can connect to, and accept connections from, programs using
// librdmacm on Linux (rping, perftest -R, NVMe-oF, ...) on kernel rxe or
// an RNIC.
//
// One Agent per device owns the device's General Services QP (QP 1,
// Q_Key 0x80010000) and multiplexes every listener and connection on it,
// as the kernel's ib_cm does for a port. Its API has the shape of package
// net:
//
//	agent, err := cm.NewAgent(dev, nil)
//	// passive side: REQ in, REP out, RTU in
//	ln, err := agent.Listen(ctx, netip.MustParseAddrPort("198.18.0.1:7174"), nil)
//	conn, err := ln.Accept(ctx)
//	// active side: REQ out, REP in, RTU out
//	conn, err := agent.Dial(ctx, netip.MustParseAddrPort("198.18.0.11:7174"), &cm.Params{QP: qp})
//	// either side: DREQ out, DREP in
//	err = conn.Close()
//
// The package-level Listen and Dial do the same through the device's
// agent: the one the program made with NewAgent, or else one the first of
// them starts and the last close stops:
//
//	ln, err := cm.Listen(ctx, dev, netip.MustParseAddrPort("198.18.0.1:7174"), nil)
//	conn, err := cm.Dial(ctx, dev, netip.MustParseAddrPort("198.18.0.11:7174"), &cm.Params{QP: qp})
//
// A device has one agent however it is reached: the device and its
// traced views (roce.Trace) share it. The agent stops when its device
// closes: listeners stop, connections end (the peers get a DREQ), and its
// goroutine returns.
//
// The exchange, as rdma_cm does it over RoCE (and as the captures of
// kernel rxe in testdata/captures show it):
//
//   - The active side moves its QP to INIT and sends a REQ: a fresh local
//     communication ID, service ID 0x0000000001060000 | port (rdma_cm's
//     TCP port space), its QPN and starting PSN (the PSN it expects to
//     receive first), responder resources and initiator depth, retry
//     and RNR retry counts (at most 7), CM response timeouts of 20 and
//     15 max CM retries, P_Key 0xFFFF, the path MTU of the device, LIDs
//     0xFFFF, IPv4-mapped (or IPv6) GIDs, hop limit 64 and the flow
//     label rdma_cm derives from the ports, and in the private data
//     rdma_cm's 36-byte header (IP version, source port, addresses)
//     followed by up to 56 bytes of the user's.
//   - The passive side finds the listener of the service ID and
//     destination address, asks the application (ListenConfig.OnRequest),
//     moves the QP through INIT and RTR to RTS and answers with a REP
//     (its own QPN and starting PSN, responder resources and initiator
//     depth of min(local, peer), up to 196 bytes of private data), or
//     with a REJ: reason 8 (invalid service ID) when nobody listens,
//     28 (consumer defined, with private data) when the application
//     refuses.
//   - The active side moves its QP to RTR and RTS (sending from the REP's
//     starting PSN; the passive side sends from the REQ's) and sends
//     an RTU; the passive side is connected when the RTU arrives.
//   - Either side closes with a DREQ, answered by a DREP; both move the
//     QP to ERR and keep the connection's IDs for a time-wait period to
//     answer late duplicates.
//
// Lost messages are recovered as the IB CM does: a REQ, REP or DREQ is
// sent again after its CM response timeout, up to the max CM retries,
// after which the exchange fails with ErrTimeout (a REQ within
// Config.ConnectTimeout at most). A duplicate REQ is
// answered with the REP already sent (or an MRA while the application is
// still deciding), a duplicate REP with the RTU, a duplicate DREQ with
// the DREP, a DREQ for an unknown connection with a DREP; a REQ from a
// QP that already has a connection gets a REJ "stale connection" and
// tears the old connection down. SIDR_REQ and SIDR_REP resolve the QPN
// and Q_Key of UD services in rdma_cm's UDP port space (ListenDatagram,
// ResolveDatagram). JoinMulticast and Multicast.Leave are
// rdma_join_multicast and rdma_leave_multicast: over RoCE there is no
// subnet administrator to ask, so a join attaches the UD QP to the group
// (the device joins the group's IP address on its link) and gives the
// group's address vector, QPN 0xFFFFFF and rdma_cm's Q_Key.
//
// Failures surface fast, each as its own error:
//
//   - A peer that is up but has nobody listening on the port (or whose
//     device has no CM agent at all: roce.Open's device answers for QP 1
//     until an agent takes it) rejects the REQ at once: a *RejectError
//     matching ErrConnRefused.
//   - A peer the network reports unreachable (an ICMP destination
//     unreachable on the udp transport, such as port unreachable from a
//     host where nothing receives RoCEv2; an address without an endpoint
//     on the in-memory network) fails Dial within milliseconds with
//     ErrUnreachable; the afpacket transport does not see ICMP errors.
//   - A peer that answers nothing fails Dial with ErrTimeout after
//     Config.ConnectTimeout (25 s), the REQ having been sent every
//     6.4 s meanwhile.
//   - An established connection whose QP enters the error state ends:
//     Done fires and Err wraps ErrQPError and names the status. A peer
//     that dies shows so: with the defaults (ACK timeout 19, 2.1 s, and
//     7 retries) the first work request after it completes
//     RETRY_EXC_ERR within 17.2 s, sooner with a shorter
//     Params.ACKTimeout. A peer that posts no receive holds a SEND for
//     ever under RNR retry 7, as on any RNIC; Close ends it.
//   - Close waits at most Config.CloseWait (1 s) for the DREP; the agent
//     sends the DREQ again in the background, up to its retries or until
//     it closes.
//   - Every blocking call returns as soon as its context ends, leaving
//     its QP in ERR with its work requests flushed.
//
// Timers run on the device's clock (or Config.Clock).
package cm
