package qp

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// nilEnv is a device with one of each object, for TestNilArgs.
type nilEnv struct {
	dev, other *Device
	pd         *PD
	cq         *CQ
	qp, ud     *QP
	srq        *SRQ
	ah         *AH
}

func newNilEnv(t *testing.T) *nilEnv {
	n := mem.NewNetwork(nil)
	e := &nilEnv{}
	var err error
	for _, d := range []struct {
		dev  **Device
		addr netip.Addr
	}{{&e.dev, addrA}, {&e.other, addrB}} {
		ep, err := n.Endpoint(d.addr)
		must(t, err)
		*d.dev, err = New(ep, &Config{Clock: n.Clock()})
		must(t, err)
	}
	t.Cleanup(func() {
		e.dev.Close()
		e.other.Close()
		n.Close()
	})
	pd, err := e.dev.AllocPD()
	must(t, err)
	e.pd = pd.(*PD)
	cq, err := e.dev.CreateCQ(16)
	must(t, err)
	e.cq = cq.(*CQ)
	e.qp = e.newQP(t, verbs.RC)
	e.ud = e.newQP(t, verbs.UD)
	srq, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4})
	must(t, err)
	e.srq = srq.(*SRQ)
	ah, err := e.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(addrB)})
	must(t, err)
	e.ah = ah.(*AH)
	return e
}

func (e *nilEnv) newQP(t *testing.T, typ verbs.QPType) *QP {
	q, err := e.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq})
	must(t, err)
	return q.(*QP)
}

