package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/verbs"
)

// Params are what one side brings to a connection: its QP (or how the
// agent makes one), the RDMA READ/atomic depths it offers, the retry
// counts and its private data. The zero value is rping's choice: one
// outstanding READ each way, 7 retries, 7 RNR retries (forever), a QP the
// agent creates. Values out of range make Dial and Accept fail with
// ErrInvalid rather than be replaced. It is plain data, read by Dial and
// Accept.
type Params struct {
	// QP is the caller's RC QP, in RESET or INIT, whose receives can be
	// posted before the connection exists (as rping and perftest do).
	// nil makes the agent create one in PD with the CQs and Cap below;
	// the connection's Close destroys what the agent created.
	QP verbs.QP
	// PD, SendCQ and RecvCQ are used for a QP the agent creates; nil
	// ones are created too.
	PD             verbs.PD
	SendCQ, RecvCQ verbs.CQ
	// Cap sizes a QP the agent creates; zero means 16 work requests
	// and one SGE each way.
	Cap verbs.QPCap
	// ResponderResources is how many RDMA READ and atomic requests this
	// side serves at once, InitiatorDepth how many it issues at once;
	// each is negotiated down to the peer's matching value (0 means 1).
	ResponderResources, InitiatorDepth uint8
	// RetryCount is how many times the QPs send again what the peer did
	// not acknowledge within the ACK timeout (at most 7; 0 means 7). The
	// dialler's goes in the REQ and sets both QPs, as rdma_cm's does; a
	// listener's is not used (the REP has no field for it).
	RetryCount uint8
	// RNRRetryCount is how many times the *peer's* QP sends again a
	// message this side had no receive posted for (at most 7, 7 meaning
	// without end; 0 means 7). As with rdma_cm, it travels to the peer
	// (in the REQ for the listener's QP, in the REP for the dialler's):
	// this side's own QP gets the peer's value.
	RNRRetryCount uint8
	// MinRNRTimer is the QP's minimum RNR NAK timer code (at most 31);
	// 0 is what rdma_cm sets (655 ms).
	MinRNRTimer uint8
	// PathMTU bounds the path MTU: bth.MTU256 to bth.MTU4096 (the
	// enumeration, not a byte count: bth.MTUFromBytes converts), or 0
	// for the device's active MTU. The dialler's goes in the REQ (capped at
	// its device's active MTU) and sets both QPs; the listener follows
	// the REQ, as the IB CM does, and refuses it (REJ "invalid path MTU",
	// Accept fails) when its own PathMTU is lower, since the REP cannot
	// lower it.
	PathMTU bth.MTU
	// ACKTimeout is the local ACK timeout exponent this side's QP uses
	// (4.096 µs × 2^ACKTimeout, at most 31), as librdmacm's
	// RDMA_OPTION_ID_ACK_TIMEOUT sets it: for this side only, never sent
	// to the peer. 0 means the timeout the connection derives from the
	// path and the peer's ACK delay: 19 on RoCE with the defaults, 2.1 s,
	// so that a peer that stops answering fails a work request with
	// RETRY_EXC_ERR after 8 × 2.1 s ≈ 17 s with RetryCount 7.
	ACKTimeout uint8
	// PrivateData goes to the peer: at most 56 bytes in a REQ (after
	// rdma_cm's header), 196 in a REP.
	PrivateData []byte
	// ManualQP leaves QP to the caller, as rdma_cm leaves the QP of an id
	// that has none (the program passes its QP's number): the agent reads
	// its QPN and never moves it, and the caller takes it to INIT, RTR
	// and RTS with ConnInfo.QPAttr (rdma_init_qp_attr). Dial then returns
	// once the REP has come (RDMA_CM_EVENT_CONNECT_RESPONSE), and the
	// connection is up when the caller calls Conn.Establish
	// (rdma_establish), which sends the RTU; the listener's side is up at
	// the RTU, as with any QP.
	ManualQP bool
}

// check reports the first value of p that is out of range.
func (p *Params) check() error {
	switch {
	case p.QP != nil && isNil(p.QP), p.PD != nil && isNil(p.PD), p.SendCQ != nil && isNil(p.SendCQ),
		p.RecvCQ != nil && isNil(p.RecvCQ):
		return invalid("Params holds a nil pointer in QP, PD, SendCQ or RecvCQ: leave the field nil to have one made")
	case p.ManualQP && p.QP == nil:
		return invalid("Params.ManualQP needs the caller's QP in Params.QP")
	case p.PathMTU != 0 && p.PathMTU.Bytes() == 0:
		return invalid("Params.PathMTU %d is not a path MTU (bth.MTU256 to bth.MTU4096, or 0 for the device's)", p.PathMTU)
	case p.ACKTimeout > 31:
		return invalid("Params.ACKTimeout %d is over 31, the largest ACK timeout exponent (0: the path's)", p.ACKTimeout)
	case p.RetryCount > maxCount:
		return invalid("Params.RetryCount %d is over 7, the largest retry count (0 means 7)", p.RetryCount)
	case p.RNRRetryCount > maxCount:
		return invalid("Params.RNRRetryCount %d is over 7, the largest RNR retry count (7 retries without end; 0 means 7)",
			p.RNRRetryCount)
	case p.MinRNRTimer > 31:
		return invalid("Params.MinRNRTimer %d is over 31, the largest RNR timer code (0: 655 ms)", p.MinRNRTimer)
	}
	return nil
}

