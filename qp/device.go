package qp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// Config configures a Device. A nil *Config or zero fields mean defaults.
type Config struct {
	// Clock runs the retransmission and RNR timers; nil is the system
	// clock. Tests use a clock.Manual to be deterministic.
	Clock clock.Clock
	// Logger receives state changes at Debug level; nil discards.
	Logger *slog.Logger
	// MaxUnackedPSNs bounds the packets a requester has in flight on one
	// QP (rxe uses 128). 0 means 512.
	MaxUnackedPSNs int
	// SharedUnackedPSNs bounds the packets in flight over all the QPs of
	// the device that have some: each gets an equal share, down to a
	// floor of 8, and when more QPs send than it has room for turns of
	// 64 PSNs (SharedUnackedPSNs/64 QPs, at least one), they take turns,
	// in order. 0 means twice MaxUnackedPSNs.
	SharedUnackedPSNs int
	// AckReqEvery sets AckReq on at least every so many packets of a long
	// message, besides the last (rxe: 64). 0 means 64.
	AckReqEvery int
	// MaxQPs bounds the queue pairs the device has at once; CreateQP
	// beyond it fails with an error wrapping verbs.ErrNoQPN. 0 means
	// DefaultMaxQPs.
	MaxQPs int
	// MaxMRs bounds the memory regions and memory windows the device
	// has at once (a window takes a key as a region does); RegMR and
	// AllocMW beyond it fail with an error wrapping mr.ErrTableFull. 0
	// means mr.DefaultMaxRegions.
	MaxMRs int
	// BusyPoll makes a CQ.Poll that finds the CQ empty receive from the
	// transport on the caller's goroutine first (when the transport is a
	// transport.Poller): a program that spins on its completions then
	// drives the whole receive path itself, with no hand-off between
	// threads, for the lowest latency.
	BusyPoll bool
	// SeqNAKWindow, when positive, is how far ahead of the expected PSN
	// an RC request may be and still draw a PSN sequence error NAK; one
	// further ahead is dropped in silence and counted (drop_far_psn).
	// 0 follows the IBTA and rxe: any request in the half of the PSN
	// space ahead is NAKed (once, until the expected PSN arrives).
	//
	// Only the first packet after a gap needs the NAK, and a requester's
	// packets after a loss arrive close behind the lost one (goroce keeps
	// at most MaxUnackedPSNs in flight, rxe 128). A request much further
	// ahead was not sent by the peer's requester, but by someone who
	// spoofs its address: each NAK makes the requester go back N, resend
	// what was not lost and halve its window. A window (65,536, say, and
	// at least the peer's packets in flight) stops that; losing more
	// packets in a row than it costs a retransmission timeout instead of
	// a NAK.
	SeqNAKWindow int
	// Paths is how many receive paths the transport hands packets over
	// from at once (udp.Config.Paths); 0 or 1 means one. With more, the
	// engine spreads what QPs of different paths would share: each memory
	// region's access count is kept in that many cache lines, one per QP
	// number modulo Paths (up to mr.MaxSpread), rather than one that
	// every core writes. roce.Open sets it to its UDP link's Paths.
	Paths int
	// GIDs is the device's GID table, the addresses it sends from and
	// receives at (a transport.Multi's, in order); nil means the
	// transport's one address. It sends to an IPv6 peer from the first
	// IPv6 address of the table, to any other from the first.
	GIDs []netip.Addr
	// LossProbe is the shortest wait for an acknowledgement after which
	// an RC requester sends its oldest unacknowledged packet again,
	// alone, to learn what the peer has (a loss probe, qp/probe.go); the
	// wait is the path's RTT estimate, SRTT + 4·RTTVAR, when that is
	// longer. Probes count no retry: the local ACK timeout still fails a
	// request after retry_cnt retries. 0 means DefaultLossProbe;
	// negative, no probes (only the local ACK timeout sends again, as in
	// rxe).
	LossProbe time.Duration
	// Congestion is the congestion control of the device's RC and UC QPs
	// (package congestion; qp/cc.go): nil means the defaults, Mode DCQCN.
	// A QP may have its own (QP.SetCongestion).
	Congestion *congestion.Config
	// WaitSpin bounds how long a wait for a completion (CQ.Wait) polls
	// the link before it blocks: it spins as long as recent waits took,
	// up to this, and not at all while they take longer. 0 means
	// DefaultWaitSpin; negative, never spin.
	WaitSpin time.Duration
}

