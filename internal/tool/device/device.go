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
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/libgoroce"
	"github.com/goroce/goroce/uverbs"
)

// Cmd is roce device.
var Cmd = &cli.Command{
	UsageLine: "device [--bind ADDR | --dev IFACE] [--name NAME] [--dir DIR] [--mode MODE] [--transport udp|afpacket]\n" +
		"              [--roce-port N] [--spin D] [--pcap FILE] [--log]\n" +
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
	mode      uint
	spin      time.Duration
	log       bool
	dev       cli.DeviceFlags
}

func (o *options) register(fs *cli.FlagSet) {
	fs.Bool(&o.lib, false, "build libgoroce if needed and print its path, then exit", "lib")
	fs.String(&o.name, "goroce0", "the device's `name`, as ibv_devices lists it", "name")
	fs.String(&o.dir, "", "`directory` of the control socket (default $GOROCE_DIR, else /tmp/goroce-UID)", "dir")
	fs.Uint(&o.mode, 0o600, "permission `mode` of the control socket: 0600 this user only, 0660 its group too", "mode")
	fs.Duration(&o.spin, 0, "how long a session looks for more work before it sleeps (default 50µs; negative: never)", "spin")
	fs.Bool(&o.log, false, "log sessions opening and closing, and refused requests, to standard error", "log")
	fs.Section("The link:")
	fs.String(&o.dev.Transport, "udp", "how RoCEv2 packets travel: udp (no privileges) or afpacket (raw frames, CAP_NET_RAW)", "transport")
	fs.String(&o.dev.Bind, "", "local IP `address`: the source of every packet and the GID (default: --dev's first, else 127.0.0.1)", "bind")
	fs.String(&o.dev.Dev, "", "network `interface`: the device's address is its first (and afpacket sends on it)", "dev")
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
	if o.dev.Transport == "mem" {
		return cli.Usagef("--transport mem is for one process; the device serves others: use udp or afpacket")
	}
	bind, ifindex, err := o.address()
	if err != nil {
		return err
	}
	o.dev.Paths = 1
	cfg, err := o.dev.Config(bind)
	if err != nil {
		return err
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
	srv, err := uverbs.Serve(dev, &uverbs.Config{Name: o.name, Dir: o.dir, Mode: os.FileMode(o.mode), Spin: o.spin,
		Ifindex: ifindex, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "roce device: %s on %s, UDP port %d, socket %s\n", o.name, dev.Addr(), o.dev.Port, srv.Path())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintf(env.Stdout, "roce device: %s stopping (%d programs had it open)\n", o.name, srv.Sessions())
	return srv.Close()
}

// address returns the address the device binds: --bind, else the first
// address of --dev, else 127.0.0.1; and the interface index of its GID.
func (o *options) address() (string, int, error) {
	if o.dev.Dev == "" {
		return o.dev.Bind, ifindexOf(o.dev.Bind), nil
	}
	ifi, err := net.InterfaceByName(o.dev.Dev)
	if err != nil {
		return "", 0, cli.Usagef("--dev %s: %w", o.dev.Dev, err)
	}
	if o.dev.Bind != "" {
		return o.dev.Bind, ifi.Index, nil
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", 0, fmt.Errorf("--dev %s: %w", o.dev.Dev, err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr().String(), ifi.Index, nil
		}
	}
	return "", 0, cli.Usagef("--dev %s has no address: give it one, or name one with --bind", o.dev.Dev)
}

// ifindexOf returns the index of the interface that holds addr, or 0.
func ifindexOf(addr string) int {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return 0
	}
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
