package rsocket

import (
	"encoding/binary"
	"net/netip"
)

// The datagram rsockets' two headers (librdmacm's rsocket.c, struct
// ds_header and struct ds_udp_header). All fields are big-endian.
//
// A datagram sent on the UD QP starts with a ds_header, which says whom
// it is from: the sender's IP address and the port of its UDP socket.
//
//	0       1       2               4
//	+-------+-------+---------------+
//	|version|length |     port      |  version 4: length 8
//	+-------+-------+---------------+
//	|         IPv4 address          |
//	+-------------------------------+
//
//	version 6: length 24, the 4 bytes after the port are the flow
//	information and the 16 bytes after them the IPv6 address.
//
// A datagram sent on the UDP socket (the first ones to a destination
// whose QP number the sender does not know yet, and the answer that
// tells it) starts with a ds_udp_header instead:
//
//	0               4       5       6       7       8
//	+---------------+-------+-------+-------+-------+
//	| tag 0x55555555|version|  op   |length |   0   |
//	+---------------+-------+-------+-------+-------+
//	| QPN (24 bits) |  IPv4 address (16: IPv6)      |
//	+---------------+-------------------------------+
//
// op is the stream protocol's opData (the payload follows the header) or
// opCtrl (no payload: the answer carrying the receiver's QPN). length is 16 for version 4 and 28
// for version 6.
const (
	dsHdrLen4    = 8
	dsHdrLen6    = 24
	dsUDPHdrLen4 = 16
	dsUDPHdrLen6 = 28
	// dsUDPTag starts every ds_udp_header (DS_UDP_TAG).
	dsUDPTag = 0x55555555
	// dsSlot is the size of a datagram's buffer, header included
	// (RS_SNDLOWAT): the largest datagram a receiver takes.
	dsSlot = 2048
	// grhLen is the global route header a UD receive starts with.
	grhLen = 40
)

// dsHdrLen returns the ds_header length for a's family.
func dsHdrLen(a netip.Addr) int {
	if a.Is4() {
		return dsHdrLen4
	}
	return dsHdrLen6
}

// dsUDPHdrLen returns the ds_udp_header length for a's family.
func dsUDPHdrLen(a netip.Addr) int {
	if a.Is4() {
		return dsUDPHdrLen4
	}
	return dsUDPHdrLen6
}

// putDSHeader writes the ds_header of from at the start of b, which must
// hold dsHdrLen(from.Addr()) bytes, and returns its length.
func putDSHeader(b []byte, from netip.AddrPort) int {
	a := from.Addr()
	binary.BigEndian.PutUint16(b[2:4], from.Port())
	if a.Is4() {
		b[0], b[1] = 4, dsHdrLen4
		ip := a.As4()
		copy(b[4:8], ip[:])
		return dsHdrLen4
	}
	b[0], b[1] = 6, dsHdrLen6
	clear(b[4:8]) // flow information
	ip := a.As16()
	copy(b[8:24], ip[:])
	return dsHdrLen6
}

// parseDSHeader returns the sender a ds_header at the start of b names
// and the header's length, or ok false if b does not start with a valid
// one (rsocket.c's ds_valid_recv).
func parseDSHeader(b []byte) (from netip.AddrPort, n int, ok bool) {
	if len(b) < dsHdrLen4 {
		return from, 0, false
	}
	port := binary.BigEndian.Uint16(b[2:4])
	switch {
	case b[0] == 4 && b[1] == dsHdrLen4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), dsHdrLen4, true
	case b[0] == 6 && b[1] == dsHdrLen6 && len(b) >= dsHdrLen6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), dsHdrLen6, true
	}
	return from, 0, false
}

// udpHeader is a ds_udp_header's fields.
type udpHeader struct {
	op   uint8
	qpn  uint32     // 24 bits
	addr netip.Addr // the sender's QP's address
}

// put writes h at the start of b, which must hold dsUDPHdrLen6 bytes,
// and returns its length.
func (h *udpHeader) put(b []byte) int {
	binary.BigEndian.PutUint32(b[0:4], dsUDPTag)
	b[5], b[7] = h.op, 0
	binary.BigEndian.PutUint32(b[8:12], h.qpn&0xFFFFFF)
	if h.addr.Is4() {
		b[4], b[6] = 4, dsUDPHdrLen4
		ip := h.addr.As4()
		copy(b[12:16], ip[:])
		return dsUDPHdrLen4
	}
	b[4], b[6] = 6, dsUDPHdrLen6
	ip := h.addr.As16()
	copy(b[12:28], ip[:])
	return dsUDPHdrLen6
}

// parseUDPHeader decodes the ds_udp_header at the start of a datagram
// that came from an address of family v4 (true) or v6, and returns its
// length; ok is false unless the tag, the version (the family's) and the
// length are right (rsocket.c's udp_svc_valid_udp_hdr).
func parseUDPHeader(b []byte, v4 bool) (h udpHeader, n int, ok bool) {
	if len(b) < dsUDPHdrLen4 || binary.BigEndian.Uint32(b[0:4]) != dsUDPTag {
		return h, 0, false
	}
	h.op, h.qpn = b[5], binary.BigEndian.Uint32(b[8:12])&0xFFFFFF
	switch {
	case v4 && b[4] == 4 && b[6] == dsUDPHdrLen4:
		h.addr = netip.AddrFrom4([4]byte(b[12:16]))
		return h, dsUDPHdrLen4, true
	case !v4 && b[4] == 6 && b[6] == dsUDPHdrLen6 && len(b) >= dsUDPHdrLen6:
		h.addr = netip.AddrFrom16([16]byte(b[12:28]))
		return h, dsUDPHdrLen6, true
	}
	return h, 0, false
}
