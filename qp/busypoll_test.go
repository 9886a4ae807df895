package qp

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// pollLink is one end of a two-end link that delivers only when polled
// (a transport.Poller with no goroutine of its own), and records the
// opcodes of each Send call. With signal set (waitLink), a Send signals
// the peer and a Poll records which goroutine handed the batch over.
type pollLink struct {
	mu      sync.Mutex
	addr    netip.Addr
	peer    *pollLink
	h       transport.Handler
	inbox   []transport.Packet
	sends   [][]bth.Opcode // opcodes of each Send call
	signal  chan struct{}  // cap 1: a packet came, or a Wake; nil: no waits
	handers []uint64       // the goroutine that handed each batch over, with signal
}

func newPollLinks() (a, b *pollLink) {
	a = &pollLink{addr: addrA}
	b = &pollLink{addr: addrB, peer: a}
	a.peer = b
	return a, b
}

func (l *pollLink) Start(h transport.Handler) error { l.h = h; return nil }
func (l *pollLink) Send(pkts []transport.Packet) error {
	var ops []bth.Opcode
	var copies []transport.Packet
	for _, p := range pkts {
		ops = append(ops, bth.BTH(p.Data).Opcode())
		p.Data, p.Payload = p.AppendTo(nil), nil
		p.Src = l.addr
		copies = append(copies, p)
	}
	l.mu.Lock()
	l.sends = append(l.sends, ops)
	l.mu.Unlock()
	l.peer.mu.Lock()
	l.peer.inbox = append(l.peer.inbox, copies...)
	l.peer.mu.Unlock()
	if l.peer.signal != nil {
		select {
		case l.peer.signal <- struct{}{}:
		default:
		}
	}
	return nil
}
func (l *pollLink) Poll() int {
	l.mu.Lock()
	in := l.inbox
	l.inbox = nil
	if len(in) > 0 && l.signal != nil {
		l.handers = append(l.handers, goid())
	}
	l.mu.Unlock()
	if len(in) > 0 {
		l.h(in)
	}
	return len(in)
}
func (l *pollLink) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inbox)
}
func (l *pollLink) takeSends() [][]bth.Opcode {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sends
	l.sends = nil
	return s
}
func (l *pollLink) LocalAddr() netip.Addr  { return l.addr }
func (l *pollLink) BatchSize() int         { return 64 }
func (l *pollLink) MaxPacket() int         { return 4096 + 64 }
func (l *pollLink) Stats() transport.Stats { return transport.Stats{} }
func (l *pollLink) Close() error           { return nil }

// busyEnd makes a busy-poll device on l with a connected-to-be RC QP.
func busyEnd(t *testing.T, l *pollLink, clk clock.Clock) end {
	t.Helper()
	return pollEnd(t, l, clk, true)
}

