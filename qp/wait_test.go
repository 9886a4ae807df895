package qp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// waitLink is one end of a two-end link that delivers only to a goroutine
// that polls it or waits on it (a transport.Waiter with no goroutine of
// its own), as the udp transport does while waits come. It records which
// goroutine handed each batch over, and the opcodes of each Send.
type waitLink struct {
	*pollLink
	waitMu sync.Mutex // one Wait at a time
	parked atomic.Bool
	waits  int // Waits that blocked; under mu
}

func newWaitLinks() (a, b *waitLink) {
	pa, pb := newPollLinks()
	pa.signal, pb.signal = make(chan struct{}, 1), make(chan struct{}, 1)
	return &waitLink{pollLink: pa}, &waitLink{pollLink: pb}
}

// goid returns the calling goroutine's id, from its stack header.
func goid() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// Wait is transport.Waiter's: it hands over what waits, or blocks for
// it, a Wake or the deadline; ready is called before it blocks.
func (l *waitLink) Wait(deadline time.Time, ready func() bool) (int, error) {
	if !l.waitMu.TryLock() {
		return 0, transport.ErrWaiting
	}
	defer l.waitMu.Unlock()
	var tc <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		tc = t.C
	}
	for {
		l.parked.Store(false)
		if n := l.Poll(); n > 0 {
			return n, nil
		}
		l.parked.Store(true)
		if ready != nil && ready() {
			return 0, nil
		}
		l.mu.Lock()
		l.waits++
		l.mu.Unlock()
		select {
		case <-l.signal:
		case <-tc:
			l.parked.Store(false)
			return 0, nil
		}
	}
}

// Wake ends a blocked Wait.
func (l *waitLink) Wake() {
	if l.parked.Load() {
		select {
		case l.signal <- struct{}{}:
		default:
		}
	}
}

func (l *waitLink) handedBy() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.handers)
}

var _ transport.Waiter = (*waitLink)(nil)

// waitEnds makes a device on each link with nq connected RC QPs, each
// with a CQ of its own; spin is Config.WaitSpin, clk the devices' clock
// (nil: the system's).
func waitEnds(t *testing.T, la, lb *waitLink, nq int, spin time.Duration, clk clock.Clock) (a, b []end) {
	t.Helper()
	o := pairOpts{}
	o.defaults()
	mk := func(l *waitLink) (*Device, *PD) {
		if clk == nil {
			clk = clock.Real{}
		}
		// No loss probes: TestWaitFollowers leaves b's ACKs unread until a
		// round ends, and a probe would hold b's next SEND until then.
		d, err := New(l, &Config{Clock: clk, Logger: testLogger(t), WaitSpin: spin, LossProbe: -1})
		must(t, err)
		t.Cleanup(func() { d.Close() })
		pd, err := d.AllocPD()
		must(t, err)
		return d, pd.(*PD)
	}
	da, pa := mk(la)
	db, pb := mk(lb)
	for range nq {
		ea, eb := end{dev: da, pd: pa}, end{dev: db, pd: pb}
		for _, e := range []*end{&ea, &eb} {
			cq, err := e.dev.CreateCQ(64)
			must(t, err)
			e.cq = cq.(*CQ)
			e.qp, err = e.dev.createQP(e.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq, Cap: o.cap})
			must(t, err)
		}
		connect(t, &ea, &eb, o)
		connect(t, &eb, &ea, o)
		a, b = append(a, ea), append(b, eb)
	}
	return a, b
}

// waitOne waits on e's CQ and polls one completion, within 10 s. Its
// context cannot end, so that the wait looks at nothing but the CQ: a
// lost wake-up lasts until the deadline.
func waitOne(t *testing.T, e *end) verbs.WC {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	wc := make([]verbs.WC, 1)
	for {
		ok, err := e.cq.WaitUntil(context.Background(), deadline)
		if err != nil || !ok || !time.Now().Before(deadline) {
			t.Fatalf("no completion within 10 s (a lost wake-up?): %v, %v", ok, err)
			return verbs.WC{}
		}
		if e.cq.Poll(wc) == 1 {
			return wc[0]
		}
	}
}

