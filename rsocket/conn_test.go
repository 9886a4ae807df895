package rsocket

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

func TestEcho(t *testing.T) {
	busy := backend{"udp-busypoll-spin", func(t testing.TB, f transport.Faults) *hosts {
		return udpHostsBusy(t, f, time.Microsecond)
	}}
	ipv6 := backend{"mem-ipv6", func(t testing.TB, f transport.Faults) *hosts {
		return memHostsAt(t, f, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"))
	}}
	for _, be := range append(backends, busy, ipv6) {
		t.Run(be.name, func(t *testing.T) {
			checkNoLeak(t)
			h := be.open(t, transportNoFaults)
			var opts *Options
			if be.name == busy.name {
				opts = &Options{Spin: time.Millisecond}
			}
			c, s, _ := h.pair(t, opts, opts)
			go func() {
				io.Copy(s, s)
				s.CloseWrite()
			}()
			want := make([]byte, 3<<20)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range want {
				want[i] = byte(r.Uint32())
			}
			errc := make(chan error, 1)
			go func() {
				_, err := c.Write(want)
				if err == nil {
					err = c.CloseWrite()
				}
				errc <- err
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("echoed %d bytes, want %d; equal prefix %d", len(got), len(want), commonPrefix(got, want))
			}
			cs, ss := c.Stats(), s.Stats()
			n := uint64(len(want))
			if cs.BytesSent != n || cs.BytesReceived != n || ss.BytesSent != n || ss.BytesReceived != n {
				t.Errorf("bytes counted: client %d sent %d received, server %d sent %d received; want %d",
					cs.BytesSent, cs.BytesReceived, ss.BytesSent, ss.BytesReceived, n)
			}
			// Every data message was read (both sides read to EOF); the
			// last credit messages may still be on their way.
			if cs.MessagesSent != ss.MessagesReceived || ss.MessagesSent != cs.MessagesReceived ||
				cs.MessagesSent < n/defaultMessage || cs.CreditsReceived == 0 || ss.CreditsReceived == 0 {
				t.Errorf("messages counted: client %+v, server %+v", cs, ss)
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestWriteAfterCloseWrite(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, _, _ := h.pair(t, nil, nil)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Write after CloseWrite: %v", err)
	}
}

// TestNoAllocs checks that a connection in steady state allocates nothing
// per message: a 64-byte request and its response, and a 64 KiB write
// read back by the peer.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			h := be.open(t, transportNoFaults)
			c, s, _ := h.pair(t, nil, nil)
			go io.Copy(s, s)
			for _, size := range []int{64, 64 << 10} {
				buf := make([]byte, size)
				rt := func() {
					if _, err := c.Write(buf); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						t.Fatal(err)
					}
				}
				// Warm up: the send queue's slots get their inline
				// buffers on first use, the runtime its caches.
				for range 2000 {
					rt()
				}
				if a := testing.AllocsPerRun(200, rt); a != 0 {
					t.Errorf("%d-byte round trip: %v allocations", size, a)
				}
			}
		})
	}
}

// TestCloseWriteRetried checks that a CloseWrite that timed out waiting
// for a control slot sends its SHUTDOWN when called again.
func TestCloseWriteRetried(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	// Keepalives fill the control slots while the link is cut; the ACK
	// timeout (268 ms, 7 retries) outlasts the cut.
	opts := &Options{KeepAlive: 2 * time.Millisecond, ACKTimeout: 16}
	c, s, _ := h.pair(t, opts, nil)
	h.cut.Store(true)
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.mu.Lock()
		full := c.s.ctrlSeq == c.s.ctrlMax
		c.mu.Unlock()
		if full {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the control slots did not fill in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if err := c.CloseWrite(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("CloseWrite without a control slot: %v", err)
	}
	h.cut.Store(false)
	c.SetWriteDeadline(time.Time{})
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the peer's Read after CloseWrite: %d, %v", n, err)
	}
}

// TestKeepaliveAfterClose checks that a keepalive tick that raced Close
// neither touches the freed QP nor arms its timer again.
func TestKeepaliveAfterClose(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, _, _ := h.pair(t, &Options{KeepAlive: time.Hour}, nil)
	c.Close()
	c.keepalive() // as a tick that got the lock after Close
	if c.keep.Stop() {
		t.Fatal("the keepalive timer was armed again after Close")
	}
}

// TestPathMTU: Options.PathMTU bounds the path MTU the dialler asks for,
// and the listener's connection follows it.
func TestPathMTU(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, s, _ := h.pair(t, &Options{PathMTU: bth.MTU1024}, nil)
	if cm, sm := c.cc.Info().PathMTU, s.cc.Info().PathMTU; cm != bth.MTU1024 || sm != bth.MTU1024 {
		t.Fatalf("path MTU: client %v, server %v; want 1024 on both", cm, sm)
	}
	want := pattern(5000, 9)
	writeRead(t, c, s, want)
}

// TestCloseDeliversAll: Close waits until the peer's device has
// acknowledged every byte written, however many retransmissions that
// takes, as librdmacm's rshutdown does, before it disconnects. Here the
// client's packets are lost for 2.5 s after its Write, so its data
// arrives with the third retransmission, about 3.2 s in: a Close that
// gave up after 2 s destroyed the QP with the data still unsent, and the
// peer read a reset instead of the data (a loss test in the lab, rstream
// against rxe, found it).
func TestCloseDeliversAll(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, s, _ := h.pair(t, &Options{ACKTimeout: 18}, nil) // 1.07 s
	want := pattern(60000, 4)                           // within the server's first buffer half
	h.mute.Store(&h.addrA)
	unmute := time.AfterFunc(2500*time.Millisecond, func() { h.mute.Store(nil) })
	defer unmute.Stop()
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the peer read %d bytes (equal prefix %d of %d), then %v; want all and io.EOF", len(got),
			commonPrefix(got, want), len(want), err)
	}
}
