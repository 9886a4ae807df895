package congestion

import (
	"math"
	"time"
)

// Window is the delay-based congestion window of one flow, after Swift
// (Kumar et al., "Swift: Delay is Simple and Effective for Congestion
// Control in the Datacenter", SIGCOMM 2020, section 3.1), for paths where
// nothing marks ECN: the RTT an ACK shows above the smallest one seen (the
// base) is the queue the flow's path holds, and the window holds it near
// DelayConfig.Target. It is plain data: not safe for concurrent use.
//
//   - Each RTT sample d is compared with target = base + Target + the
//     flow scaling (Swift's): FSRange more for a flow at MinWindow,
//     falling as 1/sqrt(window) to nothing at 100 packets, so that flows
//     of unequal windows converge to equal ones.
//   - While the last sample was at or below target, each acknowledged
//     packet grows the window: by one (slow start) or by AI/window (AI
//     packets per round trip); not once four windows' worth came with no
//     sample (losses void samples, and growing blind fills buffers).
//   - The first sample over target ends slow start with a probe of the
//     base (below); later ones cut the window, at most once per smoothed
//     RTT: window·max(1 - Beta·(d-target)/d, 1 - MaxMDF).
//   - A loss (a NAK) cuts it by MaxMDF, at most once per smoothed RTT,
//     only when the last sample was over target: a loss with no queue
//     behind it is noise (a corrupted or randomly dropped packet), and
//     cutting for it is what made go-back-N collapse at 1 % loss. It
//     ends slow start all the same.
//   - A retransmission timeout sets the window to MinWindow and starts
//     slow start again.
//   - A probe of the base (BBR's ProbeRTT) holds the window at MinWindow
//     for two round trips, so that the queue the flow holds drains, and
//     takes the smallest sample then for the base if it is smaller. It
//     comes at the end of slow start and whenever the base is
//     ProbeInterval old: a flow that started into a queue others held
//     took that queue for the path's delay, and would hold more than its
//     share until it sees the queue drained.
//   - Two probes in a row that see no drained queue (their smallest
//     sample over the base by more than competeTargets targets, while the
//     flow itself held only MinWindow) find the queue held by flows that
//     do not yield to delay: TCP's loss-based ones, which fill the
//     buffer. Until two later probes see the queue drain, the window
//     competes as TCP Reno does (Copa's competitive mode; a delay window alone gets 0.03
//     of its share beside cubic): the delay cuts nothing, the window
//     grows by AI per round trip, and a loss cuts it by MaxMDF.
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

	// base is the smallest RTT the window has seen, confirmed at baseAt.
	base   time.Duration
	baseAt time.Time
	// A probe of the base (ProbeRTT): the window at MinWindow until
	// probeEnd, the smallest sample meanwhile, the window to go back to.
	probing   bool
	probeEnd  time.Time
	probeMin  time.Duration
	probeCwnd float64
	probes    uint64
	// sinceSample counts the packets acknowledged since the last sample.
	sinceSample float64
	// compete: two probes in a row saw a queue the flow did not hold,
	// and none has seen it drained twice in a row since.
	compete  bool
	streak   int // probes in a row that disagreed with compete
	competes uint64
}

// competeProbes is how many probes in a row must see a standing queue
// before the window competes, and a drained one before it stops.
const competeProbes = 2

// competeTargets is how many targets over the base the smallest RTT of a
// probe must be for the window to compete: flows that yield to delay keep
// the queue near one target (plus the flow scaling), a buffer filled by
// loss-based flows is milliseconds.
const competeTargets = 8

// staleWindows is how many windows' worth of packets may be acknowledged
// with no RTT sample before the window stops growing.
const staleWindows = 4

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
	w.sinceSample = 0
	if w.base == 0 || d <= w.base {
		w.base, w.baseAt = d, now
	}
	if w.probing {
		w.probeMin = min(w.probeMin, d)
		if now.Before(w.probeEnd) {
			return
		}
		w.endProbe(now)
		return
	}
	if now.Sub(w.baseAt) >= w.c.ProbeInterval {
		w.startProbe(r, now)
		return
	}
	target := w.base + w.c.Target + w.flowScale()
	if d <= target || w.compete {
		w.over = false
		return
	}
	if w.slowStart {
		// The first queue the flow sees: flows that started together
		// saw one another's packets, not the path, in their first RTTs.
		// Drain and look again.
		w.slowStart = false
		w.startProbe(r, now)
		return
	}
	w.over = true
	if w.canCut(r, now) {
		f := max(1-w.c.Beta*float64(d-target)/float64(d), 1-w.c.MaxMDF)
		w.cut(f, now)
	}
}

