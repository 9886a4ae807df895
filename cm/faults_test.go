package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// connectPair dials from a to b's port 7174 with application QPs on both
// sides and returns the two ends, failing the test on error.
func connectPair(t *testing.T, ctx context.Context, ha, hb *host) (cli, srv *side, c, s *Conn) {
	t.Helper()
	cli, srv = newSide(t, ha.dev), newSide(t, hb.dev)
	srv.postRecv(t)
	cli.postRecv(t)
	l, accepted := listenOne(t, ctx, hb, srv, nil)
	t.Cleanup(func() { l.Close() })
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatalf("accept: %v", r.err)
	}
	return cli, srv, c, r.conn
}

func TestRejectNoListener(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			checkNoLeak(t)
			ha, hb := be.open(t)
			ctx := ctxT(t, 10*time.Second)
			cli := newSide(t, ha.dev)
			// A listener on another port does not answer for 7174.
			l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7175), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
			var rej *RejectError
			if !errors.As(err, &rej) || !errors.Is(err, ErrConnRefused) || !errors.Is(err, ErrRejected) {
				t.Fatalf("dial: %v", err)
			}
			if rej.Reason != mad.RejInvalidServiceID || rej.Msg != mad.RejectedREQ || rej.Remote.Port() != 7174 {
				t.Errorf("reject %+v", rej)
			}
			t.Log(err)
			if a, _ := cli.qp.Query(); a.State != verbs.StateErr {
				t.Errorf("QP is %v after the REJ", a.State)
			}
			if n := hb.agent.Stats().Sent["REJ"]; n != 1 {
				t.Errorf("passive side sent %d REJs", n)
			}
		})
	}
}

func TestRejectByApplication(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	srv := newSide(t, hb.dev)
	calls := 0
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(_ context.Context, r *Request) (*Params, error) {
			calls++
			if bytes.HasPrefix(r.PrivateData, []byte("let me in")) {
				return &Params{QP: srv.qp, PrivateData: []byte("welcome")}, nil
			}
			return nil, Reject([]byte("go away"))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- acceptResult{conn: c, err: err}
	}()
	// The first request is refused with private data; Accept goes on.
	cli := newSide(t, ha.dev)
	_, err = ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp, PrivateData: []byte("hello")})
	var rej *RejectError
	if !errors.As(err, &rej) || errors.Is(err, ErrConnRefused) {
		t.Fatalf("dial: %v", err)
	}
	if rej.Reason != mad.RejConsumerDefined || len(rej.PrivateData) != mad.REJPrivateDataLen ||
		!bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Errorf("reject %v, private data %q", rej, rej.PrivateData)
	}
	// The second is accepted by the same Accept call.
	cli2 := newSide(t, ha.dev)
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli2.qp, PrivateData: []byte("let me in")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil || calls != 2 || !bytes.HasPrefix(c.PrivateData(), []byte("welcome")) {
		t.Fatalf("accept: %v after %d requests; private data %q", r.err, calls, c.PrivateData())
	}
	c.Close()
	r.conn.Close()
}

func TestAcceptHookError(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	boom := errors.New("out of QPs")
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 9),
		&ListenConfig{OnRequest: func(context.Context, *Request) (*Params, error) { return nil, boom }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(ctx)
		accepted <- err
	}()
	_, err = ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 9), nil)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("dial: %v", err)
	}
	if err := <-accepted; !errors.Is(err, boom) {
		t.Fatalf("accept: %v", err)
	}
}

// TestLostMessages drops the first copies of each message of the
// exchange and checks that the retries recover the connection and the
// disconnect.
func TestLostMessages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attr   uint16
		n      int
		active bool // the active side sends the message
	}{
		{"REQ", mad.AttrREQ, 2, true},
		{"REP", mad.AttrREP, 2, false},
		{"RTU", mad.AttrRTU, 1, true},
		{"DREQ", mad.AttrDREQ, 2, true},
		{"DREP", mad.AttrDREP, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			ha, hb := memPair(t, fastConfig(), fastConfig())
			ctx := ctxT(t, 10*time.Second)
			from := hb
			if tc.active {
				from = ha
			}
			from.link.dropNext(tc.attr, tc.n)
			cli, srv, c, s := connectPair(t, ctx, ha, hb)
			exchange(t, cli, srv)
			if err := c.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			<-s.Done()
			s.Close()
			retx := ha.agent.Stats().Retransmits + hb.agent.Stats().Retransmits
			if retx == 0 {
				t.Errorf("no retransmission recovered the lost %s", tc.name)
			}
			if got := from.link.count(tc.attr); got < 1 {
				t.Errorf("%s never got through", tc.name)
			}
			t.Logf("retransmits %d, duplicates %d/%d", retx, ha.agent.Stats().Duplicates, hb.agent.Stats().Duplicates)
		})
	}
}

