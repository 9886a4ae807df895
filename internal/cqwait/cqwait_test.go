package cqwait

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// flushCQ returns a CQ on a device of its own, over the in-memory link or
// (udp) over loopback UDP, where a waiting goroutine receives itself, and
// a function that puts one completion on it (a receive flushed by moving
// its QP to ERR) after a delay.
func flushCQ(t *testing.T, udp bool) (verbs.CQ, func(time.Duration)) {
	t.Helper()
	cfg := &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: freePort(t)}}
	if !udp {
		n := mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(func() { n.Close() })
		cfg = &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}}
	}
	dev, err := roce.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(4)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), verbs.LocalWrite)
	if err := roce.ModifyToInit(qp, nil); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	return cq, func(after time.Duration) {
		time.AfterFunc(after, func() { qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState) })
	}
}

// freePort returns a UDP port free on 127.0.0.1 at the time of the call.
func freePort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

func TestWaiter(t *testing.T) {
	for _, c := range []struct {
		spin time.Duration
		udp  bool
	}{{0, false}, {time.Millisecond, false}, {-1, false}, {0, true}} {
		spin := c.spin
		cq, complete := flushCQ(t, c.udp)
		w := New(spin)
		wc := make([]verbs.WC, 2)
		// Nothing comes: PollFor gives up after its limit, without error.
		start := time.Now()
		if n, err := w.PollFor(context.Background(), cq, wc, 30*time.Millisecond); n != 0 || err != nil {
			t.Fatalf("spin %v: empty CQ: %d, %v", spin, n, err)
		}
		if d := time.Since(start); d < 30*time.Millisecond || d > 10*time.Second {
			t.Errorf("spin %v: gave up after %v", spin, d)
		}
		// A completion comes while Poll waits.
		complete(20 * time.Millisecond)
		n, err := w.Poll(context.Background(), cq, wc)
		if n != 1 || err != nil || wc[0].ID != 7 || wc[0].Status != verbs.WRFlushErr {
			t.Fatalf("spin %v: Poll: %d %v %+v", spin, n, err, wc[0])
		}
		// A context that ends ends the wait with its error.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, err := w.Poll(ctx, cq, wc); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("spin %v: Poll after the deadline: %v", spin, err)
		}
		if err := w.WaitEvent(ctx, cq); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("spin %v: WaitEvent after the deadline: %v", spin, err)
		}
		cancel()
	}
}

func TestNothing(t *testing.T) {
	w := New(0)
	cq, _ := flushCQ(t, false)
	if _, err := w.Poll(context.Background(), nil, make([]verbs.WC, 1)); !errors.Is(err, ErrNothing) {
		t.Errorf("nil CQ: %v", err)
	}
	if _, err := w.PollFor(context.Background(), cq, nil, time.Second); !errors.Is(err, ErrNothing) {
		t.Errorf("no room: %v", err)
	}
	if err := w.WaitEvent(context.Background(), nil); !errors.Is(err, ErrNothing) {
		t.Errorf("WaitEvent(nil): %v", err)
	}
}