// ConnInfo is what a connection negotiated: each value is the one in
// effect on the QP. It is plain data.
type ConnInfo struct {
	LocalCommID, RemoteCommID uint32
	LocalQPN, RemoteQPN       uint32
	// SendPSN is the first PSN this side sends; RecvPSN the first it
	// expects.
	SendPSN, RecvPSN uint32
	// ResponderResources is the QP's max_dest_rd_atomic, InitiatorDepth
	// its max_rd_atomic.
	ResponderResources, InitiatorDepth uint8
	PathMTU                            bth.MTU
	RetryCount, RNRRetryCount          uint8
	// LocalACKTimeout is the QP's local ACK timeout exponent:
	// Params.ACKTimeout when set, else the one derived from the path.
	LocalACKTimeout uint8
	// MinRNRTimer is the QP's minimum RNR NAK timer code.
	MinRNRTimer  uint8
	RemoteCAGUID uint64
	ServiceID    uint64
	// AH is the path to the peer the QP takes in RTR.
	AH verbs.AHAttr
}

// QPAttr returns the attributes that take the connection's QP to state
// (verbs.StateInit, StateRTR or StateRTS) and the mask of those that
// apply, as rdma_init_qp_attr gives them: what the agent sets on a QP it
// moves, and what the owner of a Params.ManualQP QP sets on it.
func (i ConnInfo) QPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	switch state {
	case verbs.StateInit:
		access := verbs.RemoteWrite
		if i.ResponderResources > 0 {
			access |= verbs.RemoteRead | verbs.RemoteAtomic
		}
		return verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: access},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags, nil
	case verbs.StateRTR:
		ah := i.AH
		if ah.HopLimit == 0 {
			ah.HopLimit = hopLimit
		}
		ah.Port = 1
		return verbs.QPAttr{State: verbs.StateRTR, PathMTU: i.PathMTU, DestQPN: i.RemoteQPN, RQPSN: bth.PSN(i.RecvPSN),
				MaxDestRDAtomic: i.ResponderResources, MinRNRTimer: i.MinRNRTimer, AH: ah},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer, nil
	case verbs.StateRTS:
		return verbs.QPAttr{State: verbs.StateRTS, SQPSN: bth.PSN(i.SendPSN), Timeout: i.LocalACKTimeout,
				RetryCnt: i.RetryCount, RNRRetry: i.RNRRetryCount, MaxRDAtomic: i.InitiatorDepth},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRDAtomic, nil
	}
	return verbs.QPAttr{}, 0, invalid("no connection attributes for a QP in %v (INIT, RTR and RTS have them)", state)
}

// connState is where a connection is in the IB CM's state machine (IBTA
// Vol. 1 §12.9.6).
type connState uint8

const (
	stREQSent connState = iota + 1
	stMRAReqRcvd
	stREQRcvd
	stMRAReqSent
	stREPSent
	stMRARepRcvd
	stEstablished
	stDREQSent
	stTimeWait
	stGone
	stREPRcvd // the active side of a Params.ManualQP connection, until Establish
)

var stateNames = [...]string{"", "REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "MRA_REQ_SENT", "REP_SENT",
	"MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "TIMEWAIT", "GONE", "REP_RCVD"}

func (s connState) String() string { return stateNames[s] }

// Conn is an RC connection made by Dial or Accept: a QP in RTS towards
// the peer, and the IB CM state that goes with it. Its methods are safe
// for concurrent use.
type Conn struct {
	a        *Agent
	active   bool
	local    netip.AddrPort
	remote   netip.AddrPort
	peer     netip.Addr // where the agent sends this connection's MADs
	peerGID  [16]byte
	qp       verbs.QP
	own      owned
	info     ConnInfo
	peerData []byte
	req      *mad.REQ // passive side: the REQ, until answered
	listener *Listener
	params   Params
	unshare  func() // gives back the hold on the device's agent (Listen, Dial)

	// Under a.mu.
	state    connState
	tid      uint64 // of the exchange in progress (REQ's, or the peer's DREQ's)
	pending  []byte // the MAD to send again on timeout
	timeout  time.Duration
	tries    int
	maxTries int
	timer    clock.Timer
	gen      uint64
	pathACK  uint8     // the local ACK timeout the path gives, for the CM's own timers
	unwatch  func()    // stops watchQP
	deadline time.Time // the active side gives up on its REQ then (Config.ConnectTimeout)
	hsErr    error
	err      error
	closeErr error

	inflight bool // a listener's handshake waiting for its RTU (handshake.go), under a.mu
	awaited  bool // and the Accept that sent the REP waits for it

	ready  chan struct{} // closed when the handshake ends, either way
	done   chan struct{} // closed when the connection ends
	closed chan struct{} // closed when the disconnect exchange ends
	flags  struct{ ready, done, closed bool }
}

// owned is what the agent created for a connection and destroys with it.
type owned struct {
	once   sync.Once
	qp     verbs.QP
	scq    verbs.CQ
	rcq    verbs.CQ
	pd     verbs.PD
	shared bool // scq == rcq
}

func newConn(a *Agent, active bool) *Conn {
	return &Conn{a: a, active: active, ready: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{})}
}

// QP returns the connection's queue pair.
func (c *Conn) QP() verbs.QP {
	if c == nil {
		return nil
	}
	return c.qp
}

// PD returns the protection domain of a QP the agent created, or nil when
// the caller gave the QP.
func (c *Conn) PD() verbs.PD {
	if c == nil {
		return nil
	}
	return c.own.pd
}