// TestDuplicates sends REQ, REP, RTU, DREQ and DREP twice each and checks
// that each is answered without a second connection.
func TestDuplicates(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	for _, attr := range []uint16{mad.AttrREQ, mad.AttrRTU, mad.AttrDREQ} {
		ha.link.dupNext(attr, 1)
	}
	for _, attr := range []uint16{mad.AttrREP, mad.AttrDREP} {
		hb.link.dupNext(attr, 1)
	}
	cli, srv, c, s := connectPair(t, ctx, ha, hb)
	exchange(t, cli, srv)
	// No second connection: the listener has nothing more to accept.
	sa, sb := ha.agent.Stats(), hb.agent.Stats()
	if sb.Received["REQ"] < 2 || sa.Received["REP"] < 2 {
		t.Fatalf("duplicates did not arrive: active %+v passive %+v", sa, sb)
	}
	if sb.Duplicates == 0 || sa.Duplicates == 0 {
		t.Errorf("duplicates not answered: active %d passive %d", sa.Duplicates, sb.Duplicates)
	}
	hb.agent.mu.Lock()
	n := len(hb.agent.conns)
	hb.agent.mu.Unlock()
	if n != 1 {
		t.Errorf("passive side has %d connections", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	s.Close()
	eventually(t, "the duplicate DREQ's DREP", func() bool { return hb.link.count(mad.AttrDREP) >= 3 })
}

func TestTimeout(t *testing.T) {
	checkNoLeak(t)
	cfg := fastConfig()
	ha, hb := memPair(t, cfg, fastConfig())
	ctx := ctxT(t, 10*time.Second)
	ha.link.dropNext(mad.AttrREQ, 100)
	cli := newSide(t, ha.dev)
	_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("dial: %v", err)
	}
	t.Log(err)
	ha.link.mu.Lock()
	dropped := 100 - ha.link.drop[mad.AttrREQ]
	ha.link.mu.Unlock()
	if dropped != int(cfg.MaxRetries)+1 {
		t.Errorf("sent %d REQs, want %d", dropped, cfg.MaxRetries+1)
	}
	if st := ha.agent.Stats(); st.Timeouts != 1 || st.Retransmits != uint64(cfg.MaxRetries) {
		t.Errorf("stats %+v", st)
	}
	if a, _ := cli.qp.Query(); a.State != verbs.StateErr {
		t.Errorf("QP is %v", a.State)
	}
	// The REP that never gets an RTU times out on the passive side too.
	hb2, ha2 := memPair(t, fastConfig(), fastConfig())
	ha2.link.dropNext(mad.AttrRTU, 100)
	ha2.link.dropNext(mad.AttrREQ, 0)
	l, err := hb2.agent.Listen(ctx, netip.AddrPortFrom(hb2.agent.Addr(), 7174), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(ctx)
		accepted <- err
	}()
	c, err := ha2.agent.Dial(ctx, netip.AddrPortFrom(hb2.agent.Addr(), 7174), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseContext(ctxT(t, time.Second))
	if err := <-accepted; !errors.Is(err, ErrTimeout) {
		t.Fatalf("accept: %v", err)
	}
}

func TestDialContext(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, &Config{}, fastConfig())
	ha.link.dropNext(mad.AttrREQ, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial: %v", err)
	}
	// Giving up sends a REJ "timeout" with the CA GUID, as the IB CM does.
	if n := ha.link.count(mad.AttrREJ); n != 1 {
		t.Errorf("sent %d REJs", n)
	}
}

// TestMRA has the application take longer to decide than the REQ's
// retries last: the passive side answers the repeated REQ with an MRA,
// which makes the active side wait.
func TestMRA(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	budget := time.Duration(fastConfig().MaxRetries+1) * ha.agent.reqTimeout()
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
			time.Sleep(2 * budget)
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- acceptResult{conn: c, err: err}
	}()
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), nil)
	if err != nil {
		t.Fatalf("dial (REQ budget %v without MRA): %v", budget, err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	if hb.agent.Stats().Sent["MRA"] == 0 {
		t.Error("no MRA sent")
	}
	c.Close()
	r.conn.Close()
}

// TestAgentCreatesQP lets the agent make the QPs on both sides.
func TestAgentCreatesQP(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- acceptResult{conn: c, err: err}
	}()
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), l.Addr().Port()),
		&Params{ResponderResources: 4, InitiatorDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.conn
	// The passive side offered 1 and 1: the minimum wins both ways.
	if ci := c.Info(); ci.InitiatorDepth != 1 || ci.ResponderResources != 1 {
		t.Errorf("active negotiated %+v", ci)
	}
	for _, x := range []*Conn{c, s} {
		if x.PD() == nil || x.QP() == nil {
			t.Fatal("no PD or QP")
		}
		if a, _ := x.QP().Query(); a.State != verbs.StateRTS || a.MaxRDAtomic != 1 || a.MaxDestRDAtomic != 1 {
			t.Errorf("QP %+v", a)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close destroyed the QPs the agent made.
	if _, err := c.QP().Query(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("QP after close: %v", err)
	}
}

// TestDisconnectCollision has both sides close at once: each DREQ is
// answered and both closes succeed.
func TestDisconnectCollision(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	_, _, c, s := connectPair(t, ctx, ha, hb)
	errs := make(chan error, 2)
	for _, x := range []*Conn{c, s} {
		go func() { errs <- x.Close() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestAgentClose(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	_, _, c, s := connectPair(t, ctx, ha, hb)
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	acceptErr := make(chan error, 1)
	go func() {
		_, err := l.Accept(ctx)
		acceptErr <- err
	}()
	if err := hb.agent.Close(); err != nil {
		t.Fatal(err)
	}
	// Closed on this side: ErrClosed, which matches net.ErrClosed as
	// package net's closed connections and listeners do.
	if err := <-acceptErr; !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after agent close: %v", err)
	}
	if err := s.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("passive connection ended with %v", err)
	}
	// The agent's DREQ reached the other side.
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the peer did not see the agent close")
	}
	if _, err := hb.agent.Dial(ctx, netip.AddrPortFrom(ha.agent.Addr(), 1), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("dial on a closed agent: %v", err)
	}
	if _, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 2), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("listen on a closed agent: %v", err)
	}
}

