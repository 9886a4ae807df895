package qp

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// armTimer (re)starts the retransmission timer while packets are
// unacknowledged.
//
// Restarting it is only a new deadline: a Go timer already due no later
// than the new deadline is left alone, and when it fires, onTimeout finds
// the deadline ahead and sets it for the rest. An ACK, which moves the
// deadline on, so costs no timer operation (with many QPs each ACK's
// Reset was a tenth of the requester's time), and a QP that drains leaves
// its timer to fire once, idle, instead of stopping it.
func (q *QP) armTimer() {
	if q.typ != verbs.RC || q.attr.Timeout == 0 || q.comp.rnrWait {
		return
	}
	if q.comp.psn == q.req.psn {
		q.comp.timerArmed = false
		return
	}
	d := bth.ACKTimeout(q.attr.Timeout)
	now := q.dev.clk.Now()
	q.comp.deadline = now.Add(d)
	q.comp.timerArmed = true
	at := q.comp.deadline
	if p, ok := q.probeAt(d); ok {
		at = p // a loss probe comes first (probe.go)
	}
	if !q.comp.timerAt.IsZero() && !at.Before(q.comp.timerAt) {
		return
	}
	q.setTimer(at.Sub(now), at)
}

// setTimer schedules onTimeout d from now, at.
func (q *QP) setTimer(d time.Duration, at time.Time) {
	q.comp.timerAt = at
	if q.timer == nil {
		q.timer = q.dev.clk.AfterFunc(d, q.onTimeout)
	} else {
		q.timer.Reset(d)
	}
}

// armTimerIfIdle starts the timer if it is not running; sending more
// packets does not push the deadline of the oldest one back.
func (q *QP) armTimerIfIdle() {
	if !q.comp.timerArmed {
		q.armTimer()
	}
}

func (q *QP) onTimeout() {
	b := q.dev.getBatch()
	defer q.dev.putBatch(b)
	q.mu.Lock()
	defer q.flushAndUnlock(b)
	q.comp.timerAt = time.Time{}
	if q.destroyed || !q.comp.timerArmed || q.state != verbs.StateRTS && q.state != verbs.StateSQD {
		return
	}
	if now := q.dev.clk.Now(); now.Before(q.comp.deadline) {
		// The deadline moved on since the timer was set (armTimer), or a
		// loss probe is due first.
		if q.comp.psn == q.req.psn {
			// Nothing in flight: a rewind whose packets the pacer holds
			// (pace.go). Sending them arms the timer again.
			q.comp.timerArmed = false
			return
		}
		timeout := bth.ACKTimeout(q.attr.Timeout)
		if p, ok := q.probeAt(timeout); ok && !now.Before(p) {
			q.probe(b, now)
		}
		at := q.comp.deadline
		if p, ok := q.probeAt(timeout); ok && p.After(now) && p.Before(at) {
			at = p
		}
		q.setTimer(at.Sub(now), at)
		return
	}
	q.comp.timerArmed = false
	if q.comp.psn == q.req.psn {
		return
	}
	q.dev.log.Debug("retransmit timeout", "qpn", q.qpn, "psn", q.comp.psn)
	q.ctr.LocalACKTimeoutErr++
	q.ccTimeout(q.dev.clk.Now())
	q.retry(b, q.comp.psn)
}

func (q *QP) onRNRTimer() {
	b := q.dev.getBatch()
	defer q.dev.putBatch(b)
	q.mu.Lock()
	defer q.flushAndUnlock(b)
	if q.destroyed || !q.comp.rnrWait || q.state != verbs.StateRTS && q.state != verbs.StateSQD {
		return
	}
	if now := q.dev.clk.Now(); now.Before(q.comp.rnrDeadline) {
		q.rnrTimer.Reset(q.comp.rnrDeadline.Sub(now))
		return
	}
	q.comp.rnrWait = false
	q.rewind(q.comp.rnrPSN)
	q.request(b)
	q.armTimer()
}

func (q *QP) startRNRWait(psn bth.PSN, d time.Duration) {
	q.comp.timerArmed = false // a pending timer fires and does nothing
	q.comp.rnrWait, q.comp.rnrPSN = true, psn
	q.comp.rnrDeadline = q.dev.clk.Now().Add(d)
	if q.rnrTimer == nil {
		q.rnrTimer = q.dev.clk.AfterFunc(d, q.onRNRTimer)
	} else {
		q.rnrTimer.Reset(d)
	}
}

func (q *QP) stopTimers() {
	if q.timer != nil {
		q.timer.Stop()
	}
	q.stopPace()
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	q.comp.timerArmed, q.comp.timerAt = false, time.Time{}
	q.comp.rnrWait = false
}
