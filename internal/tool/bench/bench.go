// Package bench is roce bench: goroce's end-to-end comparison, roce perf
// between two processes over loopback UDP against the raw-UDP baseline
// (roce rawudp) measured in the same run with the same batching, with the
// ratios the performance targets are stated in. It starts every process
// itself, on 127.0.0.1 (servers) and 127.0.0.2 (clients), on ports of its
// own, bounds each run in time and ends what it started. `make bench` runs
// it after the Go benchmarks.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce bench.
var Cmd = &cli.Command{
	UsageLine: "bench [--roce PATH] [-D SECONDS] [--runs N] [-n ITERS] [--only NAME] [--json FILE]",
	Short:     "compare roce perf between two processes with the raw-UDP baseline, as make bench does",
	Long: "Runs roce perf's bandwidth and latency cases between two processes over loopback UDP\n" +
		"(servers on 127.0.0.1, clients on 127.0.0.2) and the raw-UDP baselines (roce rawudp) with\n" +
		"the same batching, rounds of every case in turn, and prints each case's median and its\n" +
		"ratio to the case it is compared with; for latency cases also the 99th percentile and the\n" +
		"CPU time (user and system, both processes) per message. Then rsockets: roce rstream's 64 KiB\n" +
		"stream and 64-byte request/response against roce perf write and perf send --lat, and the same\n" +
		"rstream tests over kernel TCP (rstream -T s). Last, where perftest, rdmacm-utils and\n" +
		"libgoroce's build (gcc, libibverbs-dev, librdmacm-dev) are there, unmodified C programs on two\n" +
		"goroce devices (roce device): ib_write_bw with and without -R, ib_send_lat, ib_write_lat,\n" +
		"rping and rstream, each in rounds with its roce counterpart.\n\n",
	Flags: func(fs *cli.FlagSet) cli.Runner {
		b := &bencher{}
		var jsonOut string
		fs.String(&b.roce, "", "`path` of the roce binary to measure (default: this one)", "roce")
		fs.Int(&b.secs, 4, "seconds per bandwidth run", "D")
		fs.Int(&b.runs, 3, "runs per case; the median is reported", "runs")
		fs.Int(&b.iters, 20000, "iterations per latency run", "n")
		fs.String(&jsonOut, "", "also write the results to this JSON `file`", "json")
		fs.String(&b.only, "", "run only the cases whose name contains this", "only")
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := b.check(args); err != nil {
				return err
			}
			b.out = env.Stdout
			if err := b.run(ctx); err != nil {
				return err
			}
			if jsonOut == "" {
				return nil
			}
			data, _ := json.MarshalIndent(b.results, "", "  ")
			return os.WriteFile(jsonOut, append(data, '\n'), 0o644)
		}
	},
}

// check checks the flags and finds the roce binary.
func (b *bencher) check(args []string) error {
	switch {
	case len(args) > 0:
		return cli.Usagef("unexpected argument %q", args[0])
	case b.secs < 1 || b.secs > 60:
		return cli.Usagef("-D must be 1 to 60 seconds")
	case b.runs < 1 || b.runs > 9:
		return cli.Usagef("-runs must be 1 to 9")
	case b.iters < 100 || b.iters > 1_000_000:
		return cli.Usagef("-n must be 100 to 1000000")
	}
	if b.roce == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("cannot find this program to run it as roce (give -roce PATH): %w", err)
		}
		b.roce = exe
	}
	return nil
}

// Ports of the bench's own, away from the defaults other programs use.
const (
	rocePort = "47931"
	tcpPort  = "18631"
)

// bencher runs the cases. It is used by one goroutine.
type bencher struct {
	out     io.Writer
	roce    string
	secs    int
	runs    int
	iters   int
	only    string
	results []result
}

// result is one case's median.
type result struct {
	Name   string    `json:"name"`
	Value  float64   `json:"value"`
	Unit   string    `json:"unit"`
	Runs   []float64 `json:"runs"`
	Extra  string    `json:"extra,omitempty"`
	Ratio  float64   `json:"ratio,omitempty"`
	Of     string    `json:"ratio_of,omitempty"`
	Target string    `json:"target,omitempty"`
	Met    *bool     `json:"met,omitempty"`
	// Latency cases: the 99th percentile (us) and the CPU time of both
	// processes per message (us).
	P99       float64 `json:"p99,omitempty"`
	CPUPerMsg float64 `json:"cpu_us_per_msg,omitempty"`
}

