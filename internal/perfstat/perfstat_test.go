package perfstat

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// TestLatencies checks print_report_lat's arithmetic on known gaps.
func TestLatencies(t *testing.T) {
	// Posting times with gaps 10, 20, ..., 100 µs (in that order),
	// then 1000 and 2000 µs (the dropped tail).
	var posted []time.Duration
	at := time.Duration(0)
	posted = append(posted, at)
	for _, g := range []int{30, 10, 20, 2000, 40, 50, 60, 70, 80, 90, 100, 1000} {
		at += time.Duration(g) * time.Microsecond
		posted = append(posted, at)
	}
	l := Latencies(posted, 2)
	// 12 gaps, 10 kept: 10..100; median of 10 (even: (m-1)%2 != 0) averages
	// the 5th and 6th: (50+60)/2 = 55, halved: 27.5.
	want := Latency{Iters: 13, Min: 5, Max: 500, Typical: 27.5, Avg: 27.5, P99: 500, P999: 500}
	// stdev: |27.5 - x/2| truncated: 22,17,12,7,2,2,7,12,17,22 -> squares 2*(484+289+144+49+4) = 1940.
	want.Stdev = math.Sqrt(1940.0 / 10)
	if *l != want {
		t.Errorf("got %+v\nwant %+v", *l, want)
	}
	if l := Latencies(posted[:4], 1); *l != (Latency{Iters: 4}) {
		t.Errorf("4 iterations: %+v", l)
	}
	if l := Latencies(posted, 0); *l != *Latencies(posted, 1) {
		t.Errorf("rtt 0: %+v", l)
	}
}

func TestBW(t *testing.T) {
	ms := time.Millisecond
	// 4 messages signaled every 2nd: completions recorded at 1 and 3.
	posted := []time.Duration{0, 1 * ms, 4 * ms, 5 * ms}
	completed := []time.Duration{0, 2 * ms, 0, 10 * ms}
	// Best: i=0 or 1, j=1: 1 ms per message (i=0, j=3 gives 2.5).
	got := BWPeak(1<<20, posted, completed, 2)
	if want := 1000.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("peak %v MiB/s, want %v", got, want)
	}
	avg, rate := BWAverage(1<<20, 4, 10*ms)
	if math.Abs(avg-400) > 1e-9 || math.Abs(rate-0.0004) > 1e-12 {
		t.Errorf("average %v MiB/s, %v Mpps", avg, rate)
	}
	// Every message signaled, the last alone the fastest.
	if got := BWPeak(1000, []time.Duration{0, 5 * ms}, []time.Duration{4 * ms, 6 * ms}, 1); math.Abs(got-1e6/(1<<20)) > 1e-9 {
		t.Errorf("peak %v", got)
	}
	for _, c := range []struct {
		posted, completed []time.Duration
		cqMod             uint64
	}{{nil, nil, 1}, {posted, completed, 0}, {posted, completed[:2], 2}} {
		if got := BWPeak(1, c.posted, c.completed, c.cqMod); got != 0 {
			t.Errorf("BWPeak(%v, %v, %d) = %v, want 0", c.posted, c.completed, c.cqMod, got)
		}
	}
	if a, r := BWAverage(1, 1, 0); a != 0 || r != 0 {
		t.Errorf("BWAverage over no time: %v %v", a, r)
	}
	if got := Round(1.23456789, 2); got != 1.23 {
		t.Errorf("Round = %v", got)
	}
}

// TestCPU checks the CPU sample arithmetic, and that a process that
// works is seen to use CPU.
func TestCPU(t *testing.T) {
	a := CPU{User: 3 * time.Millisecond, Sys: time.Millisecond}
	b := CPU{User: 5 * time.Millisecond, Sys: 4 * time.Millisecond}
	d := b.Sub(a)
	if d != (CPU{User: 2 * time.Millisecond, Sys: 3 * time.Millisecond}) || d.Total() != 5*time.Millisecond {
		t.Errorf("%+v - %+v = %+v", b, a, d)
	}
	if got := d.PerMsg(1000); got != 5 {
		t.Errorf("5 ms over 1000 messages: %v us each", got)
	}
	if got := d.PerMsg(0); got != 0 {
		t.Errorf("per message over none: %v", got)
	}
	if runtime.GOOS != "linux" {
		return
	}
	before := ProcessCPU()
	x, start := 0, time.Now()
	for i := 0; time.Since(start) < 30*time.Millisecond; i++ {
		x ^= i
	}
	if used := ProcessCPU().Sub(before); used.Total() <= 0 {
		t.Errorf("a busy loop used %v of CPU (%d)", used, x)
	}
}