// pollEnd makes a device on l, in busy-poll mode when busy, with a
// connected-to-be RC QP.
func pollEnd(t *testing.T, l *pollLink, clk clock.Clock, busy bool) end {
	t.Helper()
	d, err := New(l, &Config{Clock: clk, BusyPoll: busy, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	must(t, err)
	e := end{dev: d, pd: pd.(*PD)}
	cq, err := d.CreateCQ(64)
	must(t, err)
	e.cq = cq.(*CQ)
	e.qp, err = d.createQP(e.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return e
}

// TestBusyPollDeferredAck checks the deferred ACK of busy-poll mode: the
// ACK for what a poll received leaves with the answer the program posts
// next, in one Send; the next poll, a timer, a Destroy and a Modify each
// send it when no answer comes.
func TestBusyPollDeferredAck(t *testing.T) {
	la, lb := newPollLinks()
	clk := clock.NewManual(time.Unix(0, 0))
	a, b := busyEnd(t, la, clk), busyEnd(t, lb, clk)
	o := pairOpts{}
	o.defaults()
	connect(t, &a, &b, o)
	connect(t, &b, &a, o)
	ma, mb := a.reg(t, 4096), b.reg(t, 4096)
	wc := make([]verbs.WC, 8)

	// ping sends a SEND from a to b, and polls b until its receive
	// completes.
	ping := func(id uint64) {
		t.Helper()
		must(t, b.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{sge(mb, 0, 64)}}}))
		must(t, a.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled,
			SGL: []verbs.SGE{sge(ma, 0, 32)}}}))
		if n := b.cq.Poll(wc); n != 1 || wc[0].Opcode != verbs.WCRecv || wc[0].Status != verbs.Success {
			t.Fatalf("b polled %d: %+v", n, wc[0])
		}
		if n := la.waiting(); n != 0 {
			t.Fatalf("the ACK went out before b's next step: %d packets for a", n)
		}
		lb.takeSends()
	}
	// acked checks that a's SEND completes from what waits for a.
	acked := func(what string) {
		t.Helper()
		if n := la.waiting(); n != 1 {
			t.Fatalf("%s: %d packets wait for a, want the ACK", what, n)
		}
		if n := a.cq.Poll(wc); n != 1 || wc[0].Opcode != verbs.WCSend || wc[0].Status != verbs.Success {
			t.Fatalf("%s: a polled %d: %+v", what, n, wc[0])
		}
	}

	// The answer carries the ACK, after it (one GSO send where the link
	// has it): one Send with both; a handles the ACK first all the same.
	ping(1)
	must(t, a.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{sge(ma, 64, 64)}}}))
	must(t, b.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{sge(mb, 64, 16)}}}))
	sends := lb.takeSends()
	if len(sends) != 1 || !slices.Equal(sends[0], []bth.Opcode{bth.RCSendOnly, bth.RCAcknowledge}) {
		t.Fatalf("b's answer went out as %v, want one Send of the SEND, then the ACK", sends)
	}
	if n := a.cq.Poll(wc); n != 2 || wc[0].Opcode != verbs.WCSend || wc[0].ID != 1 || wc[1].Opcode != verbs.WCRecv {
		t.Fatalf("a polled %d completions (%+v), want its SEND's, then its receive's", n, wc[:n])
	}
	// a's ACK for b's SEND waits in turn, and a's next poll sends it.
	if n := a.cq.Poll(wc); n != 0 {
		t.Fatalf("a polled %d", n)
	}
	if n := b.cq.Poll(wc); n != 1 || wc[0].Opcode != verbs.WCSend || wc[0].ID != 2 {
		t.Fatalf("b polled %d: %+v", n, wc[0])
	}
	if sa, sb := a.qp.Counters().AcksSent, b.qp.Counters().AcksSent; sa != 1 || sb != 1 {
		t.Fatalf("ACKs sent: a %d, b %d; want 1 each", sa, sb)
	}

	// A longer answer: the ACK goes first, not to wait behind it.
	ping(7)
	must(t, a.qp.PostRecv([]verbs.RecvWR{{ID: 10, SGL: []verbs.SGE{sge(ma, 0, 4096)}}}))
	must(t, b.qp.PostSend([]verbs.SendWR{{ID: 8, Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(mb, 0, 2048)}}}))
	sends = lb.takeSends()
	if len(sends) != 1 || !slices.Equal(sends[0], []bth.Opcode{bth.RCAcknowledge, bth.RCSendFirst, bth.RCSendLast}) {
		t.Fatalf("b's two-packet answer went out as %v, want one Send of the ACK, then the SEND", sends)
	}
	if n := a.cq.Poll(wc); n != 2 || wc[0].Opcode != verbs.WCSend || wc[0].ID != 7 || wc[1].ID != 10 {
		t.Fatalf("a polled %d completions (%+v), want its SEND's, then its receive's", n, wc[:n])
	}
	if n := a.cq.Poll(wc); n != 0 { // a's ACK for the answer goes with its next poll
		t.Fatalf("a polled %d", n)
	}
	lb.takeSends()

	// No answer: the next poll sends it.
	ping(3)
	if n := b.cq.Poll(wc); n != 0 {
		t.Fatalf("b polled %d", n)
	}
	acked("next poll")

	// No answer and no poll: the timer sends it.
	ping(4)
	clk.Advance(ackDeferMax - time.Microsecond)
	if n := la.waiting(); n != 0 {
		t.Fatalf("the ACK went out %v early", time.Microsecond)
	}
	clk.Advance(time.Microsecond)
	acked("timer")

	// A Modify sends it before the state changes, a Destroy before the
	// QP goes.
	ping(5)
	must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.StateSQD}, verbs.AttrState))
	acked("modify")
	ping(6)
	must(t, b.qp.Destroy())
	acked("destroy")
	clk.Advance(time.Second) // nothing is left to fire
	if n := la.waiting(); n != 0 {
		t.Fatalf("%d packets after the destroy", n)
	}
}

