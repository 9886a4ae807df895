package qp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/clock"
)

// Deferred ACKs, in busy-poll mode.
//
// A program that spins on its CQ (or its memory, through Progress) runs
// the receive path itself. The responder's coalesced ACK for what such a
// poll received does not go out at once: it waits for the thread's next
// step, which is typically to post the answer (perftest's latency tests,
// a request/response server). The ACK then leaves with the answer in one
// system call instead of two, which takes a whole send off the round
// trip. The next poll sends whatever is still waiting, and a timer bounds
// the wait for a thread that stops polling.

// ackDeferMax bounds how long a deferred ACK waits: far below any ACK
// timeout a requester uses (rxe's minimum is milliseconds).
const ackDeferMax = 50 * time.Microsecond

// ackDeferrer holds the QPs whose ACK waits.
type ackDeferrer struct {
	waiting atomic.Bool // qps is not empty; read without mu on every poll
	mu      sync.Mutex
	qps     []*QP
	timer   clock.Timer
	armed   bool
}

// deferAck leaves q's pending ACK for the polling thread's next step. The
// caller holds q.mu and has q.resp.ackPending set.
func (d *Device) deferAck(q *QP) {
	if q.resp.ackDeferred {
		return
	}
	q.resp.ackDeferred = true
	a := &d.acks
	a.mu.Lock()
	a.qps = append(a.qps, q)
	a.waiting.Store(true)
	if !a.armed {
		a.armed = true
		if a.timer == nil {
			a.timer = d.clk.AfterFunc(ackDeferMax, d.sendDeferredAcks)
		} else {
			a.timer.Reset(ackDeferMax)
		}
	}
	a.mu.Unlock()
}

// sendDeferredAcks sends the ACKs that still wait.
func (d *Device) sendDeferredAcks() {
	a := &d.acks
	a.mu.Lock()
	if len(a.qps) == 0 {
		a.mu.Unlock()
		return
	}
	qps := a.qps
	a.qps = nil
	a.waiting.Store(false)
	if a.armed {
		a.armed = false
		a.timer.Stop()
	}
	a.mu.Unlock()
	b := d.getBatch()
	for _, q := range qps {
		// Each ACK leaves before its QP's lock is let go: a post that
		// takes the lock next must not send the answer ahead of it.
		q.mu.Lock()
		q.resp.ackDeferred = false
		if !q.destroyed {
			q.sendPendingAck(b)
			b.flush()
		}
		q.mu.Unlock()
	}
	// The slice goes back for the next round unless one came meanwhile.
	a.mu.Lock()
	if a.qps == nil {
		a.qps = qps[:0]
	}
	a.mu.Unlock()
	d.putBatch(b)
}

// polled runs before a poll receives: the thread is back, so what it left
// waiting goes out now.
func (d *Device) polled() {
	if d.acks.waiting.Load() {
		d.sendDeferredAcks()
	}
}