func TestNewAgentErrors(t *testing.T) {
	checkNoLeak(t)
	ha, _ := memPair(t, nil, nil)
	if _, err := NewAgent(ha.dev, nil); !errors.Is(err, verbs.ErrGSIExists) {
		t.Errorf("second agent: %v", err)
	}
	if _, err := NewAgent(hwDevice{}, nil); !errors.Is(err, ErrNotSoftware) {
		t.Errorf("hardware device: %v", err)
	} else {
		t.Log(err)
	}
	if _, err := NewAgent(roce.Trace(ha.dev, slog.New(slog.DiscardHandler)), nil); !errors.Is(err, verbs.ErrGSIExists) {
		t.Errorf("traced device: %v", err)
	}
	if _, err := NewAgent(ha.dev, &Config{ResponseTimeout: 32}); err == nil {
		t.Error("response timeout 32 accepted")
	}
}

// hwDevice stands for a device of another backend.
type hwDevice struct{ verbs.Device }

func (hwDevice) Name() string { return "rxe0" }

func TestBadArguments(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	a := ha.agent
	dst := netip.AddrPortFrom(hb.agent.Addr(), 7174)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"IPv6 peer", dial(ctx, a, netip.MustParseAddrPort("[2001:db8::1]:7174"), nil), ErrAddr},
		{"port 0", dial(ctx, a, netip.AddrPortFrom(hb.agent.Addr(), 0), nil), ErrAddr},
		{"long private data", dial(ctx, a, dst, &Params{PrivateData: make([]byte, 57)}), ErrPrivateData},
		{"UD QP", dial(ctx, a, dst, &Params{QP: udQP(t, ha.dev)}), verbs.ErrInvalidAttr},
		{"QP in RTS", dial(ctx, a, dst, &Params{QP: rtsQP(t, ha.dev)}), ErrQPState},
		{"listen on another address", listen(ctx, a, netip.MustParseAddrPort("198.18.0.9:1")), ErrAddr},
		{"resolve with long data", resolve(ctx, a, dst, make([]byte, 181)), ErrPrivateData},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	l, err := a.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := listen(ctx, a, netip.AddrPortFrom(a.Addr(), 5)); !errors.Is(err, ErrAddr) {
		t.Errorf("second listener on a port: %v", err)
	}
}

