package libgoroce_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
	goroce "github.com/goroce/goroce/roce"
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
	streamPair(t, "rstream", []struct{ name, args string }{
		{"bandwidth", "-S 65536 -C 200"},
		{"blocking", "-T b -S 65536 -C 100"},
		{"nonblocking", "-T n -S 4096 -C 500"},
		{"async", "-T a -S 4096 -C 500"},
		{"verify", "-T v -S 10000 -C 100"},
		{"latency", "-S 64 -I 200 -C 1"},
	})
}

// streamPair runs prog (rstream or riostream) as server on goroce0 and
// client on goroce1 with each case's arguments: the client prints its
// results line and both end well.
func streamPair(t *testing.T, prog string, cases []struct{ name, args string }) {
	devicetest.Need(t, prog)
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	want := regexp.MustCompile(`(?m)^custom\s+\S+\s+\d+\s+\d+\s+\S+\s+[\d.]+s\s+[\d.]+\s+[\d.]+$`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			port := strconv.Itoa(devicetest.FreeTCPPort(t))
			args := strings.Fields(c.args)
			s := h.Go(ctx, prog, append([]string{"-b", "127.0.0.1", "-p", port}, args...)...)
			defer s.Kill()
			d0.WaitListening(t, devicetest.Atoi(port), 20*time.Second)
			r := h.Go(ctx, prog, append([]string{"-s", "127.0.0.1", "-b", "127.0.0.2", "-p", port}, args...)...).Wait()
			if r.Err != nil || !want.MatchString(r.Out) {
				t.Fatalf("client %s\nserver: %s", r, s.Output())
			}
			if sr := s.Wait(); sr.Err != nil {
				t.Errorf("server %s", sr)
			}
		})
	}
}

// TestRiostream runs librdmacm's riostream, unmodified, both ends on the
// device: the server maps its receive buffer (riomap) and the client
// writes into it (riowrite) in each of its modes; with -T v both ends
// check every byte of every transfer.
func TestRiostream(t *testing.T) {
	streamPair(t, "riostream", []struct{ name, args string }{
		{"bandwidth", "-S 65536 -C 100"},
		{"blocking", "-T b -S 65536 -C 50"},
		{"async", "-T a -S 4096 -C 200"},
		{"verify", "-T v -S 10000 -C 50"},
		{"latency", "-S 64 -I 100 -C 1"},
	})
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

// pongLine is udpong's results line: name, size, transfers, bytes,
// seconds, Gb/s, µs per transfer.
var pongLine = regexp.MustCompile(`(?m)^custom\s+(\S+)\s+(\S+)\s+\S+\s+[\d.]+s\s+[\d.]+\s+[\d.]+$`)

// TestUdpong runs librdmacm's udpong, unmodified, both ends on the
// device (datagram rsockets: the first datagrams to the server's UDP
// port, the rest UD SENDs), the server in its modes (by default a loop of
// non-blocking reads, which spins on a core the device needs: the library
// yields it on each EAGAIN) and the client in its: each echoed message
// comes back (the results line counts twice the messages sent), and the
// server counts those sent one way.
//
// The device is `roce device` in a process of its own: udpong's client
// sends each echo again when its answer has not come within a millisecond,
// and every such resend stays in flight for good (its answer, when it
// comes, is one more to read past), so a device slower than that (ours in
// the test binary under the race detector) buries the client in stale
// echoes: 200 took minutes. On a busy machine (make test's other packages)
// a millisecond's delay comes now and then even so, each adding one echo
// in flight for every transfer after it, a work that grows as the square
// of the transfers: the counts stay small.
func TestUdpong(t *testing.T) {
	devicetest.Need(t, "udpong", "stdbuf")
	h := devicetest.NewHost(t)
	h.StartProcess(roce(t), "goroce0", "127.0.0.1")
	for _, c := range []struct {
		name, server, client string
		transfers            int // 0: one way, some of them lost or not
	}{
		{"echo", "", "-S 64 -C 50 -T e", 100},
		{"echo 1000 bytes", "", "-S 1000 -C 20 -T e", 40},
		{"blocking", "-T b", "-S 256 -C 20 -T b -T e", 40},
		{"async", "-T a", "-S 64 -C 20 -T a -T e", 40},
		{"one way", "-T b", "-S 512 -C 300", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := strconv.Itoa(devicetest.FreeTCPPort(t))
			s := h.Go(ctx, "stdbuf", append([]string{"-oL", "udpong", "-b", "127.0.0.1", "-p", port}, strings.Fields(c.server)...)...)
			defer s.Kill()
			r := h.Go(ctx, "udpong", append([]string{"-s", "127.0.0.1", "-p", port}, strings.Fields(c.client)...)...).Wait()
			m := pongLine.FindStringSubmatch(r.Out)
			n := -1
			if m != nil {
				n = devicetest.Atoi(m[2])
			}
			if r.Err != nil || (c.transfers > 0 && n != c.transfers) || (c.transfers == 0 && (n < 1 || n > 300)) {
				t.Fatalf("client (want %d transfers, 0: some) %s\nserver: %s", c.transfers, r, s.Output())
			}
			s.WaitFor(t, "client login from 127.0.0.1", 5*time.Second)
		})
	}
}

