package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport/mem"
)

// memHosts returns one host per config on a live in-memory network,
// 198.18.0.1 and on.
func memHosts(t testing.TB, cfgs ...*Config) []*host {
	t.Helper()
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	var hs []*host
	for i, cfg := range cfgs {
		ep, err := n.Endpoint(netip.MustParseAddr(fmt.Sprintf("198.18.0.%d", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, newHost(t, ep, cfg))
	}
	return hs
}

// TestMaxConns: an agent tracks at most Config.MaxConns connections; past
// it a Dial fails with ErrLimit and a peer's REQ is rejected with "no
// resources", both counted.
func TestMaxConns(t *testing.T) {
	checkNoLeak(t)
	ca, cb := fastConfig(), fastConfig()
	ca.MaxConns, cb.MaxConns = 2, 2
	hs := memHosts(t, ca, cb, fastConfig())
	ha, hb, hc := hs[0], hs[1], hs[2]
	ctx := ctxT(t, 10*time.Second)
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			if _, err := l.Accept(ctx); errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return
			}
		}
	}()
	for range 2 {
		c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// A's table is full: its own Dial fails at once.
	if _, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("a third Dial from an agent of two: %v", err)
	}
	// B's table is full: a REQ from another agent is rejected.
	var rej *RejectError
	if _, err := hc.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil); !errors.As(err, &rej) ||
		rej.Reason != mad.RejNoResources {
		t.Fatalf("a REQ to an agent tracking two connections of two: %v", err)
	}
	if sa, sb := ha.agent.Stats(), hb.agent.Stats(); sa.Refused != 1 || sb.Refused != 1 || sb.Conns != 2 {
		t.Errorf("refused %d and %d, B tracks %d connections", sa.Refused, sb.Refused, sb.Conns)
	}
}

// TestHalfOpen: handshakes that wait for their RTU do not hold Accept
// up, and past Config.MaxHalfOpen the oldest is given up (REJ "timeout"
// to its peer, counted) so that a new request is served.
func TestHalfOpen(t *testing.T) {
	checkNoLeak(t)
	cb := fastConfig()
	cb.MaxHalfOpen = 1
	hs := memHosts(t, fastConfig(), cb, fastConfig())
	ha, hb, hc := hs[0], hs[1], hs[2]
	ha.link.dropNext(mad.AttrRTU, 100) // A's handshakes never finish
	ctx := ctxT(t, 10*time.Second)
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		c   *Conn
		err error
	}
	accepted := make(chan result, 8)
	go func() {
		for {
			c, err := l.Accept(ctx)
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return
			}
			accepted <- result{c, err}
		}
	}()
	stuck, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
	if err != nil {
		t.Fatal(err) // A's side is up: only its RTU is lost
	}
	defer stuck.Close()
	good, err := hc.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if r := <-accepted; r.err != nil || r.c == nil {
		t.Fatalf("Accept returned %v; want C's connection", r.err)
	} else {
		r.c.Close()
	}
	select {
	case <-stuck.Done():
	case <-ctx.Done():
		t.Fatal("A's connection did not end: the REJ did not reach it")
	}
	if s := hb.agent.Stats(); s.Evicted != 1 {
		t.Errorf("%d handshakes given up, want 1", s.Evicted)
	}
}
