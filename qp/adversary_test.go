package qp

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// The adversary: goroce's device on a fakeLink with one QP in RTS,
// connected to a peer that exists only as the packets a test builds. A
// case plays a hostile requester (goroce is the responder) or a hostile
// responder (goroce is the requester) and checks what goroce answers, the
// completions, the QP's state, the asynchronous events, the counters and
// the memory.

var (
	advLocal = netip.MustParseAddr("198.18.0.2") // goroce
	advPeer  = netip.MustParseAddr("198.18.0.1") // the adversary
)

const (
	advPeerQPN = 0x99
	advRQPSN   = bth.PSN(0xFFFFFE) // the peer's first request PSN: +2 wraps to 0
	advSQPSN   = bth.PSN(0xFFFFFD) // goroce's first request PSN: +3 wraps to 0
	advMemLen  = 16 << 10
	advQKey    = 0x11111111 // a UD QP's
)

type advOpts struct {
	typ       verbs.QPType
	mtu       bth.MTU      // MTU256 when 0
	access    verbs.Access // every remote right when 0
	noDestRD  bool         // max_dest_rd_atomic 0 (4 otherwise)
	srq       bool
	recvs     int    // receives of 4 KiB posted before the case
	retry     *uint8 // retry_cnt, 7 when nil
	rnrRetry  *uint8 // rnr_retry, 7 when nil
	cqe       int
	maxUnack  int
	sigAll    bool
	rdAtomic  uint8 // max_rd_atomic, 4 when 0
	srqLimit  uint32
	noTimeout bool // timeout 0: no retransmission timer
	rtr       bool // leave the QP in RTR
	mwBind    bool // mr allows memory windows
	mrFlush   bool // mr allows FLUSH of the global placement type
	seqWindow int  // Config.SeqNAKWindow
	// probes turns loss probes on (qp/probe.go): off, the cases script
	// the local ACK timeout alone.
	probes bool
	// cc is the device's congestion control (nil: the default, Auto).
	cc *congestion.Config
}

type adversary struct {
	t    *testing.T
	link *fakeLink
	clk  *clock.Manual
	dev  *Device
	pd   *PD
	cq   *CQ
	srq  *SRQ
	qp   *QP
	mtu  int
	// mr is the memory the peer's RDMA requests name (every right), rbuf
	// the receives', lbuf the local side of goroce's own requests; orig
	// and lorig are mr's and lbuf's contents at the start.
	mr, rbuf, lbuf *mr.MR
	orig, lorig    []byte
	events         []verbs.Event
}

func newAdversary(t *testing.T, o advOpts) *adversary {
	t.Helper()
	if o.typ == 0 {
		o.typ = verbs.RC
	}
	if o.mtu == 0 {
		o.mtu = bth.MTU256
	}
	if o.access == 0 {
		o.access = verbs.LocalWrite | verbs.RemoteAccess
	}
	if o.cqe == 0 {
		o.cqe = 256
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 4
	}
	if o.retry == nil {
		o.retry = u8(7)
	}
	if o.rnrRetry == nil {
		o.rnrRetry = u8(7)
	}
	a := &adversary{t: t, link: &fakeLink{addr: advLocal}, clk: clock.NewManual(time.Unix(1e9, 0)), mtu: o.mtu.Bytes()}
	cfg := &Config{Clock: a.clk, Logger: testLogger(t), MaxUnackedPSNs: o.maxUnack, SeqNAKWindow: o.seqWindow, LossProbe: -1,
		Congestion: o.cc}
	if o.probes {
		cfg.LossProbe = 0
	}
	dev, err := New(a.link, cfg)
	must(t, err)
	t.Cleanup(func() { dev.Close() })
	a.dev = dev
	pdi, _ := dev.AllocPD()
	a.pd = pdi.(*PD)
	cqi, err := dev.CreateCQ(o.cqe)
	must(t, err)
	a.cq = cqi.(*CQ)
	init := &verbs.QPInitAttr{Type: o.typ, SendCQ: a.cq, RecvCQ: a.cq, SignalAll: o.sigAll,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}}
	if o.srq {
		s, err := a.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 64, MaxSGE: 2, Limit: o.srqLimit})
		must(t, err)
		a.srq, init.SRQ = s.(*SRQ), s
	}
	a.qp, err = dev.createQP(a.pd, init)
	must(t, err)
	mrAccess := verbs.LocalWrite | verbs.RemoteAccess
	if o.mwBind {
		mrAccess |= verbs.MWBind
	}
	if o.mrFlush {
		mrAccess |= verbs.FlushGlobal
	}
	a.mr = a.register(mrAccess, 1)
	a.rbuf = a.register(verbs.LocalWrite, 2)
	a.lbuf = a.register(verbs.LocalWrite, 3)
	a.orig, a.lorig = bytes.Clone(a.mr.Bytes()), bytes.Clone(a.lbuf.Bytes())
	q := a.qp
	init2 := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	if o.typ == verbs.UD {
		init2 = verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
	}
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: o.access, QKey: advQKey}, init2))
	for i := range o.recvs {
		a.postRecv(uint64(100+i), i*4096, 4096)
	}
	rd := uint8(4)
	if o.noDestRD {
		rd = 0
	}
	rtr := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	switch o.typ {
	case verbs.UD:
		rtr = verbs.AttrState
	case verbs.RC:
		rtr |= verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer
	}
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: o.mtu, DestQPN: advPeerQPN, RQPSN: advRQPSN,
		MaxDestRDAtomic: rd, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(advPeer)}}, rtr))
	if o.rtr {
		return a
	}
	timeout := uint8(14)
	if o.noTimeout {
		timeout = 0
	}
	rts := verbs.AttrState | verbs.AttrSQPSN
	if o.typ == verbs.RC {
		rts |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRDAtomic
	}
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: advSQPSN, Timeout: timeout, RetryCnt: *o.retry,
		RNRRetry: *o.rnrRetry, MaxRDAtomic: o.rdAtomic}, rts))
	return a
}