// CQs return the completion queues of a QP the agent created (nil when
// the caller gave the QP).
func (c *Conn) CQs() (send, recv verbs.CQ) {
	if c == nil {
		return nil, nil
	}
	return c.own.scq, c.own.rcq
}

// LocalAddr returns this side's address and port (the listener's, or the
// source port the active side announced).
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

// PrivateData returns the peer's private data: the REP's 196 bytes for
// the active side, the 56 bytes after rdma_cm's header of the REQ for the
// passive side (CM messages carry their whole private data area, so the
// data is zero-padded).
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

// Done returns a channel closed when the connection ends: the peer sent a
// DREQ (Err is ErrDisconnected), the QP entered the error state (Err wraps
// ErrQPError: a work request failed, such as RETRY_EXC_ERR when the peer
// stopped answering, or the program moved the QP to ERR), Close was
// called, or the agent closed. A Conn that Dial or Accept did not make is
// over from the start.
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
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.err
}

// ok returns the error of a method called on a Conn Dial or Accept did
// not make.
func (c *Conn) ok() error {
	if c == nil || c.a == nil {
		return invalid("nil Conn: make one with Dial or Accept")
	}
	return nil
}

// qpACKTimeout is the local ACK timeout the connection's QP takes:
// Params.ACKTimeout, or the path's.
func (c *Conn) qpACKTimeout() uint8 {
	if c.params.ACKTimeout != 0 {
		return c.params.ACKTimeout
	}
	return c.pathACK
}

// Close disconnects: it moves the QP to ERR (ending at once the work
// requests still posted, with WR_FLUSH_ERR), sends a DREQ and waits for
// the DREP for at most Config.CloseWait (1 s by default); a connection the
// peer already ended is only released. It then destroys what the agent
// created for the connection. It returns nil once the peer answered, had
// disconnected first, or did not answer within the wait: the agent then
// goes on sending the DREQ in the background, up to its CM retries or
// until the agent closes, as rdma_disconnect leaves it to the kernel. It
// returns an error wrapping ErrTimeout or ErrUnreachable when the
// exchange failed within the wait. CloseContext waits as long as its
// context lets it.
func (c *Conn) Close() error {
	if err := c.ok(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.a.closeWait, 0))
	defer cancel()
	err := c.close(ctx)
	if err == ctx.Err() {
		return nil // no DREP yet: the DREQ goes on in the background
	}
	return err
}

// CloseContext is Close bounded by ctx instead of Config.CloseWait: it
// returns nil once the peer answered the DREQ (or had disconnected
// first), an error wrapping ErrTimeout when it never did, and ctx's error
// when ctx ends first, while the agent goes on sending the DREQ in the
// background until its retries run out. Either way the QP is in ERR and
// what the agent created is released when it returns.
func (c *Conn) CloseContext(ctx context.Context) error {
	if err := c.ok(); err != nil {
		return err
	}
	err := c.close(ctx)
	if err != nil && err == ctx.Err() {
		return fmt.Errorf("cm: close %v: %w", c.remote, err)
	}
	return err
}

// Establish ends the handshake of a Params.ManualQP connection Dial
// returned: it sends the RTU, for which the listener's side waits, once
// the caller has moved its QP to RTS (ConnInfo.QPAttr); librdmacm's
// rdma_establish. It fails on any other connection, or one established or
// gone already.
func (c *Conn) Establish() error {
	if err := c.ok(); err != nil {
		return err
	}
	a := c.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.state != stREPRcvd {
		return fmt.Errorf("%w: Establish of a connection in %v (a ManualQP connection that Dial returned, once)",
			ErrInvalid, c.state)
	}
	i := &c.info
	a.send(c.peer, c.tid, &mad.RTU{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID})
	c.state = stEstablished
	a.log.Debug("cm: established", "side", "active", "local_id", i.LocalCommID, "remote_id", i.RemoteCommID,
		"qpn", i.LocalQPN, "psn", i.SendPSN)
	return nil
}

// close is Close and CloseContext: it returns ctx.Err() itself when ctx
// ends before the disconnect exchange.
func (c *Conn) close(ctx context.Context) error {
	a := c.a
	a.mu.Lock()
	switch c.state {
	case stEstablished:
		c.endLocked(ErrClosed)
		a.toErr(c)
		a.sendDREQ(c)
	case stREPRcvd:
		// Not established: the REP is refused, as the IB CM's active
		// side does when its consumer gives up.
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: mad.RejectedREP, Reason: mad.RejConsumerDefined})
		c.fail(ErrClosed)
		a.forget(c)
	}
	a.mu.Unlock()
	select {
	case <-c.closed:
	case <-ctx.Done():
	}
	var err error
	select {
	case <-c.closed: // over, even if ctx ended at the same time
		a.mu.Lock()
		err = c.closeErr
		a.mu.Unlock()
	default:
		err = ctx.Err()
	}
	c.release()
	if c.unshare != nil {
		c.unshare()
	}
	return err
}