// TestWaitLeads runs a SEND ping-pong between two devices whose programs
// wait with CQ.Wait, spinning first or not: every completion comes in
// order; the waiting goroutine itself receives what it waits for; and
// the ACK of what a waiter received leaves with the answer it posts, in
// one Send, after it.
func TestWaitLeads(t *testing.T) {
	for _, spin := range []time.Duration{-1, time.Millisecond} {
		la, lb := newWaitLinks()
		// A clock that does not run: the ACK that waits for b's answer
		// leaves with it, never by its 50 us timer, which a loaded
		// machine lets fire first (every posted receive is up before the
		// SEND for it, so no RNR timer is needed either).
		as, bs := waitEnds(t, la, lb, 1, spin, clock.NewManual(time.Unix(1e9, 0)))
		a, b := &as[0], &bs[0]
		ma, mb := a.reg(t, 4096), b.reg(t, 4096)
		const rounds = 200
		done := make(chan error, 1)
		recv := func(i int) error {
			return b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{sge(mb, 0, 64)}}})
		}
		must(t, recv(0))
		go func() { done <- echo(b, mb, lb, rounds, recv) }() // b: the echo
		for i := range rounds {
			select {
			case err := <-done: // b stopped early: say why
				t.Fatalf("spin %v, round %d: b: %v", spin, i, err)
			default:
			}
			must(t, a.qp.PostRecv([]verbs.RecvWR{{ID: uint64(1000 + i), SGL: []verbs.SGE{sge(ma, 64, 64)}}}))
			must(t, a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SGL: []verbs.SGE{sge(ma, 0, 32)}}}))
			// The SEND completes before the answer comes, as when
			// every ACK leaves at once (the ACK that waited for the
			// answer leaves with it, and a handles it first).
			want := []verbs.WC{{ID: uint64(i), Opcode: verbs.WCSend}, {ID: uint64(1000 + i), Opcode: verbs.WCRecv}}
			for _, w := range want {
				if wc := waitOne(t, a); wc.ID != w.ID || wc.Opcode != w.Opcode || wc.Status != verbs.Success {
					t.Fatalf("spin %v, round %d: got %v %d %v, want %v %d", spin, i, wc.Opcode, wc.ID, wc.Status, w.Opcode, w.ID)
				}
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("spin %v: %v", spin, err)
		}
	}
}

// echo is TestWaitLeads's b: it answers each of rounds SENDs from m,
// waiting for each with CQ.Wait; recv(i) posts receive i, that for round
// 0 being up already. The waiting goroutine must be the one that received the
// SEND, and the first answer must carry the ACK that waited for it,
// after it, in one Send.
func echo(b *end, m *mr.MR, lb *waitLink, rounds int, recv func(int) error) error {
	me := goid()
	for i := range rounds {
		// waitOne's t.Fatalf is of the test's goroutine: wait here.
		wc := make([]verbs.WC, 1)
		for n := 0; n == 0; n = b.cq.Poll(wc) {
			if ok, err := b.cq.WaitUntil(context.Background(), time.Now().Add(10*time.Second)); err != nil || !ok {
				return fmt.Errorf("round %d: no completion within 10 s: %v, %v", i, ok, err)
			}
		}
		if wc[0].Opcode != verbs.WCRecv || wc[0].ID != uint64(i) || wc[0].Status != verbs.Success {
			return fmt.Errorf("round %d: %v %d %v", i, wc[0].Opcode, wc[0].ID, wc[0].Status)
		}
		if by := lb.handedBy(); by[len(by)-1] != me {
			return fmt.Errorf("round %d: the SEND was received by another goroutine than the one waiting for it", i)
		}
		if i+1 < rounds {
			if err := recv(i + 1); err != nil { // up before a's next SEND
				return err
			}
		}
		if err := b.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(m, 0, 16)}}}); err != nil {
			return err
		}
		if i == 0 {
			if s := lb.takeSends(); len(s) != 1 || !slices.Equal(s[0], []bth.Opcode{bth.RCSendOnly, bth.RCAcknowledge}) {
				return fmt.Errorf("the ACK did not leave with the first answer, after it: %v", s)
			}
		}
	}
	return nil
}