func u8(v uint8) *uint8 { return &v }

func (a *adversary) register(access verbs.Access, seed int) *mr.MR {
	m, err := a.pd.pd.Register(make([]byte, advMemLen), access)
	must(a.t, err)
	fill(m.Bytes(), seed)
	return m
}

func (a *adversary) postRecv(id uint64, off, n int) {
	wr := []verbs.RecvWR{{ID: id, SGL: []verbs.SGE{sge(a.rbuf, off, n)}}}
	if a.srq != nil {
		must(a.t, a.srq.PostRecv(wr))
		return
	}
	must(a.t, a.qp.PostRecv(wr))
}

// wire is a packet the adversary sends.
type wire struct {
	f       bth.BTHFields
	payload []byte
	pad     int // -1: the pad the payload needs
	reth    *bth.RETHFields
	feth    *bth.FETHFields
	atomic  *bth.AtomicETHFields
	syn     bth.Syndrome
	msn     uint32
	orig    uint64
	imm     uint32
	ieth    uint32
	qkey    uint32
	tos     uint8      // the TOS byte it arrives with
	src     netip.Addr // the peer when not valid
	dst     netip.Addr // goroce when not valid
}

// req returns a request of the peer at PSN advRQPSN+off with n bytes of
// payload (a pattern that differs from every buffer's).
func (a *adversary) req(op bth.Opcode, off, n int) *wire {
	w := &wire{f: bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: a.qp.QPN(), PSN: advRQPSN.Add(uint32(off))},
		pad: -1, payload: make([]byte, n)}
	fill(w.payload, 9+off)
	return w
}

// resp returns a response of the peer at PSN advSQPSN+off with n bytes of
// payload and, where the opcode has an AETH, an ACK syndrome.
func (a *adversary) resp(op bth.Opcode, off, n int) *wire {
	w := a.req(op, 0, n)
	w.f.PSN = advSQPSN.Add(uint32(off))
	w.syn = bth.ACKSyndrome(bth.NoCredits)
	fill(w.payload, 7+off)
	return w
}

// ackAt returns an ACKNOWLEDGE of the peer at advSQPSN+off with syndrome s.
func (a *adversary) ackAt(off int, s bth.Syndrome) *wire {
	return a.resp(bth.RCAcknowledge, off, 0).withSyn(s)
}