// release destroys what the agent created for the connection, once.
func (c *Conn) release() {
	o := &c.own
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

// markReady ends the handshake with err (nil: connected); the caller
// holds a.mu.
func (c *Conn) markReady(err error) {
	if c.flags.ready {
		return
	}
	c.flags.ready = true
	c.hsErr = err
	close(c.ready)
	if c.inflight {
		c.a.handshakeEnded(c)
	}
}

// endLocked ends the connection with err; the caller holds a.mu.
func (c *Conn) endLocked(err error) {
	if c.flags.done {
		return
	}
	if c.unwatch != nil {
		c.unwatch()
		c.unwatch = nil
	}
	c.flags.done = true
	c.err = err
	close(c.done)
}

// closeDone ends the disconnect exchange with err; the caller holds a.mu.
func (c *Conn) closeDone(err error) {
	if c.flags.closed {
		return
	}
	c.flags.closed = true
	c.closeErr = err
	close(c.closed)
}

// fail ends a connection that never got up (or a torn-down one) with
// err: every wait returns; the caller holds a.mu.
func (c *Conn) fail(err error) {
	c.markReady(err)
	c.endLocked(err)
	c.closeDone(nil)
}

// Dial connects to a listener at addr (the peer's IP address and rdma_cm
// TCP port) and returns the connection once the REP has come and the RTU
// is sent (with Params.ManualQP, once the REP has come: Establish sends
// the RTU). It fails at once with a *RejectError when the peer rejects
// (matching ErrConnRefused when nobody listens on the port, or the peer's
// device has no CM agent), as soon as the network reports the peer
// unreachable with ErrUnreachable (an ICMP error over UDP: nothing
// receives RoCEv2 there, or no route), with ErrTimeout when nothing
// answers the REQ within Config.ConnectTimeout (25 s by default; the REQ
// still announces rdma_cm's 15 retries of 4.3 s to the peer), or with
// ctx's error as soon as ctx ends. A failed Dial leaves a caller's QP in
// ERR, its posted work requests flushed.
func (a *Agent) Dial(ctx context.Context, addr netip.AddrPort, p *Params) (*Conn, error) {
	if err := a.ok(); err != nil {
		return nil, err
	}
	var pp Params
	if p != nil {
		pp = *p
	}
	if err := pp.check(); err != nil {
		return nil, err
	}
	dst := addr.Addr().Unmap()
	if err := a.checkAddr(dst); err != nil {
		return nil, err
	}
	if addr.Port() == 0 {
		return nil, fmt.Errorf("%w: port 0", ErrAddr)
	}
	if len(pp.PrivateData) > mad.MaxREQUserData {
		return nil, fmt.Errorf("%w: %d bytes in a REQ (at most %d)", ErrPrivateData, len(pp.PrivateData), mad.MaxREQUserData)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := newConn(a, true)
	c.params = pp
	c.remote = netip.AddrPortFrom(dst, addr.Port())
	c.peer, c.peerGID = dst, verbs.GIDFromAddr(dst)
	if err := c.setupQP(&pp, depth(pp.ResponderResources) > 0); err != nil {
		return nil, err
	}
	if err := a.sendREQ(c); err != nil {
		c.release()
		return nil, err
	}
	return c.awaitREP(ctx)
}

// sendREQ starts the active side's exchange with a REQ for c.
func (a *Agent) sendREQ(c *Conn) error {
	pp := &c.params
	mtu := a.mtu
	if pp.PathMTU != 0 && pp.PathMTU < mtu {
		mtu = pp.PathMTU
	}
	rr, id := depth(pp.ResponderResources), depth(pp.InitiatorDepth)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if len(a.conns) >= a.maxConns {
		a.ctr.refused.Add(1)
		return fmt.Errorf("%w: the agent tracks %d connections, the most it may (Config.MaxConns): close some, "+
			"or raise it", ErrLimit, len(a.conns))
	}
	sport := a.newPort()
	local, _ := a.localFor(c.peer) // Dial checked its family
	c.local = netip.AddrPortFrom(local, sport)
	c.info = ConnInfo{
		LocalCommID: a.newLocalID(), LocalQPN: c.qp.QPN(), RecvPSN: rand.Uint32() & bth.PSNMask,
		ResponderResources: rr, InitiatorDepth: id, PathMTU: mtu,
		RetryCount: count(pp.RetryCount), RNRRetryCount: count(pp.RNRRetryCount),
		LocalACKTimeout: ackTimeout(caACKDelay, a.lifeTime), ServiceID: mad.ServiceID(mad.PortSpaceTCP, c.remote.Port()),
	}
	c.pathACK = c.info.LocalACKTimeout
	req := &mad.REQ{
		LocalCommID: c.info.LocalCommID, ServiceID: c.info.ServiceID, LocalCAGUID: a.guid,
		LocalQPN: c.info.LocalQPN, ResponderResources: rr, InitiatorDepth: id,
		RemoteCMResponseTimeout: a.respTimeout, TransportServiceType: mad.TransportRC,
		StartingPSN: c.info.RecvPSN, LocalCMResponseTimeout: a.respTimeout, RetryCount: c.info.RetryCount,
		PKey: defaultPKey, PathMTU: mtu, RNRRetryCount: c.info.RNRRetryCount, MaxCMRetries: a.maxRetries,
		Primary: mad.Path{LocalLID: lidPermissive, RemoteLID: lidPermissive, LocalGID: verbs.GIDFromAddr(local), RemoteGID: c.peerGID,
			FlowLabel: flowLabel(sport, c.remote.Port()), HopLimit: hopLimit, LocalACKTimeout: c.pathACK},
	}
	cma := mad.CMAHeader{SrcPort: sport, Src: local, Dst: c.peer}
	if err := cma.Marshal(req.PrivateData[:]); err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	copy(req.PrivateData[mad.CMAHeaderLen:], pp.PrivateData)
	a.ports[sport]++
	a.conns[c.info.LocalCommID] = c
	c.tid = formTID(a.agentID, c.info.LocalCommID)
	c.state = stREQSent
	c.deadline = a.clk.Now().Add(a.connectTimeout)
	c.maxTries = int(a.maxRetries)
	a.log.Debug("cm: send REQ", "local_id", c.info.LocalCommID, "qpn", c.info.LocalQPN, "psn", c.info.RecvPSN, "to", c.remote)
	a.startExchange(c, a.send(c.peer, c.tid, req), a.reqTimeout())
	return nil
}

// awaitREP waits for the end of the active side's handshake, until ctx
// ends, and returns the connection or why it failed.
func (c *Conn) awaitREP(ctx context.Context) (*Conn, error) {
	a := c.a
	select {
	case <-c.ready:
	case <-ctx.Done():
		a.mu.Lock()
		if c.state == stREQSent || c.state == stMRAReqRcvd {
			// The IB CM rejects with "timeout" and its GUID when the
			// application gives up on a REQ.
			rej := &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
				MessageRejected: mad.RejectedOther, Reason: mad.RejTimeout, RejectInfoLength: 8}
			binary.BigEndian.PutUint64(rej.ARI[:], a.guid)
			a.send(c.peer, c.tid, rej)
			a.toErr(c)
			c.fail(fmt.Errorf("cm: connect to %v: %w", c.remote, ctx.Err()))
			a.forget(c)
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	err := c.hsErr
	a.mu.Unlock()
	if err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// depth is a responder resources or initiator depth value, 0 meaning 1.
func depth(v uint8) uint8 {
	if v == 0 {
		return 1
	}
	return v
}

// count is a retry count: 0 means 7, and at most 7.
func count(v uint8) uint8 {
	if v == 0 || v > maxCount {
		return maxCount
	}
	return v
}

// setupQP takes the caller's QP or creates one, and moves it to INIT with
// the remote rights rdma_cm gives: RDMA WRITE always, READ and atomics
// when this side serves them.
func (c *Conn) setupQP(p *Params, reads bool) error {
	a := c.a
	if p.ManualQP {
		if t := p.QP.Type(); t != verbs.RC {
			return fmt.Errorf("cm: %w: a %v QP (rdma_cm's TCP port space connects RC QPs)", verbs.ErrInvalidAttr, t)
		}
		c.qp = p.QP
		return nil
	}
	if p.QP != nil {
		c.qp = p.QP
	} else {
		o := &c.own
		var err error
		pd := p.PD
		if pd == nil {
			if pd, err = a.dev.AllocPD(); err != nil {
				return fmt.Errorf("cm: %w", err)
			}
			o.pd = pd
		}
		capa := p.Cap
		if capa.MaxSendWR == 0 && capa.MaxRecvWR == 0 {
			capa = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		}
		scq, rcq := p.SendCQ, p.RecvCQ
		if scq == nil && rcq == nil {
			if scq, err = a.dev.CreateCQ(int(capa.MaxSendWR + capa.MaxRecvWR)); err != nil {
				c.release()
				return fmt.Errorf("cm: %w", err)
			}
			rcq, o.scq, o.rcq, o.shared = scq, scq, scq, true
		}
		if scq == nil {
			if scq, err = a.dev.CreateCQ(int(capa.MaxSendWR)); err != nil {
				c.release()
				return fmt.Errorf("cm: %w", err)
			}
			o.scq = scq
		}
		if rcq == nil {
			if rcq, err = a.dev.CreateCQ(int(capa.MaxRecvWR)); err != nil {
				c.release()
				return fmt.Errorf("cm: %w", err)
			}
			o.rcq = rcq
		}
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: scq, RecvCQ: rcq, Cap: capa})
		if err != nil {
			c.release()
			return fmt.Errorf("cm: %w", err)
		}
		c.qp, o.qp = q, q
	}
	if t := c.qp.Type(); t != verbs.RC {
		c.release()
		return fmt.Errorf("cm: %w: a %v QP (rdma_cm's TCP port space connects RC QPs)", verbs.ErrInvalidAttr, t)
	}
	if err := c.initQP(reads); err != nil {
		c.release()
		return err
	}
	return nil
}

// initQP moves the QP from RESET (or INIT) to INIT with rdma_cm's remote
// rights.
func (c *Conn) initQP(reads bool) error {
	st, err := c.qp.Query()
	if err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	if st.State != verbs.StateReset && st.State != verbs.StateInit {
		return fmt.Errorf("%w: QP %d is %v", ErrQPState, c.qp.QPN(), st.State)
	}
	i := ConnInfo{}
	if reads {
		i.ResponderResources = 1
	}
	a, mask, _ := i.QPAttr(verbs.StateInit)
	if err := c.qp.Modify(&a, mask); err != nil {
		return fmt.Errorf("cm: QP %d to INIT: %w", c.qp.QPN(), err)
	}
	return nil
}

// setPath records the path to the peer the QP takes (c.info.AH), and
// the QP's RNR timer.
func (c *Conn) setPath(path *mad.Path) {
	c.info.AH = verbs.AHAttr{DGID: c.peerGID, FlowLabel: path.FlowLabel, HopLimit: path.HopLimit,
		TrafficClass: path.TrafficClass, SL: path.SL, Port: 1}
	c.info.MinRNRTimer = c.params.MinRNRTimer
}

// toRTS moves the QP from INIT to RTR and RTS with what the connection
// negotiated (c.info), towards the peer's GID on path. A ManualQP QP is
// the caller's to move: toRTS only records the path.
func (c *Conn) toRTS(path *mad.Path) error {
	c.setPath(path)
	if c.params.ManualQP {
		return nil
	}
	i := &c.info
	if err := c.initQP(i.ResponderResources > 0); err != nil {
		return err
	}
	rtr, mask, _ := i.QPAttr(verbs.StateRTR)
	if err := c.qp.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("cm: QP %d to RTR: %w", c.qp.QPN(), err)
	}
	rts, mask, _ := i.QPAttr(verbs.StateRTS)
	if err := c.qp.Modify(&rts, mask); err != nil {
		return fmt.Errorf("cm: QP %d to RTS: %w", c.qp.QPN(), err)
	}
	c.a.log.Debug("cm: QP ready", "qpn", i.LocalQPN, "remote_qpn", i.RemoteQPN, "sq_psn", i.SendPSN,
		"rq_psn", i.RecvPSN, "mtu", i.PathMTU)
	return nil
}

// toErr moves a connection's QP to ERR, as rdma_cm does on disconnect,
// rejection and timeout; the caller holds a.mu. Until the REP is sent the
// passive side's QP belongs to Accept, which does it.
func (a *Agent) toErr(c *Conn) {
	if c.state == stREQRcvd || c.state == stMRAReqSent || c.params.ManualQP {
		return // Accept's, or the caller's
	}
	a.qpToErr(c.qp)
}

func (a *Agent) qpToErr(q verbs.QP) {
	if q == nil {
		return
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil &&
		!errors.Is(err, verbs.ErrDestroyed) {
		a.log.Debug("cm: QP to ERR", "qpn", q.QPN(), "err", err)
	}
}

// startExchange records b as the message to send again every d until
// answered, and arms the timer; the caller holds a.mu.
func (a *Agent) startExchange(c *Conn, b []byte, d time.Duration) {
	c.pending = append(c.pending[:0], b...)
	c.timeout, c.tries = d, 0
	a.arm(c, d)
}

// arm (re)starts the connection's timer; the caller holds a.mu. While
// the active side waits for the answer to its REQ, the timer fires by
// Config.ConnectTimeout at the latest.
func (a *Agent) arm(c *Conn, d time.Duration) {
	if c.dialing() {
		d = max(min(d, c.deadline.Sub(a.clk.Now())), 0)
	}
	a.disarm(c)
	gen := c.gen
	c.timer = a.clk.AfterFunc(d, func() { a.fire(c, gen) })
}

// disarm stops the connection's timer; the caller holds a.mu.
func (a *Agent) disarm(c *Conn) {
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// fire runs when a connection's timer expires: it sends the pending
// message again, gives up after the last retry, or ends the time-wait.
func (a *Agent) fire(c *Conn, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || c.gen != gen {
		return
	}
	c.timer = nil
	switch c.state {
	case stTimeWait:
		a.forget(c)
		return
	case stREQSent, stMRAReqRcvd, stREPSent, stMRARepRcvd, stDREQSent:
	default:
		return
	}
	late := c.dialing() && !a.clk.Now().Before(c.deadline)
	if c.tries < c.maxTries && !late {
		c.tries++
		a.ctr.retransmits.Add(1)
		a.log.Debug("cm: retransmit", "local_id", c.info.LocalCommID, "state", c.state, "try", c.tries)
		a.sendRaw(c.peer, c.pending)
		a.arm(c, c.timeout)
		return
	}
	a.ctr.timeouts.Add(1)
	a.log.Debug("cm: timeout", "local_id", c.info.LocalCommID, "state", c.state)
	switch {
	case c.state == stDREQSent:
		c.closeDone(fmt.Errorf("cm: disconnect from %v: %w", c.remote, inner{ErrTimeout}))
		a.timeWait(c)
	case c.active:
		a.toErr(c)
		c.fail(fmt.Errorf("cm: connect to %v: %w: %d REQs in %v; check that the peer is up and listens on that port, "+
			"and that nothing drops UDP port 4791 on the way", c.remote, inner{ErrTimeout}, c.tries+1,
			a.clk.Now().Sub(c.deadline.Add(-a.connectTimeout)).Round(time.Millisecond)))
		a.forget(c)
	default:
		a.toErr(c)
		c.fail(fmt.Errorf("cm: accept from %v: %w", c.remote, inner{ErrTimeout}))
		a.forget(c)
	}
}

// dialing reports whether c waits for any answer to its REQ, a wait
// Config.ConnectTimeout bounds; after an MRA the peer is known to be
// there, and the CM's retries bound the wait.
func (c *Conn) dialing() bool {
	return c.active && c.state == stREQSent
}

// timeWait keeps an ended connection's IDs for a while, to answer late
// duplicates; the caller holds a.mu.
func (a *Agent) timeWait(c *Conn) {
	c.state = stTimeWait
	c.pending = nil
	delete(a.qpns, remoteQP{c.peerGID, c.info.RemoteQPN})
	// The path's ACK timeout, which a peer's REQ may make hours long:
	// the agent's response timeout bounds it.
	a.arm(c, min(cmTimeout(c.pathACK), cmTimeout(a.respTimeout)))
}

// forget drops a connection from the agent's tables; the caller holds
// a.mu.
func (a *Agent) forget(c *Conn) {
	if c.state == stGone {
		return
	}
	a.disarm(c)
	c.state = stGone
	c.pending = nil
	if a.conns[c.info.LocalCommID] == c {
		delete(a.conns, c.info.LocalCommID)
	}
	if k := (remoteID{c.info.RemoteCommID, c.info.RemoteCAGUID}); a.remote[k] == c {
		delete(a.remote, k)
	}
	if k := (remoteQP{c.peerGID, c.info.RemoteQPN}); a.qpns[k] == c {
		delete(a.qpns, k)
	}
	if c.active {
		if p := c.local.Port(); a.ports[p] > 1 {
			a.ports[p]--
		} else {
			delete(a.ports, p)
		}
	}
}

// sendDREQ starts the disconnect exchange of an established connection;
// the caller holds a.mu.
func (a *Agent) sendDREQ(c *Conn) {
	c.state = stDREQSent
	a.log.Debug("cm: send DREQ", "local_id", c.info.LocalCommID, "remote_id", c.info.RemoteCommID)
	dreq := &mad.DREQ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID, RemoteQPN: c.info.RemoteQPN}
	c.maxTries = int(a.maxRetries)
	if !c.active && c.req != nil {
		c.maxTries = int(c.req.MaxCMRetries)
	}
	a.startExchange(c, a.send(c.peer, formTID(a.agentID, c.info.LocalCommID), dreq), c.timeout)
}

// shutdownLocked ends a connection because the agent closes; the caller
// holds a.mu.
func (a *Agent) shutdownLocked(c *Conn) {
	a.disarm(c)
	switch c.state {
	case stREQRcvd, stMRAReqSent, stREPSent, stMRARepRcvd, stREPRcvd:
		msg := mad.RejectedREQ
		switch c.state {
		case stREPSent, stMRARepRcvd:
			msg = mad.RejectedOther
		case stREPRcvd:
			msg = mad.RejectedREP
		}
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: msg, Reason: mad.RejConsumerDefined})
		a.toErr(c)
	case stEstablished:
		a.toErr(c)
		a.send(c.peer, formTID(a.agentID, c.info.LocalCommID), &mad.DREQ{LocalCommID: c.info.LocalCommID,
			RemoteCommID: c.info.RemoteCommID, RemoteQPN: c.info.RemoteQPN})
	case stREQSent, stMRAReqRcvd:
		a.toErr(c)
	}
	c.fail(ErrClosed)
	c.state = stGone
}