// TestReceiveBatchesAcrossQPs delivers one batch with a SEND for each of
// four QPs: the four ACKs leave in one Send. Then, with the lock of one
// QP held elsewhere, the receive path first sends what the QPs it holds
// answered, and only then waits for that lock.
func TestReceiveBatchesAcrossQPs(t *testing.T) {
	la, lb := newPollLinks()
	clk := clock.NewManual(time.Unix(0, 0))
	o := pairOpts{}
	o.defaults()
	var as, bs []end
	newDev := func(l *pollLink) end {
		d, err := New(l, &Config{Clock: clk, Logger: testLogger(t)})
		must(t, err)
		t.Cleanup(func() { d.Close() })
		pd, err := d.AllocPD()
		must(t, err)
		cq, err := d.CreateCQ(64)
		must(t, err)
		return end{dev: d, pd: pd.(*PD), cq: cq.(*CQ)}
	}
	da, db := newDev(la), newDev(lb)
	for range 4 {
		a, b := da, db
		var err error
		a.qp, err = da.dev.createQP(da.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: da.cq, RecvCQ: da.cq, Cap: o.cap})
		must(t, err)
		b.qp, err = db.dev.createQP(db.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: db.cq, RecvCQ: db.cq, Cap: o.cap})
		must(t, err)
		connect(t, &a, &b, o)
		connect(t, &b, &a, o)
		as, bs = append(as, a), append(bs, b)
	}
	ma, mb := da.reg(t, 4096), db.reg(t, 4096)
	send := func() {
		for i := range as {
			must(t, bs[i].qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{sge(mb, 64*i, 64)}}}))
			must(t, as[i].qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(ma, 0, 16)}}}))
		}
		if n := lb.waiting(); n != len(as) {
			t.Fatalf("%d packets wait for b, want %d", n, len(as))
		}
	}

	send()
	lb.Poll()
	if sends := lb.takeSends(); len(sends) != 1 || len(sends[0]) != len(as) {
		t.Fatalf("b answered in sends %v, want one of %d ACKs", sends, len(as))
	}
	la.Poll()

	// QP 1 of b is held elsewhere: QP 0's ACK goes out before the
	// receive path waits for QP 1.
	send()
	q1 := bs[1].qp
	q1.mu.Lock()
	done := make(chan struct{})
	go func() { lb.Poll(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for la.waiting() < 1 {
		if time.Now().After(deadline) {
			q1.mu.Unlock()
			t.Fatal("QP 0's ACK did not go out while QP 1 was held")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the receive path went on without QP 1's lock")
	default:
	}
	q1.mu.Unlock()
	<-done
	if n := la.waiting(); n != len(as) {
		t.Fatalf("%d ACKs for a, want %d", n, len(as))
	}
	if sends := lb.takeSends(); len(sends) != 2 || len(sends[0]) != 1 || len(sends[1]) != len(as)-1 {
		t.Fatalf("b answered in sends %v, want QP 0's ACK, then the other three", sends)
	}
}

// TestDeferredAckBeforeAnswer races the timer that sends a deferred ACK
// against the post of the answer: whichever takes the QP first, the
// peer's request completes before the answer to it: the ACK leaves
// first (the timer), or with the answer, after it, and the peer handles
// it first (the deferred ACK used to leave only after its QP's lock was
// let go, and an answer posted in between overtook it).
func TestDeferredAckBeforeAnswer(t *testing.T) {
	la, lb := newPollLinks()
	clk := clock.NewManual(time.Unix(0, 0))
	a, b := busyEnd(t, la, clk), busyEnd(t, lb, clk)
	o := pairOpts{}
	o.defaults()
	connect(t, &a, &b, o)
	connect(t, &b, &a, o)
	ma, mb := a.reg(t, 4096), b.reg(t, 4096)
	wc := make([]verbs.WC, 8)
	for i := range 500 {
		must(t, b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge(mb, 0, 64)}}}))
		must(t, a.qp.PostRecv([]verbs.RecvWR{{ID: 2, SGL: []verbs.SGE{sge(ma, 64, 64)}}}))
		must(t, a.qp.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(ma, 0, 8)}}}))
		if n := b.cq.Poll(wc); n != 1 {
			t.Fatalf("round %d: b polled %d", i, n)
		}
		var wg sync.WaitGroup
		wg.Go(func() { clk.Advance(ackDeferMax) })
		wg.Go(func() {
			must(t, b.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(mb, 0, 8)}}}))
		})
		wg.Wait()
		var ops []bth.Opcode
		for _, s := range lb.takeSends() {
			ops = append(ops, s...)
		}
		if len(ops) != 2 || !slices.Contains(ops, bth.RCAcknowledge) || !slices.Contains(ops, bth.RCSendOnly) {
			t.Fatalf("round %d: b sent %v, want the ACK and the answer", i, ops)
		}
		for got := 0; got < 2; {
			got += a.cq.Poll(wc[got:])
		}
		if wc[0].ID != 3 || wc[1].ID != 2 {
			t.Fatalf("round %d: a completed %d, then %d; want its SEND (3), then the answer (2)", i, wc[0].ID, wc[1].ID)
		}
		for b.cq.Poll(wc) > 0 { // b's answer's completion is not signaled: nothing
		}
	}
}

