// Package scenario is roce server and roce client: the client/server
// scenarios of the seed documents (request/response, rdma-example's
// WRITE and READ back, the minimal sample, WRITE with immediate, the
// communication library's send, write, read and lambda, a parameter
// server) between two processes or hosts, connected over rdma_cm as
// librdmacm programs are, or over a TCP exchange (--cm tcp).
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Server is roce server.
var Server = &cli.Command{
	UsageLine: "server --mode MODE [-p PORT] [--bind ADDR] [--clients N] [scenario flags]",
	Short:     "serve one of the client/server scenarios (" + modeNames() + ")",
	Long:      modesHelp(),
	Flags: func(fs *cli.FlagSet) cli.Runner {
		return declare(fs, func(ctx context.Context, f *flags, m *mode, env *cli.Env, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unexpected argument %q (the server takes no address; see --bind)", args[0])
			}
			return serve(ctx, f, m, env.Stdin, env.Stdout, env.Stderr)
		})
	},
}

// Client is roce client.
var Client = &cli.Command{
	UsageLine: "client --mode MODE [-p PORT] [--bind ADDR] [scenario flags] SERVER",
	Short:     "run a client/server scenario against a roce server",
	Long:      modesHelp(),
	Flags: func(fs *cli.FlagSet) cli.Runner {
		return declare(fs, func(ctx context.Context, f *flags, m *mode, env *cli.Env, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("want the server's address as the one argument")
			}
			return dial(ctx, f, m, args[0], env.Stdin, env.Stdout, env.Stderr)
		})
	},
}

// modesHelp is the help's list of the scenarios and of the programs
// they speak the protocols of.
func modesHelp() string {
	var b strings.Builder
	b.WriteString("Scenarios:\n")
	for _, m := range modes {
		fmt.Fprintf(&b, "  %-10s %s\n", m.name, m.summary)
	}
	b.WriteString("\n")
	b.WriteString(programsHelp())
	return b.String()
}

// declare declares the flags of roce server and roce client on fs and
// returns their runner: it checks the flags and runs side with the
// arguments left, until it is done or interrupted (SIGINT, SIGTERM).
func declare(fs *cli.FlagSet, side func(ctx context.Context, f *flags, m *mode, env *cli.Env, args []string) error) cli.Runner {
	f := &flags{}
	f.register(fs)
	return func(ctx context.Context, env *cli.Env, args []string) error {
		m, err := f.check()
		if err != nil {
			return err
		}
		f.sc.dev.Net = env.MemNet
		ctx, stop := notifyContext(ctx)
		defer stop()
		return side(ctx, f, m, env, args)
	}
}

// signalCause is the cause of a context that a signal ended.
type signalCause struct{ sig os.Signal }

func (c signalCause) Error() string { return "interrupted by " + c.sig.String() }

// notifyContext is signal.NotifyContext for SIGINT and SIGTERM, with the
// signal as the context's cause (rdma-lib's servers say which came).
func notifyContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			cancel(signalCause{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
		<-done
	}
}

// interrupted returns the signal that ended ctx, if one did.
func interrupted(ctx context.Context) (syscall.Signal, bool) {
	var c signalCause
	if errors.As(context.Cause(ctx), &c) {
		if s, ok := c.sig.(syscall.Signal); ok {
			return s, true
		}
	}
	return 0, false
}

// flags are the flags roce server and roce client share.
type flags struct {
	fs   *cli.FlagSet
	sc   sessionConfig
	opts modeOpts
}