// TestNilArgs calls every exported function and method of the package
// with nil, zero and out-of-range arguments: none panics, and each error
// names what is wrong, says what to do, and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	e := newNilEnv(t)
	apitest.Run(t, ".", apitest.Table{
		"New": func(t *testing.T) {
			_, err := New(nil, nil)
			apitest.Err(t, err, verbs.ErrNil, "needs a transport")
			ep, err := mem.NewNetwork(nil).Endpoint(addrA)
			must(t, err)
			for _, c := range []Config{{MaxUnackedPSNs: -1}, {SharedUnackedPSNs: -5}, {AckReqEvery: 1 << 30}} {
				_, err := New(ep, &c)
				apitest.Err(t, err, verbs.ErrInvalidAttr, "qp: Config.", "want 0 (the default)")
			}
			_, err = New(ep, &Config{Congestion: &congestion.Config{DCQCN: congestion.DCQCNConfig{MinDecFac: 200}}})
			apitest.Err(t, err, verbs.ErrInvalidAttr, "Config.Congestion", "DCQCN.MinDecFac 200")
			if !errors.Is(err, congestion.ErrInvalid) {
				t.Errorf("a bad Congestion setting: %v, want it to match congestion.ErrInvalid", err)
			}
			small := mem.NewNetwork(&mem.Config{MaxPacket: 100})
			ep, err = small.Endpoint(addrA)
			must(t, err)
			_, err = New(ep, nil)
			apitest.Err(t, err, verbs.ErrInvalidCap, "packets of 100 bytes", "raise its MaxPacket")
		},
		"Device.Close": func(t *testing.T) {
			apitest.Err(t, (&Device{}).Close(), verbs.ErrNil, "nil *Device", "qp.New")
		},
		"Device.Progress": func(t *testing.T) { zero(t, (*Device)(nil).Progress()) },
		"Device.PollLink": func(t *testing.T) { zero(t, (*Device)(nil).PollLink()) },
		"Device.Name":     func(t *testing.T) { zero(t, (*Device)(nil).Name()) },
		"Device.Addr":     func(t *testing.T) { zero(t, (*Device)(nil).Addr()) },
		"Device.GIDs":     func(t *testing.T) { zero(t, len((*Device)(nil).GIDs())) },
		"Device.CreateCQSink": func(t *testing.T) {
			_, err := e.dev.CreateCQSink(1, nil)
			apitest.Err(t, err, verbs.ErrNil, "needs a CQSink")
			_, err = e.dev.CreateCQSink(0, discardSink{})
			apitest.Err(t, err, verbs.ErrInvalidCap, "want 1 to")
			_, err = (*Device)(nil).CreateCQSink(1, discardSink{})
			apitest.Err(t, err, verbs.ErrNil, "nil *Device")
		},
		"PD.RegMRIOVA": func(t *testing.T) {
			_, err := (*PD)(nil).RegMRIOVA(make([]byte, 8), 0x1000, 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *PD")
			_, err = e.pd.RegMRIOVA(nil, 0x1000, 0)
			apitest.Err(t, err, verbs.ErrInvalidAttr, "at least one byte")
		},
		"Device.GID": func(t *testing.T) {
			for _, i := range []int{-1, 256} {
				_, err := e.dev.GID(i)
				apitest.Err(t, err, verbs.ErrInvalidAttr, "want 0 to 255")
			}
		},
		"Device.ActiveMTU": func(t *testing.T) { zero(t, (*Device)(nil).ActiveMTU()) },
		"Device.Caps":      func(t *testing.T) { zero(t, (*Device)(nil).Caps()) },
		"Device.AllocPD": func(t *testing.T) {
			d := e.closedDevice(t)
			_, err := d.AllocPD()
			apitest.Err(t, err, verbs.ErrClosed, "AllocPD after Close")
		},
		"PD.RegMR": func(t *testing.T) {
			for _, buf := range [][]byte{nil, {}} {
				_, err := e.pd.RegMR(buf, verbs.LocalWrite)
				apitest.Err(t, err, verbs.ErrInvalidAttr, "empty", "at least one byte")
			}
			_, err := (&PD{}).RegMR(make([]byte, 1), 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *PD", "AllocPD")
		},
		"PD.Dealloc": func(t *testing.T) {
			apitest.Err(t, e.pd.Dealloc(), nil, "destroy them first")
		},
		"PD.MRPD": func(t *testing.T) {
			if (*PD)(nil).MRPD() != nil || e.pd.MRPD() == nil {
				t.Error("MRPD of a nil or a real PD")
			}
		},
		"Device.Transport": func(t *testing.T) {
			if (*Device)(nil).Transport() != nil {
				t.Error("a nil Device has a transport")
			}
		},
		"Device.Logger": func(t *testing.T) { (*Device)(nil).Logger().Info("a nil Device's logger works") },
		"Device.Clock": func(t *testing.T) {
			if _, ok := (*Device)(nil).Clock().(clock.Real); !ok {
				t.Error("a nil Device's clock is not the system clock")
			}
		},
		"Device.Events": func(t *testing.T) {
			if (*Device)(nil).Events() != nil {
				t.Error("a nil Device has events")
			}
		},
		"Device.Linger": func(t *testing.T) {
			if err := e.dev.Linger(context.Background(), -time.Second); err != nil {
				t.Errorf("Linger with a negative quiet time: %v", err)
			}
		},
		"PD.CreateQP": func(t *testing.T) { e.createQP(t) },
		"QP.QPN":      func(t *testing.T) { zero(t, (&QP{}).QPN()) },
		"QP.Type":     func(t *testing.T) { zero(t, (*QP)(nil).Type()) },
		"QP.PD": func(t *testing.T) {
			if (*QP)(nil).PD() != nil {
				t.Error("a nil QP has a PD")
			}
		},
		"QP.State": func(t *testing.T) { zero(t, (*QP)(nil).State()) },
		"QP.Query": func(t *testing.T) {
			q := e.newQP(t, verbs.RC)
			must(t, q.Destroy())
			_, err := q.Query()
			apitest.Err(t, err, verbs.ErrDestroyed, "after Destroy")
		},
		"QP.Counters":   func(t *testing.T) { zero(t, (*QP)(nil).Counters()) },
		"QP.Congestion": func(t *testing.T) { zero(t, (*QP)(nil).Congestion()) },
		"QP.SetCongestion": func(t *testing.T) {
			apitest.Err(t, (*QP)(nil).SetCongestion(nil), verbs.ErrNil, "nil *QP", "CreateQP")
			q := e.newQP(t, verbs.RC)
			err := q.SetCongestion(&congestion.Config{Mode: 7})
			apitest.Err(t, err, verbs.ErrInvalidAttr, "SetCongestion", "Mode 7")
			must(t, q.SetCongestion(&congestion.Config{Mode: congestion.Delay}))
			must(t, q.SetCongestion(nil))
			must(t, q.Destroy())
			apitest.Err(t, q.SetCongestion(nil), verbs.ErrDestroyed, "after Destroy")
		},
		"QP.Destroy": func(t *testing.T) {
			q := e.newQP(t, verbs.RC)
			must(t, q.Destroy())
			apitest.Err(t, q.Destroy(), verbs.ErrDestroyed, "destroyed already")
		},
		"QP.Modify":   func(t *testing.T) { e.modify(t) },
		"QP.PostSend": func(t *testing.T) { e.postSend(t) },
		"QP.PostRecv": func(t *testing.T) { e.postRecv(t) },
		"QP.SetRecvSource": func(t *testing.T) {
			(*QP)(nil).SetRecvSource(&fakeSource{})
			q := e.newQP(t, verbs.UD)
			q.SetRecvSource(nil) // none: the queue alone
		},
		"SRQ.SetRecvSource": func(t *testing.T) {
			(*SRQ)(nil).SetRecvSource(&fakeSource{})
			e.srq.SetRecvSource(nil)
		},
		"QP.LogValue": func(t *testing.T) {
			if got := (*QP)(nil).LogValue().String(); got != "<nil>" {
				t.Errorf("nil QP logs as %q", got)
			}
		},
		"Device.CreateCQ": func(t *testing.T) {
			for _, n := range []int{-1, 0, MaxCQE + 1} {
				_, err := e.dev.CreateCQ(n)
				apitest.Err(t, err, verbs.ErrInvalidCap, "want 1 to 1048576")
			}
			_, err := e.closedDevice(t).CreateCQ(1)
			apitest.Err(t, err, verbs.ErrClosed)
		},
		"CQ.Len": func(t *testing.T) { zero(t, (&CQ{}).Len()) },
		"CQ.Cap": func(t *testing.T) { zero(t, (*CQ)(nil).Cap()) },
		"CQ.Poll": func(t *testing.T) {
			zero(t, (*CQ)(nil).Poll(make([]verbs.WC, 1)))
			zero(t, e.cq.Poll(nil))
		},
		"CQ.ReqNotify": func(t *testing.T) { (*CQ)(nil).ReqNotify(true) },
		"CQ.C": func(t *testing.T) {
			if (*CQ)(nil).C() != nil {
				t.Error("a nil CQ has a channel")
			}
		},
		"CQ.Interrupt": func(t *testing.T) { (*CQ)(nil).Interrupt() },
		"CQ.Wait": func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := e.cq.Wait(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait with a cancelled context: %v", err)
			}
		},
		"CQ.WaitUntil": func(t *testing.T) {
			if ok, err := (*CQ)(nil).WaitUntil(context.Background(), time.Time{}); ok || !errors.Is(err, verbs.ErrNil) {
				t.Errorf("WaitUntil of a nil CQ: %v, %v", ok, err)
			}
			// A deadline in the past ends the wait at once, without error.
			if ok, err := e.cq.WaitUntil(context.Background(), time.Unix(1, 0)); ok || err != nil {
				t.Errorf("WaitUntil with a past deadline: %v, %v", ok, err)
			}
		},
		"Device.ProgressWait": func(t *testing.T) {
			if n, err := (*Device)(nil).ProgressWait(context.Background(), time.Time{}); n != 0 || !errors.Is(err, verbs.ErrNil) {
				t.Errorf("ProgressWait of a nil Device: %d, %v", n, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if n, err := e.dev.ProgressWait(ctx, time.Time{}); n != 0 || !errors.Is(err, context.Canceled) {
				t.Errorf("ProgressWait with a cancelled context: %d, %v", n, err)
			}
		},
		"CQ.Destroy": func(t *testing.T) {
			apitest.Err(t, e.cq.Destroy(), verbs.ErrBusy, "queue pairs use the CQ", "destroy them first")
		},
		"PD.CreateSRQ": func(t *testing.T) {
			for _, c := range []struct {
				attr  verbs.SRQAttr
				words string
			}{
				{verbs.SRQAttr{}, "MaxWR 0: want 1 to 32768"},
				{verbs.SRQAttr{MaxWR: MaxWR + 1}, "want 1 to 32768"},
				{verbs.SRQAttr{MaxWR: 1, MaxSGE: MaxSGE + 1}, "MaxSGE 33"},
				{verbs.SRQAttr{MaxWR: 1, Limit: 2}, "Limit 2 exceeds MaxWR 1"},
			} {
				_, err := e.pd.CreateSRQ(c.attr)
				apitest.Err(t, err, verbs.ErrInvalidCap, c.words)
			}
		},
		"SRQ.PostRecv": func(t *testing.T) {
			err := e.srq.PostRecv([]verbs.RecvWR{{SGL: make([]verbs.SGE, 2)}})
			apitest.Err(t, err, verbs.ErrTooManySGE, "2 SGEs", "at most 1")
			var pe *verbs.PostError
			if !errors.As(err, &pe) || pe.Index != 0 {
				t.Errorf("not a PostError for request 0: %v", err)
			}
			must(t, e.srq.PostRecv(nil))
		},
		"SRQ.Modify": func(t *testing.T) {
			apitest.Err(t, e.srq.Modify(1<<32-1), verbs.ErrInvalidAttr, "exceeds its 4 entries")
		},
		"SRQ.Query":   func(t *testing.T) { zero(t, (*SRQ)(nil).Query()) },
		"SRQ.Len":     func(t *testing.T) { zero(t, (*SRQ)(nil).Len()) },
		"SRQ.Destroy": func(t *testing.T) { apitest.Err(t, (&SRQ{}).Destroy(), verbs.ErrNil, "nil *SRQ") },
		"PD.CreateAH": func(t *testing.T) {
			_, err := e.pd.CreateAH(verbs.AHAttr{})
			apitest.Err(t, err, verbs.ErrInvalidAttr, "no destination GID", "DGID is zero")
			_, err = e.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(netip.IPv6Loopback())})
			apitest.Err(t, err, verbs.ErrInvalidAttr, "not the same IP version")
		},
		"AH.Attr":    func(t *testing.T) { zero(t, (*AH)(nil).Attr()) },
		"AH.Destroy": func(t *testing.T) { must(t, e.ah.Destroy()) },
		"Counters.Add": func(t *testing.T) {
			c := Counters{SentPkts: 1}
			c.Add(nil)
			(*Counters)(nil).Add(&c)
			zero(t, c.SentPkts-1)
		},
		"Counters.Each": func(t *testing.T) {
			(&Counters{}).Each(nil)
			(*Counters)(nil).Each(func(string, uint64) { t.Error("a nil Counters has counters") })
		},
		"Counters.String": func(t *testing.T) {
			if got := (*Counters)(nil).String(); got != "<nil>" {
				t.Errorf("nil Counters: %q", got)
			}
		},
		"Device.Stats":  func(t *testing.T) { zero(t, (*Device)(nil).Stats()) },
		"Device.HasGSI": func(t *testing.T) { zero(t, (*Device)(nil).HasGSI()) },
		"QP.OnExit": func(t *testing.T) {
			if (*QP)(nil).OnExit(func(Exit) { t.Error("a nil QP exited") })() {
				t.Error("stop of a nil QP's watch stopped something")
			}
			if e.qp.OnExit(nil)() {
				t.Error("stop of a nil function's watch stopped something")
			}
		},
		"PD.AllocMW": func(t *testing.T) {
			_, err := (&PD{}).AllocMW(verbs.MWType1)
			apitest.Err(t, err, verbs.ErrNil, "nil *PD")
			_, err = e.pd.AllocMW(0)
			apitest.Err(t, err, verbs.ErrInvalidAttr, "MWType1 or verbs.MWType2")
			ep, err := mem.NewNetwork(nil).Endpoint(addrA)
			must(t, err)
			d, err := New(ep, nil)
			must(t, err)
			pd, err := d.AllocPD()
			must(t, err)
			must(t, d.Close())
			_, err = pd.(*PD).AllocMW(verbs.MWType1)
			apitest.Err(t, err, verbs.ErrClosed, "AllocMW after Close")
		},
		"MW.RKey": func(t *testing.T) { zero(t, (*MW)(nil).RKey()); zero(t, (&MW{}).RKey()) },
		"MW.Type": func(t *testing.T) { zero(t, (&MW{}).Type()) },
		"MW.Window": func(t *testing.T) {
			if (*MW)(nil).Window() != nil {
				t.Error("a nil MW has a window")
			}
		},
		"MW.Dealloc": func(t *testing.T) {
			apitest.Err(t, (&MW{}).Dealloc(), verbs.ErrNil, "nil *MW", "PD.AllocMW")
			w, err := e.pd.AllocMW(verbs.MWType2)
			must(t, err)
			must(t, w.Dealloc())
			apitest.Err(t, w.Dealloc(), verbs.ErrDestroyed, "twice")
		},
		"QP.AttachMcast": func(t *testing.T) {
			apitest.Err(t, (*QP)(nil).AttachMcast([16]byte{}), verbs.ErrNil, "nil *QP")
			apitest.Err(t, e.qp.AttachMcast([16]byte{}), verbs.ErrInvalidAttr, "only UD QPs")
			apitest.Err(t, e.ud.AttachMcast([16]byte{}), verbs.ErrInvalidAttr, "not a multicast GID", "ff15::1")
		},
		"QP.DetachMcast": func(t *testing.T) {
			apitest.Err(t, (*QP)(nil).DetachMcast([16]byte{}), verbs.ErrNil, "nil *QP")
			apitest.Err(t, e.qp.DetachMcast([16]byte{}), verbs.ErrInvalidAttr, "only UD QPs")
			apitest.Err(t, e.ud.DetachMcast([16]byte{}), verbs.ErrInvalidAttr, "not a multicast GID")
			apitest.Err(t, e.ud.DetachMcast(verbs.MulticastGID(netip.MustParseAddr("239.255.0.1"))),
				verbs.ErrInvalidAttr, "not attached")
		},
		"QP.BindMW": func(t *testing.T) {
			apitest.Err(t, (*QP)(nil).BindMW(nil, nil), verbs.ErrNil, "nil *QP")
			apitest.Err(t, e.qp.BindMW(nil, &verbs.MWBindWR{}), verbs.ErrNil, "PD.AllocMW")
			apitest.Err(t, e.qp.BindMW((*MW)(nil), &verbs.MWBindWR{}), verbs.ErrNil, "PD.AllocMW")
			apitest.Err(t, e.qp.BindMW(&MW{}, &verbs.MWBindWR{}), verbs.ErrForeign, "zero MW")
			w1, err := e.pd.AllocMW(verbs.MWType1)
			must(t, err)
			apitest.Err(t, e.qp.BindMW(w1, nil), verbs.ErrNil, "nil *verbs.MWBindWR")
			apitest.Err(t, e.qp.BindMW(w1, &verbs.MWBindWR{}), verbs.ErrInvalidState, "RTS")
			w2, err := e.pd.AllocMW(verbs.MWType2)
			must(t, err)
			apitest.Err(t, e.qp.BindMW(w2, &verbs.MWBindWR{}), verbs.ErrInvalidWR, "BIND_MW work request")
			otherPD, err := e.other.AllocPD()
			must(t, err)
			w, err := otherPD.(*PD).AllocMW(verbs.MWType1)
			must(t, err)
			apitest.Err(t, e.qp.BindMW(w, &verbs.MWBindWR{}), verbs.ErrForeign, "another device")
		},
	})
	apitest.NilReceivers(t, ".", (*Device)(nil), (*PD)(nil), (*QP)(nil), (*CQ)(nil), (*SRQ)(nil), (*AH)(nil),
		(*Counters)(nil), (*MW)(nil))
	// Zero values made without the constructors behave as nil ones.
	for _, p := range []interface{ Destroy() error }{&QP{}, &CQ{}, &SRQ{}} {
		apitest.Err(t, p.Destroy(), verbs.ErrNil)
	}
	_, err := (&PD{}).CreateQP(&verbs.QPInitAttr{})
	apitest.Err(t, err, verbs.ErrNil, "nil *PD")
}

