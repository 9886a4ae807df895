// Package ccbench is roce ccbench: congestion control measured on a shared
// bottleneck, as issue 30 lists the cases: one flow and incast, latency
// beside bulk, sharing with TCP, random loss, each for goroce with
// congestion control (--cc auto), goroce without (--cc off), and kernel
// TCP with cubic and with bbr, on the same bottleneck in the same run;
// then the engine's own cost on loopback, and a ping-pong beside large
// READs on one device. It needs root and Linux: it makes two network
// namespaces joined by a veth pair (198.18.30.0/24, 2001:db8:30::/64, no
// route out), a tbf qdisc for the bottleneck and nftables rules for CE
// marking and random loss, and removes them at the end. `make ccbench`
// runs it; BENCHMARKS.md has its figures.
package ccbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce ccbench.
var Cmd = &cli.Command{
	UsageLine: "ccbench [-D SECONDS] [--only CASES] [--json FILE] [--svg FILE] [--fair-size BYTES] [-6]",
	Short:     "measure congestion control on a shared bottleneck against kernel TCP (root, Linux)",
	Long: "Measures, in network namespaces joined by a veth pair whose egress is a 1 Gbit/s tbf with a\n" +
		"256 KiB buffer, goroce with congestion control (auto), without (off), and kernel TCP with cubic\n" +
		"and bbr, in the cases of issue 30: incast (1, 2, 4 and 8 senders into one receiver, with and\n" +
		"without CE marking past 95 % of the rate), latency (a 64-byte ping-pong beside 4 bulk flows),\n" +
		"share (2 goroce flows and 2 TCP flows), loss (0.1, 1 and 5 % random loss); then cost (roce perf\n" +
		"write on loopback with --cc off, dcqcn and auto) and fair (a 64-byte ping-pong beside large READs on\n" +
		"the same two devices, loopback). Prints a table per case; --json writes every figure, --svg the\n" +
		"incast figure (goodput and queue over time, 8 senders, with and without congestion control).\n" +
		"Cases: incast, latency, share, loss, cost, fair (--only takes a comma-separated list). Needs\n" +
		"root, ip, tc, nft and ethtool; runs take -D seconds each (about 40 runs in all).\n\n",
	Flags: func(fs *cli.FlagSet) cli.Runner {
		b := &bench{}
		var jsonOut, svgOut string
		fs.Int(&b.secs, 10, "seconds per run (the first is left out of the figures)", "D")
		fs.String(&b.only, "", "run only these comma-separated `cases`", "only")
		fs.String(&jsonOut, "", "write every figure to this JSON `file`", "json")
		fs.String(&svgOut, "", "draw the incast figure into this SVG `file`", "svg")
		fs.Int(&b.fairSize, 1<<30, "the READs' size in `bytes` for the fair case", "fair-size")
		fs.Bool(&b.v6, false, "run the testbed over IPv6 (2001:db8:30::/64)", "6")
		fs.String(&b.stacks, "", "run only these comma-separated `stacks` (goroce-auto, goroce-dcqcn, goroce-off, tcp-cubic, tcp-bbr)", "stacks")
		fs.Duration(&b.target, 0, "the delay window's target (congestion.DelayConfig.Target; 0: its default)", "target")
		fs.Int(&b.senders, 0, "run incast with this many senders only (1, 2, 4 or 8; 0: all)", "senders")
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("ccbench takes no arguments, got %q", args)
			}
			if b.secs < 3 || b.secs > 600 {
				return cli.Usagef("-D must be 3 to 600 seconds")
			}
			if b.fairSize < 1<<20 || b.fairSize > 1<<31 {
				return cli.Usagef("-fair-size must be 1 MiB to 2 GiB")
			}
			for _, c := range strings.Split(b.only, ",") {
				if c != "" && !isCase(c) {
					return cli.Usagef("--only: unknown case %q (want %s)", c, strings.Join(caseNames, ", "))
				}
			}
			b.out = env.Stdout
			err := b.run(ctx) // what the cases before a failure measured is written all the same
			if svgOut != "" && len(b.series) > 0 {
				if werr := os.WriteFile(svgOut, drawIncast(b.series), 0o644); err == nil {
					err = werr
				}
			}
			if jsonOut != "" {
				data, _ := json.MarshalIndent(b.results, "", "  ")
				if werr := os.WriteFile(jsonOut, append(data, '\n'), 0o644); err == nil {
					err = werr
				}
			}
			return err
		}
	},
}

