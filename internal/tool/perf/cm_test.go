package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// TestPerfCMLostAck loses the ACK of the client's message in an rdma_cm
// exchange (the close handshake of write_bw_cm under loss in the lab),
// and then the connection, as the server's DREQ does: the client's send
// is flushed. The exchange still succeeds when the server's answer came,
// since the server answers only what it has read; with no answer it
// fails.
func TestPerfCMLostAck(t *testing.T) {
	for _, answer := range []bool{true, false} {
		name := "answered"
		if !answer {
			name = "unanswered"
		}
		t.Run(name, func(t *testing.T) {
			testPerfCMLostAck(t, answer)
		})
	}
}

func testPerfCMLostAck(t *testing.T, answer bool) {
	cliAddr, srvAddr := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	var dropped atomic.Int64
	n := mem.NewNetwork(&mem.Config{Live: true, DropIf: func(src, _ netip.Addr, pkt []byte) bool {
		if src == srvAddr && bth.Opcode(pkt[0]) == bth.RCAcknowledge {
			dropped.Add(1)
			return true
		}
		return false
	}})
	t.Cleanup(func() { n.Close() })
	open := func(addr netip.Addr, role oob.Role) *cmExchange {
		dev, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		c, err := newCMExchange(dev, role, 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cl, srv := open(cliAddr, oob.Client), open(srvAddr, oob.Server)
	// A long ACK timeout: the client must not retry within the test.
	p := &roce.ConnParams{Timeout: 20}
	if err := roce.Connect(cl.qp, &roce.Remote{QPN: srv.qp.QPN(), GID: srvAddr.As16()}, p); err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(srv.qp, &roce.Remote{QPN: cl.qp.QPN(), GID: cliAddr.As16()}, p); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, in := []byte("client is finished"), make([]byte, len("server is finished"))
	done := make(chan error, 1)
	go func() { done <- cl.exchange(ctx, "close_connection handshake", out, in) }()

	got := make([]byte, len(out))
	if err := srv.recv(ctx, "close_connection handshake", got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, out) {
		t.Fatalf("server got %q, want %q", got, out)
	}
	if answer {
		// The client ACKs this one: only the server's ACKs are lost.
		if err := srv.send(ctx, "close_connection handshake", []byte("server is finished")); err != nil {
			t.Fatal(err)
		}
	}
	if dropped.Load() == 0 {
		t.Fatal("the server's ACK was not dropped")
	}
	select {
	case err := <-done:
		t.Fatalf("the exchange ended before the connection did: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	// What the cm does with the QP when the server's DREQ comes.
	if err := cl.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	err := <-done
	switch {
	case answer && err != nil:
		t.Fatalf("exchange: %v, want success: the server answered", err)
	case answer && string(in) != "server is finished":
		t.Fatalf("client got %q, want the server's answer", in)
	case !answer && (err == nil || !strings.Contains(err.Error(), "WR_FLUSH_ERR")):
		t.Fatalf("exchange: %v, want the flushed send's error", err)
	}
}

// TestCloseCMServerDisconnects: a server's closeCM disconnects the data
// connections itself, and then the comm one. perftest 25's client sends
// no DREQ for its data QPs: it waits for the server's. The client here
// does the same, closing nothing, against a server given a whole minute
// to wait for the client's DREQs: it must not wait.
func TestCloseCMServerDisconnects(t *testing.T) {
	defer func(d time.Duration) { cmCloseWait = d }(cmCloseWait)
	cmCloseWait = time.Minute
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type end struct {
		agent *cm.Agent
		qps   []verbs.QP // the comm QP, the data QP
	}
	open := func(addr netip.Addr) end {
		dev, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		a, err := cm.NewAgent(dev, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(8)
		if err != nil {
			t.Fatal(err)
		}
		e := end{agent: a}
		for range 2 {
			q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
				Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if err := roce.ModifyToInit(q, nil); err != nil {
				t.Fatal(err)
			}
			e.qps = append(e.qps, q)
		}
		return e
	}
	srvAddr := netip.MustParseAddr("198.18.0.1")
	srv, cl := open(srvAddr), open(netip.MustParseAddr("198.18.0.2"))
	next := 0
	ln, err := srv.agent.Listen(ctx, netip.AddrPortFrom(srvAddr, oob.Port), &cm.ListenConfig{Backlog: 2,
		OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			next++
			return &cm.Params{QP: srv.qps[next-1]}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var srvConns, clConns []*cm.Conn
	for _, q := range cl.qps {
		dialed := make(chan error, 1)
		go func() {
			c, err := cl.agent.Dial(ctx, netip.AddrPortFrom(srvAddr, oob.Port), &cm.Params{QP: q})
			clConns = append(clConns, c)
			dialed <- err
		}()
		s, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		srvConns = append(srvConns, s)
		if err := <-dialed; err != nil {
			t.Fatal(err)
		}
	}
	r := &session{role: oob.Server, cm: &cmExchange{agent: srv.agent, comm: srvConns[0], data: srvConns[1:]}}
	closed := make(chan struct{})
	go func() {
		r.closeCM()
		close(closed)
	}()
	for i, c := range clConns {
		select {
		case <-c.Done():
			if !errors.Is(c.Err(), cm.ErrDisconnected) {
				t.Errorf("client connection %d ended with %v, want the server's disconnect", i, c.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the server left connection %d (0 comm, 1 data) up: a perftest 25 client waits for its DREQ", i)
		}
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closeCM still waiting after the client's connections ended")
	}
}

// TestRetryRefused: refused data connections are retried for a time, not
// a count (a server may start listening seconds late under loss), and
// other errors end the retries at once, an unreachable server's too.
func TestRetryRefused(t *testing.T) {
	refused := fmt.Errorf("dial: %w", cm.ErrConnRefused)
	other := errors.New("timed out")
	unreachable := fmt.Errorf("cm: connect to 198.18.0.11:18515: %w: %w; nothing receives RoCEv2 at 198.18.0.11", cm.ErrUnreachable, syscall.ECONNREFUSED)
	ctx := context.Background()
	cases := []struct {
		name      string
		refusals  int   // how many dials are refused before the outcome
		outcome   error // of the dial after them
		limit     time.Duration
		wantDials int
		wantErr   error
	}{
		{"late listener", 30, nil, time.Minute, 31, nil},
		{"other error", 3, other, time.Minute, 4, other},
		{"refused for good", 1 << 30, nil, 30 * time.Millisecond, -1, cm.ErrConnRefused},
		{"unreachable", 2, unreachable, time.Minute, 3, cm.ErrUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dials, resets := 0, 0
			start := time.Now()
			_, err := retryRefused(ctx, time.Millisecond, c.limit, func() (*cm.Conn, error) {
				dials++
				if dials <= c.refusals {
					return nil, refused
				}
				return nil, c.outcome
			}, func() error { resets++; return nil })
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if c.wantDials >= 0 && dials != c.wantDials {
				t.Errorf("%d dials, want %d", dials, c.wantDials)
			}
			if resets != dials-1 {
				t.Errorf("%d resets for %d dials", resets, dials)
			}
			if c.wantDials < 0 && time.Since(start) < c.limit {
				t.Errorf("gave up after %v, before the limit %v", time.Since(start), c.limit)
			}
		})
	}
}
