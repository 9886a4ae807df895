package cm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// The tests of this file check that connections fail fast and say why, as
// a new user meets it: wrong arguments, a peer that is not there, a peer
// that died, a peer that never answers, and that every wait ends when its
// context does.

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// TestNilArguments calls every exported entry point of the package with
// nil and zero arguments (and receivers): each returns an error or a zero
// value, none panics.
func TestNilArguments(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	ha, _ := memPair(t, fastConfig(), fastConfig())
	addr := netip.MustParseAddrPort("198.18.0.2:7174")
	var nilSoft *roce.Device
	devices := []struct {
		name string
		dev  verbs.Device
	}{
		{"nil", nil},
		{"typed nil", nilSoft},
		{"zero Device", &roce.Device{}},
		{"traced nil", roce.Trace(nil, nil)},
	}
	for _, d := range devices {
		noPanic(t, "NewAgent("+d.name+")", func() {
			if a, err := NewAgent(d.dev, nil); !errors.Is(err, ErrInvalid) || a != nil {
				t.Errorf("NewAgent(%s): %v, %v; want ErrInvalid", d.name, a, err)
			}
		})
		noPanic(t, "Listen("+d.name+")", func() {
			if _, err := Listen(ctx, d.dev, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Listen(%s): %v", d.name, err)
			}
		})
		noPanic(t, "Dial("+d.name+")", func() {
			if _, err := Dial(ctx, d.dev, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Dial(%s): %v", d.name, err)
			}
		})
	}
	// Params with nil inside interfaces.
	var nilQP *struct{ verbs.QP }
	for _, p := range []*Params{{QP: nilQP}, {PD: (*struct{ verbs.PD })(nil)}, {SendCQ: (*struct{ verbs.CQ })(nil)},
		{RecvCQ: (*struct{ verbs.CQ })(nil)}} {
		noPanic(t, "Dial with nil inside Params", func() {
			if _, err := ha.agent.Dial(ctx, addr, p); !errors.Is(err, ErrInvalid) {
				t.Errorf("Dial(%+v): %v", p, err)
			}
		})
	}
	noPanic(t, "zero addresses", func() {
		if _, err := ha.agent.Dial(ctx, netip.AddrPort{}, nil); !errors.Is(err, ErrAddr) {
			t.Errorf("Dial to the zero address: %v", err)
		}
		if _, err := ha.agent.ResolveDatagram(ctx, netip.AddrPort{}, nil); !errors.Is(err, ErrAddr) {
			t.Errorf("ResolveDatagram of the zero address: %v", err)
		}
		if _, err := ha.agent.ResolveDatagram(ctx, netip.AddrPortFrom(addr.Addr(), 0), nil); !errors.Is(err, ErrAddr) {
			t.Errorf("ResolveDatagram of port 0: %v", err)
		}
		if _, err := ha.agent.ListenDatagram(ctx, netip.AddrPort{}, nil); err == nil {
			t.Error("ListenDatagram with a nil config")
		}
		if _, err := ha.agent.ListenDatagram(ctx, addr, &DatagramListenConfig{QP: nilQP}); !errors.Is(err, ErrInvalid) {
			t.Errorf("ListenDatagram with a nil QP: %v", err)
		}
		l, err := ha.agent.Listen(ctx, netip.AddrPort{}, nil)
		if err != nil {
			t.Errorf("Listen on the zero address (any address, any port): %v", err)
		} else {
			l.Close()
		}
		if err := Reject(nil); !errors.Is(err, ErrRejected) {
			t.Errorf("Reject(nil) = %v", err)
		}
	})
	nilReceivers(t, ctx)
}

