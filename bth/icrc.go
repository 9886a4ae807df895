package bth

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"strconv"
)

// The invariant CRC (IBTA Vol. 1 Annex A17 §A17.4.1.1, "ICRC") is the
// CRC-32 of IEEE 802.3 over
//
//	8 bytes of 0xFF (standing in for the IB local route header)
//	| IP header | UDP header | BTH | extension headers | payload | pad
//
// with the fields that routers may change replaced by ones: IPv4 TOS, TTL
// and header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; and BTH byte 4 (FECN, BECN, reserved). It goes on the wire after
// the pad, least-significant byte first.

// maxPseudoLen is the longest masked prefix: 8 bytes of ones, an IPv4
// header with options (60) or an IPv6 header (40), UDP (8) and BTH (12).
const maxPseudoLen = 8 + 60 + UDPLen + BTHLen

// maxExtLen is the most bytes of extension headers a packet carries
// (AtomicETH; RETH with ImmDt takes 20).
const maxExtLen = 28

// Flow describes the IP and UDP headers that carry a RoCE packet, as far as
// the ICRC covers them. It is what a sender on a UDP socket must predict and
// what a receiver on a UDP socket must know to check the ICRC, since neither
// sees the IP header itself.
type Flow struct {
	Src, Dst         netip.Addr // both IPv4 (or IPv4-mapped) or both IPv6
	SrcPort, DstPort uint16
	// ID and DF are the IPv4 identification and don't-fragment bit. Linux
	// sends ID 0 with DF for an unconnected UDP socket with path MTU
	// discovery on; UDP GSO numbers the segments of one send 0, 1, 2...
	ID uint16
	DF bool
}

// IsIPv4 reports whether the flow is carried over IPv4.
func (f *Flow) IsIPv4() bool { return f != nil && f.Src.Unmap().Is4() }

// check reports a flow whose addresses are missing or of two IP versions.
func (f *Flow) check() error {
	if f == nil {
		return nilError("a nil *Flow")
	}
	if s, d := f.Src.Unmap(), f.Dst.Unmap(); !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
		return &wrapError{msg: "bth: flow from " + f.Src.String() + " to " + f.Dst.String() +
			": set Src and Dst, both IPv4 or both IPv6", err: ErrFlow}
	}
	return nil
}

// as4 returns the IPv4 address a, or zeros when a is not one.
func as4(a netip.Addr) [4]byte {
	if a = a.Unmap(); a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}

// pseudo writes the masked prefix of the ICRC input for a RoCE packet of
// roceLen bytes (BTH through ICRC) into b and returns its length, and
// false when the flow's addresses are missing or of two IP versions (the
// prefix then holds zeros for what is missing).
func (f *Flow) pseudo(b *[maxPseudoLen]byte, bth []byte, roceLen int) (int, bool) {
	var ok bool
	for i := range 8 {
		b[i] = 0xFF
	}
	n := 8
	udpLen := UDPLen + roceLen
	if src := f.Src.Unmap(); src.Is4() {
		h := b[n : n+IPv4MinLen]
		h[0] = 0x45
		h[1] = 0xFF // TOS
		binary.BigEndian.PutUint16(h[2:], uint16(IPv4MinLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], f.ID)
		h[6], h[7] = boolBit(f.DF, 0x40), 0
		h[8] = 0xFF // TTL
		h[9] = ProtocolUDP
		h[10], h[11] = 0xFF, 0xFF // header checksum
		s := src.As4()
		var d [4]byte
		if dst := f.Dst.Unmap(); dst.Is4() {
			d, ok = dst.As4(), true
		}
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		n += IPv4MinLen
	} else {
		h := b[n : n+IPv6Len]
		h[0], h[1], h[2], h[3] = 0x6F, 0xFF, 0xFF, 0xFF // version, traffic class, flow label
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = ProtocolUDP
		h[7] = 0xFF // hop limit
		ok = f.Src.Is6() && f.Dst.Is6() && !f.Dst.Is4In6()
		s, d := f.Src.As16(), f.Dst.As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
		n += IPv6Len
	}
	u := b[n : n+UDPLen]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xFF, 0xFF // checksum
	n += UDPLen
	n += maskBTH(b[n:], bth)
	return n, ok
}

// maskBTH copies the BTH into dst with byte 4 set to ones.
func maskBTH(dst, bth []byte) int {
	copy(dst[:BTHLen], bth[:BTHLen])
	dst[4] = 0xFF
	return BTHLen
}

// ICRC returns the ICRC of pkt, a RoCE packet from its BTH through its pad
// (without the ICRC), carried by flow f. It returns 0 for a nil f or a pkt
// shorter than a BTH; on a flow without valid addresses its result means
// nothing (Seal refuses such a flow).
func (f *Flow) ICRC(pkt []byte) uint32 {
	c, _ := f.icrc(pkt)
	return c
}