func (w *wire) ack() *wire                   { w.f.AckReq = true; return w }
func (w *wire) withSyn(s bth.Syndrome) *wire { w.syn = s; return w }
func (w *wire) withOrig(v uint64) *wire      { w.orig = v; return w }
func (w *wire) withPad(n int) *wire          { w.pad = n; return w }
func (w *wire) withPKey(k uint16) *wire      { w.f.PKey = k; return w }
func (w *wire) withQKey(k uint32) *wire      { w.qkey = k; return w }
func (w *wire) withDestQP(n uint32) *wire    { w.f.DestQP = n; return w }
func (w *wire) withTVer(v uint8) *wire       { w.f.TVer = v; return w }
func (w *wire) from(src netip.Addr) *wire    { w.src = src; return w }
func (w *wire) withTOS(tos uint8) *wire      { w.tos = tos; return w }
func (w *wire) to(dst netip.Addr) *wire      { w.dst = dst; return w }
func (w *wire) atomicOf(va uint64, k uint32, swapAdd, cmp uint64) *wire {
	w.atomic = &bth.AtomicETHFields{VA: va, RKey: k, SwapAdd: swapAdd, Compare: cmp}
	return w
}
func (w *wire) fethOf(level verbs.FlushLevel, plt verbs.PlacementType) *wire {
	w.feth = &bth.FETHFields{Selectivity: uint8(level), Placement: uint8(plt)}
	return w
}
func (w *wire) rethOf(va uint64, k, n uint32) *wire {
	w.reth = &bth.RETHFields{VA: va, RKey: k, DMALen: n}
	return w
}

// bytes encodes the packet, BTH through an ICRC of zeros (the fake link
// does not check it).
func (w *wire) bytes() []byte {
	info := w.f.Opcode.Info()
	pad := w.pad
	if pad < 0 {
		pad = bth.PadCount(len(w.payload))
	}
	b := make([]byte, info.HeaderLen+len(w.payload)+pad+bth.ICRCLen)
	f := w.f
	f.PadCount = uint8(pad)
	bth.BTH(b).Encode(&f)
	var p bth.Packet
	if err := p.Parse(b); err != nil {
		panic(err)
	}
	if p.RETH != nil && w.reth != nil {
		p.RETH.Encode(w.reth)
	}
	if p.AtomicETH != nil && w.atomic != nil {
		p.AtomicETH.Encode(w.atomic)
	}
	if p.FETH != nil && w.feth != nil {
		p.FETH.Encode(w.feth)
	}
	if p.AETH != nil {
		p.AETH.Encode(&bth.AETHFields{Syndrome: w.syn, MSN: w.msn})
	}
	if p.AtomicAckETH != nil {
		p.AtomicAckETH.Encode(&bth.AtomicAckETHFields{Orig: w.orig})
	}
	if p.ImmDt != nil {
		p.ImmDt.Encode(&bth.ImmDtFields{Imm: w.imm})
	}
	if p.IETH != nil {
		p.IETH.Encode(&bth.IETHFields{RKey: w.ieth})
	}
	if p.DETH != nil {
		p.DETH.Encode(&bth.DETHFields{QKey: w.qkey, SrcQP: advPeerQPN})
	}
	copy(b[info.HeaderLen:], w.payload)
	return b
}

// inject hands the packets to goroce as one receive batch.
func (a *adversary) inject(ws ...*wire) {
	pkts := make([]transport.Packet, len(ws))
	for i, w := range ws {
		pkts[i] = transport.Packet{Data: w.bytes(), Src: advPeer, Dst: advLocal, TOS: w.tos}
		if w.src.IsValid() {
			pkts[i].Src = w.src
		}
		if w.dst.IsValid() {
			pkts[i].Dst = w.dst
		}
	}
	a.link.h(pkts)
}

// sent returns what goroce sent since the last call, one line per packet:
// the opcode without its transport, the PSN as an offset from the peer's
// first PSN (answers) or from goroce's (requests), the syndrome of a NAK,
// the payload length.
func (a *adversary) sent() []string {
	var out []string
	for _, s := range a.link.take() {
		var p bth.Packet
		must(a.t, p.Parse(s.Data))
		base := advRQPSN
		if isRequest(p.Info.Operation) {
			base = advSQPSN
		}
		line := fmt.Sprintf("%s @%d", strings.TrimPrefix(p.BTH.Opcode().String(), "RC_"), p.BTH.PSN().Diff(base))
		if p.AETH != nil && p.AETH.Syndrome().Kind() != bth.KindACK {
			line += " " + p.AETH.Syndrome().String()
		}
		if p.Info.Payload {
			line += fmt.Sprintf(" %dB", len(p.Payload))
		}
		out = append(out, line)
	}
	return out
}

