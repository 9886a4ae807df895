package qp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// QP is a queue pair. Its methods are safe for concurrent use: one mutex
// covers the QP's requester, completer and responder, so packets of one QP
// are handled, and sent, in order.
type QP struct {
	dev    *Device
	qpn    uint32
	id     uint64 // the QP's number among all the device ever had (Device.qpIDs)
	typ    verbs.QPType
	pd     *mr.PD
	scq    *CQ
	rcq    *CQ
	srq    *SRQ
	sigAll bool
	cap    verbs.QPCap

	mu        sync.Mutex
	state     verbs.QPState
	attr      verbs.QPAttr
	dest      netip.Addr // the peer's address, from the address vector (RC, UC)
	sport     uint16     // UDP source port, chosen per QP as rxe does (see udpSourcePort)
	mtu       int        // path MTU in bytes
	destroyed bool
	commEst   bool
	recvSrc   RecvSource // receives posted elsewhere (recvsource.go), under mu
	// admTurn: the QP has a turn at sending (admit.go), under mu;
	// admQueued and admGiven: it waits in line, it was given a turn,
	// under the device's adm.mu.
	admTurn   bool
	admQueued bool
	admGiven  bool

	sq   sendQueue
	rq   recvQueue
	req  reqState
	comp compState
	resp respState
	cc   ccState // congestion control (cc.go)
	ctr  Counters

	timer    clock.Timer // retransmission
	rnrTimer clock.Timer
	exits    exitWatches // OnExit's (notify.go)
}

