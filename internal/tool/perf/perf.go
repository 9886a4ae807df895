// Package perf is roce perf: perftest's ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw and their _lat counterparts (perftest 4.5 and
// 25, Debian 12's and 13's), in either role, over goroce's software device
// or libibverbs, speaking perftest's TCP exchange or its rdma_cm one (-R)
// and printing its tables (25's), so that either end can be the real tool.
package perf

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce perf.
var Cmd = &cli.Command{
	UsageLine: "perf {write|read|send|atomic} [--lat] [-s SIZE] [-n ITERS | -D SECS] [-m MTU] [-q QPS] " +
		"[-A CMP_AND_SWAP|FETCH_AND_ADD] [-p PORT] [-R] [--ipv6-addr] [--json] [--backend soft|hw] [--dev-name NAME] " +
		"[-t TXDEPTH] [-Q CQMOD] [-r RXDEPTH] [-o OUTREADS] [-x GIDIDX] [--bind ADDR] [--transport udp|afpacket] " +
		"[--timeout D] [-v] [SERVER]",
	Short: "measure bandwidth or latency as perftest's ib_{write,read,send,atomic}_{bw,lat} do, against them or another roce",
	Long: `Runs perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw or, with --lat,
ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat (perftest 4.5 or 25), as server (no
SERVER argument) or client, over goroce's software RoCE device (--backend soft) or
libibverbs (--backend hw, a build with -tags hwverbs). Either end may be the real tool:
the TCP exchange on port 18515, the QP attributes and the traffic are perftest's, and
the results are printed in its tables (--json: one JSON object instead). RC, and UD
for multicast: with --mcg (ib_send_bw --mcg) the server attaches its UD QP to the group
-M and the client sends to it; over RoCE no subnet administrator is asked.
-d names the device as --dev-name does; -x picks the GID index of a hw device;
-F is accepted and ignored. A server without --bind uses the address the client
reached it at. The write latency test spins on memory as perftest's does: on the
software device it runs in busy-poll mode (--busy-poll 1ms) unless --busy-poll is given.
Like perftest, roce perf does one stream of work: it runs the Go scheduler on one
processor unless the GOMAXPROCS environment variable is set.

`,
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(fs, args); err != nil {
				return err
			}
			return o.run(ctx, env)
		}
	},
}

// verb is perftest's VerbType; the order matters to its output.
type verb int

const (
	verbSend verb = iota
	verbWrite
	verbRead
	verbAtomic
)

var verbNames = [...]string{"send", "write", "read", "atomic"}

// perftest's constants (perftest_parameters.h, perftest_resources.h of
// v4.5-0.17 and 25.01.0-0.80, the same unless said).
const (
	defPort         = 18515
	defSizeBW       = 65536
	defSizeLat      = 2
	defItersWB      = 5000
	defIters        = 1000
	defTxBW         = 128
	defTxLat        = 1
	defRxSend       = 512
	defCQMod        = 100
	cqModLimit      = 8192    // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	maxIters        = 1 << 32 // MAX_ITER; 100000000 in 4.5
	maxTx           = 15000
	maxRx           = 16384
	maxCQMod        = 1024
	maxQPs          = 1024
	maxSize         = 1 << 30
	qpTimeout       = 14
	minRNRTimer     = 12
	hopLimit        = 0xFF
	softOutReads    = 128 // the software device's max_qp_rd_atom, as rxe's
	hwOutReads      = 16  // MAX_OUT_READ_HERMON, for devices whose limit goroce cannot query
	atomicAddValue  = 1   // ATOMIC_ADD_VALUE
	atomicSwapValue = 0   // ATOMIC_SWAP_VALUE
	resultLine      = "---------------------------------------------------------------------------------------\n"
	atomicCAS       = "CMP_AND_SWAP"
	atomicFetchAdd  = "FETCH_AND_ADD"
)

// options are roce perf's flags, with perftest's defaults and
// dependencies applied (init_perftest_params, force_dependecies).
type options struct {
	verb     verb
	lat      bool
	sizeStr  string
	size     int
	iters    int
	duration int // seconds; 0: iterations
	margin   int
	mtu      int
	qps      int
	atomic   string
	port     int
	rdmaCM   bool
	ipv6     bool // perftest 25's --ipv6-addr: SERVER's IPv6 address
	json     bool
	backend  string
	devName  string
	gidIdx   int
	txDepth  int
	cqMod    int
	rxDepth  int
	outReads int
	timeout  time.Duration
	dev      cli.DeviceFlags
	server   string

	cqModSet   bool
	noPeak     bool
	warnPeak   bool // perftest 25 warns that the peak will not be measured
	cpuProfile string

	mcg     bool     // --mcg: UD multicast (mcast.go)
	mgidStr string   // -M
	mgid    [16]byte // the group's GID
}

