package mad

import (
	"fmt"
	"net/netip"
)

// CMAHeaderLen is the length of rdma_cm's header at the start of a REQ's
// (or SIDR_REQ's) private data.
const CMAHeaderLen = 36

// MaxREQUserData is the most private data an rdma_cm user can put in a
// REQ: what is left after the CMAHeader.
const MaxREQUserData = REQPrivateDataLen - CMAHeaderLen

// CMAHeader is the header rdma_cm puts in front of the user's private data
// in a REQ (IBTA Vol. 1 Annex A11, "IP addressing CM REQ message private
// data format"; struct cma_hdr in the kernel's drivers/infiniband/core/cma.c):
//
//	 0 version(8) = 0
//	 1 IP version(4) = 4 or 6, reserved(4)
//	 2 SrcPort(16), the active side's port
//	 4 Src(128), IPv4 in the last 4 bytes behind 12 zero bytes
//	20 Dst(128), likewise
//
// The destination port is not here: it is the low 16 bits of the service
// ID. The IP version is that of Src and Dst, which must both be IPv4 or
// both IPv6; an IPv4-mapped IPv6 address counts as IPv6 (Unmap it for an
// IPv4 header). Zones are not carried.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
type CMAHeader struct {
	SrcPort uint16
	Src     netip.Addr
	Dst     netip.Addr
}

// Marshal writes the header to b[:CMAHeaderLen]. It fails with ErrAddr if
// Src or Dst is invalid or they are of different families, and then leaves
// b untouched.
func (h *CMAHeader) Marshal(b []byte) error {
	switch {
	case h == nil:
		return nilError("Marshal of a nil *CMAHeader")
	case len(b) < CMAHeaderLen:
		return shortError("rdma_cm header", len(b), CMAHeaderLen)
	case !h.Src.IsValid() || !h.Dst.IsValid() || h.Src.Is4() != h.Dst.Is4():
		return fmt.Errorf("%w: from %v to %v: set Src and Dst, both IPv4 or both IPv6", ErrAddr, h.Src, h.Dst)
	}
	b = b[:CMAHeaderLen:CMAHeaderLen]
	clear(b)
	put16(b[2:], h.SrcPort)
	if h.Src.Is4() {
		b[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	return nil
}

// Unmarshal reads the header from b[:CMAHeaderLen]: the version must be 0
// and the IP version 4 or 6, as cma.c checks. The reserved nibble and the
// padding in front of IPv4 addresses are ignored.
func (h *CMAHeader) Unmarshal(b []byte) error {
	switch {
	case h == nil:
		return nilError("Unmarshal into a nil *CMAHeader")
	case len(b) < CMAHeaderLen:
		return shortError("rdma_cm header", len(b), CMAHeaderLen)
	case b[0] != 0:
		return fmt.Errorf("%w: %d", ErrCMAVersion, b[0])
	}
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return fmt.Errorf("%w: %d", ErrIPVersion, b[1]>>4)
	}
	h.SrcPort = get16(b[2:])
	return nil
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space in
// rdma-core's and the kernel's rdma_user_cm.h), which selects the service
// ID range of a listener.
type PortSpace uint16

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RDMA_PS_TCP: RC, the usual one
	PortSpaceUDP   PortSpace = 0x0111 // RDMA_PS_UDP: UD with SIDR
	PortSpaceIB    PortSpace = 0x013F // RDMA_PS_IB: any QP type
)

// String returns "TCP", "UDP", "IB", "IPoIB" or "PortSpace(0x....)".
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return "PortSpace(" + hex4(uint16(ps)) + ")"
}

// ServiceID returns the IB CM service ID rdma_cm uses for port in port
// space ps: ps << 16 | port. TCP port 7174 (rping's default) gives
// 0x0000000001061c06.
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// ParseServiceID splits a service ID made by ServiceID into its port space
// and port. ok is false if the top 32 bits are not zero or the port space
// is not one of the four rdma_cm defines.
func ParseServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	ps, port = PortSpace(id>>16), uint16(id)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, port, true
	}
	return 0, 0, false
}
