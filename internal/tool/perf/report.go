package perf

// roce perf's output: perftest's header, address lines and result tables
// (perftest_parameters.c and perftest_communication.c, with their printf
// formats, of 25.01.0-0.80: Debian 13's; where 4.5-0.17, Debian 12's,
// printed otherwise, the comments say how), and the --json object.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/perfstat"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// bwResult is a bandwidth test's result: perftest's bw_report_data. Rates
// are in MiB/s (perftest's "MiB/sec", "MB/sec" in 4.5) and millions of
// messages per second.
type bwResult struct {
	size, iters     uint64
	peak, avg, rate float64
}

func (b *bwResult) report() oob.BWReport {
	return oob.BWReport{Size: b.size, Iters: b.iters, BWPeak: b.peak, BWAvg: b.avg, MsgRateAvg: b.rate}
}

// latDurResult is a latency test's result in duration mode.
type latDurResult struct {
	size, iters uint64
	avg, tps    float64
}

// result is what one side of a run measured (or, for a bandwidth
// server, what its client reported).
type result struct {
	bw       *bwResult
	lat      *perfstat.Latency
	latDur   *latDurResult
	fromPeer bool
	messages uint64 // work requests posted or messages received here
	usage           // heap allocations and CPU time during the traffic
	elapsed  time.Duration
}

// latResult makes a latency result from the posting times (iterations)
// or the sample period (duration), as print_report_lat and
// print_report_lat_duration do.
func (r *session) latResult(tposted []time.Duration, sampled uint64, ph *phases, msgs uint64, u usage, elapsed time.Duration, rtt int) *result {
	res := &result{messages: msgs, usage: u, elapsed: elapsed}
	size := uint64(r.o.size)
	if r.o.duration > 0 {
		from, to := ph.window()
		d := &latDurResult{size: size, iters: sampled}
		if us := float64((to - from).Nanoseconds()) / 1e3; sampled > 0 && us > 0 {
			d.avg = us / float64(rtt) / float64(sampled)
			d.tps = float64(sampled) / (us / 1e6)
		}
		res.latDur = d
		return res
	}
	res.lat = perfstat.Latencies(tposted, rtt)
	res.lat.Size = size
	return res
}

// cHex formats v as C's "%#0*x" does: zero-padded to width including
// the "0x", which C leaves out for 0.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

var testNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// printHeader is ctx_print_test_info.
func (r *session) printHeader() {
	o := r.o
	title := testNames[o.verb] + " "
	if o.verb == verbAtomic {
		title += o.atomic + " "
	}
	if o.lat {
		title += "Latency "
	} else {
		title += "BW "
	}
	conn := "RC"
	if o.mcg {
		title, conn = title+"Multicast ", "UD"
	}
	r.print(resultLine)
	r.print("                    %sTest\n", title)
	if o.mcg {
		r.print(" MultiCast runs on UD!\n")
	}
	r.print(" Dual-port       : OFF\t\tDevice         : %s\n", r.devNm)
	r.print(" Number of qps   : %d\t\tTransport type : IB\n", o.qps)
	r.print(" Connection type : %s\t\tUsing SRQ      : OFF\n", conn)
	// 4.5: " PCIe relax order: Unsupported" and " ibv_wr* API     : OFF" alone;
	// 25 adds the lock-free (thread domain) and DDP columns, neither of
	// which goroce has (25's own spelling: a tab after "Lock-free").
	r.print(" PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n")
	r.print(" ibv_wr* API     : OFF\t\tUsing DDP      : OFF\n")
	if r.role == oob.Client {
		r.print(" TX depth        : %d\n", o.txDepth)
	}
	if o.verb == verbSend && r.role == oob.Server {
		r.print(" RX depth        : %d\n", o.rxDepth)
	}
	if !o.lat {
		r.print(" CQ Moderation   : %d\n", o.cqMod)
	}
	r.print(" Mtu             : %d[B]\n", r.mtu.Bytes())
	r.print(" Link type       : Ethernet\n")
	r.print(" GID index       : %d\n", r.gidIdx)
	if o.verb == verbRead || o.verb == verbAtomic {
		r.print(" Outstand reads  : %d\n", r.local[0].OutReads)
	} else {
		r.print(" Max inline data : 0[B]\n")
	}
	if !o.rdmaCM {
		r.print(" rdma_cm QPs\t : OFF\n")
		r.print(" Data ex. method : Ethernet\n")
		r.print(resultLine)
		return
	}
	r.print(" rdma_cm QPs\t : ON\n")
	r.print(" Data ex. method : rdma_cm")
	if r.role == oob.Server {
		r.print("\n" + resultLine)
		r.print(" Waiting for client rdma_cm QP to connect\n")
		r.print(" Please run the same command with the IB/RoCE interface IP")
	}
	r.print("\n" + resultLine)
}