// TestWaitWokenFromElsewhere checks that a completion made by another
// goroutine than the leader's (a receive flushed by a Modify to ERR)
// ends the leader's blocked wait: a lost wake-up would leave it until
// its context's end.
func TestWaitWokenFromElsewhere(t *testing.T) {
	la, lb := newWaitLinks()
	_, bs := waitEnds(t, la, lb, 1, -1, nil)
	b := &bs[0]
	mb := b.reg(t, 4096)
	for i := range 50 {
		must(t, b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{sge(mb, 0, 64)}}}))
		go func() {
			if i%2 == 1 {
				time.Sleep(time.Millisecond) // after the leader blocked, mostly
			}
			b.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}()
		if wc := waitOne(t, b); wc.ID != uint64(i) || wc.Status != verbs.WRFlushErr {
			t.Fatalf("round %d: %+v", i, wc)
		}
		must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState))
		must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.LocalWrite},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	}
	if lb.waits == 0 {
		t.Error("no wait blocked: the test did not test a wake-up")
	}
}

// TestWaitFollowers has two goroutines wait on two CQs of one device at
// once, the peer answering the second first: one leads, the other
// follows, and each gets its completions; when the leader leaves for
// good, the follower takes the lead and receives its own. No goroutine is
// left behind.
func TestWaitFollowers(t *testing.T) {
	before := runtime.NumGoroutine()
	la, lb := newWaitLinks()
	as, bs := waitEnds(t, la, lb, 2, -1, nil)
	ma, mb := as[0].reg(t, 4096), bs[0].reg(t, 4096)
	for round := range 30 {
		var wg sync.WaitGroup
		got := make([]verbs.WC, 2)
		for i := range 2 {
			must(t, as[i].qp.PostRecv([]verbs.RecvWR{{ID: uint64(10*round + i), SGL: []verbs.SGE{sge(ma, 64*i, 64)}}}))
			wg.Go(func() { got[i] = waitOne(t, &as[i]) })
		}
		time.Sleep(time.Millisecond) // both wait, one leading, mostly
		for _, i := range []int{1, 0} {
			must(t, bs[i].qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(mb, 0, 8)}}}))
			if round%3 == 0 {
				time.Sleep(time.Millisecond) // the second comes after the first's waiter left
			}
		}
		wg.Wait()
		for i, wc := range got {
			if wc.ID != uint64(10*round+i) || wc.Opcode != verbs.WCRecv || wc.Status != verbs.Success {
				t.Fatalf("round %d, CQ %d: %+v", round, i, wc)
			}
		}
		// b's ACKs, and its SENDs' completions, are not waited for:
		// drain them so that b's send queue has room.
		for i := range 2 {
			for bs[i].cq.Poll(make([]verbs.WC, 4)) > 0 {
			}
		}
		lb.Poll()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the waits, %d before", n, before)
	}
}

// TestWaitUntil checks WaitUntil's deadline, and ProgressWait's: both end
// with nothing at a deadline that passes, and ProgressWait returns the
// packets it handled when some come.
func TestWaitUntil(t *testing.T) {
	la, lb := newWaitLinks()
	as, bs := waitEnds(t, la, lb, 1, -1, nil)
	a, b := &as[0], &bs[0]
	start := time.Now()
	if ok, err := b.cq.WaitUntil(context.Background(), start.Add(20*time.Millisecond)); ok || err != nil ||
		time.Since(start) < 20*time.Millisecond {
		t.Fatalf("WaitUntil an empty CQ: %v, %v after %v", ok, err, time.Since(start))
	}
	if n, err := b.dev.ProgressWait(context.Background(), time.Now().Add(10*time.Millisecond)); n != 0 || err != nil {
		t.Fatalf("ProgressWait on a quiet link: %d, %v", n, err)
	}
	ma, mb := a.reg(t, 64), b.reg(t, 64)
	go func() {
		time.Sleep(5 * time.Millisecond)
		a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWrite, SGL: []verbs.SGE{sge(ma, 0, 8)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}})
	}()
	n, err := b.dev.ProgressWait(context.Background(), time.Now().Add(10*time.Second))
	if n != 1 || err != nil {
		t.Fatalf("ProgressWait for a WRITE: %d, %v", n, err)
	}
	if by := lb.handedBy(); by[len(by)-1] != goid() {
		t.Error("the WRITE was received by another goroutine than ProgressWait's")
	}
}

