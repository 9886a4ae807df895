package roce_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// waitPair is an RC QP on each of two devices over loopback UDP, each QP
// with a CQ of its own, and a region per side.
type waitPair struct {
	qa, qb verbs.QP
	ca, cb verbs.CQ
	ma, mb verbs.MR
	devA   *roce.Device
	devB   *roce.Device
}

// newWaitPairs connects n RC QP pairs between two UDP devices on
// loopback.
func newWaitPairs(t *testing.T, n int) []waitPair {
	t.Helper()
	port := freePort(t)
	da := openT(t, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}})
	db := openT(t, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port}})
	side := func(d *roce.Device) (verbs.QP, verbs.CQ, verbs.MR) {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteAccess)
		if err != nil {
			t.Fatal(err)
		}
		return q, cq, mr
	}
	remote := func(d *roce.Device, q verbs.QP) *roce.Remote {
		gid, err := d.GID(0)
		if err != nil {
			t.Fatal(err)
		}
		return &roce.Remote{QPN: q.QPN(), GID: gid}
	}
	ps := make([]waitPair, n)
	for i := range ps {
		p := &ps[i]
		p.devA, p.devB = da, db
		p.qa, p.ca, p.ma = side(da)
		p.qb, p.cb, p.mb = side(db)
		cp := &roce.ConnParams{MTU: bth.MTU1024}
		if err := roce.Connect(p.qa, remote(db, p.qb), cp); err != nil {
			t.Fatal(err)
		}
		if err := roce.Connect(p.qb, remote(da, p.qa), cp); err != nil {
			t.Fatal(err)
		}
	}
	return ps
}

// waitWC waits on cq with CQ.Wait and polls one completion, within 10 s.
func waitWC(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, fmt.Errorf("no completion (a lost wake-up?): %w", err)
		}
	}
}

// TestWaitOverUDP runs SEND ping-pongs on four QP pairs at once between
// two devices over loopback UDP, every goroutine waiting with CQ.Wait
// (one of a device's waiters receives from the link for all of them):
// every work request completes once, in the order posted, and no
// goroutine is left behind.
func TestWaitOverUDP(t *testing.T) {
	before := runtime.NumGoroutine()
	const pairs, rounds = 4, 300
	ps := newWaitPairs(t, pairs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2*pairs)
	var wg sync.WaitGroup
	for i := range ps {
		p := &ps[i]
		recv := func(q verbs.QP, m verbs.MR, id uint64) error {
			return q.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{{Addr: m.Addr(), Length: 64, LKey: m.LKey()}}}})
		}
		send := func(q verbs.QP, m verbs.MR, id uint64) error {
			return q.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SGL: []verbs.SGE{{Addr: m.Addr() + 64, Length: 8, LKey: m.LKey()}}}})
		}
		// expect waits for the completions of round r on cq: a SEND's
		// and a receive's, each once, in any order between the two
		// (the answer's receive may complete before the SEND's ACK).
		expect := func(cq verbs.CQ, r uint64) error {
			seen := map[verbs.WCOpcode]bool{}
			for len(seen) < 2 {
				wc, err := waitWC(ctx, cq)
				if err != nil {
					return err
				}
				if wc.Status != verbs.Success || wc.ID != r || seen[wc.Opcode] {
					return fmt.Errorf("round %d: unexpected completion %v (seen %v)", r, &wc, seen)
				}
				seen[wc.Opcode] = true
			}
			return nil
		}
		if err := recv(p.qb, p.mb, 0); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { // b echoes
			for r := range uint64(rounds) {
				if err := expectRecvThenSend(ctx, p, r, recv, send); err != nil {
					errs <- fmt.Errorf("pair %d, b: %w", i, err)
					return
				}
			}
		})
		wg.Go(func() { // a asks
			for r := range uint64(rounds) {
				if err := recv(p.qa, p.ma, r); err != nil {
					errs <- err
					return
				}
				if err := send(p.qa, p.ma, r); err != nil {
					errs <- err
					return
				}
				if err := expect(p.ca, r); err != nil {
					errs <- fmt.Errorf("pair %d, a: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// b's last SEND completes with its ACK, which a's last wait took.
	for i := range ps {
		if wc, err := waitWC(ctx, ps[i].cb); err != nil || wc.Opcode != verbs.WCSend || wc.ID != rounds-1 {
			t.Errorf("pair %d, b's last SEND: %v, %v", i, &wc, err)
		}
		if n := ps[i].cb.Poll(make([]verbs.WC, 4)) + ps[i].ca.Poll(make([]verbs.WC, 4)); n != 0 {
			t.Errorf("pair %d: %d completions more than posted", i, n)
		}
	}
	ps[0].devA.Close()
	ps[0].devB.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the waits and Close, %d before", n, before)
	}
}

// expectRecvThenSend is the echo's round r: the receive of a's SEND, the
// completion of the echo's previous SEND (round r-1) in any order
// with it, then the next receive and the answer.
func expectRecvThenSend(ctx context.Context, p *waitPair, r uint64,
	recv, send func(verbs.QP, verbs.MR, uint64) error) error {
	want := 1
	if r > 0 {
		want = 2
	}
	gotRecv, gotSend := false, r == 0
	for n := 0; n < want; n++ {
		wc, err := waitWC(ctx, p.cb)
		if err != nil {
			return err
		}
		switch {
		case wc.Status != verbs.Success:
			return fmt.Errorf("round %d: %v", r, &wc)
		case wc.Opcode == verbs.WCRecv && wc.ID == r && !gotRecv:
			gotRecv = true
		case wc.Opcode == verbs.WCSend && wc.ID == r-1 && !gotSend:
			gotSend = true
		default:
			return fmt.Errorf("round %d: unexpected completion %v", r, &wc)
		}
	}
	if err := recv(p.qb, p.mb, r+1); err != nil {
		return err
	}
	return send(p.qb, p.mb, r)
}

// TestWaitAfterClose checks that a wait blocked for the link when the
// device closes still ends with its context, as a wait on the completion
// channel did, and that a wait on a closed device's CQ does too.
func TestWaitAfterClose(t *testing.T) {
	ps := newWaitPairs(t, 1)
	p := &ps[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.ca.Wait(ctx) }()
	time.Sleep(20 * time.Millisecond) // blocked in the link, mostly
	p.devA.Close()
	select {
	case err := <-done:
		t.Fatalf("Wait returned at Close with nothing to complete: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait after Close and cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not end with its context after the device closed")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := p.ca.Wait(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait on a closed device's CQ: %v, want context.DeadlineExceeded", err)
	}
}
