// Package clitest runs the roce command's tools in tests: an output
// buffer that signals when a line appears, free ports on loopback, and a
// server and a client run side by side in one process.
package clitest

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/transport/mem"
)

// Buffer is an io.Writer for a command's output that closes Ready once
// want has been written. It is safe for concurrent use: the command's
// goroutines write while the test reads.
type Buffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	want  string
	ready chan struct{}
}

// NewBuffer returns a Buffer that waits for want ("" waits for nothing:
// Ready stays open).
func NewBuffer(want string) *Buffer {
	return &Buffer{want: want, ready: make(chan struct{})}
}

// Write appends p.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.want != "" && strings.Contains(w.b.String(), w.want) {
		w.want = ""
		close(w.ready)
	}
	return n, err
}

// String returns what was written.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Ready is closed once the awaited text has been written.
func (w *Buffer) Ready() <-chan struct{} { return w.ready }

// FreeTCPPort returns a TCP port free on every address, or skips the test.
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Skipf("no TCP: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// LoopbackUDPPort returns a UDP port free on both 127.0.0.1 and 127.0.0.2,
// for the RoCE devices of a server and a client, or skips the test.
func LoopbackUDPPort(t testing.TB) int {
	t.Helper()
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
			return p
		}
	}
	t.Skip("no UDP port free on both loopback addresses")
	return 0
}

// Ports returns a free TCP port for a tool's exchange and a UDP port free
// on 127.0.0.1 and 127.0.0.2 for its RoCE devices.
func Ports(t testing.TB) (tcp, udp int) {
	t.Helper()
	return FreeTCPPort(t), LoopbackUDPPort(t)
}

// Result is the outcome of one run of a command: a plain value, safe for
// concurrent use.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs c with args, its output in out and errs, on the in-memory
// network n (nil: none), and returns its exit status.
func Run(c *cli.Command, n *mem.Network, out, errs *Buffer, args ...string) int {
	return cli.Run(context.Background(), c, &cli.Env{Stdin: strings.NewReader(""), Stdout: out, Stderr: errs, MemNet: n}, args)
}

// RunPair runs c as a server with sargs and, once its stdout shows ready,
// as a client with cargs, both on the in-memory network n (nil: none),
// and returns both outcomes. Both must end within limit. A server that
// prints nothing first (ready "") is not known to listen: a client whose
// connection is refused is run again for up to 10 s.
func RunPair(t testing.TB, c *cli.Command, ready string, sargs, cargs []string, n *mem.Network, limit time.Duration) (srv, client Result) {
	t.Helper()
	sout, serr := NewBuffer(ready), NewBuffer("")
	done := make(chan int, 1)
	go func() { done <- Run(c, n, sout, serr, sargs...) }()
	if ready != "" {
		select {
		case <-sout.Ready():
		case code := <-done:
			t.Fatalf("server exited %d before it was ready:\n%s%s", code, sout.String(), serr.String())
		case <-time.After(limit):
			t.Fatalf("server not ready after %v:\n%s%s", limit, sout.String(), serr.String())
		}
	}
	cout, cerr := NewBuffer(""), NewBuffer("")
	cdone := make(chan int, 1)
	go func() { cdone <- runClient(c, n, cout, cerr, ready == "", cargs) }()
	timeout := time.After(limit)
	for got := 0; got < 2; {
		select {
		case srv.Code = <-done:
			got++
		case client.Code = <-cdone:
			got++
			if client.Code != 0 && got == 1 {
				// The server may wait for its --timeout now: report at once.
				t.Fatalf("client exit %d\nclient:\n%s%s\nserver so far:\n%s%s", client.Code, cout.String(), cerr.String(),
					sout.String(), serr.String())
			}
		case <-timeout:
			t.Fatalf("not done after %v\nserver:\n%s%s\nclient:\n%s%s", limit, sout.String(), serr.String(),
				cout.String(), cerr.String())
		}
	}
	srv.Stdout, srv.Stderr = sout.String(), serr.String()
	client.Stdout, client.Stderr = cout.String(), cerr.String()
	return srv, client
}

// runClient runs the client of RunPair, again while its connection is
// refused when retry is set.
func runClient(c *cli.Command, n *mem.Network, out, errs *Buffer, retry bool, args []string) int {
	if !retry {
		return Run(c, n, out, errs, args...)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		o, e := NewBuffer(""), NewBuffer("")
		code := Run(c, n, o, e, args...)
		if code == 0 || !strings.Contains(e.String(), "connection refused") || time.Now().After(end) {
			out.Write([]byte(o.String()))
			errs.Write([]byte(e.String()))
			return code
		}
		time.Sleep(20 * time.Millisecond)
	}
}