// CreateQP creates a queue pair in the PD, in the RESET state. Its CQs
// and SRQ must come from the same device.
func (p *PD) CreateQP(init *verbs.QPInitAttr) (verbs.QP, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	q, err := p.dev.createQP(p, init)
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (d *Device) createQP(p *PD, init *verbs.QPInitAttr) (*QP, error) {
	if init == nil {
		return nil, fmt.Errorf("%w: CreateQP needs a *QPInitAttr with the QP's type, CQs and sizes", verbs.ErrNil)
	}
	if d.closed.Load() {
		return nil, fmt.Errorf("%w: CreateQP after Close", verbs.ErrClosed)
	}
	pd := p.pd
	scq, err := d.initCQ(init.SendCQ, "send")
	if err != nil {
		return nil, err
	}
	rcq, err := d.initCQ(init.RecvCQ, "receive")
	if err != nil {
		return nil, err
	}
	srq, err := d.initSRQ(init.SRQ, pd)
	if err != nil {
		return nil, err
	}
	c := init.Cap
	if err := checkQPInit(init.Type, &c); err != nil {
		return nil, err
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 1
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else if c.MaxRecvWR == 0 {
		c.MaxRecvWR = 1
	}
	q := &QP{
		dev: d, id: d.qpIDs.Add(1), typ: init.Type, pd: pd, scq: scq, rcq: rcq, srq: srq,
		sigAll: init.SignalAll, cap: c,
		sq: sendQueue{max: uint64(c.MaxSendWR), maxSGE: int(c.MaxSendSGE)},
		rq: recvQueue{max: int(c.MaxRecvWR), maxSGE: int(c.MaxRecvSGE)},
	}
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if init.Type == verbs.GSI {
		if d.gsi != nil {
			return nil, fmt.Errorf("%w (QP 1; a cm agent makes one): destroy it first", verbs.ErrGSIExists)
		}
		q.qpn = 1
		d.gsi = q
	} else {
		n, err := d.allocQPN()
		if err != nil {
			return nil, err
		}
		q.qpn = n
	}
	if srq != nil {
		srq.mu.Lock()
		srq.users++
		srq.mu.Unlock()
	}
	q.sport = udpSourcePort(q.qpn, 0, 0)
	q.reset()
	pd.Hold()
	q.scq.users.Add(1)
	q.rcq.users.Add(1)
	d.qps.set(q.qpn, q)
	d.log.Debug("create QP", "qpn", q.qpn, "type", q.typ, "cap", c)
	return q, nil
}

// initCQ checks one of the CQs a QP is created with.
func (d *Device) initCQ(cq verbs.CQ, which string) (*CQ, error) {
	c, ok := cq.(*CQ)
	switch {
	case cq == nil || ok && !c.ok():
		return nil, fmt.Errorf("%w: the %s CQ is missing (QPInitAttr.%sCQ): use one from Device.CreateCQ",
			verbs.ErrNil, which, map[string]string{"send": "Send", "receive": "Recv"}[which])
	case !ok || c.dev != d:
		return nil, fmt.Errorf("%w: the %s CQ (%T) comes from another device: use one from this device's CreateCQ",
			verbs.ErrForeign, which, cq)
	}
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return nil, fmt.Errorf("%w: the %s CQ was destroyed", verbs.ErrDestroyed, which)
	}
	return c, nil
}

// initSRQ checks the SRQ a QP is created with, if any.
func (d *Device) initSRQ(srq verbs.SRQ, pd *mr.PD) (*SRQ, error) {
	if srq == nil {
		return nil, nil
	}
	s, ok := srq.(*SRQ)
	switch {
	case ok && !s.ok():
		return nil, fmt.Errorf("%w: QPInitAttr.SRQ is a nil *SRQ: use one from PD.CreateSRQ, or a nil interface "+
			"for a QP with its own receive queue", verbs.ErrNil)
	case !ok || s.dev != d || s.pd != pd:
		return nil, fmt.Errorf("%w: the SRQ (%T) comes from another device or PD: use one from this PD's CreateSRQ",
			verbs.ErrForeign, srq)
	}
	return s, nil
}

// checkQPInit checks a QP's type and sizes.
func checkQPInit(typ verbs.QPType, c *verbs.QPCap) error {
	switch typ {
	case verbs.RC, verbs.UC, verbs.UD, verbs.GSI:
	default:
		return fmt.Errorf("%w: QP type %v: want RC, UC, UD or GSI", verbs.ErrInvalidAttr, typ)
	}
	for _, f := range [...]struct {
		name   string
		v, max uint32
	}{
		{"MaxSendWR", c.MaxSendWR, MaxWR}, {"MaxRecvWR", c.MaxRecvWR, MaxWR}, {"MaxSendSGE", c.MaxSendSGE, MaxSGE},
		{"MaxRecvSGE", c.MaxRecvSGE, MaxSGE}, {"MaxInlineData", c.MaxInlineData, MaxInlineData},
	} {
		if f.v > f.max {
			return fmt.Errorf("%w: QPCap.%s %d: want at most %d", verbs.ErrInvalidCap, f.name, f.v, f.max)
		}
	}
	return nil
}

// ok reports whether q was made by CreateQP.
func (q *QP) ok() bool { return q != nil && q.dev.ok() }

// errNilQP is what the methods of a nil QP return.
var errNilQP = nilError("nil *QP", "PD.CreateQP")

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 {
	if !q.ok() {
		return 0
	}
	return q.qpn
}

// Type returns the QP's transport service.
func (q *QP) Type() verbs.QPType {
	if !q.ok() {
		return 0
	}
	return q.typ
}

// PD returns the QP's protection domain.
func (q *QP) PD() *mr.PD {
	if !q.ok() {
		return nil
	}
	return q.pd
}

// State returns the current state.
func (q *QP) State() verbs.QPState {
	if !q.ok() {
		return verbs.StateReset
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Query returns the QP's attributes.
func (q *QP) Query() (verbs.QPAttr, error) {
	if !q.ok() {
		return verbs.QPAttr{}, errNilQP
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return verbs.QPAttr{}, fmt.Errorf("%w: Query of QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	}
	a := q.attr
	a.State, a.CurState, a.Cap = q.state, q.state, q.cap
	return a, nil
}

// Counters returns the QP's counters.
func (q *QP) Counters() Counters {
	if !q.ok() {
		return Counters{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ctr
}

// Destroy removes the queue pair. Outstanding work requests are dropped
// without completions, as ibv_destroy_qp does.
func (q *QP) Destroy() error {
	if !q.ok() {
		return errNilQP
	}
	if err := q.dev.mcast.busy(q); err != nil { // mcast.go
		return err
	}
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return fmt.Errorf("%w: QP %d was destroyed already (by Destroy or the device's Close)", verbs.ErrDestroyed, q.qpn)
	}
	if q.resp.ackPending {
		// A deferred ACK (busy-poll mode) still answers what came.
		b := q.dev.getBatch()
		q.sendPendingAck(b)
		b.flush()
		q.dev.putBatch(b)
	}
	q.destroyed = true
	q.exited(Exit{Destroyed: true})
	q.updateActive()
	q.stopTimers()
	ctr := q.ctr
	ctr.clearModes() // a destroyed QP runs no mode
	q.mu.Unlock()
	d := q.dev
	d.kickTurns()
	d.qpMu.Lock()
	d.qps.set(q.qpn, nil)
	if d.gsi == q {
		d.gsi = nil
	}
	d.retired.Add(&ctr)
	d.qpMu.Unlock()
	d.mcast.dropQP(q) // an attach that came while Destroy ran
	if q.srq != nil {
		q.srq.mu.Lock()
		q.srq.users--
		q.srq.mu.Unlock()
	}
	q.scq.users.Add(-1)
	q.rcq.users.Add(-1)
	q.pd.Drop()
	d.log.Debug("destroy QP", "qpn", q.qpn)
	return nil
}

// Modify changes the QP's attributes and state, with the rules of
// ibv_modify_qp: each transition requires some attributes and allows
// others. A refused modification changes nothing.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	if !q.ok() {
		return errNilQP
	}
	if attr == nil {
		return fmt.Errorf("%w: Modify needs a *QPAttr with the values mask names", verbs.ErrNil)
	}
	b := q.dev.getBatch()
	defer q.dev.putBatch(b)
	defer q.dev.kickTurns() // after the unlock
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.updateActive()
	if q.destroyed {
		return fmt.Errorf("%w: Modify of QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	}
	if q.resp.ackPending {
		// A deferred ACK (busy-poll mode) answers what came in the
		// state the QP was in.
		q.sendPendingAck(b)
		b.flush()
	}
	cur := q.state
	if mask&verbs.AttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("%w: current state is %v, not %v", verbs.ErrInvalidAttr, cur, attr.CurState)
	}
	next := cur
	if mask&verbs.AttrState != 0 {
		next = attr.State
	}
	if next > verbs.StateErr {
		return fmt.Errorf("%w: state %v", verbs.ErrInvalidAttr, next)
	}
	if err := verbs.CheckModify(q.typ, cur, next, mask); err != nil {
		return err
	}
	if err := q.checkAttr(attr, mask); err != nil {
		return err
	}
	q.applyAttr(attr, mask)
	if next != cur || next == verbs.StateReset {
		q.dev.log.Debug("modify QP", "qpn", q.qpn, "from", cur, "to", next, "mask", mask)
	}
	switch next {
	case verbs.StateReset:
		q.reset()
	case verbs.StateRTR:
		if cur == verbs.StateInit {
			q.resp.psn = q.attr.RQPSN
			q.resp.ackedPSN = q.attr.RQPSN.Add(bth.PSNMask)
			q.resp.res = make([]readResource, q.attr.MaxDestRDAtomic)
			q.ccStart()
		}
	case verbs.StateRTS:
		if cur == verbs.StateRTR {
			q.req.psn = q.attr.SQPSN
			q.req.maxSent = q.attr.SQPSN
			q.req.cwnd = q.dev.maxUnacked
			q.ccWindow()
			q.comp.psn = q.attr.SQPSN
			q.comp.lastPSN = q.attr.SQPSN
			q.comp.retryLeft = q.attr.RetryCnt
			q.comp.rnrLeft = q.attr.RNRRetry
		}
	case verbs.StateSQD:
		q.req.drainNotify = attr.SQDrainNotify && mask&verbs.AttrEnSQDAsyncNotfy != 0
	}
	q.state = next
	switch {
	case next == verbs.StateErr && cur != verbs.StateErr:
		q.exited(Exit{Modified: true})
		q.flush(b)
	case next == verbs.StateRTS && cur != verbs.StateRTS:
		q.request(b)
	case next == verbs.StateSQD:
		q.checkDrained()
	}
	b.flush()
	return nil
}

func (q *QP) checkAttr(a *verbs.QPAttr, mask verbs.AttrMask) error {
	bad := func(what string, v any, want string) error {
		return fmt.Errorf("%w: %s %v: want %s", verbs.ErrInvalidAttr, what, v, want)
	}
	switch {
	case mask&verbs.AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU > q.dev.ActiveMTU()):
		return bad("path MTU", a.PathMTU, "MTU256 to the device's active MTU, "+q.dev.ActiveMTU().String())
	case mask&verbs.AttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout, "0 to 31")
	case mask&verbs.AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry count", a.RetryCnt, "0 to 7")
	case mask&verbs.AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("RNR retry", a.RNRRetry, "0 to 7 (7: without end)")
	case mask&verbs.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min RNR timer", a.MinRNRTimer, "0 to 31")
	case mask&verbs.AttrMaxQPRDAtomic != 0 && a.MaxRDAtomic > MaxRDAtomic:
		return bad("max RD atomic", a.MaxRDAtomic, "at most 128")
	case mask&verbs.AttrMaxDestRDAtomic != 0 && a.MaxDestRDAtomic > MaxRDAtomic:
		return bad("max dest RD atomic", a.MaxDestRDAtomic, "at most 128")
	case mask&verbs.AttrDestQPN != 0 && a.DestQPN > bth.MaxQPN:
		return bad("dest QPN", a.DestQPN, "24 bits")
	case mask&verbs.AttrRQPSN != 0 && !a.RQPSN.Valid():
		return bad("RQ PSN", a.RQPSN, "24 bits")
	case mask&verbs.AttrSQPSN != 0 && !a.SQPSN.Valid():
		return bad("SQ PSN", a.SQPSN, "24 bits")
	case mask&verbs.AttrPort != 0 && a.Port != 1:
		return bad("port", a.Port, "1, the device's one port")
	case mask&verbs.AttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return bad("P_Key index", a.PKeyIndex, "0, the default partition")
	case mask&verbs.AttrAccessFlags != 0 && a.Access&^(verbs.LocalWrite|verbs.RemoteAccess|verbs.FlushAccess) != 0:
		return bad("access flags", a.Access, "LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic, FlushGlobal and "+
			"FlushPersistent only")
	case mask&verbs.AttrAV != 0:
		return checkDest(a.AH.DGID, q.dev.srcFor(verbs.AddrFromGID(a.AH.DGID)), "QPAttr.AH.DGID")
	}
	return nil
}

func (q *QP) applyAttr(a *verbs.QPAttr, mask verbs.AttrMask) {
	t := &q.attr
	if mask&verbs.AttrAccessFlags != 0 {
		t.Access = a.Access
	}
	if mask&verbs.AttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if mask&verbs.AttrPort != 0 {
		t.Port = a.Port
	}
	if mask&verbs.AttrQKey != 0 {
		t.QKey = a.QKey
	}
	if mask&verbs.AttrAV != 0 {
		t.AH = a.AH
		q.dest = a.AH.DestAddr()
	}
	if mask&verbs.AttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
		q.mtu = a.PathMTU.Bytes()
	}
	if mask&verbs.AttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if mask&verbs.AttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
	}
	if mask&verbs.AttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if mask&verbs.AttrMaxQPRDAtomic != 0 {
		t.MaxRDAtomic = a.MaxRDAtomic
	}
	if mask&verbs.AttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if mask&verbs.AttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if mask&verbs.AttrMaxDestRDAtomic != 0 {
		t.MaxDestRDAtomic = a.MaxDestRDAtomic
		if q.resp.res != nil {
			q.resp.res = make([]readResource, a.MaxDestRDAtomic)
			q.resp.resNext = 0
		}
	}
	if mask&verbs.AttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	if mask&(verbs.AttrAV|verbs.AttrDestQPN) != 0 && (q.typ == verbs.RC || q.typ == verbs.UC) {
		q.sport = udpSourcePort(q.qpn, t.DestQPN, t.AH.FlowLabel)
	}
}

// udpSourcePort returns the UDP source port of a QP's packets, as Linux's
// rxe picks it (so that each connection is one flow for ECMP and RSS):
// for a connected QP, from the flow label of its address vector or, when
// that is 0, from the product of the two QP numbers (the kernel's
// rdma_get_udp_sport); for a datagram QP (dest 0), 0xC000 plus a 14-bit
// hash of the QPN (hash_32). Both land in 0xC000-0xFFFF.
func udpSourcePort(qpn, destQPN, flowLabel uint32) uint16 {
	if destQPN == 0 && flowLabel == 0 {
		return 0xC000 | uint16(qpn*0x61C88647>>18)
	}
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(qpn) * uint64(destQPN)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v & 0xFFFFF)
	}
	return 0xC000 | uint16(fl&0x3FFF^fl>>14)
}

