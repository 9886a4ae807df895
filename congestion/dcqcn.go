package congestion

import (
	"math"
	"time"
)

// ReactionPoint is one flow's reaction point of DCQCN (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015, section 3.1,
// as ConnectX runs it with its rp_ settings): the rate a sender paces at,
// from the CNPs its receiver sends for CE-marked packets. The zero
// ReactionPoint is inactive: its flow is not paced. It is plain data: not safe for
// concurrent use.
//
// It holds a current rate R_C and a target rate R_T, and alpha, the
// estimate of how congested the path is:
//
//   - The first CNP makes it active with R_C = R_T = the rate the flow
//     sent at (DCQCNConfig.RateOnFirstCNP) and alpha = InitialAlpha.
//   - A CNP cuts the rate, at most once per ReduceMonitorPeriod (a CNP
//     within it cuts at its end): R_T = R_C (with ClampTargetRate, or
//     when a timer increase came since the last cut), then
//     R_C = R_C·max(1 - alpha/2^(GD-10), MinDecFac/100), at least
//     MinRate; the increase counters start over.
//   - Every AlphaPeriod, alpha = g·alpha + (1-g) if a CNP came in the
//     period, g·alpha if none did, g = G/1024.
//   - Every TimeReset (the timer) and every ByteReset bytes sent (the
//     byte counter), the rate increases. With T timer events and BC byte
//     events since the last cut, counted before this one, and
//     F = Threshold: while both are below F, fast recovery,
//     R_C = (R_T+R_C)/2; once both pass F, hyper increase,
//     R_T += (min(T,BC)-F)·HAIRate; in between, additive increase,
//     R_T += AIRate; then R_C = (R_T+R_C)/2 for either. Both rates stay
//     at most the maximum rate. An event raises the rate only if the
//     pacer held the flow back since the last one (Held), unless
//     IncreaseUnused: a rate the flow does not use is not raised.
//   - Once R_C is within a thousandth of the maximum rate the flow is not
//     paced any more, until the next CNP.
//
// Time moves only when a method is given a later now: the periods, the
// timer and a pending cut that fell due meanwhile are applied then, in
// the order they fell due, alpha's periods without CNPs in closed form.
type ReactionPoint struct {
	c       *DCQCNConfig
	maxRate float64 // bits per second

	active bool
	rc, rt float64 // current and target rate, bits per second
	alpha  float64

	alphaNext time.Time // end of alpha's current period
	cnpIn     bool      // a CNP came in the current period

	lastCut    time.Time
	cutPending bool // a CNP came within ReduceMonitorPeriod of lastCut

	timerNext time.Time // the next timer event
	t, bc     int       // timer and byte-counter events since the last cut
	bytes     int       // bytes toward the next byte-counter event
	timeInc   bool      // a timer increase came since the last cut
	held      bool      // the pacer held the flow back since the last increase event

	// What the flow sent, for its rate at the first CNP: the total, and
	// two snapshots of it a millisecond or more apart.
	sent           uint64
	snapA, snapB   uint64
	snapAt, snapB0 time.Time

	cuts, increases uint64
}

// rateWindow is how far back the flow's sending rate is measured for the
// first CNP.
const rateWindow = time.Millisecond

// Init readies d for a flow with the resolved settings c (Config.Resolved)
// and the line rate lineRate (bits per second, 0 for unknown): inactive,
// counters at zero.
func (d *ReactionPoint) Init(c *DCQCNConfig, lineRate float64) {
	*d = ReactionPoint{c: c, maxRate: c.MaxRate}
	if d.maxRate == 0 {
		d.maxRate = lineRate
	}
	if d.maxRate == 0 {
		d.maxRate = DefaultMaxRate
	}
}

// Active reports whether the flow is paced: a CNP came, and the rate has
// not recovered to the maximum since.
func (d *ReactionPoint) Active() bool { return d.active }

// Count counts n bytes the flow sent at now (the byte counter's events
// come then). A flow that is not active need not give the time: its
// bytes count only toward its rate at the first CNP, which Tick samples.
func (d *ReactionPoint) Count(n int, now time.Time) {
	d.sent += uint64(n)
	if !d.active {
		return
	}
	d.advance(now)
	d.bytes += n
	for d.active && d.bytes >= d.c.ByteReset {
		d.bytes -= d.c.ByteReset
		d.increase(false)
	}
}

// CountInactive counts n bytes of a flow that is not active, without the
// time.
func (d *ReactionPoint) CountInactive(n int) { d.sent += uint64(n) }

// Tick lets d look at the time now: a flow that is not active samples its
// sending rate (the engine ticks it once per round trip or so).
func (d *ReactionPoint) Tick(now time.Time) {
	if d.active {
		d.advance(now)
		return
	}
	switch {
	case d.snapAt.IsZero():
		d.snapA, d.snapAt, d.snapB, d.snapB0 = d.sent, now, d.sent, now
	case now.Sub(d.snapB0) >= rateWindow:
		d.snapA, d.snapAt = d.snapB, d.snapB0
		d.snapB, d.snapB0 = d.sent, now
	}
}

// sendRate returns the rate the flow sent at lately, in bits per second.
func (d *ReactionPoint) sendRate(now time.Time) float64 {
	if el := now.Sub(d.snapAt); !d.snapAt.IsZero() && el > 0 {
		return float64(d.sent-d.snapA) * 8 / el.Seconds()
	}
	return 0
}

