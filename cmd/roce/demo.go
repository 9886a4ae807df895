package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
)

const demoUsage = "[--transport udp|mem|afpacket] [--ops LIST] [--size BYTES] [--count N] [--mtu N] " +
	"[--loss P] [--dup P] [--reorder P] [--seed N] [-v]"

// demoOp is one operation the demo runs.
type demoOp struct {
	name string
	op   roce.WROpcode
	recv bool // the server posts a receive for it
}

var demoOps = []demoOp{
	{"send", roce.OpSend, true},
	{"send_imm", roce.OpSendImm, true},
	{"write", roce.OpWrite, false},
	{"write_imm", roce.OpWriteImm, true},
	{"read", roce.OpRead, false},
	{"fetch_add", roce.OpAtomicFetchAdd, false},
	{"cmp_swap", roce.OpAtomicCmpSwp, false},
}

type demoConfig struct {
	dev     devFlags
	ops     string
	size    int
	count   int
	mtu     int
	depth   int
	loss    float64
	dup     float64
	reorder float64
	seed    uint64
	timeout time.Duration
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	var c demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	c.dev.register(fs)
	fs.StringVar(&c.ops, "ops", "all", "comma-separated `operations`: send, send_imm, write, write_imm, read, fetch_add, cmp_swap (or all)")
	fs.IntVar(&c.size, "size", 65536, "message size in `bytes` (atomics are 8)")
	fs.IntVar(&c.count, "count", 64, "messages per operation")
	fs.IntVar(&c.mtu, "mtu", 4096, "path MTU: 256, 512, 1024, 2048 or 4096")
	fs.IntVar(&c.depth, "depth", 16, "work requests in flight")
	fs.Float64Var(&c.loss, "loss", 0, "drop this fraction of packets (0-1), both ways")
	fs.Float64Var(&c.dup, "dup", 0, "duplicate this fraction of packets")
	fs.Float64Var(&c.reorder, "reorder", 0, "reorder this fraction of packets")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the fault injection and of the data")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: roce demo %s\n\nRuns a server and a client in one process, over loopback, and checks every operation.\n\n", demoUsage)
			printDefaults(fs, stdout)
			return exitOK
		}
		return exitCode(stderr, "demo", err)
	}
	if fs.NArg() > 0 {
		return exitCode(stderr, "demo", usageErr("unexpected argument %q", fs.Arg(0)))
	}
	portSet := false
	fs.Visit(func(f *flag.Flag) { portSet = portSet || f.Name == "roce-port" })
	return exitCode(stderr, "demo", demo(&c, portSet, stdout, stderr))
}

func (c *demoConfig) check() ([]demoOp, roce.MTU, error) {
	var ops []demoOp
	for _, name := range strings.Split(c.ops, ",") {
		name = strings.TrimSpace(strings.ToLower(name))
		found := false
		for _, o := range demoOps {
			if name == "all" || name == o.name || name == "atomic" && o.op.IsAtomic() {
				ops = append(ops, o)
				found = true
			}
		}
		if !found {
			return nil, 0, usageErr("--ops: unknown operation %q (want send, send_imm, write, write_imm, read, fetch_add, cmp_swap or all)", name)
		}
	}
	mtu, ok := roce.MTUFromBytes(c.mtu)
	if !ok || mtu.Bytes() != c.mtu {
		return nil, 0, usageErr("--mtu must be 256, 512, 1024, 2048 or 4096, not %d", c.mtu)
	}
	switch {
	case c.size < 0 || c.size > 64<<20:
		return nil, 0, usageErr("--size must be 0 to 64 MiB")
	case c.count < 1:
		return nil, 0, usageErr("--count must be at least 1")
	case c.depth < 1 || c.depth > 256:
		return nil, 0, usageErr("--depth must be 1 to 256")
	}
	for _, p := range []float64{c.loss, c.dup, c.reorder} {
		if p < 0 || p >= 1 {
			return nil, 0, usageErr("--loss, --dup and --reorder are fractions from 0 to below 1 (0.05 is 5%%)")
		}
	}
	return ops, mtu, nil
}

// demoSide is one end of the demo connection.
type demoSide struct {
	name string
	dev  roce.Device
	soft *roce.SoftDevice
	pd   roce.PD
	cq   roce.CQ
	qp   roce.QP
	mr   roce.MR
}

