package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// latCase is a latency case: a command pair, the messages one iteration
// carries (2 for a ping-pong, whose latency is half a round trip; 1 for
// a READ, whose latency is the round trip), and the case it is held
// against.
type latCase struct {
	name string
	pc   pairCmd
	msgs int
	rt   *latRatio
	// Per round: the typical (median) latency, the 99th percentile, the
	// average, and the CPU time of both processes per message.
	typ, p99, avg, cpu []float64
}

// latRatio is a latency target relative to another case.
type latRatio struct {
	of   int // index of the other case
	name string
	max  float64 // at most this many times the other case's latency
	info bool    // no target: the ratio is shown for comparison
}

// p99Max bounds every latency case's 99th percentile, in times its
// median, on a quiet machine.
const p99Max = 3.0

// latCases are the latency cases, the raw-UDP floors first: a ping-pong
// of a 2-byte WRITE's packet (36 bytes) with no RoCE work, with blocking
// receives and with busy polling; then the same with the 20-byte ACK
// that a WRITE ping-pong's every answer carries in the same send (the
// packets RoCE itself puts on the wire, with none of its work), and with
// that ACK and the system calls goroce's UDP transport makes (recvmmsg
// with control messages, sendmmsg from a second socket).
func (b *bencher) latCases() []latCase {
	return []latCase{
		{name: "raw UDP 36 B ping-pong, blocking", pc: b.rawLat(), msgs: 2},
		{name: "raw UDP 36 B ping-pong, busy poll", pc: b.rawLat("--busy-poll"), msgs: 2},
		{name: "raw UDP 36 B + 20 B ACK, blocking", pc: b.rawLat("--ack"), msgs: 2,
			rt: &latRatio{of: 0, name: "UDP blocking", info: true}},
		{name: "raw UDP 36 B + 20 B ACK, busy poll", pc: b.rawLat("--ack", "--busy-poll"), msgs: 2,
			rt: &latRatio{of: 1, name: "UDP busy poll", info: true}},
		{name: "raw UDP + ACK, goroce's syscalls, blocking", pc: b.rawLat("--ack", "--calls"), msgs: 2,
			rt: &latRatio{of: 0, name: "UDP blocking", info: true}},
		{name: "raw UDP + ACK, goroce's syscalls, busy poll", pc: b.rawLat("--ack", "--calls", "--busy-poll"), msgs: 2,
			rt: &latRatio{of: 1, name: "UDP busy poll", info: true}},
		{name: "WRITE 2 B latency, no busy poll", pc: b.perfLat("write", "--busy-poll", "0"), msgs: 2,
			rt: &latRatio{of: 0, name: "UDP blocking", max: 1.5}},
		{name: "SEND 2 B latency, no busy poll", pc: b.perfLat("send", "--busy-poll", "0"), msgs: 2,
			rt: &latRatio{of: 0, name: "UDP blocking", max: 1.5}},
		{name: "READ 2 B latency, no busy poll", pc: b.perfLat("read", "--busy-poll", "0"), msgs: 1,
			rt: &latRatio{of: 6, name: "WRITE", max: 1.5}},
		{name: "WRITE 2 B latency, busy poll", pc: b.perfLat("write", "--busy-poll", "1ms"), msgs: 2,
			rt: &latRatio{of: 1, name: "UDP busy poll", max: 1.3}},
		{name: "SEND 2 B latency, busy poll", pc: b.perfLat("send", "--busy-poll", "1ms"), msgs: 2,
			rt: &latRatio{of: 1, name: "UDP busy poll", max: 1.3}},
		{name: "READ 2 B latency, busy poll", pc: b.perfLat("read", "--busy-poll", "1ms"), msgs: 1,
			rt: &latRatio{of: 9, name: "WRITE", max: 1.5}},
	}
}

// perfLat is a 2-byte roce perf latency case. Both sides print JSON: the
// server's tells its CPU time.
func (b *bencher) perfLat(op string, extra ...string) pairCmd {
	common := append([]string{"perf", op, "--lat", "-s", "2", "-n", strconv.Itoa(b.iters), "-p", tcpPort,
		"--roce-port", rocePort, "--json"}, extra...)
	return pairCmd{
		server: append(slices.Clone(common), "--bind", "127.0.0.1"),
		client: append(slices.Clone(common), "--bind", "127.0.0.2", "127.0.0.1"),
	}
}

// rawLat is the raw-UDP ping-pong (roce rawudp --lat).
func (b *bencher) rawLat(extra ...string) pairCmd {
	return pairCmd{
		server: []string{"rawudp", "-p", tcpPort, "--bind", "127.0.0.1"},
		client: append(append([]string{"rawudp", "--lat", "-n", strconv.Itoa(b.iters), "-p", tcpPort, "--bind", "127.0.0.2", "--json"},
			extra...), "127.0.0.1"),
		ready: "rawudp server on",
	}
}

