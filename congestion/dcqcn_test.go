package congestion

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// resolved returns the resolved settings of c.
func resolved(t *testing.T, c DCQCNConfig) *DCQCNConfig {
	t.Helper()
	r, err := (&Config{DCQCN: c}).Resolved()
	if err != nil {
		t.Fatal(err)
	}
	return &r.DCQCN
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestDCQCNCut checks the first CNP and the cuts against DCQCN's
// equations with ConnectX's defaults: R_C = R_T = the first rate, then
// R_C·(1-alpha/2) with alpha = 1023/1024; alpha's update every period;
// one cut per ReduceMonitorPeriod, a CNP within it cutting at its end.
func TestDCQCNCut(t *testing.T) {
	c := resolved(t, DCQCNConfig{RateOnFirstCNP: 10e9})
	var d ReactionPoint
	d.Init(c, 0)
	if r, ok := d.Rate(t0); ok || r != 0 || d.Active() {
		t.Fatalf("a new flow is paced: %v %v", r, ok)
	}
	d.CNP(t0)
	a0 := 1023.0 / 1024
	if s := d.State(t0); !s.Active || !near(s.Rate, 10e9*(1-a0/2)) || s.Target != 10e9 || s.Alpha != a0 || s.Cuts != 1 {
		t.Fatalf("after the first CNP: %+v, want rate %v, target 10e9, alpha %v", s, 10e9*(1-a0/2), a0)
	}
	r1 := 10e9 * (1 - a0/2)
	// A CNP 2 µs later is within the monitor period (4 µs): it cuts at
	// 4 µs, with alpha as it stands then (the first period, 55 µs, has
	// not ended).
	d.CNP(t0.Add(us(2)))
	if s := d.State(t0.Add(us(3))); s.Cuts != 1 || !near(s.Rate, r1) {
		t.Fatalf("cut within the monitor period: %+v", s)
	}
	r2 := r1 * (1 - a0/2)
	if s := d.State(t0.Add(us(4))); s.Cuts != 2 || !near(s.Rate, r2) || !near(s.Target, 10e9) {
		t.Fatalf("the pending cut at 4 µs: %+v, want rate %v; the target stays (no timer increase came)", s, r2)
	}
	// The first period ends at 55 µs with CNPs in it: alpha = g·alpha + 1-g.
	g := 1019.0 / 1024
	a1 := g*a0 + (1 - g)
	if s := d.State(t0.Add(us(55))); !near(s.Alpha, a1) {
		t.Fatalf("alpha after a period with CNPs: %v, want %v", s.Alpha, a1)
	}
	// Three more periods without a CNP: alpha = g^3·a1 (the timer, at
	// 300 µs after the last cut, has not fired).
	if s := d.State(t0.Add(us(55 + 3*55))); !near(s.Alpha, a1*g*g*g) {
		t.Fatalf("alpha after 3 periods without CNPs: %v, want %v", s.Alpha, a1*g*g*g)
	}
}

// TestDCQCNIncrease checks the increase stages against the equations:
// with F = 1, the first timer event is fast recovery (R_C = (R_T+R_C)/2),
// the next ones additive (R_T += R_AI); byte-counter events count too,
// and once both counters pass F, hyper increase (R_T += i·R_HAI).
func TestDCQCNIncrease(t *testing.T) {
	c := resolved(t, DCQCNConfig{RateOnFirstCNP: 1e9, InitialAlpha: 512, MaxRate: 10e9, IncreaseUnused: true})
	var d ReactionPoint
	d.Init(c, 0)
	d.CNP(t0) // R_T = 1e9, R_C = 1e9·(1-0.25)
	rc, rt := 0.75e9, 1e9
	check := func(at time.Duration, what string) {
		t.Helper()
		if s := d.State(t0.Add(at)); !near(s.Rate, rc) || !near(s.Target, rt) {
			t.Fatalf("%s: rate %v target %v, want %v %v", what, s.Rate, s.Target, rc, rt)
		}
	}
	check(0, "after the cut")
	rc = (rt + rc) / 2
	check(us(300), "fast recovery at the first timer event (T=0, BC=0 before it)")
	rt += 5e6
	rc = (rt + rc) / 2
	check(us(600), "additive increase at the second (T=1)")
	// 32,767 bytes sent: a byte-counter event (T=2, BC=0): additive.
	d.Count(32767, t0.Add(us(601)))
	rt += 5e6
	rc = (rt + rc) / 2
	check(us(601), "additive increase at the byte counter (BC=0)")
	d.Count(32767, t0.Add(us(602))) // T=2, BC=1: min 1 = F, additive
	rt += 5e6
	rc = (rt + rc) / 2
	check(us(602), "additive increase at BC=1")
	d.Count(32767, t0.Add(us(603))) // T=2, BC=2: min 2 > F: hyper, i = 1
	rt += 1 * 50e6
	rc = (rt + rc) / 2
	check(us(603), "hyper increase at BC=2")
	// The timer at 900 µs: T=2, BC=3: min 2, i = 1.
	rt += 1 * 50e6
	rc = (rt + rc) / 2
	check(us(900), "hyper increase at the third timer event")
	d.Count(32767, t0.Add(us(901))) // T=3, BC=3: i = 2
	rt += 2 * 50e6
	rc = (rt + rc) / 2
	check(us(901), "hyper increase, i = 2")
	// A CNP: the cut clamps the target to the current rate (a timer
	// increase came since the last cut), and the counters start over.
	d.CNP(t0.Add(us(1000)))
	rt = rc
	s := d.State(t0.Add(us(1000)))
	rc *= 1 - s.Alpha/2
	check(us(1000), "the cut after timer increases")
	rc = (rt + rc) / 2
	check(us(1300), "fast recovery again 300 µs after the cut")
}

// TestDCQCNBounds checks the bounds: the rate never falls below MinRate,
// a cut keeps at least MinDecFac of the rate, the rate recovers no
// further than the maximum, where the flow stops being paced, and the
// first rate comes from what the flow sent when RateOnFirstCNP is 0.
func TestDCQCNBounds(t *testing.T) {
	t.Run("MinRate", func(t *testing.T) {
		var d ReactionPoint
		d.Init(resolved(t, DCQCNConfig{RateOnFirstCNP: 2e6}), 0)
		for i := range 20 {
			d.CNP(t0.Add(us(10 * i)))
		}
		if r, _ := d.Rate(t0.Add(us(200))); r != 1e6 {
			t.Errorf("rate %v after 20 cuts, want MinRate 1e6", r)
		}
	})
	t.Run("MinDecFac", func(t *testing.T) {
		var d ReactionPoint
		d.Init(resolved(t, DCQCNConfig{RateOnFirstCNP: 1e9, GD: 10, MinDecFac: 80}), 0)
		d.CNP(t0) // 1 - alpha would be 1/1024: bounded to 0.8
		if r, _ := d.Rate(t0); r != 0.8e9 {
			t.Errorf("rate %v, want 80%% of 1e9", r)
		}
	})
	t.Run("recovery ends pacing", func(t *testing.T) {
		var d ReactionPoint
		d.Init(resolved(t, DCQCNConfig{RateOnFirstCNP: 1e9, IncreaseUnused: true}), 1e9) // the line rate is the maximum
		d.CNP(t0)
		at := t0
		for d.Active() {
			at = at.Add(us(300))
			d.Rate(at)
			if at.Sub(t0) > time.Second {
				t.Fatal("never recovered")
			}
		}
		if s := d.State(at); s.Rate < 0.999e9 || s.Rate > 1e9 || s.Target != 1e9 {
			t.Errorf("recovered to %+v, want the line rate", s)
		}
	})
	t.Run("first rate measured", func(t *testing.T) {
		var d ReactionPoint
		d.Init(resolved(t, DCQCNConfig{}), 0)
		d.Tick(t0)
		d.CountInactive(125_000) // 1 Mbit in 2 ms: 500 Mbit/s
		d.Tick(t0.Add(time.Millisecond))
		d.CountInactive(125_000)
		d.CNP(t0.Add(2 * time.Millisecond))
		if s := d.State(t0.Add(2 * time.Millisecond)); !near(s.Target, 1e9) {
			t.Errorf("first target %v, want the 1 Gbit/s the flow sent at", s.Target)
		}
	})
	t.Run("first rate unmeasured", func(t *testing.T) {
		// A CNP before any tick (no RTT sample yet, as in an incast
		// whose first ACKs wait behind the queue) starts from the
		// maximum, not from MinRate.
		var d ReactionPoint
		d.Init(resolved(t, DCQCNConfig{}), 10e9)
		d.CountInactive(1 << 20)
		d.CNP(t0)
		if s := d.State(t0); !near(s.Target, 10e9) || !near(s.Rate, 10e9*(1-1023.0/2048)) {
			t.Errorf("first CNP with nothing measured: %+v, want target 1e10 and the first cut from it", s)
		}
	})
}

// TestDCQCNIncreaseUsed checks that, by default, only a rate the pacer
// held the flow to increases: a flow that sends below its rate keeps the
// rate where the last cut left it however long it runs, and its timer and
// byte-counter events do not count toward hyper increase; once the pacer
// holds it, the next event raises the rate as DCQCN's fast recovery does.
func TestDCQCNIncreaseUsed(t *testing.T) {
	c := resolved(t, DCQCNConfig{RateOnFirstCNP: 1e9, InitialAlpha: 512})
	var d ReactionPoint
	d.Init(c, 100e9)
	d.CNP(t0) // R_T = 1e9, R_C = 0.75e9
	for i := range 100 {
		d.Count(32767, t0.Add(us(10*i+1))) // byte-counter events, never held
	}
	if s := d.State(t0.Add(us(30_000))); !near(s.Rate, 0.75e9) || !near(s.Target, 1e9) || s.Increases != 0 {
		t.Fatalf("unheld flow after 30 ms: %+v, want rate 7.5e8 target 1e9 and no increase", s)
	}
	d.Held()
	d.Count(32767, t0.Add(us(30_001))) // held: fast recovery, (R_T+R_C)/2
	if s := d.State(t0.Add(us(30_001))); !near(s.Rate, 0.875e9) || !near(s.Target, 1e9) || s.Increases != 1 {
		t.Fatalf("held flow: %+v, want rate 8.75e8 target 1e9 after one increase", s)
	}
	d.Count(32767, t0.Add(us(30_002))) // not held again since: no increase
	if s := d.State(t0.Add(us(30_002))); !near(s.Rate, 0.875e9) || s.Increases != 1 {
		t.Fatalf("after one held increase: %+v, want no second one", s)
	}
}

// refRP is the slow reference of ReactionPoint: DCQCN's rules applied one
// microsecond at a time, each alpha period on its own, written apart from
// the fast machine. Every setting must be a whole number of microseconds.
type refRP struct {
	c               *DCQCNConfig
	maxRate         float64
	now             time.Time // ticked up to
	active          bool
	rc, rt, alpha   float64
	alphaEnd        time.Time
	cnpIn           bool
	lastCut         time.Time
	pending         bool
	timer           time.Time
	t, bc, bytes    int
	timeInc         bool
	cuts, increases uint64
}

func (r *refRP) tickTo(now time.Time) {
	for r.now.Before(now) {
		r.now = r.now.Add(time.Microsecond)
		if !r.active {
			continue
		}
		if !r.timer.After(r.now) {
			r.timer = r.timer.Add(r.c.TimeReset)
			r.inc(true)
			if !r.active {
				continue
			}
		}
		if !r.alphaEnd.After(r.now) {
			g := float64(r.c.G) / 1024
			r.alpha *= g
			if r.cnpIn {
				r.alpha += 1 - g
			}
			r.cnpIn = false
			r.alphaEnd = r.alphaEnd.Add(r.c.AlphaPeriod)
		}
		if r.pending && !r.lastCut.Add(r.c.ReduceMonitorPeriod).After(r.now) {
			r.cut()
		}
	}
}

func (r *refRP) cnp(now time.Time) {
	r.tickTo(now)
	if !r.active {
		r.active, r.rc, r.rt = true, r.c.RateOnFirstCNP, r.c.RateOnFirstCNP
		r.alpha = float64(r.c.InitialAlpha) / 1024
		r.alphaEnd = now.Add(r.c.AlphaPeriod)
		r.lastCut = now.Add(-r.c.ReduceMonitorPeriod)
		r.timer, r.t, r.bc, r.bytes = now.Add(r.c.TimeReset), 0, 0, 0
		r.cnpIn, r.pending, r.timeInc = false, false, false
	}
	r.cnpIn = true
	if now.Sub(r.lastCut) >= r.c.ReduceMonitorPeriod {
		r.cut()
	} else {
		r.pending = true
	}
}

func (r *refRP) cut() {
	if r.c.ClampTargetRate || (!r.c.NoClampAfterTimeInc && r.timeInc) {
		r.rt = r.rc
	}
	div := 2.0
	if r.c.GD == 10 {
		div = 1
	}
	f := 1 - r.alpha/div
	if m := float64(r.c.MinDecFac) / 100; f < m {
		f = m
	}
	r.rc *= f
	if r.rc < r.c.MinRate {
		r.rc = r.c.MinRate
	}
	r.lastCut, r.pending, r.timeInc = r.now, false, false
	r.timer, r.t, r.bc, r.bytes = r.now.Add(r.c.TimeReset), 0, 0, 0
	r.cuts++
}

func (r *refRP) count(n int, now time.Time) {
	r.tickTo(now)
	if !r.active {
		return
	}
	r.bytes += n
	for r.active && r.bytes >= r.c.ByteReset {
		r.bytes -= r.c.ByteReset
		r.inc(false)
	}
}

func (r *refRP) inc(timer bool) {
	lo, hi := r.t, r.bc
	if lo > hi {
		lo, hi = hi, lo
	}
	f := r.c.Threshold
	if hi >= f {
		if lo > f {
			r.rt += float64(lo-f) * r.c.HAIRate
		} else {
			r.rt += r.c.AIRate
		}
	}
	if r.rt > r.maxRate {
		r.rt = r.maxRate
	}
	r.rc = (r.rt + r.rc) / 2
	if r.rc > r.maxRate {
		r.rc = r.maxRate
	}
	if timer {
		r.t++
		r.timeInc = true
	} else {
		r.bc++
	}
	r.increases++
	if r.rc >= 0.999*r.maxRate {
		r.active = false
	}
}

// TestDCQCNReference runs random sequences of CNPs and sends, at
// microsecond times, through the machine and the slow reference, under
// several settings, and compares their states after every event.
func TestDCQCNReference(t *testing.T) {
	settings := []DCQCNConfig{
		{RateOnFirstCNP: 10e9, IncreaseUnused: true}, // the reference's flows send at their rate
		{RateOnFirstCNP: 1e9, IncreaseUnused: true, Threshold: 3, GD: 10, MinDecFac: 30, ByteReset: 4096, TimeReset: us(55), AlphaPeriod: us(20)},
		{RateOnFirstCNP: 25e9, IncreaseUnused: true, ClampTargetRate: true, AlphaPeriod: us(1), ReduceMonitorPeriod: us(50)},
		{RateOnFirstCNP: 40e9, IncreaseUnused: true, NoClampAfterTimeInc: true, InitialAlpha: 100, G: 900, MaxRate: 50e9},
	}
	for si, set := range settings {
		c := resolved(t, set)
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, uint64(si)))
			var fast ReactionPoint
			fast.Init(c, 100e9)
			ref := &refRP{c: c, maxRate: fast.maxRate, now: t0}
			at := t0
			for ev := range 400 {
				// Bursts of CNPs, then quiet spells long enough to recover.
				gap := 1 + rng.IntN(30)
				if ev%50 >= 40 {
					gap = 200 + rng.IntN(3000)
				}
				at = at.Add(us(gap))
				if rng.IntN(3) == 0 {
					fast.CNP(at)
					ref.cnp(at)
				} else {
					n := 1 + rng.IntN(9000)
					if fast.Active() {
						fast.Count(n, at)
					} else {
						fast.CountInactive(n)
					}
					ref.count(n, at)
				}
				s := fast.State(at)
				ref.tickTo(at)
				if s.Active != ref.active || s.Cuts != ref.cuts || s.Increases != ref.increases ||
					!near(s.Rate, ref.rc) || !near(s.Target, ref.rt) || !near(s.Alpha, ref.alpha) {
					t.Fatalf("settings %d, seed %d, event %d at +%v: machine %+v, reference active %v rate %v target %v "+
						"alpha %v cuts %d increases %d", si, seed, ev, at.Sub(t0), s, ref.active, ref.rc, ref.rt, ref.alpha,
						ref.cuts, ref.increases)
				}
			}
		}
	}
}
