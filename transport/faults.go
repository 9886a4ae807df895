package transport

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"
)

// Faults are probabilities, from 0 to 1, applied to each packet a faulty
// transport sends.
type Faults struct {
	Drop      float64
	Duplicate float64
	// Reorder holds a packet back so the next one passes it.
	Reorder float64
	// Corrupt flips a random bit (the receiver's ICRC check drops it).
	Corrupt float64
	// Truncate cuts the packet short at a random length.
	Truncate float64
	// Delay adds a random delay up to this to every packet, in order.
	Delay time.Duration
}

// Any reports whether f injects anything.
func (f *Faults) Any() bool {
	return f != nil && (f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Corrupt > 0 || f.Truncate > 0 || f.Delay > 0)
}

// FaultStats counts what a faulty transport did.
type FaultStats struct {
	Dropped, Duplicated, Reordered, Corrupted, Truncated uint64
}

// Faulty wraps a live transport and applies faults to what it sends, from
// a random source seeded with seed. Reordering holds one packet per
// destination until the next packet to it (or 1 ms) passes. It is safe
// for concurrent use. The in-memory network has its own, deterministic,
// fault injection; this one is for real links (roce demo --loss over UDP).
type Faulty struct {
	Transport
	f     Faults
	mu    sync.Mutex
	rng   *rand.Rand
	held  map[netip.Addr]*heldPacket
	stats FaultStats
	buf   []Packet
	// holdFor is how long a reordered packet waits for one to pass it.
	holdFor time.Duration
}

type heldPacket struct {
	p     Packet
	timer *time.Timer
}

// NewFaulty returns t with faults f applied to what it sends. Given a nil
// t, its methods report ErrNil.
func NewFaulty(t Transport, f Faults, seed uint64) *Faulty {
	return &Faulty{Transport: t, f: f, rng: rand.New(rand.NewPCG(seed, seed^0x5DEECE66D)),
		held: make(map[netip.Addr]*heldPacket), holdFor: time.Millisecond}
}

// SendsPayload reports whether the wrapped transport takes packets with
// their payload apart.
func (t *Faulty) SendsPayload() bool { return t.ok() && SendsPayload(t.Transport) }

// ok reports whether t wraps a transport.
func (t *Faulty) ok() bool { return t != nil && t.Transport != nil && t.rng != nil }

// errNoFaultyTransport is what the methods of a Faulty without a
// transport return.
var errNoFaultyTransport = nilError("a nil *Faulty, or one without a transport: use NewFaulty with one")

// Start begins delivery from the wrapped transport.
func (t *Faulty) Start(h Handler) error {
	if !t.ok() {
		return errNoFaultyTransport
	}
	return t.Transport.Start(h)
}

// LocalAddr returns the wrapped transport's address.
func (t *Faulty) LocalAddr() netip.Addr {
	if !t.ok() {
		return netip.Addr{}
	}
	return t.Transport.LocalAddr()
}

// BatchSize returns the wrapped transport's batch size.
func (t *Faulty) BatchSize() int {
	if !t.ok() {
		return 0
	}
	return t.Transport.BatchSize()
}

// MaxPacket returns the wrapped transport's largest packet.
func (t *Faulty) MaxPacket() int {
	if !t.ok() {
		return 0
	}
	return t.Transport.MaxPacket()
}

// Stats returns the wrapped transport's counters.
func (t *Faulty) Stats() Stats {
	if !t.ok() {
		return Stats{}
	}
	return t.Transport.Stats()
}

// FaultStats returns what the wrapper did so far.
func (t *Faulty) FaultStats() FaultStats {
	if !t.ok() {
		return FaultStats{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

func (t *Faulty) chance(p float64) bool { return p > 0 && t.rng.Float64() < p }

// Send applies the faults and passes what is left to the transport.
func (t *Faulty) Send(pkts []Packet) error {
	if !t.ok() {
		return errNoFaultyTransport
	}
	t.mu.Lock()
	// The buffer leaves the struct while this Send uses it: another
	// Send (the device's receive path and a poster may send at once)
	// makes its own.
	out := t.buf[:0]
	t.buf = nil
	for _, p := range pkts {
		if t.chance(t.f.Drop) {
			t.stats.Dropped++
			continue
		}
		n := 1
		if t.chance(t.f.Duplicate) {
			t.stats.Duplicated++
			n = 2
		}
		for i := range n {
			q := p
			if i > 0 {
				// A duplicate has bytes of its own: the transport seals
				// each copy for its own IP header (IPv4 ID), and the
				// first's ICRC must not be overwritten by the second's
				// before it leaves or is captured.
				q.Data, q.Payload = p.AppendTo(nil), nil
			}
			if (t.chance(t.f.Corrupt) || t.chance(t.f.Truncate)) && p.Len() > 0 {
				// Corrupt a copy: the caller's buffer may be retransmitted.
				q.Data, q.Payload = p.AppendTo(nil), nil
				if t.f.Truncate > 0 && t.rng.IntN(2) == 0 {
					t.stats.Truncated++
					q.Data = q.Data[:t.rng.IntN(len(q.Data))]
				} else {
					t.stats.Corrupted++
					bit := t.rng.IntN(len(q.Data) * 8)
					q.Data[bit/8] ^= 1 << (bit % 8)
				}
			}
			if h := t.held[q.Dst]; h != nil && h.timer.Stop() {
				// The held packet goes after this one.
				delete(t.held, q.Dst)
				out = append(out, q, h.p)
				continue
			}
			if t.chance(t.f.Reorder) {
				t.stats.Reordered++
				t.hold(q)
				continue
			}
			out = append(out, q)
		}
	}
	var delay time.Duration
	if t.f.Delay > 0 && len(out) > 0 {
		delay = time.Duration(t.rng.Int64N(int64(t.f.Delay)))
	}
	t.mu.Unlock()
	var err error
	if len(out) > 0 {
		time.Sleep(delay)
		err = t.Transport.Send(out)
	}
	t.mu.Lock()
	if t.buf == nil {
		t.buf = out[:0]
	}
	t.mu.Unlock()
	return err
}

// hold keeps p back; a timer sends it if nothing passes it within 1 ms.
// The caller holds t.mu.
func (t *Faulty) hold(p Packet) {
	p.Data, p.Payload = p.AppendTo(nil), nil
	h := &heldPacket{p: p}
	h.timer = time.AfterFunc(t.holdFor, func() {
		t.mu.Lock()
		if t.held[p.Dst] != h {
			t.mu.Unlock()
			return
		}
		delete(t.held, p.Dst)
		t.mu.Unlock()
		t.Transport.Send([]Packet{h.p})
	})
	t.held[p.Dst] = h
}

// Close stops held packets and closes the transport.
func (t *Faulty) Close() error {
	if !t.ok() {
		return errNoFaultyTransport
	}
	t.mu.Lock()
	for _, h := range t.held {
		h.timer.Stop()
	}
	t.held = map[netip.Addr]*heldPacket{}
	t.mu.Unlock()
	return t.Transport.Close()
}
