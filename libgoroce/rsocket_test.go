package libgoroce_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
	"github.com/goroce/goroce/rsocket"
)

// TestRsocketReturns runs testdata/rsreturns.c: librdmacm's rsocket calls
// on the device, their returns and errors, a connection's bytes both
// ways, half closes and a send to a peer that has gone.
func TestRsocketReturns(t *testing.T) {
	exe := devicetest.CC(t, "rsreturns", []string{"testdata/rsreturns.c"}, "-lrdmacm")
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := h.Run(ctx, exe, "127.0.0.1", strconv.Itoa(devicetest.FreeTCPPort(t)))
	if r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
		t.Errorf("%s", r)
	}
}

// TestRstream runs librdmacm's rstream, unmodified, server on goroce0 and
// client on goroce1, in its modes: blocking, non-blocking, asynchronous
// (poll), verifying the data, and a latency run; each ends well with its
// results line. (Its fork mode, -T f, runs on kernel sockets.)
func TestRstream(t *testing.T) {
	devicetest.Need(t, "rstream")
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	for _, c := range []struct{ name, args string }{
		{"bandwidth", "-S 65536 -C 200"},
		{"blocking", "-T b -S 65536 -C 100"},
		{"nonblocking", "-T n -S 4096 -C 500"},
		{"async", "-T a -S 4096 -C 500"},
		{"verify", "-T v -S 10000 -C 100"},
		{"latency", "-S 64 -I 200 -C 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			port := strconv.Itoa(devicetest.FreeTCPPort(t))
			args := strings.Fields(c.args)
			s := h.Go(ctx, "rstream", append([]string{"-b", "127.0.0.1", "-p", port}, args...)...)
			defer s.Kill()
			d0.WaitListening(t, devicetest.Atoi(port), 20*time.Second)
			r := h.Go(ctx, "rstream", append([]string{"-s", "127.0.0.1", "-b", "127.0.0.2", "-p", port}, args...)...).Wait()
			want := regexp.MustCompile(`(?m)^custom\s+\S+\s+\d+\s+\d+\s+\S+\s+[\d.]+s\s+[\d.]+\s+[\d.]+$`)
			if r.Err != nil || !want.MatchString(r.Out) {
				t.Fatalf("client %s\nserver: %s", r, s.Output())
			}
			if sr := s.Wait(); sr.Err != nil {
				t.Errorf("server %s", sr)
			}
		})
	}
}

// TestRcopy copies a file with librdmacm's rcopy, unmodified, both ends on
// the device: the copy holds the same bytes.
func TestRcopy(t *testing.T) {
	devicetest.Need(t, "rcopy")
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := devicetest.FreeTCPPort(t)
	s := h.Go(ctx, "rcopy", "-p", strconv.Itoa(port))
	defer s.Kill()
	d0.WaitListening(t, port, 20*time.Second)
	r := h.Go(ctx, "rcopy", src, "127.0.0.1:"+dst, "-p", strconv.Itoa(port)).Wait()
	if r.Err != nil {
		t.Fatalf("client %s\nserver: %s", r, s.Output())
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy: %d bytes (%v), want the %d of the source\nserver: %s", len(got), err, len(data), s.Output())
	}
}

// rspreload is librdmacm's preload library, which puts socket programs on
// rsockets.
const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// TestRspreloadCurl fetches a page with curl under librspreload, on
// goroce1, from an HTTP server on an rsocket listener of goroce0 (package
// rsocket, in this process): the page comes over rsockets.
func TestRspreloadCurl(t *testing.T) {
	devicetest.Need(t, "curl")
	if _, err := os.Stat(rspreload); err != nil {
		t.Skipf("no %s (apt-get install librdmacm1)", rspreload)
	}
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := devicetest.FreeTCPPort(t)
	ln, err := rsocket.Listen(ctx, d0.Dev, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	page := "over rsockets, " + strconv.Itoa(port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s from %s\n", page, r.RemoteAddr)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	p := h.GoEnv(ctx, []string{"LD_PRELOAD=" + h.Lib + " " + rspreload}, "", "curl", "-sS", "--max-time", "20",
		"--interface", "127.0.0.2", fmt.Sprintf("http://127.0.0.1:%d/", port))
	r := p.Wait()
	if r.Err != nil || !strings.Contains(r.Out, page+" from 127.0.0.2:") {
		t.Fatalf("curl: %s", r)
	}
}

// TestRsocketDeadProgram kills a program (rsreturns send, on goroce1)
// with SIGKILL in the middle of a transfer to another (rsreturns serve, on
// goroce0): the device ends the dead program's connection as the kernel
// ends a dead process's, and the server's read sees the connection end
// within seconds, with an end of stream or ECONNRESET, instead of
// waiting for ever.
func TestRsocketDeadProgram(t *testing.T) {
	exe := devicetest.CC(t, "rsreturns", []string{"testdata/rsreturns.c"}, "-lrdmacm")
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := devicetest.FreeTCPPort(t)
	s := h.Go(ctx, exe, "127.0.0.1", strconv.Itoa(port), "serve")
	defer s.Kill()
	d0.WaitListening(t, port, 20*time.Second)
	c := h.Go(ctx, exe, "127.0.0.1", strconv.Itoa(port), "send")
	defer c.Kill()
	s.WaitFor(t, "accepted", 20*time.Second)
	time.Sleep(time.Second) // the transfer runs
	if c.Exited() {
		t.Fatalf("the sender ended early: %s", c.Wait())
	}
	c.Kill()
	start := time.Now()
	done := make(chan *devicetest.Result, 1)
	go func() { done <- s.Wait() }()
	select {
	case r := <-done:
		t.Logf("%v after the sender's death: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.Out))
		if r.Err != nil || !strings.Contains(r.Out, "ended: ") {
			t.Errorf("the server: %s", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the server still reads 20 s after the sender died: %s", s.Output())
	}
}
