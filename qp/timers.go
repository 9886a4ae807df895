package qp

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// armTimer (re)starts the retransmission timer while packets are
// unacknowledged.
func (q *QP) armTimer() {
	if q.typ != verbs.RC || q.attr.Timeout == 0 || q.comp.rnrWait {
		return
	}
	if q.comp.psn == q.req.psn {
		if q.comp.timerArmed {
			q.timer.Stop()
			q.comp.timerArmed = false
		}
		return
	}
	d := bth.ACKTimeout(q.attr.Timeout)
	q.comp.deadline = q.dev.clk.Now().Add(d)
	if q.timer == nil {
		q.timer = q.dev.clk.AfterFunc(d, q.onTimeout)
	} else {
		q.timer.Reset(d)
	}
	q.comp.timerArmed = true
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
	if q.destroyed || !q.comp.timerArmed || q.state != verbs.StateRTS && q.state != verbs.StateSQD {
		return
	}
	if now := q.dev.clk.Now(); now.Before(q.comp.deadline) {
		// Reset raced with this call; wait for the rest.
		q.timer.Reset(q.comp.deadline.Sub(now))
		return
	}
	q.comp.timerArmed = false
	if q.comp.psn == q.req.psn {
		return
	}
	q.dev.log.Debug("retransmit timeout", "qpn", q.qpn, "psn", q.comp.psn)
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
	if q.comp.timerArmed {
		q.timer.Stop()
		q.comp.timerArmed = false
	}
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
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	q.comp.timerArmed = false
	q.comp.rnrWait = false
}
