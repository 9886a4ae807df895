package congestion

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func delayConfig(t *testing.T, c DelayConfig) *DelayConfig {
	t.Helper()
	r, err := (&Config{Delay: c}).Resolved()
	if err != nil {
		t.Fatal(err)
	}
	return &r.Delay
}

// TestWindow checks the delay window's rules one event at a time: slow
// start doubles it per round trip while the delay is under target; the
// first sample over target drains it for a probe of the base RTT; then a
// sample over target cuts it by Swift's rule, once per smoothed RTT; it
// grows by AI per round trip; a loss cuts it only with a queue behind it;
// a timeout starts over. Flow scaling is off: FSRange -1.
func TestWindow(t *testing.T) {
	c := delayConfig(t, DelayConfig{Target: us(100), InitialWindow: 10, MaxWindow: 1000, FSRange: -1})
	var w Window
	w.Init(c, 512)
	var r RTT
	now := t0
	sample := func(d time.Duration) {
		r.Sample(d, now)
		w.Sample(d, &r, now)
	}
	sample(us(50)) // the base
	if w.Packets() != 10 || !w.State().SlowStart {
		t.Fatalf("initial window %+v", w.State())
	}
	w.Acked(10)
	if w.Packets() != 20 {
		t.Fatalf("slow start: %d after 10 acknowledged, want 20", w.Packets())
	}
	// The first sample over target (150 µs) ends slow start with a probe:
	// the window at MinWindow for two round trips (200 µs at least).
	now = now.Add(us(400))
	sample(us(350))
	if s := w.State(); s.Packets != 2 || s.SlowStart || !s.Probing {
		t.Fatalf("after slow start: %+v, want a probe at the minimum", s)
	}
	w.Acked(50)
	now = now.Add(us(100))
	sample(us(60))
	if s := w.State(); s.Packets != 2 || !s.Probing {
		t.Fatalf("within the probe: %+v", s)
	}
	now = now.Add(time.Millisecond)
	sample(us(70)) // past its end: back to 20, the base still 50
	if s := w.State(); s.Packets != 20 || s.Probing || s.Base != us(50) {
		t.Fatalf("after the probe: %+v, want the window of before and the base of 50 µs", s)
	}
	// 350 µs: 200 µs over the target of 150: cut by max(1 - 0.8·200/350, 0.5).
	now = now.Add(us(400))
	sample(us(350))
	want := 20 * (1 - 0.8*200.0/350)
	if got := w.cwnd; got < want-1e-9 || got > want+1e-9 {
		t.Fatalf("cut to %v, want %v", got, want)
	}
	// Over target: acknowledgements do not grow it; another sample over
	// target within a smoothed RTT does not cut again.
	w.Acked(5)
	sample(us(600))
	if w.cwnd != want {
		t.Fatalf("window %v after a second sample within an RTT, want %v", w.cwnd, want)
	}
	// A sample far over target after a round trip cuts by at most MaxMDF.
	now = now.Add(time.Millisecond)
	sample(us(5000))
	want *= 0.5
	if w.cwnd != want {
		t.Fatalf("window %v, want half of the last (MaxMDF)", w.cwnd)
	}
	// Under target again: AI per round trip, AI/window per packet.
	sample(us(60))
	before := w.cwnd
	w.Acked(1)
	if got := w.cwnd - before; got < 1/before-1e-12 || got > 1/before+1e-12 {
		t.Fatalf("additive increase of %v for one packet, want 1/window = %v", got, 1/before)
	}
	// A loss with the delay under target cuts nothing.
	now = now.Add(time.Millisecond)
	before = w.cwnd
	w.Loss(&r, now)
	if w.cwnd != before || w.State().LossesKept != 1 {
		t.Fatalf("a loss with no queue cut the window: %v -> %v", before, w.cwnd)
	}
	// A loss with the delay over target cuts by MaxMDF.
	now = now.Add(time.Millisecond)
	sample(us(400))
	before = w.cwnd
	now = now.Add(time.Millisecond)
	w.Loss(&r, now)
	if w.cwnd != w.clamp(before*0.5) {
		t.Fatalf("a loss over target: %v -> %v, want half", before, w.cwnd)
	}
	// A timeout: the minimum, and slow start again.
	w.Timeout(now)
	if w.Packets() != 2 || !w.State().SlowStart {
		t.Fatalf("after a timeout: %+v", w.State())
	}
	// Blind: four windows acknowledged with no sample, and it stops
	// growing until one comes.
	now = now.Add(time.Millisecond)
	sample(us(60))
	w.slowStart = false
	acked := 0
	for prev := 0.0; w.cwnd != prev; acked += 10 {
		if float64(acked) > 4*w.cwnd+10 {
			t.Fatalf("window %v still growing after %d packets with no sample", w.cwnd, acked)
		}
		prev = w.cwnd
		w.Acked(10)
	}
	held := w.cwnd
	if float64(acked) < 4*held {
		t.Fatalf("window held at %v after %d packets with no sample, want more than four windows", held, acked)
	}
	sample(us(60))
	w.Acked(1)
	if w.cwnd <= held {
		t.Fatalf("window %v after a sample, want it growing again", w.cwnd)
	}
	// The bounds.
	w.slowStart = true
	for range 100 {
		sample(us(60))
		w.Acked(1000)
	}
	if w.Packets() != 1000 {
		t.Fatalf("window %d, want MaxWindow 1000", w.Packets())
	}
}