// onREP handles a REP: the passive side accepted the active side's REQ.
func (a *Agent) onREP(src netip.Addr, m *mad.REP) {
	c := a.conns[m.RemoteCommID]
	if c == nil || !c.active {
		a.ctr.unmatched.Add(1)
		return
	}
	switch c.state {
	case stREQSent, stMRAReqRcvd:
	case stEstablished, stDREQSent, stTimeWait:
		if m.LocalCommID == c.info.RemoteCommID && c.state == stEstablished {
			// The RTU was lost: send it again.
			a.ctr.duplicates.Add(1)
			a.send(c.peer, c.tid, &mad.RTU{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID})
		}
		return
	default:
		return
	}
	a.disarm(c)
	if old := a.qpns[remoteQP{c.peerGID, m.LocalQPN}]; old != nil && old != c {
		// The peer's QP still has a connection here: it is stale.
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: m.LocalCommID,
			MessageRejected: mad.RejectedREP, Reason: mad.RejStaleConn})
		a.toErr(c)
		c.fail(fmt.Errorf("cm: connect to %v: %w", c.remote, inner{ErrStale}))
		a.forget(c)
		a.staleLocked(old)
		return
	}
	i := &c.info
	i.RemoteCommID, i.RemoteQPN, i.RemoteCAGUID = m.LocalCommID, m.LocalQPN, m.LocalCAGUID
	i.SendPSN = m.StartingPSN
	i.InitiatorDepth = min(i.InitiatorDepth, m.ResponderResources)
	i.ResponderResources = min(i.ResponderResources, m.InitiatorDepth)
	i.RNRRetryCount = min(m.RNRRetryCount, maxCount)
	c.pathACK = ackTimeout(m.TargetACKDelay, c.pathACK-1)
	i.LocalACKTimeout = c.qpACKTimeout()
	c.peerData = append([]byte(nil), m.PrivateData[:]...)
	path := mad.Path{FlowLabel: flowLabel(c.local.Port(), c.remote.Port()), HopLimit: hopLimit}
	if c.params.ManualQP {
		// The caller moves its QP and sends the RTU (Establish).
		c.setPath(&path)
		a.remote[remoteID{i.RemoteCommID, i.RemoteCAGUID}] = c
		a.qpns[remoteQP{c.peerGID, i.RemoteQPN}] = c
		c.state = stREPRcvd
		a.log.Debug("cm: REP received", "local_id", i.LocalCommID, "remote_id", i.RemoteCommID, "qpn", i.LocalQPN)
		c.markReady(nil)
		return
	}
	if err := c.toRTS(&path); err != nil {
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID,
			MessageRejected: mad.RejectedREP, Reason: mad.RejConsumerDefined})
		a.toErr(c)
		c.fail(err)
		a.forget(c)
		return
	}
	a.remote[remoteID{i.RemoteCommID, i.RemoteCAGUID}] = c
	a.qpns[remoteQP{c.peerGID, i.RemoteQPN}] = c
	a.send(c.peer, c.tid, &mad.RTU{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID})
	c.state = stEstablished
	a.log.Debug("cm: established", "side", "active", "local_id", i.LocalCommID, "remote_id", i.RemoteCommID,
		"qpn", i.LocalQPN, "psn", i.SendPSN)
	a.watchQP(c)
	c.markReady(nil)
}

