// Package mem is an in-memory network for goroce's transports: endpoints
// joined by IP address, with seeded fault injection (drop, duplicate,
// reorder, delay, corrupt, truncate), and switch ports (Network.SetPort):
// a bottleneck with a line rate, a buffer, ECN marking thresholds and a
// propagation delay, for exact tests of congestion control.
//
// A packet to an address that has no endpoint is lost, and answered, for
// a sender that watches (Endpoint.NotifyUnreachable), with a notice as a
// host's ICMP error would be: that is how a test simulates an unreachable
// host.
//
// In simulation mode (the default) nothing moves until the test calls Run
// or Step: packets are delivered and timers fired on the caller's
// goroutine, in an order fixed by the seed, so a reliability test is
// deterministic and can print its seed to be replayed. In live mode a
// goroutine delivers packets as they come, for programs (roce demo
// --transport mem) rather than tests.
package mem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/unreach"
)

// Faults are the faults the network applies to each packet sent.
type Faults = transport.Faults

// Config configures a Network. Zero (and negative) fields mean defaults;
// a nil *Config means all defaults.
type Config struct {
	// Seed makes fault injection repeatable.
	Seed   uint64
	Faults Faults
	// Clock times delays and, in simulation mode, is advanced by Run; a
	// nil Clock is a clock.Manual in simulation mode and the system
	// clock in live mode.
	Clock clock.Clock
	// Live delivers packets from a goroutine instead of from Run.
	Live bool
	// Latency is the one-way delay of every packet (default 1 µs in
	// simulation mode, none in live mode).
	Latency time.Duration
	// ReorderDelay is how long a reordered packet is held (default 20 µs).
	ReorderDelay time.Duration
	// MaxPacket is the largest RoCE packet carried (default 4096 + 64).
	MaxPacket int
	// BatchSize is how many packets a handler gets at once (default 64).
	BatchSize int
	// DropIf, when set, is asked about every packet before the random
	// faults, with the packet's bytes from its BTH on (the payload may
	// follow separately); it drops the packets it returns true for. Tests
	// use it to lose one chosen packet. It is called with the network's
	// lock held and must not call back into the network.
	DropIf func(src, dst netip.Addr, pkt []byte) bool
}

// Network joins endpoints. It is safe for concurrent use.
type Network struct {
	cfg    Config
	clk    clock.Clock
	sim    *clock.Manual // set in simulation mode
	mu     sync.Mutex
	stepMu sync.Mutex // one delivery at a time
	rng    *rand.Rand
	eps    map[netip.Addr]*Endpoint
	queue  []*inflight // ordered by (at, seq)
	seq    uint64
	last   map[link]time.Time   // latest delivery time per link, to keep delays in order
	ports  map[netip.Addr]*port // switch ports in front of addresses (SetPort)
	free   []*inflight          // delivered packets, for reuse: no allocation per packet
	batch  []*inflight          // the batch being delivered (one deliverer at a time)
	kick   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	stats  Stats

	// groups are the multicast groups and who joined them, in order
	// (mcast.go).
	groups map[netip.Addr][]*Endpoint
}

// Stats counts what the network did to packets.
type Stats struct {
	Sent, Delivered, Dropped, Duplicated, Reordered, Corrupted, Truncated, Unroutable uint64
}

type link struct{ from, to netip.Addr }

type inflight struct {
	at     time.Time
	seq    uint64
	to     *Endpoint
	pkt    transport.Packet
	buf    []byte // backing store of pkt.Data
	notice bool   // an unreachable notice about pkt for its sender, to
}

// alloc returns a free inflight with room for n bytes; the caller holds
// n.mu.
func (n *Network) alloc(size int) *inflight {
	var q *inflight
	if k := len(n.free); k > 0 {
		q, n.free = n.free[k-1], n.free[:k-1]
	} else {
		q = &inflight{}
	}
	if cap(q.buf) < size {
		q.buf = make([]byte, max(size, n.cfg.MaxPacket))
	}
	return q
}