// startProbe starts a probe of the base RTT: the window at MinWindow for
// two round trips, so that the queue the flow holds drains.
func (w *Window) startProbe(r *RTT, now time.Time) {
	w.probing, w.probeMin, w.probeCwnd = true, math.MaxInt64, w.cwnd
	w.probeEnd = now.Add(max(2*r.Smoothed(), minProbeTime))
	w.cwnd = float64(w.c.MinWindow)
	w.probes++
}

// minProbeTime bounds a probe of the base RTT from below.
const minProbeTime = 200 * time.Microsecond

// endProbe ends a probe: the base is the smallest RTT it saw, if smaller
// (a base confirmed long ago, past MinRTTWindow, is replaced: the path
// may have changed), and the window goes back to what it was.
func (w *Window) endProbe(now time.Time) {
	w.probing = false
	if w.probeMin < w.base || now.Sub(w.baseAt) >= MinRTTWindow {
		w.base = w.probeMin
	}
	// Two probes in a row must see the queue stand before the window
	// competes (a host's scheduling delays one probe now and then), and
	// two see it drained before it stops (a loss-based flow's queue
	// drains for a moment after each of its cuts).
	if standing := w.probeMin > w.base+competeTargets*w.c.Target; standing != w.compete {
		if w.streak++; w.streak >= competeProbes {
			w.compete, w.streak = standing, 0
			if standing {
				w.competes++
			}
		}
	} else {
		w.streak = 0
	}
	w.baseAt = now
	w.cwnd, w.over = w.probeCwnd, false
}

// Acked grows the window for n packets acknowledged.
func (w *Window) Acked(n uint32) {
	blind := w.sinceSample > staleWindows*w.cwnd
	w.sinceSample += float64(n)
	if w.over || w.probing || n == 0 || blind {
		// Over target, draining, or blind: no sample for a few windows
		// (losses void them), and growing blind is how a window fills
		// a buffer.
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
	if (!w.over && !w.compete) || w.probing {
		w.lossesKept++
		return
	}
	if w.canCut(r, now) {
		w.cut(1-w.c.MaxMDF, now)
	}
}

// Timeout takes a retransmission timeout at now.
func (w *Window) Timeout(now time.Time) {
	w.cwnd, w.slowStart, w.over, w.probing = float64(w.c.MinWindow), true, false, false
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
	// Probing: a probe of the base RTT is under way.
	Probing bool
	// Base is the smallest RTT the window has seen, the target's base.
	Base time.Duration
	// Compete: probes of the base saw a queue others held, and the
	// window competes as TCP Reno does.
	Compete bool
	// Cuts counts the window's cuts; LossesKept the losses that cut
	// nothing, as no queue was behind them; Probes the probes of the
	// base RTT; Competes the times the window started competing.
	Cuts, LossesKept, Probes, Competes uint64
}

// State returns the window's state.
func (w *Window) State() WindowState {
	return WindowState{Packets: w.Packets(), SlowStart: w.slowStart, Probing: w.probing, Compete: w.compete, Base: w.base,
		Cuts: w.cuts, LossesKept: w.lossesKept, Probes: w.probes, Competes: w.competes}
}

// flowScale is Swift's flow-based scaling of the target: a flow with a
// small window tolerates more delay, FSRange at MinWindow, falling as
// 1/sqrt(window) to 0 at fsMaxWindow packets, so that flows of unequal
// windows converge to equal ones.
func (w *Window) flowScale() time.Duration {
	lo, hi := 1/math.Sqrt(float64(w.c.MinWindow)), 1/math.Sqrt(fsMaxWindow)
	if lo <= hi {
		return 0
	}
	f := (1/math.Sqrt(w.cwnd) - hi) / (lo - hi)
	return time.Duration(min(max(f, 0), 1) * float64(w.c.FSRange))
}

// fsMaxWindow is the window past which the target has no flow scaling.
const fsMaxWindow = 100