func dial(ctx context.Context, a *Agent, addr netip.AddrPort, p *Params) error {
	c, err := a.Dial(ctx, addr, p)
	if err == nil {
		c.Close()
	}
	return err
}

func listen(ctx context.Context, a *Agent, addr netip.AddrPort) error {
	l, err := a.Listen(ctx, addr, nil)
	if err == nil {
		l.Close()
	}
	return err
}

func resolve(ctx context.Context, a *Agent, addr netip.AddrPort, pd []byte) error {
	_, err := a.ResolveDatagram(ctx, addr, pd)
	return err
}

func udQP(t testing.TB, d verbs.Device) verbs.QP {
	s := newSide(t, d)
	q, err := s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: s.cq, RecvCQ: s.cq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func rtsQP(t testing.TB, d verbs.Device) verbs.QP {
	s := newSide(t, d)
	if err := roce.Connect(s.qp, &roce.Remote{QPN: 99, GID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.2"))}, nil); err != nil {
		t.Fatal(err)
	}
	return s.qp
}

// TestCloseWhileDeciding closes the passive agent while OnRequest is
// still deciding: the peer gets a REJ, Accept returns ErrClosed and the
// QP the hook made is left to the caller.
func TestCloseWhileDeciding(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	srv := newSide(t, hb.dev)
	deciding, release := make(chan struct{}), make(chan struct{})
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(context.Context, *Request) (*Params, error) {
			close(deciding)
			<-release
			return &Params{QP: srv.qp}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	acceptErr := make(chan error, 1)
	go func() {
		_, err := l.Accept(ctx)
		acceptErr <- err
	}()
	dialErr := make(chan error, 1)
	go func() {
		_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), nil)
		dialErr <- err
	}()
	<-deciding
	if err := hb.agent.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-dialErr; !errors.Is(err, ErrRejected) {
		t.Errorf("dial: %v", err)
	}
	close(release)
	if err := <-acceptErr; !errors.Is(err, ErrClosed) {
		t.Errorf("accept: %v", err)
	}
	if a, _ := srv.qp.Query(); a.State != verbs.StateErr {
		t.Errorf("QP is %v", a.State)
	}
}

// TestOnReject: a request the agent refuses itself (no listener on the
// port asked for) is told to Config.OnReject with who asked, the port
// asked for and the ports listened on; one a listener accepts is not.
func TestOnReject(t *testing.T) {
	checkNoLeak(t)
	got := make(chan Rejection, 4)
	cfg := fastConfig()
	cfg.OnReject = func(r Rejection) { got <- r }
	hs := memHosts(t, fastConfig(), cfg)
	ha, hb := hs[0], hs[1]
	ctx := ctxT(t, 10*time.Second)
	cli := newSide(t, ha.dev)
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7472), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7471), &Params{QP: cli.qp}); !errors.Is(err, ErrConnRefused) {
		t.Fatalf("dial: %v", err)
	}
	select {
	case r := <-got:
		want := "connection request from 198.18.0.1 for rdma_cm port 7471 rejected: invalid service ID (reason 8): " +
			"nothing listens on port 7471 (listening on 7472)"
		if r.From != ha.agent.Addr() || r.Port != 7471 || r.Reason != mad.RejInvalidServiceID ||
			fmt.Sprint(r.Listening) != "[7472]" || r.String() != want {
			t.Errorf("rejection %+v\n%q\nwant %q", r, r, want)
		}
	case <-ctx.Done():
		t.Fatal("OnReject was not called")
	}
	select {
	case r := <-got:
		t.Errorf("a second rejection: %v", r)
	default:
	}
}