// release gives delivered packets back for reuse.
func (n *Network) release(batch []*inflight) {
	n.mu.Lock()
	for _, q := range batch {
		q.to, q.pkt = nil, transport.Packet{}
		n.free = append(n.free, q)
	}
	n.mu.Unlock()
}

// NewNetwork returns an empty network.
func NewNetwork(cfg *Config) *Network {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Latency < 0 || c.Latency == 0 && !c.Live {
		c.Latency = time.Microsecond
	}
	if c.ReorderDelay <= 0 {
		c.ReorderDelay = 20 * time.Microsecond
	}
	if c.MaxPacket <= 0 {
		c.MaxPacket = 4096 + 64
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 64
	}
	n := &Network{cfg: c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9E3779B97F4A7C15)),
		eps: make(map[netip.Addr]*Endpoint), last: make(map[link]time.Time), kick: make(chan struct{}, 1), done: make(chan struct{})}
	switch {
	case c.Clock != nil:
		n.clk = c.Clock
		n.sim, _ = c.Clock.(*clock.Manual)
	case c.Live:
		n.clk = clock.Real{}
	default:
		n.sim = clock.NewManual(time.Unix(1e9, 0))
		n.clk = n.sim
	}
	if c.Live {
		n.wg.Add(1)
		go n.deliverLoop()
	}
	return n
}

// Clock returns the network's clock; give it to the devices so that their
// timers run on the same time as the network.
func (n *Network) Clock() clock.Clock {
	if !n.ok() {
		return clock.Real{}
	}
	return n.clk
}

// ok reports whether n was made by NewNetwork.
func (n *Network) ok() bool { return n != nil && n.eps != nil }

// errNilNetwork is what the methods of a nil Network return.
var errNilNetwork = fmt.Errorf("%w: mem: nil *Network: use one from NewNetwork", transport.ErrNil)