func (b *bencher) run(ctx context.Context) error {
	fmt.Fprintf(b.out, "goroce end-to-end bench: two processes over loopback UDP (servers 127.0.0.1, clients 127.0.0.2),\n"+
		"%d rounds of every bandwidth case in turn, then of every latency case (so a ratio compares runs minutes\n"+
		"apart at most), medians; CPU/msg is both processes' user and system time per message\n\n", b.runs)
	fmt.Fprintf(b.out, "%-44s %14s   %-22s %s\n", "case", "result", "ratio", "target")
	// The baseline sends what a 64 KiB WRITE at MTU 4096 puts on the
	// wire, batched as goroce's UDP transport batches it: one 4128-byte
	// datagram (the first packet, with its RETH) and a GSO run of 15
	// 4112-byte ones per sendmmsg, received with GRO.
	// The second is the same with the per-byte work RoCE itself asks for
	// (the ICRC at both ends, the copy to where a WRITE places its
	// payload) and no RoCE state: what no implementation on UDP sockets
	// can go beyond on this machine.
	cases := []bwCase{
		{name: "raw UDP, a WRITE's framing (1 + GSO 15)", pc: b.rawudp("15", "--first", "4128")},
		{name: "raw UDP, the same, with ICRC and placement", pc: b.rawudp("15", "--first", "4128", "--work"),
			rt: &ratio{of: 0, name: "raw UDP", info: true}},
		{name: "raw UDP 4112 B datagrams, GSO 15 + GRO", pc: b.rawudp("15")},
		{name: "raw UDP 4112 B datagrams, sendmmsg x64", pc: b.rawudp("0")},
		{name: "WRITE 64 KiB, MTU 4096, 1 QP", pc: b.perf("write", "-s", "65536", "-m", "4096"),
			rt: &ratio{of: 0, name: "raw UDP", min: 0.85, abs: 2.0}},
		{name: "READ 64 KiB, MTU 4096, 1 QP", pc: b.perf("read", "-s", "65536", "-m", "4096"),
			rt: &ratio{of: 4, name: "WRITE", min: 0.8}},
		{name: "SEND 64 KiB, MTU 4096, 1 QP", pc: b.perf("send", "-s", "65536", "-m", "4096"),
			rt: &ratio{of: 4, name: "WRITE", min: 0.8}},
		{name: "WRITE 64 KiB, MTU 4096, 64 QPs", pc: b.perf("write", "-s", "65536", "-m", "4096", "-q", "64"),
			rt: &ratio{of: 4, name: "1 QP", min: 1.0}},
		{name: "WRITE 64 KiB, MTU 4096, 1024 QPs", pc: b.perf("write", "-s", "65536", "-m", "4096", "-q", "1024"),
			rt: &ratio{of: 4, name: "1 QP", min: 0.9}},
		// Two receive and send paths a side (--paths) on a 2-core
		// machine, where client and server share the cores: no gain
		// expected, and none lost beside one path.
		{name: "WRITE 64 KiB, 64 QPs, 2 paths", pc: b.perf("write", "-s", "65536", "-m", "4096", "-q", "64", "--paths", "2"),
			rt: &ratio{of: 7, name: "1 path", info: true}},
	}
	cases = append(cases, b.rsocketBW(4, len(cases))...)
	if err := b.bw(ctx, cases); err != nil {
		return err
	}
	if err := b.lat(ctx, b.latCases()); err != nil {
		return err
	}
	if err := b.rsocketLat(ctx); err != nil {
		return err
	}
	return b.deviceCases(ctx)
}

// bwCase is a bandwidth case.
type bwCase struct {
	name string
	pc   pairCmd
	rt   *ratio
	res  result
}

// ratio is a bandwidth target relative to another case.
type ratio struct {
	of   int // index of the other case
	name string
	min  float64 // at least this fraction of the other case's
	abs  float64 // and at least this many GB/s (0: none)
	info bool    // no target: the ratio is shown for comparison
}

