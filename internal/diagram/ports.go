package diagram

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/goroce/goroce/bth"
)

// Ports tells which UDP datagrams of a capture carry RoCEv2: those to
// port 4791, to a port named when it was made, and to any port the
// capture's own traffic shows is RoCE's. A datagram to another port is
// taken when its payload is a BTH and an ICRC that verifies over its IP
// and UDP headers (a 32-bit CRC: a datagram of another protocol passes
// about once in four billion), and from then on every datagram to that
// port is, its ICRC good or not. So a capture of goroce on another port
// (roce demo picks a free one; --roce-port) decodes as it is. A datagram
// with a bad ICRC to such a port before its first good one is not taken;
// Hint says so. A Ports is not safe for concurrent use.
type Ports struct {
	ports   map[uint16]bool // RoCE's ports: 4791, those given, those learned
	given   map[uint16]bool // 4791 and those given (not learned)
	other   int             // UDP datagrams not taken
	otherTo map[uint16]int  // by destination port
	roce    int             // datagrams taken
}

// NewPorts returns the Ports of a capture: 4791 and extra (--roce-port).
func NewPorts(extra ...uint16) *Ports {
	p := &Ports{ports: map[uint16]bool{bth.UDPPort: true}, given: map[uint16]bool{bth.UDPPort: true},
		otherTo: map[uint16]int{}}
	for _, port := range extra {
		p.ports[port], p.given[port] = true, true
	}
	return p
}

// Take reports whether the UDP datagram of fr (which bth.ParseFrame
// filled) carries RoCEv2, and counts it. A nil p takes port 4791 only.
func (p *Ports) Take(fr *bth.Frame) bool {
	if fr == nil || fr.UDP == nil {
		return false
	}
	dport := fr.Flow.DstPort
	if p == nil {
		return dport == bth.UDPPort
	}
	if !p.ports[dport] {
		if !icrcVerifies(fr) {
			p.other++
			p.otherTo[dport]++
			return false
		}
		p.ports[dport] = true // the capture's own RoCE traffic
	}
	p.roce++
	return true
}

// TakeRoCE counts a datagram that was taken as RoCE by its port elsewhere
// (a decoder that knows 4791 itself).
func (p *Ports) TakeRoCE() {
	if p != nil {
		p.roce++
	}
}

// icrcVerifies reports whether fr's UDP payload ends in the ICRC its IP
// and UDP headers and BTH give, with a BTH of transport version 0 before.
func icrcVerifies(fr *bth.Frame) bool {
	pl := fr.Payload
	if fr.Truncated || len(pl) < bth.BTHLen+bth.ICRCLen || bth.BTH(pl).TVer() != 0 {
		return false
	}
	return bth.FrameICRC(fr.IP) == binary.LittleEndian.Uint32(pl[len(pl)-bth.ICRCLen:])
}

// Learned returns the ports other than 4791 and those given that the
// capture showed to be RoCE's, in order.
func (p *Ports) Learned() []uint16 {
	if p == nil {
		return nil
	}
	var l []uint16
	for port := range p.ports {
		if !p.given[port] {
			l = append(l, port)
		}
	}
	slices.Sort(l)
	return l
}

// Hint returns what to tell the reader of a capture about the UDP
// datagrams that were not taken, or "": when nothing was RoCE and other
// UDP datagrams were there, or when some went to a port found to be
// RoCE's only after them (bad ICRCs before the first good one).
func (p *Ports) Hint() string {
	if p == nil || p.other == 0 {
		return ""
	}
	// Of the ports the datagrams left out went to, the one most of them
	// went to, among those found to be RoCE's later if any.
	late, port, most := 0, uint16(0), 0
	for q, n := range p.otherTo {
		if p.ports[q] {
			late += n
		}
	}
	for q, n := range p.otherTo {
		if late > 0 && !p.ports[q] {
			continue
		}
		if n > most || n == most && q < port {
			port, most = q, n
		}
	}
	switch {
	case late > 0:
		return fmt.Sprintf("%d UDP packets not on port %d were not taken for RoCEv2, %d of them to port %d before its first "+
			"packet whose ICRC verifies; to decode them too, try --roce-port %d", p.other, bth.UDPPort, late, port, port)
	case p.roce > 0:
		return ""
	}
	return fmt.Sprintf("%d UDP packets not on port %d (%d to port %d), none of them RoCEv2 with an ICRC that verifies; "+
		"if they are RoCEv2, try --roce-port %d", p.other, bth.UDPPort, most, port, port)
}