// TestPollLink checks that PollLink receives on the caller's goroutine
// in the default mode, where an empty CQ.Poll and Progress do not: what
// waits on the link reaches the QP then, and only then.
func TestPollLink(t *testing.T) {
	la, lb := newPollLinks()
	clk := clock.NewManual(time.Unix(0, 0))
	a, b := busyEnd(t, la, clk), pollEnd(t, lb, clk, false) // b in the default mode: only PollLink receives
	o := pairOpts{}
	o.defaults()
	connect(t, &a, &b, o)
	connect(t, &b, &a, o)
	ma, mb := a.reg(t, 4096), b.reg(t, 4096)
	must(t, b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge(mb, 0, 64)}}}))
	must(t, a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(ma, 0, 32)}}}))
	wc := make([]verbs.WC, 4)
	if n := b.cq.Poll(wc); n != 0 {
		t.Fatalf("b's CQ.Poll in the default mode polled %d, want 0: it does not receive", n)
	}
	if n := b.dev.Progress(); n != 0 {
		t.Fatalf("b's Progress in the default mode took %d packets, want 0", n)
	}
	if n := lb.waiting(); n != 1 {
		t.Fatalf("%d packets wait for b, want the SEND", n)
	}
	if n := b.dev.PollLink(); n != 1 {
		t.Fatalf("PollLink took %d packets, want 1", n)
	}
	if n := b.cq.Poll(wc); n != 1 || wc[0].Opcode != verbs.WCRecv || wc[0].Status != verbs.Success || wc[0].ByteLen != 32 {
		t.Fatalf("after PollLink b polled %d: %+v", n, wc[0])
	}
	if n := b.dev.PollLink(); n != 0 {
		t.Fatalf("PollLink of an empty link took %d packets", n)
	}
}
