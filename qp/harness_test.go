package qp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
)

// end is one side of a test connection: a device, a PD, CQs and a QP.
type end struct {
	dev *Device
	pd  *PD
	cq  *CQ
	qp  *QP
}

// pair is two devices on a simulated network with a connected QP each.
type pair struct {
	t    testing.TB
	net  *mem.Network
	a, b end
	seed uint64
}

type pairOpts struct {
	typ       verbs.QPType
	mtu       bth.MTU
	faults    mem.Faults
	seed      uint64
	cap       verbs.QPCap
	srq       bool
	timeout   uint8
	retry     uint8
	rnrRetry  uint8
	minRNR    uint8
	rdAtomic  uint8
	access    verbs.Access
	maxUnack  int
	cqe       int
	signalAll bool
	// live runs the network on its own goroutines in real time.
	live bool
	// cc is both devices' congestion control (nil: the default).
	cc *congestion.Config
	// noProbes turns the loss probes off: only the local ACK timeout
	// sends again.
	noProbes bool
	// wrapB, when set, wraps B's link (to drop chosen packets).
	wrapB func(transport.Transport) transport.Transport
}

func (o *pairOpts) defaults() {
	if o.typ == 0 {
		o.typ = verbs.RC
	}
	if o.mtu == 0 {
		o.mtu = bth.MTU1024
	}
	if o.cap.MaxSendWR == 0 {
		o.cap = verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 128}
	}
	if o.timeout == 0 {
		o.timeout = 14
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.access == 0 {
		o.access = verbs.LocalWrite | verbs.RemoteAccess
	}
	if o.cqe == 0 {
		o.cqe = 4096
	}
}

var (
	addrA = netip.MustParseAddr("198.18.0.1")
	addrB = netip.MustParseAddr("198.18.0.2")
)

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	o.defaults()
	n := mem.NewNetwork(&mem.Config{Seed: o.seed, Faults: o.faults, Live: o.live})
	p := &pair{t: t, net: n, seed: o.seed}
	p.a = newEnd(t, n, addrA, o, nil)
	p.b = newEnd(t, n, addrB, o, o.wrapB)
	connect(t, &p.a, &p.b, o)
	connect(t, &p.b, &p.a, o)
	t.Cleanup(func() {
		p.a.dev.Close()
		p.b.dev.Close()
		n.Close()
	})
	return p
}

func newEnd(t testing.TB, n *mem.Network, addr netip.Addr, o pairOpts, wrap func(transport.Transport) transport.Transport) end {
	t.Helper()
	ep, err := n.Endpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	var tr transport.Transport = ep
	if wrap != nil {
		tr = wrap(tr)
	}
	if os.Getenv("GOROCE_TRACE") != "" {
		tr = traceTransport{ep, addr.String()}
	}
	cfg := &Config{Clock: n.Clock(), MaxUnackedPSNs: o.maxUnack, Logger: testLogger(t), Congestion: o.cc}
	if o.noProbes {
		cfg.LossProbe = -1
	}
	d, err := New(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	e := end{dev: d, pd: pd.(*PD)}
	cq, err := d.CreateCQ(o.cqe)
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq.(*CQ)
	init := &verbs.QPInitAttr{Type: o.typ, SendCQ: e.cq, RecvCQ: e.cq, Cap: o.cap, SignalAll: o.signalAll}
	if o.srq {
		if init.SRQ, err = e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: o.cap.MaxRecvWR, MaxSGE: o.cap.MaxRecvSGE}); err != nil {
			t.Fatal(err)
		}
	}
	if e.qp, err = d.createQP(e.pd, init); err != nil {
		t.Fatal(err)
	}
	return e
}

// morePairs adds n-1 connected QP pairs to p's devices, and returns all n
// ends on each side (p.a and p.b first).
func morePairs(t *testing.T, p *pair, o pairOpts, n int) (as, bs []*end) {
	t.Helper()
	o.defaults()
	as, bs = []*end{&p.a}, []*end{&p.b}
	for range n - 1 {
		a, b := p.a, p.b
		var err error
		a.qp, err = p.a.dev.createQP(a.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: a.cq, RecvCQ: a.cq, Cap: o.cap})
		must(t, err)
		b.qp, err = p.b.dev.createQP(b.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: b.cq, RecvCQ: b.cq, Cap: o.cap})
		must(t, err)
		connect(t, &a, &b, o)
		connect(t, &b, &a, o)
		as, bs = append(as, &a), append(bs, &b)
	}
	return as, bs
}

