// Package rping is roce rping: librdmacm's rping in either role, over
// goroce's software device and rdma_cm-compatible connection manager, so
// that it interoperates with rping on Linux (kernel rxe or an RNIC).
//
// The client connects to the server's port (default 7174) and, COUNT times
// (-C, 0 = until interrupted), fills a SIZE-byte buffer (-S, default 64)
// with "rdma-ping-N: " and a rotating alphabet, sends the server its
// {addr, rkey, size} (16 bytes, big-endian) with a SEND, waits for the
// server to RDMA READ it and say go ahead, sends the {addr, rkey, size} of
// a second buffer, and waits for the server to RDMA WRITE the data back
// into it; -V compares the two buffers, -v prints each ping's data. The
// server does the READs and WRITEs and prints "server ping data: ..." with
// -v. Either side ends the connection with a DREQ; rping's messages go to
// standard error as rping prints them.
//
// Exit status: 0 on success, 255 (rping's -1) when the connection or a
// ping fails (a refused connection included), 2 for bad flags (rping
// itself exits 22 there), 130 when interrupted (SIGINT; with -C 0 that is
// how a client stops, after its DREQ). Every wait is bounded by --timeout
// (default 2m): rping would wait forever for a client or a completion.
package rping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce rping.
var Cmd = &cli.Command{
	UsageLine: "rping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d] [-I ADDR] [--bind ADDR]\n" +
		"            [--transport udp|afpacket] [--dev IFACE] [--pcap FILE] [--roce-port PORT] [--mtu BYTES] [--timeout D]",
	Short: summary,
	Long:  summary + ".\n\n",
	Style: cli.Getopt,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return o.main
	},
}

const summary = "ping an rdma_cm peer as librdmacm's rping does: RDMA READ and WRITE over a CM connection"

// rping's constants (librdmacm/examples/rping.c).
const (
	defaultPort = 7174
	minSize     = 26 // sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	maxSize     = 64*1024 - 1
	sqDepth     = 16
	infoLen     = 16 // struct rping_rdma_info: be64 buf, be32 rkey, be32 size
	// exitFailure is rping's exit status on failure: it returns -1.
	exitFailure = 255
	// exitInterrupted is the status of an interrupted run, as a shell
	// reports a program killed by SIGINT.
	exitInterrupted = 130
)

// rping's states (enum test_state), whose numbers its messages print.
const (
	stateConnected     = 5
	stateReadAdv       = 6
	stateReadComplete  = 7
	stateWriteAdv      = 8
	stateWriteComplete = 9
	stateDisconnected  = 10
	stateError         = 11
)

// stateNames are the names rping's messages give the states a test waits
// for.
var stateNames = map[int]string{
	stateReadAdv:       "RDMA_READ_ADV",
	stateReadComplete:  "RDMA_READ_COMPLETE",
	stateWriteAdv:      "RDMA_WRITE_ADV",
	stateWriteComplete: "RDMA_WRITE_COMPLETE",
}

// options are rping's flags and goroce's additions.
type options struct {
	server, client bool
	addr           string // -a: the server's address (client), the address to listen on (server)
	bind           string // --bind / -I: the local address
	port           int
	count, size    int
	verbose, valid bool
	debug          bool
	persistent     bool
	dev            cli.ToolDevice
	timeout        time.Duration
}

func (o *options) register(fs *cli.FlagSet) {
	fs.SetLayout(cli.FlagTable)
	fs.Bool(&o.server, false, "server side", "s")
	fs.Bool(&o.client, false, "client side", "c")
	fs.String(&o.addr, "", "the server's address (client); the address to listen on (server, default any)", "a").Arg("ADDR")
	fs.Int(&o.port, defaultPort, "rdma_cm TCP port (default 7174)", "p").Arg("PORT")
	fs.Int(&o.count, 0, "ping count (default 0: until interrupted)", "C").Arg("COUNT")
	fs.Int(&o.size, 64, "ping data size, 26 to 65535 (default 64)", "S").Arg("SIZE")
	fs.Bool(&o.verbose, false, "print ping data", "v")
	fs.Bool(&o.valid, false, "validate ping data", "V")
	fs.Bool(&o.debug, false, "debug: log the connection manager's and the device's steps", "d")
	fs.String(&o.bind, "", "source address (as --bind)", "I").Arg("ADDR")
	fs.Bool(nil, false, "accepted for compatibility (the QP is always the program's own)", "q")
	fs.Bool(&o.persistent, false, "persistent server (not supported)", "P").Hide()
	fs.Section("goroce's additions:")
	fs.String(&o.bind, "", "local IP address of the RoCE device (default: the server's -a, or the\n"+
		"address that routes to the server for a client; else 127.0.0.1)", "bind").Arg("ADDR")
	o.dev.Register(fs)
	fs.Duration(&o.timeout, 2*time.Minute, "bound on every wait: for a client, a connection, a completion (default 2m)", "timeout").Arg("D")
	fs.Section("Exit status: 0 success, 255 failure (as rping), 2 bad flags, 130 interrupted.")
}