// Stats returns what the network did to packets so far.
func (n *Network) Stats() Stats {
	if !n.ok() {
		return Stats{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// SetFaults changes the faults applied from now on.
func (n *Network) SetFaults(f Faults) {
	if !n.ok() {
		return
	}
	n.mu.Lock()
	n.cfg.Faults = f
	n.mu.Unlock()
}

// Close stops live delivery. Endpoints stop with it.
func (n *Network) Close() {
	if !n.ok() {
		return
	}
	n.mu.Lock()
	select {
	case <-n.done:
	default:
		close(n.done)
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// Endpoint returns a new endpoint with address addr, which must be unique
// on the network.
func (n *Network) Endpoint(addr netip.Addr) (*Endpoint, error) {
	if !n.ok() {
		return nil, errNilNetwork
	}
	if !addr.IsValid() {
		return nil, errors.New("mem: an endpoint needs an IP address: give Endpoint one (the device's GID)")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.eps[addr]; ok {
		return nil, fmt.Errorf("mem: address %v in use: close its endpoint first, or choose another", addr)
	}
	e := &Endpoint{n: n, addr: addr}
	n.eps[addr] = e
	return e, nil
}

// Endpoint is one host on a Network; it implements transport.Transport.
type Endpoint struct {
	n       *Network
	addr    netip.Addr
	handler atomic.Pointer[transport.Handler]
	closed  atomic.Bool
	batch   []transport.Packet // delivery scratch, used by one deliverer at a time
	parsed  []bth.Packet       // batch[i].Parsed is &parsed[i]; the same deliverer's
	unreach unreach.List
	stats   struct {
		txPackets, txBytes, rxPackets, rxBytes, rxICRC, rxMalformed atomic.Uint64
	}
}

var (
	_ transport.Transport           = (*Endpoint)(nil)
	_ transport.UnreachableNotifier = (*Endpoint)(nil)
)

// Start begins delivery to h.
func (e *Endpoint) Start(h transport.Handler) error {
	switch {
	case !e.ok():
		return errNilEndpoint
	case h == nil:
		return fmt.Errorf("%w: mem: Start needs a Handler", transport.ErrNil)
	}
	if !e.handler.CompareAndSwap(nil, &h) {
		return errors.New("mem: endpoint already started")
	}
	return nil
}

// ok reports whether e was made by Network.Endpoint.
func (e *Endpoint) ok() bool { return e != nil && e.n.ok() }

// errNilEndpoint is what the methods of a nil Endpoint return.
var errNilEndpoint = fmt.Errorf("%w: mem: nil *Endpoint: use one from Network.Endpoint", transport.ErrNil)

// LocalAddr returns the endpoint's address.
func (e *Endpoint) LocalAddr() netip.Addr {
	if !e.ok() {
		return netip.Addr{}
	}
	return e.addr
}

// BatchSize returns the network's batch size.
func (e *Endpoint) BatchSize() int {
	if !e.ok() {
		return 0
	}
	return e.n.cfg.BatchSize
}

// MaxPacket returns the largest packet the network carries.
func (e *Endpoint) MaxPacket() int {
	if !e.ok() {
		return 0
	}
	return e.n.cfg.MaxPacket
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() transport.Stats {
	if !e.ok() {
		return transport.Stats{}
	}
	s := &e.stats
	return transport.Stats{TxPackets: s.txPackets.Load(), TxBytes: s.txBytes.Load(),
		RxPackets: s.rxPackets.Load(), RxBytes: s.rxBytes.Load(), RxICRCErrors: s.rxICRC.Load(),
		RxMalformed: s.rxMalformed.Load()}
}

// Close detaches the endpoint; packets to it are lost.
func (e *Endpoint) Close() error {
	if !e.ok() {
		return errNilEndpoint
	}
	e.closed.Store(true)
	n := e.n
	n.mu.Lock()
	if n.eps[e.addr] == e {
		delete(n.eps, e.addr)
	}
	n.leaveAll(e) // mcast.go
	n.mu.Unlock()
	return nil
}

// flow is the IP and UDP header the network pretends to carry a packet in:
// IPv4 ID 0 with DF, like a Linux UDP socket, from port 4791.
func flow(p *transport.Packet) bth.Flow {
	return bth.Flow{Src: p.Src, Dst: p.Dst, SrcPort: bth.UDPPort, DstPort: bth.UDPPort, DF: true}
}

// SendsPayload reports true: Send takes packets with their payload apart.
func (e *Endpoint) SendsPayload() bool { return e.ok() }

// Send seals each packet's ICRC, copies it onto the network and applies
// the faults. It never blocks and never delivers on the caller's
// goroutine. A packet to an address that has no endpoint is lost; when
// someone watches the endpoint's notices (NotifyUnreachable), the
// network answers it with a notice, as a host's stack answers with an
// ICMP error, after the network's latency.
func (e *Endpoint) Send(pkts []transport.Packet) error {
	if !e.ok() {
		return errNilEndpoint
	}
	if e.closed.Load() {
		return fmt.Errorf("mem: send on endpoint %v after Close: %w", e.addr, net.ErrClosed)
	}
	n := e.n
	now := n.clk.Now()
	n.mu.Lock()
	for i := range pkts {
		p := pkts[i]
		fl := flow(&p)
		_ = p.Seal(&fl) // a packet that cannot be sealed goes as it is, and the receiver drops it
		// As every transport does, Send tells the caller (a capture) the
		// headers the packet went with; the receiver gets the same.
		p.SrcPort, p.IPID = fl.SrcPort, fl.ID
		pkts[i].SrcPort, pkts[i].IPID = fl.SrcPort, fl.ID
		e.stats.txPackets.Add(1)
		e.stats.txBytes.Add(uint64(p.Len()))
		n.stats.Sent++
		if p.Dst.IsMulticast() {
			n.multicast(&p, now) // mcast.go
			continue
		}
		to := n.eps[p.Dst]
		if to == nil {
			n.stats.Unroutable++
			if e.unreach.Watched() {
				n.queueNotice(e, &p, now)
			}
			continue
		}
		n.transmit(to, &p, now)
	}
	n.mu.Unlock()
	if n.cfg.Live {
		select {
		case n.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// transmit applies the faults to p and queues what is left of it for to;
// the caller holds n.mu.
func (n *Network) transmit(to *Endpoint, p *transport.Packet, now time.Time) {
	f := n.cfg.Faults
	copies := 1
	if n.cfg.DropIf != nil && n.cfg.DropIf(p.Src, p.Dst, p.Data) {
		n.stats.Dropped++
		copies = 0
	} else if n.chance(f.Drop) {
		n.stats.Dropped++
		copies = 0
	} else if n.chance(f.Duplicate) {
		n.stats.Duplicated++
		copies = 2
	}
	pt := n.ports[p.Dst]
	for range copies {
		at := now
		tos := p.TOS
		if pt != nil {
			// The port's queue first (it may drop or mark), then the
			// network's latency.
			var ok bool
			if at, ok = n.enqueue(pt, p, now); !ok {
				n.stats.Dropped++
				continue
			}
		}
		q := n.alloc(p.Len())
		data := p.AppendTo(q.buf[:0])
		at = at.Add(n.cfg.Latency)
		if f.Delay > 0 {
			at = at.Add(time.Duration(n.rng.Int64N(int64(f.Delay))))
			l := link{p.Src, p.Dst}
			if prev := n.last[l]; at.Before(prev) {
				at = prev
			}
			n.last[l] = at
		}
		if n.chance(f.Reorder) {
			n.stats.Reordered++
			at = at.Add(n.cfg.ReorderDelay)
		}
		if n.chance(f.Corrupt) && len(data) > 0 {
			n.stats.Corrupted++
			bit := n.rng.IntN(len(data) * 8)
			data[bit/8] ^= 1 << (bit % 8)
		}
		if n.chance(f.Truncate) && len(data) > 1 {
			n.stats.Truncated++
			data = data[:n.rng.IntN(len(data))]
		}
		q.at, q.seq, q.to, q.pkt, q.notice = at, n.seq, to, *p, false
		q.pkt.Data, q.pkt.Payload = data, nil
		p.TOS = tos // a duplicate is marked (or not) on its own
		n.seq++
		n.insert(q)
	}
}

// queueNotice queues, for the sender from, the notice that p found no
// endpoint; the caller holds n.mu.
func (n *Network) queueNotice(from *Endpoint, p *transport.Packet, now time.Time) {
	q := n.alloc(p.Len())
	q.at, q.seq, q.to, q.pkt, q.notice = now.Add(n.cfg.Latency), n.seq, from, *p, true
	q.pkt.Data, q.pkt.Payload = p.AppendTo(q.buf[:0]), nil
	n.seq++
	n.insert(q)
}

func (n *Network) chance(p float64) bool { return p > 0 && n.rng.Float64() < p }

// insert puts q in delivery order; the caller holds n.mu.
func (n *Network) insert(q *inflight) {
	i, _ := slices.BinarySearchFunc(n.queue, q, func(a, b *inflight) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	n.queue = slices.Insert(n.queue, i, q)
}

// due removes the packets due by now for the first endpoint that has one,
// up to a batch, keeping their order.
func (n *Network) due(now time.Time) (*Endpoint, []*inflight) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.queue) == 0 || n.queue[0].at.After(now) {
		return nil, nil
	}
	to := n.queue[0].to
	out := n.batch[:0]
	rest := n.queue[:0]
	for i, q := range n.queue {
		if !q.at.After(now) && q.to == to && len(out) < n.cfg.BatchSize {
			out = append(out, q)
			continue
		}
		if q.at.After(now) {
			rest = append(rest, n.queue[i:]...)
			break
		}
		rest = append(rest, q)
	}
	clear(n.queue[len(rest):])
	n.queue = rest
	for _, q := range out {
		if !q.notice {
			n.stats.Delivered++
		}
	}
	n.batch = out
	return to, out
}

// deliver checks and hands a batch to its endpoint's handler, and its
// notices to the endpoint's watchers.
func (e *Endpoint) deliver(batch []*inflight) {
	if e.closed.Load() {
		return
	}
	h := e.handler.Load()
	e.batch = e.batch[:0]
	if len(e.parsed) < len(batch) {
		e.parsed = make([]bth.Packet, len(batch))
	}
	for _, q := range batch {
		p := q.pkt
		if q.notice {
			e.unreach.Notify(transport.Unreachable{Dst: p.Dst, Err: ErrNoEndpoint, Packet: p.Data})
			continue
		}
		if h == nil {
			continue
		}
		bp := &e.parsed[len(e.batch)]
		if len(p.Data) < bth.BTHLen+bth.ICRCLen || bp.Parse(p.Data) != nil {
			e.stats.rxMalformed.Add(1)
			continue
		}
		p.RXEFlushICRC = false // what the receiver finds, not what the sender asked
		if fl := flow(&p); !fl.Verify(p.Data) {
			if p.RXEFlushICRC = transport.VerifyFlushRXE(p.Data, fl.Verify); !p.RXEFlushICRC {
				e.stats.rxICRC.Add(1)
				continue
			}
		}
		e.stats.rxPackets.Add(1)
		e.stats.rxBytes.Add(uint64(len(p.Data)))
		p.Parsed = bp
		e.batch = append(e.batch, p)
	}
	if len(e.batch) > 0 {
		(*h)(e.batch)
	}
}

// ErrNoEndpoint is the error of the notices an endpoint's watchers get
// (NotifyUnreachable) for packets sent to an address where the network
// has no endpoint: the simulation of a host that is down or was never
// there (EHOSTUNREACH).
var ErrNoEndpoint = errors.New("mem: no endpoint has that address (host unreachable)")

// NotifyUnreachable calls f, from the goroutine that delivers packets
// (Run, Step or the live loop), with a notice for every packet the
// endpoint sends from now on to an address that has no endpoint, until
// stop is called. f must not block or call back into the network. A nil
// Endpoint never calls f.
func (e *Endpoint) NotifyUnreachable(f func(transport.Unreachable)) (stop func()) {
	if !e.ok() {
		return func() {}
	}
	stop, _ = e.unreach.Add(f)
	return stop
}

// ErrIdle means Run found nothing left to do (no packet in flight and no
// timer pending) before its condition held.
var ErrIdle = errors.New("mem: network idle")

// ErrTimeLimit means Run passed its time limit.
var ErrTimeLimit = errors.New("mem: simulated time limit passed")

// Step delivers the packets due now (simulation mode). It reports whether
// it delivered any.
func (n *Network) Step() bool {
	if !n.ok() {
		return false
	}
	n.stepMu.Lock()
	defer n.stepMu.Unlock()
	to, batch := n.due(n.clk.Now())
	if to == nil {
		return false
	}
	to.deliver(batch)
	n.release(batch)
	return true
}

// Run drives a simulation until done returns true: it delivers packets
// and advances the manual clock to the next packet or timer, firing
// timers on the way. It fails with ErrIdle when nothing is left to do and
// with ErrTimeLimit after limit of simulated time.
func (n *Network) Run(done func() bool, limit time.Duration) error {
	switch {
	case !n.ok():
		return errNilNetwork
	case done == nil:
		return fmt.Errorf("%w: mem: Run needs a done function to say when to stop", transport.ErrNil)
	case n.sim == nil:
		return errors.New("mem: Run needs simulation mode: make the Network without Live, " +
			"and with no Clock or a *clock.Manual")
	}
	end := n.sim.Now().Add(limit)
	for !done() {
		if n.Step() {
			continue
		}
		next, ok := n.sim.Next()
		n.mu.Lock()
		if len(n.queue) > 0 && (!ok || n.queue[0].at.Before(next)) {
			next, ok = n.queue[0].at, true
		}
		n.mu.Unlock()
		if !ok {
			return ErrIdle
		}
		if next.After(end) {
			return ErrTimeLimit
		}
		n.sim.AdvanceTo(next)
	}
	return nil
}

func (n *Network) deliverLoop() {
	defer n.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		for n.Step() {
		}
		wait := time.Hour
		n.mu.Lock()
		if len(n.queue) > 0 {
			wait = max(0, n.queue[0].at.Sub(n.clk.Now()))
		}
		n.mu.Unlock()
		t.Reset(wait)
		select {
		case <-n.done:
			return
		case <-n.kick:
		case <-t.C:
		}
	}
}
