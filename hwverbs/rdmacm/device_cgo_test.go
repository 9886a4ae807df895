//go:build hwverbs && cgo && linux

package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/verbs"
)

var unreachableAddr = flag.String("rdmacm.unreachable", "",
	"TestDialUnreachable: an address on the device's network that no host holds (the lab's: 198.18.0.99)")

// serve accepts connections on l in the background until the test ends;
// each result arrives on the channel.
type accepted struct {
	c   *Conn
	err error
}

func serve(t *testing.T, l *Listener) <-chan accepted {
	ch := make(chan accepted, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			c, err := l.Accept(ctx)
			if ctx.Err() != nil || errors.Is(err, cm.ErrClosed) {
				if c != nil {
					c.Close()
				}
				return
			}
			ch <- accepted{c, err}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ch
}

func next(t *testing.T, ch <-chan accepted) *Conn {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Accept: %v", a.err)
		}
		t.Cleanup(func() { a.c.Close() })
		return a.c
	case <-time.After(15 * time.Second):
		t.Fatal("no connection accepted in 15 s")
	}
	return nil
}

func listenT(t *testing.T, dev *hwverbs.Device, cfg *ListenConfig) *Listener {
	t.Helper()
	l, err := Listen(t.Context(), dev, netip.AddrPortFrom(dev.Addr(), 0), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if l.Addr().Addr() != dev.Addr() || l.Addr().Port() == 0 {
		t.Fatalf("listening on %v, want %v and a port", l.Addr(), dev.Addr())
	}
	return l
}

func dialCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A connection to this device's own address: the dialler brings its own
// QP with a receive posted, the listener has one made in its own PD and
// CQ; private data both ways; what each side negotiated matches the
// other's; SEND both ways, WRITE and READ; CloseContext gets the DREP and
// the peer sees the disconnect.
func TestConnect(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	srv := newEP(t, dev, true)
	var req Request
	l := listenT(t, dev, &ListenConfig{OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
		req = *r
		return &Params{PD: srv.pd, SendCQ: srv.cq, RecvCQ: srv.cq, PrivateData: srv.info(),
			ResponderResources: 4, InitiatorDepth: 4}, nil
	}})
	acc := serve(t, l)

	cli := newEP(t, dev, false)
	cli.recv(0, 64)
	copy(cli.mr.Bytes()[8192:], pattern(2, 4000))
	hello := []byte("hello from the dialler")
	c, err := Dial(dialCtx(t), dev, l.Addr(), &Params{QP: cli.qp, PrivateData: hello, ResponderResources: 2,
		InitiatorDepth: 2, ACKTimeout: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := next(t, acc)
	srv.qp = s.QP()

	if pd := s.PrivateData(); len(pd) != MaxREQData || !bytes.HasPrefix(pd, hello) || req.PrivateData == nil ||
		!bytes.Equal(req.PrivateData, pd) {
		t.Errorf("listener's private data %q (request %q)", pd, req.PrivateData)
	}
	if pd := c.PrivateData(); len(pd) != MaxREPData || !bytes.HasPrefix(pd, srv.info()) {
		t.Errorf("dialler's private data %x", pd)
	}
	if req.Remote != c.LocalAddr() || req.Local != l.Addr() || c.RemoteAddr() != l.Addr() ||
		s.RemoteAddr() != c.LocalAddr() || req.RemoteQPN != cli.qp.QPN() || req.PathMTU == 0 {
		t.Errorf("addresses: request %+v; dialler %v -> %v; listener %v <- %v",
			req, c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	ci, si := c.Info(), s.Info()
	t.Logf("dialler %+v", ci)
	t.Logf("listener %+v", si)
	if ci.LocalQPN != si.RemoteQPN || si.LocalQPN != ci.RemoteQPN || ci.SendPSN != si.RecvPSN ||
		si.SendPSN != ci.RecvPSN || ci.PathMTU != si.PathMTU || ci.PathMTU == 0 {
		t.Errorf("the two sides disagree")
	}
	if ci.ResponderResources != 2 || ci.InitiatorDepth != 2 || si.ResponderResources != 2 || si.InitiatorDepth != 2 {
		t.Errorf("depths: dialler %d/%d, listener %d/%d, want 2 each", ci.ResponderResources, ci.InitiatorDepth,
			si.ResponderResources, si.InitiatorDepth)
	}
	if ci.LocalACKTimeout != 16 || ci.RetryCount != 7 || ci.RNRRetryCount != 7 {
		t.Errorf("dialler's timeout %d, retries %d/%d", ci.LocalACKTimeout, ci.RetryCount, ci.RNRRetryCount)
	}
	if s.PD() != nil || c.PD() != nil {
		t.Error("a connection claims the caller's PD")
	}
	traffic(t, cli, srv, parseInfo(c.PrivateData()))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.CloseContext(ctx); err != nil {
		t.Errorf("CloseContext: %v", err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the listener's side did not see the disconnect in 5 s")
	}
	if !errors.Is(s.Err(), cm.ErrDisconnected) || !errors.Is(s.Err(), io.EOF) || !errors.Is(c.Err(), cm.ErrClosed) {
		t.Errorf("Err: listener %v, dialler %v", s.Err(), c.Err())
	}
	for _, e := range []*ep{cli, srv} {
		if a, err := e.qp.Query(); err == nil && a.State != verbs.StateErr {
			t.Errorf("QP %d is %v after the disconnect", e.qp.QPN(), a.State)
		}
	}
	s.Close()
	if _, err := srv.qp.Query(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("the QP the listener's connection made: %v after Close, want destroyed", err)
	}
}

// traffic runs SEND both ways, a WRITE and a READ between the dialler's
// endpoint cli (a receive at 0 posted) and the listener's srv (buffer r),
// checking the data.
func traffic(t *testing.T, cli, srv *ep, r remote) {
	t.Helper()
	srv.recv(0, 64)
	copy(cli.mr.Bytes()[1024:], "ping")
	cli.post(verbs.OpSend, 1024, 4, remote{}, 0)
	cli.done(verbs.WCSend)
	if wc := srv.done(verbs.WCRecv); wc.ByteLen != 4 || string(srv.mr.Bytes()[:4]) != "ping" {
		t.Errorf("listener received %q", srv.mr.Bytes()[:wc.ByteLen])
	}
	copy(srv.mr.Bytes()[1024:], "pong")
	srv.post(verbs.OpSend, 1024, 4, remote{}, 0)
	srv.done(verbs.WCSend)
	if wc := cli.done(verbs.WCRecv); wc.ByteLen != 4 || string(cli.mr.Bytes()[:4]) != "pong" {
		t.Errorf("dialler received %q", cli.mr.Bytes()[:wc.ByteLen])
	}
	want := pattern(1, 4000)
	copy(cli.mr.Bytes()[4096:], want)
	cli.post(verbs.OpWrite, 4096, len(want), r, 4096)
	cli.done(verbs.WCWrite)
	cli.post(verbs.OpRead, 16384, len(want), r, 4096)
	cli.done(verbs.WCRead)
	if !bytes.Equal(srv.mr.Bytes()[4096:4096+len(want)], want) || !bytes.Equal(cli.mr.Bytes()[16384:16384+len(want)], want) {
		t.Error("WRITE or READ moved other bytes")
	}
}

// Neither side brings anything: each connection makes its own PD, CQ
// and QP, which Close destroys.
func TestConnectOwned(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	l := listenT(t, dev, nil)
	acc := serve(t, l)
	c, err := Dial(dialCtx(t), dev, l.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := next(t, acc)
	for _, x := range []*Conn{c, s} {
		scq, rcq := x.CQs()
		if x.PD() == nil || scq == nil || rcq == nil || x.QP() == nil {
			t.Fatalf("owned objects: %v %v %v %v", x.PD(), scq, rcq, x.QP())
		}
	}
	cli, srv := epOf(t, c), epOf(t, s)
	srv.recv(0, 64)
	cli.recv(0, 64)
	traffic(t, cli, srv, remote{srv.mr.Addr(), srv.mr.RKey(), bufLen})
	qp := c.QP()
	cli.mr.Dereg()
	srv.mr.Dereg()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := qp.Query(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("owned QP after Close: %v", err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect in 5 s")
	}
}

// epOf is the endpoint of a connection that made its own objects, with a
// buffer registered in its PD.
func epOf(t *testing.T, c *Conn) *ep {
	scq, _ := c.CQs()
	e := &ep{t: t, pd: c.PD(), cq: scq, qp: c.QP(), wcs: make([]verbs.WC, 1)}
	var err error
	if e.mr, err = e.pd.RegMR(make([]byte, bufLen), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		t.Fatal(err)
	}
	return e
}

// A refusal made with cm.Reject reaches the dialler as a *cm.RejectError
// with reason 28 and the private data, and Accept goes on; another
// OnRequest error rejects without data and Accept returns it. A failed
// Dial leaves the caller's QP in ERR.
func TestReject(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	errNo := errors.New("not today")
	n := 0
	l := listenT(t, dev, &ListenConfig{OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
		n++
		switch n {
		case 1:
			return nil, cm.Reject([]byte("go away: " + string(bytes.TrimRight(r.PrivateData, "\x00"))))
		case 2:
			return nil, errNo
		}
		return nil, nil
	}})
	acc := serve(t, l)
	cli := newEP(t, dev, false)
	cli.recv(0, 64)
	_, err := Dial(dialCtx(t), dev, l.Addr(), &Params{QP: cli.qp, PrivateData: []byte("alice")})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || !errors.Is(err, cm.ErrRejected) || errors.Is(err, cm.ErrConnRefused) {
		t.Fatalf("Dial: %v, want a REJ", err)
	}
	if rej.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away: alice")) ||
		rej.Remote != l.Addr() {
		t.Errorf("REJ %+v (%q)", rej, rej.PrivateData)
	}
	if a, err := cli.qp.Query(); err != nil || a.State != verbs.StateErr {
		t.Errorf("caller's QP after the REJ: %v %v", a.State, err)
	}
	if wc := cli.wait(); wc.Status != verbs.WRFlushErr {
		t.Errorf("the posted receive: %v, want flushed", wc)
	}

	_, err = Dial(dialCtx(t), dev, l.Addr(), nil)
	if !errors.As(err, &rej) || rej.Reason != mad.RejConsumerDefined || len(bytes.Trim(rej.PrivateData, "\x00")) != 0 {
		t.Errorf("second Dial: %v, want a REJ without data", err)
	}
	select {
	case a := <-acc:
		if !errors.Is(a.err, errNo) {
			t.Errorf("Accept: %v, want OnRequest's error", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return OnRequest's error")
	}
	c, err := Dial(dialCtx(t), dev, l.Addr(), nil)
	if err != nil {
		t.Fatalf("third Dial: %v", err)
	}
	next(t, acc)
	c.Close()
}

// A port nobody listens on refuses at once (REJ reason 8).
func TestDialRefused(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	l := listenT(t, dev, nil)
	addr := l.Addr()
	l.Close()
	start := time.Now()
	_, err := Dial(dialCtx(t), dev, addr, nil)
	var rej *cm.RejectError
	if !errors.Is(err, cm.ErrConnRefused) || !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("Dial %v: %v, want refused", addr, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused after %v", d)
	}
	t.Logf("%v", err)
}

// An address nobody holds fails within the resolve timeout, as
// unreachable (-rdmacm.unreachable names one).
func TestDialUnreachable(t *testing.T) {
	if *unreachableAddr == "" {
		t.Skip("no -rdmacm.unreachable address")
	}
	noLeak(t)
	dev := openT(t)
	start := time.Now()
	_, err := Dial(dialCtx(t), dev, netip.AddrPortFrom(netip.MustParseAddr(*unreachableAddr), 7174), nil)
	if !errors.Is(err, cm.ErrUnreachable) {
		t.Fatalf("Dial: %v, want unreachable", err)
	}
	if d := time.Since(start); d > 3*resolveTimeout {
		t.Errorf("unreachable after %v", d)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// Accept ends with its context and with Close; Listen refuses an address
// of no RDMA device and a port in use; Dial's context bounds it.
func TestListenerErrors(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	l := listenT(t, dev, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept: %v, want the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept(t.Context())
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, cm.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Accept")
	}
	l2 := listenT(t, dev, nil)
	if _, err := Listen(t.Context(), dev, l2.Addr(), nil); !errors.Is(err, cm.ErrAddr) {
		t.Errorf("Listen on a port in use: %v", err)
	}
	if _, err := Listen(t.Context(), dev, netip.MustParseAddrPort("192.0.2.1:0"), nil); !errors.Is(err, cm.ErrAddr) {
		t.Errorf("Listen on 192.0.2.1: %v", err)
	} else {
		t.Log(err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if _, err := Dial(ctx, dev, l2.Addr(), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with a done context: %v", err)
	}
	if _, err := Dial(dialCtx(t), dev, l2.Addr(), &Params{PrivateData: make([]byte, 57)}); !errors.Is(err, cm.ErrPrivateData) ||
		!strings.Contains(err.Error(), "56") {
		t.Errorf("57 bytes of private data: %v", err)
	}
}

// Close while WRITEs stream: the closing side's posted requests end
// flushed, the peer sees the disconnect and its own requests end too, and
// nothing waits longer than a few seconds.
func TestCloseWhileTraffic(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	srv := newEP(t, dev, false)
	l := listenT(t, dev, &ListenConfig{OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
		return &Params{QP: srv.qp, PrivateData: srv.info()}, nil
	}})
	acc := serve(t, l)
	cli := newEP(t, dev, false)
	c, err := Dial(dialCtx(t), dev, l.Addr(), &Params{QP: cli.qp})
	if err != nil {
		t.Fatal(err)
	}
	s := next(t, acc)
	srv.recv(0, 64) // to be flushed by the disconnect
	r := parseInfo(c.PrivateData())
	const depth, total = 16, 100000
	posted, completed, ok, flushed := 0, 0, 0, 0
	start := time.Now()
	var closed time.Time
	var refused error
	// WRITEs go on until the first one ends flushed (or the QP refuses
	// more), then what is in flight drains.
	for completed < posted || posted == 0 {
		for posted-completed < depth && posted < total && flushed == 0 && refused == nil {
			wr := verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: cli.sge(0, 32<<10),
				RemoteAddr: r.addr, RKey: r.rkey}
			if refused = cli.qp.PostSend([]verbs.SendWR{wr}); refused != nil {
				if closed.IsZero() {
					t.Fatalf("PostSend before Close: %v", refused)
				}
				break
			}
			posted++
		}
		wc := cli.wait()
		completed++
		switch wc.Status {
		case verbs.Success:
			ok++
		case verbs.WRFlushErr:
			flushed++
		default:
			t.Errorf("WRITE %d: %v", completed, wc)
		}
		if completed == 50 {
			closed = time.Now()
			go c.Close()
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("still streaming after 60 s: %d posted, %d completed", posted, completed)
		}
	}
	t.Logf("%d WRITEs posted: %d done, %d flushed, the last %v after Close; a post after it: %v", posted, ok,
		flushed, time.Since(closed).Round(time.Millisecond), refused)
	if flushed == 0 && refused == nil {
		t.Errorf("Close neither flushed a WRITE nor stopped the posts")
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the listener's side did not see the disconnect in 5 s")
	}
	if !errors.Is(s.Err(), cm.ErrDisconnected) {
		t.Errorf("listener's Err: %v", s.Err())
	}
	if wc := srv.wait(); wc.Status != verbs.WRFlushErr {
		t.Errorf("the receive posted on the disconnected side: %v, want flushed", wc)
	}
}

// addr6 returns an IPv6 address of dev's GID table other than the
// link-local one, if any: rdma_cm then uses another table entry than the
// device's own (the IPv4 one), which the QP's address vector must name.
func addr6(t *testing.T, dev *hwverbs.Device) netip.Addr {
	for i := 1; i < 16; i++ {
		g, err := dev.GID(i)
		if err != nil {
			continue
		}
		if a := netip.AddrFrom16(g); !a.Is4In6() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
			return a
		}
	}
	t.Skipf("%s has no IPv6 GID", dev.Name())
	return netip.Addr{}
}

// The same connection over IPv6: WRITE and READ through the QPs'
// address vectors with GID entry of the IPv6 address.
func TestConnectIPv6(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	a6 := addr6(t, dev)
	srv := newEP(t, dev, false)
	l, err := Listen(t.Context(), dev, netip.AddrPortFrom(a6, 0), &ListenConfig{
		OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
			return &Params{QP: srv.qp, PrivateData: srv.info()}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := serve(t, l)
	cli := newEP(t, dev, false)
	cli.recv(0, 64)
	c, err := Dial(dialCtx(t), dev, l.Addr(), &Params{QP: cli.qp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := next(t, acc)
	if c.RemoteAddr() != l.Addr() || s.RemoteAddr().Addr() != a6 || !c.LocalAddr().Addr().Is6() {
		t.Errorf("addresses: %v -> %v, listener sees %v", c.LocalAddr(), c.RemoteAddr(), s.RemoteAddr())
	}
	a, err := cli.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if a.AH.DestAddr() != a6 || a.AH.SGIDIndex == 0 {
		t.Errorf("the QP's path: to %v from GID index %d", a.AH.DestAddr(), a.AH.SGIDIndex)
	}
	t.Logf("%v -> %v: GID index %d, %+v", c.LocalAddr(), c.RemoteAddr(), a.AH.SGIDIndex, c.Info())
	traffic(t, cli, srv, parseInfo(c.PrivateData()))
}

// A listener on every address (the zero AddrPort: 0.0.0.0 and a port
// rdma_cm picks) takes a request to the device's address, and the
// request says which address the peer asked for.
func TestListenAny(t *testing.T) {
	noLeak(t)
	dev := openT(t)
	var local netip.AddrPort
	l, err := Listen(t.Context(), dev, netip.AddrPort{}, &ListenConfig{OnRequest: func(ctx context.Context, r *Request) (*Params, error) {
		local = r.Local
		return nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.Addr().Addr().IsUnspecified() || l.Addr().Port() == 0 {
		t.Fatalf("listening on %v", l.Addr())
	}
	acc := serve(t, l)
	to := netip.AddrPortFrom(dev.Addr(), l.Addr().Port())
	c, err := Dial(dialCtx(t), dev, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := next(t, acc)
	if local != to || s.LocalAddr() != to {
		t.Errorf("request to %v, connection's local address %v; want %v", local, s.LocalAddr(), to)
	}
}