// pairCmd is a server and a client command line (without the binary).
type pairCmd struct {
	bin            string   // the program; "" is the roce binary
	env            []string // what the programs' environment adds
	server, client []string
	ready          string        // what the server prints when it listens
	listen         int           // and the TCP port it listens on then
	settle         time.Duration // how long to give it after it said it listens
	retry          string        // what a client says when it came before its server listened: run it again
	parse          func(out []byte) (float64, string, error)
	// lat reads a latency client's figures from its output (a program
	// that prints no JSON); its CPU time is the processes' own.
	lat  func(out []byte) (typ, avg, p99 float64, err error)
	devs *devices // the devices the programs run on, whose CPU time counts too
}

// pairOut is what a pair's run gives: the client's output and the
// server's, the CPU time both used (with their devices'), and the
// client's wall time.
type pairOut struct {
	client, server []byte
	cpu            float64 // microseconds
	wall           time.Duration
}

func (b *bencher) rawudp(gso string, extra ...string) pairCmd {
	d := strconv.Itoa(b.secs)
	return pairCmd{
		server: []string{"rawudp", "-p", tcpPort, "--bind", "127.0.0.1"},
		client: append(append([]string{"rawudp", "-p", tcpPort, "--bind", "127.0.0.2", "--gso", gso, "-D", d, "--json"},
			extra...), "127.0.0.1"),
		ready: "rawudp server on",
		parse: func(out []byte) (float64, string, error) {
			var r struct {
				GBps      float64 `json:"gb_per_sec"`
				Datagrams uint64  `json:"datagrams"`
				Sent      uint64  `json:"sent_datagrams"`
			}
			if err := json.Unmarshal(lastLine(out), &r); err != nil {
				return 0, "", fmt.Errorf("rawudp output: %w: %s", err, out)
			}
			return r.GBps, fmt.Sprintf("%d of %d datagrams arrived", r.Datagrams, r.Sent), nil
		},
	}
}

func (b *bencher) perf(args ...string) pairCmd {
	common := append(append([]string{"perf"}, args...), "-p", tcpPort, "--roce-port", rocePort, "-D", strconv.Itoa(b.secs))
	return pairCmd{
		server: append(slices.Clone(common), "--bind", "127.0.0.1"),
		client: append(slices.Clone(common), "--bind", "127.0.0.2", "--json", "127.0.0.1"),
		ready:  "Waiting for client",
		parse: func(out []byte) (float64, string, error) {
			var r struct {
				Results   map[string]float64 `json:"results"`
				AllocsMsg *float64           `json:"allocs_per_msg"`
			}
			if err := json.Unmarshal(lastLine(out), &r); err != nil {
				return 0, "", fmt.Errorf("perf output: %w: %s", err, out)
			}
			mib, ok := r.Results["bw_avg_mib_s"]
			if !ok {
				return 0, "", fmt.Errorf("perf output has no bandwidth: %s", out)
			}
			extra := ""
			if r.AllocsMsg != nil {
				extra = fmt.Sprintf("%.3f allocs/msg", *r.AllocsMsg)
			}
			return mib * (1 << 20) / 1e9, extra, nil
		},
	}
}

// bw runs every case once per round, b.runs rounds, and reports each
// case's median in GB/s and the median of its ratios to the case it is
// compared with, round by round.
func (b *bencher) bw(ctx context.Context, cases []bwCase) error {
	keep, err := b.rounds(len(cases), func(i int) string { return cases[i].name }, func(i int) int {
		if cases[i].rt != nil {
			return cases[i].rt.of
		}
		return -1
	}, func(i int) error {
		c := &cases[i]
		po, err := b.runPair(ctx, c.pc)
		if err != nil {
			return err
		}
		v, extra, err := c.pc.parse(po.client)
		if err != nil {
			return err
		}
		c.res.Runs = append(c.res.Runs, v)
		c.res.Extra = extra
		return nil
	})
	if err != nil {
		return err
	}
	for i := range cases {
		c := &cases[i]
		if !keep[i] {
			continue
		}
		r := &c.res
		r.Name, r.Unit, r.Value = c.name, "GB/s", median(r.Runs)
		rs, target := "", "(baseline)"
		if c.rt != nil {
			rs, target = bwRatio(cases, c)
		}
		fmt.Fprintf(b.out, "%-44s %9.3f GB/s   %-22s %s\n", c.name, r.Value, rs, target)
		extra := ""
		if r.Extra != "" {
			extra = r.Extra + "; "
		}
		fmt.Fprintf(b.out, "%-44s (%sruns %s)\n", "", extra, fmtRuns(r.Runs))
		b.results = append(b.results, *r)
	}
	return nil
}