// Device is a software RNIC: it owns queue pairs, completion queues and the
// memory region table, and runs the RC, UC and UD protocols over a
// transport. It is safe for concurrent use.
//
// The methods of the Device, PD, QP, CQ, SRQ and AH types called on a nil
// object (or a zero value New did not make) do not panic: those that
// return an error return one wrapping verbs.ErrNil, the others zero
// values.
type Device struct {
	t    transport.Transport
	clk  clock.Clock
	log  *slog.Logger
	gid  netip.Addr   // the first of gids
	gids []netip.Addr // the GID table: the transport's addresses (transport.Multi has several)
	four netip.Addr   // the first IPv4 address of gids, if any: the source of packets to IPv4 peers
	six  netip.Addr   // the first IPv6 address of gids, if any: the source of packets to IPv6 peers
	mrs  *mr.Table

	maxUnacked    uint32
	sharedUnacked uint32       // PSNs in flight over all QPs, shared by the active ones
	activeRC      atomic.Int32 // RC QPs with PSNs in flight
	inflight      atomic.Int64 // their PSNs in flight
	ackReqEvery   uint32
	seqNAKWindow  int32 // Config.SeqNAKWindow; 0: none
	maxPacket     int
	poller        transport.Poller  // set in busy-poll mode
	link          transport.Poller  // the transport, if it is a Poller: waits spin on it
	waiter        transport.Waiter  // the transport, if waiters may receive themselves (wait.go)
	waitSpin      time.Duration     // Config.WaitSpin, resolved
	lossProbe     time.Duration     // Config.LossProbe, resolved; 0: no probes
	cc            congestion.Config // Config.Congestion, resolved
	lead          leadState
	progressSpin  spinner          // ProgressWait's adaptive spin
	timers        chan *time.Timer // a free list for sleeping waits with deadlines
	inPlace       bool             // the transport sends payloads from registered memory in place
	polling       atomic.Int32     // polls receiving on programs' threads now
	emptyPolls    atomic.Uint32    // busy polls that found nothing: every busyYieldEvery-th yields
	acks          ackDeferrer
	adm           admission // turns at the shared window (admit.go)

	qpMu    sync.Mutex // serializes QP creation and destruction
	qps     qpTable
	nextQPN uint32
	maxQPs  int
	gsi     *QP
	qpIDs   atomic.Uint64 // numbers QPs, never twice (QPNs are reused): type 2 windows are bound to one

	atomicMu sync.Mutex // makes responder atomics atomic against each other

	mcast mcastTable // multicast groups (mcast.go)

	batches chan *txBatch // a capped free list; sync.Pool would drop them at every GC
	events  chan verbs.Event
	closed  atomic.Bool

	ctr     devCounters
	retired Counters // counters of destroyed QPs, under qpMu
}