// reset puts the QP back to its RESET condition: empty queues, no
// protocol state.
func (q *QP) reset() {
	q.stopTimers()
	q.state = verbs.StateReset
	q.sq.first, q.sq.next, q.sq.tail = 0, 0, 0
	q.rq.head, q.rq.n = 0, 0
	q.req = reqState{}
	q.comp = compState{}
	q.resp = respState{recv: q.resp.recv}
	q.commEst = false
	switch {
	case q.typ == verbs.UD || q.typ == verbs.GSI:
		// A datagram QP has no path MTU attribute: the port's active MTU
		// bounds its messages.
		q.attr.PathMTU = q.dev.ActiveMTU()
		q.mtu = q.attr.PathMTU.Bytes()
	case q.mtu == 0:
		q.mtu = bth.MTU256.Bytes() // rxe starts new QPs at 256 until modified
		q.attr.PathMTU = bth.MTU256
	}
	if q.typ == verbs.GSI {
		q.attr.QKey = bth.GSIQKey
	}
}

// toErr moves the QP to ERR after a fatal error and flushes its queues.
func (q *QP) toErr(b *txBatch) {
	if q.state == verbs.StateErr {
		return
	}
	q.dev.log.Debug("QP error", "qpn", q.qpn, "from", q.state)
	q.state = verbs.StateErr
	q.exited(Exit{Status: q.sendFailure()})
	q.flush(b)
}