// TestWindowProbe checks the probes of the base RTT: a flow that took a
// queue others held for the path's delay (a base of 300 µs where the path
// has 100) learns the path's when its probe sees the queue drained, and
// probes again once its base is ProbeInterval old; a probe that sees a
// higher RTT does not raise the base.
func TestWindowProbe(t *testing.T) {
	c := delayConfig(t, DelayConfig{Target: us(100), InitialWindow: 40, FSRange: -1, ProbeInterval: 10 * time.Millisecond})
	var w Window
	w.Init(c, 512)
	var r RTT
	now := t0
	sample := func(d time.Duration) {
		r.Sample(d, now)
		w.Sample(d, &r, now)
	}
	sample(us(300)) // joined a queue: the base is 300 µs
	w.slowStart = false
	now = now.Add(10 * time.Millisecond)
	sample(us(350)) // the base is 10 ms old: probe
	if s := w.State(); !s.Probing || s.Packets != 2 {
		t.Fatalf("no probe when the base is ProbeInterval old: %+v", s)
	}
	now = now.Add(us(300))
	sample(us(100)) // the queue drained
	now = now.Add(time.Millisecond)
	sample(us(150))
	if s := w.State(); s.Probing || s.Base != us(100) || s.Packets != 40 || s.Probes != 1 {
		t.Fatalf("after the probe: %+v, want the base of 100 µs and the window back", s)
	}
	// A probe that sees only more delay keeps the base.
	now = now.Add(10 * time.Millisecond)
	sample(us(400))
	now = now.Add(time.Millisecond)
	sample(us(400))
	if s := w.State(); s.Probing || s.Base != us(100) || s.Probes != 2 {
		t.Fatalf("after a probe over the base: %+v, want it kept", s)
	}
}

// TestWindowCompete checks the competitive mode: two probes in a row
// whose smallest sample stays more than competeTargets targets over the base (a buffer
// others fill) makes the window compete, where delay over target cuts
// nothing, the window grows by AI per round trip and a loss halves it; a
// later probe that sees the queue drain ends it, and delay cuts again.
func TestWindowCompete(t *testing.T) {
	c := delayConfig(t, DelayConfig{Target: us(100), InitialWindow: 40, FSRange: -1, ProbeInterval: 10 * time.Millisecond})
	var w Window
	w.Init(c, 512)
	var r RTT
	now := t0
	sample := func(d time.Duration) {
		r.Sample(d, now)
		w.Sample(d, &r, now)
	}
	probe := func(min time.Duration) {
		t.Helper()
		now = now.Add(10 * time.Millisecond)
		sample(min) // the base is ProbeInterval old: a probe starts
		if !w.State().Probing {
			t.Fatalf("no probe: %+v", w.State())
		}
		now = now.Add(10 * time.Millisecond)
		sample(min) // and ends
	}
	sample(us(50)) // the base
	w.slowStart = false
	probe(us(2000)) // 2 ms over the base at MinWindow: a buffer others hold
	if s := w.State(); s.Compete {
		t.Fatalf("competing after one probe: %+v", s)
	}
	probe(us(2000)) // and again
	if s := w.State(); !s.Compete || s.Competes != 1 || s.Packets != 40 || s.Base != us(50) {
		t.Fatalf("after a probe into a standing queue: %+v, want competing, window 40, base 50 µs", s)
	}
	now = now.Add(us(10))
	sample(us(2500)) // far over target: no cut while competing
	w.Acked(40)      // one round trip: AI
	if s := w.State(); s.Packets != 41 {
		t.Fatalf("competing window after a round trip over target: %+v, want 41", s)
	}
	now = now.Add(10 * time.Millisecond)
	w.Loss(&r, now)
	if s := w.State(); s.Packets != 20 || s.LossesKept != 0 {
		t.Fatalf("competing window after a loss: %+v, want it halved to 20", s)
	}
	probe(us(60)) // the queue drained: the others left, or paused
	if s := w.State(); !s.Compete {
		t.Fatalf("after one probe that saw the base: %+v, want still competing", s)
	}
	probe(us(60)) // and again
	if s := w.State(); s.Compete {
		t.Fatalf("after two probes that saw the base: %+v, want no longer competing", s)
	}
	now = now.Add(us(10))
	sample(us(400))
	if s := w.State(); s.Packets >= 20 {
		t.Fatalf("delay over target after competing: %+v, want a cut", s)
	}
}

