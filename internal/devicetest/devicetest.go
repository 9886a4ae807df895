// Package devicetest runs goroce's soft device for tests of programs that
// use it through libgoroce: it builds the library once per test binary,
// starts devices in the test's own socket directory on loopback addresses,
// and runs C programs (rdma-core's tools, perftest, the tests' own) with
// the library preloaded. Tests skip where the machine has no C compiler,
// no libibverbs headers or no such program.
package devicetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/libgoroce"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs"
)

var (
	buildOnce sync.Once
	libPath   string
	buildErr  error
)

// Lib returns the path of libgoroce built for this machine, or skips t
// when it cannot be built here (no C compiler or headers). A build that
// fails for any other reason fails t.
func Lib(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the soft device needs Linux")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "goroce-lib-")
		if err != nil {
			buildErr = err
			return
		}
		libPath, buildErr = libgoroce.Build(&libgoroce.Config{Dir: dir})
	})
	switch {
	case buildErr == libgoroce.ErrNoCompiler || buildErr == libgoroce.ErrNoHeaders:
		t.Skipf("cannot build libgoroce here: %v", buildErr)
	case buildErr != nil:
		t.Fatal(buildErr)
	}
	return libPath
}

// Need skips t unless every program is on PATH.
func Need(t testing.TB, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (apt-get install perftest ibverbs-utils rdmacm-utils)", p)
		}
	}
}

// Host is a socket directory with the devices a test started in it.
type Host struct {
	t    testing.TB
	Dir  string
	Port uint16 // the UDP port of RoCEv2 every device of the host uses
	Lib  string
}

// NewHost makes a host for t: a socket directory of its own, a free UDP
// port for its devices, and the library.
func NewHost(t testing.TB) *Host {
	t.Helper()
	lib := Lib(t)
	dir, err := os.MkdirTemp("/tmp", "goroce-test-") // socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o700)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &Host{t: t, Dir: dir, Port: freePort(t), Lib: lib}
}

// freePort returns a UDP port free on 127.0.0.1 now.
func freePort(t testing.TB) uint16 {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// Device is a device a test started.
type Device struct {
	Name string
	Addr netip.Addr
	Dev  *roce.Device
	Srv  *uverbs.Server
}

// Start starts device name on addr, a loopback address, or an IPv4 and
// an IPv6 one (127.0.0.1,::1): its GID table. The test's cleanup stops
// it.
func (h *Host) Start(name, addr string) *Device {
	h.t.Helper()
	var links roce.Multi
	for _, s := range strings.Split(addr, ",") {
		links = append(links, &roce.UDP{Addr: netip.MustParseAddr(s), Port: h.Port, PeerPort: h.Port})
	}
	var link roce.Link = links
	if len(links) == 1 {
		link = links[0]
	}
	a := netip.MustParseAddr(strings.Split(addr, ",")[0])
	dev, err := roce.Open(&roce.Config{Link: link})
	if err != nil {
		h.t.Fatalf("open %s on %s: %v", name, addr, err)
	}
	srv, err := uverbs.Serve(dev, &uverbs.Config{Name: name, Dir: h.Dir})
	if err != nil {
		dev.Close()
		h.t.Fatalf("serve %s: %v", name, err)
	}
	h.t.Cleanup(func() {
		srv.Close()
		dev.Close()
	})
	return &Device{Name: name, Addr: a, Dev: dev, Srv: srv}
}

// StartProcess starts a device the way a user does, `roce device` (the
// binary roce) in a process of its own, on the host's directory and port,
// and returns once its socket takes connections; the device ends with the
// test; flags are more of roce device's. Tests whose programs assume a
// device that answers within a millisecond use it: a device in the test
// binary itself runs under the race detector when the test does, several
// times slower.
func (h *Host) StartProcess(roce, name, addr string, flags ...string) {
	h.t.Helper()
	cmd := exec.Command(roce, append([]string{"device", "--bind", addr, "--name", name, "--dir", h.Dir,
		"--roce-port", strconv.Itoa(int(h.Port))}, flags...)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start %s device: %v", roce, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	h.t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sock := filepath.Join(h.Dir, name+".sock")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unixpacket", sock); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			h.t.Fatalf("roce device %s on %s ended: %s", name, addr, out)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("roce device %s on %s: no socket %s after 20 s: %s", name, addr, sock, out)
		}
	}
}

// WaitListening waits until a program listens on rdma_cm port port of
// device d (rdma_listen), or fails t after timeout.
func (d *Device) WaitListening(t testing.TB, port int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		for _, a := range d.Srv.Listening() {
			if int(a.Port()) == port {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on rdma_cm port %d of %s after %v", port, d.Name, timeout)
		}
	}
}

// Env returns the environment of a program run on the host's devices.
func (h *Host) Env() []string {
	return append(os.Environ(), "LD_PRELOAD="+h.Lib, "GOROCE_DIR="+h.Dir)
}

// Command returns a command that runs a program on the host's devices,
// killed when ctx ends.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = h.Env()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Result is what a program printed and how it ended.
type Result struct {
	Out  string // standard output and error, interleaved
	Err  error  // from Wait
	Code int
}

