// Package rstream is roce rstream and roce riostream: librdmacm's
// rstream and riostream, the rsocket streaming tests, in either role
// over goroce's rsocket package, with their flags and their result
// lines, so that they run against rstream and riostream on Linux (kernel
// rxe or an RNIC, through librdmacm's rsockets) and users measure goroce
// the way they measure rsockets. The two share their connections, series
// and result lines, as rdma-core's share common.c; riostream.go holds
// what riostream does differently.
//
// Without -s it is the server: it listens on -b's address and rdma_cm
// port -p (default 7471). With -s ADDR it is the client of that server.
// Both print the same lines. By default they run rstream's series: a
// latency test (one transfer each way per iteration) of 64 B, 4 KiB, 64
// KiB and 1 MiB on one connection, then a bandwidth test (many transfers
// one way, then as many back) of each size on a second; -S all adds the
// sizes in between. -S, -C or -I run one custom test instead. Every test
// starts with a 16-byte exchange each way, then times its transfers.
//
// -T s runs the same tests over kernel TCP sockets (rstream's "-T
// socket"), for comparison; -T v checks every byte received against the
// pattern rstream sends (a byte counter running over the whole process).
package rstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce rstream.
var Cmd = &cli.Command{
	UsageLine: "rstream [-s SERVER] [-b ADDR] [-f ip|ipv6|name] [-B BYTES] [-i BYTES] [-I N] [-C N] [-S BYTES|all]\n" +
		"            [-p PORT] [-k SECONDS] [-T s|a|b|n|r|v]... [--transport udp|afpacket] [--dev IFACE] [--pcap FILE]\n" +
		"            [--roce-port PORT] [--mtu BYTES] [--busy-poll D] [--spin D] [--timeout D]",
	Short: summary,
	Long: summary + ", either role, its flags and result lines.\n\n" +
		"Without -s it is the server, listening on -b's address; with -s SERVER the client. Both print\n" +
		"rstream's lines: name, bytes per transfer, transfers, iterations, bytes moved both ways,\n" +
		"seconds, Gb/sec and microseconds per one-way transfer. The default is rstream's series of\n" +
		"latency tests, then bandwidth tests on a second connection; -S, -C or -I run one custom test.\n\n",
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs, "rstream")
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(fs, args); err != nil {
				return err
			}
			return o.main(ctx, env)
		}
	},
}

const summary = "stream over rsockets as librdmacm's rstream does: latency and bandwidth tests"

// rstream's defaults (librdmacm/examples/rstream.c).
const (
	defaultPort    = 7471
	defaultSize    = 1000
	defaultCount   = 1000
	defaultInline  = 64
	defaultSockBuf = 1 << 19 // rstream's SO_SNDBUF and SO_RCVBUF without -B
	syncSize       = 16      // the exchange each test starts with
	maxSize        = 1 << 30
	maxBuffer      = 1 << 28 // rsockets double it: rsocket.Options' limit is 512 MiB
	maxInline      = 256
	// exitFailure is rstream's status when a test fails: it returns -1.
	exitFailure = 255
)

// options are rstream's flags and goroce's additions.
type options struct {
	server     string // -s: the server's address; empty: this is the server
	bind       string // -b, --bind
	format     string // -f
	bufSize    int    // -B
	inline     int    // -i
	iters      int    // -I
	count      int    // -C
	size       string // -S
	port       int    // -p
	keepalive  int    // -k
	tests      testOpts
	dev        cli.ToolDevice
	busyPoll   time.Duration
	spin       time.Duration
	timeout    time.Duration
	custom     bool // -S N, -C or -I given
	sizeAll    bool // -S all
	sizeCustom int  // -S N
	warnFormat bool // -f of a format rstream does not know: a warning
	cpuProfile string
	io         bool // roce riostream: the transfers are IOWrites
}

