package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/internal/perfstat"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// perfUsage is the synopsis of roce perf.
const perfUsage = "{write|read|send|atomic} [--lat] [-s SIZE] [-n ITERS | -D SECS] [-m MTU] [-q QPS] " +
	"[-A CMP_AND_SWAP|FETCH_AND_ADD] [-p PORT] [-R] [--json] [--backend soft|hw] [--dev-name NAME] " +
	"[-t TXDEPTH] [-Q CQMOD] [-r RXDEPTH] [-o OUTREADS] [-x GIDIDX] [--bind ADDR] [--transport udp|afpacket] " +
	"[--timeout D] [-v] [SERVER]"

const perfHelp = `Runs perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw or, with --lat,
ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat (perftest 4.5), as server (no
SERVER argument) or client, over goroce's software RoCE device (--backend soft) or
libibverbs (--backend hw, a build with -tags hwverbs). Either end may be the real tool:
the TCP exchange on port 18515, the QP attributes and the traffic are perftest's, and
the results are printed in its tables (--json: one JSON object instead). RC only.
-d names the device as --dev-name does; -x picks the GID index of a hw device;
-F is accepted and ignored. A server without --bind uses the address the client
reached it at. The write latency test spins on memory as perftest's does: on the
software device it runs in busy-poll mode (--busy-poll 1ms) unless --busy-poll is given.
Like perftest, roce perf does one stream of work: it runs the Go scheduler on one
processor unless the GOMAXPROCS environment variable is set.`

// perfVerb is perftest's VerbType; the order matters to its output.
type perfVerb int

const (
	perfSend perfVerb = iota
	perfWrite
	perfRead
	perfAtomic
)

var perfVerbNames = [...]string{"send", "write", "read", "atomic"}

// perftest's constants (perftest_parameters.h, perftest_resources.h of
// v4.5-0.17).
const (
	perfPort          = 18515
	perfDefSizeBW     = 65536
	perfDefSizeLat    = 2
	perfDefItersWB    = 5000
	perfDefIters      = 1000
	perfDefTxBW       = 128
	perfDefTxLat      = 1
	perfDefRxSend     = 512
	perfDefCQMod      = 100
	perfCQModLimit    = 8192 // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	perfMaxIters      = 100000000
	perfMaxTx         = 15000
	perfMaxRx         = 16384
	perfMaxCQMod      = 1024
	perfMaxQPs        = 1024
	perfMaxSize       = 1 << 30
	perfQPTimeout     = 14
	perfMinRNRTimer   = 12
	perfHopLimit      = 0xFF
	perfSoftOutReads  = 128 // the software device's max_qp_rd_atom, as rxe's
	perfHWOutReads    = 16  // MAX_OUT_READ_HERMON, for devices whose limit goroce cannot query
	perfAtomicAdd     = 1   // ATOMIC_ADD_VALUE
	perfAtomicSwap    = 0   // ATOMIC_SWAP_VALUE
	perfResultLine    = "---------------------------------------------------------------------------------------\n"
	perfAtomicCAS     = "CMP_AND_SWAP"
	perfAtomicFetchAd = "FETCH_AND_ADD"
)

// perfOptions are roce perf's flags, with perftest's defaults and
// dependencies applied (init_perftest_params, force_dependecies).
type perfOptions struct {
	verb     perfVerb
	lat      bool
	size     int
	iters    int
	duration int // seconds; 0: iterations
	margin   int
	mtu      int
	qps      int
	atomic   string
	port     int
	rdmaCM   bool
	json     bool
	backend  string
	devName  string
	gidIdx   int
	txDepth  int
	cqMod    int
	rxDepth  int
	outReads int
	timeout  time.Duration
	dev      devFlags
	server   string

	cqModSet   bool
	noPeak     bool
	cpuProfile string
}

// runPerf is the perf command: perftest's bandwidth and latency tests in
// either role.
func runPerf(args []string, stdout, stderr io.Writer) int {
	oneProc()
	return perfMain(args, stdout, stderr, nil)
}

func perfMain(args []string, stdout, stderr io.Writer, env *toolEnv) int {
	return toolCommand("perf", perfUsage, perfHelp, parsePerf, args, stdout, stderr, env)
}