// printDest is ctx_print_pingpong_data.
func (r *session) printDest(side string, d *oob.PerftestDest) {
	line := " " + side + " address: LID " + cHex(uint64(d.LID), 4) + " QPN " + cHex(uint64(d.QPN), 6) +
		" PSN " + cHex(uint64(d.PSN), 6)
	if r.o.verb == verbRead {
		line += " OUT " + cHex(uint64(d.OutReads), 4)
	}
	if r.o.verb == verbRead || r.o.verb == verbWrite {
		line += " RKey " + cHex(uint64(d.RKey), 8) + " VAddr " + cHex(d.VAddr, 16)
	}
	gid := " GID: "
	if r.mgidLabel(side) {
		gid = " MGID: "
	}
	for i, b := range d.GID {
		if i > 0 {
			gid += ":"
		}
		gid += fmt.Sprintf("%02d", b)
	}
	r.print("%s\n%s\n", line, gid)
}

// printBWTitle is RESULT_FMT; 4.5 said "MB/sec" for the same MiB/s.
func (r *session) printBWTitle() {
	r.print(resultLine)
	r.print(" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n")
}

// printBW is REPORT_FMT; 4.5 had three blanks after the tabs, not five.
func (r *session) printBW(b *bwResult) {
	r.print(" %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f\n", b.size, b.iters, b.peak, b.avg, b.rate)
}

func (r *session) printLatTitle() {
	r.print(resultLine)
	if r.o.duration > 0 {
		r.print(" #bytes        #iterations       t_avg[usec]    tps average\n")
		return
	}
	r.print("%s", " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"+
		"   99% percentile[usec]   99.9% percentile[usec] \n")
}

func (r *session) printLat(res *result) {
	if d := res.latDur; d != nil {
		r.print(" %-7d       %d            %-7.2f        %-7.2f\n", d.size, d.iters, d.avg, d.tps)
		return
	}
	l := res.lat
	r.print(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		l.Size, l.Iters, l.Min, l.Max, l.Typical, l.Avg, l.Stdev, l.P99, l.P999)
}

// cpuUS is a CPU time in the JSON object: microseconds, 2 decimals.
func cpuUS(d time.Duration) *float64 {
	v := perfstat.Round(float64(d.Nanoseconds())/1e3, 2)
	return &v
}

// jsonReport is the --json object.
type jsonReport struct {
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
	Local     []jsonDest     `json:"local"`
	Remote    []jsonDest     `json:"remote"`
	Source    string         `json:"source"` // "local", "peer" (a bandwidth server prints its client's) or "none"
	Results   map[string]any `json:"results,omitempty"`
	Messages  uint64         `json:"messages,omitempty"`
	Allocs    *uint64        `json:"allocs,omitempty"`
	AllocsMsg *float64       `json:"allocs_per_msg,omitempty"`
	Elapsed   float64        `json:"elapsed_s,omitempty"`
	// Congestion is the soft backend's congestion control (goroce's own).
	Congestion *ccReport `json:"congestion,omitempty"`
	// The process's CPU time over the traffic, user and system, and
	// their sum per message posted or received here (none on a side
	// that posts nothing, whose device answers its peer's traffic).
	CPUUser   *float64 `json:"cpu_user_us,omitempty"`
	CPUSys    *float64 `json:"cpu_sys_us,omitempty"`
	CPUPerMsg *float64 `json:"cpu_us_per_msg,omitempty"`
}

type jsonDest struct {
	QPN   uint32 `json:"qpn"`
	PSN   uint32 `json:"psn"`
	RKey  uint32 `json:"rkey"`
	VAddr string `json:"vaddr"`
	GID   string `json:"gid"`
}

func jsonDests(ds []oob.PerftestDest) []jsonDest {
	out := make([]jsonDest, len(ds))
	for i, d := range ds {
		out[i] = jsonDest{QPN: d.QPN, PSN: d.PSN, RKey: d.RKey, VAddr: "0x" + strconv.FormatUint(d.VAddr, 16),
			GID: verbs.AddrFromGID(d.GID).String()}
	}
	return out
}

// ccReport is the congestion control of the run's QPs on the soft
// backend: the mode, the first QP's window, RTT and DCQCN rate, and the
// device's counters of what it did.
type ccReport struct {
	Mode        string  `json:"mode"`
	Window      uint32  `json:"window_pkts"`
	RTT         float64 `json:"rtt_us"`
	MinRTT      float64 `json:"min_rtt_us"`
	Rate        float64 `json:"dcqcn_rate_gbit_s,omitempty"`
	Retransmits uint64  `json:"retransmitted_pkts"`
	Sent        uint64  `json:"sent_pkts"`
	LossProbes  uint64  `json:"loss_probes"`
	Timeouts    uint64  `json:"local_ack_timeout_err"`
	ECNMarked   uint64  `json:"np_ecn_marked_roce_packets"`
	CNPSent     uint64  `json:"np_cnp_sent"`
	CNPHandled  uint64  `json:"rp_cnp_handled"`
	WindowCuts  uint64  `json:"cc_window_cuts"`
}