// streamAll posts msgs WRITEs of size bytes on each of the QPs as, into
// each QP's own part of a region of B's, and returns the source and
// destination regions.
func streamAll(t *testing.T, p *pair, as []*end, msgs, size int) (src, dst []byte) {
	t.Helper()
	s, d := p.a.reg(t, len(as)*size), p.b.reg(t, len(as)*size)
	fill(s.Bytes(), 5)
	for i, e := range as {
		var wrs []verbs.SendWR
		for range msgs {
			wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.OpWrite, Flags: verbs.Signaled,
				SGL: []verbs.SGE{sge(s, i*size, size)}, RemoteAddr: d.Addr() + uint64(i*size), RKey: d.RKey()})
		}
		must(t, e.qp.PostSend(wrs))
	}
	return s.Bytes(), d.Bytes()
}

// connect moves e's QP to RTS towards peer, as the out-of-band exchange
// of a pingpong program does.
func connect(t testing.TB, e, peer *end, o pairOpts) {
	t.Helper()
	q := e.qp
	a := verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: o.access, QKey: 0x11111111}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	if o.typ == verbs.UD {
		mask = verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
	}
	must(t, q.Modify(&a, mask))
	a = verbs.QPAttr{State: verbs.StateRTR, PathMTU: o.mtu, DestQPN: peer.qp.QPN(), RQPSN: 0xFFFFF0, MaxDestRDAtomic: o.rdAtomic,
		MinRNRTimer: o.minRNR, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(peer.dev.Addr())}}
	switch o.typ {
	case verbs.RC:
		mask = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer
	case verbs.UC:
		mask = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	default:
		mask = verbs.AttrState
	}
	must(t, q.Modify(&a, mask))
	// Both sides start at PSN 0xFFFFF0 so every test crosses the 24-bit wrap.
	a = verbs.QPAttr{State: verbs.StateRTS, SQPSN: 0xFFFFF0, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry,
		MaxRDAtomic: o.rdAtomic}
	mask = verbs.AttrState | verbs.AttrSQPSN
	if o.typ == verbs.RC {
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRDAtomic
	}
	must(t, q.Modify(&a, mask))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// reg registers a buffer of n bytes in e's PD with every right.
func (e *end) reg(t testing.TB, n int) *mr.MR {
	t.Helper()
	m, err := e.pd.pd.Register(make([]byte, n), verbs.LocalWrite|verbs.RemoteAccess)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sge(m *mr.MR, off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

// run drives the network until e has want completions, and returns them.
func (p *pair) poll(e *end, want int) []verbs.WC {
	p.t.Helper()
	var got []verbs.WC
	buf := make([]verbs.WC, 64)
	err := p.net.Run(func() bool {
		n := e.cq.Poll(buf)
		got = append(got, buf[:n]...)
		return len(got) >= want
	}, time.Minute)
	if err != nil {
		p.t.Fatalf("seed %d: waiting for %d completions, got %d: %v\n%s", p.seed, want, len(got), err, p.debug())
	}
	return got
}

// settle runs the network until nothing is left to do or a simulated
// second passed, and returns any completions that came.
func (p *pair) settle(e *end) []verbs.WC {
	p.t.Helper()
	p.net.Run(func() bool { return false }, time.Second)
	var got []verbs.WC
	buf := make([]verbs.WC, 64)
	for n := e.cq.Poll(buf); n > 0; n = e.cq.Poll(buf) {
		got = append(got, buf[:n]...)
	}
	return got
}

// drain runs the network until nothing is in flight and no timer is due.
func (p *pair) drain() {
	p.t.Helper()
	if err := p.net.Run(func() bool { return false }, time.Minute); err != mem.ErrIdle {
		p.t.Fatalf("seed %d: drain: %v", p.seed, err)
	}
}

func (p *pair) debug() string {
	return fmt.Sprintf("A: %v state=%v counters: %s\nB: %v state=%v counters: %s\nnet: %+v",
		p.a.qp.QPN(), p.a.qp.State(), ptr(p.a.qp.Counters()), p.b.qp.QPN(), p.b.qp.State(),
		ptr(p.b.qp.Counters()), p.net.Stats())
}

func ptr(c Counters) *Counters { return &c }

// fill writes a pattern that differs per byte and per seed.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
}

var _ = bth.PSN(0)

// testLogger logs the engine's debug records through t when -v and the
// GOROCE_DEBUG environment variable are set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("GOROCE_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// newPD returns a fresh engine PD of d.
func newPD(d *Device) *mr.PD {
	pd, err := d.AllocPD()
	if err != nil {
		panic(err)
	}
	return pd.(*PD).pd
}