// closedDevice returns a device that has been closed.
func (e *nilEnv) closedDevice(t *testing.T) *Device {
	ep, err := mem.NewNetwork(nil).Endpoint(addrA)
	must(t, err)
	d, err := New(ep, nil)
	must(t, err)
	must(t, d.Close())
	return d
}

func (e *nilEnv) createQP(t *testing.T) {
	_, err := e.pd.CreateQP(nil)
	apitest.Err(t, err, verbs.ErrNil, "needs a *QPInitAttr")
	cq2, err := e.other.CreateCQ(4)
	must(t, err)
	dead, err := e.dev.CreateCQ(4)
	must(t, err)
	must(t, dead.Destroy())
	for _, c := range []struct {
		attr   verbs.QPInitAttr
		target error
		words  []string
	}{
		{verbs.QPInitAttr{Type: verbs.RC}, verbs.ErrNil, []string{"send CQ is missing", "SendCQ", "CreateCQ"}},
		{verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq}, verbs.ErrNil, []string{"receive CQ is missing", "RecvCQ"}},
		{verbs.QPInitAttr{Type: verbs.RC, SendCQ: (*CQ)(nil), RecvCQ: e.cq}, verbs.ErrNil, []string{"send CQ is missing"}},
		{verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: cq2}, verbs.ErrForeign,
			[]string{"receive CQ", "another device"}},
		{verbs.QPInitAttr{Type: verbs.RC, SendCQ: dead, RecvCQ: e.cq}, verbs.ErrDestroyed, []string{"send CQ was destroyed"}},
		{verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq, SRQ: (*SRQ)(nil)}, verbs.ErrNil, []string{"nil *SRQ"}},
		{verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq}, verbs.ErrInvalidAttr, []string{"QP type QPType(0)"}},
		{verbs.QPInitAttr{Type: verbs.UC, SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxInlineData: 1000}},
			verbs.ErrInvalidCap, []string{"MaxInlineData 1000: want at most 256"}},
	} {
		_, err := e.pd.CreateQP(&c.attr)
		apitest.Err(t, err, c.target, c.words...)
	}
}

