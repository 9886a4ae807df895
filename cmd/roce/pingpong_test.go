package main

import (
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/transport/mem"
)

// toolBuffer is an io.Writer for a command's output, safe for the
// command's goroutine and the test's, that closes ready once want has
// been written.
type toolBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	want  string
	ready chan struct{}
}

func newToolBuffer(want string) *toolBuffer {
	return &toolBuffer{want: want, ready: make(chan struct{})}
}

func (w *toolBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.want != "" && strings.Contains(w.b.String(), w.want) {
		w.want = ""
		close(w.ready)
	}
	return n, err
}

func (w *toolBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// toolPorts returns a free TCP port for the exchange and a UDP port free
// on 127.0.0.1 and 127.0.0.2 for the RoCE devices.
func toolPorts(t testing.TB) (tcp, udp int) {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Skipf("no TCP: %v", err)
	}
	tcp = l.Addr().(*net.TCPAddr).Port
	l.Close()
	for range 100 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Skipf("no UDP on loopback: %v", err)
		}
		p := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: p})
		c.Close()
		if err == nil {
			c2.Close()
			return tcp, p
		}
	}
	t.Skip("no UDP port free on both loopback addresses")
	return 0, 0
}

// toolRun is the outcome of one command.
type toolRun struct {
	code           int
	stdout, stderr string
}

type toolMain func(args []string, stdout, stderr *toolBuffer, env *toolEnv) int

