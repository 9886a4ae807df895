package main

// Command-line and setup helpers shared by roce pingpong and roce perf,
// whose command lines follow getopt (rdma-core's examples, perftest)
// rather than Go's flag package.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
)

// toolEnv is what a test gives the commands beyond their arguments: the
// in-memory network that --transport mem joins. The zero value is what
// the roce binary uses.
type toolEnv struct {
	memNet *mem.Network
}

// toolOptions are the parsed options of roce perf or roce pingpong,
// which run the tool in the role they name.
type toolOptions interface {
	run(stdout, stderr io.Writer, env *toolEnv) error
}

// toolCommand is the body of roce perf and roce pingpong (name): it parses
// args, prints the synopsis, help text and flags on -h, and otherwise
// runs the tool, reporting errors under the command's name.
func toolCommand[O toolOptions](name, usage, help string, parse func([]string) (O, *flag.FlagSet, error),
	args []string, stdout, stderr io.Writer, env *toolEnv) int {
	o, fs, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: roce %s %s\n\n%s\n\n", name, usage, help)
		printDefaults(fs, stdout)
		return exitOK
	}
	if err != nil {
		return exitCode(stderr, name, err)
	}
	return exitCode(stderr, name, o.run(stdout, stderr, env))
}

// getoptArgs rewrites a getopt-style command line into one fs parses:
// flags may come after positional arguments ("SERVER -n 5"), and a
// one-letter flag may carry its value attached ("-n5"). Positional
// arguments end up after a "--".
func getoptArgs(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil && !hasVal && len(a) > 2 && a[1] != '-' {
			if g := fs.Lookup(a[1:2]); g != nil && !toolIsBoolFlag(g) {
				flags = append(flags, a[:2], a[2:])
				continue
			}
		}
		flags = append(flags, a)
		if f != nil && !hasVal && !toolIsBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

func toolIsBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// toolIntFlag registers one int variable under several names (-s and --size).
func toolIntFlag(fs *flag.FlagSet, p *int, def int, usage string, names ...string) {
	for _, n := range names {
		fs.IntVar(p, n, def, usage)
	}
}

// toolStringFlag registers one string variable under several names.
func toolStringFlag(fs *flag.FlagSet, p *string, def, usage string, names ...string) {
	for _, n := range names {
		fs.StringVar(p, n, def, usage)
	}
}

// toolBoolFlag registers one bool variable under several names.
func toolBoolFlag(fs *flag.FlagSet, p *bool, usage string, names ...string) {
	for _, n := range names {
		fs.BoolVar(p, n, false, usage)
	}
}

// toolFlagsSet reports which flags the command line set, by name.
func toolFlagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// toolAnySet reports whether any of names was set.
func toolAnySet(set map[string]bool, names ...string) bool {
	for _, n := range names {
		if set[n] {
			return true
		}
	}
	return false
}

// parseTool parses a getopt-style command line; help is reported as
// flag.ErrHelp.
func parseTool(fs *flag.FlagSet, args []string) error {
	return parseFlags(fs, getoptArgs(fs, args))
}

// toolRouteSource returns the local address the kernel would send from to
// reach host.
func toolRouteSource(host string) (netip.Addr, error) {
	a, err := resolveAddr(host)
	if err != nil {
		return netip.Addr{}, err
	}
	return routeSource(a)
}

// toolDevice opens the software device of a command at addr (a client's
// moves to a free loopback address, see openClientAt), traced to log with
// -v.
func toolDevice(df *devFlags, env *toolEnv, addr netip.Addr, client bool, log *slog.Logger) (roce.Device, *roce.SoftDevice, error) {
	if env != nil && env.memNet != nil {
		df.memNet = env.memNet
	}
	cfg, err := df.config(addr.String())
	if err != nil {
		return nil, nil, err
	}
	open := func(a netip.Addr) (*roce.SoftDevice, error) {
		cfg.Addr = a
		return roce.Open(cfg)
	}
	var soft *roce.SoftDevice
	if client {
		soft, err = openClientAt(df.transport, df.bind, cfg.Addr, open)
	} else {
		soft, err = open(cfg.Addr)
	}
	if err != nil {
		return nil, nil, explainOpen(cfg, err)
	}
	if df.trace {
		return roce.Trace(soft, log), soft, nil
	}
	return soft, soft, nil
}

// oneProc runs the Go scheduler on one processor, unless GOMAXPROCS is
// set: like the C tools they mirror, roce perf and roce pingpong do one
// stream of work, whose goroutines (the program's, the receive loop)
// hand over to each other more cheaply on one processor than across
// threads, and idle processors looking for work would take CPU from the
// kernel's network path and the peer. On two cores, with both ends on
// one host, 64 KiB WRITEs move about 15 % more this way.
func oneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

// toolPSN returns a random 24-bit PSN, as lrand48() & 0xffffff does.
func toolPSN() uint32 { return rand.Uint32() & 0xFFFFFF }

// listenTool listens for the out-of-band TCP connection on every address,
// as the tools do (getaddrinfo with AI_PASSIVE).
func listenTool(port int) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	return ln.(*net.TCPListener), nil
}