func (e *nilEnv) modify(t *testing.T) {
	q := e.newQP(t, verbs.RC)
	apitest.Err(t, q.Modify(nil, verbs.AttrState), verbs.ErrNil, "needs a *QPAttr")
	init := verbs.QPAttr{State: verbs.StateInit, Port: 1}
	must(t, q.Modify(&init, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	rtr := verbs.QPAttr{State: verbs.StateRTR, PathMTU: bth.MTU1024}
	err := q.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
		verbs.AttrMaxDestRDAtomic|verbs.AttrMinRNRTimer)
	apitest.Err(t, err, verbs.ErrInvalidAttr, "no destination GID", "QPAttr.AH.DGID")
	if strings.Contains(err.Error(), "IP version") {
		t.Errorf("a missing GID reported as %q", err)
	}
	rtr.PathMTU, rtr.AH.DGID = 7, verbs.GIDFromAddr(addrB)
	err = q.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
		verbs.AttrMaxDestRDAtomic|verbs.AttrMinRNRTimer)
	apitest.Err(t, err, verbs.ErrInvalidAttr, "path MTU MTU(7): want MTU256 to the device's active MTU, 4096")
	for _, c := range []struct {
		attr  verbs.QPAttr
		mask  verbs.AttrMask
		words string
	}{
		{verbs.QPAttr{Port: 2}, verbs.AttrPort, "port 2: want 1"},
		{verbs.QPAttr{PKeyIndex: 1}, verbs.AttrPKeyIndex, "P_Key index 1: want 0"},
		{verbs.QPAttr{Access: 1 << 11}, verbs.AttrAccessFlags, "access flags 0x800: want LocalWrite"},
	} {
		apitest.Err(t, q.Modify(&c.attr, c.mask), verbs.ErrInvalidAttr, c.words)
	}
}