// New returns a device that sends and receives over t, and starts t.
func New(t transport.Transport, cfg *Config) (*Device, error) {
	if err := checkNew(t, cfg); err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &Config{}
	}
	cc, err := resolveCongestion(cfg.Congestion, "Config.Congestion")
	if err != nil {
		return nil, err
	}
	d := &Device{
		cc:           cc,
		t:            t,
		clk:          cfg.Clock,
		log:          cfg.Logger,
		gid:          t.LocalAddr(),
		gids:         []netip.Addr{t.LocalAddr()},
		mrs:          mr.NewTableMax(cfg.MaxMRs),
		maxQPs:       cfg.MaxQPs,
		maxUnacked:   uint32(cfg.MaxUnackedPSNs),
		seqNAKWindow: int32(cfg.SeqNAKWindow),
		ackReqEvery:  uint32(cfg.AckReqEvery),
		maxPacket:    t.MaxPacket(),
		nextQPN:      firstQPN,
		events:       make(chan verbs.Event, 64),
	}
	if len(cfg.GIDs) > 0 {
		d.gids = append([]netip.Addr(nil), cfg.GIDs...)
		d.gid = d.gids[0]
	}
	for _, a := range d.gids {
		switch v4 := a.Unmap().Is4(); {
		case v4 && !d.four.IsValid():
			d.four = a
		case !v4 && !d.six.IsValid():
			d.six = a
		}
	}
	if cfg.Paths > 1 {
		if err := d.mrs.SetSpread(min(cfg.Paths, mr.MaxSpread)); err != nil {
			return nil, err
		}
	}
	if d.clk == nil {
		d.clk = clock.Real{}
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.maxUnacked == 0 {
		d.maxUnacked = 512
	}
	if d.maxQPs <= 0 {
		d.maxQPs = DefaultMaxQPs
	}
	d.sharedUnacked = uint32(cfg.SharedUnackedPSNs)
	if d.sharedUnacked == 0 {
		d.sharedUnacked = 2 * d.maxUnacked
	}
	if d.ackReqEvery == 0 {
		d.ackReqEvery = 64
	}
	d.adm.max = max(1, int(d.sharedUnacked/turnPSNs))
	d.inPlace = transport.SendsPayload(t)
	if p, ok := t.(transport.Poller); ok {
		d.link = p
		if cfg.BusyPoll {
			d.poller = p
		}
	}
	d.waiter, _ = t.(transport.Waiter)
	d.waitSpin = cfg.WaitSpin
	if d.waitSpin == 0 {
		d.waitSpin = DefaultWaitSpin
	}
	d.waitSpin = max(d.waitSpin, 0)
	d.lossProbe = cfg.LossProbe
	if d.lossProbe == 0 {
		d.lossProbe = DefaultLossProbe
	}
	d.lossProbe = max(d.lossProbe, 0)
	d.timers = make(chan *time.Timer, maxFreeBatches)
	if need := bth.RCWriteFirst.HeaderLen() + bth.MTU256.Bytes() + bth.ICRCLen; d.maxPacket < need {
		return nil, fmt.Errorf("%w: the transport carries packets of %d bytes, and a 256-byte path MTU needs %d: "+
			"raise its MaxPacket", verbs.ErrInvalidCap, d.maxPacket, need)
	}
	d.batches = make(chan *txBatch, maxFreeBatches)
	if err := t.Start(d.receive); err != nil {
		return nil, fmt.Errorf("qp: starting the transport: %w", err)
	}
	return d, nil
}

// checkNew checks New's arguments.
func checkNew(t transport.Transport, cfg *Config) error {
	if t == nil {
		return fmt.Errorf("%w: qp.New needs a transport (udp.New, afpacket.New or a mem.Network's Endpoint)", verbs.ErrNil)
	}
	if cfg == nil {
		return nil
	}
	for _, f := range [...]struct {
		name string
		v    int
	}{{"MaxUnackedPSNs", cfg.MaxUnackedPSNs}, {"SharedUnackedPSNs", cfg.SharedUnackedPSNs}, {"AckReqEvery", cfg.AckReqEvery},
		{"SeqNAKWindow", cfg.SeqNAKWindow}} {
		if f.v < 0 || f.v > bth.PSNMask/2 {
			return fmt.Errorf("%w: qp: Config.%s %d: want 0 (the default) to %d", verbs.ErrInvalidAttr, f.name, f.v, bth.PSNMask/2)
		}
	}
	if cfg.Paths < 0 {
		return fmt.Errorf("%w: qp: Config.Paths %d: want 0 or 1 (one receive path) or more", verbs.ErrInvalidAttr, cfg.Paths)
	}
	if len(cfg.GIDs) > 256 {
		return fmt.Errorf("%w: qp: Config.GIDs has %d addresses: at most 256", verbs.ErrInvalidAttr, len(cfg.GIDs))
	}
	for i, a := range cfg.GIDs {
		if !a.IsValid() {
			return fmt.Errorf("%w: qp: Config.GIDs[%d] is the zero Addr", verbs.ErrInvalidAttr, i)
		}
	}
	return nil
}

// ok reports whether d was made by New.
func (d *Device) ok() bool { return d != nil && d.t != nil }

// nilError reports a call on a nil object (or a zero value), or a nil
// argument: what names it, and make where to get a real one.
func nilError(what, make string) error {
	return fmt.Errorf("%w: qp: %s: use one from %s", verbs.ErrNil, what, make)
}

// errNilDevice is what the methods of a nil Device return.
var errNilDevice = nilError("nil *Device", "qp.New (roce: roce.Open)")

// firstQPN is the first QP number handed out, as rxe does; 0 and 1 are
// the special QPs.
const firstQPN = 0x11

