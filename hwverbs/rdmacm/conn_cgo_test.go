//go:build hwverbs && cgo && linux

package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// These tests run a Conn's own logic on the host, without librdmacm's
// ids: its QP through goroce's software device (whose QPs check every
// transition as ibverbs does), its events handed in as its channel's
// goroutine would.

// softDev is a device for a Conn: goroce's software device in memory,
// with hwverbs's GID numbering (index 0 is table entry gid).
type softDev struct {
	verbs.Device
	gid int
}

func (d softDev) Port() uint8      { return 1 }
func (d softDev) GIDIndex() int    { return d.gid }
func (d softDev) Addr() netip.Addr { return netip.MustParseAddr("127.0.0.1") }

func newSoftDev(t *testing.T) softDev {
	t.Helper()
	f := &cli.DeviceFlags{Transport: "mem", Net: mem.NewNetwork(nil), Port: 4791}
	cfg, err := f.Config("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Open(cfg, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return softDev{Device: d, gid: 1}
}

// kernelAttrs are the attributes the kernel's rdma_cm gives an RC QP on
// RoCE for each state (rdma_init_qp_attr), as a dialling side after the
// REP sees them: GID table entry 1, the peer's QPN 0x33 and PSNs.
func kernelAttrs(state verbs.QPState) qpAttrs {
	switch state {
	case verbs.StateInit:
		return qpAttrs{attr: verbs.QPAttr{State: state, Port: 1, Access: verbs.RemoteWrite | verbs.RemoteRead | verbs.RemoteAtomic},
			mask: verbs.AttrState | verbs.AttrAccessFlags | verbs.AttrPKeyIndex | verbs.AttrPort}
	case verbs.StateRTR:
		a := rtrAttrs()
		a.attr.DestQPN, a.attr.MaxDestRDAtomic = 0x33, 1
		a.attr.AH.DGID = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))
		return a
	}
	return qpAttrs{attr: verbs.QPAttr{State: state, SQPSN: 0x654321, Timeout: 18, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1},
		mask: verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
			verbs.AttrMaxQPRDAtomic}
}