// runToolPair runs a server with sargs and, once its stdout shows ready,
// a client with cargs, and returns both outcomes. Both must end within
// limit.
func runToolPair(t testing.TB, main toolMain, ready string, sargs, cargs []string, env *toolEnv, limit time.Duration) (srv, cli toolRun) {
	t.Helper()
	sout, serr := newToolBuffer(ready), newToolBuffer("")
	done := make(chan int, 1)
	go func() { done <- main(sargs, sout, serr, env) }()
	if ready != "" {
		select {
		case <-sout.ready:
		case code := <-done:
			t.Fatalf("server exited %d before it was ready:\n%s%s", code, sout.String(), serr.String())
		case <-time.After(limit):
			t.Fatalf("server not ready after %v:\n%s%s", limit, sout.String(), serr.String())
		}
	}
	cout, cerr := newToolBuffer(""), newToolBuffer("")
	cdone := make(chan int, 1)
	go func() {
		// A server that prints nothing first is not known to listen:
		// retry a refused client for a while.
		if ready != "" {
			cdone <- main(cargs, cout, cerr, env)
			return
		}
		for end := time.Now().Add(10 * time.Second); ; {
			o, e := newToolBuffer(""), newToolBuffer("")
			code := main(cargs, o, e, env)
			if code == exitOK || !strings.Contains(e.String(), "connection refused") || time.Now().After(end) {
				cout.Write([]byte(o.String()))
				cerr.Write([]byte(e.String()))
				cdone <- code
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	timeout := time.After(limit)
	got := 0
	for got < 2 {
		select {
		case srv.code = <-done:
			got++
		case cli.code = <-cdone:
			got++
			if cli.code != exitOK && got == 1 {
				// The server may wait for its --timeout now: report at once.
				t.Fatalf("client exit %d\nclient:\n%s%s\nserver so far:\n%s%s", cli.code, cout.String(), cerr.String(),
					sout.String(), serr.String())
			}
		case <-timeout:
			t.Fatalf("not done after %v\nserver:\n%s%s\nclient:\n%s%s", limit, sout.String(), serr.String(),
				cout.String(), cerr.String())
		}
	}
	srv.stdout, srv.stderr = sout.String(), serr.String()
	cli.stdout, cli.stderr = cout.String(), cerr.String()
	return srv, cli
}

func pingpongT(args []string, stdout, stderr *toolBuffer, env *toolEnv) int {
	return pingpongMain(args, stdout, stderr, env)
}

var (
	ppLocalLine  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	ppRemoteLine = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	ppBytesLine  = regexp.MustCompile(`(?m)^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d) Mbit/sec$`)
	ppItersLine  = regexp.MustCompile(`(?m)^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d) usec/iter$`)
)

func TestPingpong(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		size  int
		iters int
		qps   int
		mem   bool
		drop  float64 // of the mem network's packets
	}{
		{"rc", []string{"-n", "20"}, 4096, 20, 1, false, 0},
		{"rc small", []string{"-n", "50", "-s", "64", "-r", "8"}, 64, 50, 1, false, 0},
		{"rc mtu 4096 events", []string{"-n", "10", "-s", "10000", "-m", "4096", "-e"}, 10000, 10, 1, false, 0},
		{"rc validate", []string{"-n", "5", "-s", "9000", "-c"}, 9000, 5, 1, false, 0},
		{"uc", []string{"--uc", "-n", "20", "-s", "2048"}, 2048, 20, 1, false, 0},
		{"ud", []string{"--ud", "-n", "20"}, 1024, 20, 1, false, 0},
		{"ud validate", []string{"--ud", "-n", "5", "-s", "512", "-c"}, 512, 5, 1, false, 0},
		{"srq", []string{"--srq", "-n", "40", "-q", "4", "-s", "1024"}, 1024, 40, 4, false, 0},
		{"srq defaults", []string{"--srq", "-n", "100"}, 4096, 100, 16, false, 0},
		{"rc mem", []string{"-n", "20", "--transport", "mem"}, 4096, 20, 1, true, 0},
		{"srq mem", []string{"--srq", "-q", "3", "-n", "30", "--transport", "mem"}, 4096, 30, 3, true, 0},
		{"rc mem loss", []string{"-n", "30", "-s", "1024", "--transport", "mem"}, 1024, 30, 1, true, 0.05},
		{"srq mem loss", []string{"--srq", "-q", "2", "-n", "30", "-s", "1024", "--transport", "mem"}, 1024, 30, 2, true, 0.05},
	} {
		t.Run(c.name, func(t *testing.T) {
			tcp, udp := toolPorts(t)
			common := append([]string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp)}, c.args...)
			saddr, caddr := "127.0.0.1", "127.0.0.2"
			var env *toolEnv
			if c.mem {
				n := mem.NewNetwork(&mem.Config{Live: true, Faults: mem.Faults{Drop: c.drop}, Seed: 1})
				defer n.Close()
				env = &toolEnv{memNet: n}
				saddr, caddr = "198.18.0.1", "198.18.0.2"
			}
			sargs := append([]string{"--bind", saddr}, common...)
			cargs := append([]string{"127.0.0.1", "--bind", caddr}, common...) // SERVER first, as getopt allows
			srv, cli := runToolPair(t, pingpongT, "local address", sargs, cargs, env, time.Minute)
			for _, r := range []struct {
				who       string
				run       toolRun
				me, other string
			}{{"server", srv, saddr, caddr}, {"client", cli, caddr, saddr}} {
				if r.run.code != exitOK {
					t.Fatalf("%s: exit %d\n%s%s", r.who, r.run.code, r.run.stdout, r.run.stderr)
				}
				out := r.run.stdout
				locals, remotes := ppLocalLine.FindAllStringSubmatch(out, -1), ppRemoteLine.FindAllStringSubmatch(out, -1)
				if len(locals) != c.qps || len(remotes) != c.qps {
					t.Fatalf("%s: %d local and %d remote lines, want %d:\n%s", r.who, len(locals), len(remotes), c.qps, out)
				}
				if locals[0][3] != "::ffff:"+r.me || remotes[0][3] != "::ffff:"+r.other {
					t.Errorf("%s: GIDs %s and %s, want ::ffff:%s and ::ffff:%s", r.who, locals[0][3], remotes[0][3], r.me, r.other)
				}
				b := ppBytesLine.FindStringSubmatch(out)
				it := ppItersLine.FindStringSubmatch(out)
				if b == nil || it == nil {
					t.Fatalf("%s: no result lines:\n%s", r.who, out)
				}
				if want := strconv.Itoa(2 * c.size * c.iters); b[1] != want {
					t.Errorf("%s: %s bytes, want %s", r.who, b[1], want)
				}
				if it[1] != strconv.Itoa(c.iters) {
					t.Errorf("%s: %s iters, want %d", r.who, it[1], c.iters)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: %s", r.who, out)
				}
			}
			// Each side's remote lines are the other's local lines.
			sl, cr := ppLocalLine.FindAllStringSubmatch(srv.stdout, -1), ppRemoteLine.FindAllStringSubmatch(cli.stdout, -1)
			for i := range sl {
				if sl[i][1] != cr[i][1] || sl[i][2] != cr[i][2] {
					t.Errorf("QP %d: server says QPN %s PSN %s, client heard %s %s", i, sl[i][1], sl[i][2], cr[i][1], cr[i][2])
				}
			}
		})
	}
}