// onRTU handles an RTU: the active side is ready, so is the connection.
func (a *Agent) onRTU(m *mad.RTU) {
	c := a.conns[m.RemoteCommID]
	if c == nil || c.active || c.info.RemoteCommID != m.LocalCommID {
		a.ctr.unmatched.Add(1)
		return
	}
	if c.state != stREPSent && c.state != stMRARepRcvd {
		return
	}
	a.establishPassive(c)
}

// establishPassive marks a passive connection connected; the caller holds
// a.mu.
func (a *Agent) establishPassive(c *Conn) {
	a.disarm(c)
	c.pending = nil
	c.state = stEstablished
	a.log.Debug("cm: established", "side", "passive", "local_id", c.info.LocalCommID,
		"remote_id", c.info.RemoteCommID, "qpn", c.info.LocalQPN, "psn", c.info.SendPSN)
	if !c.params.ManualQP {
		a.watchQP(c) // a caller's manual QP is its own business, as the kernel never sees it
	}
	c.markReady(nil)
}

// onMRA handles an MRA: the peer got our REQ or REP and needs more time.
func (a *Agent) onMRA(m *mad.MRA) {
	c := a.conns[m.RemoteCommID]
	if c == nil {
		a.ctr.unmatched.Add(1)
		return
	}
	switch {
	case m.MessageMRAed == mad.MRAedREQ && (c.state == stREQSent || c.state == stMRAReqRcvd):
		c.state = stMRAReqRcvd
	case m.MessageMRAed == mad.MRAedREP && (c.state == stREPSent || c.state == stMRARepRcvd):
		c.state = stMRARepRcvd
	default:
		return
	}
	// Wait the service time the peer asked for, then retry as before.
	a.arm(c, cmTimeout(m.ServiceTimeout)+cmTimeout(c.pathACK))
}

