package congestion

import (
	"testing"
	"time"
)

// TestRTT checks the estimator against RFC 6298's equations, step by
// step, and the minimum's window.
func TestRTT(t *testing.T) {
	var r RTT
	t0 := time.Unix(1000, 0)
	if r.Valid() || r.Timeout(time.Millisecond, 10*time.Millisecond) != 10*time.Millisecond {
		t.Fatalf("an empty estimator: valid %v, timeout %v", r.Valid(), r.Timeout(time.Millisecond, 10*time.Millisecond))
	}
	r.Sample(100*time.Microsecond, t0)
	// First sample: SRTT = R, RTTVAR = R/2.
	if r.Smoothed() != 100*time.Microsecond || r.Deviation() != 50*time.Microsecond || r.Min() != 100*time.Microsecond {
		t.Fatalf("after one sample: %v %v %v", r.Smoothed(), r.Deviation(), r.Min())
	}
	r.Sample(200*time.Microsecond, t0.Add(time.Millisecond))
	// RTTVAR = 3/4·50 + 1/4·|100-200| = 62.5; SRTT = 7/8·100 + 1/8·200 = 112.5.
	if r.Deviation() != 62500*time.Nanosecond || r.Smoothed() != 112500*time.Nanosecond {
		t.Fatalf("after two samples: SRTT %v RTTVAR %v, want 112.5µs 62.5µs", r.Smoothed(), r.Deviation())
	}
	if got := r.Timeout(0, 0); got != 112500*time.Nanosecond+4*62500*time.Nanosecond {
		t.Errorf("timeout %v, want SRTT+4·RTTVAR = 362.5µs", got)
	}
	if got := r.Timeout(time.Millisecond, 0); got != time.Millisecond {
		t.Errorf("timeout with a 1 ms floor: %v", got)
	}
	if r.Min() != 100*time.Microsecond {
		t.Errorf("min %v, want the first sample", r.Min())
	}
	r.Sample(-time.Second, t0)
	if r.Samples() != 2 {
		t.Error("a negative sample counted")
	}
	// A larger sample past the window replaces the minimum.
	r.Sample(300*time.Microsecond, t0.Add(MinRTTWindow+time.Second))
	if r.Min() != 300*time.Microsecond {
		t.Errorf("min %v after the window, want the new sample", r.Min())
	}
}
