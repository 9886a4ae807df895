//go:build linux

package afpacket

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
	"github.com/goroce/goroce/transport/udp"
)

// batch makes n packets, runs of equal sizes (which a udp sender's GSO
// coalesces) and a few odd ones, with per-packet source ports.
func batch(rng *rand.Rand, n int, dst netip.Addr) []transport.Packet {
	pkts := make([]transport.Packet, n)
	for i := range pkts {
		op, size := bth.Opcode(0x01), 1024
		switch rng.IntN(5) {
		case 0:
			op, size = 0x11, 0 // ACK
		case 1:
			op, size = 0x04, rng.IntN(1025)
		}
		pkts[i] = transport.Packet{Data: transporttest.BuildPacket(rng, op, size, bth.PSN(i)), Dst: dst, SrcPort: 0xC000 + uint16(rng.IntN(0x4000)), TOS: 0x02}
	}
	return pkts
}

type endpoint interface {
	transport.Transport
	LocalPort() uint16
}

// exchange sends from a to b and checks every packet arrives intact and
// verified, from the port and with the ID the sender reported.
func exchange(t *testing.T, rng *rand.Rand, a, b endpoint, cb *transporttest.Collector) {
	t.Helper()
	_, raw := a.(*Transport)
	for _, n := range []int{1, 9, 64} {
		pkts := batch(rng, n, b.LocalAddr())
		if err := a.Send(pkts); err != nil {
			t.Fatalf("Send: %v", err)
		}
		got := cb.Wait(n, 5*time.Second)
		if len(got) != n {
			t.Fatalf("%d of %d arrived; a %+v b %+v", len(got), n, a.Stats(), b.Stats())
		}
		for i := range got {
			g, p := &got[i], &pkts[i]
			if !bytes.Equal(g.Data, p.Data) || g.Src != a.LocalAddr() || g.Dst != b.LocalAddr() {
				t.Fatalf("packet %d: %v -> %v, %d bytes; sent %v -> %v, %d bytes", i, g.Src, g.Dst, len(g.Data), a.LocalAddr(), b.LocalAddr(), len(p.Data))
			}
			if g.IPID != p.IPID || g.SrcPort != p.SrcPort || g.TOS != 0x02 {
				t.Errorf("packet %d: ID %d port %#x TOS %#x; sent ID %d port %#x", i, g.IPID, g.SrcPort, g.TOS, p.IPID, p.SrcPort)
			}
			if raw && g.SrcPort < 0xC000 {
				t.Errorf("packet %d: afpacket did not follow the source port hint: %#x", i, g.SrcPort)
			}
		}
	}
	if s := b.Stats(); s.RxICRCErrors != 0 || s.RxMalformed != 0 {
		t.Errorf("receiver drops: %+v", s)
	}
}

func TestVeth(t *testing.T) {
	nsA, nsB := netnstest.Veth(t, 1)
	for _, ipv6 := range []bool{false, true} {
		fam := map[bool]string{false: "ipv4", true: "ipv6"}[ipv6]
		addrA, addrB := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")
		if ipv6 {
			addrA, addrB = netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("2001:db8:1::2")
		}
		t.Run(fam+"/afpacket-afpacket", func(t *testing.T) {
			var a, b *Transport
			netnstest.In(t, nsA, func() { a = mustNew(t, &Config{Interface: "vA", Addr: addrA}) })
			netnstest.In(t, nsB, func() { b = mustNew(t, &Config{Interface: "vB", Addr: addrB}) })
			ca, cb := start(t, a), start(t, b)
			rng := rand.New(rand.NewPCG(1, uint64(len(fam))))
			exchange(t, rng, a, b, cb)
			exchange(t, rng, b, a, ca)
		})
		for _, gso := range []udp.Offload{udp.OffloadOff, udp.OffloadOn} {
			t.Run(fmt.Sprintf("%s/afpacket-udp/gso=%v", fam, gso), func(t *testing.T) {
				var a *Transport
				var b *udp.Transport
				netnstest.In(t, nsA, func() { a = mustNew(t, &Config{Interface: "vA", Addr: addrA}) })
				netnstest.In(t, nsB, func() {
					var err error
					b, err = udp.New(&udp.Config{Addr: netip.AddrPortFrom(addrB, bth.UDPPort), GSO: gso, GRO: gso})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { b.Close() })
				})
				ca, cb := start(t, a), start(t, b)
				rng := rand.New(rand.NewPCG(2, uint64(len(fam))))
				exchange(t, rng, a, b, cb)
				exchange(t, rng, b, a, ca)
			})
		}
	}
}