// latOutput is what a latency client (and a roce perf server) prints as
// JSON: roce perf's figures and CPU time, or roce rawudp's with its
// server's CPU time.
type latOutput struct {
	Results map[string]float64 `json:"results"`
	CPUUser float64            `json:"cpu_user_us"`
	CPUSys  float64            `json:"cpu_sys_us"`
	CPU     float64            `json:"cpu_us"`
	PeerCPU float64            `json:"peer_cpu_us"`
}

// cpu returns the CPU time, in microseconds, of the process that printed
// o and of its peer when o says.
func (o *latOutput) cpu() float64 { return o.CPUUser + o.CPUSys + o.CPU + o.PeerCPU }

// latRound runs c once and records its figures.
func (b *bencher) latRound(ctx context.Context, c *latCase) error {
	po, err := b.runPair(ctx, c.pc)
	if err != nil {
		return err
	}
	if c.pc.lat != nil {
		typ, avg, p99, err := c.pc.lat(po.client)
		if err != nil {
			return err
		}
		c.typ, c.avg, c.p99 = append(c.typ, typ), append(c.avg, avg), append(c.p99, p99)
		c.cpu = append(c.cpu, po.cpu/float64(b.iters*c.msgs))
		return nil
	}
	out, srvOut := po.client, po.server
	var cl, srv latOutput
	if err := json.Unmarshal(lastLine(out), &cl); err != nil {
		return fmt.Errorf("bad output: %w: %s", err, out)
	}
	if _, ok := cl.Results["t_typical_us"]; !ok {
		return fmt.Errorf("output has no latency: %s", out)
	}
	cpu := cl.cpu()
	if c.pc.ready == "" { // a roce perf server, with its own JSON
		if err := json.Unmarshal(lastLine(srvOut), &srv); err != nil {
			return fmt.Errorf("bad server output: %w: %s", err, srvOut)
		}
		cpu += srv.cpu()
	}
	c.typ = append(c.typ, cl.Results["t_typical_us"])
	c.p99 = append(c.p99, cl.Results["p99_us"])
	c.avg = append(c.avg, cl.Results["t_avg_us"])
	c.cpu = append(c.cpu, cpu/float64(b.iters*c.msgs))
	return nil
}

// lat runs every latency case once per round, b.runs rounds, and reports
// each case's medians: the typical latency (half a round trip, or a
// READ's round trip, as perftest reports them), the 99th percentile, the
// CPU time of both processes per message, and the median of its ratios to
// the case it is held against, round by round.
func (b *bencher) lat(ctx context.Context, cases []latCase) error {
	fmt.Fprintf(b.out, "\n%-44s %9s %9s %9s   %-26s %s\n", "latency case", "typical", "p99", "CPU/msg", "ratio", "target")
	keep, err := b.rounds(len(cases), func(i int) string { return cases[i].name }, func(i int) int {
		if cases[i].rt != nil {
			return cases[i].rt.of
		}
		return -1
	}, func(i int) error { return b.latRound(ctx, &cases[i]) })
	if err != nil {
		return err
	}
	for i := range cases {
		if keep[i] {
			b.latReport(cases, i)
		}
	}
	return nil
}

// latReport prints and records case i's medians and targets.
func (b *bencher) latReport(cases []latCase, i int) {
	c := &cases[i]
	r := result{Name: c.name, Unit: "us", Value: median(c.typ), Runs: c.typ,
		P99: median(c.p99), CPUPerMsg: median(c.cpu)}
	r.Extra = fmt.Sprintf("t_avg %.2f us", median(c.avg))
	p99ok := r.P99 <= p99Max*r.Value
	target := fmt.Sprintf("p99 <= %.0fx typical", p99Max)
	met := p99ok
	rs := ""
	if c.rt != nil {
		of := cases[c.rt.of].typ
		var ratios []float64
		for k := range min(len(c.typ), len(of)) {
			if of[k] > 0 {
				ratios = append(ratios, c.typ[k]/of[k])
			}
		}
		r.Ratio, r.Of = median(ratios), c.rt.name
		rs = fmt.Sprintf("%.2f of %s", r.Ratio, c.rt.name)
		if !c.rt.info {
			target = fmt.Sprintf("<= %.1f of %s, %s", c.rt.max, c.rt.name, target)
			met = met && r.Ratio <= c.rt.max
		}
	}
	r.Target, r.Met = target, &met
	fmt.Fprintf(b.out, "%-44s %6.2f us %6.2f us %6.2f us   %-26s %s  %s\n", c.name, r.Value, r.P99, r.CPUPerMsg, rs, target,
		map[bool]string{true: "met", false: "NOT MET"}[met])
	fmt.Fprintf(b.out, "%-44s (%s; runs %s)\n", "", r.Extra, fmtRuns(r.Runs))
	b.results = append(b.results, r)
}
