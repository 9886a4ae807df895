package abi

// rsockets (librdmacm's rsocket API) on the device. The library's rsocket
// is one end of a UNIX stream socket pair, a real descriptor the program
// reads, writes and polls as it would an rsocket; the other end goes to
// the device with OpRSConnect or OpRSAccept, and the device carries the
// bytes between it and an rsocket connection of its own (package
// rsocket), which speaks librdmacm's rsocket protocol on the wire. A
// listening rsocket's pair end goes with OpRSListen: the device writes a
// byte to it for each connection waiting to be accepted, so that poll
// sees the listener readable, and stops listening when the program closes
// its end.
//
// A datagram rsocket (SOCK_DGRAM) is one end of a UNIX sequenced-packet
// socket pair instead; the other end goes to the device with OpRSBind,
// and the device carries datagrams between it and a datagram rsocket of
// its own (package rsocket's PacketConn, librdmacm's UD protocol on the
// wire). Each message on the pair is one datagram after an
// RSDgramHeader: the program's say where they go, the device's where
// they came from.

// RSConnectReq connects to an rsocket listener at Dst (rconnect), from
// the device's address Src when it is not zero. It carries one
// descriptor, the connection's end; the device writes an RSHeader to it
// when the connection is made or has failed, and carries the
// connection's bytes on it from then on.
type RSConnectReq struct {
	Src [SockaddrSize]byte
	Dst [SockaddrSize]byte
	// IOMapSize is the entries of the iomap table the connection
	// offers its peer (rsetsockopt RDMA_IOMAPSIZE; 0: none).
	IOMapSize uint32 `c:"iomap_size"`
	_         uint32
}

// RSHeader is what the device writes first on a connecting rsocket's
// descriptor: Errno 0, the connection's handle (RSStatusReq) and its
// addresses, or why it failed.
type RSHeader struct {
	Errno  uint32 `c:"error"`
	Handle uint32
	Local  [SockaddrSize]byte
	Peer   [SockaddrSize]byte
}

// RSListenReq listens at Addr (rbind's address; port 0: one the device
// chooses) with a backlog (rlisten). It carries one descriptor, the
// listener's end.
type RSListenReq struct {
	Addr      [SockaddrSize]byte
	Backlog   uint32
	IOMapSize uint32 `c:"iomap_size"` // as RSConnectReq's, for each connection accepted
}

// RSListenReply names the listener and the address it listens on.
type RSListenReply struct {
	Handle uint32
	_      uint32
	Addr   [SockaddrSize]byte
}

// RSAcceptReq takes the first connection waiting at listener Handle
// (raccept); EAGAIN when none waits. It carries one descriptor, the
// connection's end.
type RSAcceptReq struct {
	Handle uint32
	_      uint32
}

// RSAcceptReply holds the accepted connection's handle (RSStatusReq)
// and addresses.
type RSAcceptReply struct {
	Handle uint32
	_      uint32
	Local  [SockaddrSize]byte
	Peer   [SockaddrSize]byte
}

// RSStatusReq asks how connection Handle's bytes from the peer ended,
// once the program has read their end: the reply's errno is ECONNRESET
// when the peer reset the connection or went (the program's read then
// fails so, as librdmacm's does), 0 when the peer shut its side down.
type RSStatusReq struct {
	Handle uint32
	_      uint32
}

// RSBindReq binds a datagram rsocket at Addr (rbind; any address of the
// family and port 0 for the first rsendto or rconnect of an unbound
// one). It carries one descriptor, the device's end of the rsocket's
// UNIX sequenced-packet socket pair.
type RSBindReq struct {
	Addr [SockaddrSize]byte
}

// RSBindReply names the datagram rsocket, the address it is bound to,
// and the largest datagram it sends (rsendto fails with EMSGSIZE above
// it).
type RSBindReply struct {
	Handle uint32
	Max    uint32
	Addr   [SockaddrSize]byte
}

// RSDgramHeader starts each message on a datagram rsocket's pair: the
// datagram's destination on the program's messages, its source on the
// device's. The datagram follows it.
type RSDgramHeader struct {
	Addr [SockaddrSize]byte
	_    uint32
}

// RSMapReq lets connection Handle's peer write into the program's
// Length bytes at Addr (riomap with PROT_WRITE), at offsets from Offset
// (-1: the address), once the first Sent bytes the program wrote on the
// connection have gone to the peer: the peer sees the mapping after
// them and before anything written after riomap returns. The library
// has shared the bytes' pages with the device, as for a memory region.
type RSMapReq struct {
	Handle uint32
	_      uint32
	Addr   uint64
	Length uint64
	Offset int64
	Sent   uint64
}

// RSMapReply is the offset the mapping has.
type RSMapReply struct {
	Offset int64
}

// RSUnmapReq ends the mapping of Length bytes at Addr of connection
// Handle (riounmap).
type RSUnmapReq struct {
	Handle uint32
	_      uint32
	Addr   uint64
	Length uint64
}

// RSWriteReq writes the program's Length bytes at Addr (a buffer of
// the library's, shared with the device) into the peer's mappings at
// Offset (riowrite), after the first Sent bytes the program wrote on
// connection Handle; Flags holds MSG_DONTWAIT when the call must not
// wait for room.
type RSWriteReq struct {
	Handle uint32
	Flags  uint32
	Addr   uint64
	Length uint64
	Offset int64
	Sent   uint64
}

// RSWriteReply is how many bytes went (fewer than asked when the
// write stopped early: the errno says why only when none went).
type RSWriteReply struct {
	N uint64
}

// RSOptionReq sets listener Handle's RDMA_IOMAPSIZE: the iomap table the
// connections it accepts from then on offer their peers.
type RSOptionReq struct {
	Handle    uint32
	IOMapSize uint32 `c:"iomap_size"`
}
