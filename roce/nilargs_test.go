package roce

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// polls is a transport.Poller that reports a fixed count.
type polls int

func (p polls) Poll() int { return int(p) }

// waits is a transport.Waiter that reports what it is given.
type waits struct {
	polls
	woken *bool
}

func (w waits) Wait(time.Time, func() bool) (int, error) { return int(w.polls), nil }
func (w waits) Wake()                                    { *w.woken = true }

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
	sd, err := Open(&Config{Link: &Mem{Network: n, Addr: addr}})
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
		"SetCongestion": func(t *testing.T) {
			apitest.Err(t, SetCongestion(nil, nil), verbs.ErrNil, "SetCongestion of a nil QP")
			apitest.Err(t, SetCongestion(typedNil, nil), verbs.ErrNil, "nil *QP")
			apitest.Err(t, SetCongestion(e.qp, &congestion.Config{Delay: congestion.DelayConfig{Beta: -1}}),
				verbs.ErrInvalidAttr, "Delay.Beta")
			apitest.Err(t, SetCongestion(otherQP{}, nil), ErrNotSoft, "not a QP of goroce's engine")
			if err := SetCongestion(e.newQP(t, verbs.RC), &congestion.Config{Mode: congestion.Off}); err != nil {
				t.Errorf("SetCongestion of a (traced) QP: %v", err)
			}
		},
		"Congestion": func(t *testing.T) {
			if _, ok := Congestion(nil); ok {
				t.Error("a nil QP has congestion control")
			}
			if _, ok := Congestion(otherQP{}); ok {
				t.Error("another backend's QP has goroce's congestion control")
			}
			if c, ok := Congestion(e.qp); !ok || c.Window != 0 {
				t.Errorf("a new QP's congestion control: %+v, %v", c, ok)
			}
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
			n := mem.NewNetwork(nil)
			defer n.Close()
			ep, err := n.Endpoint(netip.MustParseAddr("198.18.0.8"))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close()
			for _, c := range []struct {
				cfg    Config
				target error
				words  []string
			}{
				{Config{Link: &Mem{}}, verbs.ErrNil, []string{"Mem link needs a Network"}},
				{Config{Link: (*Mem)(nil)}, verbs.ErrNil, []string{"Mem link needs a Network"}},
				{Config{Link: &Mem{Network: n}}, verbs.ErrInvalidAttr, []string{"Mem link needs an Addr"}},
				{Config{Link: &Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.9")}, MaxUnackedPSNs: -1},
					verbs.ErrInvalidAttr, []string{"MaxUnackedPSNs"}},
				{Config{Link: &Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.9")}, SeqNAKWindow: 1 << 23},
					verbs.ErrInvalidAttr, []string{"SeqNAKWindow", "8388607"}},
				{Config{Link: &Mem{Network: n}, Transport: ep}, verbs.ErrInvalidAttr, []string{"both a Link", "set one"}},
				{Config{Link: &UDP{Addr: netip.MustParseAddr("192.0.2.1")}}, syscall.EADDRNOTAVAIL, nil},
			} {
				_, err := Open(&c.cfg)
				apitest.Err(t, err, c.target, c.words...)
			}
		},
		"Device.Name":      func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.Name(), "") }) },
		"Device.ActiveMTU": func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.ActiveMTU(), 0) }) },
		"Device.Caps": func(t *testing.T) {
			nilDevices(t, func(d *Device) { want(t, d.Caps(), verbs.DeviceCap(0)) })
		},
		"Device.Addr":     func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.Addr(), netip.Addr{}) }) },
		"Device.Progress": func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.Progress(), 0) }) },
		"Device.PollLink": func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.PollLink(), 0) }) },
		"Device.Events":   func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, d.Events(), nil) }) },
		"Device.Clock": func(t *testing.T) {
			nilDevices(t, func(d *Device) { want[clock.Clock](t, d.Clock(), clock.Real{}) })
		},
		"Device.Stats": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				if s := d.Stats(); s != (Stats{}) {
					t.Errorf("stats of no device: %+v", s)
				}
			})
		},
		"Device.GIDs": func(t *testing.T) { nilDevices(t, func(d *Device) { want(t, len(d.GIDs()), 0) }) },
		"Device.CreateCQSink": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				_, err := d.CreateCQSink(1, nil)
				apitest.Err(t, err, verbs.ErrNil, "nil *Device")
			})
			sd := Untrace(e.dev).(*Device)
			_, err := sd.CreateCQSink(1, nil)
			apitest.Err(t, err, verbs.ErrNil, "needs a CQSink")
		},
		"RegMRIOVA": func(t *testing.T) {
			_, err := RegMRIOVA(nil, nil, 0, 0)
			apitest.Err(t, err, verbs.ErrForeign, "untraced roce Device")
			_, err = RegMRIOVA(e.pd, make([]byte, 8), 0x1000, verbs.LocalWrite) // a traced PD
			apitest.Err(t, err, verbs.ErrForeign, "untraced roce Device")
		},
		"Device.GID": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				_, err := d.GID(0)
				apitest.Err(t, err, verbs.ErrNil, "nil *Device", "open one with Open")
			})
		},
		"Device.AllocPD": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				_, err := d.AllocPD()
				apitest.Err(t, err, verbs.ErrNil, "nil *Device")
			})
		},
		"Device.ProgressWait": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				n, err := d.ProgressWait(context.Background(), time.Time{})
				want(t, n, 0)
				apitest.Err(t, err, verbs.ErrNil, "nil *Device")
			})
		},
		"Device.CreateCQ": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				_, err := d.CreateCQ(1)
				apitest.Err(t, err, verbs.ErrNil, "nil *Device")
			})
			_, err := e.dev.CreateCQ(0)
			apitest.Err(t, err, verbs.ErrInvalidCap, "want 1 to")
			if !strings.Contains(e.log.String(), "create CQ failed") {
				t.Error("the trace does not show the failure")
			}
		},
		"Device.Close": func(t *testing.T) {
			nilDevices(t, func(d *Device) { apitest.Err(t, d.Close(), verbs.ErrNil, "nil *Device", "Open") })
		},
		"Device.Linger": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				apitest.Err(t, d.Linger(context.Background(), time.Millisecond), verbs.ErrNil, "nil *Device")
			})
		},
		"Device.OnClose": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				if d.OnClose(func() { t.Error("a nil device closed") })() {
					t.Error("stop of a nil device's hook reports a stop")
				}
			})
			if e.dev.(*Device).OnClose(nil)() {
				t.Error("stop of a nil hook reports a stop")
			}
		},
		"Device.NotifyUnreachable": func(t *testing.T) {
			nilDevices(t, func(d *Device) {
				d.NotifyUnreachable(func(transport.Unreachable) { t.Error("a nil device's link spoke") })()
			})
			e.dev.(*Device).NotifyUnreachable(nil)()
		},
		"SetRecvSource": func(t *testing.T) {
			if SetRecvSource(nil, nil) {
				t.Error("a nil QP took a receive source")
			}
			// A nil *qp.QP takes the call and does nothing.
			if !SetRecvSource(typedNil, nil) || !SetRecvSource((*qp.SRQ)(nil), nil) {
				t.Error("a nil *qp.QP or *qp.SRQ is not goroce's")
			}
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
		"cmRejecter.JoinGroup": func(t *testing.T) {
			_, r := rejectNoAgent(nil, nil)
			apitest.Err(t, r.JoinGroup(netip.Addr{}), transport.ErrNoMulticast)
			ep, err := mem.NewNetwork(nil).Endpoint(netip.MustParseAddr("198.18.0.9"))
			if err != nil {
				t.Fatal(err)
			}
			_, r = rejectNoAgent(ep, nil)
			apitest.Err(t, r.JoinGroup(netip.Addr{}), nil, "not a multicast address")
			if err := r.JoinGroup(netip.MustParseAddr("239.255.0.1")); err != nil {
				t.Errorf("the endpoint underneath did not join: %v", err)
			}
		},
		"cmRejecter.LeaveGroup": func(t *testing.T) {
			_, r := rejectNoAgent(nil, nil)
			apitest.Err(t, r.LeaveGroup(netip.Addr{}), transport.ErrNoMulticast)
		},
		"pollingRejecter.Poll": func(t *testing.T) {
			if n := (pollingRejecter{p: polls(3)}).Poll(); n != 3 {
				t.Errorf("polled %d packets, want the transport's 3", n)
			}
		},
		"waitingRejecter.Poll": func(t *testing.T) {
			if n := (waitingRejecter{w: waits{polls: 3}}).Poll(); n != 3 {
				t.Errorf("polled %d packets, want the transport's 3", n)
			}
		},
		"waitingRejecter.Wait": func(t *testing.T) {
			if n, err := (waitingRejecter{w: waits{polls: 2}}).Wait(time.Time{}, nil); n != 2 || err != nil {
				t.Errorf("waited for %d packets (%v), want the transport's 2", n, err)
			}
		},
		"waitingRejecter.Wake": func(t *testing.T) {
			var woken bool
			waitingRejecter{w: waits{woken: &woken}}.Wake()
			if !woken {
				t.Error("the transport was not woken")
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
			nilDevices(t, func(d *Device) {
				if got := Trace(d, nil); got != verbs.Device(d) {
					t.Errorf("Trace(%#v) = %#v, want it unchanged", d, got)
				}
			})
		},
		"Untrace": func(t *testing.T) {
			if Untrace(nil) != nil {
				t.Error("Untrace(nil) is not nil")
			}
			nilDevices(t, func(d *Device) {
				if got := Untrace(d); got != verbs.Device(d) {
					t.Errorf("Untrace(%#v) = %#v, want it unchanged", d, got)
				}
			})
		},
		"traceDevice.AllocPD": func(t *testing.T) {
			_, err := Trace((*qp.Device)(nil), nil).AllocPD()
			apitest.Err(t, err, verbs.ErrNil, "nil *Device")
		},
		"traceDevice.CreateCQ": func(t *testing.T) {
			_, err := Trace((*qp.Device)(nil), nil).CreateCQ(1)
			apitest.Err(t, err, verbs.ErrNil, "nil *Device")
		},
		"traceDevice.Close": func(t *testing.T) {
			apitest.Err(t, Trace((*qp.Device)(nil), nil).Close(), verbs.ErrNil)
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
	apitest.NilReceivers(t, ".", (*Device)(nil))
}

// nilDevices calls f with a nil *Device and with a zero one, which Open
// did not make.
func nilDevices(t *testing.T, f func(d *Device)) {
	t.Helper()
	f(nil)
	f(&Device{})
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// otherQP is a QP of another backend.
type otherQP struct{ verbs.QP }