// stack is what carries a run's flows: goroce in a congestion mode, or
// kernel TCP with a congestion control.
type stack struct {
	name  string // as the tables show it: goroce-auto, goroce-dcqcn (the default), goroce-off, tcp-cubic, tcp-bbr
	roce  bool
	mode  congestion.Mode
	tcpCC string
}

var (
	goroceCC  = stack{name: "goroce-auto", roce: true, mode: congestion.Auto}
	goroceDC  = stack{name: "goroce-dcqcn", roce: true, mode: congestion.DCQCN}
	goroceOff = stack{name: "goroce-off", roce: true, mode: congestion.Off}
	tcpCubic  = stack{name: "tcp-cubic", tcpCC: "cubic"}
	tcpBBR    = stack{name: "tcp-bbr", tcpCC: "bbr"}
	allStacks = []stack{goroceCC, goroceDC, goroceOff, tcpCubic, tcpBBR}
)

// step is how often a run samples its flows and the queue.
const step = 100 * time.Millisecond

var caseNames = []string{"incast", "latency", "share", "loss", "cost", "fair"}

func isCase(c string) bool {
	for _, n := range caseNames {
		if n == c {
			return true
		}
	}
	return false
}

// bench is one ccbench run.
type bench struct {
	target   time.Duration
	stacks   string
	senders  int
	secs     int
	only     string
	v6       bool
	fairSize int
	out      io.Writer
	results  []result
	series   []series
}

// result is one run's figures.
type result struct {
	Case    string  `json:"case"`
	Stack   string  `json:"stack"`
	Senders int     `json:"senders,omitempty"`
	Marking bool    `json:"ecn_marking,omitempty"`
	Loss    float64 `json:"loss,omitempty"`
	// Goodput is what the flows delivered, bits per second, and Link its
	// fraction of the bottleneck's rate.
	Goodput float64   `json:"goodput_bps,omitempty"`
	Link    float64   `json:"link_fraction,omitempty"`
	PerFlow []float64 `json:"per_flow_bps,omitempty"`
	// Jain is Jain's fairness over 1 s windows, averaged.
	Jain float64 `json:"jain,omitempty"`
	// Retrans is the bytes sent again per byte delivered.
	Retrans float64 `json:"retrans_fraction,omitempty"`
	Drops   int     `json:"qdisc_drops,omitempty"`
	// SocketDrops counts the packets the kernel dropped at the goroce
	// receiver's socket, its receive buffer full (transport.Stats's
	// RxDropped); -1 for TCP, absent when 0.
	SocketDrops int `json:"receiver_socket_drops,omitempty"`
	// Marked counts the packets the marking rules marked CE.
	Marked int `json:"ce_marked,omitempty"`
	// Latency case: the ping-pong's round trips, µs.
	IdleP50 float64 `json:"idle_p50_us,omitempty"`
	IdleP99 float64 `json:"idle_p99_us,omitempty"`
	P50     float64 `json:"p50_us,omitempty"`
	P99     float64 `json:"p99_us,omitempty"`
	// Share case: each kind's fraction of its fair share.
	RoceShare float64 `json:"roce_share_of_fair,omitempty"`
	TCPShare  float64 `json:"tcp_share_of_fair,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// series is a run's goodput and queue over time, for the figure.
type series struct {
	Name    string
	Step    time.Duration
	Goodput []float64 // bits per second per step
	Queue   []int     // bytes at each step's end
}

func (b *bench) want(c string) bool {
	if b.only == "" {
		return true
	}
	for _, o := range strings.Split(b.only, ",") {
		if o == c {
			return true
		}
	}
	return false
}

// runs reports whether the stack is to run (-stacks).
func (b *bench) runs(st stack) bool {
	if b.stacks == "" {
		return true
	}
	for _, s := range strings.Split(b.stacks, ",") {
		if s == st.name {
			return true
		}
	}
	return false
}

func (b *bench) printf(format string, args ...any) { fmt.Fprintf(b.out, format, args...) }
