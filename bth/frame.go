package bth

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Sizes and numbers of the headers that carry RoCEv2.
const (
	EthernetLen   = 14
	VLANTagLen    = 4
	IPv4MinLen    = 20
	IPv6Len       = 40
	UDPLen        = 8
	ProtocolUDP   = 17
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100
	// UDPPort is the IANA port of RoCEv2.
	UDPPort = 4791
	// MaxFrameHeaderLen is the longest Ethernet, IP and UDP prefix the
	// builder writes (Ethernet, IPv6, UDP); keep this much headroom in
	// front of a RoCE packet to add the headers without a copy.
	MaxFrameHeaderLen = EthernetLen + IPv6Len + UDPLen
)

// Errors from the parsers. Each names what was wrong; wrapped errors add
// where.
var (
	ErrTruncated     = errors.New("bth: packet too short")
	ErrNotIP         = errors.New("bth: not an IPv4 or IPv6 packet")
	ErrNotUDP        = errors.New("bth: not a UDP packet")
	ErrIPHeader      = errors.New("bth: bad IP header")
	ErrFragment      = errors.New("bth: IP fragment")
	ErrUDPLength     = errors.New("bth: bad UDP length")
	ErrUnknownOpcode = errors.New("bth: unknown opcode")
	ErrPadCount      = errors.New("bth: pad count longer than the payload")
)

// LinkType says what comes before the IP header of a frame.
type LinkType uint8

// Link types for ParseFrame.
const (
	LinkEthernet LinkType = iota // Ethernet II, with or without 802.1Q tags
	LinkIP                       // the frame starts with the IP header
)

// FrameFields describes the Ethernet, IP and UDP headers in front of a RoCE
// packet, for EncodeFrame.
type FrameFields struct {
	// Ethernet adds an Ethernet II header with these addresses.
	Ethernet       bool
	SrcMAC, DstMAC [6]byte
	// Flow holds the addresses, ports and IPv4 ID and DF bit.
	Flow Flow
	// TOS is the IPv4 TOS byte or the IPv6 traffic class: DSCP << 2 | ECN.
	TOS uint8
	// TTL is the IPv4 time to live or the IPv6 hop limit; 0 means 64.
	TTL uint8
	// FlowLabel is the IPv6 flow label (20 bits).
	FlowLabel uint32
	// UDPChecksum computes the UDP checksum over IPv4 too. rxe sends 0
	// there; IPv6 always has one.
	UDPChecksum bool
}

// HeaderLen returns the length of the headers EncodeFrame writes.
func (f *FrameFields) HeaderLen() int {
	n := IPv6Len + UDPLen
	if f.Flow.IsIPv4() {
		n = IPv4MinLen + UDPLen
	}
	if f.Ethernet {
		n += EthernetLen
	}
	return n
}

// EncodeFrame writes the Ethernet, IP and UDP headers described by f into
// the front of frame, whose remaining bytes, from f.HeaderLen() on, are a
// RoCE packet with its ICRC. It returns the length of the headers.
func EncodeFrame(frame []byte, f *FrameFields) int {
	b := frame
	if f.Ethernet {
		copy(b[0:], f.DstMAC[:])
		copy(b[6:], f.SrcMAC[:])
		et := uint16(EtherTypeIPv6)
		if f.Flow.IsIPv4() {
			et = EtherTypeIPv4
		}
		binary.BigEndian.PutUint16(b[12:], et)
		b = b[EthernetLen:]
	}
	ttl := f.TTL
	if ttl == 0 {
		ttl = 64
	}
	var ipLen int
	if f.Flow.IsIPv4() {
		ipLen = IPv4MinLen
		h := IPv4(b[:IPv4MinLen])
		h[0] = 0x45
		h[1] = f.TOS
		binary.BigEndian.PutUint16(h[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(h[4:], f.Flow.ID)
		h[6], h[7] = boolBit(f.Flow.DF, 0x40), 0
		h[8] = ttl
		h[9] = ProtocolUDP
		h[10], h[11] = 0, 0
		s, d := f.Flow.Src.Unmap().As4(), f.Flow.Dst.Unmap().As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[10:], ^fold(checksum(0, h)))
	} else {
		ipLen = IPv6Len
		h := b[:IPv6Len]
		binary.BigEndian.PutUint32(h, 6<<28|uint32(f.TOS)<<20|f.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(h[4:], uint16(len(b)-IPv6Len))
		h[6] = ProtocolUDP
		h[7] = ttl
		s, d := f.Flow.Src.As16(), f.Flow.Dst.As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
	}
	u := UDP(b[ipLen:])
	binary.BigEndian.PutUint16(u[0:], f.Flow.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.Flow.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	u[6], u[7] = 0, 0
	if f.UDPChecksum || !f.Flow.IsIPv4() {
		binary.BigEndian.PutUint16(u[6:], udpChecksum(b[:ipLen], u))
	}
	return len(frame) - len(u) + UDPLen
}

// checksum adds b to the ones' complement sum s (RFC 1071).
func checksum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// udpChecksum returns the UDP checksum of u carried in IP header ip.
func udpChecksum(ip []byte, u []byte) uint16 {
	var s uint32
	if ip[0]>>4 == 4 {
		s = checksum(s, ip[12:20])
	} else {
		s = checksum(s, ip[8:40])
	}
	s += ProtocolUDP + uint32(len(u))
	c := ^fold(checksum(s, u))
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// IPv4 is a view of an IPv4 header (RFC 791).
type IPv4 []byte

// HeaderLen returns the header length in bytes.
func (h IPv4) HeaderLen() int { return int(h[0]&0x0F) * 4 }

// TotalLen returns the total length of the packet.
func (h IPv4) TotalLen() int { return int(binary.BigEndian.Uint16(h[2:])) }

// TOS returns the TOS byte (DSCP << 2 | ECN).
func (h IPv4) TOS() uint8 { return h[1] }

// ID returns the identification.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// DF reports the don't-fragment bit.
func (h IPv4) DF() bool { return h[6]&0x40 != 0 }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[8] }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[12:16])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[16:20])) }