// TestVethTOS checks how a packet's TOS meets the link's (Config.TOS): a
// packet's ECN bits keep the link's DSCP, a packet's own DSCP wins over
// the link's, and the link's ECN bits fill a packet that has none.
func TestVethTOS(t *testing.T) {
	nsA, nsB := netnstest.Veth(t, 1)
	var a, b *Transport
	netnstest.In(t, nsA, func() { a = mustNew(t, &Config{Interface: "vA", TOS: 0xB8}) }) // DSCP 46
	netnstest.In(t, nsB, func() { b = mustNew(t, &Config{Interface: "vB"}) })
	start(t, a)
	cb := start(t, b)
	rng := rand.New(rand.NewPCG(4, 4))
	for _, c := range []struct{ sent, want uint8 }{{0x02, 0xBA}, {0x00, 0xB8}, {0x68, 0x68}, {0x6A, 0x6A}, {0x03, 0xBB}} {
		p := transport.Packet{Data: transporttest.BuildPacket(rng, 0x04, 64, 1), Dst: b.LocalAddr(), TOS: c.sent}
		if err := a.Send([]transport.Packet{p}); err != nil {
			t.Fatal(err)
		}
		if got := cb.Wait(1, 5*time.Second); len(got) != 1 || got[0].TOS != c.want {
			t.Errorf("sent TOS %#x on a link of TOS 0xB8: arrived %v, want %#x", c.sent, got, c.want)
		}
	}
}

// TestVethDrops sends a packet with a bad ICRC and garbage to an afpacket
// transport from a plain socket: counted, not delivered; a good packet
// still arrives.
func TestVethDrops(t *testing.T) {
	nsA, nsB := netnstest.Veth(t, 1)
	var b *Transport
	var c *net.UDPConn
	netnstest.In(t, nsB, func() { b = mustNew(t, &Config{Interface: "vB"}) })
	netnstest.In(t, nsA, func() {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 1, 1), Port: bth.UDPPort})
		if err != nil {
			t.Fatal(err)
		}
		// DF without ignore_df: Linux then sends IP ID 0.
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	defer c.Close()
	cb := start(t, b)
	rng := rand.New(rand.NewPCG(3, 3))
	flow := bth.Flow{Src: netip.MustParseAddr("198.18.1.1"), Dst: b.LocalAddr(), SrcPort: bth.UDPPort, DstPort: bth.UDPPort, DF: true}
	good := transporttest.BuildPacket(rng, 0x04, 200, 1)
	flow.Seal(good) // Linux sends ID 0 with DF from an unconnected socket
	bad := append([]byte(nil), good...)
	bad[30] ^= 4
	dst := &net.UDPAddr{IP: net.IPv4(198, 18, 1, 2), Port: bth.UDPPort}
	for _, d := range [][]byte{bad, []byte("not roce"), good} {
		if _, err := c.WriteToUDP(d, dst); err != nil {
			t.Fatal(err)
		}
	}
	got := cb.Wait(1, 5*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Data, good) {
		t.Fatalf("got %d packets; %+v", len(got), b.Stats())
	}
	if s := b.Stats(); s.RxICRCErrors != 1 || s.RxMalformed != 1 || s.RxPackets != 1 {
		t.Errorf("stats %+v, want 1 ICRC error, 1 malformed, 1 packet", s)
	}
}

