// Package rcopy is roce rcopy: librdmacm's rcopy, a file copy over
// rsockets, in either role over goroce's rsocket package, with its
// command line, protocol and output, so that it copies to and from rcopy
// on Linux (kernel rxe or an RNIC).
//
// The server (no arguments) listens on rdma_cm port -p (default 7427)
// and writes each file a client sends: the client opens the connection,
// sends the destination path and the source's mode (OPEN), then the size
// and the bytes (WRITE), then CLOSE, each answered with a status (0 or
// an errno value). rcopy's server writes wherever the client's path
// points; this one writes only inside --dir (default the current
// directory): a path that leads out of it is refused with EACCES. It
// runs until interrupted, as rcopy's does, or for --count connections.
package rcopy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/rsocket"
)

// Cmd is roce rcopy.
var Cmd = &cli.Command{
	UsageLine: "rcopy [-p PORT] [--dir DIR] [--count N] --bind ADDR          (server)\n" +
		"       roce rcopy SOURCE SERVER[:DESTINATION] [-p PORT] [--bind ADDR]   (client)\n" +
		"            [--transport udp|afpacket] [--dev IFACE] [--pcap FILE] [--roce-port PORT] [--mtu BYTES] [--timeout D]",
	Short: summary,
	Long: summary + ", in either role.\n\n" +
		"The client sends SOURCE to the server, to be written at DESTINATION (default: SOURCE's\n" +
		"path), prints its progress and \"N bytes in S seconds = G Gb/sec\", and exits with the\n" +
		"server's status when the server refuses (an errno value). The server writes the files\n" +
		"its clients send inside --dir, refusing paths that lead out of it, and runs until\n" +
		"interrupted, or for --count connections.\n\n",
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return o.main
	},
}

const summary = "copy a file over rsockets as librdmacm's rcopy does"

const (
	defaultPort = 7427
	// exitFailure is rcopy's status when it fails on its side: -1.
	exitFailure = 255
)

// options are rcopy's flags and goroce's additions.
type options struct {
	port    int
	dir     string
	count   int
	bind    string
	dev     cli.ToolDevice
	timeout time.Duration
}

func (o *options) register(fs *cli.FlagSet) {
	fs.SetLayout(cli.FlagTable)
	fs.Int(&o.port, defaultPort, "rdma_cm port (default 7427)", "p").Arg("PORT")
	fs.Section("goroce's additions:")
	fs.String(&o.dir, ".", "server: the directory the files go in; paths leading out of it are refused", "dir").Arg("DIR")
	fs.Int(&o.count, 0, "server: end after this many connections (default 0: run until interrupted)", "count").Arg("N")
	fs.String(&o.bind, "", "local IP address of the RoCE device (the server's to listen on; default for a\n"+
		"client: the address that routes to the server)", "bind").Arg("ADDR")
	o.dev.Register(fs)
	fs.Duration(&o.timeout, 2*time.Minute, "bound on the connection and on each wait for data or an answer\n"+
		"(rcopy waits for ever; default 2m)", "timeout").Arg("D")
	fs.Section("Exit status: 0 success; the server's errno when it refused; 255 other failures (as rcopy);\n" +
		"2 bad flags.")
}

// check checks the flags.
func (o *options) check(args []string) error {
	switch {
	case len(args) == 1 || len(args) > 2:
		return cli.Usagef("want SOURCE SERVER[:DESTINATION] (client) or no arguments (server), not %d arguments", len(args))
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p %d: want a port from 1 to 65535", o.port)
	case o.count < 0:
		return cli.Usagef("--count %d: want 0 (no end) or more", o.count)
	case o.timeout <= 0:
		return cli.Usagef("--timeout %v: want a positive duration such as 30s", o.timeout)
	}
	return o.dev.Check()
}

// main runs the server (no arguments) or the client.
func (o *options) main(ctx context.Context, env *cli.Env, args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	var err error
	if len(args) == 0 {
		err = o.serve(ctx, env)
	} else {
		err = o.copy(ctx, env, args[0], args[1])
	}
	var ue *cli.UsageError
	var st errStatus
	switch {
	case err == nil || errors.As(err, &ue):
		return err
	case errors.As(err, &st):
		return &cli.ExitError{Code: int(st & 0xff), Err: err}
	}
	return &cli.ExitError{Code: exitFailure, Err: err}
}

// splitDest splits SERVER[:DESTINATION] at the first colon, as rcopy
// does, with [IPv6]:DESTINATION for an IPv6 address.
func splitDest(arg, source string) (server, dest string) {
	if strings.HasPrefix(arg, "[") {
		if i := strings.Index(arg, "]"); i > 0 {
			server, dest = arg[1:i], strings.TrimPrefix(arg[i+1:], ":")
		}
	} else {
		server, dest, _ = strings.Cut(arg, ":")
	}
	if dest == "" {
		dest = source
	}
	return server, dest
}

// openDevice opens the RoCE device at --bind, or at def.
func (o *options) openDevice(env *cli.Env, def string, client bool) (*roce.Device, error) {
	dev := o.dev.Flags(o.bind)
	dev.Net = env.MemNet
	cfg, err := dev.Config(def)
	if err != nil {
		return nil, err
	}
	d, err := dev.Open(cfg, client, nil)
	if err != nil {
		return nil, fmt.Errorf("open the RoCE device: %w", err)
	}
	return d, nil
}

// rsocketOptions are the connections' options: rsockets' defaults,
// keepalives off as rsockets have them, the path MTU of --mtu.
func (o *options) rsocketOptions() rsocket.Options {
	mtu, _ := bth.MTUFromBytes(o.dev.MTU)
	return rsocket.Options{KeepAlive: -1, PathMTU: mtu}
}

// serverAddr is where the server listens: --bind's address, or any.
func (o *options) serverAddr() (netip.AddrPort, error) {
	a := netip.IPv4Unspecified()
	if o.bind != "" {
		var err error
		if a, err = cli.ResolveAddr(o.bind); err != nil {
			return netip.AddrPort{}, cli.Usagef("--bind: %w", err)
		}
	} else if o.dev.Transport != "afpacket" {
		return netip.AddrPort{}, cli.Usagef("the server needs the address to serve on: --bind ADDR")
	}
	return netip.AddrPortFrom(a, uint16(o.port)), nil
}
