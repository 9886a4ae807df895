package main

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is an io.Writer safe for two goroutines that also reports
// when a string has been written.
type syncBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func newSyncBuffer(want string) *syncBuffer {
	return &syncBuffer{want: want, seen: make(chan struct{})}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	if s.want != "" && strings.Contains(s.b.String(), s.want) {
		s.want = ""
		close(s.seen)
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rpingPorts returns a UDP port free on 127.0.0.1 and 127.0.0.2 for the
// RoCE devices.
func rpingPorts(t *testing.T) int {
	t.Helper()
	for range 100 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Skipf("no UDP on loopback: %v", err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err == nil {
			c2.Close()
			return port
		}
	}
	t.Skip("no port free on both loopback addresses")
	return 0
}

// rpingPingData is what rping's client puts in its buffer for ping n:
// "rdma-ping-n: " then letters from 'A'+n (wrapping after 'z' to 'A'),
// NUL-terminated at size-1.
func rpingPingData(n, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", n))
	c := 65 + n%58
	for len(b) < size-1 {
		b = append(b, byte(c))
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b[:size-1])
}

type rpingRun struct {
	code           int
	stdout, stderr *syncBuffer
}

// startRping runs runRping in a goroutine.
func startRping(args []string, wantStderr string) (*rpingRun, <-chan struct{}) {
	r := &rpingRun{stdout: newSyncBuffer(""), stderr: newSyncBuffer(wantStderr)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.code = runRping(args, r.stdout, r.stderr)
	}()
	return r, done
}

func waitRping(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not finish", what)
	}
}

// TestRpingLoopback runs an rping server and client over UDP on
// 127.0.0.2 and 127.0.0.1 and checks what each prints, for several sizes
// and counts.
func TestRpingLoopback(t *testing.T) {
	for _, tc := range []struct{ count, size int }{{1, 26}, {5, 64}, {70, 100}, {3, 4000}, {2, 65535}} {
		t.Run(fmt.Sprintf("C%d/S%d", tc.count, tc.size), func(t *testing.T) {
			rp := strconv.Itoa(rpingPorts(t))
			common := []string{"-p", "7174", "--roce-port", rp, "--timeout", "20s"}
			srv, srvDone := startRping(append([]string{"-s", "-v", "-d", "-a", "127.0.0.2", "-S", strconv.Itoa(tc.size)}, common...),
				"cm: listen")
			select {
			case <-srv.stderr.seen:
			case <-srvDone:
				t.Fatalf("server exited %d: %s", srv.code, srv.stderr)
			case <-time.After(20 * time.Second):
				t.Fatal("server not listening")
			}
			cli, cliDone := startRping(append([]string{"-c", "-vV", "-a", "127.0.0.2", "--bind", "127.0.0.1",
				"-C" + strconv.Itoa(tc.count), "-S", strconv.Itoa(tc.size)}, common...), "")
			waitRping(t, "client", cliDone)
			waitRping(t, "server", srvDone)
			if cli.code != 0 || srv.code != 0 {
				t.Fatalf("client exit %d:\n%s\nserver exit %d:\n%s", cli.code, cli.stderr, srv.code, srv.stderr)
			}
			var wantCli, wantSrv strings.Builder
			for i := range tc.count {
				fmt.Fprintf(&wantCli, "ping data: %s\n", rpingPingData(i, tc.size))
				fmt.Fprintf(&wantSrv, "server ping data: %s\n", rpingPingData(i, tc.size))
			}
			if got := cli.stdout.String(); got != wantCli.String() {
				t.Errorf("client stdout:\n%.300s\nwant:\n%.300s", got, wantCli.String())
			}
			// -d adds rping's debug lines to the server's output.
			var gotSrv strings.Builder
			for _, line := range strings.SplitAfter(srv.stdout.String(), "\n") {
				if strings.HasPrefix(line, "server ping data: ") {
					gotSrv.WriteString(line)
				}
			}
			if got := gotSrv.String(); got != wantSrv.String() {
				t.Errorf("server stdout:\n%.300s\nwant:\n%.300s", got, wantSrv.String())
			}
			if got := cli.stderr.String(); got != "client DISCONNECT EVENT...\n" {
				t.Errorf("client stderr %q", got)
			}
			// Without -d's debug records, which the CM's goroutine may
			// write between rping's own lines.
			var srvErr strings.Builder
			for _, line := range strings.SplitAfter(srv.stderr.String(), "\n") {
				if !strings.HasPrefix(line, "time=") {
					srvErr.WriteString(line)
				}
			}
			if got := srvErr.String(); !strings.Contains(got, "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n") {
				t.Errorf("server stderr %q", got)
			}
		})
	}
}

// TestRpingRefused connects to a port nobody listens on: the peer's CM
// answers with a REJ and the client says so and exits 255.
func TestRpingRefused(t *testing.T) {
	rp := strconv.Itoa(rpingPorts(t))
	common := []string{"--roce-port", rp, "--timeout", "20s"}
	srv, srvDone := startRping(append([]string{"-s", "-d", "-a", "127.0.0.2", "-p", "7175"}, common...), "cm: listen")
	select {
	case <-srv.stderr.seen:
	case <-time.After(20 * time.Second):
		t.Fatal("server not listening")
	}
	cli, cliDone := startRping(append([]string{"-c", "-a", "127.0.0.2", "--bind", "127.0.0.1", "-C", "1"}, common...), "")
	waitRping(t, "client", cliDone)
	if cli.code != rpingExitFailure {
		t.Errorf("client exit %d", cli.code)
	}
	got := cli.stderr.String()
	for _, want := range []string{"cma event RDMA_CM_EVENT_REJECTED, error 8\n", "connection to 127.0.0.2:7174 refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("client stderr %q lacks %q", got, want)
		}
	}
	// The server goes on waiting for its own client; a client of its
	// port ends it.
	cli2, cli2Done := startRping(append([]string{"-c", "-a", "127.0.0.2", "--bind", "127.0.0.1", "-C", "1", "-p", "7175"}, common...), "")
	waitRping(t, "second client", cli2Done)
	waitRping(t, "server", srvDone)
	if cli2.code != 0 || srv.code != 0 {
		t.Errorf("second client exit %d (%s), server exit %d (%s)", cli2.code, cli2.stderr, srv.code, srv.stderr)
	}
}

func TestRpingFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, exitUsage, "choose one side"},
		{[]string{"-s", "-c"}, exitUsage, "choose one side"},
		{[]string{"-c"}, exitUsage, "needs the server's address"},
		{[]string{"-s", "-S", "10"}, exitUsage, "-S 10: invalid size (valid range is 26 to 65535)"},
		{[]string{"-s", "-S65536"}, exitUsage, "invalid size"},
		{[]string{"-s", "-C", "-1"}, exitUsage, "invalid count"},
		{[]string{"-s", "-C", "x"}, exitUsage, `-C "x": not a number`},
		{[]string{"-s", "-p", "0"}, exitUsage, "-p 0"},
		{[]string{"-s", "-x"}, exitUsage, "unknown flag -x"},
		{[]string{"-s", "--frob"}, exitUsage, "unknown flag --frob"},
		{[]string{"-s", "--transport", "tcp"}, exitUsage, `--transport "tcp"`},
		{[]string{"-s", "--mtu", "1500"}, exitUsage, "--mtu 1500"},
		{[]string{"-s", "--timeout", "-1s"}, exitUsage, "--timeout"},
		{[]string{"-s", "-a"}, exitUsage, "flag -a needs a value"},
		{[]string{"-s", "--bind"}, exitUsage, "flag --bind needs a value"},
		{[]string{"-s", "-P"}, exitUsage, "-P (persistent server) is not supported"},
		{[]string{"-s", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"-c", "-a", "not an address!"}, rpingExitFailure, "not an IP address"},
		{[]string{"-s"}, exitUsage, "the server needs the address to serve on"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runRping(tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.stderr)
			}
			if code == exitUsage && !strings.Contains(errb.String(), "usage: roce rping") {
				t.Errorf("no usage hint: %q", errb.String())
			}
		})
	}
	var out, errb bytes.Buffer
	if code := runRping([]string{"-h"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "-V              validate ping data") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
	o, err := rpingParse([]string{"-cvVd", "-a127.0.0.1", "-C", "3", "-S100", "--bind=127.0.0.2", "--roce-port", "5000", "-q"})
	if err != nil || !o.client || !o.verbose || !o.valid || !o.debug || o.addr != "127.0.0.1" || o.count != 3 ||
		o.size != 100 || o.bind != "127.0.0.2" || o.rocePort != 5000 || o.port != rpingDefaultPort {
		t.Errorf("parse: %+v, %v", o, err)
	}
}