func (e *nilEnv) postSend(t *testing.T) {
	q := e.newQP(t, verbs.RC)
	apitest.Err(t, q.PostSend([]verbs.SendWR{{}}), verbs.ErrInvalidState, "in RESET", "move the QP to RTS")
	apitest.Err(t, (*QP)(nil).PostSend(nil), verbs.ErrNil, "nil *QP", "CreateQP")
	ud := e.newQP(t, verbs.UD)
	for _, m := range []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		must(t, ud.Modify(&m.attr, m.mask))
	}
	for _, c := range []struct {
		wr     verbs.SendWR
		target error
		words  string
	}{
		{verbs.SendWR{}, verbs.ErrInvalidWR, "RDMA_WRITE on a UD QP"},
		{verbs.SendWR{Opcode: verbs.OpSend}, verbs.ErrInvalidWR, "without an address handle"},
		{verbs.SendWR{Opcode: verbs.OpSend, AH: (*AH)(nil)}, verbs.ErrInvalidWR, "set SendWR.AH"},
		{verbs.SendWR{Opcode: verbs.OpSend, AH: e.ah, RemoteQPN: 1 << 24}, verbs.ErrInvalidWR, "does not fit in 24 bits"},
		{verbs.SendWR{Opcode: verbs.OpSend, AH: e.ah, SGL: make([]verbs.SGE, 2)}, verbs.ErrTooManySGE, "MaxSendSGE"},
		{verbs.SendWR{Opcode: verbs.OpSend, AH: e.ah, Flags: verbs.Inline, InlineData: make([]byte, 1)},
			verbs.ErrInlineTooLong, "at most 0 (QPCap.MaxInlineData)"},
	} {
		apitest.Err(t, ud.PostSend([]verbs.SendWR{c.wr}), c.target, c.words)
	}
}

func (e *nilEnv) postRecv(t *testing.T) {
	q := e.newQP(t, verbs.RC)
	apitest.Err(t, q.PostRecv([]verbs.RecvWR{{}}), verbs.ErrInvalidState, "in RESET", "move the QP to INIT")
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	apitest.Err(t, q.PostRecv([]verbs.RecvWR{{}, {}}), verbs.ErrQueueFull, "1 receives posted", "MaxRecvWR")
	apitest.Err(t, q.PostRecv([]verbs.RecvWR{{SGL: make([]verbs.SGE, 3)}}), verbs.ErrTooManySGE, "3 SGEs")
	must(t, q.Destroy())
	apitest.Err(t, q.PostRecv(nil), verbs.ErrDestroyed, "after Destroy")
}

func zero[T comparable](t *testing.T, v T) {
	t.Helper()
	var z T
	if v != z {
		t.Errorf("got %v, want %v", v, z)
	}
}

// discardSink is a CQSink that has room for nothing.
type discardSink struct{}

func (discardSink) Push(*verbs.WC, bool) bool { return false }
