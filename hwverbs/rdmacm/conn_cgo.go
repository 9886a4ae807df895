//go:build hwverbs && cgo && linux

package rdmacm

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// Conn is an RC connection made by Dial or Accept through librdmacm: a
// QP in RTS towards the peer, and the rdma_cm id that goes with it, with
// its own event channel. Its methods are safe for concurrent use.
type Conn struct {
	dev      device
	active   bool
	log      *slog.Logger
	id       cmID
	ch       *channel
	local    netip.AddrPort
	remote   netip.AddrPort
	qp       verbs.QP
	own      owned
	params   Params
	peerData []byte
	info     ConnInfo
	req      Request // passive side: the request, as OnRequest sees it

	hs   chan event    // the handshake's events, in order
	done chan struct{} // closed when the connection ends
	disc chan struct{} // closed when the disconnect exchange is over

	mu     sync.Mutex // the fields below, and moves of the QP to ERR
	up     bool       // established
	closed bool       // Close called, or the connection torn down
	torn   bool       // teardown ran: no more events
	ended  bool       // done closed
	over   bool       // disc closed
	err    error
}

// hsQueue bounds the events a handshake may leave unread: it reads them
// one at a time, and rdma_cm sends a handful per connection.
const hsQueue = 16

// device is what a connection uses of its *hwverbs.Device.
type device interface {
	Name() string
	Port() uint8
	GIDIndex() int
	Addr() netip.Addr
	AllocPD() (verbs.PD, error)
	CreateCQ(cqe int) (verbs.CQ, error)
}

var _ device = (*hwverbs.Device)(nil)

func newConn(dev device, active bool, log *slog.Logger) *Conn {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Conn{dev: dev, active: active, log: log, hs: make(chan event, hsQueue),
		done: make(chan struct{}), disc: make(chan struct{})}
}

// owned is what the connection created and destroys with it.
type owned struct {
	once   sync.Once
	qp     verbs.QP
	scq    verbs.CQ
	rcq    verbs.CQ
	pd     verbs.PD
	shared bool // scq == rcq
}

// release destroys what the connection created, once.
func (o *owned) release() {
	o.once.Do(func() {
		if o.qp != nil {
			o.qp.Destroy()
		}
		if o.scq != nil {
			o.scq.Destroy()
		}
		if o.rcq != nil && !o.shared {
			o.rcq.Destroy()
		}
		if o.pd != nil {
			o.pd.Dealloc()
		}
	})
}

// ok returns the error of a method called on a Conn that Dial or Accept
// did not make.
func (c *Conn) ok() error {
	if c == nil || c.done == nil {
		return invalid("nil Conn: make one with Dial or Listener.Accept")
	}
	return nil
}

// QP returns the connection's queue pair.
func (c *Conn) QP() verbs.QP {
	if c == nil {
		return nil
	}
	return c.qp
}

// PD returns the protection domain of a QP the connection created, or
// nil when the caller gave the QP or the PD.
func (c *Conn) PD() verbs.PD {
	if c == nil {
		return nil
	}
	return c.own.pd
}

// CQs return the completion queues the connection created for its QP
// (nil when the caller gave the QP, or that CQ).
func (c *Conn) CQs() (send, recv verbs.CQ) {
	if c == nil {
		return nil, nil
	}
	return c.own.scq, c.own.rcq
}

// LocalAddr returns this side's address and port.
func (c *Conn) LocalAddr() netip.AddrPort {
	if c == nil {
		return netip.AddrPort{}
	}
	return c.local
}

// RemoteAddr returns the peer's address and port.
func (c *Conn) RemoteAddr() netip.AddrPort {
	if c == nil {
		return netip.AddrPort{}
	}
	return c.remote
}

// PrivateData returns the peer's private data: the REP's MaxREPData bytes
// for the dialling side, the MaxREQData bytes after rdma_cm's header of
// the REQ for the accepting side (CM messages carry their whole private
// data area, so the data is zero-padded).
func (c *Conn) PrivateData() []byte {
	if c == nil {
		return nil
	}
	return c.peerData
}

// Info returns what the connection negotiated.
func (c *Conn) Info() ConnInfo {
	if c == nil {
		return ConnInfo{}
	}
	return c.info
}

