package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	serverUsage = "--mode MODE [-p PORT] [--bind ADDR] [--clients N] [scenario flags]"
	clientUsage = "--mode MODE [-p PORT] [--bind ADDR] [scenario flags] SERVER"
)

// scenarioFlags are the flags roce server and roce client share.
type scenarioFlags struct {
	sc   sessionConfig
	opts modeOpts
}

func (f *scenarioFlags) register(fs *flag.FlagSet, client bool) {
	f.sc.dev.register(fs)
	fs.StringVar(&f.sc.mode, "mode", "", "the scenario: "+modeNames())
	fs.StringVar(&f.sc.cm, "cm", "rdmacm", "how the sides connect: rdmacm (IB CM on QP1, as librdmacm does) or tcp (an exchange on TCP -p)")
	fs.IntVar(&f.sc.port, "p", 7471, "`port` of the connection: rdma_cm's port space, or TCP with --cm tcp")
	fs.IntVar(&f.sc.port, "port", 7471, "`port` of the connection: rdma_cm's port space, or TCP with --cm tcp")
	fs.IntVar(&f.sc.mtu, "mtu", 4096, "path MTU in bytes (the smaller of the two sides wins)")
	fs.IntVar(&f.sc.bufSize, "buf", 4096, "size of the registered buffer in `bytes`")
	fs.DurationVar(&f.sc.timeout, "timeout", 30*time.Second, "bound on the connection exchange and on each wait")
	fs.DurationVar(&f.sc.spin, "spin", 50*time.Microsecond, "busy-poll the CQ this long before blocking")
	fs.IntVar(&f.opts.n, "n", 1, "requests (reqresp), messages (write-imm) or iterations (params)")
	fs.StringVar(&f.opts.str, "s", "", "the string to send, write (writeread, write-imm, reqresp) or pass to a lambda function")
	fs.UintVar(&f.opts.imm, "imm", 0xC0FFEE, "immediate value of write-imm")
	fs.StringVar(&f.opts.text, "text", "", "read: the text the server stores (else read from stdin)")
	fs.StringVar(&f.opts.fn, "fn", "checksum", "lambda: the function to call ("+lambdaNames()+")")
	fs.IntVar(&f.opts.dim, "dim", 8, "params: number of weights")
	fs.Float64Var(&f.opts.lr, "lr", 0.1, "params: learning rate")
	fs.IntVar(&f.opts.clients, "clients", 1, "server: serve this many clients, then exit (0: forever)")
	fs.IntVar(&f.opts.id, "id", 0, "params: this client's number (it seeds the gradients)")
}

func modeNames() string {
	var n []string
	for _, m := range modes {
		n = append(n, m.name)
	}
	return strings.Join(n, ", ")
}

func (f *scenarioFlags) parse(name string, fs *flag.FlagSet, args []string, stdout io.Writer, usage string) (*mode, error) {
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: roce %s %s\n\nScenarios:\n", name, usage)
			for _, m := range modes {
				fmt.Fprintf(stdout, "  %-10s %s\n", m.name, m.summary)
			}
			fmt.Fprintln(stdout)
			printDefaults(fs, stdout)
		}
		return nil, err
	}
	m, err := findMode(f.sc.mode)
	if err != nil {
		return nil, err
	}
	switch {
	case f.sc.port < 1 || f.sc.port > 65535:
		return nil, usageErr("-p must be 1-65535")
	case f.sc.bufSize < 64 || f.sc.bufSize > 1<<30:
		return nil, usageErr("--buf must be 64 bytes to 1 GiB")
	case f.opts.n < 1:
		return nil, usageErr("-n must be at least 1")
	case f.opts.dim < 1 || 16*f.opts.dim+128 > f.sc.bufSize:
		return nil, usageErr("--dim must be 1 to %d for a %d-byte --buf", (f.sc.bufSize-128)/16, f.sc.bufSize)
	case f.sc.timeout <= 0:
		return nil, usageErr("--timeout must be positive")
	case f.sc.cm != "rdmacm" && f.sc.cm != "tcp":
		return nil, usageErr("--cm must be rdmacm or tcp, not %q", f.sc.cm)
	}
	f.sc.extra = map[string]string{"strlen": strconv.Itoa(len(f.opts.str))}
	if f.sc.mode != "writeread" {
		delete(f.sc.extra, "strlen")
	}
	return m, nil
}

