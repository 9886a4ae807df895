package bth

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
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

// Errors from the builders and encoders.
var (
	// ErrRange means a value does not fit its field; the error is a
	// *FieldError that names it.
	ErrRange = errors.New("bth: value out of range")
	// ErrShortBuffer means a buffer, or a header view, is too short for
	// what was to be written into it.
	ErrShortBuffer = errors.New("bth: buffer too short")
	// ErrNil means a required argument, or the receiver, is nil.
	ErrNil = errors.New("bth: nil argument")
	// ErrFlow means a Flow's addresses are missing or of two IP versions.
	ErrFlow = errors.New("bth: flow addresses invalid")
)

// wrapError is an error with a message of its own that wraps a sentinel.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return e.msg
}

func (e *wrapError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.err
}

// nilError reports a nil argument or receiver.
func nilError(what string) error { return &wrapError{msg: "bth: nil argument: " + what, err: ErrNil} }

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

// HeaderLen returns the length of the headers EncodeFrame writes (0 for
// a nil f).
func (f *FrameFields) HeaderLen() int {
	if f == nil {
		return 0
	}
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
// RoCE packet with its ICRC. It returns the length of the headers. It
// fails, writing nothing, when f's addresses are missing or of two IP
// versions, its flow label does not fit in 20 bits, or frame is shorter
// than the headers or longer than an IP packet can be.
func EncodeFrame(frame []byte, f *FrameFields) (int, error) {
	if err := f.check(len(frame)); err != nil {
		return 0, err
	}
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
		s, d := as4(f.Flow.Src), as4(f.Flow.Dst)
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
	return len(frame) - len(u) + UDPLen, nil
}

// check reports why EncodeFrame cannot write f into a frame of n bytes.
func (f *FrameFields) check(n int) error {
	if f == nil {
		return nilError("EncodeFrame needs a *FrameFields")
	}
	if err := f.Flow.check(); err != nil {
		return err
	}
	if f.FlowLabel > 0xFFFFF {
		return rangeError("IPv6", "FlowLabel", uint64(f.FlowLabel), "0xfffff (20 bits)")
	}
	hl := f.HeaderLen()
	ipMax := 0xFFFF // IPv4 total length
	if !f.Flow.IsIPv4() {
		ipMax += IPv6Len // IPv6 payload length
	}
	if f.Ethernet {
		ipMax += EthernetLen
	}
	switch {
	case n < hl:
		return &wrapError{msg: "bth: a frame of " + strconv.Itoa(n) + " bytes cannot hold its " + strconv.Itoa(hl) +
			" bytes of headers: leave f.HeaderLen() bytes in front of the RoCE packet", err: ErrShortBuffer}
	case n > ipMax:
		return rangeError("IP", "length", uint64(n), strconv.Itoa(ipMax)+" bytes of frame")
	}
	return nil
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

// IPv4 is a view of an IPv4 header (RFC 791). Like the transport header
// views, a view shorter than the 20 bytes of a header reads as zeros.
type IPv4 []byte

// HeaderLen returns the header length in bytes.
func (h IPv4) HeaderLen() int {
	if len(h) < IPv4MinLen {
		return 0
	}
	return int(h[0]&0x0F) * 4
}

// TotalLen returns the total length of the packet.
func (h IPv4) TotalLen() int {
	if len(h) < IPv4MinLen {
		return 0
	}
	return int(binary.BigEndian.Uint16(h[2:]))
}

// TOS returns the TOS byte (DSCP << 2 | ECN).
func (h IPv4) TOS() uint8 {
	if len(h) < IPv4MinLen {
		return 0
	}
	return h[1]
}

// ID returns the identification.
func (h IPv4) ID() uint16 {
	if len(h) < IPv4MinLen {
		return 0
	}
	return binary.BigEndian.Uint16(h[4:])
}

// DF reports the don't-fragment bit.
func (h IPv4) DF() bool { return len(h) >= IPv4MinLen && h[6]&0x40 != 0 }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 {
	if len(h) < IPv4MinLen {
		return 0
	}
	return h[8]
}

// Src returns the source address (the zero Addr for a short view).
func (h IPv4) Src() netip.Addr {
	if len(h) < IPv4MinLen {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(h[12:16]))
}

// Dst returns the destination address (the zero Addr for a short view).
func (h IPv4) Dst() netip.Addr {
	if len(h) < IPv4MinLen {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(h[16:20]))
}

// ChecksumValid reports whether the header checksum is right; a view
// shorter than its header length has none.
func (h IPv4) ChecksumValid() bool {
	n := h.HeaderLen()
	return n >= IPv4MinLen && n <= len(h) && fold(checksum(0, h[:n])) == 0xFFFF
}

// IPv6 is a view of an IPv6 header (RFC 8200); one shorter than 40 bytes
// reads as zeros.
type IPv6 []byte

// TrafficClass returns the traffic class (DSCP << 2 | ECN).
func (h IPv6) TrafficClass() uint8 {
	if len(h) < IPv6Len {
		return 0
	}
	return uint8(binary.BigEndian.Uint16(h) >> 4)
}

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 {
	if len(h) < IPv6Len {
		return 0
	}
	return binary.BigEndian.Uint32(h) & 0xFFFFF
}

// PayloadLen returns the payload length.
func (h IPv6) PayloadLen() int {
	if len(h) < IPv6Len {
		return 0
	}
	return int(binary.BigEndian.Uint16(h[4:]))
}

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 {
	if len(h) < IPv6Len {
		return 0
	}
	return h[7]
}

// Src returns the source address (the zero Addr for a short view).
func (h IPv6) Src() netip.Addr {
	if len(h) < IPv6Len {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(h[8:24]))
}

// Dst returns the destination address (the zero Addr for a short view).
func (h IPv6) Dst() netip.Addr {
	if len(h) < IPv6Len {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(h[24:40]))
}

// UDP is a view of a UDP header (RFC 768); one shorter than 8 bytes reads
// as zeros.
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 {
	if len(u) < UDPLen {
		return 0
	}
	return binary.BigEndian.Uint16(u)
}

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 {
	if len(u) < UDPLen {
		return 0
	}
	return binary.BigEndian.Uint16(u[2:])
}

// Length returns the UDP length, header included.
func (u UDP) Length() int {
	if len(u) < UDPLen {
		return 0
	}
	return int(binary.BigEndian.Uint16(u[4:]))
}

// Checksum returns the checksum field (0 when the sender left it out).
func (u UDP) Checksum() uint16 {
	if len(u) < UDPLen {
		return 0
	}
	return binary.BigEndian.Uint16(u[6:])
}

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
	if fr == nil {
		return nilError("ParseFrame needs a *Frame to fill")
	}
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
// ICRC; for anything less (or a nil fr) it returns 0.
func (fr *Frame) ICRC() uint32 {
	if fr == nil {
		return 0
	}
	return FrameICRC(fr.IP)
}