// Close destroys the device's queue pairs and closes its transport.
func (d *Device) Close() error {
	if !d.ok() {
		return errNilDevice
	}
	if d.closed.Swap(true) {
		return nil
	}
	d.qpMu.Lock()
	var qps []*QP
	d.qps.each(func(q *QP) { qps = append(qps, q) })
	d.qpMu.Unlock()
	for _, q := range qps {
		d.mcast.dropQP(q)
		q.Destroy()
	}
	d.adm.mu.Lock()
	if d.adm.guard != nil {
		d.adm.guard.Stop()
	}
	d.adm.mu.Unlock()
	return d.t.Close()
}

// Progress receives and handles, on the caller's goroutine, what waits on
// the link, and reports how many packets (or datagrams) it took. It works
// in busy-poll mode only (Config.BusyPoll) and returns 0 otherwise. An
// empty CQ.Poll does the same; Progress is for programs that spin on
// memory an RDMA WRITE fills rather than on a CQ (perftest's write
// latency test), so that their spinning thread drives the receive path.
func (d *Device) Progress() int {
	if !d.ok() || d.poller == nil {
		return 0
	}
	return d.poll()
}

// PollLink receives and handles, on the caller's goroutine, what waits
// on the link, in any mode, and reports how many packets (or datagrams)
// it took; 0 when the transport is not a transport.Poller, or when its
// own receive goroutine was receiving. It is for a goroutine that spins
// while the link's receive goroutine cannot run: in a process with one
// P (GOMAXPROCS=1), that goroutine waits for the spinner's P.
func (d *Device) PollLink() int {
	if !d.ok() || d.link == nil {
		return 0
	}
	return d.pollLink()
}

// busyYieldEvery is how often a busy poll that finds nothing gives the
// core away (yield.CPU): a spinner lets the threads waiting for its core
// run within a few microseconds, and costs a dedicated core little.
const busyYieldEvery = 8

// poll receives on the caller's thread (busy-poll mode).
func (d *Device) poll() int {
	d.polled()
	d.polling.Add(1)
	n := d.poller.Poll()
	d.polling.Add(-1)
	return n
}

// pollLink receives on the caller's thread, in any mode (a waiter's
// spin); the transport is a Poller.
func (d *Device) pollLink() int {
	d.polled()
	d.polling.Add(1)
	n := d.link.Poll()
	d.polling.Add(-1)
	return n
}

// Name names the device after its address: goroce:198.18.0.1 ("" for a
// nil Device).
func (d *Device) Name() string {
	if !d.ok() {
		return ""
	}
	return "goroce:" + d.gid.String()
}

// Addr returns the address behind the device's RoCEv2 GID (index 0).
func (d *Device) Addr() netip.Addr {
	if !d.ok() {
		return netip.Addr{}
	}
	return d.gid
}

// GID returns the RoCEv2 GID of the given index: the GID table holds the
// transport's address, or its addresses (transport.Multi), in order. A
// device of one address answers for any index with its one GID, as `-g`
// picks one in rdma-core's tools.
func (d *Device) GID(index int) ([16]byte, error) {
	if !d.ok() {
		return [16]byte{}, errNilDevice
	}
	hi := 255
	if len(d.gids) > 1 {
		hi = len(d.gids) - 1
	}
	if index < 0 || index > hi {
		return [16]byte{}, fmt.Errorf("%w: GID index %d: want 0 to %d (the device's GID table)",
			verbs.ErrInvalidAttr, index, hi)
	}
	if index < len(d.gids) {
		return verbs.GIDFromAddr(d.gids[index]), nil
	}
	return verbs.GIDFromAddr(d.gid), nil
}

// GIDs returns the device's GID table, as the addresses behind the GIDs.
func (d *Device) GIDs() []netip.Addr {
	if !d.ok() {
		return nil
	}
	return append([]netip.Addr(nil), d.gids...)
}

// srcFor returns the source address of packets to dst: the device's
// first address of dst's family (IPv4 or IPv6), or its first address when
// it has none of that family.
func (d *Device) srcFor(dst netip.Addr) netip.Addr {
	switch v4 := dst.Unmap().Is4(); {
	case v4 && d.four.IsValid():
		return d.four
	case !v4 && d.six.IsValid():
		return d.six
	}
	return d.gid
}

// ActiveMTU returns the largest path MTU the transport carries.
func (d *Device) ActiveMTU() bth.MTU {
	if !d.ok() {
		return 0
	}
	m, _ := bth.MTUAtMost(d.maxPacket - bth.RCWriteFirst.HeaderLen() - bth.ICRCLen - 3)
	return m
}

// Transport returns the device's transport.
func (d *Device) Transport() transport.Transport {
	if !d.ok() {
		return nil
	}
	return d.t
}