// run runs the test these options describe.
func (o *perfOptions) run(stdout, stderr io.Writer, env *toolEnv) error {
	r := &perfRun{o: o, env: env, out: stdout}
	if o.dev.trace {
		r.log = newStepLogger(stderr)
	}
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
	return r.main()
}

func parsePerf(args []string) (*perfOptions, *flag.FlagSet, error) {
	o := &perfOptions{}
	fs := newFlagSet("perf")
	o.dev.register(fs)
	var sizeStr string
	toolBoolFlag(fs, &o.lat, "run the latency test (ib_*_lat) instead of the bandwidth one", "lat")
	toolStringFlag(fs, &sizeStr, "", "message `size` in bytes, K or M suffix allowed (default 65536, 2 with --lat, 8 for atomic)", "s", "size")
	toolIntFlag(fs, &o.iters, 0, "`iterations` (default 5000 for write, else 1000; at least 5)", "n", "iters")
	toolIntFlag(fs, &o.duration, 0, "run for `seconds` instead of a number of iterations", "D", "duration")
	toolIntFlag(fs, &o.margin, -1, "with -D, `seconds` left out of the measurement at each end (default D/4)", "f", "margin")
	toolIntFlag(fs, &o.mtu, 0, "path `MTU` (default: the port's active MTU)", "m", "mtu")
	toolIntFlag(fs, &o.qps, 1, "number of QPs (bandwidth tests)", "q", "qp")
	toolStringFlag(fs, &o.atomic, perfAtomicFetchAd, "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD", "A", "atomic_type")
	toolIntFlag(fs, &o.port, perfPort, "TCP `port` of the exchange", "p", "port")
	toolBoolFlag(fs, &o.rdmaCM, "connect the QPs with rdma_cm", "R", "rdma_cm")
	toolBoolFlag(fs, &o.json, "print one JSON object with the figures instead of the tables", "json")
	toolStringFlag(fs, &o.cpuProfile, "", "write a pprof CPU profile of the run to this `file` (go tool pprof)", "cpuprofile")
	toolStringFlag(fs, &o.backend, "soft", "`backend`: soft (goroce's engine) or hw (libibverbs: kernel rxe, an RNIC)", "backend")
	toolStringFlag(fs, &o.devName, "", "libibverbs device `name` (--backend hw; default the first)", "dev-name", "d", "ib-dev")
	toolIntFlag(fs, &o.gidIdx, -1, "GID `index` of a hw device (default: perftest's choice)", "x", "gid-index")
	toolIntFlag(fs, &o.txDepth, 0, "send queue `depth` (default 128, 1 with --lat)", "t", "tx-depth")
	toolIntFlag(fs, &o.cqMod, 0, "signal every `N`th send (default 100)", "Q", "cq-mod")
	toolIntFlag(fs, &o.rxDepth, 0, "receive queue `depth` (send tests; default 512)", "r", "rx-depth")
	toolIntFlag(fs, &o.outReads, 0, "outstanding READs/atomics (default the device's)", "o", "outs")
	var cpuFreq bool
	toolBoolFlag(fs, &cpuFreq, "accepted for compatibility (perftest's -F)", "F", "CPU-freq")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound on the whole run, -D added: waiting for a peer, the exchange, the traffic")
	if err := parseTool(fs, args); err != nil {
		return nil, fs, err
	}
	set := toolFlagsSet(fs)
	if fs.NArg() == 0 {
		return nil, fs, usageErr("which test? write, read, send or atomic")
	}
	found := false
	for i, n := range perfVerbNames {
		if fs.Arg(0) == n {
			o.verb, found = perfVerb(i), true
		}
	}
	if !found {
		return nil, fs, usageErr("unknown test %q (want write, read, send or atomic)", fs.Arg(0))
	}
	switch fs.NArg() {
	case 1:
	case 2:
		o.server = fs.Arg(1)
	default:
		return nil, fs, usageErr("one SERVER at most, got %q", fs.Args()[1:])
	}
	if err := o.defaults(set, sizeStr); err != nil {
		return nil, fs, err
	}
	return o, fs, nil
}