// nilReceivers calls the methods of every exported type on nil and zero
// values.
func nilReceivers(t *testing.T, ctx context.Context) {
	t.Helper()
	addr := netip.MustParseAddrPort("198.18.0.2:7174")
	for _, a := range []*Agent{nil, {}} {
		noPanic(t, "Agent methods", func() {
			_ = a.Addr()
			_ = a.Stats()
			if err := a.Close(); !errors.Is(err, ErrInvalid) {
				t.Errorf("Close: %v", err)
			}
			if _, err := a.Dial(ctx, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Dial: %v", err)
			}
			if _, err := a.Listen(ctx, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Listen: %v", err)
			}
			if _, err := a.ListenDatagram(ctx, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("ListenDatagram: %v", err)
			}
			if _, err := a.ResolveDatagram(ctx, addr, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("ResolveDatagram: %v", err)
			}
		})
	}
	for _, c := range []*Conn{nil, {}} {
		noPanic(t, "Conn methods", func() {
			_, _, _, _ = c.QP(), c.PD(), c.LocalAddr(), c.RemoteAddr()
			_, _, _ = c.PrivateData(), c.Info(), c.Done()
			_, _ = c.CQs()
			if err := c.Err(); !errors.Is(err, ErrInvalid) {
				t.Errorf("Err: %v", err)
			}
			if err := c.Close(); !errors.Is(err, ErrInvalid) {
				t.Errorf("Close: %v", err)
			}
			if err := c.CloseContext(ctx); !errors.Is(err, ErrInvalid) {
				t.Errorf("CloseContext: %v", err)
			}
		})
	}
	for _, l := range []*Listener{nil, {}} {
		noPanic(t, "Listener methods", func() {
			_ = l.Addr()
			if err := l.Close(); !errors.Is(err, ErrInvalid) {
				t.Errorf("Close: %v", err)
			}
			if _, err := l.Accept(ctx); !errors.Is(err, ErrInvalid) {
				t.Errorf("Accept: %v", err)
			}
		})
	}
	for _, l := range []*DatagramListener{nil, {}} {
		noPanic(t, "DatagramListener methods", func() {
			_ = l.Addr()
			if err := l.Close(); !errors.Is(err, ErrInvalid) {
				t.Errorf("Close: %v", err)
			}
		})
	}
	noPanic(t, "error types", func() {
		var re *RejectError
		var se *SIDRError
		_, _ = re.Error(), se.Error()
		_, _ = re.Is(ErrRejected), se.Is(ErrRejected)
	})
}

// TestWrongParams checks that values out of range are refused, not
// quietly replaced, and that what a connection reports is what its QP
// uses.
func TestWrongParams(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	dst := netip.AddrPortFrom(hb.agent.Addr(), 7174)
	bytes := 1234 // a byte count where the enumeration belongs
	for _, tc := range []struct {
		name string
		p    Params
		want string
	}{
		{"path MTU 1234", Params{PathMTU: bth.MTU(bytes)}, "path MTU"},
		{"path MTU 6", Params{PathMTU: bth.MTU(6)}, "path MTU"},
		{"ACK timeout 32", Params{ACKTimeout: 32}, "ACK timeout"},
		{"retry count 8", Params{RetryCount: 8}, "retry count"},
		{"RNR retry count 9", Params{RNRRetryCount: 9}, "RNR retry count"},
		{"min RNR timer 32", Params{MinRNRTimer: 32}, "RNR timer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := newSide(t, ha.dev)
			p := tc.p
			p.QP = cli.qp
			_, err := ha.agent.Dial(ctx, dst, &p)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial with %+v: %v; want ErrInvalid naming the %s", tc.p, err, tc.want)
			}
			// Nothing was sent and the QP was left as it was.
			if a, _ := cli.qp.Query(); a.State != verbs.StateInit {
				t.Errorf("QP left in %v", a.State)
			}
		})
	}
	if n := ha.link.count(0x10); n != 0 {
		t.Errorf("%d REQs sent for refused parameters", n)
	}

	// What is reported is what is in effect.
	cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
	l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp, ACKTimeout: 16})
	defer l.Close()
	c, err := ha.agent.Dial(ctx, dst, &Params{QP: cli.qp, ACKTimeout: 14, PathMTU: bth.MTU1024, RetryCount: 3,
		RNRRetryCount: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	for _, x := range []struct {
		name string
		c    *Conn
		q    verbs.QP
	}{{"active", c, cli.qp}, {"passive", r.conn, srv.qp}} {
		a, err := x.q.Query()
		if err != nil {
			t.Fatal(err)
		}
		i := x.c.Info()
		if i.LocalACKTimeout != a.Timeout || i.PathMTU != a.PathMTU || i.RetryCount != a.RetryCnt ||
			i.RNRRetryCount != a.RNRRetry || i.InitiatorDepth != a.MaxRDAtomic || i.ResponderResources != a.MaxDestRDAtomic {
			t.Errorf("%s: Info %+v, but the QP has timeout %d, MTU %v, retry %d, RNR retry %d, depths %d/%d", x.name, i,
				a.Timeout, a.PathMTU, a.RetryCnt, a.RNRRetry, a.MaxRDAtomic, a.MaxDestRDAtomic)
		}
	}
	// RNRRetryCount is for the peer: the dialler's 5 is on the passive QP.
	if a, _ := srv.qp.Query(); a.RNRRetry != 5 || a.PathMTU != bth.MTU1024 {
		t.Errorf("passive QP: RNR retry %d, MTU %v; want the dialler's 5 and 1024", a.RNRRetry, a.PathMTU)
	}
}

// TestPassivePathMTU checks that a listener whose Params ask for a lower
// path MTU than the dialler's REQ refuses the request (the REP cannot
// lower it) instead of connecting at the REQ's MTU unasked.
func TestPassivePathMTU(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	srv := newSide(t, hb.dev)
	l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp, PathMTU: bth.MTU1024})
	defer l.Close()
	_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{PathMTU: bth.MTU4096})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != 26 {
		t.Errorf("dial: %v; want a REJ invalid path MTU", err)
	}
	if r := <-accepted; !errors.Is(r.err, ErrInvalid) || !strings.Contains(r.err.Error(), "path MTU") {
		t.Errorf("accept: %v", r.err)
	}
}

