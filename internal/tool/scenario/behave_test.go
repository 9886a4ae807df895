package scenario

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

// runCmd runs roce server or roce client as the command line does, on
// the in-memory network n, until ctx ends; it returns the exit status
// and what it printed.
func runCmd(ctx context.Context, c *cli.Command, n *mem.Network, stdout, stderr *lockedBuffer, args ...string) int {
	return cli.Run(ctx, c, &cli.Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, MemNet: n}, args)
}

// startServer runs roce server with args on n and waits until it listens;
// stop ends it and returns its status and output.
func startServer(t *testing.T, n *mem.Network, args ...string) (stop func() (int, string, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errs := &lockedBuffer{b: &bytes.Buffer{}}, &lockedBuffer{b: &bytes.Buffer{}}
	code := make(chan int, 1)
	done := make(chan struct{})
	go func() { defer close(done); code <- runCmd(ctx, Server, n, out, errs, args...) }()
	waitFor(t, errs, "listening on", done)
	return func() (int, string, string) {
		cancel()
		<-done
		return <-code, out.String(), errs.String()
	}
}

// TestClientFlagsAfterAddress: roce client takes its flags after the
// server's address too, as rdma-core's and perftest's tools do.
func TestClientFlagsAfterAddress(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	stop := startServer(t, n, "--mode", "minimal", "--transport", "mem", "--bind", seedServerAddr, "--timeout", "10s")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, errs := &lockedBuffer{b: &bytes.Buffer{}}, &lockedBuffer{b: &bytes.Buffer{}}
	code := runCmd(ctx, Client, n, out, errs, "--mode", "minimal", seedServerAddr, "--transport", "mem", "--bind", seedClientAddr,
		"--timeout", "10s")
	if code != cli.ExitOK || !strings.Contains(out.String(), "Client read back: 'client-wrote-this'") {
		t.Errorf("client: exit %d\n%s%s", code, out.String(), errs.String())
	}
	if _, sout, _ := stop(); !strings.Contains(sout, "Server buffer after client ops: 'client-wrote-this'") {
		t.Errorf("server:\n%s", sout)
	}
}

// TestServerLogsRejectedRequest: a client that asks for another rdma_cm
// port is refused, and the server says so, with the port asked for.
func TestServerLogsRejectedRequest(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	stop := startServer(t, n, "--mode", "write-imm", "--transport", "mem", "--bind", seedServerAddr) // port 7472
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, errs := &lockedBuffer{b: &bytes.Buffer{}}, &lockedBuffer{b: &bytes.Buffer{}}
	code := runCmd(ctx, Client, n, out, errs, "--mode", "minimal", "--transport", "mem", "--bind", seedClientAddr, seedServerAddr) // 7471
	if code != cli.ExitFailure || !strings.Contains(errs.String(), "refused") {
		t.Errorf("client: exit %d, want 1 and a refusal\n%s%s", code, out.String(), errs.String())
	}
	_, _, serr := stop()
	want := "roce server: connection request from " + seedClientAddr + " for rdma_cm port 7471 rejected: invalid service ID " +
		"(reason 8): nothing listens on port 7471 (listening on 7472)\n"
	if !strings.Contains(serr, want) {
		t.Errorf("server stderr:\n%s\nwant %q", serr, want)
	}
}

// TestSeedServerLines: each seed-mode server prints what its program
// prints when it starts, and only that: rdma-example's banner for
// writeread alone, rdma-lib's for its modes, nothing for the
// rdma-roce-lab samples.
func TestSeedServerLines(t *testing.T) {
	for _, c := range []struct {
		mode       string
		want, none []string
	}{
		{"writeread", []string{"Server is listening successfully at: " + seedServerAddr + " , port: 20886\n"}, nil},
		{"minimal", nil, []string{"Server is listening", "==="}},
		{"write-imm", nil, []string{"Server is listening", "==="}},
		{"send", []string{"\n=== RDMA Communication Program Started ===\nMode: send (Server)\nConfiguration:\n" +
			"  Buffer size: 4096 bytes\n  IB port: 1\n  GID index: 1\n  TCP port: 18515\nStarting server...\n"}, []string{"Server is listening"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			n := mem.NewNetwork(&mem.Config{Live: true})
			defer n.Close()
			args := []string{"--mode", c.mode, "--transport", "mem", "--bind", seedServerAddr}
			if c.mode == "send" {
				args = append(args, "-p", strconv.Itoa(clitest.FreeTCPPort(t)))
			}
			_, out, _ := startServer(t, n, args...)()
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.none {
				if strings.Contains(out, w) {
					t.Errorf("stdout has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestRdmalibServerUntilKilled: rdma-lib's servers serve until killed:
// roce's serves one client after another, and on SIGTERM (or SIGINT)
// says so as rdma-lib does and ends well. Its read server asks for its
// text as rdma-lib's does.
func TestRdmalibServerUntilKilled(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	port := clitest.FreeTCPPort(t)
	for _, mode := range []string{"send", "read"} {
		t.Run(mode, func(t *testing.T) {
			f, m := seedFlags(t, mode, port, n, seedServerAddr)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			out, errs := &lockedBuffer{b: &bytes.Buffer{}}, &lockedBuffer{b: &bytes.Buffer{}}
			errc := make(chan error, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				errc <- serve(ctx, f, m, strings.NewReader("Hello from server memory!\n"), out, errs)
			}()
			waitFor(t, errs, "listening on", done)
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			stdin := map[string]string{"send": "hello\n", "read": "0 4\n"}[mode]
			for i := range 2 {
				if got, err := goroceRdmalibClient(t, cctx, n, mode, port, stdin); err != nil {
					t.Fatalf("client %d: %v\n%s", i, err, got)
				}
			}
			cancel(signalCause{syscall.SIGTERM})
			<-done
			if err := <-errc; err != nil {
				t.Errorf("server after SIGTERM: %v\n%s", err, errs.String())
			}
			ready := map[string]string{"send": "Send-Receive Server ready.\n", "read": "Read Server ready.\n"}[mode]
			if got := strings.Count(out.String(), ready); got != 2 {
				t.Errorf("%d clients served, want 2:\n%s", got, out.String())
			}
			want := []string{"Starting server...\n", ready, ready, "\nCaught signal 15, cleaning up...\n"}
			if mode == "read" {
				want = []string{"Starting server...\nEnter text to store: ", ready, ready, "\nCaught signal 15, cleaning up...\n"}
			}
			containsInOrder(t, "server", out.String(), want)
		})
	}
}

// TestClientUnknownHost: a server name that does not resolve is reported
// with the name, before anything claims to connect to it.
func TestClientUnknownHost(t *testing.T) {
	for _, mode := range []string{"writeread", "minimal"} {
		out, errs := &lockedBuffer{b: &bytes.Buffer{}}, &lockedBuffer{b: &bytes.Buffer{}}
		code := runCmd(context.Background(), Client, nil, out, errs, "--mode", mode, "-s", "x", "no-such-host.invalid")
		if code != cli.ExitFailure || !strings.Contains(errs.String(), `"no-such-host.invalid" is not an IP address or a known host name`) ||
			strings.Contains(out.String(), "Trying to connect") {
			t.Errorf("%s: exit %d\nstdout %q\nstderr %q", mode, code, out.String(), errs.String())
		}
	}
}