func (f *flags) register(fs *cli.FlagSet) {
	f.fs = fs
	f.sc.dev.Register(fs)
	fs.String(&f.sc.mode, "", "the scenario: "+modeNames(), "mode")
	fs.String(&f.sc.proto, protoSeed, "the protocol: seed (the mode's published program's, so that either end can be the program) "+
		"or goroce (goroce's session protocol: the mode in the connection's private data, checked by both sides)", "proto")
	fs.String(&f.sc.cm, "", "how the sides connect: rdmacm (IB CM on QP1, as librdmacm does) or tcp (an exchange on TCP -p); "+
		"default: the program's (tcp for send, write, read and lambda), else rdmacm", "cm")
	fs.Int(&f.sc.port, 0, "`port` of the connection: rdma_cm's port space, or TCP with --cm tcp; default: the program's "+
		"(writeread 20886, minimal 7471, write-imm 7472, send, write, read and lambda 18515), else 7471", "p", "port")
	fs.Int(&f.sc.mtu, 0, "path MTU in `bytes`; default: a client asks for 1024 (the seed programs' on a 1500-byte link), "+
		"a server takes what the client asks for (1024 with rdma-lib's exchange, which has no MTU in it)", "mtu")
	fs.Int(&f.sc.bufSize, 4096, "size of the registered buffer in `bytes`", "buf")
	fs.Duration(&f.sc.timeout, 30*time.Second, "bound on the connection exchange and on each wait", "timeout")
	fs.Duration(&f.sc.spin, 50*time.Microsecond, "busy-poll the CQ this long before blocking", "spin")
	fs.Int(&f.opts.n, 1, "requests (reqresp), messages (write-imm with --proto goroce) or iterations (params)", "n")
	fs.String(&f.opts.str, "", "the string to send, write (writeread, minimal, write-imm, reqresp) or pass to a lambda function", "s")
	fs.Uint(&f.opts.imm, 0, "immediate value of write-imm; default: the length written, as Example 2 sends "+
		"(0xC0FFEE with --proto goroce)", "imm")
	fs.String(&f.opts.text, "", "read: the text the server stores (else read from stdin)", "text")
	fs.String(&f.opts.fn, "checksum", "lambda with --proto goroce: the function to call ("+lambdaNames()+")", "fn")
	fs.Int(&f.opts.dim, 8, "params: number of weights", "dim")
	fs.Float64(&f.opts.lr, 0.1, "params: learning rate", "lr")
	fs.Int(&f.opts.clients, 1, "server: serve this many clients, then exit (0: until interrupted); default 1, but 0 for "+
		"rdma-lib's send, write, read and lambda, whose server serves until killed", "clients")
	fs.Int(&f.opts.id, 0, "params: this client's number (it seeds the gradients)", "id")
}

func modeNames() string {
	var n []string
	for _, m := range modes {
		n = append(n, m.name)
	}
	return strings.Join(n, ", ")
}

// isSet reports whether the command line set the flag of any of names.
func (f *flags) isSet(names ...string) bool { return f.fs != nil && f.fs.IsSet(names...) }

// check finds the mode, fills in the defaults that depend on it, and
// checks the values.
func (f *flags) check() (*mode, error) {
	m, err := findMode(f.sc.mode)
	if err != nil {
		return nil, err
	}
	if m, err = f.protocol(m); err != nil {
		return nil, err
	}
	switch {
	case f.sc.port < 1 || f.sc.port > 65535:
		return nil, cli.Usagef("-p must be 1-65535")
	case f.isSet("mtu") && f.sc.mtu < 256:
		return nil, cli.Usagef("--mtu must be a path MTU of 256 to 4096 bytes (256, 512, 1024, 2048 or 4096)")
	case f.sc.bufSize < 64 || f.sc.bufSize > 1<<30:
		return nil, cli.Usagef("--buf must be 64 bytes to 1 GiB")
	case f.opts.n < 1:
		return nil, cli.Usagef("-n must be at least 1")
	case f.opts.dim < 1 || 16*f.opts.dim+128 > f.sc.bufSize:
		return nil, cli.Usagef("--dim must be 1 to %d for a %d-byte --buf", (f.sc.bufSize-128)/16, f.sc.bufSize)
	case f.sc.timeout <= 0:
		return nil, cli.Usagef("--timeout must be positive")
	case m.program == rdmaLabImm && f.opts.n != 1:
		return nil, cli.Usagef("-n: Example 2 writes one message (its server takes one); -n needs --proto goroce")
	}
	if !f.isSet("imm") && m.program == nil {
		f.opts.imm = 0xC0FFEE
	}
	f.opts.immSet = f.isSet("imm")
	f.sc.extra = map[string]string{"strlen": strconv.Itoa(len(f.opts.str))}
	if f.sc.mode != "writeread" {
		delete(f.sc.extra, "strlen")
	}
	return m, nil
}

// protocol picks the mode's protocol (--proto) and the defaults that go
// with it: the published program's way of connecting and port, or
// goroce's (rdma_cm, 7471).
func (f *flags) protocol(m *mode) (*mode, error) {
	switch f.sc.proto {
	case protoSeed:
		if sm := seedModes[m.name]; sm != nil {
			m = sm
		}
	case protoGoroce:
	default:
		return nil, cli.Usagef("--proto must be seed or goroce, not %q", f.sc.proto)
	}
	cm, port := "rdmacm", goroceDefaultPort
	if p := m.program; p != nil {
		cm, port = p.cm, p.port
	}
	switch {
	case f.sc.cm == "":
		f.sc.cm = cm
	case f.sc.cm != "rdmacm" && f.sc.cm != "tcp":
		return nil, cli.Usagef("--cm must be rdmacm or tcp, not %q", f.sc.cm)
	case m.program != nil && f.sc.cm != cm:
		return nil, cli.Usagef("--cm %s: %s connects over %s; --cm %s needs --proto goroce", f.sc.cm, m.program.name, cmName(cm), f.sc.cm)
	}
	if !f.isSet("p", "port") {
		f.sc.port = port
	}
	f.sc.program = m.program
	return m, nil
}