func TestResolveErrors(t *testing.T) {
	nsA, _ := netnstest.Veth(t, 1)
	var a *Transport
	netnstest.In(t, nsA, func() {
		a = mustNew(t, &Config{Interface: "vA", ResolveTimeout: 300 * time.Millisecond})
	})
	good := transporttest.BuildPacket(rand.New(rand.NewPCG(4, 4)), 0x11, 0, 1)
	for _, dst := range []string{"198.18.1.77", "198.19.9.9"} { // nobody there; no route
		start := time.Now()
		err := a.Send([]transport.Packet{{Data: good, Dst: netip.MustParseAddr(dst)}})
		if !errors.Is(err, ErrNoNeighbor) {
			t.Errorf("Send to %s: %v, want ErrNoNeighbor", dst, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Send to %s took %v", dst, d)
		}
		t.Logf("%s: %v", dst, err)
	}
	if s := a.Stats(); s.TxErrors != 2 || s.TxPackets != 0 {
		t.Errorf("stats %+v", s)
	}
	if err := a.Send([]transport.Packet{{Data: good[:10], Dst: netip.MustParseAddr("198.18.1.2")}}); !errors.Is(err, ErrBadPacket) {
		t.Errorf("short packet: %v", err)
	}
}

// TestPermission checks the error without CAP_NET_RAW: as root it drops
// the capability on one locked thread for the call.
func TestPermission(t *testing.T) {
	call := func() error {
		tr, err := New(&Config{Interface: "lo", Addr: netip.MustParseAddr("127.0.0.1"), Port: 47999})
		if err == nil {
			tr.Close()
		}
		return err
	}
	var err error
	if os.Geteuid() != 0 {
		err = call()
	} else {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data, saved [2]unix.CapUserData
		if e := unix.Capget(&hdr, &data[0]); e != nil {
			runtime.UnlockOSThread()
			t.Skipf("capget: %v", e)
		}
		saved = data
		data[unix.CAP_NET_RAW/32].Effective &^= 1 << (unix.CAP_NET_RAW % 32)
		if e := unix.Capset(&hdr, &data[0]); e != nil {
			runtime.UnlockOSThread()
			t.Skipf("capset: %v", e)
		}
		err = call()
		if e := unix.Capset(&hdr, &saved[0]); e != nil {
			t.Errorf("restoring capabilities: %v", e) // the thread stays locked and dies
		} else {
			runtime.UnlockOSThread()
		}
	}
	if err == nil {
		t.Skip("AF_PACKET worked without CAP_NET_RAW (user namespace?)")
	}
	var op *net.OpError
	if !errors.Is(err, os.ErrPermission) || !errors.As(err, &op) || !strings.Contains(err.Error(), "CAP_NET_RAW") {
		t.Errorf("error %q (%T): want os.ErrPermission, a *net.OpError and advice", err, err)
	}
	t.Log(err)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []*Config{nil, {Interface: "lo", BatchSize: -1}, {Interface: "lo", MaxPacket: 1 << 20}} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v): %v, want ErrBadConfig", c, err)
		}
	}
	if _, err := New(&Config{Interface: "no-such-if0"}); err == nil {
		t.Error("New on a missing interface succeeded")
	}
}

func mustNew(t *testing.T, c *Config) *Transport {
	t.Helper()
	tr, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func start(t *testing.T, tr transport.Transport) *transporttest.Collector {
	t.Helper()
	c := transporttest.NewCollector(t)
	if err := tr.Start(c.Handle); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCloseWaits checks that Close ends the receive goroutine and leaves
// nothing behind, on lo in a namespace of its own.
func TestCloseWaits(t *testing.T) {
	ns := netnstest.New(t)
	before := runtime.NumGoroutine()
	var a *Transport
	netnstest.In(t, ns, func() {
		var err error
		if a, err = New(&Config{Interface: "lo", Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			t.Fatal(err)
		}
	})
	if err := a.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(func([]transport.Packet) {}); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- a.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Send(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}