// vnet is two hosts on a live in-memory network whose devices and agents
// run their timers on a manual clock, so that a test can let 20 s of
// retries pass in a moment: 198.18.0.1 (a) and 198.18.0.2 (b).
type vnet struct {
	clk  *clock.Manual
	net  *mem.Network
	a, b *host
	// dead drops every packet to or from b: b was killed.
	dead atomic.Bool
}

func newVNet(t *testing.T, ca, cb *Config) *vnet {
	t.Helper()
	v := &vnet{clk: clock.NewManual(time.Unix(1e9, 0))}
	addrA, addrB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	v.net = mem.NewNetwork(&mem.Config{Live: true, Clock: v.clk, DropIf: func(src, dst netip.Addr, _ []byte) bool {
		return v.dead.Load() && (src == addrB || dst == addrB)
	}})
	t.Cleanup(v.net.Close)
	mk := func(addr netip.Addr, cfg *Config) *host {
		ep, err := v.net.Endpoint(addr)
		if err != nil {
			t.Fatal(err)
		}
		fl := &faultLink{Transport: ep}
		d, err := roce.Open(&roce.Config{Transport: fl, Clock: v.clk})
		if err != nil {
			t.Fatal(err)
		}
		return newHostDev(t, d, fl, cfg)
	}
	v.a, v.b = mk(addrA, ca), mk(addrB, cb)
	return v
}

// advance moves the manual clock on by step until cond holds, letting the
// engine's goroutines run between steps, and returns the virtual time it
// took; it fails the test after limit of virtual time.
func (v *vnet) advance(t *testing.T, step, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := v.clk.Now()
	for !cond() {
		if took := v.clk.Now().Sub(start); took >= limit {
			t.Fatalf("%s: not within %v of virtual time", what, limit)
		}
		v.clk.Advance(step)
		time.Sleep(50 * time.Microsecond)
	}
	return v.clk.Now().Sub(start)
}

// connectV connects a's cli to b's srv through a listener on b, with the
// dialler's params p (its QP is cli's).
func connectV(t *testing.T, v *vnet, p Params) (cli, srv *side, c, s *Conn) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	cli, srv = newSide(t, v.a.dev), newSide(t, v.b.dev)
	l, accepted := listenWith(t, ctx, v.b, &Params{QP: srv.qp})
	t.Cleanup(func() { l.Close() })
	p.QP = cli.qp
	c, err := v.a.agent.Dial(ctx, netip.AddrPortFrom(v.b.agent.Addr(), 7174), &p)
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	return cli, srv, c, r.conn
}

