// Package rawudp is roce rawudp: the raw-UDP baseline that roce perf is
// measured against. It moves datagrams of RoCE packet size between two
// processes with the batching goroce's UDP transport uses (GSO runs of one
// message's packets on the sender, GRO on the receiver), and nothing else:
// no headers to build, no ICRC, no engine. It is the ceiling of a
// UDP-socket stack on the machine at hand. With --work each side also
// does the per-byte work RoCE asks of any implementation: the sender
// computes every datagram's ICRC, the receiver checks it and copies the
// payload to where an RDMA WRITE would place it. With --lat it is the
// latency floor instead: a ping-pong of small datagrams between the two
// processes, timed as perftest times a latency test; --ack sends each
// with an ACK-sized datagram, as a WRITE ping-pong's answers carry the
// ACK of the request before them, and --calls takes the system calls
// goroce's transport takes. It runs on Linux (socket_linux.go);
// elsewhere it says so.
package rawudp

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/perfstat"
)

// Cmd is roce rawudp.
var Cmd = &cli.Command{
	UsageLine: "rawudp [-s BYTES] [--gso N] [--first BYTES] [--work] [-D SECS] [--lat [-n ITERS] [--busy-poll] [--ack] [--calls]] [-p PORT] [--bind ADDR] [--json] [SERVER]",
	Short:     summary,
	Long: summary + ".\nStart the server (no SERVER argument), then the client; the client prints what the server " +
		"received.\n\n",
	Flags: func(fs *cli.FlagSet) cli.Runner {
		c := &config{}
		c.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := c.check(fs); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if len(args) == 0 {
				return serve(ctx, c, env.Stdout)
			}
			return runClient(ctx, c, args[0], env.Stdout)
		}
	},
}

const summary = "the raw-UDP baseline: datagrams of RoCE packet size between two processes, batched as goroce's UDP transport batches, with no RoCE work"

// latSize is the default datagram size of --lat: the RoCE packet of a
// 2-byte RDMA WRITE (BTH, RETH, 2 bytes and their pad, ICRC).
const latSize = 36

// ackSize is the datagram --ack adds: an RC ACK (BTH, AETH, ICRC).
const ackSize = 20

// config is roce rawudp's flags.
type config struct {
	size     int
	gso      int
	first    int
	secs     float64
	duration time.Duration
	port     int
	bind     string
	json     bool
	timeout  time.Duration
	lat      bool
	iters    int
	busy     bool
	ack      bool
	calls    bool
	work     bool
}

func (c *config) register(fs *cli.FlagSet) {
	fs.Int(&c.size, 4112, "datagram size in `bytes` (4112: a 4096-byte RoCE payload with BTH and ICRC)", "s")
	fs.Int(&c.gso, 15, "datagrams per send: a GSO run of N segments received with GRO (a 64 KiB message at MTU 4096 is one packet and a run of 15); 0 sends one datagram per sendmmsg entry, in batches of 64, without offloads", "gso")
	fs.Float64(&c.secs, 3, "how many `seconds` the client sends", "D")
	fs.Int(&c.port, 18517, "UDP and TCP (control) `port` of the server", "p")
	fs.String(&c.bind, "", "local IP `address` (default: the server 127.0.0.1, a client on loopback 127.0.0.2)", "bind")
	fs.Bool(&c.json, false, "print one JSON object instead of the text line", "json")
	fs.Int(&c.first, 0, "precede each GSO run with one datagram of this many `bytes` in the same sendmmsg, as an RDMA WRITE's first packet (4128 bytes with its RETH) precedes the run of its other 15", "first")
	fs.Duration(&c.timeout, 30*time.Second, "bound on waiting for the peer", "timeout")
	fs.Bool(&c.lat, false, "measure latency instead: a ping-pong of datagrams (-s defaults to 36 bytes, a 2-byte RDMA WRITE), reported as half round trips like perftest's", "lat")
	fs.Int(&c.iters, 1000, "round trips of --lat", "n")
	fs.Bool(&c.busy, false, "with --lat, both sides spin on non-blocking receives instead of sleeping in them", "busy-poll")
	fs.Bool(&c.ack, false, "with --lat, every datagram goes out with a 20-byte one (an RC ACK's size) as the second segment of one GSO send, received with GRO: the packets of a WRITE ping-pong, whose answers carry the ACK of the request before them", "ack")
	fs.Bool(&c.calls, false, "with --lat, take the system calls goroce's UDP transport takes: recvmmsg of up to 8 datagrams with the destination, TOS and GRO control messages, and sendmmsg from a second, unconnected socket", "calls")
	fs.Bool(&c.work, false, "the sender computes each datagram's ICRC (over a fixed flow) into its last 4 bytes, the receiver checks it and copies the payload into a 64 KiB region where an RDMA WRITE would place it: the per-byte work RoCE asks of any implementation", "work")
}