// Logger returns the device's logger (one that discards, for a nil
// Device).
func (d *Device) Logger() *slog.Logger {
	if !d.ok() {
		return slog.New(slog.DiscardHandler)
	}
	return d.log
}

// Clock returns the device's clock (the system clock, for a nil Device).
func (d *Device) Clock() clock.Clock {
	if !d.ok() {
		return clock.Real{}
	}
	return d.clk
}

// Events returns the channel of asynchronous events (ibv_get_async_event).
// Events that find the channel full are dropped and counted. A nil Device
// has none: its channel is nil.
func (d *Device) Events() <-chan verbs.Event {
	if !d.ok() {
		return nil
	}
	return d.events
}

func (d *Device) event(e verbs.Event) {
	select {
	case d.events <- e:
	default:
		d.ctr.eventsDropped.Add(1)
	}
}

// qpTable maps 24-bit QP numbers to queue pairs without a lock on lookup:
// a directory of pages of 1,024 numbers, a page allocated when its first
// QP comes and freed when its last one goes, so that its memory follows
// the QPs that exist, not the numbers ever used.
type qpTable struct {
	dir  [1 << 14]atomic.Pointer[qpPage]
	live int // QPs in the table, under Device.qpMu
}

// qpPage holds the QPs of 1,024 consecutive numbers.
type qpPage struct {
	n  int // QPs in the page, under Device.qpMu
	qp [1 << 10]atomic.Pointer[QP]
}

func (t *qpTable) get(qpn uint32) *QP {
	c := t.dir[qpn>>10&(1<<14-1)].Load()
	if c == nil {
		return nil
	}
	return c.qp[qpn&(1<<10-1)].Load()
}

// set stores q at qpn, or removes the QP there when q is nil; the caller
// holds Device.qpMu. A reader that found the page before it was freed
// sees it empty.
func (t *qpTable) set(qpn uint32, q *QP) {
	d := &t.dir[qpn>>10&(1<<14-1)]
	c := d.Load()
	if c == nil {
		if q == nil {
			return
		}
		c = new(qpPage)
		d.Store(c)
	}
	slot := &c.qp[qpn&(1<<10-1)]
	switch old := slot.Swap(q); {
	case old == nil && q != nil:
		c.n++
		t.live++
	case old != nil && q == nil:
		c.n--
		t.live--
	}
	if c.n == 0 {
		d.Store(nil)
	}
}

// pages returns how many pages are allocated; the caller holds
// Device.qpMu.
func (t *qpTable) pages() int {
	n := 0
	for i := range t.dir {
		if t.dir[i].Load() != nil {
			n++
		}
	}
	return n
}

// each calls f for every QP; the caller holds Device.qpMu.
func (t *qpTable) each(f func(*QP)) {
	for i := range t.dir {
		c := t.dir[i].Load()
		if c == nil {
			continue
		}
		for j := range c.qp {
			if q := c.qp[j].Load(); q != nil {
				f(q)
			}
		}
	}
}

// allocQPN returns a free QP number; the caller holds qpMu.
func (d *Device) allocQPN() (uint32, error) {
	if d.qps.live >= d.maxQPs {
		return 0, fmt.Errorf("%w: %d queue pairs exist, the most this device allows: destroy some, or raise "+
			"its MaxQPs", verbs.ErrNoQPN, d.qps.live)
	}
	for range bth.MaxQPN {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN >= verbs.MulticastQPN { // 0xFFFFFF is no QP's: it names a multicast group's QPs
			d.nextQPN = firstQPN
		}
		if d.qps.get(n) == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d are in use: destroy QPs first", verbs.ErrNoQPN, verbs.MulticastQPN-firstQPN)
}

// txBatch collects the packets one pass of the engine sends, so that they
// reach the transport together. Its buffers are reused from batch to batch.
type txBatch struct {
	d    *Device
	pkts []transport.Packet
	bufs [][]byte
	held []*QP // the QPs Device.receive holds, at most maxHeldQPs
	// pinned are the regions whose bytes packets carry in place
	// (addRef): unpinned once the batch is sent.
	pinned []pin
}

// maxHeldQPs bounds the QPs one receive batch holds the locks of.
const maxHeldQPs = 64

func newTxBatch(d *Device, n int) *txBatch {
	if n < 1 {
		n = 1
	}
	b := &txBatch{d: d, pkts: make([]transport.Packet, 0, n), bufs: make([][]byte, n), held: make([]*QP, 0, maxHeldQPs)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, d.maxPacket)
	}
	return b
}

