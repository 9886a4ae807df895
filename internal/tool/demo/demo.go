// Package demo is roce demo: a client and a server in one process, over
// loopback UDP, raw frames or the in-memory link, run every RDMA operation
// and check each byte and completion, optionally through injected loss,
// duplicates and reordering.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// Cmd is roce demo.
var Cmd = &cli.Command{
	UsageLine: "demo [--transport udp|mem|afpacket] [--ops LIST] [--size BYTES] [--count N] [--mtu N] " +
		"[--loss P] [--dup P] [--reorder P] [--seed N] [-v]\n" +
		"            [--pcap FILE] [--bind ADDR] [--dev IFACE] [--cc MODE] [--depth N] [--timeout D]",
	Short: "run a client and a server over loopback and check every RDMA operation",
	Long:  "Runs a server and a client in one process, over loopback, and checks every operation.\n\n",
	Flags: func(fs *cli.FlagSet) cli.Runner {
		c := &config{}
		c.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unexpected argument %q", args[0])
			}
			return c.run(ctx, fs.IsSet("roce-port"), env.Stdout, env.Stderr)
		}
	},
}

// op is one operation the demo runs.
type op struct {
	name string
	op   verbs.WROpcode
	recv bool // the server posts a receive for it
}

var ops = []op{
	{"send", verbs.OpSend, true},
	{"send_imm", verbs.OpSendImm, true},
	{"write", verbs.OpWrite, false},
	{"write_imm", verbs.OpWriteImm, true},
	{"read", verbs.OpRead, false},
	{"fetch_add", verbs.OpAtomicFetchAdd, false},
	{"cmp_swap", verbs.OpAtomicCmpSwp, false},
}