// Done returns a channel closed when the connection ends: the peer
// disconnected (Err matches cm.ErrDisconnected), the device went away
// (ErrDeviceRemoved), or Close was called (cm.ErrClosed). A Conn that
// Dial or Accept did not make is over from the start.
func (c *Conn) Done() <-chan struct{} {
	if c.ok() != nil {
		return closedChan
	}
	return c.done
}

// closedChan is the Done of a Conn that is no connection.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Err returns why the connection ended, or nil while it is up.
func (c *Conn) Err() error {
	if err := c.ok(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close disconnects as rdma_disconnect does, without waiting: it moves
// the QP to ERR (ending at once the work requests still posted, with
// WR_FLUSH_ERR), sends the DREQ (or the DREP, when the peer disconnected
// first), then destroys the rdma_cm id, its event channel and goroutine,
// and what the connection created. The kernel sends the DREQ once; to
// wait for the peer's DREP, use CloseContext. Closing twice is harmless.
func (c *Conn) Close() error {
	if err := c.ok(); err != nil {
		return err
	}
	return c.close(context.Background(), false)
}

// CloseContext is Close that waits, as long as ctx lets it, for the
// peer's answer to the DREQ (RDMA_CM_EVENT_DISCONNECTED) before it
// destroys the id. It returns nil once the peer answered or had
// disconnected first, and ctx's error when ctx ended first; either way
// everything is released when it returns.
func (c *Conn) CloseContext(ctx context.Context) error {
	if err := c.ok(); err != nil {
		return err
	}
	return c.close(ctx, true)
}

// endLocked ends the connection with err; the caller holds c.mu.
func (c *Conn) endLocked(err error) {
	if c.ended {
		return
	}
	c.ended = true
	c.err = err
	close(c.done)
}

// overLocked ends the disconnect exchange; the caller holds c.mu.
func (c *Conn) overLocked() {
	if !c.over {
		c.over = true
		close(c.disc)
	}
}

// toErr moves the QP to ERR, flushing its work requests; a QP already
// destroyed by the program is left alone.
func (c *Conn) toErr() {
	if c.qp != nil {
		c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	}
}

// setupQP readies the QP of the connection: the caller's, which must be
// an RC QP in RESET or INIT, or one it creates with p. c.qp is set only
// once the QP is usable, so that a failed setup leaves a caller's QP
// as it was.
func (c *Conn) setupQP(p *Params) error {
	c.params = *p
	if p.QP == nil {
		// What createQP made, even in part, goes with the connection.
		return c.createQP(p)
	}
	q := p.QP
	if t := q.Type(); t != verbs.RC {
		return fmt.Errorf("rdmacm: %w: a %v QP (rdma_cm's TCP port space connects RC QPs)", verbs.ErrInvalidAttr, t)
	}
	st, err := q.Query()
	if err != nil {
		return fmt.Errorf("rdmacm: QP %d: %w", q.QPN(), err)
	}
	if st.State != verbs.StateReset && st.State != verbs.StateInit {
		return fmt.Errorf("rdmacm: %w: QP %d is %v", cm.ErrQPState, q.QPN(), st.State)
	}
	c.qp = q
	return nil
}

// createQP makes an RC QP on the device, in p's PD with p's CQs, making
// those that p leaves nil.
func (c *Conn) createQP(p *Params) error {
	o := &c.own
	var err error
	pd := p.PD
	if pd == nil {
		if pd, err = c.dev.AllocPD(); err != nil {
			return fmt.Errorf("rdmacm: %w", err)
		}
		o.pd = pd
	}
	capa := p.Cap
	if capa.MaxSendWR == 0 && capa.MaxRecvWR == 0 {
		capa = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	}
	scq, rcq := p.SendCQ, p.RecvCQ
	if scq == nil && rcq == nil {
		if scq, err = c.dev.CreateCQ(int(capa.MaxSendWR + capa.MaxRecvWR)); err != nil {
			return fmt.Errorf("rdmacm: %w", err)
		}
		rcq, o.scq, o.rcq, o.shared = scq, scq, scq, true
	}
	if scq == nil {
		if scq, err = c.dev.CreateCQ(int(max(capa.MaxSendWR, 1))); err != nil {
			return fmt.Errorf("rdmacm: %w", err)
		}
		o.scq = scq
	}
	if rcq == nil {
		if rcq, err = c.dev.CreateCQ(int(max(capa.MaxRecvWR, 1))); err != nil {
			return fmt.Errorf("rdmacm: %w", err)
		}
		o.rcq = rcq
	}
	q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: scq, RecvCQ: rcq, Cap: capa})
	if err != nil {
		return fmt.Errorf("rdmacm: %w", err)
	}
	c.qp, o.qp = q, q
	return nil
}

