package rping

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

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
	stdout, stderr *clitest.Buffer
}

// startRping runs roce rping in a goroutine.
func startRping(args []string, wantStderr string) (*rpingRun, <-chan struct{}) {
	r := &rpingRun{stdout: clitest.NewBuffer(""), stderr: clitest.NewBuffer(wantStderr)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.code = clitest.Run(Cmd, nil, r.stdout, r.stderr, args...)
	}()
	return r, done
}

// eventually reports whether cond holds within 10 seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
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
			rp := strconv.Itoa(clitest.LoopbackUDPPort(t))
			common := []string{"-p", "7174", "--roce-port", rp, "--timeout", "20s"}
			srv, srvDone := startRping(append([]string{"-s", "-v", "-d", "-a", "127.0.0.2", "-S", strconv.Itoa(tc.size)}, common...),
				"cm: listen")
			select {
			case <-srv.stderr.Ready():
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
	rp := strconv.Itoa(clitest.LoopbackUDPPort(t))
	common := []string{"--roce-port", rp, "--timeout", "20s"}
	srv, srvDone := startRping(append([]string{"-s", "-d", "-a", "127.0.0.2", "-p", "7175"}, common...), "cm: listen")
	select {
	case <-srv.stderr.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("server not listening")
	}
	cli, cliDone := startRping(append([]string{"-c", "-a", "127.0.0.2", "--bind", "127.0.0.1", "-C", "1"}, common...), "")
	waitRping(t, "client", cliDone)
	if cli.code != exitFailure {
		t.Errorf("client exit %d", cli.code)
	}
	got := cli.stderr.String()
	for _, want := range []string{"cma event RDMA_CM_EVENT_REJECTED, error 8\n", "connection to 127.0.0.2:7174 refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("client stderr %q lacks %q", got, want)
		}
	}
	// The server says what it refused: the request for 7174. It says so
	// after its CM sent the REJ, so perhaps after the client ended.
	if want := "roce rping: connection request from 127.0.0.1 for rdma_cm port 7174 rejected: invalid service ID (reason 8): " +
		"nothing listens on port 7174 (listening on 7175)"; !eventually(func() bool { return strings.Contains(srv.stderr.String(), want) }) {
		t.Errorf("server stderr %q lacks %q", srv.stderr.String(), want)
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

// TestRpingUnreachable connects to an address where nothing receives
// RoCEv2: the ICMP port unreachable ends the connect, and the client says
// RDMA_CM_EVENT_UNREACHABLE as for a peer that never answers, and exits
// 255.
func TestRpingUnreachable(t *testing.T) {
	rp := strconv.Itoa(clitest.LoopbackUDPPort(t))
	start := time.Now()
	cli, cliDone := startRping([]string{"-c", "-a", "127.0.0.2", "--bind", "127.0.0.1", "-C", "1", "--roce-port", rp,
		"--timeout", "20s"}, "")
	waitRping(t, "client", cliDone)
	if cli.code != exitFailure {
		t.Errorf("client exit %d", cli.code)
	}
	got := cli.stderr.String()
	for _, want := range []string{"cma event RDMA_CM_EVENT_UNREACHABLE, error -110\n", "peer unreachable"} {
		if !strings.Contains(got, want) {
			t.Errorf("client stderr %q lacks %q", got, want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failure took %v to surface (the connect's limit is 20 s)", d)
	}
}

func TestRpingFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, cli.ExitUsage, "choose one side"},
		{[]string{"-s", "-c"}, cli.ExitUsage, "choose one side"},
		{[]string{"-c"}, cli.ExitUsage, "needs the server's address"},
		{[]string{"-s", "-S", "10"}, cli.ExitUsage, "-S 10: invalid size (valid range is 26 to 65535)"},
		{[]string{"-s", "-S65536"}, cli.ExitUsage, "invalid size"},
		{[]string{"-s", "-C", "-1"}, cli.ExitUsage, "invalid count"},
		{[]string{"-s", "-C", "x"}, cli.ExitUsage, `invalid value "x" for flag -C: parse error`},
		{[]string{"-s", "-p", "0"}, cli.ExitUsage, "-p 0"},
		{[]string{"-s", "-x"}, cli.ExitUsage, "flag provided but not defined: -x"},
		{[]string{"-s", "--frob"}, cli.ExitUsage, "flag provided but not defined: -frob"},
		{[]string{"-s", "--transport", "tcp"}, cli.ExitUsage, `--transport "tcp"`},
		{[]string{"-s", "--mtu", "1500"}, cli.ExitUsage, "--mtu 1500"},
		{[]string{"-s", "--timeout", "-1s"}, cli.ExitUsage, "--timeout"},
		{[]string{"-s", "-a"}, cli.ExitUsage, "flag needs an argument: -a"},
		{[]string{"-s", "--bind"}, cli.ExitUsage, "flag needs an argument: -bind"},
		{[]string{"-s", "-P"}, cli.ExitUsage, "-P (persistent server) is not supported"},
		{[]string{"-s", "extra"}, cli.ExitUsage, `unexpected argument "extra"`},
		{[]string{"-c", "-a", "not an address!"}, exitFailure, "not an IP address"},
		{[]string{"-s"}, cli.ExitUsage, "the server needs the address to serve on"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
			code := clitest.Run(Cmd, nil, out, errb, tc.args...)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.stderr)
			}
			if code == cli.ExitUsage && !strings.Contains(errb.String(), "Run 'roce help rping' for usage.") {
				t.Errorf("no usage hint: %q", errb.String())
			}
		})
	}
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errb, "-h"); code != cli.ExitOK || !strings.Contains(out.String(), "-V              validate ping data") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
	o := &options{}
	fs := cli.NewFlagSet(cli.Getopt)
	o.register(fs)
	err := fs.Parse([]string{"-cvVd", "-a127.0.0.1", "-C", "3", "-S100", "--bind=127.0.0.2", "--roce-port", "5000", "-q"})
	if err == nil {
		err = o.check(fs.Args())
	}
	if err != nil || !o.client || !o.verbose || !o.valid || !o.debug || o.addr != "127.0.0.1" || o.count != 3 ||
		o.size != 100 || o.bind != "127.0.0.2" || o.dev.Port != 5000 || o.port != defaultPort {
		t.Errorf("parse: %+v, %v", o, err)
	}
}