// within fails the test when f takes longer than d of real time, and
// returns what f returned.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	start := time.Now()
	err := f()
	took := time.Since(start)
	if took > d {
		t.Errorf("%s took %v, want at most %v", what, took, d)
	}
	t.Logf("%s took %v", what, took)
	return err
}

// waitDone waits up to 5 s of real time for c to end.
func waitDone(t *testing.T, c *Conn, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the connection did not end", what)
	}
}

// TestDeadPeer kills the peer of an established connection (every packet
// to or from it is lost, as when its process or host dies): the first
// work request after completes RETRY_EXC_ERR after eight ACK timeouts,
// within 20 s with rdma_cm's defaults and proportionally sooner with a
// shorter ACK timeout; the connection's Done fires with an Err that says
// why; Close returns within 2 s and leaves the DREQ to the agent, which
// sends it again in the background up to its retries.
func TestDeadPeer(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  uint8
		want uint8 // the QP's ACK timeout
	}{{"defaults", 0, 19}, {"ACK timeout 14", 14, 14}} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			v := newVNet(t, nil, nil)
			cli, srv, c, _ := connectV(t, v, Params{ACKTimeout: tc.ack})
			if got := c.Info().LocalACKTimeout; got != tc.want {
				t.Fatalf("ACK timeout %d, want %d", got, tc.want)
			}
			v.dead.Store(true)
			if err := cli.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
				SGL: []verbs.SGE{{Addr: cli.mr.Addr(), Length: 64, LKey: cli.mr.LKey()}}, RemoteAddr: srv.mr.Addr(),
				RKey: srv.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
			timeout := cmTimeout(tc.want)
			wc := make([]verbs.WC, 1)
			took := v.advance(t, timeout/20, 30*time.Second, "RETRY_EXC_ERR", func() bool { return cli.cq.Poll(wc) == 1 })
			if wc[0].Status != verbs.RetryExcErr {
				t.Fatalf("completion %v, want RETRY_EXC_ERR", &wc[0])
			}
			// The first try and seven retries, each after an ACK timeout.
			if took < 8*timeout || took > 8*timeout+timeout/10 || took > 20*time.Second {
				t.Errorf("RETRY_EXC_ERR after %v, want 8 × %v and at most 20 s", took, timeout)
			}
			t.Logf("RETRY_EXC_ERR after %v of virtual time", took)
			waitDone(t, c, "RETRY_EXC_ERR")
			if err := c.Err(); !errors.Is(err, ErrQPError) || !strings.Contains(err.Error(), "RETRY_EXC_ERR") {
				t.Errorf("Err() = %v; want ErrQPError naming RETRY_EXC_ERR", err)
			}
			t.Log(c.Err())
			if err := within(t, 2*time.Second, "Close with a dead peer", c.Close); err != nil {
				t.Errorf("Close: %v", err)
			}
			// The agent sends the DREQ again in the background, up to its
			// retries, and then stops.
			dreqs := func() int { return v.a.link.count(0x15) }
			v.advance(t, time.Second, 200*time.Second, "the DREQ's retries", func() bool {
				return dreqs() == DefaultMaxRetries+1
			})
			v.clk.Advance(time.Minute)
			time.Sleep(10 * time.Millisecond)
			if n := dreqs(); n != DefaultMaxRetries+1 {
				t.Errorf("%d DREQs sent, want %d", n, DefaultMaxRetries+1)
			}
		})
	}
}

