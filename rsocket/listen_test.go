package rsocket

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
)

// TestListener checks the listener's net.Listener behaviour: a request
// that is not an rsocket's is refused and Accept goes on to the next;
// Close makes a waiting Accept return net.ErrClosed; nobody listening is
// a refusal.
func TestListener(t *testing.T) {
	checkNoLeak(t)
	h := memHosts(t, transportNoFaults)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := netip.AddrPortFrom(h.addrB, 7471)
	ln, err := (&ListenConfig{Options: Options{Agent: h.ab}}).Listen(ctx, h.b, addr)
	if err != nil {
		t.Fatal(err)
	}
	if ln.Addr().String() != addr.String() || ln.Addr().Network() != "rsocket" {
		t.Errorf("Addr: %v %v", ln.Addr().Network(), ln.Addr())
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()

	// Not an rsocket: private data without rs_conn_data.
	_, err = h.aa.Dial(ctx, addr, &cm.Params{PrivateData: []byte("hello")})
	if !errors.Is(err, cm.ErrRejected) {
		t.Fatalf("a plain rdma_cm connection: %v, want a rejection", err)
	}
	c, err := (&Dialer{Options: Options{Agent: h.aa}}).Dial(ctx, h.a, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	if s.RemoteAddr().String() != c.LocalAddr().String() || s.LocalAddr().String() != c.RemoteAddr().String() {
		t.Errorf("addresses: client %v -> %v, server %v -> %v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}

	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var op *net.OpError
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &op) || op.Op != "accept" {
			t.Fatalf("Accept on a closed listener: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits after Close")
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	// The accepted connection outlives its listener.
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	_, err = (&Dialer{Options: Options{Agent: h.aa}}).Dial(ctx, h.a, netip.AddrPortFrom(h.addrB, 7472))
	var op *net.OpError
	if !errors.Is(err, cm.ErrConnRefused) || !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("Dial to a port nobody listens on: %v", err)
	}
}