// scenarioMain is the body of roce server and roce client (name): it
// parses the flags (printing the help on -h) and runs side with the
// arguments left, until it is done or interrupted (SIGINT, SIGTERM).
func scenarioMain(name, usage string, args []string, stdout, stderr io.Writer,
	side func(ctx context.Context, f *scenarioFlags, m *mode, rest []string) error) int {
	var f scenarioFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f.register(fs, name == "client")
	m, err := f.parse(name, fs, args, stdout, usage)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitCode(stderr, name, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer stop()
	return exitCode(stderr, name, side(ctx, &f, m, fs.Args()))
}

func runServer(args []string, stdout, stderr io.Writer) int {
	return scenarioMain("server", serverUsage, args, stdout, stderr,
		func(ctx context.Context, f *scenarioFlags, m *mode, rest []string) error {
			if len(rest) > 0 {
				return usageErr("unexpected argument %q (the server takes no address; see --bind)", rest[0])
			}
			return serve(ctx, f, m, os.Stdin, stdout, stderr)
		})
}

func serve(ctx context.Context, f *scenarioFlags, m *mode, in io.Reader, stdout, stderr io.Writer) error {
	o := &f.opts
	o.in, o.out, o.prompt = in, stdout, isTerminal(in)
	if m.serverRecv != nil {
		f.sc.recvs = m.serverRecv(&f.sc, o)
	}
	var log = traceLogger(&f.sc.dev, stderr)
	l, err := listenSession(&f.sc, log)
	if err != nil {
		return err
	}
	defer l.close()
	l.oneClient = o.clients == 1
	var state any
	if m.setup != nil {
		if state, err = m.setup(l, o); err != nil {
			return err
		}
	}
	if m.prepare != nil {
		f.sc.prepare = func(s *session) { m.prepare(s, state) }
	}
	fmt.Fprintf(stdout, "Server is listening successfully at: %v , port: %d (mode %s)\n", l.dev.Name(), f.sc.port, m.name)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for n := 0; o.clients == 0 || n < o.clients; n++ {
		s, err := l.accept(ctx)
		var ee *exchangeError
		if errors.As(err, &ee) && o.clients != 1 {
			// One client failed to connect; serve the others.
			fmt.Fprintf(stderr, "roce server: %v\n", err)
			n--
			continue
		}
		if err != nil {
			wg.Wait()
			return err
		}
		run := func() {
			defer s.close()
			if err := m.server(ctx, s, o, state); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				fmt.Fprintf(stderr, "roce server: session with %s: %v\n", s.remote, err)
			}
		}
		if m.name == "params" {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
			continue
		}
		run()
	}
	wg.Wait()
	if st, ok := state.(*paramsState); ok {
		fmt.Fprintf(stdout, "final weights after %d steps: %s\n", st.steps, formatWeights(st.weights))
	}
	fmt.Fprintln(stdout, "Server shut-down is complete")
	return firstErr
}

func runClient(args []string, stdout, stderr io.Writer) int {
	return scenarioMain("client", clientUsage, args, stdout, stderr,
		func(ctx context.Context, f *scenarioFlags, m *mode, rest []string) error {
			if len(rest) != 1 {
				return usageErr("want the server's address as the one argument")
			}
			return dial(ctx, f, m, rest[0], os.Stdin, stdout, stderr)
		})
}

func dial(ctx context.Context, f *scenarioFlags, m *mode, server string, in io.Reader, stdout, stderr io.Writer) error {
	o := &f.opts
	o.in, o.out, o.prompt = in, stdout, isTerminal(in)
	if m.clientRecv != nil {
		f.sc.recvs = m.clientRecv(&f.sc, o)
	}
	if m.name == "writeread" {
		fmt.Fprintf(stdout, "Passed string is : %s , with count %d\n", o.str, len(o.str))
	}
	fmt.Fprintf(stdout, "Trying to connect to server at : %s port: %d\n", server, f.sc.port)
	s, err := dialSession(ctx, &f.sc, server, traceLogger(&f.sc.dev, stderr))
	if err != nil {
		return err
	}
	defer func() {
		s.close()
		fmt.Fprintln(stdout, "Client resource clean up is complete")
	}()
	fmt.Fprintln(stdout, "The client is connected successfully")
	return m.client(ctx, s, o)
}

func traceLogger(d *devFlags, stderr io.Writer) *slog.Logger {
	if !d.trace {
		return nil
	}
	return newStepLogger(stderr)
}

// isTerminal reports whether r is an interactive terminal (prompts are
// printed only then).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
