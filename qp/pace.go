package qp

import (
	"time"
)

// Pacing: a QP whose DCQCN reaction point is active (a CNP came, and its
// rate has not recovered since) sends its data packets at that rate, as a
// NIC's rate limiter does, and one whose settings give a line rate never
// sends faster than that: the requester asks paceHeld before each packet
// (windowFull) and charges paceSent after it. Unpaced, it costs a branch;
// paced, a clock read per packet.
//
// A QP the pacer holds back sets one deadline, and its pacing timer
// fires then and sends what is due. The timer is set once per QP and
// moved as timers.go moves the retransmission timer: a timer already due
// no later than the new deadline is left alone, and when it fires early
// it sets itself for the rest. An ACK that comes meanwhile also sends
// what the pacer lets go, so a QP with packets in flight is mostly
// clocked by its ACKs.

// paceBurst bounds what a paced QP idle for a while sends at once: the
// lateness of a software timer, so that a late one does not cost rate.
const paceBurst = 200 * time.Microsecond

// paceHeld reports whether the pacer holds the QP's next packet back now,
// and if so arms the pacing timer. The caller holds q.mu.
func (q *QP) paceHeld() bool {
	c := &q.cc
	if !c.rp.Active() && c.lineRate == 0 {
		return false
	}
	now := q.dev.clk.Now()
	c.now = now
	if _, ok := q.paceRate(now); !ok || c.pace.Ready(now) {
		return false // recovered meanwhile, or the packet is due
	}
	q.ctr.CCPaced++
	c.rp.Held()
	q.armPace(c.pace.Next(), now)
	return true
}

// paceSent charges a data packet of size bytes (BTH through ICRC) the QP
// just sent: to the pacer and the reaction point's byte counter, when
// paced, else only to the bytes the reaction point measures the rate
// from. The caller holds q.mu, and asked paceHeld for the packet.
func (q *QP) paceSent(size int) {
	c := &q.cc
	n := size + ipUDPLen(q)
	if !c.rp.Active() {
		c.rp.CountInactive(n)
		if c.lineRate > 0 {
			c.pace.Sent(n, c.lineRate, c.now, paceBurst)
		}
		return
	}
	rate, ok := q.paceRate(c.now)
	c.rp.Count(n, c.now)
	if ok {
		c.pace.Sent(n, rate, c.now, paceBurst)
	}
}

// paceRate returns the rate the QP paces at now: DCQCN's, when its
// reaction point is active, else the line rate (congestion.Config.LineRate,
// in a paced mode), as a NIC never sends faster than its port; false when
// neither holds.
func (q *QP) paceRate(now time.Time) (float64, bool) {
	if r, ok := q.cc.rp.Rate(now); ok {
		return r, true
	}
	return q.cc.lineRate, q.cc.lineRate > 0
}

// ipUDPLen returns the IP and UDP header bytes of the QP's packets.
func ipUDPLen(q *QP) int {
	if q.dest.Is4() || q.dest.Is4In6() {
		return 20 + 8
	}
	return 40 + 8
}

// armPace sets the pacing timer for at (now is the time). The caller
// holds q.mu.
func (q *QP) armPace(at, now time.Time) {
	c := &q.cc
	if c.paceArmed && !c.paceAt.After(at) {
		return // due first: it fires, and sets itself for the rest
	}
	c.paceArmed, c.paceAt = true, at
	if c.paceTimer == nil {
		c.paceTimer = q.dev.clk.AfterFunc(at.Sub(now), q.onPace)
	} else {
		c.paceTimer.Reset(at.Sub(now))
	}
}

// onPace is the pacing timer: it sends what the pacer lets go now.
func (q *QP) onPace() {
	b := q.dev.getBatch()
	defer q.dev.putBatch(b)
	q.mu.Lock()
	defer q.flushAndUnlock(b)
	q.cc.paceArmed = false
	if q.destroyed {
		return
	}
	q.cc.turnUsed = 0 // a turn of its own
	q.respondMore(b)
	q.request(b)
}

// Fair turns for requests: a requester the receive path moves on (an ACK
// that opens the window, a NAK that sends it back N) sends at most
// reqTurn packets, and its pacing timer, set to fire at once, the rest:
// with a window of 512 packets, one ACK or one rewind kept the receive
// path for every other QP's packets while 2 MiB went out. A post by the
// program, on its own thread, is a turn of its own.
const reqTurn = 64

// turnSpent reports whether the QP sent its turn's packets, and if so
// arms the pacing timer for the next turn. The caller holds q.mu.
func (q *QP) turnSpent() bool {
	if q.cc.turnUsed < reqTurn {
		return false
	}
	now := q.dev.clk.Now()
	q.armPace(now, now)
	return true
}

// stopPace stops the pacing timer (Destroy). The caller holds q.mu.
func (q *QP) stopPace() {
	if q.cc.paceTimer != nil {
		q.cc.paceTimer.Stop()
	}
	q.cc.paceArmed = false
}
