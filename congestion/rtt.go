package congestion

import "time"

// RTT estimates a path's round-trip time from samples, as TCP does
// (RFC 6298): a smoothed RTT (gain 1/8), its mean deviation (gain 1/4),
// and the smallest sample of the last MinRTTWindow. The zero RTT has no
// sample. It is plain data: not safe for concurrent use.
type RTT struct {
	srtt, rttvar time.Duration
	min          time.Duration
	minAt        time.Time
	samples      uint64
}

// MinRTTWindow is how long the smallest sample stands: a path whose
// delay grew for good (a route changed) gets a new base after it.
const MinRTTWindow = 10 * time.Second

// Sample adds a round-trip time d measured at now. A sample of 0 or less
// is ignored.
func (r *RTT) Sample(d time.Duration, now time.Time) {
	if d <= 0 {
		return
	}
	if r.samples == 0 {
		r.srtt, r.rttvar = d, d/2
	} else {
		dev := r.srtt - d
		if dev < 0 {
			dev = -dev
		}
		r.rttvar += (dev - r.rttvar) / 4
		r.srtt += (d - r.srtt) / 8
	}
	r.samples++
	if r.samples == 1 || d <= r.min || now.Sub(r.minAt) > MinRTTWindow {
		r.min, r.minAt = d, now
	}
}

// Valid reports whether r has a sample.
func (r *RTT) Valid() bool { return r.samples > 0 }

// Smoothed returns the smoothed RTT (0 without a sample).
func (r *RTT) Smoothed() time.Duration { return r.srtt }

// Deviation returns the RTT's mean deviation (0 without a sample).
func (r *RTT) Deviation() time.Duration { return r.rttvar }

// Min returns the smallest sample of the last MinRTTWindow (0 without a
// sample).
func (r *RTT) Min() time.Duration { return r.min }

// Samples returns how many samples r took.
func (r *RTT) Samples() uint64 { return r.samples }

// Timeout returns RFC 6298's retransmission timeout, SRTT + 4·RTTVAR, at
// least floor; without a sample, initial.
func (r *RTT) Timeout(floor, initial time.Duration) time.Duration {
	if r.samples == 0 {
		return max(initial, floor)
	}
	return max(r.srtt+4*r.rttvar, floor)
}
