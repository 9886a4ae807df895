package cm

import (
	"bytes"
	"context"
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
