// Package rsocket is a net.Conn over RDMA: librdmacm's rsocket stream
// protocol on goroce's software device, so that Go programs speak
// net.Conn over RoCEv2 and talk to programs using rsockets (rstream,
// riostream, rcopy, and socket programs run under librspreload.so).
//
//	ln, err := rsocket.Listen(ctx, dev, netip.MustParseAddrPort("198.18.0.1:7471")) // a net.Listener
//	c, err := ln.Accept()                                                            // an *rsocket.Conn
//	c, err := rsocket.Dial(ctx, dev, netip.MustParseAddrPort("198.18.0.1:7471"))
//
// dev is a device package cm connects through (roce.Open's). Listener
// and Conn behave as package net's TCP ones do, so net/http, gRPC,
// io.Copy and the rest run over them unchanged. HTTP over RDMA (the
// Example runs it):
//
//	ln, err := rsocket.Listen(ctx, serverDev, netip.MustParseAddrPort("198.18.0.1:80"))
//	go http.Serve(ln, handler)
//
//	tr := &http.Transport{DialContext: (&rsocket.Dialer{Device: clientDev}).DialContext}
//	resp, err := (&http.Client{Transport: tr}).Get("http://198.18.0.1/")
//
// Dialer and ListenConfig carry the Options: buffer sizes, queue depths,
// the inline threshold, keepalives. A Conn serves one Read and one Write
// at a time, concurrently (more callers queue), and Close, deadlines and
// addresses from any goroutine.
//
// # The protocol
//
// Connections are made with rdma_cm (package cm): the request and the
// reply carry struct rs_conn_data (version 1): the receive credits, the
// address, rkey and size of the side's target SGL, and its first receive
// buffer. Data then moves by RDMA WRITE with immediate only, straight
// into the peer's receive buffer: each side registers a receive buffer,
// publishes it to the peer half at a time by writing an SGL entry
// (address, rkey, length) into the peer's target SGL, and the sender
// fills those halves in order. The 32-bit immediate says what a message
// is: data (and its length), a credit update (the receiver's new
// sequence limit, with or without a new SGL entry), or a control message:
// SHUTDOWN (CloseWrite), DISCONNECT (Close), KEEPALIVE. Credits (the
// receive queue's depth, renewed as the reader consumes messages) keep
// the sender from overrunning the receiver's queue, so the peer never
// meets an RNR NAK for data; target SGL entries are written in the byte
// order their owner announced (the RS_CONN_FLAG_NET flag). Close sends
// DISCONNECT after the data, waits for it all to be acknowledged, then
// disconnects through rdma_cm (DREQ/DREP). A peer that sends DREQ without
// DISCONNECT (its process ended) is a reset; a peer that stops answering
// fails the QP's retries (keepalives find it on an idle connection).
//
// Defaults are librdmacm's: 128 KiB send and receive buffers, 384-deep
// queues, 64-byte inline writes, 64 KiB per message at most; but
// keepalives are on (every 15 s, as net.Dialer has them; librdmacm's are
// off unless SO_KEEPALIVE) and waiting calls sleep at once (librdmacm
// polls 10 µs first: Options.Spin).
//
// # Not supported (yet)
//
// iomap and riowrite (direct placement into a peer's mapped buffer: this
// side announces an iomap of 0 entries, as librdmacm does by default),
// the datagram (UD) protocol, and iWARP's SEND-based messages. The
// connection's QP runs on goroce's software device only: a hardware
// device's connections belong to its kernel's rdma_cm (use librdmacm's
// rsockets there).
//
// # Performance
//
// Write copies once, into the registered send buffer (or inline into the
// send queue, up to the inline threshold), and the device sends from
// there; Read copies once, out of the registered receive buffer the peer
// wrote into. Nothing is allocated per message. A Read or Write that
// must wait waits for the connection's CQ (one, for sends and receives,
// as in rsocket.c) itself, with no goroutine of the connection's own in
// between; on goroce's device over UDP it receives from the socket
// itself while it waits (qp.CQ.WaitUntil), so the message it waits for
// costs no hand-off between goroutines, and the other call (a Write
// while a Read waits) is woken by it. Conn.Stats counts the waits.
// BenchmarkStream and BenchmarkRequestResponse measure it against TCP
// over loopback.
package rsocket
