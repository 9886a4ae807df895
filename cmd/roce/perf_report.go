package main

// roce perf's output: perftest's header, address lines and result tables
// (perftest_parameters.c and perftest_communication.c of v4.5-0.17, with
// their printf formats), and the --json object.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/goroce/goroce/oob"
)

// perfBW is a bandwidth test's result: perftest's bw_report_data. Rates
// are in MiB/s (perftest's "MB/sec") and millions of messages per second.
type perfBW struct {
	size, iters     uint64
	peak, avg, rate float64
}

func (b *perfBW) report() oob.BWReport {
	return oob.BWReport{Size: b.size, Iters: b.iters, BWPeak: b.peak, BWAvg: b.avg, MsgRateAvg: b.rate}
}

// perfLat is a latency test's result, in microseconds.
type perfLat struct {
	size, iters                            uint64
	min, max, typical, avg, stdev, p99, p9 float64
}

// perfLatDur is a latency test's result in duration mode.
type perfLatDur struct {
	size, iters uint64
	avg, tps    float64
}

// perfResult is what one side of a run measured (or, for a bandwidth
// server, what its client reported).
type perfResult struct {
	bw       *perfBW
	lat      *perfLat
	latDur   *perfLatDur
	fromPeer bool
	messages uint64 // work requests posted or messages received here
	allocs   uint64 // heap allocations during the traffic
	elapsed  time.Duration
}

// perfBWAverage returns the average bandwidth (MiB/s) and message rate
// (Mpps) of n messages of size bytes in d.
func perfBWAverage(size int, n uint64, d time.Duration) (float64, float64) {
	if d <= 0 {
		return 0, 0
	}
	ns := float64(d.Nanoseconds())
	return float64(size) * float64(n) * 1e9 / (ns * (1 << 20)), float64(n) * 1e3 / ns
}

// perfPeakWork bounds the peak search (perftest's is quadratic): above it
// the search looks at a sample of the posting times.
const perfPeakWork = 50_000_000