// polled returns the completions waiting, one line per completion: the
// work request's ID and the status.
func (a *adversary) polled() []string {
	var out []string
	wcs := make([]verbs.WC, 64)
	for n := a.cq.Poll(wcs); n > 0; n = a.cq.Poll(wcs) {
		for _, wc := range wcs[:n] {
			out = append(out, fmt.Sprintf("%d %v", wc.ID, wc.Status))
		}
	}
	return out
}

// takeEvents returns the asynchronous events raised since the last call.
func (a *adversary) takeEvents() []verbs.EventType {
	var out []verbs.EventType
	for {
		select {
		case e := <-a.dev.Events():
			a.events = append(a.events, e)
			out = append(out, e.Type)
		default:
			return out
		}
	}
}

// counter returns the QP's counter with the given rdma name.
func (a *adversary) counter(name string) uint64 {
	c := a.qp.Counters()
	var v uint64
	found := false
	c.Each(func(n string, x uint64) {
		if n == name {
			v, found = x, true
		}
	})
	if !found {
		a.t.Fatalf("no counter %q", name)
	}
	return v
}

// post posts goroce's own work requests.
func (a *adversary) post(wrs ...verbs.SendWR) {
	a.t.Helper()
	must(a.t, a.qp.PostSend(wrs))
}

// Remote memory goroce's requests name: the peer is not real, any address
// and key do.
const (
	advRemoteVA   = 0x10000
	advRemoteRKey = 0x4242
)

// write returns a signaled WRITE of n bytes from lbuf at off.
func (a *adversary) write(id uint64, off, n int) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(a.lbuf, off, n)},
		RemoteAddr: advRemoteVA, RKey: advRemoteRKey}
}

// read returns a signaled READ of n bytes into lbuf at off.
func (a *adversary) read(id uint64, off, n int) verbs.SendWR {
	w := a.write(id, off, n)
	w.Opcode = verbs.OpRead
	return w
}

// fetchAdd returns a signaled FETCH_AND_ADD into lbuf at off.
func (a *adversary) fetchAdd(id uint64, off int) verbs.SendWR {
	w := a.write(id, off, 8)
	w.Opcode, w.CompareAdd = verbs.OpAtomicFetchAdd, 1
	return w
}

// fire advances the clock to goroce's next timer and runs it.
func (a *adversary) fire() {
	a.t.Helper()
	next, ok := a.clk.Next()
	if !ok {
		a.t.Fatal("no timer pending")
	}
	a.clk.AdvanceTo(next)
}

// modify moves the QP to state st.
func (a *adversary) modify(st verbs.QPState) {
	a.t.Helper()
	must(a.t, a.qp.Modify(&verbs.QPAttr{State: st}, verbs.AttrState))
}

// check is what a case expects after its packets: the packets goroce
// sent, the completions, the QP's state, the events, counters that must
// have these values, and whether the memory the peer names (mr) and the
// local buffer of goroce's requests from byte lfrom on may have changed.
type check struct {
	sent    []string
	wcs     []string
	state   verbs.QPState
	events  []verbs.EventType
	ctrs    map[string]uint64
	changed bool // mr may change (the request was carried out)
	lfrom   int  // lbuf is unchanged from this byte on; -1 to skip
}

func (a *adversary) expect(c check) {
	a.t.Helper()
	if got := a.sent(); !slices.Equal(got, c.sent) {
		a.t.Errorf("goroce sent %q, want %q", got, c.sent)
	}
	if got := a.polled(); !slices.Equal(got, c.wcs) {
		a.t.Errorf("completions %q, want %q", got, c.wcs)
	}
	if got := a.qp.State(); got != c.state {
		a.t.Errorf("state %v, want %v", got, c.state)
	}
	if got := a.takeEvents(); !slices.Equal(got, c.events) {
		a.t.Errorf("events %v, want %v", got, c.events)
	}
	for name, want := range c.ctrs {
		if got := a.counter(name); got != want {
			a.t.Errorf("counter %s = %d, want %d", name, got, want)
		}
	}
	if !c.changed && !bytes.Equal(a.mr.Bytes(), a.orig) {
		a.t.Error("the memory the peer named changed")
	}
	if c.lfrom >= 0 && !bytes.Equal(a.lbuf.Bytes()[c.lfrom:], a.lorig[c.lfrom:]) {
		a.t.Errorf("the local buffer changed from byte %d on", c.lfrom)
	}
	if a.t.Failed() {
		c := a.qp.Counters()
		a.t.Logf("counters: %s", &c)
	}
}