// TestPingpongServerFromConnection checks that a server without --bind
// takes its address from the client's connection.
func TestPingpongServerFromConnection(t *testing.T) {
	tcp, udp := toolPorts(t)
	common := []string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "-n", "3"}
	sout, serr := newToolBuffer(""), newToolBuffer("")
	done := make(chan int, 1)
	go func() { done <- pingpongMain(common, sout, serr, nil) }()
	// No ready line before the client comes: retry the client until the
	// server listens.
	var cli toolRun
	deadline := time.Now().Add(20 * time.Second)
	for {
		cout, cerr := newToolBuffer(""), newToolBuffer("")
		cli.code = pingpongMain(append([]string{"--bind", "127.0.0.2", "127.0.0.1"}, common...), cout, cerr, nil)
		cli.stdout, cli.stderr = cout.String(), cerr.String()
		if cli.code == exitOK || !strings.Contains(cli.stderr, "connection refused") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cli.code != exitOK {
		t.Fatalf("client: exit %d\n%s%s", cli.code, cli.stdout, cli.stderr)
	}
	select {
	case code := <-done:
		if code != exitOK || !strings.Contains(sout.String(), "GID ::ffff:127.0.0.1\n") {
			t.Fatalf("server: exit %d\n%s%s", code, sout.String(), serr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end")
	}
}

func TestPingpongNoServer(t *testing.T) {
	tcp, udp := toolPorts(t)
	var out, errb bytes.Buffer
	start := time.Now()
	code := pingpongMain([]string{"--bind", "127.0.0.2", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"127.0.0.1"}, &out, &errb, nil)
	if code != exitFailure || !strings.Contains(errb.String(), "couldn't connect to 127.0.0.1:"+strconv.Itoa(tcp)) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestPingpongServerTimeout: a server nobody connects to gives up at
// --timeout with a clear error.
func TestPingpongServerTimeout(t *testing.T) {
	tcp, udp := toolPorts(t)
	var out, errb bytes.Buffer
	code := pingpongMain([]string{"--bind", "127.0.0.1", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"--timeout", "300ms"}, &out, &errb, nil)
	if code != exitFailure || !strings.Contains(errb.String(), "no client connected") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestPingpongUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--uc", "--ud"}, {"-m", "1000"}, {"--ud", "-m", "1024"}, {"-q", "4"}, {"--srq", "-q", "300"},
		{"--srq", "-q", "8", "-r", "4"}, {"-n", "0"}, {"-s", "0"}, {"-p", "70000"}, {"a", "b"},
		{"--no-such-flag"}, {"-i", "2"}, {"--transport", "x", "host"},
	} {
		var out, errb bytes.Buffer
		if code := runPingpong(args, &out, &errb); code != exitUsage {
			t.Errorf("pingpong %v: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), "roce help pingpong") {
			t.Errorf("pingpong %v: no hint in %q", args, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := runPingpong([]string{"-h"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "usage: roce pingpong") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
}

func TestPingpongGetopt(t *testing.T) {
	o, _, err := parsePingpong([]string{"host", "-n5", "--size=100", "-e", "-r", "7", "--srq", "-q3"})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(o.server, o.iters, o.size, o.events, o.rxDepth, o.mode, o.numQP)
	if want := fmt.Sprint("host", 5, 100, true, 7, ppSRQ, 3); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestPingpongTrace: -v narrates the verbs on stderr.
func TestPingpongTrace(t *testing.T) {
	tcp, udp := toolPorts(t)
	common := []string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "-n", "2", "-s", "100"}
	srv, cli := runToolPair(t, pingpongT, "local address", append([]string{"--bind", "127.0.0.1"}, common...),
		append([]string{"--bind", "127.0.0.2", "-v", "127.0.0.1"}, common...), nil, time.Minute)
	if srv.code != exitOK || cli.code != exitOK {
		t.Fatalf("exit %d/%d\n%s%s", srv.code, cli.code, srv.stderr, cli.stderr)
	}
	for _, want := range []string{"SLOW  create RC QP", "DATA  post SEND len=100", "WC: wr_id=2 status=SUCCESS opcode=SEND"} {
		if !strings.Contains(cli.stderr, want) {
			t.Errorf("trace lacks %q:\n%s", want, cli.stderr)
		}
	}
	if srv.stderr != "" {
		t.Errorf("server without -v wrote %q", srv.stderr)
	}
}