// toolConnAddr returns the local IP address of a TCP connection: the address
// the peer reached this host at.
func toolConnAddr(c net.Conn) netip.Addr {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// cqWaiter waits for completions on a CQ without allocating: it spins
// (yielding the processor) for a while, then sleeps on the CQ's
// completion channel in short slices, so that every wait stays bounded by
// its context. It is owned by one goroutine.
type cqWaiter struct {
	spin  time.Duration // how long to spin before sleeping; < 0 spins until the limit
	timer *time.Timer
}

func newCQWaiter(spin time.Duration) *cqWaiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &cqWaiter{spin: spin, timer: t}
}

// poll polls cq into wc until at least one completion comes or ctx
// ends.
func (w *cqWaiter) poll(ctx context.Context, cq roce.CQ, wc []roce.WC) (int, error) {
	for {
		n, err := w.pollFor(ctx, cq, wc, time.Second)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// pollFor polls cq into wc until a completion comes, ctx ends or limit
// passes; it returns 0 and no error in the last case.
func (w *cqWaiter) pollFor(ctx context.Context, cq roce.CQ, wc []roce.WC, limit time.Duration) (int, error) {
	if n := cq.Poll(wc); n > 0 {
		return n, nil
	}
	start := time.Now()
	if w.spin != 0 {
		for i := 1; ; i++ {
			if n := cq.Poll(wc); n > 0 {
				return n, nil
			}
			if i&255 == 0 {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				el := time.Since(start)
				if el > limit {
					return 0, nil
				}
				if w.spin > 0 && el > w.spin {
					break
				}
			}
			toolYield()
		}
	}
	for {
		cq.ReqNotify(false)
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		rem := limit - time.Since(start)
		if rem <= 0 {
			return 0, ctx.Err()
		}
		if err := w.sleep(ctx, cq.C(), min(rem, 10*time.Millisecond)); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
	}
}

// sleep waits for a value on c, at most d, and reports ctx's error.
func (w *cqWaiter) sleep(ctx context.Context, c <-chan struct{}, d time.Duration) error {
	w.timer.Reset(d)
	select {
	case <-c:
	case <-w.timer.C:
	case <-ctx.Done():
	}
	w.timer.Stop()
	return ctx.Err()
}

// waitEvent waits for the CQ's next completion event (-e), armed before;
// it does not poll.
func (w *cqWaiter) waitEvent(ctx context.Context, cq roce.CQ) error {
	for {
		w.timer.Reset(50 * time.Millisecond)
		select {
		case <-cq.C():
			w.timer.Stop()
			return nil
		case <-w.timer.C:
		case <-ctx.Done():
			w.timer.Stop()
			return ctx.Err()
		}
	}
}

// toolPrintf writes s to w; tools print to stdout and ignore its errors.
func toolPrintf(w io.Writer, format string, args ...any) { fmt.Fprintf(w, format, args...) }

// lingerAfterRun keeps a software device answering after a run that ends
// without a closing exchange (the ping-pongs, ib_write_lat): the peer may
// still wait for the ACK of its last request and send it again. It
// returns once the link has been quiet for four of the tools' transport
// timeouts (timeout 14: 67 ms), and after eight such periods when traffic
// goes on. A libibverbs device (soft == nil) closes at once, as the real
// tools do.
func lingerAfterRun(ctx context.Context, soft *roce.SoftDevice) {
	if soft == nil {
		return
	}
	const quiet = 4 * 4096 * time.Nanosecond << 14
	ctx, cancel := context.WithTimeout(ctx, 8*quiet)
	defer cancel()
	soft.Linger(ctx, quiet)
}