// TestWaitInterrupt: CQ.Interrupt ends a WaitUntil that leads (blocked
// in the link), one that follows (asleep while another CQ's waiter
// leads), and, called before, the next one, each reporting false with the
// CQ empty; and an interrupt is taken once.
func TestWaitInterrupt(t *testing.T) {
	la, lb := newWaitLinks()
	_, bs := waitEnds(t, la, lb, 2, -1, nil)
	never := time.Now().Add(time.Hour)
	ended := func(name string, cq *CQ, wait func() (bool, error)) {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			ok, err := wait()
			if err == nil && ok {
				err = errors.New("reported a completion")
			}
			got <- err
		}()
		time.Sleep(20 * time.Millisecond) // blocked by now, mostly
		start := time.Now()
		cq.Interrupt()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Interrupt did not end the wait within 5 s", name)
		}
		t.Logf("%s: ended %v after Interrupt", name, time.Since(start))
	}
	c0, c1 := bs[0].cq, bs[1].cq
	for range 20 {
		ended("leading", c0, func() (bool, error) { return c0.WaitUntil(context.Background(), never) })
	}
	// c1's waiter leads; c0's follows.
	lead := make(chan struct{})
	go func() {
		c1.WaitUntil(context.Background(), never)
		close(lead)
	}()
	time.Sleep(10 * time.Millisecond)
	ended("following", c0, func() (bool, error) { return c0.WaitUntil(context.Background(), never) })
	c1.Interrupt()
	<-lead
	c0.Interrupt()
	start := time.Now()
	if ok, err := c0.WaitUntil(context.Background(), never); ok || err != nil || time.Since(start) > time.Second {
		t.Fatalf("a wait after Interrupt: %v, %v after %v", ok, err, time.Since(start))
	}
	start = time.Now()
	if ok, err := c0.WaitUntil(context.Background(), start.Add(20*time.Millisecond)); ok || err != nil ||
		time.Since(start) < 20*time.Millisecond {
		t.Fatalf("the interrupt was taken twice: the next wait ended after %v (%v, %v)", time.Since(start), ok, err)
	}
}

// TestSpinner checks the adaptive spin's rules: waits that block and end
// within the limit double it (from spinGrowStart) up to the limit; waits
// that outlast it halve it, down to none; a spinner at none spins the
// whole limit once in probeEvery waits, and a probe that catches its
// completion starts the spin again.
func TestSpinner(t *testing.T) {
	var s spinner
	limit := 50 * time.Microsecond
	want := func(d time.Duration) {
		t.Helper()
		if got, probe := s.next(limit); got != d || probe {
			t.Fatalf("spin %v (probe %v), want %v", got, probe, d)
		}
	}
	s.ns.Store(int64(spinGrowStart / 2))
	want(spinGrowStart / 2)
	s.ns.Store(0)
	for _, w := range []time.Duration{spinGrowStart, 4 * time.Microsecond, 8 * time.Microsecond, 16 * time.Microsecond,
		32 * time.Microsecond, limit, limit} {
		s.blocked(10*time.Microsecond, limit)
		want(w)
	}
	for _, w := range []time.Duration{limit / 2, limit / 4, limit / 8, limit / 16} {
		s.blocked(time.Millisecond, limit)
		want(w)
	}
	s.blocked(time.Millisecond, limit)
	probes := 0
	for range 2 * probeEvery {
		switch got, probe := s.next(limit); {
		case probe && got == limit:
			probes++
		case probe || got != 0:
			t.Fatalf("a spinner at none spins %v (probe %v)", got, probe)
		}
		s.blocked(time.Millisecond, limit) // the probes catch nothing: none stays none
	}
	if probes != 2 {
		t.Fatalf("%d probes in %d waits, want 2", probes, 2*probeEvery)
	}
	s.caught(3*time.Microsecond, limit)
	want(6 * time.Microsecond)
	s.ns.Store(int64(time.Second)) // a limit lowered since: the spin stays under it
	want(limit)
}