// perfBWPeak is print_report_bw's peak: the best average time per message
// over every run of messages from a post to a signaled completion.
func perfBWPeak(size int, posted, completed []time.Duration, cqMod uint64) float64 {
	n := uint64(len(posted))
	if n == 0 {
		return 0
	}
	best := math.Inf(1)
	try := func(i, j uint64) {
		if t := float64(completed[j]-posted[i]) / float64(j-i+1); t > 0 && t < best {
			best = t
		}
	}
	stride := max(1, n*(n/cqMod+1)/perfPeakWork)
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

// latResult makes a latency result from the posting times (iterations)
// or the sample period (duration), as print_report_lat and
// print_report_lat_duration do.
func (r *perfRun) latResult(tposted []time.Duration, sampled uint64, ph *perfPhases, msgs, allocs uint64, elapsed time.Duration, rtt int) *perfResult {
	res := &perfResult{messages: msgs, allocs: allocs, elapsed: elapsed}
	size := uint64(r.o.size)
	if r.o.duration > 0 {
		from, to := ph.window()
		d := &perfLatDur{size: size, iters: sampled}
		if us := float64((to - from).Nanoseconds()) / 1e3; sampled > 0 && us > 0 {
			d.avg = us / float64(rtt) / float64(sampled)
			d.tps = float64(sampled) / (us / 1e6)
		}
		res.latDur = d
		return res
	}
	res.lat = perfLatStats(tposted, rtt)
	res.lat.size = size
	return res
}

// perfLatStats is print_report_lat over the posting times: the gaps between
// consecutive posts, sorted, the two largest dropped, halved for round
// trips (rtt 2). It keeps perftest's arithmetic: the median of an even
// count averages the middle two, t_max is the largest kept gap, the
// percentiles index with ceil, and the deviation sums squares of
// differences truncated to whole microseconds.
func perfLatStats(tposted []time.Duration, rtt int) *perfLat {
	l := &perfLat{iters: uint64(len(tposted))}
	if len(tposted) < perfMinIters {
		return l
	}
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
	l.avg = sum / float64(m)
	var sq int64
	for _, d := range delta[:m] {
		v := int64(l.avg - us(d))
		sq += v * v
	}
	l.stdev = math.Sqrt(float64(sq) / float64(m))
	l.min, l.max = us(delta[0]), us(delta[m])
	l.typical = median / 1e3 / float64(rtt)
	l.p99 = us(delta[int(math.Ceil(float64(m)*0.99))])
	l.p9 = us(delta[int(math.Ceil(float64(m)*0.999))])
	return l
}

// perfHex formats v as C's "%#0*x" does: zero-padded to width including
// the "0x", which C leaves out for 0.
func perfHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

var perfTestNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// printHeader is ctx_print_test_info.
func (r *perfRun) printHeader() {
	o := r.o
	title := perfTestNames[o.verb] + " "
	if o.verb == perfAtomic {
		title += o.atomic + " "
	}
	if o.lat {
		title += "Latency "
	} else {
		title += "BW "
	}
	r.print(perfResultLine)
	r.print("                    %sTest\n", title)
	r.print(" Dual-port       : OFF\t\tDevice         : %s\n", r.devNm)
	r.print(" Number of qps   : %d\t\tTransport type : IB\n", o.qps)
	r.print(" Connection type : RC\t\tUsing SRQ      : OFF\n")
	r.print(" PCIe relax order: Unsupported\n")
	r.print(" ibv_wr* API     : OFF\n")
	if r.role == oob.Client {
		r.print(" TX depth        : %d\n", o.txDepth)
	}
	if o.verb == perfSend && r.role == oob.Server {
		r.print(" RX depth        : %d\n", o.rxDepth)
	}
	if !o.lat {
		r.print(" CQ Moderation   : %d\n", o.cqMod)
	}
	r.print(" Mtu             : %d[B]\n", r.mtu.Bytes())
	r.print(" Link type       : Ethernet\n")
	r.print(" GID index       : %d\n", r.gidIdx)
	if o.verb == perfRead || o.verb == perfAtomic {
		r.print(" Outstand reads  : %d\n", r.local[0].OutReads)
	} else {
		r.print(" Max inline data : 0[B]\n")
	}
	if !o.rdmaCM {
		r.print(" rdma_cm QPs\t : OFF\n")
		r.print(" Data ex. method : Ethernet\n")
		r.print(perfResultLine)
		return
	}
	r.print(" rdma_cm QPs\t : ON\n")
	r.print(" Data ex. method : rdma_cm")
	if r.role == oob.Server {
		r.print("\n" + perfResultLine)
		r.print(" Waiting for client rdma_cm QP to connect\n")
		r.print(" Please run the same command with the IB/RoCE interface IP")
	}
	r.print("\n" + perfResultLine)
}

// printDest is ctx_print_pingpong_data.
func (r *perfRun) printDest(side string, d *oob.PerftestDest) {
	line := " " + side + " address: LID " + perfHex(uint64(d.LID), 4) + " QPN " + perfHex(uint64(d.QPN), 6) +
		" PSN " + perfHex(uint64(d.PSN), 6)
	if r.o.verb == perfRead {
		line += " OUT " + perfHex(uint64(d.OutReads), 4)
	}
	if r.o.verb == perfRead || r.o.verb == perfWrite {
		line += " RKey " + perfHex(uint64(d.RKey), 8) + " VAddr " + perfHex(d.VAddr, 16)
	}
	gid := " GID: "
	for i, b := range d.GID {
		if i > 0 {
			gid += ":"
		}
		gid += fmt.Sprintf("%02d", b)
	}
	r.print("%s\n%s\n", line, gid)
}

func (r *perfRun) printBWTitle() {
	r.print(perfResultLine)
	r.print(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n")
}

func (r *perfRun) printBW(b *perfBW) {
	r.print(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", b.size, b.iters, b.peak, b.avg, b.rate)
}

func (r *perfRun) printLatTitle() {
	r.print(perfResultLine)
	if r.o.duration > 0 {
		r.print(" #bytes        #iterations       t_avg[usec]    tps average\n")
		return
	}
	r.print("%s", " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"+
		"   99% percentile[usec]   99.9% percentile[usec] \n")
}

func (r *perfRun) printLat(res *perfResult) {
	if d := res.latDur; d != nil {
		r.print(" %-7d       %d            %-7.2f        %-7.2f\n", d.size, d.iters, d.avg, d.tps)
		return
	}
	l := res.lat
	r.print(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		l.size, l.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p9)
}

// perfJSON is the --json object.
type perfJSON struct {
	Test      string         `json:"test"`
	Role      string         `json:"role"`
	Device    string         `json:"device"`
	Backend   string         `json:"backend"`
	QPs       int            `json:"qps"`
	MTU       int            `json:"mtu"`
	TxDepth   int            `json:"tx_depth"`
	CQMod     int            `json:"cq_mod,omitempty"`
	RxDepth   int            `json:"rx_depth,omitempty"`
	OutReads  int            `json:"outstanding_reads,omitempty"`
	Atomic    string         `json:"atomic_type,omitempty"`
	Duration  int            `json:"duration_s,omitempty"`
	Local     []perfJSONDest `json:"local"`
	Remote    []perfJSONDest `json:"remote"`
	Source    string         `json:"source"` // "local", "peer" (a bandwidth server prints its client's) or "none"
	Results   map[string]any `json:"results,omitempty"`
	Messages  uint64         `json:"messages,omitempty"`
	Allocs    *uint64        `json:"allocs,omitempty"`
	AllocsMsg *float64       `json:"allocs_per_msg,omitempty"`
	Elapsed   float64        `json:"elapsed_s,omitempty"`
}

type perfJSONDest struct {
	QPN   uint32 `json:"qpn"`
	PSN   uint32 `json:"psn"`
	RKey  uint32 `json:"rkey"`
	VAddr string `json:"vaddr"`
	GID   string `json:"gid"`
}

func perfJSONDests(ds []oob.PerftestDest) []perfJSONDest {
	out := make([]perfJSONDest, len(ds))
	for i, d := range ds {
		out[i] = perfJSONDest{QPN: d.QPN, PSN: d.PSN, RKey: d.RKey, VAddr: "0x" + strconv.FormatUint(d.VAddr, 16),
			GID: oob.AddrFromGID(d.GID).String()}
	}
	return out
}

// round2 keeps what perftest prints: two decimals (six for rates).
func perfRound(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// printJSON prints the run as one JSON object, with --json.
func (r *perfRun) printJSON() error {
	o := r.o
	if !o.json {
		return nil
	}
	j := perfJSON{Test: o.tool(), Role: r.role.String(), Device: r.devNm, Backend: o.backend, QPs: o.qps,
		MTU: r.mtu.Bytes(), TxDepth: o.txDepth, Duration: o.duration, Local: perfJSONDests(r.local),
		Remote: perfJSONDests(r.remote), Source: "none"}
	if !o.lat {
		j.CQMod = o.cqMod
	}
	if o.verb == perfSend {
		j.RxDepth = o.rxDepth
	}
	if o.verb == perfRead || o.verb == perfAtomic {
		j.OutReads = int(r.local[0].OutReads)
	}
	if o.verb == perfAtomic {
		j.Atomic = o.atomic
	}
	if res := r.result; res != nil {
		j.Source = "local"
		if res.fromPeer {
			j.Source = "peer"
		} else {
			j.Messages, j.Allocs, j.Elapsed = res.messages, &res.allocs, perfRound(res.elapsed.Seconds(), 6)
			if res.messages > 0 {
				a := perfRound(float64(res.allocs)/float64(res.messages), 6)
				j.AllocsMsg = &a
			}
		}
		switch {
		case res.bw != nil:
			b := res.bw
			j.Results = map[string]any{"bytes": b.size, "iterations": b.iters, "bw_peak_mib_s": perfRound(b.peak, 2),
				"bw_avg_mib_s": perfRound(b.avg, 2), "msg_rate_mpps": perfRound(b.rate, 6),
				"bw_avg_gbit_s": perfRound(b.avg*(1<<20)*8/1e9, 6)}
		case res.lat != nil:
			l := res.lat
			j.Results = map[string]any{"bytes": l.size, "iterations": l.iters, "t_min_us": perfRound(l.min, 2),
				"t_max_us": perfRound(l.max, 2), "t_typical_us": perfRound(l.typical, 2), "t_avg_us": perfRound(l.avg, 2),
				"t_stdev_us": perfRound(l.stdev, 2), "p99_us": perfRound(l.p99, 2), "p99_9_us": perfRound(l.p9, 2)}
		case res.latDur != nil:
			d := res.latDur
			j.Results = map[string]any{"bytes": d.size, "iterations": d.iters, "t_avg_us": perfRound(d.avg, 2),
				"tps": perfRound(d.tps, 2)}
		}
	}
	b, err := json.Marshal(&j)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(r.out, "%s\n", b)
	return err
}