// config is roce demo's flags.
type config struct {
	dev     cli.DeviceFlags
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

func (c *config) register(fs *cli.FlagSet) {
	c.dev.Register(fs)
	fs.String(&c.ops, "all", "comma-separated `operations`: send, send_imm, write, write_imm, read, fetch_add, cmp_swap (or all)", "ops")
	fs.Int(&c.size, 65536, "message size in `bytes` (atomics are 8)", "size")
	fs.Int(&c.count, 64, "messages per operation", "count")
	fs.Int(&c.mtu, 4096, "path MTU: 256, 512, 1024, 2048 or 4096", "mtu")
	fs.Int(&c.depth, 16, "work requests in flight", "depth")
	fs.Float64(&c.loss, 0, "drop this fraction of packets (0-1), both ways", "loss")
	fs.Float64(&c.dup, 0, "duplicate this fraction of packets", "dup")
	fs.Float64(&c.reorder, 0, "reorder this fraction of packets", "reorder")
	fs.Uint64(&c.seed, 1, "seed of the fault injection and of the data", "seed")
	fs.Duration(&c.timeout, 2*time.Minute, "give up after this long", "timeout")
}

func (c *config) check() ([]op, bth.MTU, error) {
	var sel []op
	for _, name := range strings.Split(c.ops, ",") {
		name = strings.TrimSpace(strings.ToLower(name))
		found := false
		for _, o := range ops {
			if name == "all" || name == o.name || name == "atomic" && o.op.IsAtomic() {
				sel = append(sel, o)
				found = true
			}
		}
		if !found {
			return nil, 0, cli.Usagef("--ops: unknown operation %q (want send, send_imm, write, write_imm, read, fetch_add, cmp_swap or all)", name)
		}
	}
	mtu, ok := bth.MTUAtMost(c.mtu)
	if !ok || mtu.Bytes() != c.mtu {
		return nil, 0, cli.Usagef("--mtu must be 256, 512, 1024, 2048 or 4096, not %d", c.mtu)
	}
	switch {
	case c.size < 0 || c.size > 64<<20:
		return nil, 0, cli.Usagef("--size must be 0 to 64 MiB")
	case c.count < 1:
		return nil, 0, cli.Usagef("--count must be at least 1")
	case c.depth < 1 || c.depth > 256:
		return nil, 0, cli.Usagef("--depth must be 1 to 256")
	}
	for _, p := range []float64{c.loss, c.dup, c.reorder} {
		if p < 0 || p >= 1 {
			return nil, 0, cli.Usagef("--loss, --dup and --reorder are fractions from 0 to below 1 (0.05 is 5%%)")
		}
	}
	return sel, mtu, nil
}

// side is one end of the demo connection.
type side struct {
	name string
	dev  *roce.Device
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
}

// run is the demo: two sides, connected, run every operation chosen.
func (c *config) run(ctx context.Context, portSet bool, stdout, stderr io.Writer) error {
	sel, mtu, err := c.check()
	if err != nil {
		return err
	}
	var log *slog.Logger
	if c.dev.Trace {
		log = cli.StepLogger(stderr)
	}
	server, client, closeAll, err := c.open(portSet, log)
	if err != nil {
		return err
	}
	defer closeAll()
	mtu = min(mtu, server.dev.ActiveMTU())
	if err := connect(server, client, mtu, log); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "goroce demo: server %v QP %d, client %v QP %d, over %s (port %d), path MTU %d, %d x %d B per operation\n",
		server.dev.Addr(), server.qp.QPN(), client.dev.Addr(), client.qp.QPN(), c.dev.Transport, c.dev.Port, mtu.Bytes(), c.count, c.size)
	if c.loss > 0 || c.dup > 0 || c.reorder > 0 {
		fmt.Fprintf(stdout, "faults: %.1f%% loss, %.1f%% duplicates, %.1f%% reordering (seed %d)\n",
			c.loss*100, c.dup*100, c.reorder*100, c.seed)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var verified, nops int64
	for _, o := range sel {
		start := time.Now()
		n, err := c.runOp(ctx, o, client, server)
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
	for _, s := range []*side{server, client} {
		st := s.dev.Stats().Engine
		retrans += st.Retransmits
		naks += st.RcvdSeqErr + st.RcvdRNRErr + st.RcvdInvReqNAK + st.RcvdRemAccessNAK + st.RcvdRemOpNAK
	}
	fmt.Fprintf(stdout, "verified %d bytes in %d operations; %d packets retransmitted; %d NAKs seen\n",
		verified, nops, retrans, naks)
	if c.dev.Pcap != "" {
		fmt.Fprintf(stdout, "captures: %s (what the server sent and received), %s (the client's); read them with roce decode %s\n",
			c.dev.Pcap, clientPcap(c.dev.Pcap), c.dev.Pcap)
	}
	return nil
}

// clientPcap is the client's capture file beside --pcap's, the server's.
func clientPcap(server string) string { return strings.TrimSuffix(server, ".pcap") + ".client.pcap" }

// open opens both sides' devices on the transport chosen, with the
// faults chosen, and sets up their QPs; closeAll closes what it opened.
func (c *config) open(portSet bool, log *slog.Logger) (server, client *side, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	faults := transport.Faults{Drop: c.loss, Duplicate: c.dup, Reorder: c.reorder}
	if c.dev.Transport == "mem" {
		// The in-process network, made before the configurations that
		// join it, applies the faults itself.
		n := mem.NewNetwork(&mem.Config{Live: true, Faults: faults, Seed: c.seed})
		closers = append(closers, func() { n.Close() })
		c.dev.Net = n
		faults = transport.Faults{}
	}
	cfgS, cfgC, err := c.configs(portSet, faults)
	if err == nil {
		if server, err = c.openSide("server", cfgS, log); err == nil {
			closers = append(closers, func() { server.dev.Close() })
			if client, err = c.openSide("client", cfgC, log); err == nil {
				closers = append(closers, func() { client.dev.Close() })
			}
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return server, client, closeAll, nil
}

// configs returns the server's and the client's device configurations:
// 127.0.0.1 and 127.0.0.2 on a UDP port free on both (unless
// --roce-port), 198.18.0.1 and .2 on the in-memory link, or --bind (by
// default 127.0.0.1) and the next address on the afpacket interface (by
// default lo).
func (c *config) configs(portSet bool, faults transport.Faults) (*roce.Config, *roce.Config, error) {
	cfgS, err := c.dev.Config("")
	if err != nil {
		return nil, nil, err
	}
	cfgC := *cfgS
	switch c.dev.Transport {
	case "udp":
		if c.dev.Bind != "" {
			return nil, nil, cli.Usagef("--bind does not apply to the udp demo: it uses 127.0.0.1 and 127.0.0.2")
		}
		if !portSet {
			p, err := freePort()
			if err != nil {
				return nil, nil, err
			}
			c.dev.Port = uint(p)
		}
		cfgS.Link, cfgC.Link = c.dev.Link(netip.MustParseAddr("127.0.0.1")), c.dev.Link(netip.MustParseAddr("127.0.0.2"))
	case "mem":
		cfgS.Link, cfgC.Link = c.dev.Link(netip.MustParseAddr("198.18.0.1")), c.dev.Link(netip.MustParseAddr("198.18.0.2"))
	case "afpacket":
		if c.dev.Dev == "" {
			c.dev.Dev = "lo"
		}
		srv := netip.MustParseAddr("127.0.0.1")
		if c.dev.Bind != "" {
			if srv, err = cli.ResolveAddr(c.dev.Bind); err != nil {
				return nil, nil, cli.Usagef("--bind: %w", err)
			}
		}
		cfgS.Link, cfgC.Link = c.dev.Link(srv), c.dev.Link(srv.Next())
	}
	cfgS.Faults, cfgS.FaultSeed = faults, c.seed
	cfgC.Faults, cfgC.FaultSeed = faults, c.seed+1
	if cfgS.Pcap != "" {
		cfgC.Pcap = clientPcap(cfgS.Pcap)
	}
	return cfgS, &cfgC, nil
}

// openSide opens one side's device and makes its PD, CQ, QP and memory
// region.
func (c *config) openSide(name string, cfg *roce.Config, log *slog.Logger) (*side, error) {
	s := &side{name: name}
	if log != nil {
		log = log.With("who", name)
	}
	var err error
	if s.dev, err = c.dev.Open(cfg, false, log); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fail := func(err error) (*side, error) {
		s.dev.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = s.dev.CreateCQ(4 * c.depth); err != nil {
		return fail(err)
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: uint32(c.depth), MaxRecvWR: uint32(c.depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	// Two slots per request in flight (source and destination), and room
	// for the atomic counter.
	if s.mr, err = s.pd.RegMR(make([]byte, 2*c.depth*max(c.size, 8)+64), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		return fail(err)
	}
	return s, nil
}

// connect moves both QPs to RTS towards each other, exchanging their
// QPN, PSN and GID in process.
func connect(server, client *side, mtu bth.MTU, log *slog.Logger) error {
	params := func(psn uint32) *roce.ConnParams {
		return &roce.ConnParams{MTU: mtu, PSN: psn, MaxRDAtomic: 16, MaxDestRDAtomic: 16}
	}
	cli.Step(log, roce.StepControl, "connect: exchange QPN, PSN and GID (in process) and move both QPs to RTS")
	gS, _ := server.dev.GID(0)
	gC, _ := client.dev.GID(0)
	if err := roce.Connect(server.qp, &roce.Remote{QPN: client.qp.QPN(), PSN: 0x1000, GID: gC}, params(0x2000)); err != nil {
		return err
	}
	return roce.Connect(client.qp, &roce.Remote{QPN: server.qp.QPN(), PSN: 0x2000, GID: gS}, params(0x1000))
}

// freePort finds a UDP port free on 127.0.0.1 and 127.0.0.2.
func freePort() (uint16, error) {
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
