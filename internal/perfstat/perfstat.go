// Package perfstat is perftest's arithmetic (perftest_parameters.c of
// v4.5-0.17): the latency statistics of print_report_lat, the bandwidth
// average and peak of print_report_bw, and the rounding of the figures it
// prints. roce perf reports with it, and roce rawudp reports its raw-UDP
// baseline the same way, so the two compare.
package perfstat

import (
	"math"
	"slices"
	"time"
)

// MinIters is the fewest iterations perftest runs, and the fewest whose
// latencies it reports.
const MinIters = 5

// Latency is a latency test's result, in microseconds, as print_report_lat
// computes it: a plain value, safe for concurrent use once made.
type Latency struct {
	Size, Iters                              uint64 // Size is the caller's: the message size
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// Latencies is print_report_lat over the posting times of a run: the gaps
// between consecutive posts, sorted, the two largest dropped, divided by
// rtt (2 for round trips, 1 for one-sided operations). It keeps perftest's
// arithmetic: the median of an even count averages the middle two, Max
// is the largest kept gap, the percentiles index with ceil, and the
// deviation sums squares of differences truncated to whole microseconds.
// Fewer than MinIters times give a zero result of len(tposted) iterations;
// rtt below 1 counts as 1.
func Latencies(tposted []time.Duration, rtt int) *Latency {
	l := &Latency{Iters: uint64(len(tposted))}
	if len(tposted) < MinIters {
		return l
	}
	rtt = max(rtt, 1)
	delta := make([]time.Duration, len(tposted)-1)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	slices.Sort(delta)
	m := len(delta) - 2
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(rtt) }
	median := float64(delta[m/2].Nanoseconds())
	if (m-1)%2 != 0 {
		median = float64((delta[m/2] + delta[m/2-1]).Nanoseconds()) / 2
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += us(d)
	}
	l.Avg = sum / float64(m)
	var sq int64
	for _, d := range delta[:m] {
		v := int64(l.Avg - us(d))
		sq += v * v
	}
	l.Stdev = math.Sqrt(float64(sq) / float64(m))
	l.Min, l.Max = us(delta[0]), us(delta[m])
	l.Typical = median / 1e3 / float64(rtt)
	l.P99 = us(delta[int(math.Ceil(float64(m)*0.99))])
	l.P999 = us(delta[int(math.Ceil(float64(m)*0.999))])
	return l
}

// BWAverage returns the average bandwidth (MiB/s, perftest's "MB/sec")
// and message rate (millions per second) of n messages of size bytes in d;
// zeros for a d that is not positive.
func BWAverage(size int, n uint64, d time.Duration) (mibps, mpps float64) {
	if d <= 0 {
		return 0, 0
	}
	ns := float64(d.Nanoseconds())
	return float64(size) * float64(n) * 1e9 / (ns * (1 << 20)), float64(n) * 1e3 / ns
}

// peakWork bounds the peak search (perftest's is quadratic): above it the
// search looks at a sample of the posting times.
const peakWork = 50_000_000

// BWPeak is print_report_bw's peak bandwidth (MiB/s): the best average
// time per message over every run of messages from a post to a signaled
// completion, where message i was posted at posted[i], every cqMod-th
// message (and the last) is signaled, and completed[j] is when signaled
// message j completed. It returns 0 when there is nothing to measure
// (no messages, cqMod 0, or fewer completion times than posts).
func BWPeak(size int, posted, completed []time.Duration, cqMod uint64) float64 {
	n := uint64(len(posted))
	if n == 0 || cqMod == 0 || uint64(len(completed)) < n {
		return 0
	}
	best := math.Inf(1)
	try := func(i, j uint64) {
		if t := float64(completed[j]-posted[i]) / float64(j-i+1); t > 0 && t < best {
			best = t
		}
	}
	stride := max(1, n*(n/cqMod+1)/peakWork)
	for i := uint64(0); i < n; i += stride {
		first := (i+1+cqMod-1)/cqMod*cqMod - 1 // ROUND_UP(i+1, cq_mod) - 1
		for j := first; j < n; j += cqMod {
			try(i, j)
		}
		if n%cqMod != 0 {
			try(i, n-1)
		}
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return float64(size) * 1e9 / (best * (1 << 20))
}

// Round keeps what perftest prints of v: digits decimals (2, or 6 for
// rates).
func Round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