// congestionReport returns the run's ccReport, nil on another backend.
func (r *session) congestionReport() *ccReport {
	d, ok := roce.Untrace(r.dev).(*roce.Device)
	if !ok || len(r.qps) == 0 {
		return nil
	}
	ci, ok := roce.Congestion(r.qps[0])
	if !ok {
		return nil
	}
	c := d.Stats().Engine.Counters
	rep := &ccReport{Mode: ci.Mode.String(), Window: ci.Window, RTT: perfstat.Round(float64(ci.RTT.Nanoseconds())/1e3, 2),
		MinRTT: perfstat.Round(float64(ci.MinRTT.Nanoseconds())/1e3, 2), Retransmits: c.Retransmits, Sent: c.SentPkts,
		LossProbes: c.LossProbes, Timeouts: c.LocalACKTimeoutErr, ECNMarked: c.NPECNMarked, CNPSent: c.NPCNPSent,
		CNPHandled: c.RPCNPHandled, WindowCuts: c.CCWindowCuts}
	if ci.Rate.Active {
		rep.Rate = perfstat.Round(ci.Rate.Rate/1e9, 3)
	}
	return rep
}

// printCongestion prints the soft backend's congestion control under the
// results, a line perftest does not have.
func (r *session) printCongestion() {
	c := r.congestionReport()
	if c == nil {
		return
	}
	rate := "unpaced"
	if c.Rate > 0 {
		rate = fmt.Sprintf("%.3f Gbit/s", c.Rate)
	}
	r.print(" Congestion control: %s (window %d, RTT %.1f us, min %.1f us, DCQCN %s); retransmitted %d of %d packets, "+
		"%d loss probes, %d timeouts; CE marks %d, CNPs sent %d, handled %d\n", c.Mode, c.Window, c.RTT, c.MinRTT, rate,
		c.Retransmits, c.Sent, c.LossProbes, c.Timeouts, c.ECNMarked, c.CNPSent, c.CNPHandled)
}

// printJSON prints the run as one JSON object, with --json, or else the
// line of the soft backend's congestion control.
func (r *session) printJSON() error {
	o := r.o
	if !o.json {
		r.printCongestion()
		return nil
	}
	j := jsonReport{Test: o.tool(), Role: r.role.String(), Device: r.devNm, Backend: o.backend, QPs: o.qps,
		MTU: r.mtu.Bytes(), TxDepth: o.txDepth, Duration: o.duration, Local: jsonDests(r.local),
		Remote: jsonDests(r.remote), Source: "none", Congestion: r.congestionReport()}
	if !o.lat {
		j.CQMod = o.cqMod
	}
	if o.verb == verbSend {
		j.RxDepth = o.rxDepth
	}
	if o.verb == verbRead || o.verb == verbAtomic {
		j.OutReads = int(r.local[0].OutReads)
	}
	if o.verb == verbAtomic {
		j.Atomic = o.atomic
	}
	if u := r.passive; u != nil {
		j.CPUUser, j.CPUSys = cpuUS(u.cpu.User), cpuUS(u.cpu.Sys)
	}
	if res := r.result; res != nil {
		j.Source = "local"
		if res.fromPeer {
			j.Source = "peer"
		} else {
			j.Messages, j.Allocs, j.Elapsed = res.messages, &res.allocs, perfstat.Round(res.elapsed.Seconds(), 6)
			if res.messages > 0 {
				a := perfstat.Round(float64(res.allocs)/float64(res.messages), 6)
				j.AllocsMsg = &a
			}
			j.CPUUser, j.CPUSys = cpuUS(res.cpu.User), cpuUS(res.cpu.Sys)
			pm := perfstat.Round(res.cpu.PerMsg(res.messages), 3)
			j.CPUPerMsg = &pm
		}
		switch {
		case res.bw != nil:
			b := res.bw
			j.Results = map[string]any{"bytes": b.size, "iterations": b.iters, "bw_peak_mib_s": perfstat.Round(b.peak, 2),
				"bw_avg_mib_s": perfstat.Round(b.avg, 2), "msg_rate_mpps": perfstat.Round(b.rate, 6),
				"bw_avg_gbit_s": perfstat.Round(b.avg*(1<<20)*8/1e9, 6)}
		case res.lat != nil:
			l := res.lat
			j.Results = map[string]any{"bytes": l.Size, "iterations": l.Iters, "t_min_us": perfstat.Round(l.Min, 2),
				"t_max_us": perfstat.Round(l.Max, 2), "t_typical_us": perfstat.Round(l.Typical, 2), "t_avg_us": perfstat.Round(l.Avg, 2),
				"t_stdev_us": perfstat.Round(l.Stdev, 2), "p99_us": perfstat.Round(l.P99, 2), "p99_9_us": perfstat.Round(l.P999, 2)}
		case res.latDur != nil:
			d := res.latDur
			j.Results = map[string]any{"bytes": d.size, "iterations": d.iters, "t_avg_us": perfstat.Round(d.avg, 2),
				"tps": perfstat.Round(d.tps, 2)}
		}
	}
	b, err := json.Marshal(&j)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(r.out, "%s\n", b)
	return err
}