// check applies the defaults that depend on other flags and checks the
// values.
func (c *config) check(fs *cli.FlagSet) error {
	if c.lat && !fs.IsSet("s") {
		c.size = latSize
	}
	switch {
	case c.lat && (c.size < 4 || c.size > 8192):
		return cli.Usagef("-s must be 4 to 8192 bytes with --lat")
	case !c.lat && (c.size < 64 || c.size > 8192):
		return cli.Usagef("-s must be 64 to 8192 bytes")
	case c.gso < 0 || c.gso > 64 || c.gso*c.size > 65000:
		return cli.Usagef("--gso must be 0 to 64, and --gso times -s at most 65000 bytes (one UDP datagram)")
	case c.first != 0 && (c.first < 64 || c.first > 8192 || c.gso == 0):
		return cli.Usagef("--first must be 64 to 8192 bytes, with --gso")
	case c.secs <= 0 || c.secs > 600:
		return cli.Usagef("-D must be more than 0 and at most 600 seconds")
	case c.port < 1 || c.port > 65535:
		return cli.Usagef("-p must be 1-65535")
	case c.iters < perfstat.MinIters || c.iters > 10_000_000:
		return cli.Usagef("-n must be %d to 10000000", perfstat.MinIters)
	case c.busy && !c.lat:
		return cli.Usagef("--busy-poll goes with --lat")
	case c.ack && (!c.lat || c.size < ackSize):
		return cli.Usagef("--ack goes with --lat and -s of at least %d bytes (the ACK must be the shorter segment)", ackSize)
	case c.calls && !c.lat:
		return cli.Usagef("--calls goes with --lat")
	case c.work && (c.lat || c.gso == 0):
		return cli.Usagef("--work goes with a bandwidth run with --gso (not --lat, not --gso 0)")
	case fs.NArg() > 1:
		return cli.Usagef("want at most one argument, the server's address")
	}
	c.duration = time.Duration(c.secs * float64(time.Second))
	return nil
}

// result is what the server measured, sent back to the client.
type result struct {
	Bytes     uint64  `json:"bytes"`
	Datagrams uint64  `json:"datagrams"`
	Seconds   float64 `json:"seconds"`
	Sent      uint64  `json:"sent_datagrams"`
	Size      int     `json:"size"`
	GSO       int     `json:"gso"`
	First     int     `json:"first,omitempty"`
	// Work says the run was --work's; ICRCErrors counts its datagrams
	// whose ICRC was wrong (none, unless the kernel changed a byte).
	Work       bool    `json:"work,omitempty"`
	ICRCErrors uint64  `json:"icrc_errors,omitempty"`
	GBps       float64 `json:"gb_per_sec"`
	MiBps      float64 `json:"mib_per_sec"`
	Mpps       float64 `json:"mpps"`
}

func (r *result) compute() {
	if r.Seconds > 0 {
		r.GBps = float64(r.Bytes) / r.Seconds / 1e9
		r.MiBps = float64(r.Bytes) / r.Seconds / (1 << 20)
		r.Mpps = float64(r.Datagrams) / r.Seconds / 1e6
	}
}

func (r *result) text() string {
	first := ""
	if r.First > 0 {
		first = fmt.Sprintf(" after a %d-byte one", r.First)
	}
	work := ""
	if r.Work {
		work = fmt.Sprintf(", ICRC and placement (%d bad ICRCs)", r.ICRCErrors)
	}
	return fmt.Sprintf("rawudp: %d-byte datagrams, gso %d%s%s: received %d of %d in %.3f s: %.3f GB/s (%.2f MiB/s), %.3f Mpps",
		r.Size, r.GSO, first, work, r.Datagrams, r.Sent, r.Seconds, r.GBps, r.MiBps, r.Mpps)
}

// latResult is what a --lat client measured.
type latResult struct {
	Size     int                `json:"size"`
	Iters    int                `json:"iterations"`
	BusyPoll bool               `json:"busy_poll"`
	Lost     int                `json:"lost"`
	Ack      bool               `json:"ack,omitempty"`
	Calls    bool               `json:"calls,omitempty"`
	Results  map[string]float64 `json:"results"`
	// CPU and PeerCPU are the user and system time, in microseconds, the
	// client and the server used over the round trips.
	CPU     float64 `json:"cpu_us"`
	PeerCPU float64 `json:"peer_cpu_us"`
}