// move modifies the QP with the attributes rdma_cm gave for a state.
func (c *Conn) move(a *qpAttrs) error {
	at, mask, err := a.forDevice(c.dev.GIDIndex())
	if err != nil {
		return err
	}
	if err := c.qp.Modify(&at, mask); err != nil {
		return fmt.Errorf("rdmacm: %w: QP %d to %v with rdma_cm's attributes (mask %v): %w",
			ErrConnect, c.qp.QPN(), at.State, mask, err)
	}
	c.log.Debug("rdmacm: QP moved", "qpn", c.qp.QPN(), "state", at.State, "mask", mask)
	return nil
}

// pendingErr reports why a request waiting for Accept went away: any
// event before Accept answers it (the peer's REJ when it gave up, the
// device removed) ends it.
func (c *Conn) pendingErr() error {
	select {
	case ev := <-c.hs:
		if err := eventError(ev.typ, ev.status, ev.pdata, c.remote, false); err != nil {
			return err
		}
		return unexpected(ev.typ, ev.status, "waiting for Accept")
	default:
		return nil
	}
}

// await waits for the handshake's next event, step saying what for. A
// failure event is returned as its error.
func (c *Conn) await(ctx context.Context, step string) (event, error) {
	select {
	case ev := <-c.hs:
		c.log.Debug("rdmacm: event", "event", ev.typ, "status", ev.status, "remote", c.remote)
		if err := eventError(ev.typ, ev.status, ev.pdata, c.remote, c.active); err != nil {
			return ev, err
		}
		return ev, nil
	case <-ctx.Done():
		return event{}, fmt.Errorf("%s: %w", step, ctx.Err())
	}
}

// expect waits for the event want, step saying what for.
func (c *Conn) expect(ctx context.Context, want eventType, step string) (event, error) {
	ev, err := c.await(ctx, step)
	if err == nil && ev.typ != want {
		err = unexpected(ev.typ, ev.status, step)
	}
	return ev, err
}

// onEventLocked takes an event from the connection's channel; the
// caller holds c.mu. Until the connection is up, events go to the
// handshake in order; the accepting side is up with ESTABLISHED (the
// RTU).
func (c *Conn) onEventLocked(ev event) {
	if c.torn {
		return
	}
	if !c.up {
		select {
		case c.hs <- ev:
		default:
			c.log.Warn("rdmacm: handshake event dropped: too many unread", "event", ev.typ, "remote", c.remote)
		}
		if ev.typ == evEstablished && !c.active {
			c.up = true
		}
		return
	}
	c.connEventLocked(ev)
}

// establishLocked marks the dialling side up once its RTU is sent, and
// hands the events that came meanwhile to the connection; the caller
// holds c.mu.
func (c *Conn) establishLocked() {
	c.up = true
	for {
		select {
		case ev := <-c.hs:
			c.connEventLocked(ev)
		default:
			return
		}
	}
}

// connEventLocked takes an event of a connection that is up; the caller
// holds c.mu. The peer's DREQ (DISCONNECTED; a REJ or the end of the
// time-wait count as one) ends the connection: this side moves its QP
// to ERR and answers with the DREP, unless it is closing itself, and a
// DISCONNECTED after this side's DREQ ends the disconnect exchange.
func (c *Conn) connEventLocked(ev event) {
	c.log.Debug("rdmacm: event", "event", ev.typ, "status", ev.status, "remote", c.remote)
	switch ev.typ {
	case evDisconnected, evTimewaitExit, evRejected:
		first := !c.ended
		t := ev.typ
		if t == evRejected {
			t = evDisconnected
		}
		c.endLocked(eventError(t, ev.status, nil, c.remote, c.active))
		c.overLocked()
		if first && !c.closed {
			c.toErr()
			c.disconnect()
		}
	case evDeviceRemoval:
		c.endLocked(eventError(ev.typ, ev.status, nil, c.remote, c.active))
		c.overLocked()
		c.toErr()
	}
}