func demo(c *demoConfig, portSet bool, stdout, stderr io.Writer) error {
	ops, mtu, err := c.check()
	if err != nil {
		return err
	}
	faults := transport.Faults{Drop: c.loss, Duplicate: c.dup, Reorder: c.reorder}
	var log *slog.Logger
	if c.dev.trace {
		log = newStepLogger(stderr)
	}
	if c.dev.transport == "mem" {
		// The in-process network, made before the configurations that
		// join it.
		n := memNetwork(faults, c.seed)
		defer n.Close()
		c.dev.memNet = n
		faults = transport.Faults{}
	}
	cfgS, err := c.dev.config("")
	if err != nil {
		return err
	}
	cfgC := *cfgS
	switch c.dev.transport {
	case "udp":
		cfgS.Addr, cfgC.Addr = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
		if c.dev.bind != "" {
			return usageErr("--bind does not apply to the udp demo: it uses 127.0.0.1 and 127.0.0.2")
		}
		if !portSet {
			p, err := freeDemoPort()
			if err != nil {
				return err
			}
			cfgS.Port, cfgS.PeerPort, cfgC.Port, cfgC.PeerPort = p, p, p, p
		}
	case "mem":
		cfgS.Addr, cfgC.Addr = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	case "afpacket":
		if c.dev.dev == "" {
			cfgS.Interface, cfgC.Interface = "lo", "lo"
		}
		if !cfgS.Addr.IsValid() {
			cfgS.Addr = netip.MustParseAddr("127.0.0.1")
		}
		cfgC.Addr = cfgS.Addr.Next()
	}
	cfgS.Faults, cfgS.FaultSeed = faults, c.seed
	cfgC.Faults, cfgC.FaultSeed = faults, c.seed+1
	if cfgS.Pcap != "" {
		cfgC.Pcap = strings.TrimSuffix(cfgS.Pcap, ".pcap") + ".client.pcap"
	}
	server, err := openDemoSide("server", &c.dev, cfgS, log, c)
	if err != nil {
		return err
	}
	defer server.dev.Close()
	client, err := openDemoSide("client", &c.dev, &cfgC, log, c)
	if err != nil {
		return err
	}
	defer client.dev.Close()
	mtu = min(mtu, server.dev.ActiveMTU())
	params := func(psn uint32) *roce.ConnParams {
		return &roce.ConnParams{MTU: mtu, PSN: psn, MaxRDAtomic: 16, MaxDestRDAtomic: 16}
	}
	step(log, roce.StepControl, "connect: exchange QPN, PSN and GID (in process) and move both QPs to RTS")
	gS, _ := server.dev.GID(0)
	gC, _ := client.dev.GID(0)
	if err := roce.Connect(server.qp, &roce.Remote{QPN: client.qp.QPN(), PSN: 0x1000, GID: gC}, params(0x2000)); err != nil {
		return err
	}
	if err := roce.Connect(client.qp, &roce.Remote{QPN: server.qp.QPN(), PSN: 0x2000, GID: gS}, params(0x1000)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "goroce demo: server %v QP %d, client %v QP %d, over %s (port %d), path MTU %d, %d x %d B per operation\n",
		cfgS.Addr, server.qp.QPN(), cfgC.Addr, client.qp.QPN(), c.dev.transport, cfgS.Port, mtu.Bytes(), c.count, c.size)
	if faults.Any() || c.dev.transport == "mem" && (c.loss > 0 || c.dup > 0 || c.reorder > 0) {
		fmt.Fprintf(stdout, "faults: %.1f%% loss, %.1f%% duplicates, %.1f%% reordering (seed %d)\n",
			c.loss*100, c.dup*100, c.reorder*100, c.seed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var verified, nops int64
	for _, o := range ops {
		start := time.Now()
		n, err := runDemoOp(ctx, c, o, client, server)
		if err != nil {
			return fmt.Errorf("%s: %w", strings.ToUpper(o.name), err)
		}
		d := time.Since(start)
		size := c.size
		if o.op.IsAtomic() {
			size = 8
		}
		fmt.Fprintf(stdout, "%-20v %5d x %8d B  %10s  %9.3f ms  %9.1f MB/s  verified\n", o.op, c.count, size,
			humanBytes(n), float64(d.Microseconds())/1000, float64(n)/d.Seconds()/1e6)
		verified += n
		nops += int64(c.count)
	}
	var retrans, naks uint64
	for _, s := range []*demoSide{server, client} {
		st := s.soft.Stats()
		retrans += st.Retransmits
		naks += st.RcvdSeqErr + st.RcvdRNRErr + st.RcvdInvReqNAK + st.RcvdRemAccessNAK + st.RcvdRemOpNAK
	}
	fmt.Fprintf(stdout, "verified %d bytes in %d operations; %d packets retransmitted; %d NAKs seen\n",
		verified, nops, retrans, naks)
	return nil
}

func openDemoSide(name string, df *devFlags, cfg *roce.Config, log *slog.Logger, c *demoConfig) (*demoSide, error) {
	s := &demoSide{name: name}
	var l *slog.Logger
	if log != nil {
		l = log.With("who", name)
	}
	soft, err := roce.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, explainOpen(cfg, err))
	}
	s.soft, s.dev = soft, soft
	if df.trace {
		s.dev = roce.Trace(soft, l)
	}
	fail := func(err error) (*demoSide, error) {
		s.dev.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = s.dev.CreateCQ(4 * c.depth); err != nil {
		return fail(err)
	}
	if s.qp, err = s.pd.CreateQP(&roce.QPInitAttr{Type: roce.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: roce.QPCap{MaxSendWR: uint32(c.depth), MaxRecvWR: uint32(c.depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	// Two slots per request in flight (source and destination), and room
	// for the atomic counter.
	if s.mr, err = s.pd.RegMR(make([]byte, 2*c.depth*max(c.size, 8)+64), roce.LocalWrite|roce.RemoteAccess); err != nil {
		return fail(err)
	}
	return s, nil
}

// runDemoOp runs c.count operations o from client to server, c.depth at
// a time, and checks every byte and completion. It returns the bytes
// checked.
func runDemoOp(ctx context.Context, c *demoConfig, o demoOp, client, server *demoSide) (int64, error) {
	size := c.size
	if o.op.IsAtomic() {
		size = 8
	}
	counter := uint64(2 * c.depth * max(c.size, 8)) // offset of the atomic counter in the server's region
	if o.op.IsAtomic() {
		binary.NativeEndian.PutUint64(server.mr.Bytes()[counter:], 0)
		syncMR(server.mr)
	}
	pattern := func(i int) []byte {
		r := rand.New(rand.NewPCG(c.seed, uint64(o.op)<<32|uint64(i)))
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		return b
	}
	slot := func(i int) uint64 { return uint64(i%c.depth) * uint64(size) }
	mine := func(i int) uint64 { return uint64(c.depth*size) + slot(i) } // client's result slot
	var readSrc [][]byte
	if o.op == roce.OpRead {
		for k := range c.depth {
			readSrc = append(readSrc, pattern(k))
			copy(server.mr.Bytes()[slot(k):], readSrc[k])
		}
		syncMR(server.mr)
	}
	var checked int64
	posted, doneC, doneS := 0, 0, 0
	want := make(map[int][]byte, c.depth)
	post := func() error {
		i := posted
		// This request lets the server's engine write slot(i) again, where
		// this goroutine checked request i-depth: order the check first
		// (the request reaches the server's device through the sockets).
		syncMR(server.mr)
		wr := roce.SendWR{ID: uint64(i), Opcode: o.op, Flags: roce.Signaled, Imm: uint32(i),
			RemoteAddr: server.mr.Addr() + slot(i), RKey: server.mr.RKey()}
		src := client.mr.Bytes()[slot(i) : slot(i)+uint64(size)]
		switch o.op {
		case roce.OpRead:
			// The server's slots were filled before the first READ: the
			// demo never rewrites memory a peer may still be reading (a
			// late duplicate READ re-reads it).
			want[i] = readSrc[i%c.depth]
			clear(client.mr.Bytes()[mine(i) : mine(i)+uint64(size)])
			wr.SGL = []roce.SGE{{Addr: client.mr.Addr() + mine(i), Length: uint32(size), LKey: client.mr.LKey()}}
		case roce.OpAtomicFetchAdd, roce.OpAtomicCmpSwp:
			wr.RemoteAddr = server.mr.Addr() + counter
			wr.CompareAdd, wr.Swap = uint64(i), uint64(i+1) // compare-and-swap i -> i+1
			if o.op == roce.OpAtomicFetchAdd {
				wr.CompareAdd = 1
			}
			wr.SGL = []roce.SGE{{Addr: client.mr.Addr() + mine(i), Length: 8, LKey: client.mr.LKey()}}
		default:
			want[i] = pattern(i)
			copy(src, want[i])
			wr.SGL = []roce.SGE{{Addr: client.mr.Addr() + slot(i), Length: uint32(size), LKey: client.mr.LKey()}}
		}
		if o.recv {
			if err := server.qp.PostRecv([]roce.RecvWR{{ID: uint64(i),
				SGL: []roce.SGE{{Addr: server.mr.Addr() + slot(i), Length: uint32(size), LKey: server.mr.LKey()}}}}); err != nil {
				return err
			}
		}
		posted++
		return client.qp.PostSend([]roce.SendWR{wr})
	}
	wcs := make([]roce.WC, 32)
	for doneC < c.count || o.recv && doneS < c.count {
		for posted < c.count && posted < doneC+c.depth && (!o.recv || posted < doneS+c.depth) {
			if err := post(); err != nil {
				return checked, err
			}
		}
		n := client.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			i := doneC
			if wc.Status != roce.Success || wc.ID != uint64(i) {
				return checked, fmt.Errorf("completion %d: %v", i, &wc)
			}
			switch o.op {
			case roce.OpRead:
				if !bytes.Equal(client.mr.Bytes()[mine(i):mine(i)+uint64(size)], want[i]) {
					return checked, fmt.Errorf("READ %d: data differs", i)
				}
				checked += int64(size)
			case roce.OpWrite:
				syncMR(server.mr)
				if !bytes.Equal(server.mr.Bytes()[slot(i):slot(i)+uint64(size)], want[i]) {
					return checked, fmt.Errorf("WRITE %d: data differs at the server", i)
				}
				checked += int64(size)
			case roce.OpAtomicFetchAdd, roce.OpAtomicCmpSwp:
				if got := binary.NativeEndian.Uint64(client.mr.Bytes()[mine(i):]); got != uint64(i) {
					return checked, fmt.Errorf("%v %d returned %d, want %d", o.op, i, got, i)
				}
				checked += 8
			}
			if !o.recv {
				delete(want, i)
			}
			doneC++
		}
		m := server.cq.Poll(wcs)
		for _, wc := range wcs[:m] {
			i := doneS
			wantOp := roce.WCRecv
			if o.op == roce.OpWriteImm {
				wantOp = roce.WCRecvRDMAWithIm
			}
			if wc.Status != roce.Success || wc.ID != uint64(i) || wc.Opcode != wantOp || wc.ByteLen != uint32(size) {
				return checked, fmt.Errorf("server completion %d: %v", i, &wc)
			}
			if o.op != roce.OpSend && (wc.Flags&roce.WithImm == 0 || wc.Imm != uint32(i)) {
				return checked, fmt.Errorf("server completion %d: immediate %v", i, &wc)
			}
			syncMR(server.mr)
			if !bytes.Equal(server.mr.Bytes()[slot(i):slot(i)+uint64(size)], want[i]) {
				return checked, fmt.Errorf("%v %d: data differs at the server", o.op, i)
			}
			checked += int64(size)
			delete(want, i)
			doneS++
		}
		if n == 0 && m == 0 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			err := client.cq.Wait(wctx)
			cancel()
			if ctx.Err() != nil {
				return checked, fmt.Errorf("timed out after %d of %d completions: %w", doneC, c.count, ctx.Err())
			}
			_ = err
		}
	}
	if o.op.IsAtomic() {
		syncMR(server.mr)
		if got := binary.NativeEndian.Uint64(server.mr.Bytes()[counter:]); got != uint64(c.count) {
			return checked, fmt.Errorf("the counter ends at %d, want %d", got, c.count)
		}
	}
	return checked, nil
}

// freeDemoPort finds a UDP port free on 127.0.0.1 and 127.0.0.2.
func freeDemoPort() (uint16, error) {
	for range 50 {
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return 0, err
		}
		p := a.LocalAddr().(*net.UDPAddr).Port
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: p})
		a.Close()
		if err == nil {
			b.Close()
			return uint16(p), nil
		}
	}
	return 0, errors.New("no UDP port free on both 127.0.0.1 and 127.0.0.2")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// syncMR orders the engine's writes into mr before this goroutine reads
// it: the completion that says the data is there came through the
// kernel's sockets, which Go's memory model does not see.
func syncMR(mr roce.MR) {
	if s, ok := mr.(interface{ Sync() }); ok {
		s.Sync()
	}
}