// lostCompletion handles a completion of the QP that its CQ had no room
// for (the CQ raised EventCQErr). The QP can no longer promise that every
// work request completes, so it goes to ERR with EventQPFatal, as rxe's
// responder goes to ERR on a full receive CQ: what it had outstanding is
// flushed (lost too where the CQ still has no room), and everything posted
// once the CQ has room completes with WR_FLUSH_ERR.
func (q *QP) lostCompletion() {
	q.ctr.LostCompletions++
	if q.state == verbs.StateErr {
		return
	}
	q.dev.log.Debug("completion lost: CQ full", "qpn", q.qpn)
	q.dev.event(verbs.Event{Type: verbs.EventQPFatal, QPN: q.qpn})
	q.toErr(nil)
}

// pushRecv adds a receive completion to the receive CQ; a completion the
// CQ has no room for is lost, and the QP goes to ERR.
func (q *QP) pushRecv(wc *verbs.WC, solicited bool) bool {
	if q.rcq.push(wc, solicited) {
		return true
	}
	q.lostCompletion()
	return false
}

// flush completes every outstanding work request with WR_FLUSH_ERR (those
// already failed keep their status), in order.
func (q *QP) flush(*txBatch) {
	q.stopTimers()
	q.flushSend()
	q.flushRecv()
	if q.srq != nil {
		q.dev.event(verbs.Event{Type: verbs.EventLastWQEReached, QPN: q.qpn})
	}
}

