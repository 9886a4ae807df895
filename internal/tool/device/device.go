// Package device is roce device: goroce's soft RDMA device, served to
// every process of the host (package uverbs) as the kernel serves rxe0,
// so that unmodified libibverbs programs run on it with libgoroce
// preloaded. roce device --lib builds that library (package libgoroce) and
// prints its path.
package device

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/libgoroce"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs"
)

// Cmd is roce device.
var Cmd = &cli.Command{
	UsageLine: "device [--bind ADDR | --dev IFACE] [--name NAME] [--dir DIR] [--mode MODE] [--transport udp|afpacket]\n" +
		"              [--roce-port N] [--spin D] [--procs N] [--pcap FILE] [--log]\n" +
		"       device --lib",
	Short: summary,
	Long: summary + `.

The device listens on DIR/NAME.sock (DIR: $GOROCE_DIR, else /tmp/goroce-UID)
and sends and receives RoCEv2 on UDP port 4791 of its address. Programs
reach it through libgoroce, which puts the libibverbs ABI in front of it:

	roce device --bind 198.18.0.1 &
	LD_PRELOAD=$(roce device --lib) ib_write_bw              # a server
	LD_PRELOAD=$(roce device --lib) ib_write_bw 198.18.0.1   # its client

--lib builds the library for this system, if it has not been built yet
(it needs a C compiler and libibverbs' headers: apt-get install gcc
libibverbs-dev), and prints its path. The device runs until interrupted
(SIGINT, SIGTERM); the programs that have it open then see it go.

`,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return o.run
	},
}

const summary = "serve goroce's soft RDMA device to unmodified libibverbs programs (LD_PRELOAD=$(roce device --lib))"

type options struct {
	lib       bool
	name, dir string
	mode      string
	spin      time.Duration
	procs     int
	log       bool
	dev       cli.DeviceFlags
}

func (o *options) register(fs *cli.FlagSet) {
	fs.Bool(&o.lib, false, "build libgoroce if needed and print its path, then exit", "lib")
	fs.String(&o.name, "goroce0", "the device's `name`, as ibv_devices lists it", "name")
	fs.String(&o.dir, "", "`directory` of the control socket (default $GOROCE_DIR, else /tmp/goroce-UID)", "dir")
	fs.String(&o.mode, "0600", "permission `mode` of the control socket, in octal: 0600 this user only, 0660 its group too", "mode")
	fs.Duration(&o.spin, 0, "how long a session looks for more work before it sleeps (default 300µs; negative: never)", "spin")
	fs.Int(&o.procs, 0, "run the device's Go code on at most `N` cores at once (GOMAXPROCS; default: 1 on a host of 2 cores or\n"+
		"fewer, where the programs it serves need the other, else every core; $GOMAXPROCS when set)", "procs")
	fs.Bool(&o.log, false, "log sessions opening and closing, and refused requests, to standard error", "log")
	fs.Section("The link:")
	fs.String(&o.dev.Transport, "udp", "how RoCEv2 packets travel: udp (no privileges) or afpacket (raw frames, CAP_NET_RAW)", "transport").Arg("udp|afpacket")
	fs.String(&o.dev.Bind, "", "local IP `address`, or an IPv4 and an IPv6 one (ADDR,ADDR6): the GID table, the sources of packets\n"+
		"(default: --dev's, else 127.0.0.1)", "bind")
	fs.String(&o.dev.Dev, "", "network `interface`: its first IPv4 and first global IPv6 address are the GIDs (and afpacket sends on it)", "dev")
	fs.Uint(&o.dev.Port, 4791, "UDP `port` of RoCEv2, local and peer", "roce-port")
	fs.String(&o.dev.Pcap, "", "write every packet sent and received to this pcap `file`", "pcap")
	fs.Bool(&o.dev.NoOffload, false, "do not use UDP GSO/GRO", "no-offload")
}