// serve is roce server: it listens, serves --clients clients (at once for
// params, else one after the other) and says when it has shut down. It
// prints what the mode's published program prints, and tells on stderr
// where it listens and each connection request it refused.
func serve(ctx context.Context, f *flags, m *mode, in io.Reader, stdout, stderr io.Writer) error {
	o := &f.opts
	o.in, o.out, o.prompt = in, stdout, isTerminal(in)
	f.sc.warn = stderr
	prog := f.sc.program
	if f.sc.mtu == 0 && prog == rdmaLib {
		f.sc.mtu = seedMTU // its exchange says nothing of MTUs
	}
	if prog == rdmaLib && !f.isSet("clients") {
		o.clients = 0 // rdma-lib's servers run until killed
	}
	if prog == rdmaLib {
		rdmalibBanner(stdout, m.name, "Server")
		fmt.Fprintln(stdout, "Starting server...")
	}
	if m.serverRecv != nil {
		f.sc.recvs = m.serverRecv(&f.sc, o)
	}
	log := f.sc.dev.TraceLogger(stderr)
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
	addr := deviceAddr(l.dev)
	fmt.Fprintf(stderr, "roce server: --mode %s listening on %v, %s port %d (%s)\n", m.name, addr, cmWord(f.sc.cm),
		f.sc.port, protocolName(prog))
	// writeread prints rdma-example's lines, with either protocol.
	rdmaex := m.name == "writeread"
	if rdmaex {
		fmt.Fprintf(stdout, "Server is listening successfully at: %v , port: %d\n", addr, f.sc.port)
	}
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
			if sig, ok := interrupted(ctx); ok && prog == rdmaLib {
				fmt.Fprintf(stdout, "\nCaught signal %d, cleaning up...\n", int(sig)) // and exit 0, as rdma-lib does
				return nil
			}
			return err
		}
		run := func() {
			defer s.close()
			if err := m.server(ctx, s, o, state); err != nil && ctx.Err() == nil {
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
	if rdmaex {
		fmt.Fprintln(stdout, "Server shut-down is complete")
	}
	return firstErr
}

// deviceAddr returns the address of a software device (its GID's), or
// its name for another.
func deviceAddr(d verbs.Device) any {
	if rd, ok := roce.Untrace(d).(*roce.Device); ok {
		return rd.Addr()
	}
	return d.Name()
}

// rdmalibBanner prints what rdma-lib prints when it starts.
func rdmalibBanner(w io.Writer, mode, role string) {
	fmt.Fprintf(w, "\n=== RDMA Communication Program Started ===\nMode: %s (%s)\nConfiguration:\n  Buffer size: %d bytes\n"+
		"  IB port: 1\n  GID index: 1\n  TCP port: %d\n", mode, role, rdmalibBuf, rdmaLib.port)
}

// cmWord names how a side connects, for the listening line.
func cmWord(cm string) string {
	if cm == "tcp" {
		return "TCP"
	}
	return "rdma_cm"
}

// protocolName says whose protocol a mode speaks, for the listening line.
func protocolName(p *program) string {
	if p == nil {
		return "goroce's session protocol"
	}
	name, _, _ := strings.Cut(p.name, " (")
	return name + "'s protocol"
}

// dial is roce client: it connects to server and runs the mode's client.
// It prints what the mode's published program prints.
func dial(ctx context.Context, f *flags, m *mode, server string, in io.Reader, stdout, stderr io.Writer) error {
	o := &f.opts
	o.in, o.out, o.prompt = in, stdout, isTerminal(in)
	if m.refuseClient != nil {
		return m.refuseClient
	}
	addr, err := cli.ResolveAddr(server)
	if err != nil {
		return fmt.Errorf("the server %w; give its IP address, or a name this host resolves", err)
	}
	f.sc.warn = stderr
	if f.sc.mtu == 0 {
		f.sc.mtu = seedMTU
	}
	if m.clientRecv != nil {
		f.sc.recvs = m.clientRecv(&f.sc, o)
	}
	// writeread prints rdma-example's lines, with either protocol.
	rdmaex := m.name == "writeread"
	switch {
	case rdmaex:
		fmt.Fprintf(stdout, "Passed string is : %s , with count %d\n", o.str, len(o.str))
		fmt.Fprintf(stdout, "Trying to connect to server at : %v port: %d\n", addr, f.sc.port)
	case f.sc.program == rdmaLib:
		rdmalibBanner(stdout, m.name, "Client")
		fmt.Fprintf(stdout, "Connecting to %s...\n", server)
	}
	s, err := dialSession(ctx, &f.sc, addr.String(), f.sc.dev.TraceLogger(stderr))
	if err != nil {
		return err
	}
	defer func() {
		s.close()
		if rdmaex {
			fmt.Fprintln(stdout, "Client resource clean up is complete")
		}
	}()
	if rdmaex {
		fmt.Fprintln(stdout, "The client is connected successfully")
	}
	return m.client(ctx, s, o)
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