// defaults applies perftest's defaults and dependencies and checks the
// values as its parser does.
func (o *perfOptions) defaults(set map[string]bool, sizeStr string) error {
	if o.lat {
		o.size = perfDefSizeLat
	} else {
		o.size = perfDefSizeBW
	}
	if o.verb == perfAtomic {
		o.size = 8
	}
	if sizeStr != "" {
		n, err := perfParseSize(sizeStr)
		if err != nil || n < 1 || n > perfMaxSize {
			return usageErr("-s must be 1 to %d bytes (K and M suffixes allowed), not %q", perfMaxSize, sizeStr)
		}
		if o.verb == perfAtomic && n != 8 {
			return usageErr("message size cannot be changed for atomic tests")
		}
		o.size = n
	}
	if !toolAnySet(set, "n", "iters") {
		o.iters = perfDefIters
		if o.verb == perfWrite && !o.lat {
			o.iters = perfDefItersWB
		}
	} else if o.iters < perfstat.MinIters || o.iters > perfMaxIters {
		return usageErr("-n should be between %d and %d", perfstat.MinIters, perfMaxIters)
	}
	if o.lat && o.verb == perfWrite && o.backend == "soft" && !set["busy-poll"] {
		// perftest's write latency test spins on the buffer the peer
		// writes; on the software device, spinning means busy-poll mode,
		// where the spinning thread receives too (--busy-poll 0: sleep).
		o.dev.busyPoll = time.Millisecond
	}
	if toolAnySet(set, "D", "duration") {
		if toolAnySet(set, "n", "iters") {
			return usageErr("-n and -D exclude each other")
		}
		if o.duration < 1 {
			return usageErr("-D must be a positive number of seconds")
		}
		if o.margin < 0 {
			o.margin = o.duration / 4
		}
		if o.duration <= 2*o.margin {
			return usageErr("-D must be more than twice the margin (-f %d)", o.margin)
		}
	} else if toolAnySet(set, "f", "margin") {
		return usageErr("-f applies to -D only")
	}
	switch {
	case o.port < 1 || o.port > 65535:
		return usageErr("-p must be 1-65535")
	case o.qps < 1 || o.qps > perfMaxQPs:
		return usageErr("-q must be 1 to %d", perfMaxQPs)
	case o.lat && o.qps != 1:
		return usageErr("multiple QPs only available on bw tests")
	case o.backend != "soft" && o.backend != "hw":
		return usageErr("--backend must be soft or hw, not %q", o.backend)
	case o.timeout <= 0:
		return usageErr("--timeout must be positive")
	case toolAnySet(set, "A", "atomic_type") && o.verb != perfAtomic:
		return usageErr("-A applies to the atomic test only")
	case o.atomic != perfAtomicCAS && o.atomic != perfAtomicFetchAd:
		return usageErr("invalid atomic type %q: choose CMP_AND_SWAP or FETCH_AND_ADD", o.atomic)
	case toolAnySet(set, "o", "outs") && o.verb != perfRead && o.verb != perfAtomic:
		return usageErr("-o applies to the read and atomic tests only")
	case toolAnySet(set, "o", "outs") && (o.outReads < 1 || o.outReads > 255):
		return usageErr("-o must be 1 to 255")
	case toolAnySet(set, "x", "gid-index") && (o.gidIdx < 0 || o.gidIdx > 64):
		return usageErr("-x should be between 0 and 64")
	}
	if o.mtu != 0 {
		if m, ok := roce.MTUFromBytes(o.mtu); !ok || m.Bytes() != o.mtu {
			return usageErr("-m must be 256, 512, 1024, 2048 or 4096, not %d", o.mtu)
		}
	}
	if !toolAnySet(set, "t", "tx-depth") {
		o.txDepth = perfDefTxBW
		if o.lat {
			o.txDepth = perfDefTxLat
		}
	} else if o.txDepth < 1 || o.txDepth > perfMaxTx {
		return usageErr("-t should be between 1 and %d", perfMaxTx)
	}
	if !toolAnySet(set, "r", "rx-depth") {
		o.rxDepth = 1
		if o.verb == perfSend {
			o.rxDepth = perfDefRxSend
		}
	} else if o.rxDepth < 1 || o.rxDepth > perfMaxRx {
		return usageErr("-r should be between 1 and %d", perfMaxRx)
	} else if o.verb != perfSend && o.rxDepth > 1 {
		return usageErr("on RDMA verbs rx depth can be only 1")
	}
	o.cqModSet = toolAnySet(set, "Q", "cq-mod")
	if !o.cqModSet {
		o.cqMod = perfDefCQMod
	} else if o.cqMod < 1 || o.cqMod > perfMaxCQMod {
		return usageErr("-Q should be between 1 and %d", perfMaxCQMod)
	}
	// force_dependecies.
	if o.duration == 0 {
		o.txDepth = min(o.txDepth, o.iters)
		if o.verb == perfSend {
			o.rxDepth = min(o.rxDepth, o.iters)
		}
	} else {
		o.iters = 0
		o.noPeak = true
	}
	if o.size > perfCQModLimit && !o.cqModSet {
		o.cqMod = 1
	}
	o.cqMod = min(o.cqMod, o.txDepth)
	if o.verb == perfSend && !o.lat && o.server == "" {
		o.noPeak = true
	}
	if o.rdmaCM && o.backend == "hw" {
		return usageErr("-R needs --backend soft (a libibverbs device's rdma_cm belongs to librdmacm)")
	}
	if o.rdmaCM && o.server == "" && o.dev.bind == "" {
		return usageErr("a -R server needs --bind: no TCP connection tells it its address")
	}
	return nil
}