// TestCloseDuringTraffic closes a connection while WRITEs stream: Close
// returns within 2 s, every work request completes (flushed), the peer
// sees the disconnect, and no goroutine is left behind.
func TestCloseDuringTraffic(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, nil, nil)
	ctx := ctxT(t, 20*time.Second)
	cl, sv, c, s := connectPair(t, ctx, ha, hb)
	cli, scq, mr, smr := cl.qp, cl.cq, cl.mr, sv.mr
	flushed := make(chan verbs.Status, 1) // the first failed completion's status, or SUCCESS after 5 s
	started := make(chan struct{})
	go func() { // bounded: 5 s or a flush
		wr := []verbs.SendWR{{Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 1 << 16, LKey: mr.LKey()}}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}}
		wc := make([]verbs.WC, 16)
		deadline, posted, done := time.Now().Add(5*time.Second), 0, 0
		for time.Now().Before(deadline) {
			if posted-done < 8 && cli.PostSend(wr) == nil {
				posted++
				if posted == 8 {
					close(started)
				}
			}
			n := scq.Poll(wc)
			for _, w := range wc[:n] {
				if w.Opcode == verbs.WCRecv {
					// The receive connectPair posted, flushed by Close
					// with the WRITEs.
					continue
				}
				done++
				if w.Status != verbs.Success {
					flushed <- w.Status
					return
				}
			}
			if n == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
		flushed <- verbs.Success
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no traffic")
	}
	time.Sleep(20 * time.Millisecond)
	if err := within(t, 2*time.Second, "Close during traffic", c.Close); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case st := <-flushed:
		if st != verbs.WRFlushErr {
			t.Errorf("the first WRITE that did not succeed after Close completed %v, want WR_FLUSH_ERR", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sender is still waiting for completions")
	}
	waitDone(t, s, "peer")
	if !errors.Is(s.Err(), ErrDisconnected) {
		t.Errorf("peer ended with %v", s.Err())
	}
	s.Close()
}

// TestDialRefused dials a device that is up but has no CM agent (nothing
// called Listen or NewAgent on it): the device answers the REQ with a REJ
// "invalid service ID", as the kernel's CM does, and Dial fails at once.
func TestDialRefused(t *testing.T) {
	checkNoLeak(t)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	ha := func() *host {
		ep, err := n.Endpoint(netip.MustParseAddr("198.18.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		return newHost(t, ep, nil)
	}()
	ep, err := n.Endpoint(netip.MustParseAddr("198.18.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := roce.Open(&roce.Config{Transport: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	ctx := ctxT(t, 30*time.Second)
	err = within(t, time.Second, "Dial to a device without an agent", func() error {
		_, err := ha.agent.Dial(ctx, netip.MustParseAddrPort("198.18.0.2:7174"), nil)
		return err
	})
	if !errors.Is(err, ErrConnRefused) {
		t.Fatalf("Dial: %v; want ErrConnRefused", err)
	}
	t.Log(err)
}

// TestDialUnreachable dials an address where nothing receives RoCEv2:
// the network says so (an address without an endpoint in memory, an ICMP
// port unreachable on loopback) and Dial fails within 3 s with
// ErrUnreachable, though with the default Config the REQ would be sent
// again only after 6.4 s. The caller's QP is left in ERR.
func TestDialUnreachable(t *testing.T) {
	type target struct {
		dev  *roce.Device
		addr netip.AddrPort
	}
	cases := []struct {
		name string
		open func(t *testing.T) target
	}{
		{"mem no endpoint", func(t *testing.T) target {
			n := mem.NewNetwork(&mem.Config{Live: true})
			t.Cleanup(n.Close)
			d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
			if err != nil {
				t.Fatal(err)
			}
			return target{d, netip.MustParseAddrPort("198.18.0.9:7174")}
		}},
		{"udp 127.0.0.2 no socket", func(t *testing.T) target {
			port := freePort(t)
			d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}})
			if err != nil {
				t.Skipf("udp: %v", err)
			}
			return target{d, netip.MustParseAddrPort("127.0.0.2:7174")}
		}},
		{"udp 127.0.0.1 other port", func(t *testing.T) target {
			port, other := freePort(t), freePort(t)
			d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: other}})
			if err != nil {
				t.Skipf("udp: %v", err)
			}
			return target{d, netip.MustParseAddrPort("127.0.0.1:7174")}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			tg := tc.open(t)
			h := newHostDev(t, tg.dev, nil, nil)
			cli := newSide(t, h.dev)
			cli.postRecv(t)
			ctx := ctxT(t, 30*time.Second)
			err := within(t, 3*time.Second, "Dial to an unreachable peer", func() error {
				_, err := h.agent.Dial(ctx, tg.addr, &Params{QP: cli.qp})
				return err
			})
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), tg.addr.String()) {
				t.Fatalf("Dial: %v; want ErrUnreachable naming %v", err, tg.addr)
			}
			t.Log(err)
			if wc := waitWC(t, cli.cq); wc.Status != verbs.WRFlushErr {
				t.Errorf("posted receive completed %v, want WR_FLUSH_ERR", &wc)
			}
			// A datagram service there is just as unreachable.
			_, err = within2(t, 3*time.Second, "ResolveDatagram of an unreachable peer", func() (*DatagramPeer, error) {
				return h.agent.ResolveDatagram(ctx, tg.addr, nil)
			})
			if !errors.Is(err, ErrUnreachable) {
				t.Errorf("ResolveDatagram: %v; want ErrUnreachable", err)
			}
		})
	}
}

