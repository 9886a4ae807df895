package rsocket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// listenPacket opens a datagram rsocket on dev at addr (port 0: a free
// one) that the test's end closes.
func listenPacketT(t testing.TB, dev verbs.Device, addr netip.Addr) *PacketConn {
	t.Helper()
	c, err := ListenPacket(context.Background(), dev, netip.AddrPortFrom(addr, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readWithin reads one datagram, failing the test after d.
func readWithin(t testing.TB, c *PacketConn, d time.Duration) ([]byte, netip.AddrPort) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 4096)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("read: %v (stats %+v)", err, c.Stats())
	}
	return buf[:n], from
}

// sendDatagram sends p from a to b and checks that b reads it from a.
func sendDatagram(t testing.TB, a, b *PacketConn, p []byte) {
	t.Helper()
	to := b.LocalAddr().(*net.UDPAddr).AddrPort()
	if n, err := a.WriteToUDPAddrPort(p, to); err != nil || n != len(p) {
		t.Fatalf("write %d bytes: %d, %v", len(p), n, err)
	}
	got, from := readWithin(t, b, 5*time.Second)
	if want := a.LocalAddr().(*net.UDPAddr).AddrPort(); from != want {
		t.Fatalf("datagram from %v, want %v", from, want)
	}
	if !bytes.Equal(got, p) {
		t.Fatalf("got %d bytes %.16x..., want %d bytes %.16x...", len(got), got, len(p), p)
	}
}

// TestPacketRoundTrip: the first datagram goes by UDP and teaches the
// receiver the sender's QPN; the answer, and every later datagram, goes on
// the UD QP; sizes from empty to MaxDatagram arrive whole.
func TestPacketRoundTrip(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	a, b := listenPacketT(t, h.a, h.addrA), listenPacketT(t, h.b, h.addrB)
	sendDatagram(t, a, b, []byte("hello"))
	if s := a.Stats(); s.ViaUDP != 1 {
		t.Fatalf("a's first datagram: stats %+v, want one via UDP", s)
	}
	sendDatagram(t, b, a, []byte("hello back"))
	if s := b.Stats(); s.ViaUDP != 0 {
		t.Fatalf("b's answer went by UDP: stats %+v", s)
	}
	waitLearned(t, a, b.local)
	via := a.Stats().ViaUDP
	for _, n := range []int{0, 1, 64, 1000, a.MaxDatagram()} {
		sendDatagram(t, a, b, pattern(n, byte(n)))
		sendDatagram(t, b, a, pattern(n, byte(n+1)))
	}
	if s := a.Stats(); s.ViaUDP != via || s.Sent != 6 || s.Received != 6 {
		t.Fatalf("a's stats %+v: want 6 sent, none by UDP after the first %d, 6 received", s, via)
	}
	if a.MaxDatagram() < 1000 {
		t.Fatalf("MaxDatagram %d", a.MaxDatagram())
	}
}

