package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The rsocket cases: roce rstream (librdmacm's rstream over package
// rsocket) between two processes, against roce perf in the same rounds,
// and the same rstream tests over kernel TCP on loopback (rstream -T s)
// for comparison.

// rsocketBW returns the bandwidth cases: a stream of 64 KiB writes over
// rsockets, its target relative to the case write (roce perf write 64
// KiB), and the same stream over kernel TCP.
func (b *bencher) rsocketBW(write int, first int) []bwCase {
	count := b.rstreamCount()
	return []bwCase{
		{name: "rsocket stream 64 KiB writes (rstream)", pc: b.rstream("-S", "65536", "-C", count),
			rt: &ratio{of: write, name: "WRITE", min: 0.8}},
		{name: "kernel TCP stream 64 KiB writes (-T s)", pc: b.rstream("-T", "s", "-S", "65536", "-C", count),
			rt: &ratio{of: first, name: "rsocket", info: true}},
	}
}

// rstreamCount is the -C of a 64 KiB rstream bandwidth run: rstream
// moves -C transfers one way, then as many back, and counts both, about
// 1 GB each way per 4 s at 2 GB/s.
func (b *bencher) rstreamCount() string { return strconv.Itoa(4000 * b.secs) }

// rstreamAvg is an rstream latency run's figure: its microseconds per
// one-way transfer.
func rstreamAvg(po pairOut) (float64, error) {
	_, us, err := rstreamResult(po.client)
	return us, err
}

// rstream is a roce rstream custom test between a server on 127.0.0.1
// and a client on 127.0.0.2; its figure is Gb/sec in GB/s (or with
// latency, the microseconds per one-way transfer).
func (b *bencher) rstream(args ...string) pairCmd {
	common := append(append([]string{"rstream"}, args...), "-p", tcpPort, "--roce-port", rocePort)
	return pairCmd{
		server: append(slices.Clone(common), "-b", "127.0.0.1"),
		client: append(slices.Clone(common), "-s", "127.0.0.1", "-b", "127.0.0.2"),
		ready:  "name ",
		parse: func(out []byte) (float64, string, error) {
			gbits, us, err := rstreamResult(out)
			return gbits / 8, fmt.Sprintf("%.2f us per transfer", us), err
		},
	}
}

// rstreamResult reads the Gb/sec and usec/xfer of rstream's result line,
// the last line of out.
func rstreamResult(out []byte) (gbits, us float64, err error) {
	f := strings.Fields(string(lastLine(out)))
	if len(f) != 8 || f[0] != "custom" {
		return 0, 0, fmt.Errorf("rstream output has no result line: %s", out)
	}
	if gbits, err = strconv.ParseFloat(f[6], 64); err == nil {
		us, err = strconv.ParseFloat(f[7], 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("rstream output: %w: %s", err, out)
	}
	return gbits, us, nil
}

// rsLatCase is an rsocket latency case of the interleaved rounds.
type rsLatCase struct {
	name  string
	pc    pairCmd
	value func(po pairOut) (float64, error) // the figure, in microseconds
	of    int                               // the case the ratio is taken to; -1 none
	short string                            // the name the ratios to this case give it
	max   float64                           // at most this ratio (0: no target)
	res   result
}

// rsocketLat runs the 64-byte request/response cases: roce perf send
// --lat and roce rstream, without and with busy polling, and rstream
// over kernel TCP, in interleaved rounds. The target is rstream's average
// half round trip at most 1.3 times perf send --lat's in the same round,
// both as they run by default (blocking). The busy-polled pair is shown
// without a target: two processes spinning on the two cores of a shared
// machine are preempted now and then, and averages (all rstream reports)
// then swing by tens of microseconds from run to run.
func (b *bencher) rsocketLat(ctx context.Context) error {
	n := strconv.Itoa(b.iters)
	perfAvg := func(po pairOut) (float64, error) { return jsonResult(po.client, "t_avg_us") }
	rs := []string{"-S", "64", "-C", "1", "-I", n}
	cases := []rsLatCase{
		{name: "SEND 64 B latency (perf send --lat), avg", pc: b.perfLatSize("send", "64"), value: perfAvg, of: -1,
			short: "perf send"},
		{name: "rsocket 64 B request/response (rstream)", pc: b.rstream(rs...), value: rstreamAvg, of: 0, max: 1.3,
			short: "rsocket"},
		{name: "SEND 64 B latency, busy poll, avg", pc: b.perfLatSize("send", "64", "--busy-poll", "1ms"), value: perfAvg,
			of: -1, short: "perf send"},
		{name: "rsocket 64 B req/resp, busy poll, spin", pc: b.rstream(append(rs, "--busy-poll", "1ms", "--spin", "1ms")...),
			value: rstreamAvg, of: 2},
		{name: "kernel TCP 64 B request/response (-T s)", pc: b.rstream(append(rs, "-T", "s")...), value: rstreamAvg, of: 1},
	}
	return b.rsLatRounds(ctx, cases)
}

// perfLatSize is a roce perf latency case of size bytes.
func (b *bencher) perfLatSize(op, size string, extra ...string) pairCmd {
	pc := b.perfLat(op, extra...)
	for _, args := range [][]string{pc.server, pc.client} {
		if i := slices.Index(args, "-s"); i >= 0 {
			args[i+1] = size
		}
	}
	return pc
}

// rsLatRounds runs every case once per round, b.runs rounds, and reports
// each case's median and the median of its round-by-round ratios.
func (b *bencher) rsLatRounds(ctx context.Context, cases []rsLatCase) error {
	fmt.Fprintf(b.out, "\n%-44s %9s        %-22s %s\n", "rsocket latency case", "average", "ratio", "target")
	keep, err := b.rounds(len(cases), func(i int) string { return cases[i].name }, func(i int) int { return cases[i].of },
		func(i int) error {
			c := &cases[i]
			po, err := b.runPair(ctx, c.pc)
			if err != nil {
				return err
			}
			v, err := c.value(po)
			if err != nil {
				return err
			}
			c.res.Runs = append(c.res.Runs, v)
			return nil
		})
	if err != nil {
		return err
	}
	for i := range cases {
		if keep[i] {
			b.rsLatReport(cases, i)
		}
	}
	return nil
}

// rsLatReport prints and records case i of cases.
func (b *bencher) rsLatReport(cases []rsLatCase, i int) {
	c := &cases[i]
	r := &c.res
	r.Name, r.Unit, r.Value = c.name, "us", median(r.Runs)
	rs, target := "", ""
	if c.of >= 0 {
		of := &cases[c.of].res
		var ratios []float64
		for k := range min(len(r.Runs), len(of.Runs)) {
			if of.Runs[k] > 0 {
				ratios = append(ratios, r.Runs[k]/of.Runs[k])
			}
		}
		r.Ratio, r.Of = median(ratios), cases[c.of].name
		rs = fmt.Sprintf("%.2fx %s", r.Ratio, cases[c.of].short)
		if c.max > 0 {
			met := r.Ratio <= c.max
			r.Met, r.Target = &met, fmt.Sprintf("<= %.1fx %s", c.max, cases[c.of].short)
			target = r.Target + map[bool]string{true: "  met", false: "  NOT MET"}[met]
		}
	}
	fmt.Fprintf(b.out, "%-44s %9.2f us     %-22s %s\n", c.name, r.Value, rs, target)
	fmt.Fprintf(b.out, "%-44s (runs %s)\n", "", fmtRuns(r.Runs))
	b.results = append(b.results, *r)
}