// bwRatio sets c's ratio to the case it is compared with, the median of
// the round-by-round ratios, and its target, and returns them as the
// report shows them.
func bwRatio(cases []bwCase, c *bwCase) (rs, target string) {
	r := &c.res
	of := &cases[c.rt.of].res
	var ratios []float64
	for k := range min(len(r.Runs), len(of.Runs)) {
		if of.Runs[k] > 0 {
			ratios = append(ratios, r.Runs[k]/of.Runs[k])
		}
	}
	r.Ratio, r.Of = median(ratios), c.rt.name
	rs = fmt.Sprintf("%.2f of %s", r.Ratio, c.rt.name)
	if c.rt.info {
		return rs, ""
	}
	met := r.Ratio >= c.rt.min && r.Value >= c.rt.abs
	r.Met = &met
	target = fmt.Sprintf(">= %.2f of %s", c.rt.min, c.rt.name)
	if c.rt.abs > 0 {
		target = fmt.Sprintf(">= %.1f GB/s and %s", c.rt.abs, target)
	}
	r.Target = target
	return rs, target + map[bool]string{true: "  met", false: "  NOT MET"}[met]
}

// runPair starts the server, waits for it to listen, runs the client and
// returns what they gave; both are bounded in time and ended. A server
// that says nothing when it listens (ready "": a roce perf --json
// server) is given the client at once, and the client is started again
// while its connection is refused.
func (b *bencher) runPair(ctx context.Context, pc pairCmd) (pairOut, error) {
	limit := time.Duration(b.secs)*time.Second + 60*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var devCPU float64
	if pc.devs != nil {
		devCPU = pc.devs.cpu()
	}
	srv := b.command(ctx, pc, pc.server)
	rw := &readyWriter{want: pc.ready, ready: make(chan struct{})}
	srv.Stdout, srv.Stderr = rw, rw
	if err := srv.Start(); err != nil {
		return pairOut{}, err
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	defer func() {
		srv.Process.Kill()
		<-exited
	}()
	if pc.ready != "" {
		if err := waitReady(pc, rw, exited); err != nil {
			return pairOut{}, err
		}
	}
	if pc.listen != 0 {
		if err := waitListen(pc, rw, exited); err != nil {
			return pairOut{}, err
		}
	}
	time.Sleep(pc.settle)
	po, err := b.runClient(ctx, pc)
	if err != nil {
		return pairOut{}, err
	}
	// The server ends by itself once its client is done.
	select {
	case <-exited:
		po.cpu += cpuOf(srv.ProcessState)
	case <-time.After(10 * time.Second):
	}
	if pc.devs != nil {
		po.cpu += pc.devs.cpu() - devCPU
	}
	po.server = []byte(rw.text())
	return po, nil
}

// command is one of pc's programs with args, bounded by ctx.
func (b *bencher) command(ctx context.Context, pc pairCmd, args []string) *exec.Cmd {
	bin := pc.bin
	if bin == "" {
		bin = b.roce
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	if pc.env != nil {
		cmd.Env = append(os.Environ(), pc.env...)
	}
	return cmd
}

// cpuOf is the user and system time of an ended process, in microseconds.
func cpuOf(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return float64((ps.UserTime() + ps.SystemTime()).Microseconds())
}

// waitReady waits for the server to say it listens.
func waitReady(pc pairCmd, rw *readyWriter, exited <-chan struct{}) error {
	select {
	case <-rw.ready:
	case <-exited:
		// Wait has copied all the server's output: it may have said it
		// listens just before it ended (select picks either when both
		// are ready).
		select {
		case <-rw.ready:
		default:
			return fmt.Errorf("server %v ended before listening: %s", pc.server, rw.text())
		}
	case <-time.After(20 * time.Second):
		return fmt.Errorf("server %v did not listen within 20 s", pc.server)
	}
	return nil
}

// waitListen waits for the server to listen on TCP port pc.listen.
func waitListen(pc pairCmd, rw *readyWriter, exited <-chan struct{}) error {
	for end := time.Now().Add(20 * time.Second); !tcpListening(pc.listen); {
		select {
		case <-exited:
			return fmt.Errorf("server %v ended before listening: %s", pc.server, rw.text())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("server %v did not listen on TCP port %d within 20 s", pc.server, pc.listen)
		}
	}
	return nil
}

// tcpListening reports whether a socket of this host listens on TCP port,
// without connecting to it (a connection would be the server's client).
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// local_address is the second field, st (0A: LISTEN) the fourth.
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// runClient runs the client, again while its connection is refused (for
// 20 s at most) when the server does not say it listens, or while the
// client says pc.retry.
func (b *bencher) runClient(ctx context.Context, pc pairCmd) (pairOut, error) {
	for end := time.Now().Add(20 * time.Second); ; {
		cli := b.command(ctx, pc, pc.client)
		var cliErr strings.Builder
		cli.Stderr = &cliErr
		start := time.Now()
		out, err := cli.Output()
		if err == nil {
			return pairOut{client: out, wall: time.Since(start), cpu: cpuOf(cli.ProcessState)}, nil
		}
		said := cliErr.String() + string(out)
		again := pc.retry != "" && strings.Contains(said, pc.retry) ||
			pc.ready == "" && strings.Contains(said, "connection refused")
		if !again || time.Now().After(end) {
			return pairOut{}, fmt.Errorf("client %v: %v: %s", pc.client, err, said)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyWriter collects a server's output and signals when want appears.
type readyWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	want  string
	ready chan struct{}
	seen  bool
}

// Write keeps p and signals when the server is ready.
func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.seen && strings.Contains(w.buf.String(), w.want) {
		w.seen = true
		close(w.ready)
	}
	return len(p), nil
}

func (w *readyWriter) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// keep says which cases -only keeps: those whose names contain it, and
// the cases they are compared with, and theirs.
// rounds runs b.runs rounds of the n cases -only keeps, each case once a
// round in turn, so that a ratio compares runs minutes apart at most.
// -only keeps the cases named and those they are compared with: ref(i)
// is the case i is compared with, or -1. run runs case i once; the first
// failure ends the rounds, reported under the case's name. It returns
// which cases it kept.
func (b *bencher) rounds(n int, name func(int) string, ref func(int) int, run func(int) error) ([]bool, error) {
	names, refs := make([]string, n), make([]int, n)
	for i := range n {
		names[i], refs[i] = name(i), ref(i)
	}
	keep := b.keep(names, refs)
	for round := range b.runs {
		for i := range n {
			if !keep[i] {
				continue
			}
			if err := run(i); err != nil {
				fmt.Fprintf(b.out, "%-44s round %d failed: %v\n", names[i], round+1, err)
				return keep, err
			}
		}
	}
	return keep, nil
}

func (b *bencher) keep(names []string, refs []int) []bool {
	keep := make([]bool, len(names))
	for i, n := range names {
		keep[i] = b.only == "" || strings.Contains(n, b.only)
	}
	for changed := true; changed; {
		changed = false
		for i, r := range refs {
			if keep[i] && r >= 0 && !keep[r] {
				keep[r], changed = true, true
			}
		}
	}
	return keep
}

// jsonResult is the figure key of the results of roce perf's --json
// object, the last line of out.
func jsonResult(out []byte, key string) (float64, error) {
	var j struct {
		Results map[string]float64 `json:"results"`
	}
	if err := json.Unmarshal(lastLine(out), &j); err != nil {
		return 0, fmt.Errorf("perf output: %w: %s", err, out)
	}
	v, ok := j.Results[key]
	if !ok {
		return 0, fmt.Errorf("perf output has no %s: %s", key, out)
	}
	return v, nil
}

func lastLine(out []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return []byte(lines[len(lines)-1])
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRuns(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(parts, " ")
}