// icrc is ICRC, and reports whether the flow's addresses were valid.
func (f *Flow) icrc(pkt []byte) (uint32, bool) {
	if f == nil || len(pkt) < BTHLen {
		return 0, false
	}
	var b [maxPseudoLen]byte
	n, ok := f.pseudo(&b, pkt, len(pkt)+ICRCLen)
	return crcJoined(b[:n], pkt[BTHLen:]), ok
}

// crcTables are the slicing-by-8 tables of the IEEE CRC-32 (reflected
// polynomial 0xEDB88320): crcTables[0] is the byte-at-a-time table, and
// crcTables[k][i] the CRC of byte i followed by k zero bytes.
var crcTables = func() (t [8][256]uint32) {
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xEDB88320
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < 8; k++ {
		for i := range 256 {
			p := t[k-1][i]
			t[k][i] = p>>8 ^ t[0][byte(p)]
		}
	}
	return t
}()

// crcShort is crc32.Update for the few dozen bytes of masked headers. It
// exists because crc32.Update reaches its assembly through a function
// variable, which makes a stack buffer passed to it escape to the heap:
// one allocation per packet.
func crcShort(crc uint32, p []byte) uint32 {
	t := &crcTables
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// Seal computes the ICRC of pkt, a RoCE packet from its BTH through its
// ICRC, carried by flow f, and writes it into the last four bytes. It
// fails, writing nothing, when the flow's addresses are missing or of two
// IP versions, or pkt is shorter than a BTH and an ICRC.
func (f *Flow) Seal(pkt []byte) error { return f.seal(pkt) }

// seal is Seal; Seal, a call to it, is inlined into its callers.
func (f *Flow) seal(pkt []byte) error {
	n := len(pkt) - ICRCLen
	if f == nil || n < BTHLen {
		return f.sealError(len(pkt))
	}
	var b [maxPseudoLen]byte
	m, ok := f.pseudo(&b, pkt, len(pkt))
	if !ok {
		return f.sealError(len(pkt))
	}
	binary.LittleEndian.PutUint32(pkt[n:], crcJoined(b[:m], pkt[BTHLen:n]))
	return nil
}

// sealError reports why a packet of n bytes, headers through ICRC,
// cannot be sealed on flow f.
func (f *Flow) sealError(n int) error {
	if err := f.check(); err != nil {
		return err
	}
	return &wrapError{msg: "bth: a RoCE packet of " + strconv.Itoa(n) + " bytes: it needs at least a BTH and an ICRC (16)",
		err: ErrShortBuffer}
}

// SealSplit is Seal for a packet kept in two pieces: head holds the
// headers (BTH and extension headers) followed by four bytes for the
// ICRC, payload what goes between them on the wire. It writes the ICRC
// into head's last four bytes. It fails as Seal does.
func (f *Flow) SealSplit(head, payload []byte) error {
	n := len(head) - ICRCLen
	if f == nil || n < BTHLen {
		return f.sealError(len(head))
	}
	var b [maxPseudoLen + maxExtLen]byte
	m, ok := f.pseudo((*[maxPseudoLen]byte)(b[:maxPseudoLen]), head, len(head)+len(payload))
	if !ok {
		return f.sealError(len(head))
	}
	var c uint32
	if n-BTHLen <= maxExtLen {
		m += copy(b[m:], head[BTHLen:n])
		c = crcJoined(b[:m], payload)
	} else {
		c = crcUpdate(crcShort(crcShort(0, b[:m]), head[BTHLen:n]), payload)
	}
	binary.LittleEndian.PutUint32(head[n:], c)
	return nil
}

// Verify reports whether the ICRC at the end of pkt (BTH through ICRC) is
// right for flow f; never for a flow without valid addresses.
func (f *Flow) Verify(pkt []byte) bool {
	n := len(pkt) - ICRCLen
	if n < BTHLen {
		return false
	}
	c, ok := f.icrc(pkt[:n])
	return ok && c == binary.LittleEndian.Uint32(pkt[n:])
}

// FrameICRC returns the ICRC of ip, an IPv4 or IPv6 packet that carries a
// RoCE packet over UDP, from its IP header through the ICRC (which is not
// itself covered). ip should have passed ParseFrame; FrameICRC returns 0
// when it is too short for its IP and UDP headers, a BTH and an ICRC.
func FrameICRC(ip []byte) uint32 {
	if len(ip) < 1 {
		return 0
	}
	hl := IPv6Len
	if ip[0]>>4 == 4 {
		hl = int(ip[0]&0x0F) * 4
	}
	if hl < IPv4MinLen || len(ip) < hl+UDPLen+BTHLen+ICRCLen {
		return 0
	}
	var b [maxPseudoLen]byte
	for i := range 8 {
		b[i] = 0xFF
	}
	n := 8
	if ip[0]>>4 == 4 {
		h := b[n : n+hl]
		copy(h, ip[:hl])
		h[1] = 0xFF
		h[8] = 0xFF
		h[10], h[11] = 0xFF, 0xFF
	} else {
		h := b[n : n+hl]
		copy(h, ip[:hl])
		h[0] |= 0x0F
		h[1], h[2], h[3] = 0xFF, 0xFF, 0xFF
		h[7] = 0xFF
	}
	n += hl
	copy(b[n:], ip[hl:hl+UDPLen])
	b[n+6], b[n+7] = 0xFF, 0xFF
	n += UDPLen
	roce := ip[hl+UDPLen : len(ip)-ICRCLen]
	n += maskBTH(b[n:], roce)
	return crcJoined(b[:n], roce[BTHLen:])
}

// IDSolver checks the ICRC of IPv4 RoCE packets received on a UDP socket,
// where the receiver cannot see the IPv4 identification field that the ICRC
// covers (rxe, for one, sends an incrementing ID). The CRC is linear in the
// 16 ID bits, so the solver finds the one ID, if any, that makes the ICRC
// right; the check then keeps 16 of its 32 bits of strength.
//
// An IDSolver caches a little per packet length. It is not safe for
// concurrent use; give each receiving goroutine its own.
type IDSolver struct {
	byLen map[int]*idBasis
	zero  []byte
}

// idBasis is the reduced basis of the CRC differences made by each ID bit,
// for one packet length.
type idBasis struct {
	pivot [16]uint32 // the pivot bit of each row
	row   [16]uint32 // CRC difference, reduced
	comb  [16]uint16 // the ID bits whose differences make up the row
	n     int        // rows
}

// Recover returns the IPv4 identification for which pkt (BTH through ICRC)
// has a right ICRC on flow f, whose ID field is ignored, and ok false when
// there is none (or s or f is nil, or f is not a valid IPv4 flow).
func (s *IDSolver) Recover(f *Flow, pkt []byte) (id uint16, ok bool) {
	n := len(pkt) - ICRCLen
	if s == nil || n < BTHLen || !f.IsIPv4() {
		return 0, false
	}
	g := *f
	g.ID = 0
	c, valid := g.icrc(pkt[:n])
	if !valid {
		return 0, false
	}
	delta := c ^ binary.LittleEndian.Uint32(pkt[n:])
	if delta == 0 {
		return 0, true
	}
	// Bytes of the CRC input after the ID field: the rest of the IPv4
	// header (6), UDP (8) and the packet without its ICRC.
	b := s.basis(IPv4MinLen - 6 + UDPLen + n)
	var x uint16
	for i := 0; i < b.n; i++ {
		if delta&b.pivot[i] != 0 {
			delta ^= b.row[i]
			x ^= b.comb[i]
		}
	}
	return x, delta == 0
}

func (s *IDSolver) basis(tail int) *idBasis {
	if b, ok := s.byLen[tail]; ok {
		return b
	}
	if s.byLen == nil {
		s.byLen = make(map[int]*idBasis)
	}
	if len(s.zero) < tail {
		s.zero = make([]byte, tail)
	}
	// The CRC difference of flipping ID bit i is the raw CRC (zero initial
	// value, no final XOR) of that bit followed by tail zero bytes; Go's
	// Update computes ^raw(^crc, p), so raw(0, p) = ^Update(^0, p).
	var raw [16]uint32
	for i := range 16 {
		v := uint16(1) << i
		be := [2]byte{byte(v >> 8), byte(v)}
		c := ^crc32.Update(^uint32(0), crc32.IEEETable, be[:])
		raw[i] = ^crc32.Update(^c, crc32.IEEETable, s.zero[:tail])
	}
	// Gaussian elimination over GF(2).
	b := &idBasis{}
	for i := range 16 {
		r, comb := raw[i], uint16(1)<<i
		for j := 0; j < b.n; j++ {
			if r&b.pivot[j] != 0 {
				r ^= b.row[j]
				comb ^= b.comb[j]
			}
		}
		if r == 0 {
			continue
		}
		p := r & -r
		for j := 0; j < b.n; j++ {
			if b.row[j]&p != 0 {
				b.row[j] ^= r
				b.comb[j] ^= comb
			}
		}
		b.pivot[b.n], b.row[b.n], b.comb[b.n] = p, r, comb
		b.n++
	}
	s.byLen[tail] = b
	return b
}