// within2 is within for a call that returns a value too.
func within2[T any](t *testing.T, d time.Duration, what string, f func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := within(t, d, what, func() error {
		var err error
		v, err = f()
		return err
	})
	return v, err
}

// TestDialSilent dials a peer that answers nothing at all (its packets are
// all lost): the REQ announces rdma_cm's CM response timeout 20 and 15
// retries, but Dial gives up by itself after Config.ConnectTimeout, within
// 30 s, having sent the REQ every 6.4 s meanwhile.
func TestDialSilent(t *testing.T) {
	checkNoLeak(t)
	v := newVNet(t, nil, nil)
	v.dead.Store(true)
	v.a.link.record()
	errc := make(chan error, 1)
	go func() {
		_, err := v.a.agent.Dial(context.Background(), netip.MustParseAddrPort("198.18.0.2:7174"), nil)
		errc <- err
	}()
	var err error
	took := v.advance(t, 100*time.Millisecond, time.Minute, "Dial's end", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, ErrTimeout) || took > 30*time.Second || took < DefaultConnectTimeout {
		t.Fatalf("Dial: %v after %v; want ErrTimeout after %v", err, took, DefaultConnectTimeout)
	}
	t.Logf("%v after %v of virtual time", err, took)
	reqs := 0
	for _, b := range v.a.link.recorded() {
		h, m, err := mad.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if req, ok := m.(*mad.REQ); ok {
			reqs++
			if req.MaxCMRetries != 15 || req.LocalCMResponseTimeout != 20 || req.RemoteCMResponseTimeout != 20 {
				t.Errorf("REQ %d (TID %#x): max CM retries %d, response timeouts %d and %d; want rdma_cm's 15 and 20",
					reqs, h.TID, req.MaxCMRetries, req.LocalCMResponseTimeout, req.RemoteCMResponseTimeout)
			}
		}
	}
	if want := int(DefaultConnectTimeout/v.a.agent.reqTimeout()) + 1; reqs != want {
		t.Errorf("%d REQs sent, want %d (one every %v)", reqs, want, v.a.agent.reqTimeout())
	}
}

