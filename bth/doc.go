// Package bth holds the InfiniBand transport headers that RoCEv2 carries over
// UDP port 4791, as zero-copy byte-slice views, plus the pieces needed to put
// them on the wire: the opcode table, 24-bit PSN arithmetic, the invariant CRC
// (ICRC) of IBTA Annex A17, and a builder and parser for whole frames
// (Ethernet, IPv4 or IPv6, UDP, BTH, extension headers, payload, pad, ICRC).
// It also holds the wire's numbers that the other packages share: the
// RoCEv2 UDP port (UDPPort) and the path MTU enumeration (MTU).
//
// A RoCEv2 packet on the wire (IBTA Vol. 1 §9.2, Annex A17 §A17.4):
//
//	Ethernet | IPv4/IPv6 | UDP (dport 4791) | BTH | ext. headers | payload | pad | ICRC
//
// Header views (BTH, RETH, AETH, ...) are plain []byte with accessors. A view
// is valid once it has the header's size; Packet.Parse checks that once.
// A shorter view (the nil view of a header a packet does not carry) reads
// as zeros. Each view has a Fields struct and an Encode method that writes
// every field, reserved bits as zero; Encode and the setters refuse, with
// an error and writing nothing, a view too short or a value too wide for
// its field (24-bit QPNs and PSNs).
//
// Nothing in the package panics on its arguments: constructors and
// encoders return errors that wrap ErrNil, ErrRange, ErrShortBuffer or
// ErrFlow; Build, which returns a length, returns 0 (and CheckBuild
// says why).
//
// The package imports only the standard library and allocates nothing per
// packet.
package bth
