package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// TestSharedAgent connects with the package-level Listen and Dial: each
// device gets one agent, which outlives the listener while its accepted
// connection is open and stops with the last close, so that the device
// can have a new one.
func TestSharedAgent(t *testing.T) {
	checkNoLeak(t)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	open := func(addr string) *roce.Device {
		ep, err := n.Endpoint(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		d, err := roce.Open(&roce.Config{Transport: ep})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	da, db := open("198.18.0.1"), open("198.18.0.2")
	ctx := ctxT(t, 20*time.Second)
	cli, srv := newSide(t, da), newSide(t, db)
	srv.postRecv(t)
	addr := netip.AddrPortFrom(db.Addr(), 7174)

	l, err := Listen(ctx, db, addr, &ListenConfig{OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
		return &Params{QP: srv.qp, PrivateData: []byte("shared")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := Listen(ctx, db, netip.AddrPortFrom(db.Addr(), 7175), nil)
	if err != nil {
		t.Fatalf("a second listener on the same device: %v", err)
	}
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := Dial(ctx, da, addr, &Params{QP: cli.qp})
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	if !bytes.HasPrefix(c.PrivateData(), []byte("shared")) {
		t.Errorf("REP private data %q", c.PrivateData())
	}
	// The listener closes; the accepted connection still works.
	l.Close()
	if err := cli.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: cli.mr.Addr(), Length: 64, LKey: cli.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, cli.cq); wc.Status != verbs.Success {
		t.Fatalf("SEND after the listener closed: %v", &wc)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	s.Close()
	// da's agent stopped with its only connection: the device can have
	// an agent of its own again.
	a, err := NewAgent(da, nil)
	if err != nil {
		t.Fatalf("NewAgent after the shared agent's last close: %v", err)
	}
	a.Close()
	// db's agent still serves the listener on 7175, and stops with it.
	if a, err := NewAgent(db, nil); err == nil {
		a.Close()
		t.Error("db has a second agent while its shared one still listens")
	}
	l2.Close()
	if a, err = NewAgent(db, nil); err != nil {
		t.Fatalf("NewAgent after the last listener closed: %v", err)
	}
	a.Close()
}

// openMem opens a device on n at addr, closed when the test ends.
func openMem(t *testing.T, n *mem.Network, addr string) *roce.Device {
	t.Helper()
	d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestAgentFollowsDevice checks that a device has one agent however it is
// reached: Listen on the device and on a traced view of it share one, and
// so do an agent of the program's own (NewAgent) and Listen and Dial on
// the device, traced or not; the program's agent outlives what Listen and
// Dial made on it.
func TestAgentFollowsDevice(t *testing.T) {
	checkNoLeak(t)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	da, db := openMem(t, n, "198.18.0.1"), openMem(t, n, "198.18.0.2")
	ctx := ctxT(t, 20*time.Second)

	l1, err := Listen(ctx, db, netip.AddrPortFrom(db.Addr(), 7174), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	l2, err := Listen(ctx, roce.Trace(db, nil), netip.AddrPortFrom(db.Addr(), 7175), nil)
	if err != nil {
		t.Fatalf("Listen on the traced device after Listen on the device: %v", err)
	}
	defer l2.Close()
	if l1.a != l2.a {
		t.Error("the device and its traced view have two agents")
	}

	own, err := NewAgent(da, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	for _, dev := range []verbs.Device{da, roce.Trace(da, nil)} {
		accepted := make(chan *Conn, 1)
		go func() {
			s, err := l2.Accept(ctx)
			if err != nil {
				t.Error(err)
			}
			accepted <- s
		}()
		c, err := Dial(ctx, dev, netip.AddrPortFrom(db.Addr(), 7175), nil)
		if err != nil {
			t.Fatalf("Dial on a device with an agent of its own: %v", err)
		}
		if c.a != own {
			t.Error("Dial did not use the device's own agent")
		}
		if s := <-accepted; s != nil {
			s.Close()
		}
		c.Close()
	}
	l3, err := Listen(ctx, roce.Trace(da, nil), netip.AddrPortFrom(da.Addr(), 7176), nil)
	if err != nil {
		t.Fatalf("Listen on a device with an agent of its own: %v", err)
	}
	if l3.a != own {
		t.Error("Listen did not use the device's own agent")
	}
	l3.Close()
	// What Listen and Dial made on it is closed: the program's agent
	// still serves.
	l4, err := own.Listen(ctx, netip.AddrPortFrom(da.Addr(), 7176), nil)
	if err != nil {
		t.Fatalf("the device's own agent after Listen's and Dial's closed: %v", err)
	}
	l4.Close()
	if a, err := NewAgent(roce.Trace(da, nil), nil); err == nil || !errors.Is(err, verbs.ErrGSIExists) {
		a.Close()
		t.Errorf("a second agent on a traced view: %v, want verbs.ErrGSIExists", err)
	}
}

// TestDeviceCloseStopsAgent checks that closing a device stops its agent,
// whether the program made it or Listen did: listeners stop, connections
// end, the peer is told, and no goroutine is left.
func TestDeviceCloseStopsAgent(t *testing.T) {
	checkNoLeak(t)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	ctx := ctxT(t, 20*time.Second)
	for _, own := range []bool{false, true} {
		da, db := openMem(t, n, "198.18.0.1"), openMem(t, n, "198.18.0.2")
		var a *Agent
		if own {
			var err error
			if a, err = NewAgent(db, nil); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Listen(ctx, roce.Trace(db, nil), netip.AddrPortFrom(db.Addr(), 7174), nil)
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan *Conn, 1)
		go func() {
			s, _ := l.Accept(ctx)
			accepted <- s
		}()
		c, err := Dial(ctx, da, netip.AddrPortFrom(db.Addr(), 7174), nil)
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		if s == nil {
			t.FailNow()
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("own agent %v: Accept after the device closed: %v", own, err)
		}
		if err := s.Err(); !errors.Is(err, ErrClosed) {
			t.Errorf("own agent %v: the connection after the device closed: %v", own, err)
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatalf("own agent %v: the peer was not told", own)
		}
		if a != nil {
			if _, err := a.Listen(ctx, netip.AddrPortFrom(db.Addr(), 7175), nil); !errors.Is(err, ErrClosed) {
				t.Errorf("the program's agent after its device closed: %v", err)
			}
			a.Close()
		}
		l.Close()
		s.Close()
		c.Close()
		if err := da.Close(); err != nil {
			t.Fatal(err)
		}
		agents.mu.Lock()
		if k := len(agents.m); k != 0 {
			t.Errorf("own agent %v: %d agents left behind", own, k)
		}
		agents.mu.Unlock()
	}
}

// TestSharedAgentRelisten listens again while the last listener of a
// shared agent closes (rsockets' rclose then rlisten do so): the new
// listener waits for the closing agent to give up QP 1 and gets the next
// one, instead of the closing agent ("closed") or QP 1 still taken.
func TestSharedAgentRelisten(t *testing.T) {
	checkNoLeak(t)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	d := openMem(t, n, "198.18.0.1")
	ctx := ctxT(t, 30*time.Second)
	for i := range 100 {
		l, err := Listen(ctx, d, netip.AddrPortFrom(d.Addr(), 7174), nil)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		closed := make(chan struct{})
		go func() {
			l.Close()
			close(closed)
		}()
		time.Sleep(time.Duration(i%25) * 4 * time.Microsecond) // into the close, at one point or another
		l2, err := Listen(ctx, d, netip.AddrPortFrom(d.Addr(), 7175), nil)
		<-closed
		if err != nil {
			t.Fatalf("round %d: Listen while the last listener closes: %v", i, err)
		}
		l2.Close()
	}
}
