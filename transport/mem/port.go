package mem

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Port is a model of a switch's egress port in front of one address:
// every packet to that address, from any sender, queues in it. It is the
// bottleneck of a congestion test: its queue drains at Rate, a packet
// that finds Buffer full is dropped (tail drop), an ECN-capable packet
// that finds more than KMin bytes queued is marked CE with a probability
// rising linearly to PMax at KMax, and CE above KMax (RED on the
// instantaneous queue, as DCQCN's switches are configured: Zhu et al.,
// SIGCOMM 2015, section 3.1). After the port a packet travels Delay more
// (the propagation delay) on top of the network's Latency.
//
// The queue is a FIFO of bytes: a packet arriving at t finds
// max(0, busy-t)·Rate/8 bytes ahead of it, where busy is when the packet
// before it finishes leaving, and itself leaves Size·8/Rate after that.
// A packet's size on the wire is its RoCE bytes with the IPv4 (20) or
// IPv6 (40), UDP (8) and Ethernet (14, and the 4 of the FCS) headers: the
// bytes a switch port serializes. The random marking draws from the
// network's seeded source, so a run is repeatable.
//
// Packets that are not ECN-capable (ECN bits 00 in Packet.TOS) are never
// marked, only tail-dropped, as on a switch whose RoCE class has ECN
// marking and no WRED drop.
type Port struct {
	// Rate is the port's line rate in bits per second; it must be
	// positive.
	Rate int64
	// Buffer is the queue's size in bytes; 0 means no limit.
	Buffer int
	// KMin and KMax are the marking thresholds in bytes of queue; KMax
	// 0 means no marking. PMax is the marking probability at KMax, from
	// 0 to 1 (0 with KMax set means 1: mark every packet past KMin, as
	// DCTCP's single threshold K does).
	KMin, KMax int
	PMax       float64
	// Delay is the propagation delay after the port.
	Delay time.Duration
}

// PortStats counts what a port did.
type PortStats struct {
	// Packets and Bytes count what entered the queue (not dropped);
	// Bytes are wire bytes.
	Packets, Bytes uint64
	// Dropped counts packets that found the buffer full; Marked the
	// packets it marked CE.
	Dropped, Marked uint64
	// Queue is the bytes queued now; MaxQueue the most there ever were.
	Queue, MaxQueue int
}

// port is a Port in use: its settings and where its queue stands.
type port struct {
	cfg   Port
	busy  time.Time // when the last packet queued finishes leaving
	stats PortStats
}

// Wire overheads a port counts on top of a RoCE packet (BTH through ICRC).
const (
	ethOverhead  = 14 + 4 // header and FCS
	ipv4Overhead = bth.IPv4MinLen + bth.UDPLen + ethOverhead
	ipv6Overhead = bth.IPv6Len + bth.UDPLen + ethOverhead
)

// ErrBadPort means SetPort was given settings a port cannot have.
var ErrBadPort = errors.New("mem: bad port")

// SetPort puts a port (a copy of p) in front of dst: from now on every
// packet to dst queues in it. A nil p removes the port. A port set again
// starts with an empty queue and fresh counters.
func (n *Network) SetPort(dst netip.Addr, p *Port) error {
	if !n.ok() {
		return errNilNetwork
	}
	if !dst.IsValid() {
		return fmt.Errorf("%w: SetPort needs the address whose traffic goes through the port", ErrBadPort)
	}
	if p != nil {
		if err := p.check(); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if p == nil {
		delete(n.ports, dst)
		return nil
	}
	if n.ports == nil {
		n.ports = make(map[netip.Addr]*port)
	}
	n.ports[dst] = &port{cfg: *p}
	return nil
}

func (p *Port) check() error {
	switch {
	case p.Rate <= 0:
		return fmt.Errorf("%w: Rate %d bit/s: want a positive line rate (1e9 for 1 Gbit/s)", ErrBadPort, p.Rate)
	case p.Buffer < 0:
		return fmt.Errorf("%w: Buffer %d bytes: want 0 (no limit) or more", ErrBadPort, p.Buffer)
	case p.KMin < 0 || p.KMax < 0 || p.KMax > 0 && p.KMin > p.KMax:
		return fmt.Errorf("%w: marking thresholds KMin %d, KMax %d: want 0 <= KMin <= KMax (KMax 0: no marking)",
			ErrBadPort, p.KMin, p.KMax)
	case p.PMax < 0 || p.PMax > 1 || p.PMax != p.PMax:
		return fmt.Errorf("%w: PMax %v: want a probability from 0 to 1", ErrBadPort, p.PMax)
	case p.Delay < 0:
		return fmt.Errorf("%w: Delay %v: want 0 or more", ErrBadPort, p.Delay)
	}
	return nil
}

// PortStats returns what the port in front of dst did, with its queue
// now; zero when there is none.
func (n *Network) PortStats(dst netip.Addr) PortStats {
	if !n.ok() {
		return PortStats{}
	}
	now := n.clk.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	pt := n.ports[dst]
	if pt == nil {
		return PortStats{}
	}
	s := pt.stats
	s.Queue = pt.backlog(now)
	return s
}

// backlog returns the bytes queued at t.
func (pt *port) backlog(t time.Time) int {
	if !pt.busy.After(t) {
		return 0
	}
	return int(int64(pt.busy.Sub(t)) * pt.cfg.Rate / 8 / int64(time.Second))
}

// enqueue queues p, which arrives at now, and returns when it leaves the
// port, or false when it is dropped; it may mark p CE. The caller holds
// n.mu.
func (n *Network) enqueue(pt *port, p *transport.Packet, now time.Time) (time.Time, bool) {
	size := p.Len() + ipv4Overhead
	if p.Dst.Is6() && !p.Dst.Is4In6() {
		size = p.Len() + ipv6Overhead
	}
	q := pt.backlog(now)
	c := &pt.cfg
	if c.Buffer > 0 && q+size > c.Buffer {
		pt.stats.Dropped++
		return time.Time{}, false
	}
	if c.KMax > 0 && p.TOS&ecnMask != ecnNotECT && p.TOS&ecnMask != ecnCE && q > c.KMin {
		prob := 1.0
		if q < c.KMax && c.PMax > 0 {
			prob = c.PMax * float64(q-c.KMin) / float64(c.KMax-c.KMin)
		}
		if prob >= 1 || n.rng.Float64() < prob {
			p.TOS |= ecnCE
			pt.stats.Marked++
		}
	}
	start := now
	if pt.busy.After(now) {
		start = pt.busy
	}
	pt.busy = start.Add(time.Duration(int64(size) * 8 * int64(time.Second) / c.Rate))
	pt.stats.Packets++
	pt.stats.Bytes += uint64(size)
	pt.stats.MaxQueue = max(pt.stats.MaxQueue, q+size)
	return pt.busy.Add(c.Delay), true
}

// The ECN field, the low two bits of the TOS byte (RFC 3168).
const (
	ecnMask   = 0x03
	ecnNotECT = 0x00
	ecnCE     = 0x03
)
