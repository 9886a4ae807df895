//go:build linux

package udp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// notices registers a watcher of tr's unreachable notices.
func notices(t *testing.T, tr *Transport) <-chan transport.Unreachable {
	t.Helper()
	ch := make(chan transport.Unreachable, 64)
	t.Cleanup(tr.NotifyUnreachable(func(u transport.Unreachable) {
		select {
		case ch <- u:
		default:
		}
	}))
	return ch
}

// TestUnreachable sends to a loopback address and port where no socket
// listens and checks that the kernel's ICMP port unreachable comes back to
// the transport's watcher: the destination, ECONNREFUSED, and the packet
// from its BTH on.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		local, to netip.Addr
	}{
		{"ipv4 other address", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")},
		{"ipv4 same address", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1")},
		{"ipv6", netip.IPv6Loopback(), netip.IPv6Loopback()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t, tc.local)
			dead := freePort(t, tc.to)
			for dead == port {
				dead = freePort(t, tc.to)
			}
			tr, err := New(&Config{Addr: netip.AddrPortFrom(tc.local, port), PeerPort: dead})
			if err != nil {
				t.Skipf("udp: %v", err)
			}
			defer tr.Close()
			if err := tr.Start(func([]transport.Packet) {}); err != nil {
				t.Fatal(err)
			}
			ch := notices(t, tr)
			pkt := transporttest.BuildPacket(rand.New(rand.NewPCG(1, 1)), bth.UDSendOnly, 256, 3)
			start := time.Now()
			if err := tr.Send([]transport.Packet{{Data: append([]byte(nil), pkt...), Dst: tc.to}}); err != nil {
				t.Fatal(err)
			}
			select {
			case u := <-ch:
				if u.Dst != tc.to || !errors.Is(u.Err, syscall.ECONNREFUSED) || u.From != tc.to ||
					len(u.Packet) < bth.BTHLen || !bytes.Equal(u.Packet[:len(pkt)-bth.ICRCLen], pkt[:len(pkt)-bth.ICRCLen]) {
					t.Errorf("notice %+v (packet %x)", u, u.Packet)
				}
				t.Logf("notice after %v: %v from %v", time.Since(start), u.Err, u.From)
			case <-time.After(3 * time.Second):
				t.Fatal("no notice within 3 s")
			}
		})
	}
}

// TestUnreachableNoLoss checks that the ICMP errors the send socket now
// receives cost no packet: the kernel fails the send that follows one with
// its error, and Send sends that packet again. The watcher holds the error
// reader up, so that the errors stay pending.
func TestUnreachableNoLoss(t *testing.T) {
	a, b, _, cb := pair(t, false, OffloadOff, OffloadOff, 7)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer a.NotifyUnreachable(func(transport.Unreachable) {
		select {
		case entered <- struct{}{}:
			<-release
		default:
		}
	})()
	defer close(release)
	dead := netip.MustParseAddr("127.71.7.3") // no socket there
	rng := rand.New(rand.NewPCG(2, 2))
	send := func(dst netip.Addr, i int) error {
		return a.Send([]transport.Packet{{Data: transporttest.BuildPacket(rng, bth.RCSendOnly, 64, bth.PSN(i)), Dst: dst}})
	}
	send(dead, 0)
	select {
	case <-entered:
	case <-time.After(3 * time.Second):
		t.Skip("no ICMP error from a loopback address without a socket")
	}
	const rounds = 5
	for i := range rounds {
		t.Log("dead:", send(dead, i), a.Stats())
		time.Sleep(5 * time.Millisecond) // the ICMP error comes back
		if err := send(b.LocalAddr(), i); err != nil {
			t.Fatalf("round %d: send to the live peer: %v", i, err)
		}
	}
	if got := cb.Wait(rounds, 5*time.Second); len(got) != rounds {
		t.Fatalf("the live peer got %d of %d packets (transport stats %+v)", len(got), rounds, a.Stats())
	}
}

// TestUnreachableClose checks that Close stops the error reader.
func TestUnreachableClose(t *testing.T) {
	before := runtime.NumGoroutine()
	tr, err := New(&Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Skipf("udp: %v", err)
	}
	stop := tr.NotifyUnreachable(func(transport.Unreachable) {})
	tr.NotifyUnreachable(nil)
	stop()
	stop()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before, %d after Close", before, runtime.NumGoroutine())
		}
		time.Sleep(time.Millisecond)
	}
	// Watching a closed transport starts nothing.
	tr.NotifyUnreachable(func(transport.Unreachable) {})()
}