// testOpts is -T, which may be given more than once ("-T b -T v").
type testOpts struct {
	sockets, verify bool
	given           []string
	io              bool // riostream's: s, r and f are unknown
}

// String returns the options given.
func (t *testOpts) String() string { return strings.Join(t.given, ",") }

// Set takes one -T value: a letter or its long name, as rstream does.
func (t *testOpts) Set(v string) error {
	t.given = append(t.given, v)
	is := testOption(v)
	switch {
	case t.io && (is("s", "socket") || is("r", "resolve") || is("f", "fork")):
		return fmt.Errorf("unknown test option %q (want a, b, n or v)", v)
	case is("s", "socket"):
		t.sockets = true
	case is("v", "verify"):
		t.verify = true
	case is("f", "fork"):
		return errors.New("f|fork is not supported (a Go program does not fork: run one server per client)")
	case is("a", "async"), is("b", "block"), is("n", "nonblock"), is("r", "resolve"):
		// Go's calls wait without polling in the program: asynchronous,
		// blocking and non-blocking calls all come to that (--spin polls
		// first). Addresses resolve the same way with or without
		// rdma_getaddrinfo.
	default:
		return fmt.Errorf("unknown test option %q (want s, a, b, n, r or v)", v)
	}
	return nil
}

// testOption returns what tells whether the -T value v is an option:
// its letter, or (case aside) a word that starts with its long name, as
// rdma-core's tools read -T.
func testOption(v string) func(letter, long string) bool {
	name := strings.ToLower(v)
	return func(letter, long string) bool {
		return name == letter || len(name) > 1 && strings.HasPrefix(name, long)
	}
}

// register declares the flags of tool (rstream or riostream: it has
// no -k, and fewer -T options).
func (o *options) register(fs *cli.FlagSet, tool string) {
	o.io = tool == "riostream"
	o.tests.io = o.io
	fs.SetLayout(cli.FlagTable)
	fs.String(&o.server, "", "the server's address: run as the client (default: the server)", "s").Arg("ADDR")
	fs.String(&o.bind, "", "local address: the server's to listen on, the client's RoCE device's", "b").Arg("ADDR")
	fs.String(&o.format, "", "address format: ip, ipv6 or name (gid is not supported)", "f").Arg("FMT")
	fs.Int(&o.bufSize, 0, "send and receive buffer size, doubled as by setsockopt (default 512 KiB)", "B").Arg("BYTES")
	fs.Int(&o.inline, defaultInline, "inline size of the latency series (default 64)", "i").Arg("BYTES")
	fs.Int(&o.iters, 1, "iterations of a custom test (default 1)", "I").Arg("N")
	fs.Int(&o.count, defaultCount, "transfers each way per iteration of a custom test (default 1000)", "C").Arg("N")
	fs.String(&o.size, "", "transfer size of a custom test (default 1000), or all: the series with every size", "S").Arg("BYTES|all")
	if o.io {
		fs.Int(&o.port, defaultPort, "rdma_cm port (default 7471)", "p").Arg("PORT")
		fs.Var(&o.tests, "test option, repeatable: v|verify (check the data);\n"+
			"a|async, b|blocking, n|nonblocking are accepted (Go's calls block)", "T").Arg("OPT")
	} else {
		fs.Int(&o.port, defaultPort, "rdma_cm (or with -T s TCP) port (default 7471)", "p").Arg("PORT")
		fs.Int(&o.keepalive, 0, "keepalive time in seconds (default: keepalives off)", "k").Arg("SECONDS")
		fs.Var(&o.tests, "test option, repeatable: s|socket (kernel TCP), v|verify (check the data);\n"+
			"a|async, b|blocking, n|nonblocking, r|resolve are accepted (Go's calls block);\n"+
			"f|fork is not supported", "T").Arg("OPT")
	}
	fs.Section("goroce's additions:")
	fs.String(&o.bind, "", "the local address (as -b)", "bind").Arg("ADDR")
	o.dev.Register(fs)
	fs.Duration(&o.busyPoll, 0, "the device spins this long on an empty socket before sleeping", "busy-poll").Arg("D")
	fs.Duration(&o.spin, 0, "a waiting call polls the completion queue this long before it sleeps\n"+
		"(closest to rstream's non-blocking default; pair it with --busy-poll)", "spin").Arg("D")
	fs.Duration(&o.timeout, 2*time.Minute, "fail when a connection or no transfer completes for this long\n"+
		"(rstream waits for ever; default 2m)", "timeout").Arg("D")
	fs.String(&o.cpuProfile, "", "write a pprof CPU profile of the run to this file", "cpuprofile").Arg("FILE")
	fs.Section("Exit status: 0 success, 255 a test failed (as " + tool + "), 2 bad flags, 1 other failures.")
}