// CNP handles a congestion notification that came at now.
func (d *ReactionPoint) CNP(now time.Time) {
	if d.active {
		d.advance(now) // it may recover, and this be a first CNP again
	}
	if !d.active {
		r := d.c.RateOnFirstCNP
		if r == 0 {
			r = d.sendRate(now)
		}
		if r == 0 {
			// Nothing measured yet (no RTT sample came to tick the
			// rate's window): the maximum, as a NIC takes its line
			// rate, not the minimum.
			r = d.maxRate
		}
		r = min(max(r, d.c.MinRate), d.maxRate)
		d.active, d.rc, d.rt = true, r, r
		d.alpha = float64(d.c.InitialAlpha) / 1024
		d.alphaNext = now.Add(d.c.AlphaPeriod)
		d.cnpIn, d.cutPending, d.timeInc = false, false, false
		d.lastCut = now.Add(-d.c.ReduceMonitorPeriod)
		d.resetIncrease(now)
	}
	d.cnpIn = true
	if now.Sub(d.lastCut) >= d.c.ReduceMonitorPeriod {
		d.cut(now)
	} else {
		d.cutPending = true
	}
}

// Held tells d that the pacer held the flow's next packet back: the flow
// sends at its rate, and the next increase event may raise it.
func (d *ReactionPoint) Held() { d.held = true }

// Rate returns the rate to pace at now, in bits per second, and false
// when the flow is not paced.
func (d *ReactionPoint) Rate(now time.Time) (float64, bool) {
	if !d.active {
		return 0, false
	}
	d.advance(now)
	return d.rc, d.active
}

// RateState is a flow's reaction point as it stands.
type RateState struct {
	Active       bool
	Rate, Target float64 // bits per second
	Alpha        float64
	// Cuts and Increases count the rate's cuts and increase events.
	Cuts, Increases uint64
}

// State returns d's state at now.
func (d *ReactionPoint) State(now time.Time) RateState {
	if d.active {
		d.advance(now)
	}
	return RateState{Active: d.active, Rate: d.rc, Target: d.rt, Alpha: d.alpha, Cuts: d.cuts, Increases: d.increases}
}

// advance applies what fell due by now: alpha's periods, timer events and
// a pending cut, in order.
func (d *ReactionPoint) advance(now time.Time) {
	for d.active {
		at, what := d.timerNext, 't'
		if d.cutPending {
			if c := d.lastCut.Add(d.c.ReduceMonitorPeriod); c.Before(at) {
				at, what = c, 'c'
			}
		}
		if at.After(now) {
			break
		}
		switch what {
		case 'c':
			d.advanceAlpha(at)
			d.cut(at)
		case 't':
			d.advanceAlpha(at) // alpha stands still once the flow is not paced
			d.timerNext = d.timerNext.Add(d.c.TimeReset)
			d.increase(true)
		}
	}
	if d.active {
		d.advanceAlpha(now)
	}
}

// advanceAlpha applies alpha's periods that ended by t.
func (d *ReactionPoint) advanceAlpha(t time.Time) {
	if d.alphaNext.After(t) {
		return
	}
	g := float64(d.c.G) / 1024
	if d.cnpIn {
		d.alpha = g*d.alpha + (1 - g)
		d.cnpIn = false
		d.alphaNext = d.alphaNext.Add(d.c.AlphaPeriod)
		if d.alphaNext.After(t) {
			return
		}
	}
	k := int64(t.Sub(d.alphaNext)/d.c.AlphaPeriod) + 1
	d.alpha *= math.Pow(g, float64(k))
	d.alphaNext = d.alphaNext.Add(time.Duration(k) * d.c.AlphaPeriod)
}

// cut reduces the rate at t.
func (d *ReactionPoint) cut(t time.Time) {
	if d.c.ClampTargetRate || !d.c.NoClampAfterTimeInc && d.timeInc {
		d.rt = d.rc
	}
	f := max(1-d.alpha/float64(int(1)<<(d.c.GD-10)), float64(d.c.MinDecFac)/100)
	d.rc = max(d.rc*f, d.c.MinRate)
	d.lastCut, d.cutPending, d.timeInc = t, false, false
	d.cuts++
	d.resetIncrease(t)
}

// resetIncrease starts the increase timer and counters over at t.
func (d *ReactionPoint) resetIncrease(t time.Time) {
	d.timerNext = t.Add(d.c.TimeReset)
	d.t, d.bc, d.bytes = 0, 0, 0
}

// increase is one rate-increase event, of the timer (timer) or the byte
// counter.
func (d *ReactionPoint) increase(timer bool) {
	if !d.held && !d.c.IncreaseUnused {
		return // the flow sends below its rate: raising it means nothing
	}
	d.held = false
	f := d.c.Threshold
	switch lo, hi := min(d.t, d.bc), max(d.t, d.bc); {
	case hi < f: // fast recovery
	case lo > f:
		d.rt += float64(lo-f) * d.c.HAIRate
	default:
		d.rt += d.c.AIRate
	}
	d.rt = min(d.rt, d.maxRate)
	d.rc = min((d.rt+d.rc)/2, d.maxRate)
	if timer {
		d.t++
		d.timeInc = true
	} else {
		d.bc++
	}
	d.increases++
	if d.rc >= d.maxRate*recovered {
		// Back at the maximum: not paced, and the next first CNP
		// measures the flow's rate afresh.
		d.active, d.snapAt = false, time.Time{}
	}
}

// recovered is how close to the maximum rate R_C comes before the flow is
// no longer paced: R_C only halves its distance to R_T at each event.
const recovered = 0.999