func (o *options) run(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected argument %q: roce device takes flags only", args[0])
	}
	if o.lib {
		p, err := libgoroce.Build(nil)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, p)
		return nil
	}
	if o.procs < 0 {
		return cli.Usagef("--procs %d: want a number of cores, 1 or more (0: the default, 1 on a host of 2 cores or fewer)", o.procs)
	}
	mode, err := strconv.ParseUint(o.mode, 8, 32)
	if err != nil || mode&^0o666 != 0 {
		return cli.Usagef("--mode %q: want an octal permission such as 0600 or 0660", o.mode)
	}
	if o.dev.Transport == "mem" {
		return cli.Usagef("--transport mem is for one process; the device serves others: use udp or afpacket")
	}
	addrs, ifindex, err := o.addresses()
	if err != nil {
		return err
	}
	o.dev.Paths = 1
	o.dev.Bind = "" // the addresses are resolved: the first is Config's default
	cfg, err := o.dev.Config(addrs[0].String())
	if err != nil {
		return err
	}
	if len(addrs) > 1 {
		var links roce.Multi
		for _, a := range addrs {
			links = append(links, o.dev.Link(a))
		}
		cfg.Link = links
	}
	logger := slog.New(slog.DiscardHandler)
	if o.log {
		logger = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dev, err := o.dev.Open(cfg, false, logger)
	if err != nil {
		return err
	}
	defer dev.Close()
	if n := o.cores(); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	srv, err := uverbs.Serve(dev, &uverbs.Config{Name: o.name, Dir: o.dir, Mode: os.FileMode(mode), Spin: o.spin,
		Ifindex: ifindex, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "roce device: %s on %s, UDP port %d, socket %s\n", o.name, joinAddrs(dev.GIDs()), o.dev.Port,
		srv.Path())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintf(env.Stdout, "roce device: %s stopping (%d programs had it open)\n", o.name, srv.Sessions())
	return srv.Close()
}

// addresses returns the addresses the device binds, its GID table: those
// of --bind (ADDR, or an IPv4 and an IPv6 address: ADDR,ADDR6), else the
// first IPv4 and the first global IPv6 address of --dev, else 127.0.0.1;
// and the index of their interface.
func (o *options) addresses() ([]netip.Addr, int, error) {
	if o.dev.Bind != "" {
		var addrs []netip.Addr
		for _, s := range strings.Split(o.dev.Bind, ",") {
			a, err := cli.ResolveAddr(s)
			if err != nil {
				return nil, 0, cli.Usagef("--bind: %w", err)
			}
			for _, b := range addrs {
				if b.Is4() == a.Is4() {
					return nil, 0, cli.Usagef("--bind %s: at most one IPv4 and one IPv6 address "+
						"(a device sends from one address of each family)", o.dev.Bind)
				}
			}
			addrs = append(addrs, a)
		}
		idx := ifindexOf(addrs[0])
		if o.dev.Dev != "" {
			ifi, err := net.InterfaceByName(o.dev.Dev)
			if err != nil {
				return nil, 0, cli.Usagef("--dev %s: %w", o.dev.Dev, err)
			}
			idx = ifi.Index
		}
		return addrs, idx, nil
	}
	if o.dev.Dev == "" {
		a := netip.MustParseAddr("127.0.0.1")
		return []netip.Addr{a}, ifindexOf(a), nil
	}
	ifi, err := net.InterfaceByName(o.dev.Dev)
	if err != nil {
		return nil, 0, cli.Usagef("--dev %s: %w", o.dev.Dev, err)
	}
	list, err := ifi.Addrs()
	if err != nil {
		return nil, 0, fmt.Errorf("--dev %s: %w", o.dev.Dev, err)
	}
	var v4, v6 netip.Addr
	for _, x := range list {
		p, err := netip.ParsePrefix(x.String())
		if err != nil {
			continue
		}
		switch a := p.Addr(); {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !a.IsLinkLocalUnicast() && !v6.IsValid():
			v6 = a
		}
	}
	var addrs []netip.Addr
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, 0, cli.Usagef("--dev %s has no address: give it one, or name one with --bind", o.dev.Dev)
	}
	return addrs, ifi.Index, nil
}

// ifindexOf returns the index of the interface that holds addr, or 0.
func ifindexOf(a netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, x := range addrs {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr() == a {
				return ifi.Index
			}
		}
	}
	return 0
}

func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

// cores returns the GOMAXPROCS the device should run with, 0 to leave
// Go's. On a host of two cores the device shares them with the programs
// it serves, two of which spin in a perftest pair, and one P serves it
// better than two: fewer threads handed work between them and fewer
// wake-ups (ib_write_bw 64 KiB on two devices 2124-2861 MB/s against
// 1586-1812, ib_send_lat -s 2 14-24 us typical against 32-58, rstream
// -S 65536 4.4-7.9 Gb/s against 2.9-3.2, in alternating rounds;
// rstream -S 64 105-131 us against 87-104).
func (o *options) cores() int {
	switch {
	case o.procs > 0:
		return o.procs
	case os.Getenv("GOMAXPROCS") != "":
		return 0
	case runtime.NumCPU() <= 2:
		return 1
	}
	return 0
}