// TestUdpongGo runs udpong's client on the device against a udpong server
// written on package rsocket's PacketConn on another stack (its own
// device on 127.0.0.3, not the uverbs one): the datagrams cross the wire
// between two implementations, and each comes back as sent. The device is
// a process of its own, as in TestUdpong.
func TestUdpongGo(t *testing.T) {
	devicetest.Need(t, "udpong")
	h := devicetest.NewHost(t)
	h.StartProcess(roce(t), "goroce0", "127.0.0.1")
	dev, err := goroce.Open(&goroce.Config{Link: &goroce.UDP{Addr: netip.MustParseAddr("127.0.0.3"), Port: h.Port, PeerPort: h.Port}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pc, err := rsocket.ListenPacket(ctx, dev, netip.MustParseAddrPort("127.0.0.3:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var echoed atomic.Int64
	go func() {
		// udpong's server: op 0 login, 1 start, 2 data, 3 echo, 4 end
		// (the count, big-endian, at offset 4); all but data answered.
		// Unlike udpong's, it answers a resend (the sequence number at
		// offset 2 again) only when 20 ms have passed since the last
		// answer: the client resends after 1 ms, and every answer to a
		// resend stays in flight for good (TestUdpong), which this side,
		// slower under the race detector, would bury it in.
		count := uint32(0)
		b := make([]byte, 2048)
		last, lastAt := -1, time.Time{}
		for {
			n, from, err := pc.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			if n < 16 {
				continue
			}
			if int(b[2]) == last && time.Since(lastAt) < 20*time.Millisecond {
				continue
			}
			switch b[0] {
			case 0, 1:
				count = 0
			case 2:
				count++
				continue
			case 3:
				if int(b[2]) != last {
					count++
					echoed.Add(1)
				}
			case 4:
				binary.BigEndian.PutUint32(b[4:], count)
			}
			last, lastAt = int(b[2]), time.Now()
			pc.WriteToUDPAddrPort(b[:n], from)
		}
	}()
	port := strconv.Itoa(int(pc.LocalAddr().(*net.UDPAddr).Port))
	r := h.Go(ctx, "udpong", "-s", "127.0.0.3", "-p", port, "-S", "1000", "-C", "100", "-T", "e").Wait()
	if m := pongLine.FindStringSubmatch(r.Out); r.Err != nil || m == nil || m[2] != "200" || echoed.Load() != 100 {
		t.Fatalf("client (want 200 transfers, %d echoed, 100): %s", echoed.Load(), r)
	}
	st := pc.Stats()
	t.Logf("the Go side: %+v", st)
}

// pyClient is a Python socket client as a program would write it:
// create_connection with a timeout, a request and its answer.
const pyClient = `
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20, source_address=("127.0.0.2", 0))
data = bytes(range(256)) * 400
c.sendall(data)
c.shutdown(socket.SHUT_WR)
got = b""
while True:
    b = c.recv(65536)
    if not b:
        break
    got += b
print("echoed" if got == data else "differs: %d bytes" % len(got), c.getsockname()[0])
`

// TestRspreloadPython runs a Python socket client (python3, its
// socket module asking for SOCK_CLOEXEC and a timeout) under
// librspreload on goroce1 against an echo server on an rsocket listener
// of goroce0 (package rsocket, in this process): 100 KB go and come back
// over rsockets; nothing listens on the kernel's TCP port, so a fallback
// to a kernel socket could not connect. (A Python server cannot run under
// Debian's librspreload, of rdma-core 44 and 56, on any device: its
// accept4 is not intercepted before rdma-core 63.)
func TestRspreloadPython(t *testing.T) {
	devicetest.Need(t, "python3")
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
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
		c.(*rsocket.Conn).CloseWrite()
	}()
	script := filepath.Join(t.TempDir(), "client.py")
	if err := os.WriteFile(script, []byte(pyClient), 0o600); err != nil {
		t.Fatal(err)
	}
	r := h.GoEnv(ctx, []string{"LD_PRELOAD=" + h.Lib + " " + rspreload}, "", "python3", script, strconv.Itoa(port)).Wait()
	if r.Err != nil || !strings.Contains(r.Out, "echoed 127.0.0.2") {
		t.Fatalf("python3: %s", r)
	}
}

// TestRspreloadServer runs socket programs under librspreload at both
// ends on the device: curl (on goroce1) against a plain socket HTTP server
// (testdata/tinyhttpd.c, on goroce0), and rstream's socket mode (-T s,
// blocking and non-blocking) against itself. The servers' listeners are
// the device's (rsockets), not the kernel's.
func TestRspreloadServer(t *testing.T) {
	if _, err := os.Stat(rspreload); err != nil {
		t.Skipf("no %s (apt-get install librdmacm1)", rspreload)
	}
	httpd := devicetest.CC(t, "tinyhttpd", []string{"testdata/tinyhttpd.c"})
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	env := []string{"LD_PRELOAD=" + h.Lib + " " + rspreload}
	t.Run("curl", func(t *testing.T) {
		devicetest.Need(t, "curl")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		port := devicetest.FreeTCPPort(t)
		s := h.GoEnv(ctx, env, "", httpd, "127.0.0.1", strconv.Itoa(port), "2")
		defer s.Kill()
		d0.WaitListening(t, port, 20*time.Second)
		for range 2 {
			r := h.GoEnv(ctx, env, "", "curl", "-sS", "--max-time", "20", "--interface", "127.0.0.2",
				fmt.Sprintf("http://127.0.0.1:%d/", port)).Wait()
			if r.Err != nil || !strings.Contains(r.Out, "tinyhttpd answers 127.0.0.2:") {
				t.Fatalf("curl: %s\nserver: %s", r, s.Output())
			}
		}
		if r := s.Wait(); r.Err != nil || strings.Count(r.Out, "served ") != 2 {
			t.Errorf("server: %s", r)
		}
	})
	for _, c := range []struct{ name, args string }{
		{"rstream blocking", "-T s -T b -S 4096 -C 50 -I 2 -T v"},
		{"rstream nonblocking", "-T s -T n -S 4096 -C 50 -I 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			devicetest.Need(t, "rstream")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := strconv.Itoa(devicetest.FreeTCPPort(t))
			args := strings.Fields(c.args)
			s := h.GoEnv(ctx, env, "", "rstream", append([]string{"-b", "127.0.0.1", "-p", port}, args...)...)
			defer s.Kill()
			d0.WaitListening(t, devicetest.Atoi(port), 20*time.Second)
			r := h.GoEnv(ctx, env, "", "rstream", append([]string{"-s", "127.0.0.1", "-b", "127.0.0.2", "-p", port}, args...)...).Wait()
			if r.Err != nil || !strings.Contains(r.Out, "custom    4k") {
				t.Fatalf("client %s\nserver: %s", r, s.Output())
			}
			if sr := s.Wait(); sr.Err != nil {
				t.Errorf("server %s", sr)
			}
		})
	}
}
