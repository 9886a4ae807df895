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
	"github.com/goroce/goroce/transport/mem"
)

// polls is a transport.Poller that reports a fixed count.
type polls int

func (p polls) Poll() int { return int(p) }

// nilEnv is a traced device on an in-memory network with one of each
// object, made through the trace wrapper.
type nilEnv struct {
	dev   Device
	log   *bytes.Buffer
	pd    PD
	cq    CQ
	qp    QP
	srq   SRQ
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
	e := &nilEnv{log: new(bytes.Buffer), local: GIDFromAddr(addr)}
	e.dev = Trace(sd, slog.New(slog.NewTextHandler(e.log, nil)))
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(8); err != nil {
		t.Fatal(err)
	}
	e.qp = e.newQP(t, RC)
	if e.srq, err = e.pd.CreateSRQ(SRQAttr{MaxWR: 2}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *nilEnv) newQP(t *testing.T, typ QPType) QP {
	q, err := e.pd.CreateQP(&QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq})
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
			_, err := Poll(context.Background(), nil, make([]WC, 1))
			apitest.Err(t, err, ErrNil, "Poll", "CreateCQ")
			_, err = Poll(context.Background(), e.cq, nil)
			apitest.Err(t, err, ErrInvalidAttr, "wc has no room")
		},
		"PollSpin": func(t *testing.T) {
			_, err := PollSpin(context.Background(), nil, make([]WC, 1), time.Millisecond)
			apitest.Err(t, err, ErrNil, "Poll")
		},
		"PollOne": func(t *testing.T) {
			_, err := PollOne(context.Background(), nil)
			apitest.Err(t, err, ErrNil, "waiting for a completion", "CreateCQ")
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := PollOne(ctx, e.cq); !errors.Is(err, context.Canceled) {
				t.Errorf("PollOne on an empty CQ with a cancelled context: %v", err)
			}
		},
		"ModifyToInit": func(t *testing.T) {
			apitest.Err(t, ModifyToInit(nil, nil), ErrNil, "ModifyToInit", "PD.CreateQP")
			apitest.Err(t, ModifyToInit(typedNil, nil), ErrNil, "nil *QP")
		},
		"ModifyToRTR": func(t *testing.T) {
			apitest.Err(t, ModifyToRTR(nil, nil, nil), ErrNil, "ModifyToRTR", "PD.CreateQP")
			q := e.newQP(t, RC)
			if err := ModifyToInit(q, nil); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, ModifyToRTR(q, nil, nil), ErrNil, "RC QP", "a *Remote with the peer's QPN, PSN and GID")
			err := ModifyToRTR(q, &Remote{QPN: 0x11}, nil)
			apitest.Err(t, err, ErrInvalidAttr, "the remote GID is missing", "Remote.GID")
			if strings.Contains(err.Error(), "IP version") {
				t.Errorf("a zero Remote reported as %q", err)
			}
			apitest.Err(t, ModifyToRTR(q, &Remote{QPN: 1 << 24, GID: e.local}, nil), ErrInvalidAttr, "24 bits")
		},
		"ModifyToRTS": func(t *testing.T) {
			apitest.Err(t, ModifyToRTS(nil, nil), ErrNil, "ModifyToRTS")
			apitest.Err(t, ModifyToRTS(e.qp, &ConnParams{PSN: 1 << 24}), ErrInvalidAttr, "ConnParams.PSN", "24 bits")
		},
		"Connect": func(t *testing.T) {
			apitest.Err(t, Connect(nil, nil, nil), ErrNil, "Connect", "PD.CreateQP")
			apitest.Err(t, Connect(typedNil, &Remote{}, nil), ErrNil, "Connect", "nil *QP")
			apitest.Err(t, Connect(e.newQP(t, RC), nil, nil), ErrNil, "*Remote")
			apitest.Err(t, Connect(e.newQP(t, UC), &Remote{}, nil), ErrInvalidAttr, "remote GID is missing")
			if err := Connect(e.newQP(t, UD), nil, nil); err != nil {
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
				{Config{Transport: "mem"}, ErrNil, "Config.Network"},
				{Config{Transport: "mem", Network: mem.NewNetwork(nil)}, ErrInvalidAttr, "Config.Addr"},
				{Config{Transport: "mem", Network: mem.NewNetwork(nil), Addr: netip.MustParseAddr("198.18.0.9"),
					MaxUnackedPSNs: -1}, ErrInvalidAttr, "MaxUnackedPSNs"},
			} {
				_, err := Open(&c.cfg)
				apitest.Err(t, err, c.target, c.words)
			}
		},
		"SoftDevice.Close": func(t *testing.T) {
			apitest.Err(t, (*SoftDevice)(nil).Close(), ErrNil, "nil *SoftDevice", "Open")
			apitest.Err(t, (&SoftDevice{}).Close(), ErrNil, "qp.New")
		},
		"SoftDevice.TransportStats": func(t *testing.T) {
			if s := (&SoftDevice{}).TransportStats(); s.RxPackets != 0 {
				t.Errorf("stats of no device: %+v", s)
			}
		},
		"SoftDevice.NotifyUnreachable": func(t *testing.T) {
			(*SoftDevice)(nil).NotifyUnreachable(func(Unreachable) { t.Error("a nil device's link spoke") })()
			(&SoftDevice{}).NotifyUnreachable(nil)()
		},
		"OnQPExit": func(t *testing.T) {
			if stop, ok := OnQPExit(nil, func(QPExit) {}); ok || stop() {
				t.Error("a nil QP can tell when it exits")
			}
			stop, ok := OnQPExit(typedNil, func(QPExit) { t.Error("a nil *qp.QP exited") })
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
			apitest.Err(t, r.Start(nil), ErrNil, "Handler")
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
			if _, err := d.AllocPD(); !errors.Is(err, ErrNil) {
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
			apitest.Err(t, err, ErrNil, "nil *Device")
		},
		"traceDevice.CreateCQ": func(t *testing.T) {
			_, err := e.dev.CreateCQ(0)
			apitest.Err(t, err, ErrInvalidCap, "want 1 to")
			if !strings.Contains(e.log.String(), "create CQ failed") {
				t.Error("the trace does not show the failure")
			}
		},
		"traceDevice.Close": func(t *testing.T) {
			apitest.Err(t, Trace(&SoftDevice{}, nil).Close(), ErrNil)
		},
		"tracePD.RegMR": func(t *testing.T) {
			_, err := e.pd.RegMR(nil, LocalWrite)
			apitest.Err(t, err, ErrInvalidAttr, "at least one byte")
		},
		"tracePD.CreateQP": func(t *testing.T) {
			_, err := e.pd.CreateQP(nil)
			apitest.Err(t, err, ErrNil, "QPInitAttr")
			_, err = e.pd.CreateQP(&QPInitAttr{Type: RC, SendCQ: e.cq})
			apitest.Err(t, err, ErrNil, "receive CQ is missing")
		},
		"tracePD.CreateSRQ": func(t *testing.T) {
			_, err := e.pd.CreateSRQ(SRQAttr{})
			apitest.Err(t, err, ErrInvalidCap, "MaxWR 0")
		},
		"tracePD.CreateAH": func(t *testing.T) {
			_, err := e.pd.CreateAH(AHAttr{})
			apitest.Err(t, err, ErrInvalidAttr, "no destination GID")
		},
		"traceQP.Modify": func(t *testing.T) {
			apitest.Err(t, e.qp.Modify(nil, AttrState), ErrNil, "*QPAttr")
		},
		"traceQP.PostSend": func(t *testing.T) {
			apitest.Err(t, e.qp.PostSend([]SendWR{{SGL: []SGE{{}}}}), ErrInvalidState, "move the QP to RTS")
		},
		"traceQP.PostRecv": func(t *testing.T) {
			apitest.Err(t, e.qp.PostRecv(nil), ErrInvalidState, "move the QP to INIT")
		},
		"traceQP.Destroy": func(t *testing.T) {
			q := e.newQP(t, RC)
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, q.Destroy(), ErrDestroyed, "destroyed already")
		},
		"traceCQ.Poll": func(t *testing.T) {
			if n := e.cq.Poll(nil); n != 0 {
				t.Errorf("Poll(nil) = %d", n)
			}
		},
		"traceSRQ.PostRecv": func(t *testing.T) {
			apitest.Err(t, e.srq.PostRecv([]RecvWR{{SGL: make([]SGE, 2)}}), ErrTooManySGE, "2 SGEs")
		},
		"MTUFromBytes": func(t *testing.T) {
			if _, ok := MTUFromBytes(-1); ok {
				t.Error("MTUFromBytes(-1) ok")
			}
		},
		"GIDFromAddr": func(t *testing.T) {
			if GIDFromAddr(netip.Addr{}) != [16]byte{} {
				t.Error("the zero Addr has a GID")
			}
		},
		"CheckModify": func(t *testing.T) {
			apitest.Err(t, CheckModify(0, 0, 0, 0), ErrInvalidAttr, "QP type")
		},
		"CheckSendOp": func(t *testing.T) {
			apitest.Err(t, CheckSendOp(0, 0), ErrInvalidAttr, "QP type")
		},
	})
	apitest.NilReceivers(t, ".", (*SoftDevice)(nil))
}