// TestWindowBound checks that the engine's bound applies when MaxWindow
// is 0.
func TestWindowBound(t *testing.T) {
	var w Window
	w.Init(delayConfig(t, DelayConfig{}), 64)
	if w.Packets() != 10 {
		t.Fatalf("initial window %d, want 10", w.Packets())
	}
	var r RTT
	r.Sample(us(50), t0)
	w.Sample(us(50), &r, t0)
	w.Acked(1000)
	if w.Packets() != 64 {
		t.Errorf("window %d, want the engine's 64", w.Packets())
	}
}

// TestPacer checks the token bucket: packets go at the rate, an idle
// flow may send its burst at once, and no more.
func TestPacer(t *testing.T) {
	var p Pacer
	if !p.Ready(t0) {
		t.Fatal("a new pacer holds packets")
	}
	// 1000 bytes at 1 Gbit/s take 8 µs. An idle flow sends its burst (20
	// µs) at once, then waits: three packets, the next 4 µs later.
	for _, now := range []time.Time{t0, t0.Add(time.Millisecond)} {
		n := 0
		for p.Ready(now) {
			p.Sent(1000, 1e9, now, us(20))
			n++
		}
		if n != 3 || p.Next() != now.Add(us(4)) {
			t.Errorf("%d packets at once from idle, next at +%v: want 3, then +4µs", n, p.Next().Sub(now))
		}
	}
	// Paced from there on: one every 8 µs.
	now := p.Next()
	p.Sent(1000, 1e9, now, us(20))
	if p.Ready(now) || p.Next() != now.Add(us(8)) {
		t.Errorf("next at +%v, want +8µs", p.Next().Sub(now))
	}
	p.Reset()
	if !p.Ready(t0) {
		t.Error("Reset kept the charge")
	}
	p.Sent(1000, 0, t0, 0)
	if !p.Ready(t0) {
		t.Error("a rate of 0 paced")
	}
}

// TestConfig checks the defaults and each setting's range: a bad value is
// an error matching ErrInvalid that names the setting and its range.
func TestConfig(t *testing.T) {
	r, err := (*Config)(nil).Resolved()
	if err != nil {
		t.Fatal(err)
	}
	d := r.DCQCN
	if r.Mode != DCQCN || d.TimeReset != 300*time.Microsecond || d.ByteReset != 32767 || d.Threshold != 1 || d.AIRate != 5e6 ||
		d.HAIRate != 50e6 || d.MinRate != 1e6 || d.MinDecFac != 50 || d.GD != 11 || d.G != 1019 || d.InitialAlpha != 1023 ||
		d.ReduceMonitorPeriod != 4*time.Microsecond || d.AlphaPeriod != 55*time.Microsecond ||
		d.MinTimeBetweenCNPs != 50*time.Microsecond || d.CNPDSCP != 48 || d.ClampTargetRate || d.NoClampAfterTimeInc {
		t.Errorf("DCQCN defaults %+v", d)
	}
	if w := r.Delay; w.Target != 100*time.Microsecond || w.AI != 1 || w.Beta != 0.8 || w.MaxMDF != 0.5 || w.MinWindow != 2 ||
		w.InitialWindow != 10 || w.MaxWindow != 0 || w.FSRange != 100*time.Microsecond || w.ProbeInterval != 25*time.Millisecond {
		t.Errorf("Delay defaults %+v", w)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: 9}, "Mode 9"},
		{Config{LineRate: -1}, "LineRate"},
		{Config{DCQCN: DCQCNConfig{TimeReset: -1}}, "DCQCN.TimeReset"},
		{Config{DCQCN: DCQCNConfig{AIRate: -5}}, "DCQCN.AIRate"},
		{Config{DCQCN: DCQCNConfig{MinDecFac: 101}}, "DCQCN.MinDecFac 101: want 1 to 100 percent"},
		{Config{DCQCN: DCQCNConfig{G: 1024}}, "DCQCN.G"},
		{Config{DCQCN: DCQCNConfig{GD: 12}}, "DCQCN.GD 12"},
		{Config{DCQCN: DCQCNConfig{CNPDSCP: 64}}, "DCQCN.CNPDSCP"},
		{Config{Delay: DelayConfig{Target: -1}}, "Delay.Target"},
		{Config{Delay: DelayConfig{Beta: 2}}, "Delay.Beta"},
		{Config{Delay: DelayConfig{MinWindow: 10, MaxWindow: 5}}, "MinWindow 10 over Delay.MaxWindow 5"},
	} {
		if _, err := c.cfg.Resolved(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid saying %q", c.cfg, err, c.want)
		}
	}
	for m := range numModes {
		if p, err := ParseMode(m.String()); err != nil || p != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, p, err)
		}
	}
	if _, err := ParseMode("reno"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseMode(reno): %v", err)
	}
	if !Auto.ECN() || !DCQCN.ECN() || Off.ECN() || Delay.ECN() || !DCQCN.Paced() || !Delay.Windowed() || DCQCN.Windowed() {
		t.Error("mode properties")
	}
}