// String shows the result for a failure message.
func (r *Result) String() string {
	return fmt.Sprintf("exit %d (%v):\n%s", r.Code, r.Err, r.Out)
}

// Proc is a program started in the background.
type Proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	res  Result
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Go starts a program; Wait collects it. Its output is kept.
func (h *Host) Go(ctx context.Context, name string, args ...string) *Proc {
	h.t.Helper()
	return h.GoEnv(ctx, nil, "", name, args...)
}

// GoEnv is Go with more environment variables and a standard input.
func (h *Host) GoEnv(ctx context.Context, env []string, stdin string, name string, args ...string) *Proc {
	h.t.Helper()
	p := &Proc{cmd: h.Command(ctx, name, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		h.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.res.Err = p.cmd.Wait()
		p.res.Code = p.cmd.ProcessState.ExitCode()
		p.res.Out = p.out.String()
		close(p.done)
	}()
	return p
}

// Wait waits for the program to end and returns its result.
func (p *Proc) Wait() *Result {
	<-p.done
	return &p.res
}

// Kill ends the program, if it runs, and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Exited reports whether the program has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitOutput waits until the program's output matches re; it fails when
// the program ends first or ctx does.
func (p *Proc) WaitOutput(ctx context.Context, re *regexp.Regexp) error {
	for !re.MatchString(p.Output()) {
		select {
		case <-p.done:
			return fmt.Errorf("%s ended before it printed %q", p.cmd.Path, re)
		case <-ctx.Done():
			return fmt.Errorf("%s did not print %q: %w", p.cmd.Path, re, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// WaitListen waits until some program listens on a TCP port of this
// host; it fails when p ends first or ctx does.
func (p *Proc) WaitListen(ctx context.Context, port int) error { return waitListen(ctx, port, p) }

// Output returns what the program has printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Pid returns the program's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Run runs a program to its end.
func (h *Host) Run(ctx context.Context, name string, args ...string) *Result {
	h.t.Helper()
	return h.Go(ctx, name, args...).Wait()
}

// WaitFor waits until the program has printed s, or fails the test after
// timeout (showing what it printed).
func (p *Proc) WaitFor(t testing.TB, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), s) {
		select {
		case <-p.done:
			t.Fatalf("%s ended before it printed %q: %s", p.cmd.Path, s, p.res.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q in %v: %s", p.cmd.Path, s, timeout, p.Output())
		}
	}
}

// Pair runs a client/server tool: the server (server args) in the
// background until it listens on its TCP port, then the client (client
// args); it returns both results, each having ended. A perftest run that
// could not measure the processor's clock (on a busy host its
// calibration's r^2 falls under 0.9 and it prints no report) runs once
// more: that says nothing of the device.
func (h *Host) Pair(ctx context.Context, port int, server, client []string) (*Result, *Result) {
	h.t.Helper()
	s, c := h.pair(ctx, port, server, client)
	if Clockless(s) || Clockless(c) {
		h.t.Logf("%s could not calibrate its clock (a busy host); once more", server[0])
		s, c = h.pair(ctx, port, server, client)
	}
	return s, c
}

// Clockless reports whether perftest said it could not calibrate its
// clock (get_clock.c: r^2 under 0.9, common on a busy host) and so made
// no report: a run to make again, which says nothing of the device.
func Clockless(r *Result) bool {
	return strings.Contains(r.Out, "Correlation coefficient r^2") && strings.Contains(r.Out, "Can't produce a report")
}

func (h *Host) pair(ctx context.Context, port int, server, client []string) (*Result, *Result) {
	h.t.Helper()
	s := h.Go(ctx, server[0], server[1:]...)
	if err := waitListen(ctx, port, s); err != nil {
		s.cmd.Process.Kill()
		r := s.Wait()
		h.t.Fatalf("%s: %v: %s", server[0], err, r)
	}
	c := h.Run(ctx, client[0], client[1:]...)
	return s.Wait(), c
}

// waitListen waits until a TCP port of 127.0.0.1 accepts, or p ends.
func waitListen(ctx context.Context, port int, p *Proc) error {
	for {
		if listening(port) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("ended before it listened on port %d", port)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listening reports whether some socket listens on TCP port of this host,
// without connecting to it (a connection would be the server's client).
func listening(port int) bool {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		want := fmt.Sprintf(":%04X ", port)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			// local_address is fields[1], st (0A: LISTEN) fields[3].
			if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// CC compiles C sources into a program that links libibverbs (and the
// extra flags), in t's temporary directory, or skips t without a
// compiler or headers.
func CC(t testing.TB, out string, srcs []string, flags ...string) string {
	t.Helper()
	Lib(t)
	exe := filepath.Join(t.TempDir(), out)
	args := append([]string{"-O1", "-g", "-Wall", "-o", exe}, srcs...)
	args = append(args, flags...)
	args = append(args, "-libverbs", "-lpthread")
	cmd := exec.Command("cc", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return exe
}

// FreeTCPPort returns a TCP port of 127.0.0.1 free now, for a tool's
// exchange (-p).
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Atoi is strconv.Atoi for numbers the test made.
func Atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