// A QP the connection creates goes through INIT, RTR and RTS with the
// kernel's attributes and this side's choices, and teardown destroys it
// with its PD and CQ.
func TestConnOwnedQP(t *testing.T) {
	dev := newSoftDev(t)
	c := newConn(dev, true, nil)
	p := &Params{ACKTimeout: 14, MinRNRTimer: 12}
	if err := c.setupQP(p); err != nil {
		t.Fatal(err)
	}
	scq, rcq := c.CQs()
	if c.PD() == nil || scq == nil || scq != rcq || c.QP().Type() != verbs.RC {
		t.Fatalf("owned objects: PD %v, CQs %v %v, QP %v", c.PD(), scq, rcq, c.QP())
	}
	as := [3]qpAttrs{kernelAttrs(verbs.StateInit), kernelAttrs(verbs.StateRTR), kernelAttrs(verbs.StateRTS)}
	as[1].setRTR(p, keep)
	as[2].setRTS(p, keep)
	for i := range as {
		if err := c.move(&as[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.QP().Query()
	if err != nil {
		t.Fatal(err)
	}
	if got.State != verbs.StateRTS || got.DestQPN != 0x33 || got.Timeout != 14 || got.MinRNRTimer != 12 ||
		got.Cap.MaxSendWR < 16 || got.Cap.MaxRecvWR < 16 {
		t.Errorf("QP after RTS: %+v", got)
	}
	qp := c.QP()
	c.teardown()
	if _, err := qp.Query(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("owned QP after teardown: %v, want destroyed", err)
	}
	if !errors.Is(c.Err(), cm.ErrClosed) {
		t.Errorf("Err after teardown: %v", c.Err())
	}
}

// A caller's QP must be RC and in RESET or INIT; one that is not is left
// as it was (not moved to ERR by the teardown of the failed connection).
func TestConnCallerQP(t *testing.T) {
	dev := newSoftDev(t)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(typ verbs.QPType) verbs.QP {
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	ud := mk(verbs.UD)
	if err := newConn(dev, true, nil).setupQP(&Params{QP: ud}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("UD QP: %v, want ErrInvalidAttr", err)
	}
	rts := mk(verbs.RC)
	c := newConn(dev, true, nil)
	c.qp = rts
	for _, st := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		a := kernelAttrs(st)
		if err := c.move(&a); err != nil {
			t.Fatal(err)
		}
	}
	c2 := newConn(dev, true, nil)
	if err := c2.setupQP(&Params{QP: rts}); !errors.Is(err, cm.ErrQPState) {
		t.Errorf("QP in RTS: %v, want ErrQPState", err)
	}
	c2.teardown()
	if st, _ := rts.Query(); st.State != verbs.StateRTS {
		t.Errorf("a refused QP went to %v", st.State)
	}
	// One in INIT, with receives posted, is taken; a failed connection
	// leaves it in ERR.
	q := mk(verbs.RC)
	in := kernelAttrs(verbs.StateInit)
	if err := q.Modify(&in.attr, in.mask); err != nil {
		t.Fatal(err)
	}
	c3 := newConn(dev, true, nil)
	if err := c3.setupQP(&Params{QP: q}); err != nil {
		t.Fatal(err)
	}
	c3.teardown()
	if st, _ := q.Query(); st.State != verbs.StateErr {
		t.Errorf("caller's QP after a failed connection: %v, want ERR", st.State)
	}
	if c3.PD() != nil {
		t.Error("a caller's QP: the connection claims a PD")
	}
}

// upConn returns a Conn with a caller's QP in RTS, as Dial or Accept
// leave it.
func upConn(t *testing.T, active bool) *Conn {
	t.Helper()
	dev := newSoftDev(t)
	c := newConn(dev, active, nil)
	if err := c.setupQP(&Params{}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		a := kernelAttrs(st)
		if err := c.move(&a); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func qpState(t *testing.T, c *Conn) verbs.QPState {
	t.Helper()
	a, err := c.QP().Query()
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

// The accepting side is up with ESTABLISHED; the peer's DISCONNECTED then
// ends the connection (cm.ErrDisconnected, QP in ERR) without waiting
// for the handshake's reader.
func TestConnEventsPassive(t *testing.T) {
	c := upConn(t, false)
	c.onEvent(event{typ: evEstablished})
	c.onEvent(event{typ: evDisconnected})
	select {
	case <-c.Done():
	default:
		t.Fatal("DISCONNECTED did not end the connection")
	}
	if !errors.Is(c.Err(), cm.ErrDisconnected) || qpState(t, c) != verbs.StateErr {
		t.Errorf("Err %v, QP %v", c.Err(), qpState(t, c))
	}
	if ev, err := c.expect(t.Context(), evEstablished, "waiting for the RTU"); err != nil || ev.typ != evEstablished {
		t.Errorf("the handshake's event: %v %v", ev.typ, err)
	}
	// A later TIMEWAIT_EXIT changes nothing.
	c.onEvent(event{typ: evTimewaitExit})
	if !errors.Is(c.Err(), cm.ErrDisconnected) {
		t.Errorf("Err %v", c.Err())
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after the peer left: %v", err)
	}
}

// The dialling side reads its handshake's events in order, and the ones
// that came before it was up are handled once it is: a REJ right after
// the RTU ends the connection.
func TestConnEventsActive(t *testing.T) {
	c := upConn(t, true)
	c.onEvent(event{typ: evConnectResponse, pdata: []byte("rep")})
	c.onEvent(event{typ: evRejected, status: 28})
	ev, err := c.expect(t.Context(), evConnectResponse, "waiting for the REP")
	if err != nil || string(ev.pdata) != "rep" {
		t.Fatalf("REP: %v %q", err, ev.pdata)
	}
	select {
	case <-c.Done():
		t.Fatal("ended before it was up")
	default:
	}
	c.mu.Lock()
	c.establishLocked()
	c.mu.Unlock()
	if !errors.Is(c.Err(), cm.ErrDisconnected) || qpState(t, c) != verbs.StateErr {
		t.Errorf("Err %v, QP %v", c.Err(), qpState(t, c))
	}
	c.Close()
}

// A failure during the handshake is the handshake's error; a step that
// gets another event than it waits for says so.
func TestConnHandshakeErrors(t *testing.T) {
	c := newConn(newSoftDev(t), true, nil)
	c.remote = netip.MustParseAddrPort("198.18.0.12:7174")
	c.onEvent(event{typ: evRejected, status: 8})
	if _, err := c.expect(t.Context(), evConnectResponse, "waiting for the REP"); !errors.Is(err, cm.ErrConnRefused) {
		t.Errorf("REJ 8: %v", err)
	}
	c.onEvent(event{typ: evRouteResolved})
	if _, err := c.expect(t.Context(), evAddrResolved, "resolving the address"); !errors.Is(err, ErrConnect) {
		t.Errorf("out of order: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.expect(ctx, evConnectResponse, "waiting for the REP"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no event: %v", err)
	}
	// A request whose peer gave up before Accept is gone.
	c.onEvent(event{typ: evRejected, status: int32(4)})
	if err := c.pendingErr(); !errors.Is(err, cm.ErrRejected) {
		t.Errorf("pendingErr: %v", err)
	}
	if err := c.pendingErr(); err != nil {
		t.Errorf("pendingErr with no event: %v", err)
	}
	c.teardown()
	c.onEvent(event{typ: evDisconnected}) // after teardown: ignored
}

// CloseContext waits for the end of the disconnect exchange, as long as
// its context lets it; Close does not wait.
func TestConnCloseWait(t *testing.T) {
	c := upConn(t, true)
	c.mu.Lock()
	c.establishLocked()
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := c.CloseContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no DREP: %v, want the context's error", err)
	}
	if !errors.Is(c.Err(), cm.ErrClosed) {
		t.Errorf("Err %v", c.Err())
	}
	if _, err := c.QP().Query(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("owned QP after CloseContext: %v, want destroyed", err)
	}

	c = upConn(t, true)
	c.mu.Lock()
	c.establishLocked()
	c.mu.Unlock()
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.onEvent(event{typ: evDisconnected}) // the DREP
	}()
	if err := c.CloseContext(t.Context()); err != nil {
		t.Errorf("DREP: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// DEVICE_REMOVAL ends a connection with ErrDeviceRemoved, its QP in ERR,
// and a listener, whose Accept then returns it.
func TestDeviceRemoval(t *testing.T) {
	c := upConn(t, true)
	c.mu.Lock()
	c.establishLocked()
	c.mu.Unlock()
	c.onEvent(event{typ: evDeviceRemoval})
	if !errors.Is(c.Err(), ErrDeviceRemoved) || errors.Is(c.Err(), cm.ErrDisconnected) || qpState(t, c) != verbs.StateErr {
		t.Errorf("Err %v, QP %v", c.Err(), qpState(t, c))
	}
	c.Close()

	l := &Listener{done: make(chan struct{}), pending: make(chan *Conn, 1)}
	l.onEvent(event{typ: evDeviceRemoval})
	if _, err := l.Accept(t.Context()); !errors.Is(err, ErrDeviceRemoved) {
		t.Errorf("Accept: %v", err)
	}
}