// check checks the flags as rstream reads them, and goroce's.
func (o *options) check(fs *cli.FlagSet, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected argument %q", args[0])
	}
	o.custom = fs.IsSet("I") || fs.IsSet("C")
	if fs.IsSet("S") {
		if strings.HasPrefix(strings.ToLower(o.size), "all") {
			o.sizeAll = true
		} else {
			n, err := strconv.Atoi(o.size)
			if err != nil || n < 1 || n > maxSize {
				return cli.Usagef("-S %q: want a size from 1 to %d bytes, or all", o.size, maxSize)
			}
			o.custom, o.sizeCustom = true, n
		}
	}
	if o.sizeCustom == 0 {
		o.sizeCustom = defaultSize
	}
	if err := o.checkFormat(); err != nil {
		return err
	}
	return o.checkRanges()
}

// checkFormat checks -f: rstream takes ip, ipv6, gid and name, and warns
// about anything else.
func (o *options) checkFormat() error {
	f := strings.ToLower(o.format)
	switch {
	case f == "" || strings.HasPrefix(f, "ip") || f == "name":
	case strings.HasPrefix(f, "gid"):
		return cli.Usagef("-f gid (AF_IB addresses) is not supported: RoCEv2 addresses are IP addresses")
	default:
		o.warnFormat = true
	}
	return nil
}

func (o *options) checkRanges() error {
	switch {
	case o.iters < 1:
		return cli.Usagef("-I %d: want 1 or more iterations", o.iters)
	case o.count < 1:
		return cli.Usagef("-C %d: want 1 or more transfers", o.count)
	case o.bufSize < 0 || o.bufSize > maxBuffer:
		return cli.Usagef("-B %d: want 0 (the default) to %d bytes", o.bufSize, maxBuffer)
	case o.inline < 0 || o.inline > maxInline:
		return cli.Usagef("-i %d: want 0 to %d bytes", o.inline, maxInline)
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p %d: want a port from 1 to 65535", o.port)
	case o.keepalive < 0:
		return cli.Usagef("-k %d: want a positive number of seconds", o.keepalive)
	case o.timeout <= 0:
		return cli.Usagef("--timeout %v: want a positive duration such as 30s", o.timeout)
	case o.spin < 0 || o.busyPoll < 0:
		return cli.Usagef("--spin and --busy-poll take a duration of 0 or more")
	}
	return o.dev.Check()
}

// main runs the tests of the role the flags ask for, until they end or
// SIGINT interrupts them.
func (o *options) main(ctx context.Context, env *cli.Env) error {
	if o.warnFormat {
		fmt.Fprintln(env.Stderr, "Warning: unknown address format")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
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
	r, err := newRunner(o, env)
	if err != nil {
		return err
	}
	defer r.close()
	fmt.Fprint(env.Stdout, header)
	if err := r.run(ctx); err != nil {
		var ue *cli.UsageError
		if errors.As(err, &ue) {
			return err
		}
		return &cli.ExitError{Code: exitFailure, Err: err}
	}
	return nil
}