// TestContextCancel checks that cancelling the context of a blocking call
// ends it at once and leaves its QP in ERR, so that work requests waiting
// on it end too: a SEND that waits for ever on a peer that posts no
// receive (RNR retry 7), ended by CloseContext or Close; a Dial that
// waits for a REP, an Accept that waits for a request or an RTU, each
// flushing the receive posted on its QP.
func TestContextCancel(t *testing.T) {
	const atOnce = time.Second
	for _, how := range []string{"CloseContext", "Close"} {
		t.Run("RNR wait/"+how, func(t *testing.T) {
			checkNoLeak(t)
			ha, hb := memPair(t, nil, nil)
			ctx := ctxT(t, 20*time.Second)
			cli, srv := newSide(t, ha.dev), newSide(t, hb.dev) // srv posts no receive
			l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp})
			defer l.Close()
			c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
			if err != nil {
				t.Fatal(err)
			}
			r := <-accepted
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.conn.Close()
			if err := cli.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SGL: []verbs.SGE{{Addr: cli.mr.Addr(), Length: 16, LKey: cli.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if n := cli.cq.Poll(make([]verbs.WC, 1)); n != 0 {
				t.Fatal("the SEND completed with no receive posted")
			}
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = within(t, atOnce, how, func() error {
				if how == "Close" {
					return c.Close()
				}
				return c.CloseContext(cctx)
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", how, err)
			}
			if wc := waitWC(t, cli.cq); wc.ID != 9 || wc.Status != verbs.WRFlushErr {
				t.Errorf("SEND completed %v, want WR_FLUSH_ERR", &wc)
			}
		})
	}
	t.Run("Dial", func(t *testing.T) {
		checkNoLeak(t)
		ha, hb := memPair(t, nil, nil)
		ha.link.dropNext(mad.AttrREQ, 100)
		cli := newSide(t, ha.dev)
		cli.postRecv(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
		if !errors.Is(err, context.Canceled) || time.Since(start) > 50*time.Millisecond+atOnce {
			t.Errorf("Dial: %v after %v; want context.Canceled at once", err, time.Since(start))
		}
		if wc := waitWC(t, cli.cq); wc.Status != verbs.WRFlushErr {
			t.Errorf("receive completed %v, want WR_FLUSH_ERR", &wc)
		}
	})
	t.Run("Accept", func(t *testing.T) {
		checkNoLeak(t)
		ha, hb := memPair(t, nil, nil)
		srv := newSide(t, hb.dev)
		srv.postRecv(t)
		l, err := hb.agent.Listen(context.Background(), netip.AddrPortFrom(hb.agent.Addr(), 7174),
			&ListenConfig{OnRequest: func(context.Context, *Request) (*Params, error) { return &Params{QP: srv.qp}, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// Nothing comes.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if _, err := within2(t, atOnce, "Accept with no request", func() (*Conn, error) { return l.Accept(ctx) }); !errors.Is(err, context.Canceled) {
			t.Errorf("Accept with no request: %v", err)
		}
		// A request comes, but its RTU never does.
		ha.link.dropNext(mad.AttrRTU, 100)
		dialed := make(chan *Conn, 1)
		go func() {
			c, _ := ha.agent.Dial(ctxT(t, 10*time.Second), netip.AddrPortFrom(hb.agent.Addr(), 7174), nil)
			dialed <- c // closed once Accept is over: its DREQ would stand in for the RTU
		}()
		defer func() {
			if c := <-dialed; c != nil {
				c.Close()
			}
		}()
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		if _, err := within2(t, 100*time.Millisecond+atOnce, "Accept waiting for the RTU",
			func() (*Conn, error) { return l.Accept(ctx) }); !errors.Is(err, context.Canceled) {
			t.Errorf("Accept waiting for the RTU: %v", err)
		}
		if wc := waitWC(t, srv.cq); wc.Status != verbs.WRFlushErr {
			t.Errorf("receive completed %v, want WR_FLUSH_ERR", &wc)
		}
	})
}

// foreignQP hides the engine's QP behind the verbs interface alone, as a
// QP of another backend would be: it cannot say when it enters ERR.
type foreignQP struct{ verbs.QP }

// TestQPErrorEndsConn checks that a connection ends when the program
// moves its QP to ERR, both for the engine's QP (which tells the agent)
// and for one that cannot tell (which the agent polls every second).
func TestQPErrorEndsConn(t *testing.T) {
	for _, foreign := range []bool{false, true} {
		name := "engine QP"
		if foreign {
			name = "foreign QP"
		}
		t.Run(name, func(t *testing.T) {
			checkNoLeak(t)
			ha, hb := memPair(t, fastConfig(), fastConfig())
			ctx := ctxT(t, 10*time.Second)
			cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
			l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp})
			defer l.Close()
			var q verbs.QP = cli.qp
			if foreign {
				q = foreignQP{cli.qp}
			}
			c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: q})
			if err != nil {
				t.Fatal(err)
			}
			r := <-accepted
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.conn.Close()
			if err := cli.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			waitDone(t, c, "QP moved to ERR")
			if took := time.Since(start); foreign && took > 2*qpPollInterval || !foreign && took > time.Second {
				t.Errorf("Done after %v", took)
			}
			if err := c.Err(); !errors.Is(err, ErrQPError) {
				t.Errorf("Err() = %v; want ErrQPError", err)
			}
			t.Log(c.Err())
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			waitDone(t, r.conn, "peer")
		})
	}
}
