package qp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/verbs"
)

// Turns: many RC QPs sending at once take the device's window in turns.
//
// The QPs with packets in flight share SharedUnackedPSNs (window), so
// that many streams overrun a receiver no more than one does. Shared
// among a thousand QPs that is a packet or two each: every QP sends one
// packet, asks for its ACK and waits for it, an ACK for every packet
// where one QP gets one for every few dozen (measured: 1,024 QPs drew
// 1.00 ACK per data packet, one QP 0.03, and moved half the bytes).
//
// So a QP sends in turns of turnPSNs PSNs, and at most
// SharedUnackedPSNs/turnPSNs QPs (at least one) have a turn at once; the
// others wait in line (admission.queue) and are started, in order, as
// turns end. A turn ends where its last PSN is acknowledged, if others
// wait; if none does, it goes on. The last packet of every turn asks for
// an ACK, so that a QP whose turn is over always hears it. A QP that
// has nothing left to send, leaves RTS, waits out an RNR NAK or is
// destroyed ends its turn once nothing of it is in flight.
//
// A QP whose peer stops answering keeps its turn until the
// retransmission timer gives up on it. So that QPs stalled in that way
// cannot stop the device's other QPs, a line that has not moved for
// admitWait starts its first QP all the same, beyond the bound.
const (
	turnPSNs  = 64
	admitWait = time.Millisecond
)

// admission is the device's line of QPs waiting for a turn.
type admission struct {
	mu      sync.Mutex
	max     int    // turns at once
	turns   int    // turns under way (may exceed max: admitWait)
	queue   qpRing // waiting, in order; QP.admQueued
	kicks   qpRing // given a turn, to be started (kickTurns)
	moved   bool   // a turn was given since the guard last looked
	guard   clock.Timer
	guarded bool
	waiting atomic.Int32 // len(queue), read without mu
	kicking atomic.Bool  // kicks is not empty
}

// enter gives q a turn if one is free and no QP waits, or puts q in line.
// The caller holds q.mu.
func (d *Device) enter(q *QP) bool {
	a := &d.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	if q.admGiven {
		return true // given from the line (kickTurns)
	}
	if a.turns < a.max && a.queue.n == 0 {
		a.turns++
		q.admGiven = true
		return true
	}
	if !q.admQueued {
		q.admQueued = true
		a.queue.push(q)
		a.waiting.Store(int32(a.queue.n))
		d.armAdmitGuard()
	}
	return false
}

// leave ends q's turn, or gives back one given to it that it could not
// use; q waits in line again if it has more to send (again). The caller
// holds q.mu.
func (d *Device) leave(q *QP, again bool) {
	a := &d.adm
	a.mu.Lock()
	if q.admGiven {
		q.admGiven = false
		a.turns--
	}
	if again && !q.admQueued {
		q.admQueued = true
		a.queue.push(q)
	}
	for a.turns < a.max && a.queue.n > 0 {
		d.giveTurn()
	}
	a.waiting.Store(int32(a.queue.n))
	a.mu.Unlock()
}

// giveTurn gives the first QP in line a turn; kickTurns starts it. The
// caller holds adm.mu.
func (d *Device) giveTurn() {
	a := &d.adm
	q := a.queue.pop()
	q.admQueued, q.admGiven = false, true
	a.turns++
	a.moved = true
	a.kicks.push(q)
	a.kicking.Store(true)
}

// armAdmitGuard starts the guard that keeps a stalled line moving. The
// caller holds adm.mu.
func (d *Device) armAdmitGuard() {
	a := &d.adm
	if a.guarded {
		return
	}
	a.guarded, a.moved = true, false
	if a.guard == nil {
		a.guard = d.clk.AfterFunc(admitWait, d.admitGuard)
	} else {
		a.guard.Reset(admitWait)
	}
}

// admitGuard runs admitWait after the line last moved or was looked at:
// a line that has not moved starts its first QP beyond the bound.
func (d *Device) admitGuard() {
	a := &d.adm
	a.mu.Lock()
	a.guarded = false
	if a.queue.n > 0 {
		if !a.moved {
			d.giveTurn()
			a.waiting.Store(int32(a.queue.n))
		}
		if a.queue.n > 0 {
			d.armAdmitGuard()
		}
	}
	a.mu.Unlock()
	d.kickTurns()
}

// kickTurns starts the QPs given a turn from the line. It runs after
// whatever ended turns has let go of its QPs' locks.
func (d *Device) kickTurns() {
	a := &d.adm
	if !a.kicking.Load() {
		return
	}
	b := d.getBatch()
	defer d.putBatch(b)
	for {
		a.mu.Lock()
		if a.kicks.n == 0 {
			a.kicking.Store(false)
			a.mu.Unlock()
			return
		}
		q := a.kicks.pop()
		a.mu.Unlock()
		q.mu.Lock()
		if !q.destroyed {
			q.request(b)
		}
		b.flush()
		if !q.admTurn {
			d.leave(q, false) // it cannot use the turn (its state, or an RNR wait)
		}
		q.updateActive()
		q.mu.Unlock()
	}
}

// qpRing is a FIFO of QPs that keeps its memory.
type qpRing struct {
	buf     []*QP
	head, n int
}

func (r *qpRing) push(q *QP) {
	if r.n == len(r.buf) {
		buf := make([]*QP, max(16, 2*len(r.buf)))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = q
	r.n++
}

func (r *qpRing) pop() *QP {
	q := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return q
}

// turnOver reports whether q's next request (or packet) would start
// after the end of its turn while other QPs wait for one; with none
// waiting, a new turn starts where the old one ends. A request that
// starts within the turn may end after it (a READ of more PSNs than a
// turn has must go), and what is sent again after a loss is not held
// back: only new PSNs take turns.
func (q *QP) turnOver() bool {
	if !q.admTurn || q.req.psn.LessThan(q.req.maxSent) {
		return false
	}
	for !q.req.psn.LessThan(q.req.turnEnd) {
		if q.dev.adm.waiting.Load() > 0 {
			return true
		}
		q.req.turnEnd = q.req.turnEnd.Add(turnPSNs)
	}
	return false
}

// turnLast reports whether psn is the last of q's turn: it asks for an
// ACK, and the count towards the next AckReq (ackReq) starts over.
func (q *QP) turnLast(psn bth.PSN) bool {
	if q.admTurn && psn.Next() == q.req.turnEnd {
		q.req.sinceAckReq = 0
		return true
	}
	return false
}

// startTurn takes a turn for q if it has requests to send and none yet,
// and reports whether q may send. The caller holds q.mu.
func (q *QP) startTurn() bool {
	if q.typ != verbs.RC || q.sq.next == q.sq.tail || q.admTurn {
		return true
	}
	if !q.dev.enter(q) {
		return false
	}
	q.admTurn = true
	q.req.turnEnd = q.req.psn.Add(turnPSNs)
	return true
}

// endTurn ends q's turn once nothing of it is in flight (out) and it has
// nothing it may send, or its turn is over (turnOver stopped it: others
// waited then). Such a QP goes back in line even if the line has emptied
// meanwhile, and so is started again at once: kept, its turn would have
// nothing in flight to start it again. The caller holds q.mu.
func (q *QP) endTurn(out uint32) {
	if !q.admTurn || out != 0 {
		return
	}
	more := !q.destroyed && q.state == verbs.StateRTS && q.sq.next != q.sq.tail && !q.comp.rnrWait
	if more && q.req.psn.LessThan(q.req.turnEnd) {
		return
	}
	q.admTurn = false
	q.dev.leave(q, more)
}