// perfParseSize reads perftest's -s: a number with an optional K or M suffix.
func perfParseSize(s string) (int, error) {
	factor := 1
	switch {
	case strings.HasSuffix(s, "K"):
		factor, s = 1024, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		factor, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil || n < 0 || n > perfMaxSize {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int(n) * factor, nil
}

// perfRun is one run of roce perf.
type perfRun struct {
	o    *perfOptions
	env  *toolEnv
	out  io.Writer
	log  *slog.Logger
	ctx  context.Context
	role oob.Role

	dev    roce.Device
	soft   *roce.SoftDevice // nil on a libibverbs device
	devNm  string
	pd     roce.PD
	sendCQ roce.CQ
	recvCQ roce.CQ
	qps    []roce.QP
	mr     roce.MR
	buf    []byte
	bufSz  int // BUFF_SIZE: each QP's send area and receive area
	mtu    roce.MTU
	sys    oob.SysData
	gidIdx int
	spin   time.Duration
	// progress drives a busy-polled software device's receive path from
	// a thread that spins on memory (write latency); nil otherwise.
	progress func() int

	local  []oob.PerftestDest
	remote []oob.PerftestDest
	pt     perfExchange
	cm     *perfCM // -R

	result *perfResult
}

// tool names the perftest program this run plays.
func (o *perfOptions) tool() string {
	kind := "bw"
	if o.lat {
		kind = "lat"
	}
	return "ib_" + perfVerbNames[o.verb] + "_" + kind
}

func (r *perfRun) main() error {
	o := r.o
	if r.env != nil && r.env.memNet != nil {
		o.dev.memNet = r.env.memNet
	}
	if o.backend == "soft" {
		if _, err := o.dev.config(""); err != nil {
			return err
		}
	} else if !hwverbs.Built {
		return fmt.Errorf("--backend hw: %w", hwverbs.ErrNotBuilt)
	}
	limit := o.timeout + time.Duration(o.duration)*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	r.ctx = ctx
	err := r.run()
	r.closeCM()
	if r.dev != nil {
		r.dev.Close()
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (gave up after --timeout %v)", err, limit)
	}
	return err
}

func (r *perfRun) print(format string, args ...any) {
	if !r.o.json {
		fmt.Fprintf(r.out, format, args...)
	}
}

func (r *perfRun) oobConfig() *oob.Config {
	return &oob.Config{Timeout: r.o.timeout, Logger: r.log}
}

func (r *perfRun) run() error {
	o := r.o
	var err error
	r.role = oob.Server
	if o.server != "" {
		r.role = oob.Client
	}
	if o.rdmaCM {
		if err := r.openDevice(nil); err != nil {
			return err
		}
		if err := r.openCM(); err != nil {
			return err
		}
		r.pt = r.cm
	} else {
		var conn net.Conn
		if r.role == oob.Client {
			hostPort := net.JoinHostPort(o.server, strconv.Itoa(o.port))
			if conn, err = oob.Dial(r.ctx, hostPort, r.oobConfig()); err != nil {
				return fmt.Errorf("couldn't connect to %s: %w", hostPort, err)
			}
		} else {
			ln, err := listenTool(o.port)
			if err != nil {
				return err
			}
			r.print("\n************************************\n* Waiting for client to connect... *\n************************************\n")
			conn, err = oob.Accept(r.ctx, ln, r.oobConfig())
			ln.Close()
			if err != nil {
				return fmt.Errorf("no client connected: %w", err)
			}
		}
		defer conn.Close()
		if err := r.openDevice(conn); err != nil {
			return err
		}
		r.pt = oob.NewPerftest(conn, r.role, r.oobConfig())
	}
	if _, err := r.pt.ExchangeVersions(r.ctx); err != nil {
		return err
	}
	if r.sys, err = r.pt.CheckSysData(r.ctx, oob.DefaultSysData); err != nil {
		return err
	}
	mtu := r.dev.ActiveMTU()
	if o.mtu != 0 {
		if m, _ := roce.MTUFromBytes(o.mtu); m < mtu {
			mtu = m
		}
	}
	agreed, err := r.pt.CheckMTU(r.ctx, oob.MTU(mtu))
	if err != nil {
		return err
	}
	r.mtu = roce.MTU(agreed)
	if err := r.setup(); err != nil {
		return err
	}
	if o.rdmaCM {
		if err := r.connectCM(); err != nil {
			return err
		}
	}
	r.printHeader()
	switch {
	case !o.lat && o.verb != perfSend:
		return r.flowBW()
	case !o.lat:
		return r.flowSendBW()
	case o.verb == perfSend:
		return r.flowSendLat()
	case o.verb == perfWrite:
		return r.flowWriteLat()
	}
	return r.flowReadLat()
}

// openDevice opens the backend's device: at --bind, or else the address
// routing to the server (client) or the one the client reached (server).
func (r *perfRun) openDevice(conn net.Conn) error {
	o := r.o
	var addr netip.Addr
	var err error
	switch {
	case o.dev.bind != "":
		if addr, err = resolveAddr(o.dev.bind); err != nil {
			return usageErr("--bind: %v", err)
		}
	case o.backend == "hw":
	case r.role == oob.Client:
		if addr, err = toolRouteSource(o.server); err != nil {
			return err
		}
	case conn != nil:
		addr = toolConnAddr(conn)
	}
	if o.backend == "hw" {
		cfg := &hwverbs.Config{GIDAddr: addr}
		if o.gidIdx > 0 {
			cfg.GIDIndex = o.gidIdx
		}
		hw, err := hwverbs.Open(o.devName, cfg)
		if err != nil {
			return fmt.Errorf("--backend hw: %w", err)
		}
		r.dev, r.devNm, r.gidIdx, r.spin = hw, hw.Name(), hw.GIDIndex(), -1
		if o.dev.trace {
			r.dev = roce.Trace(hw, r.log)
		}
		return nil
	}
	dev, soft, err := toolDevice(&o.dev, r.env, addr, r.role == oob.Client, r.log)
	if err != nil {
		return err
	}
	r.dev, r.soft, r.devNm, r.spin = dev, soft, soft.Name(), o.dev.busyPoll
	if r.spin != 0 {
		r.progress = soft.Progress
	}
	r.gidIdx = max(o.gidIdx, 0)
	return nil
}

// setup makes ctx_init's resources: a PD, the CQs, the QPs in INIT, one
// buffer with a send area and a receive area per QP, registered once,
// and the local handshake entries.
func (r *perfRun) setup() error {
	o := r.o
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	cycle := int(max(r.sys.CycleBuffer, 64))
	r.bufSz = max(o.size, cycle)
	r.buf = make([]byte, 2*o.qps*r.bufSz)
	access := roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return err
	}
	if r.sendCQ, err = r.dev.CreateCQ(o.txDepth * o.qps); err != nil {
		return err
	}
	r.recvCQ = r.sendCQ
	if o.verb == perfSend {
		if r.recvCQ, err = r.dev.CreateCQ(o.rxDepth * o.qps); err != nil {
			return err
		}
	}
	outReads := 1
	if o.verb == perfRead || o.verb == perfAtomic {
		outReads = perfSoftOutReads
		if o.backend == "hw" {
			outReads = perfHWOutReads
		}
		if o.outReads > 0 {
			outReads = o.outReads
		}
	}
	gid, err := r.dev.GID(0)
	if err != nil {
		return err
	}
	for i := range o.qps {
		q, err := r.pd.CreateQP(&roce.QPInitAttr{Type: roce.RC, SendCQ: r.sendCQ, RecvCQ: r.recvCQ,
			Cap: roce.QPCap{MaxSendWR: uint32(o.txDepth), MaxRecvWR: uint32(o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		if err := roce.ModifyToInit(q, r.params(nil)); err != nil {
			return err
		}
		r.qps = append(r.qps, q)
		r.local = append(r.local, oob.PerftestDest{OutReads: uint16(outReads), QPN: q.QPN(), PSN: toolPSN(),
			RKey: r.mr.RKey(), VAddr: r.mr.Addr() + uint64((o.qps+i)*r.bufSz), GID: gid})
	}
	return nil
}

// params are the attributes perftest gives its QPs (ctx_modify_qp_to_*):
// remote rights by test, min RNR timer 12, timeout 14, 7 retries, hop
// limit 0xFF, READ/atomic depths from the handshakes.
func (r *perfRun) params(peer *oob.PerftestDest) *roce.ConnParams {
	o := r.o
	c := &roce.ConnParams{MTU: r.mtu, Timeout: perfQPTimeout, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: perfMinRNRTimer,
		HopLimit: perfHopLimit, SGIDIndex: 0, MaxRDAtomic: 1, MaxDestRDAtomic: 1}
	switch o.verb {
	case perfWrite:
		c.Access = roce.RemoteWrite | roce.LocalWrite
	case perfRead:
		c.Access = roce.RemoteRead | roce.LocalWrite
	case perfAtomic:
		c.Access = roce.RemoteAtomic | roce.LocalWrite
	case perfSend:
		c.Access = roce.RemoteWrite | roce.LocalWrite
	}
	if len(r.local) > 0 {
		c.MaxDestRDAtomic = uint8(max(r.local[0].OutReads, 1))
	}
	if peer != nil {
		c.MaxRDAtomic = uint8(max(min(peer.OutReads, 255), 1))
	}
	return c
}

// connect trades the QPs' entries with the peer, then moves QP i to RTR
// towards the peer's entry, and on to RTS for a side that sends
// (ctx_connect: a bandwidth server stays in RTR).
func (r *perfRun) connect() error {
	var err error
	if r.remote, err = r.pt.ExchangeDests(r.ctx, r.local); err != nil {
		return err
	}
	if r.o.rdmaCM { // rdma_cm has connected them
		return nil
	}
	rts := r.o.lat || r.role == oob.Client
	for i, q := range r.qps {
		d := &r.remote[i]
		p := r.params(d)
		p.PSN = r.local[i].PSN
		rem := &roce.Remote{QPN: d.QPN, PSN: d.PSN, GID: d.GID}
		if err := roce.ModifyToRTR(q, rem, p); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTR: %w", q.QPN(), err)
		}
		if rts {
			if err := roce.ModifyToRTS(q, p); err != nil {
				return fmt.Errorf("failed to modify QP %d to RTS: %w", q.QPN(), err)
			}
		}
	}
	return nil
}

// exchangeAndPrint runs the handshakes whose answers perftest prints:
// the local entries first, then the peer's as they come back.
func (r *perfRun) exchangeAndPrint() error {
	for i := range r.local {
		r.printDest("local", &r.local[i])
	}
	for i := range r.local {
		d, err := r.pt.HandShake(r.ctx, r.local[i])
		if err != nil {
			return err
		}
		r.printDest("remote", &d)
	}
	return nil
}

// rdmaPrologue is what ib_write_bw, ib_read_bw and ib_atomic_bw do
// before the traffic (and the latency tests after latPrologue's first
// handshake): the entries and the connection, the printed entries, a
// barrier.
func (r *perfRun) rdmaPrologue() error {
	if err := r.connect(); err != nil {
		return err
	}
	if err := r.exchangeAndPrint(); err != nil {
		return err
	}
	return r.pt.Barrier(r.ctx) // after moving the QPs to RTR
}

// sendPrologue is what ib_send_bw and ib_send_lat do before the
// traffic: the entries and the connection, a barrier, then the printed
// entries.
func (r *perfRun) sendPrologue() error {
	if err := r.connect(); err != nil {
		return err
	}
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	return r.exchangeAndPrint()
}

// record keeps res as the run's result and prints its table row.
func (r *perfRun) record(res *perfResult) {
	r.result = res
	if res.bw != nil {
		r.printBW(res.bw)
	} else {
		r.printLat(res)
	}
}

// lineThenClose ends a run as ib_send_bw and ib_send_lat do: the line
// under the results, then the closing exchange, then the JSON object
// (--json).
func (r *perfRun) lineThenClose() error {
	r.print(perfResultLine)
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	return r.printJSON()
}

// closeThenLine ends a run as ib_read_lat, ib_atomic_lat and a bandwidth
// server do: the closing exchange, then the line under the results, then
// the JSON object (--json).
func (r *perfRun) closeThenLine() error {
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	r.print(perfResultLine)
	return r.printJSON()
}

// flowBW is ib_write_bw, ib_read_bw and ib_atomic_bw.
func (r *perfRun) flowBW() error {
	if err := r.rdmaPrologue(); err != nil {
		return err
	}
	r.printBWTitle()
	if r.role == oob.Server {
		// The server waits for the client's traffic to end, then prints
		// the client's report.
		if err := r.pt.Barrier(r.ctx); err != nil {
			return err
		}
		rep, err := r.pt.ExchangeBWReports(r.ctx, oob.BWReport{})
		if err != nil {
			return err
		}
		r.record(&perfResult{bw: &perfBW{size: rep.Size, iters: rep.Iters, peak: rep.BWPeak, avg: rep.BWAvg,
			rate: rep.MsgRateAvg}, fromPeer: true})
		return r.closeThenLine()
	}
	res, err := r.runBWClient()
	if err != nil {
		return err
	}
	r.record(res)
	r.print(perfResultLine)
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	if _, err := r.pt.ExchangeBWReports(r.ctx, res.bw.report()); err != nil {
		return err
	}
	if err := r.pt.CloseConnection(r.ctx); err != nil {
		return err
	}
	return r.printJSON()
}

// flowSendBW is ib_send_bw.
func (r *perfRun) flowSendBW() error {
	if err := r.sendPrologue(); err != nil {
		return err
	}
	r.printBWTitle()
	if r.role == oob.Server {
		if err := r.postRecvs(); err != nil {
			return err
		}
	}
	if err := r.pt.Barrier(r.ctx); err != nil {
		return err
	}
	var res *perfResult
	var err error
	if r.role == oob.Client {
		res, err = r.runBWClient()
	} else {
		res, err = r.runBWServer()
	}
	if err != nil {
		return err
	}
	r.record(res)
	return r.lineThenClose()
}

// flowSendLat is ib_send_lat.
func (r *perfRun) flowSendLat() error {
	if err := r.sendPrologue(); err != nil {
		return err
	}
	r.printLatTitle()
	if err := r.postRecvs(); err != nil {
		return err
	}
	if err := r.pt.Barrier(r.ctx); err != nil { // the peer's receives are posted
		return err
	}
	res, err := r.runLatSend()
	if err != nil {
		return err
	}
	r.record(res)
	return r.lineThenClose()
}

// flowWriteLat is ib_write_lat, which ends without a closing exchange.
func (r *perfRun) flowWriteLat() error {
	if err := r.latPrologue(); err != nil {
		return err
	}
	r.printLatTitle()
	res, err := r.runLatWrite()
	if err != nil {
		return err
	}
	r.record(res)
	r.print(perfResultLine)
	lingerAfterRun(r.ctx, r.soft)
	return r.printJSON()
}

// flowReadLat is ib_read_lat and ib_atomic_lat: only the client works;
// the server closes at once.
func (r *perfRun) flowReadLat() error {
	if err := r.latPrologue(); err != nil {
		return err
	}
	if r.role == oob.Server {
		return r.closeThenLine()
	}
	r.printLatTitle()
	res, err := r.runLatRead()
	if err != nil {
		return err
	}
	r.record(res)
	return r.closeThenLine()
}

// latPrologue is what ib_write_lat, ib_read_lat and ib_atomic_lat do
// before the traffic: a handshake of the first entry, then rdmaPrologue.
func (r *perfRun) latPrologue() error {
	if _, err := r.pt.HandShake(r.ctx, r.local[0]); err != nil {
		return err
	}
	return r.rdmaPrologue()
}
