package congestion

import "time"

// Window is the delay-based congestion window of one flow, after Swift
// (Kumar et al., "Swift: Delay is Simple and Effective for Congestion
// Control in the Datacenter", SIGCOMM 2020, section 3.1), for paths where
// nothing marks ECN: the RTT an ACK shows above the smallest one seen is
// the queue the flow's path holds, and the window holds it near
// DelayConfig.Target. It is plain data: not safe for concurrent use.
//
//   - Each RTT sample d is compared with target = min RTT + Target.
//   - While the last sample was at or below target, each acknowledged
//     packet grows the window: by one (slow start, until the first
//     sample over target or the first loss) or by AI/window (AI packets
//     per round trip).
//   - A sample over target cuts the window, at most once per smoothed
//     RTT: window·max(1 - Beta·(d-target)/d, 1 - MaxMDF).
//   - A loss (a NAK) cuts it by MaxMDF, at most once per smoothed RTT,
//     only when the last sample was over target: a loss with no queue
//     behind it is noise (a corrupted or randomly dropped packet), and
//     cutting for it is what made go-back-N collapse at 1 % loss. It
//     ends slow start all the same.
//   - A retransmission timeout sets the window to MinWindow and starts
//     slow start again.
//
// The window is kept between MinWindow and MaxWindow.
type Window struct {
	c          *DelayConfig
	max        float64
	cwnd       float64
	slowStart  bool
	over       bool // the last sample was over target
	lastCut    time.Time
	cuts       uint64
	lossesKept uint64
}

// Init readies w for a flow with the resolved settings c and a bound on
// its window of maxWindow packets (used when c.MaxWindow is 0).
func (w *Window) Init(c *DelayConfig, maxWindow int) {
	*w = Window{c: c, max: float64(maxWindow), slowStart: true}
	if c.MaxWindow > 0 {
		w.max = float64(c.MaxWindow)
	}
	w.max = max(w.max, float64(c.MinWindow))
	w.cwnd = w.clamp(float64(c.InitialWindow))
}

func (w *Window) clamp(v float64) float64 { return min(max(v, float64(w.c.MinWindow)), w.max) }

// Packets returns the window, in whole packets.
func (w *Window) Packets() uint32 { return uint32(w.cwnd) }

// Sample takes a new RTT sample d, with r the estimator it went into
// (for the minimum and the smoothed RTT), at now.
func (w *Window) Sample(d time.Duration, r *RTT, now time.Time) {
	target := r.Min() + w.c.Target
	if d <= target {
		w.over = false
		return
	}
	w.over, w.slowStart = true, false
	if w.canCut(r, now) {
		f := max(1-w.c.Beta*float64(d-target)/float64(d), 1-w.c.MaxMDF)
		w.cut(f, now)
	}
}

// Acked grows the window for n packets acknowledged.
func (w *Window) Acked(n uint32) {
	if w.over || n == 0 {
		return
	}
	if w.slowStart {
		w.cwnd = w.clamp(w.cwnd + float64(n))
		return
	}
	w.cwnd = w.clamp(w.cwnd + w.c.AI*float64(n)/w.cwnd)
}

// Loss takes a loss the peer reported (a PSN sequence NAK) at now.
func (w *Window) Loss(r *RTT, now time.Time) {
	w.slowStart = false
	if !w.over {
		w.lossesKept++
		return
	}
	if w.canCut(r, now) {
		w.cut(1-w.c.MaxMDF, now)
	}
}

// Timeout takes a retransmission timeout at now.
func (w *Window) Timeout(now time.Time) {
	w.cwnd, w.slowStart, w.over = float64(w.c.MinWindow), true, false
	w.lastCut = now
	w.cuts++
}

func (w *Window) canCut(r *RTT, now time.Time) bool {
	return w.lastCut.IsZero() || now.Sub(w.lastCut) >= r.Smoothed()
}

func (w *Window) cut(f float64, now time.Time) {
	w.cwnd = w.clamp(w.cwnd * f)
	w.lastCut = now
	w.cuts++
}

// WindowState is a window as it stands.
type WindowState struct {
	Packets   uint32
	SlowStart bool
	// Cuts counts the window's cuts; LossesKept the losses that cut
	// nothing, as no queue was behind them.
	Cuts, LossesKept uint64
}

// State returns the window's state.
func (w *Window) State() WindowState {
	return WindowState{Packets: w.Packets(), SlowStart: w.slowStart, Cuts: w.cuts, LossesKept: w.lossesKept}
}