// onREJ handles a REJ of our REQ or REP, or of an established connection.
func (a *Agent) onREJ(m *mad.REJ) {
	var c *Conn
	switch {
	case m.RemoteCommID != 0:
		c = a.conns[m.RemoteCommID]
	case m.Reason == mad.RejTimeout:
		// The active side gave up on its REQ before learning our ID; its
		// GUID is in the ARI.
		c = a.remote[remoteID{m.LocalCommID, ariGUID(m.ARIBytes())}]
	}
	if c == nil || c.info.RemoteCommID != 0 && m.LocalCommID != 0 && c.info.RemoteCommID != m.LocalCommID {
		a.ctr.unmatched.Add(1)
		return
	}
	rej := &RejectError{Remote: c.remote, Reason: m.Reason, Msg: m.MessageRejected,
		ARI: append([]byte(nil), m.ARIBytes()...), PrivateData: append([]byte(nil), m.PrivateData[:]...)}
	a.log.Debug("cm: REJ received", "local_id", c.info.LocalCommID, "state", c.state, "reason", m.Reason)
	switch c.state {
	case stREQSent, stMRAReqRcvd, stREQRcvd, stMRAReqSent, stREPSent, stMRARepRcvd, stREPRcvd:
		a.toErr(c)
		c.fail(rej)
		a.forget(c)
	case stEstablished:
		a.toErr(c)
		c.endLocked(fmt.Errorf("%w: %w", ErrDisconnected, rej))
		c.closeDone(nil)
		a.timeWait(c)
	case stDREQSent:
		c.closeDone(nil)
		a.timeWait(c)
	}
}

