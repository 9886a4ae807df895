package cm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
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
	var nilSoft *roce.SoftDevice
	devices := []struct {
		name string
		dev  roce.Device
	}{
		{"nil", nil},
		{"typed nil", nilSoft},
		{"zero SoftDevice", &roce.SoftDevice{}},
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
	var nilQP *struct{ roce.QP }
	for _, p := range []*Params{{QP: nilQP}, {PD: (*struct{ roce.PD })(nil)}, {SendCQ: (*struct{ roce.CQ })(nil)},
		{RecvCQ: (*struct{ roce.CQ })(nil)}} {
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
		{"path MTU 1234", Params{PathMTU: roce.MTU(bytes)}, "path MTU"},
		{"path MTU 6", Params{PathMTU: roce.MTU(6)}, "path MTU"},
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
			if a, _ := cli.qp.Query(); a.State != roce.StateInit {
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
	c, err := ha.agent.Dial(ctx, dst, &Params{QP: cli.qp, ACKTimeout: 14, PathMTU: roce.MTU1024, RetryCount: 3,
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
		q    roce.QP
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
	if a, _ := srv.qp.Query(); a.RNRRetry != 5 || a.PathMTU != roce.MTU1024 {
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
	l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp, PathMTU: roce.MTU1024})
	defer l.Close()
	_, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{PathMTU: roce.MTU4096})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != 26 {
		t.Errorf("dial: %v; want a REJ invalid path MTU", err)
	}
	if r := <-accepted; !errors.Is(r.err, ErrInvalid) || !strings.Contains(r.err.Error(), "path MTU") {
		t.Errorf("accept: %v", r.err)
	}
}