// maxFreeBatches caps the free list of send batches: one per goroutine
// that sends at once (receive loops, posting threads, timers) is enough.
const maxFreeBatches = 8

func (d *Device) getBatch() *txBatch {
	select {
	case b := <-d.batches:
		return b
	default:
		return newTxBatch(d, d.t.BatchSize())
	}
}

func (d *Device) putBatch(b *txBatch) {
	select {
	case d.batches <- b:
	default:
	}
}

// buf returns the buffer for the next packet, sending the batch first if
// it is full.
func (b *txBatch) buf() []byte {
	if len(b.pkts) == cap(b.pkts) {
		b.flush()
	}
	return b.bufs[len(b.pkts)]
}

// add queues the n bytes written into the last buf() as a packet to dst.
func (b *txBatch) add(n int, dst netip.Addr, sport uint16, tos uint8) {
	b.pkts = append(b.pkts, transport.Packet{
		Data: b.bufs[len(b.pkts)][:n], Src: b.d.srcFor(dst), Dst: dst, SrcPort: sport, TOS: tos,
	})
}

// addRef queues a packet whose payload stays in registered memory: the
// hdr bytes of headers written into the last buf() are followed there by
// the four bytes of the ICRC, and the transport sends payload between
// them, with no copy (transport.Packet.Payload). m, the region payload
// lies in, was pinned (mr.MR.Pin) by the caller; flush unpins it.
func (b *txBatch) addRef(hdr int, payload []byte, m pin, dst netip.Addr, sport uint16, tos uint8) {
	b.pinned = append(b.pinned, m)
	b.pkts = append(b.pkts, transport.Packet{
		Data: b.bufs[len(b.pkts)][:hdr+bth.ICRCLen], Payload: payload, Src: b.d.srcFor(dst), Dst: dst, SrcPort: sport,
		TOS: tos,
	})
}

// pin is a region pinned (mr.MR.Pin) for the QP numbered qp.
type pin struct {
	m  *mr.MR
	qp uint64
}

// minRefPayload is the smallest payload sent from registered memory in
// place rather than copied: below it, the copy is cheaper than the two
// more iovecs of the send.
const minRefPayload = 512

// flush hands the queued packets to the transport.
func (b *txBatch) flush() {
	if len(b.pkts) == 0 {
		return
	}
	if err := b.d.t.Send(b.pkts); err != nil {
		b.d.ctr.sendErr.Add(1)
	}
	clear(b.pkts) // no references to the regions' memory left behind
	b.pkts = b.pkts[:0]
	for i, p := range b.pinned {
		p.m.Unpin(p.qp)
		b.pinned[i] = pin{}
	}
	b.pinned = b.pinned[:0]
}

var (
	_ verbs.Device = (*Device)(nil)
	_ verbs.PD     = (*PD)(nil)
	_ verbs.QP     = (*QP)(nil)
	_ verbs.CQ     = (*CQ)(nil)
	_ verbs.SRQ    = (*SRQ)(nil)
	_ verbs.AH     = (*AH)(nil)
	_ verbs.MR     = (*mr.MR)(nil)
	_ verbs.MW     = (*MW)(nil)
)

// Linger keeps the device answering until its link has been quiet (no
// packet received) for quiet, or until ctx ends; it measures real time.
// A program calls it after its last completion and before Close: the
// peer may not yet have the ACK of the last request it sent, and sends
// that request again until it does (without end, with a retry count of
// 7, as rxe counts), which a closed device would leave unanswered. TCP's
// TIME_WAIT does the same for the last segment's ACK.
func (d *Device) Linger(ctx context.Context, quiet time.Duration) error {
	if !d.ok() {
		return errNilDevice
	}
	tick := max(quiet/8, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	last, since := d.t.Stats().RxPackets, time.Now()
	for {
		if d.poller != nil && !d.closed.Load() {
			d.poll() // busy-poll mode: nobody else receives
		}
		if n := d.t.Stats().RxPackets; n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// HasGSI reports whether the device has a General Services QP (QP 1),
// that is whether anything on it serves management datagrams (a CM
// agent, or the program itself). It takes no lock. A nil Device has none.
func (d *Device) HasGSI() bool { return d.ok() && d.qps.get(1) != nil }