func (o *options) register(fs *cli.FlagSet) {
	o.dev.Register(fs)
	fs.Bool(&o.lat, false, "run the latency test (ib_*_lat) instead of the bandwidth one", "lat")
	fs.String(&o.sizeStr, "", "message `size` in bytes, K or M suffix allowed (default 65536, 2 with --lat, 8 for atomic)", "s", "size")
	fs.Int(&o.iters, 0, "`iterations` (default 5000 for write, else 1000; at least 5)", "n", "iters")
	fs.Int(&o.duration, 0, "run for `seconds` instead of a number of iterations", "D", "duration")
	fs.Int(&o.margin, -1, "with -D, `seconds` left out of the measurement at each end (default D/4)", "f", "margin")
	fs.Int(&o.mtu, 0, "path `MTU` (default: the port's active MTU)", "m", "mtu")
	fs.Int(&o.qps, 1, "number of QPs (bandwidth tests)", "q", "qp")
	fs.String(&o.atomic, atomicFetchAdd, "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD", "A", "atomic_type")
	fs.Int(&o.port, defPort, "TCP `port` of the exchange", "p", "port")
	fs.Bool(&o.rdmaCM, false, "connect the QPs with rdma_cm", "R", "rdma_cm")
	fs.Bool(&o.ipv6, false, "reach SERVER at its IPv6 address (the TCP exchange, or rdma_cm with -R), as perftest 25's --ipv6-addr", "ipv6-addr")
	fs.Bool(&o.json, false, "print one JSON object with the figures instead of the tables", "json")
	fs.String(&o.cpuProfile, "", "write a pprof CPU profile of the run to this `file` (go tool pprof)", "cpuprofile")
	fs.String(&o.backend, "soft", "`backend`: soft (goroce's engine) or hw (libibverbs: kernel rxe, an RNIC)", "backend")
	fs.String(&o.devName, "", "libibverbs device `name` (--backend hw; default the first)", "dev-name", "d", "ib-dev")
	fs.Int(&o.gidIdx, -1, "GID `index` of a hw device (default: perftest's choice)", "x", "gid-index")
	fs.Int(&o.txDepth, 0, "send queue `depth` (default 128, 1 with --lat)", "t", "tx-depth")
	fs.Int(&o.cqMod, 0, "signal every `N`th send (default 100)", "Q", "cq-mod")
	fs.Int(&o.rxDepth, 0, "receive queue `depth` (send tests; default 512)", "r", "rx-depth")
	fs.Int(&o.outReads, 0, "outstanding READs/atomics (default the device's)", "o", "outs")
	fs.Bool(nil, false, "accepted for compatibility (perftest's -F)", "F", "CPU-freq")
	fs.Bool(&o.mcg, false, "send to a multicast group the server's UD QP is attached to (send bandwidth test)", "g", "mcg")
	fs.String(&o.mgidStr, "", "the group's `MGID` with --mcg, as perftest reads it: 16 bytes separated by ':'\n"+
		"(0:0:0:0:0:0:0:0:0:0:255:255:239:255:0:1 is ::ffff:239.255.0.1; default ff01:0:0:2:c985::)", "M", "MGID")
	fs.Duration(&o.timeout, 2*time.Minute, "bound on the whole run, -D added: waiting for a peer, the exchange, the traffic", "timeout")
}

// tool names the perftest program this run plays.
func (o *options) tool() string {
	kind := "bw"
	if o.lat {
		kind = "lat"
	}
	return "ib_" + verbNames[o.verb] + "_" + kind
}

// run runs the test these options describe.
func (o *options) run(ctx context.Context, env *cli.Env) error {
	r := &session{o: o, out: env.Stdout, errOut: env.Stderr, log: o.dev.TraceLogger(env.Stderr)}
	o.dev.Net = env.MemNet
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return r.main(ctx)
}

// parseSize reads perftest's -s: a number with an optional K or M suffix.
func parseSize(s string) (int, error) {
	factor := 1
	switch {
	case strings.HasSuffix(s, "K"):
		factor, s = 1024, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		factor, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil || n < 0 || n > maxSize {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int(n) * factor, nil
}