func (q *QP) flushSend() {
	for s := q.sq.first; s != q.sq.tail; s++ {
		w := q.sq.at(s)
		if w.state != wqeDone {
			w.state, w.status = wqeDone, verbs.WRFlushErr
		}
	}
	q.sq.next = q.sq.tail
	q.retire()
}

// flushRecv completes the QP's receives with WR_FLUSH_ERR: first the one
// a message in progress took (from the RQ or the SRQ: it is the oldest),
// then those still in the RQ. Receives still in an SRQ stay there.
func (q *QP) flushRecv() {
	if q.resp.haveRecv {
		wc := verbs.WC{ID: q.resp.recv.id, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}
		q.pushRecv(&wc, false)
		q.resp.haveRecv = false
	}
	for w := q.rq.peek(); w != nil; w = q.rq.peek() {
		wc := verbs.WC{ID: w.id, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}
		q.pushRecv(&wc, false)
		q.rq.pop()
	}
}

// flushAndUnlock sends what the QP queued while handling a batch of
// packets, then releases the QP.
func (q *QP) flushAndUnlock(b *txBatch) {
	q.sendPendingAck(b)
	b.flush()
	q.updateActive()
	q.mu.Unlock()
	q.dev.kickTurns()
}

// LogValue makes a QP print as the minimal sample's QP dump in slog.
func (q *QP) LogValue() slog.Value {
	if !q.ok() {
		return slog.StringValue("<nil>")
	}
	q.mu.Lock()
	a := q.attr
	a.State = q.state
	q.mu.Unlock()
	return slog.GroupValue(
		slog.Uint64("qpn", uint64(q.qpn)), slog.String("state", a.State.String()),
		slog.Int("mtu", int(a.PathMTU)), slog.Uint64("sq_psn", uint64(a.SQPSN)),
		slog.Uint64("rq_psn", uint64(a.RQPSN)), slog.Int("max_rd_atomic", int(a.MaxRDAtomic)),
		slog.Int("max_dest_rd_atomic", int(a.MaxDestRDAtomic)), slog.Int("retry", int(a.RetryCnt)),
		slog.Int("rnr_retry", int(a.RNRRetry)), slog.Int("timeout", int(a.Timeout)))
}