// check checks the flags as rping does, and goroce's.
func (o *options) check(args []string) error {
	switch {
	case len(args) > 0:
		return cli.Usagef("unexpected argument %q", args[0])
	case o.persistent:
		return cli.Usagef("-P (persistent server) is not supported; run one server per connection")
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p %d: want a port from 1 to 65535", o.port)
	case o.count < 0:
		return cli.Usagef("-C %d: invalid count (want 0 or more)", o.count)
	case o.size < minSize || o.size > maxSize:
		return cli.Usagef("-S %d: invalid size (valid range is %d to %d)", o.size, minSize, maxSize)
	case o.server == o.client:
		return cli.Usagef("choose one side: -s (server) or -c (client)")
	case o.client && o.addr == "":
		return cli.Usagef("the client needs the server's address: -a ADDR")
	case o.timeout <= 0:
		return cli.Usagef("--timeout %v: want a positive duration such as 30s", o.timeout)
	}
	return o.dev.Check()
}

// main runs one rping session until it ends or SIGINT interrupts it,
// with rping's exit statuses.
func (o *options) main(ctx context.Context, env *cli.Env, args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	r := &rpinger{o: o, stdout: env.Stdout, stderr: env.Stderr}
	err := r.run(ctx)
	var ue *cli.UsageError
	switch {
	case err == nil || errors.As(err, &ue):
		return err
	case ctx.Err() != nil:
		// Interrupted (rping -C 0 runs until then): disconnected already.
		return &cli.ExitError{Code: exitInterrupted, Err: errors.New("interrupted")}
	}
	return &cli.ExitError{Code: exitFailure, Err: err}
}

// run opens the device at the local address (--bind, else the server's
// -a, else the one routing to the server) and runs the server or the
// client on it.
func (r *rpinger) run(ctx context.Context) error {
	o := r.o
	var remote, local netip.Addr
	var err error
	if o.addr != "" {
		if remote, err = cli.ResolveAddr(o.addr); err != nil {
			return fmt.Errorf("-a: %w", err)
		}
	}
	switch {
	case o.bind != "":
	case o.server && remote.IsValid() && !remote.IsUnspecified():
		local = remote
	case o.client:
		local, _ = cli.RouteSource(remote)
	case o.dev.Transport == "udp":
		// A software device has one address; afpacket takes the
		// interface's.
		return cli.Usagef("the server needs the address to serve on: -a ADDR or --bind ADDR")
	}
	var log *slog.Logger
	if o.debug {
		log = slog.New(slog.NewTextHandler(r.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dev := o.dev.Flags(o.bind)
	dev.Logger = log
	def := ""
	if local.IsValid() {
		def = local.String()
	}
	cfg, err := dev.Config(def)
	if err != nil {
		return err
	}
	if r.dev, err = dev.Open(cfg, o.client, nil); err != nil {
		return fmt.Errorf("open the RoCE device: %w", err)
	}
	defer r.dev.Close()
	// A server tells each connection request its agent refuses (another
	// port, say), which rping's peer only sees as REJECTED.
	onReject := func(rej cm.Rejection) { fmt.Fprintf(r.stderr, "roce rping: %v\n", rej) }
	if r.agent, err = cm.NewAgent(r.dev, &cm.Config{Logger: log, OnReject: onReject}); err != nil {
		return err
	}
	defer r.agent.Close()
	if err := r.setup(); err != nil {
		return err
	}
	if o.server {
		return r.runServer(ctx, remote)
	}
	return r.runClient(ctx, remote)
}
