package roce

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// polls is a transport.Poller that reports a fixed count.
type polls int

func (p polls) Poll() int { return int(p) }

// nilEnv is a traced device on an in-memory network with one of each
// object, made through the trace wrapper.
type nilEnv struct {
	dev   verbs.Device
	log   *bytes.Buffer
	pd    verbs.PD
	cq    verbs.CQ
	qp    verbs.QP
	srq   verbs.SRQ
	local [16]byte
}

func newNilEnv(t *testing.T) *nilEnv {
	n := mem.NewNetwork(nil)
	t.Cleanup(n.Close)
	addr := netip.MustParseAddr("198.18.0.1")
	sd, err := Open(&Config{Transport: "mem", Network: n, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	e := &nilEnv{log: new(bytes.Buffer), local: verbs.GIDFromAddr(addr)}
	e.dev = Trace(sd, slog.New(slog.NewTextHandler(e.log, nil)))
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(8); err != nil {
		t.Fatal(err)
	}
	e.qp = e.newQP(t, verbs.RC)
	if e.srq, err = e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 2}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *nilEnv) newQP(t *testing.T, typ verbs.QPType) verbs.QP {
	q, err := e.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestNilArgs calls every exported function and method of the package
// (and of the trace wrappers Trace hands out) with nil, zero and
// out-of-range arguments: none panics, and each error names what is
// wrong, says what to do, and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	e := newNilEnv(t)
	var typedNil *qp.QP
	apitest.Run(t, ".", apitest.Table{
		"Poll": func(t *testing.T) {
			_, err := Poll(context.Background(), nil, make([]verbs.WC, 1))
			apitest.Err(t, err, verbs.ErrNil, "Poll", "CreateCQ")
			_, err = Poll(context.Background(), e.cq, nil)
			apitest.Err(t, err, verbs.ErrInvalidAttr, "wc has no room")
		},
		"PollSpin": func(t *testing.T) {
			_, err := PollSpin(context.Background(), nil, make([]verbs.WC, 1), time.Millisecond)
			apitest.Err(t, err, verbs.ErrNil, "Poll")
		},
		"PollOne": func(t *testing.T) {
			_, err := PollOne(context.Background(), nil)
			apitest.Err(t, err, verbs.ErrNil, "waiting for a completion", "CreateCQ")
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := PollOne(ctx, e.cq); !errors.Is(err, context.Canceled) {
				t.Errorf("PollOne on an empty CQ with a cancelled context: %v", err)
			}
		},
		"ModifyToInit": func(t *testing.T) {
			apitest.Err(t, ModifyToInit(nil, nil), verbs.ErrNil, "ModifyToInit", "PD.CreateQP")
			apitest.Err(t, ModifyToInit(typedNil, nil), verbs.ErrNil, "nil *QP")
		},
		"ModifyToRTR": func(t *testing.T) {
			apitest.Err(t, ModifyToRTR(nil, nil, nil), verbs.ErrNil, "ModifyToRTR", "PD.CreateQP")
			q := e.newQP(t, verbs.RC)
			if err := ModifyToInit(q, nil); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, ModifyToRTR(q, nil, nil), verbs.ErrNil, "RC QP", "a *Remote with the peer's QPN, PSN and GID")
			err := ModifyToRTR(q, &Remote{QPN: 0x11}, nil)
			apitest.Err(t, err, verbs.ErrInvalidAttr, "the remote GID is missing", "Remote.GID")
			if strings.Contains(err.Error(), "IP version") {
				t.Errorf("a zero Remote reported as %q", err)
			}
			apitest.Err(t, ModifyToRTR(q, &Remote{QPN: 1 << 24, GID: e.local}, nil), verbs.ErrInvalidAttr, "24 bits")
		},
		"ModifyToRTS": func(t *testing.T) {
			apitest.Err(t, ModifyToRTS(nil, nil), verbs.ErrNil, "ModifyToRTS")
			apitest.Err(t, ModifyToRTS(e.qp, &ConnParams{PSN: 1 << 24}), verbs.ErrInvalidAttr, "ConnParams.PSN", "24 bits")
		},
		"Connect": func(t *testing.T) {
			apitest.Err(t, Connect(nil, nil, nil), verbs.ErrNil, "Connect", "PD.CreateQP")
			apitest.Err(t, Connect(typedNil, &Remote{}, nil), verbs.ErrNil, "Connect", "nil *QP")
			apitest.Err(t, Connect(e.newQP(t, verbs.RC), nil, nil), verbs.ErrNil, "*Remote")
			apitest.Err(t, Connect(e.newQP(t, verbs.UC), &Remote{}, nil), verbs.ErrInvalidAttr, "remote GID is missing")
			if err := Connect(e.newQP(t, verbs.UD), nil, nil); err != nil {
				t.Errorf("a UD QP with no Remote: %v", err)
			}
		},
		"Open": func(t *testing.T) {
			for _, c := range []struct {
				cfg    Config
				target error
				words  string
			}{
				{Config{Transport: "tcp"}, ErrUnknownTransport, `"tcp"`},
				{Config{Transport: "mem"}, verbs.ErrNil, "Config.Network"},
				{Config{Transport: "mem", Network: mem.NewNetwork(nil)}, verbs.ErrInvalidAttr, "Config.Addr"},
				{Config{Transport: "mem", Network: mem.NewNetwork(nil), Addr: netip.MustParseAddr("198.18.0.9"),
					MaxUnackedPSNs: -1}, verbs.ErrInvalidAttr, "MaxUnackedPSNs"},
			} {
				_, err := Open(&c.cfg)
				apitest.Err(t, err, c.target, c.words)
			}
		},
		"SoftDevice.Close": func(t *testing.T) {
			apitest.Err(t, (*SoftDevice)(nil).Close(), verbs.ErrNil, "nil *SoftDevice", "Open")
			apitest.Err(t, (&SoftDevice{}).Close(), verbs.ErrNil, "qp.New")
		},
		"SoftDevice.TransportStats": func(t *testing.T) {
			if s := (&SoftDevice{}).TransportStats(); s.RxPackets != 0 {
				t.Errorf("stats of no device: %+v", s)
			}
		},
		"SoftDevice.NotifyUnreachable": func(t *testing.T) {
			(*SoftDevice)(nil).NotifyUnreachable(func(transport.Unreachable) { t.Error("a nil device's link spoke") })()
			(&SoftDevice{}).NotifyUnreachable(nil)()
		},
		"OnQPExit": func(t *testing.T) {
			if stop, ok := OnQPExit(nil, func(qp.Exit) {}); ok || stop() {
				t.Error("a nil QP can tell when it exits")
			}
			stop, ok := OnQPExit(typedNil, func(qp.Exit) { t.Error("a nil *qp.QP exited") })
			if !ok || stop() {
				t.Errorf("a nil *qp.QP: ok %v", ok)
			}
		},
		"cmRejecter.SendsPayload": func(t *testing.T) {
			_, r := rejectNoAgent(nil, nil)
			if r.SendsPayload() {
				t.Error("a rejecter with no transport takes payloads apart")
			}
		},
		"cmRejecter.Start": func(t *testing.T) {
			ep, err := mem.NewNetwork(nil).Endpoint(netip.MustParseAddr("198.18.0.9"))
			if err != nil {
				t.Fatal(err)
			}
			_, r := rejectNoAgent(ep, nil)
			apitest.Err(t, r.Start(nil), verbs.ErrNil, "Handler")
		},
		"pollingRejecter.Poll": func(t *testing.T) {
			if n := (pollingRejecter{p: polls(3)}).Poll(); n != 3 {
				t.Errorf("polled %d packets, want the transport's 3", n)
			}
		},
		"SoftDevice.FaultStats": func(t *testing.T) {
			if s := (*SoftDevice)(nil).FaultStats(); s.Dropped != 0 {
				t.Errorf("fault stats of no device: %+v", s)
			}
		},
		"Trace": func(t *testing.T) {
			if Trace(nil, nil) != nil {
				t.Error("Trace(nil) is not nil")
			}
			d := Trace((*qp.Device)(nil), nil)
			if _, err := d.AllocPD(); !errors.Is(err, verbs.ErrNil) {
				t.Errorf("AllocPD of a traced nil device: %v", err)
			}
		},
		"Untrace": func(t *testing.T) {
			if Untrace(nil) != nil {
				t.Error("Untrace(nil) is not nil")
			}
		},
		"traceDevice.AllocPD": func(t *testing.T) {
			_, err := Trace(&SoftDevice{}, nil).AllocPD()
			apitest.Err(t, err, verbs.ErrNil, "nil *Device")
		},
		"traceDevice.CreateCQ": func(t *testing.T) {
			_, err := e.dev.CreateCQ(0)
			apitest.Err(t, err, verbs.ErrInvalidCap, "want 1 to")
			if !strings.Contains(e.log.String(), "create CQ failed") {
				t.Error("the trace does not show the failure")
			}
		},
		"traceDevice.Close": func(t *testing.T) {
			apitest.Err(t, Trace(&SoftDevice{}, nil).Close(), verbs.ErrNil)
		},
		"tracePD.RegMR": func(t *testing.T) {
			_, err := e.pd.RegMR(nil, verbs.LocalWrite)
			apitest.Err(t, err, verbs.ErrInvalidAttr, "at least one byte")
		},
		"tracePD.CreateQP": func(t *testing.T) {
			_, err := e.pd.CreateQP(nil)
			apitest.Err(t, err, verbs.ErrNil, "QPInitAttr")
			_, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq})
			apitest.Err(t, err, verbs.ErrNil, "receive CQ is missing")
		},
		"tracePD.CreateSRQ": func(t *testing.T) {
			_, err := e.pd.CreateSRQ(verbs.SRQAttr{})
			apitest.Err(t, err, verbs.ErrInvalidCap, "MaxWR 0")
		},
		"tracePD.CreateAH": func(t *testing.T) {
			_, err := e.pd.CreateAH(verbs.AHAttr{})
			apitest.Err(t, err, verbs.ErrInvalidAttr, "no destination GID")
		},
		"traceQP.Modify": func(t *testing.T) {
			apitest.Err(t, e.qp.Modify(nil, verbs.AttrState), verbs.ErrNil, "*QPAttr")
		},
		"traceQP.PostSend": func(t *testing.T) {
			apitest.Err(t, e.qp.PostSend([]verbs.SendWR{{SGL: []verbs.SGE{{}}}}), verbs.ErrInvalidState, "move the QP to RTS")
		},
		"traceQP.PostRecv": func(t *testing.T) {
			apitest.Err(t, e.qp.PostRecv(nil), verbs.ErrInvalidState, "move the QP to INIT")
		},
		"traceQP.Destroy": func(t *testing.T) {
			q := e.newQP(t, verbs.RC)
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, q.Destroy(), verbs.ErrDestroyed, "destroyed already")
		},
		"traceCQ.Poll": func(t *testing.T) {
			if n := e.cq.Poll(nil); n != 0 {
				t.Errorf("Poll(nil) = %d", n)
			}
		},
		"traceSRQ.PostRecv": func(t *testing.T) {
			apitest.Err(t, e.srq.PostRecv([]verbs.RecvWR{{SGL: make([]verbs.SGE, 2)}}), verbs.ErrTooManySGE, "2 SGEs")
		},
	})
	apitest.NilReceivers(t, ".", (*SoftDevice)(nil))
}