// onDREQ handles a DREQ: the peer disconnects.
func (a *Agent) onDREQ(src netip.Addr, h *mad.Header, m *mad.DREQ) {
	c := a.conns[m.RemoteCommID]
	if c == nil || c.info.RemoteCommID != m.LocalCommID {
		// Unknown connection: answer anyway, as the IB CM does, so that
		// the peer stops asking.
		a.ctr.unmatched.Add(1)
		a.send(src, h.TID, &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	if m.RemoteQPN != c.info.LocalQPN {
		a.ctr.unmatched.Add(1)
		return
	}
	switch c.state {
	case stREPSent, stMRARepRcvd:
		// The RTU was lost but the active side is done already.
		a.establishPassive(c)
		fallthrough
	case stEstablished, stDREQSent:
		c.tid = h.TID
		a.disarm(c)
		a.toErr(c)
		c.endLocked(ErrDisconnected)
		c.closeDone(nil)
		a.log.Debug("cm: DREQ received", "local_id", c.info.LocalCommID, "remote_id", c.info.RemoteCommID)
		a.send(c.peer, c.tid, &mad.DREP{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID})
		a.timeWait(c)
	case stTimeWait:
		a.ctr.duplicates.Add(1)
		a.send(c.peer, h.TID, &mad.DREP{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID})
	}
}

// onDREP handles a DREP: the peer acknowledged our DREQ.
func (a *Agent) onDREP(m *mad.DREP) {
	c := a.conns[m.RemoteCommID]
	if c == nil || c.info.RemoteCommID != m.LocalCommID {
		a.ctr.unmatched.Add(1)
		return
	}
	if c.state != stDREQSent {
		return
	}
	a.log.Debug("cm: DREP received", "local_id", c.info.LocalCommID)
	c.closeDone(nil)
	a.timeWait(c)
}

// staleLocked tears down a connection whose peer QP connected again: the
// old one gets a DREQ and ends with ErrStale; the caller holds a.mu.
func (a *Agent) staleLocked(c *Conn) {
	if c.state != stEstablished {
		return
	}
	a.toErr(c)
	c.endLocked(ErrStale)
	a.sendDREQ(c)
}