// ChecksumValid reports whether the header checksum is right.
func (h IPv4) ChecksumValid() bool { return fold(checksum(0, h[:h.HeaderLen()])) == 0xFFFF }

// IPv6 is a view of an IPv6 header (RFC 8200).
type IPv6 []byte

// TrafficClass returns the traffic class (DSCP << 2 | ECN).
func (h IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(h) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h) & 0xFFFFF }

// PayloadLen returns the payload length.
func (h IPv6) PayloadLen() int { return int(binary.BigEndian.Uint16(h[4:])) }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[8:24])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[24:40])) }

// UDP is a view of a UDP header (RFC 768).
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the UDP length, header included.
func (u UDP) Length() int { return int(binary.BigEndian.Uint16(u[4:])) }

// Checksum returns the checksum field (0 when the sender left it out).
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// Frame is a parsed RoCEv2 frame: views of each header in the buffer given
// to ParseFrame.
type Frame struct {
	Ethernet []byte // nil on LinkIP
	// IP is the whole IP packet, from the IP header to the end of the UDP
	// datagram (trailing link padding removed). Exactly one of IPv4 and
	// IPv6 is set; each is just the header.
	IP   []byte
	IPv4 IPv4
	IPv6 IPv6
	UDP  UDP
	// Flow has the addresses, ports, IPv4 ID and DF bit, as the ICRC needs.
	Flow Flow
	// Payload is the UDP payload: a RoCE packet when the destination port
	// is 4791.
	Payload []byte
	// Truncated reports that the capture cut the frame short of what the
	// IP header says; Payload then ends early.
	Truncated bool
}

// ParseFrame parses the Ethernet (if link is LinkEthernet), IP and UDP
// headers at the start of b. It does not look at the UDP payload, so it
// accepts any UDP datagram; check Flow.DstPort for 4791. A frame cut short
// by a capture's snap length parses with Truncated set as long as the
// headers are whole.
func ParseFrame(fr *Frame, b []byte, link LinkType) error {
	*fr = Frame{}
	if link == LinkEthernet {
		if len(b) < EthernetLen {
			return ErrTruncated
		}
		n := EthernetLen
		et := binary.BigEndian.Uint16(b[12:])
		for et == EtherTypeVLAN || et == 0x88A8 {
			if len(b) < n+VLANTagLen {
				return ErrTruncated
			}
			et = binary.BigEndian.Uint16(b[n+2:])
			n += VLANTagLen
		}
		if et != EtherTypeIPv4 && et != EtherTypeIPv6 {
			return ErrNotIP
		}
		fr.Ethernet = b[:n]
		b = b[n:]
	}
	return parseIP(fr, b)
}

func parseIP(fr *Frame, b []byte) error {
	if len(b) < 1 {
		return ErrTruncated
	}
	var hl, total int
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4MinLen {
			return ErrTruncated
		}
		h := IPv4(b)
		hl, total = h.HeaderLen(), h.TotalLen()
		if hl < IPv4MinLen || total < hl {
			return ErrIPHeader
		}
		if len(b) < hl {
			return ErrTruncated
		}
		if h[9] != ProtocolUDP {
			return ErrNotUDP
		}
		if binary.BigEndian.Uint16(h[6:])&0x3FFF != 0 {
			return ErrFragment
		}
		fr.IPv4 = h[:hl]
		fr.Flow = Flow{Src: h.Src(), Dst: h.Dst(), ID: h.ID(), DF: h.DF()}
	case 6:
		if len(b) < IPv6Len {
			return ErrTruncated
		}
		h := IPv6(b)
		if h[6] != ProtocolUDP {
			return ErrNotUDP // extension headers are not used by RoCEv2
		}
		hl, total = IPv6Len, IPv6Len+h.PayloadLen()
		fr.IPv6 = h[:hl]
		fr.Flow = Flow{Src: h.Src(), Dst: h.Dst()}
	default:
		return ErrNotIP
	}
	if len(b) > total {
		b = b[:total] // Ethernet padding
	} else if len(b) < total {
		fr.Truncated = true
	}
	if len(b) < hl+UDPLen {
		return ErrTruncated
	}
	u := UDP(b[hl : hl+UDPLen])
	if u.Length() != total-hl {
		return ErrUDPLength
	}
	fr.IP = b
	fr.UDP = u
	fr.Flow.SrcPort, fr.Flow.DstPort = u.SrcPort(), u.DstPort()
	fr.Payload = b[hl+UDPLen:]
	return nil
}

// ICRC returns the ICRC of the frame's RoCE packet computed from its IP
// header. It needs a whole frame (Truncated false) of at least a BTH and an
// ICRC.
func (fr *Frame) ICRC() uint32 { return FrameICRC(fr.IP) }
