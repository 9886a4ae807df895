// Package rsocket is a net.Conn over RDMA: librdmacm's rsocket stream
// protocol on goroce's software device, so that Go programs speak
// net.Conn over RoCEv2 and talk to programs using rsockets (rstream,
// riostream, rcopy, and socket programs run under librspreload.so); and
// its datagram rsockets, a net.PacketConn (udpong's).
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
// the inline threshold, keepalives, the iomap table. A Conn serves one Read and one Write
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
// sequence limit, with a new SGL entry, its 16 bytes written into the
// target SGL by the same message, or with no bytes), or a control message:
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
// # Direct placement: Map and IOWrite
//
// rsockets' iomap extension (riomap, riounmap, riowrite) lets one side
// write straight into a buffer of the peer's, by offset, with no copy out
// of a receive buffer and no message the peer's program must read:
//
//	buf := make([]byte, 1<<20)
//	off, err := server.Map(buf, 0)           // riomap(PROT_WRITE): buf is at offsets 0 to 1<<20-1
//	n, err := client.IOWrite(data, off+4096) // riowrite: data lands in buf[4096:]
//	err = server.Unmap(off)                  // riounmap: buf is the program's again
//
// A side offers the peer a table of iomap entries (Options.IOMapSize,
// librdmacm's RDMA_IOMAPSIZE; 0, the default as in librdmacm, offers
// none); Map registers a buffer and publishes it in a free entry of the
// peer's table, at the offset given or (-1) one it chooses; IOWrite, on
// the peer, finds the buffer by its offset in its own table and writes
// with plain RDMA WRITEs. The names follow Go's io.WriterAt (IOWrite(p,
// off) is riowrite), and Map returns the offset as riomap does. IOWrite's
// bytes come before anything written after them on the connection, so
// the usual way to tell the peer they have come is a message (Write)
// after them; a program that watches its mapped buffer itself (as
// riostream polls its last byte) calls SyncMapped once it sees the
// change. Bytes outside the peer's mappings are refused (ErrNotMapped)
// before anything is sent; a table that is full or absent refuses Map
// (ErrIOMapFull); an entry the peer publishes outside its table, of no
// bytes, or past the largest offset or address is a protocol error that
// ends the connection. As with riounmap, Unmap does not tell the peer:
// it must have stopped writing there. On the wire: the table follows the
// target SGL in its region and its size travels scaled in rs_conn_data;
// an entry is 24 bytes (offset, address, rkey, length) written with an
// iomap SGL message, which takes a credit; IOWrite's writes take none.
//
// # Datagram rsockets: ListenPacket
//
// librdmacm's SOCK_DGRAM rsockets (rsendto, rrecvfrom, and udpong) are a
// net.PacketConn:
//
//	c, err := rsocket.ListenPacket(ctx, dev, netip.MustParseAddrPort("198.18.0.1:7174")) // an *rsocket.PacketConn
//	n, err := c.WriteTo(msg, &net.UDPAddr{IP: net.ParseIP("198.18.0.2"), Port: 7174})
//	n, from, err := c.ReadFrom(buf)
//
// A datagram rsocket is a UDP socket at its address (an IP address and
// a UDP port) and a UD QP on the device, with rdma_cm's Q_Key
// (RDMA_UDP_QKEY). A datagram to a destination whose QP this side does
// not know travels on the UDP socket, after a ds_udp_header (a tag, the
// version, the sender's QPN and address); the receiver learns the
// sender's QPN from it, answers with a control message carrying its own,
// and takes the datagram. Later datagrams between the two are UD SENDs
// after a ds_header (version, the sender's address and port), which is
// how the receiver tells whom a datagram is from and where ReadFrom's
// address comes from; an answer to that address goes straight on the UD
// QP. A datagram is at most 2048 bytes with its header (a receive
// buffer of librdmacm's), and no larger than the path MTU:
// PacketConn.MaxDatagram says, and a larger write fails with
// ErrMessageSize. IPv4 and IPv6 both work. The queues are at most the
// buffer sizes over 2048 (64 datagrams each way by default, as in
// librdmacm).
//
// Delivery is UDP's: a datagram arrives whole or not at all, may be lost
// (by the link, or by a receiver whose queue is full), and is not
// acknowledged; ordering is not promised. A datagram with a malformed
// header, on either path, is dropped and counted (PacketConn.Stats), as
// is one on the UD QP whose header names another address than its
// packet's source, or another QP than the one learned for that address.
// The rsocket's address is the device's: it sends with the device's
// address and listens on the UDP socket there.
//
// # Not supported (yet)
//
// riomap's local-only mappings (PROT_NONE: Map always maps for the
// peer's writes), iWARP's SEND-based messages, and datagram rsockets over
// the in-memory link (their UDP socket is the kernel's). The QPs run on
// goroce's software device only: a hardware device's connections belong
// to its kernel's rdma_cm (use librdmacm's rsockets there).
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
// while a Read waits) is woken by it. Conn.Stats counts the waits. On
// goroce's device a data message that would end within 4 bytes of a
// packet boundary (a 64 KiB Write's does) goes as two, its last 1 to 4
// bytes apart, so that the first's packets leave in equal-sized GSO
// runs: the immediate would make its last packet the one longer than
// the others, a datagram of its own.
// BenchmarkStream and BenchmarkRequestResponse measure it against TCP
// over loopback.
package rsocket