// TestPacketPeers: several sockets write to one; each reads back the
// answer meant for it, and only that.
func TestPacketPeers(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	server := listenPacketT(t, h.b, h.addrB)
	clients := make([]*PacketConn, 3)
	for i := range clients {
		clients[i] = listenPacketT(t, h.a, h.addrA)
	}
	done := make(chan error, 1)
	go func() { // the server answers each datagram to its sender, naming it
		buf := make([]byte, 2048)
		for range 2 * len(clients) {
			n, from, err := server.ReadFrom(buf)
			if err == nil {
				_, err = server.WriteTo(append(buf[:n:n], []byte(" for "+from.String())...), from)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for round := range 2 {
		for i, c := range clients {
			msg := fmt.Sprintf("client %d round %d", i, round)
			if _, err := c.WriteTo([]byte(msg), server.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			got, from := readWithin(t, c, 5*time.Second)
			if want := msg + " for " + c.LocalAddr().String(); string(got) != want || from != server.local {
				t.Fatalf("client %d read %q from %v, want %q from %v", i, got, from, want, server.local)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPacketIPv6 runs a round trip on ::1: two sockets on one device.
func TestPacketIPv6(t *testing.T) {
	checkNoLeak(t)
	lo := netip.IPv6Loopback()
	u, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	port := uint16(u.LocalAddr().(*net.UDPAddr).Port)
	u.Close()
	dev := openDev(t, &roce.Config{Link: &roce.UDP{Addr: lo, Port: port, PeerPort: port}})
	a, b := listenPacketT(t, dev, lo), listenPacketT(t, dev, lo)
	sendDatagram(t, a, b, []byte("over IPv6"))
	sendDatagram(t, b, a, pattern(b.MaxDatagram(), 3))
	if a.MaxDatagram() != min(dsSlot, dev.ActiveMTU().Bytes())-dsHdrLen6 && a.MaxDatagram() != dsSlot-dsUDPHdrLen6 {
		t.Fatalf("MaxDatagram on IPv6 is %d", a.MaxDatagram())
	}
	if s := b.Stats(); s.ViaUDP != 0 || s.Received != 1 {
		t.Fatalf("b's stats %+v", s)
	}
}

// TestPacketDeadlines: a deadline passed fails at once, one set while a
// call waits ends it, and the error is a timeout.
func TestPacketDeadlines(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	a := listenPacketT(t, h.a, h.addrA)
	buf := make([]byte, 64)
	a.SetDeadline(time.Now().Add(-time.Second))
	_, _, err := a.ReadFrom(buf)
	checkTimeout(t, "read past the deadline", err)
	_, err = a.WriteTo(buf, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9})
	checkTimeout(t, "write past the deadline", err)
	a.SetDeadline(time.Time{})
	ch := make(chan error, 1)
	go func() {
		_, _, err := a.ReadFrom(buf)
		ch <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	a.SetReadDeadline(start.Add(50 * time.Millisecond))
	select {
	case err := <-ch:
		checkTimeout(t, "a pending read", err)
		if time.Since(start) < 40*time.Millisecond {
			t.Fatalf("the read ended after %v, before its deadline", time.Since(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set while ReadFrom waited did not end it")
	}
}

func checkTimeout(t *testing.T, what string, err error) {
	t.Helper()
	var ne net.Error
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() || !errors.As(err, &oe) {
		t.Fatalf("%s: %v (%T), want a *net.OpError timeout matching os.ErrDeadlineExceeded", what, err, err)
	}
}

// TestPacketClose: Close ends a pending ReadFrom; later calls, and a
// second Close, fail with net.ErrClosed.
func TestPacketClose(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	a := listenPacketT(t, h.a, h.addrA)
	ch := make(chan error, 1)
	go func() {
		_, _, err := a.ReadFrom(make([]byte, 8))
		ch <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("pending read: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a pending ReadFrom")
	}
	_, err := a.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9})
	for what, err := range map[string]error{"write": err, "close": a.Close()} {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close: %v, want net.ErrClosed", what, err)
		}
	}
	// The port is free again.
	b, err := ListenPacket(context.Background(), h.a, a.local)
	if err != nil {
		t.Fatalf("listen again on %v: %v", a.local, err)
	}
	b.Close()
}

// TestPacketBadArguments: no exported function panics on bad arguments,
// and each says what is wrong.
func TestPacketBadArguments(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	a := listenPacketT(t, h.a, h.addrA)
	ctx := context.Background()
	var nilConn *PacketConn
	var zero PacketConn
	for name, err := range map[string]error{
		"nil device": func() error { _, err := ListenPacket(ctx, nil, netip.AddrPort{}); return err }(),
		//lint:ignore SA1012 a nil context must not panic
		"nil context": func() error { _, err := ListenPacket(nil, h.a, netip.AddrPort{}); return err }(),
		"bad option": func() error {
			_, err := (&ListenConfig{Options: Options{SendQueue: -1}}).ListenPacket(ctx, h.a, netip.AddrPort{})
			return err
		}(),
		"not the device": func() error { _, err := ListenPacket(ctx, h.a, netip.MustParseAddrPort("127.0.0.9:0")); return err }(),
		"nil read":       func() error { _, _, err := nilConn.ReadFrom(nil); return err }(),
		"zero write":     func() error { _, err := zero.WriteTo(nil, a.LocalAddr()); return err }(),
		"nil close":      nilConn.Close(),
		"zero deadline":  zero.SetDeadline(time.Time{}),
		"nil addr":       func() error { _, err := a.WriteTo([]byte("x"), nil); return err }(),
		"tcp addr": func() error {
			_, err := a.WriteTo([]byte("x"), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9})
			return err
		}(),
		"port 0": func() error {
			_, err := a.WriteToUDPAddrPort([]byte("x"), netip.MustParseAddrPort("127.0.0.2:0"))
			return err
		}(),
		"unspecified": func() error {
			_, err := a.WriteToUDPAddrPort([]byte("x"), netip.MustParseAddrPort("0.0.0.0:9"))
			return err
		}(),
		"IPv6 from IPv4": func() error {
			_, err := a.WriteToUDPAddrPort([]byte("x"), netip.MustParseAddrPort("[::1]:9"))
			return err
		}(),
	} {
		var oe *net.OpError
		if err == nil || !errors.As(err, &oe) {
			t.Errorf("%s: %v (%T), want a *net.OpError", name, err, err)
		}
	}
	if nilConn.LocalAddr() != nil || nilConn.MaxDatagram() != 0 || nilConn.Stats() != (PacketStats{}) {
		t.Error("a nil PacketConn's LocalAddr, MaxDatagram or Stats is not empty")
	}
	_, err := a.WriteTo(make([]byte, a.MaxDatagram()+1), &Addr{AddrPort: netip.MustParseAddrPort("127.0.0.2:9")})
	if !errors.Is(err, ErrMessageSize) || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("oversize write: %v, want ErrMessageSize", err)
	}
	if s := a.Stats(); s.Sent != 0 || s.ViaUDP != 0 {
		t.Fatalf("refused writes were sent: %+v", s)
	}
}

// waitLearned waits until c knows the QPN of the socket at peer (the
// control message that teaches it may come after the peer's answer).
func waitLearned(t testing.TB, c *PacketConn, peer netip.AddrPort) {
	t.Helper()
	for range 500 {
		c.mu.Lock()
		d := c.dests[peer]
		c.mu.Unlock()
		if d != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%v never learned the QPN of %v", c.local, peer)
}
