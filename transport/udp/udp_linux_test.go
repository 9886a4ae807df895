//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// freePort returns a UDP port free on addr at the time of the call.
func freePort(t testing.TB, addr netip.Addr) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

// pair returns two started transports that send to each other, and their
// collectors. IPv4 uses two loopback addresses on port 4791; IPv6 uses ::1
// and two ports.
func pair(t *testing.T, ipv6 bool, gso, gro Offload, subnet byte) (a, b *Transport, ca, cb *transporttest.Collector) {
	t.Helper()
	ca1, cb1 := pairConfigs(t, ipv6, 71, subnet)
	ca1.GSO, ca1.GRO, cb1.GSO, cb1.GRO = gso, gro, gso, gro
	a, b = mustNew(t, &ca1), mustNew(t, &cb1)
	ca, cb = transporttest.NewCollector(t), transporttest.NewCollector(t)
	if err := a.Start(ca.Handle); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(cb.Handle); err != nil {
		t.Fatal(err)
	}
	return a, b, ca, cb
}

// pairConfigs returns the configurations of two transports that send to
// each other: IPv4 on 127.x.subnet.1 and .2, port 4791; IPv6 on ::1 and
// two free ports.
func pairConfigs(t *testing.T, ipv6 bool, x, subnet byte) (a, b Config) {
	t.Helper()
	if !ipv6 {
		return Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, subnet, 1}), bth.UDPPort)},
			Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, subnet, 2}), bth.UDPPort)}
	}
	lo := netip.IPv6Loopback()
	pa, pb := freePort(t, lo), freePort(t, lo)
	for pb == pa {
		pb = freePort(t, lo)
	}
	return Config{Addr: netip.AddrPortFrom(lo, pa), PeerPort: pb}, Config{Addr: netip.AddrPortFrom(lo, pb), PeerPort: pa}
}

// exchange sends batches from a to b and checks that every packet arrives
// whole, in order, with the addresses, port, TOS and IPv4 ID it was sent
// with.
func exchange(t *testing.T, rng *rand.Rand, a, b *Transport, cb *transporttest.Collector, sizes []int, tos uint8) {
	t.Helper()
	before := b.Stats()
	var total, totalBytes uint64
	for _, n := range sizes {
		pkts := randomBatch(rng, n, a.LocalAddr(), b.LocalAddr(), tos)
		if err := a.Send(pkts); err != nil {
			t.Fatalf("Send(%d packets): %v", n, err)
		}
		got := cb.Wait(n, 5*time.Second)
		if len(got) != n {
			t.Fatalf("batch of %d: %d arrived; a %+v b %+v", n, len(got), a.Stats(), b.Stats())
		}
		for i := range got {
			g, p := &got[i], &pkts[i]
			if !bytes.Equal(g.Data, p.AppendTo(nil)) || g.Payload != nil {
				t.Fatalf("batch of %d, packet %d (%d bytes, payload apart: %v): data differs", n, i, p.Len(), p.Payload != nil)
			}
			if g.Src != a.LocalAddr() || g.Dst != b.LocalAddr() || g.SrcPort != a.SendPort() {
				t.Errorf("packet %d: got %v:%d -> %v, want %v:%d -> %v", i, g.Src, g.SrcPort, g.Dst,
					a.LocalAddr(), a.SendPort(), b.LocalAddr())
			}
			if g.IPID != p.IPID || g.TOS != tos {
				t.Errorf("packet %d: IPID %d TOS %#x, sent %d %#x", i, g.IPID, g.TOS, p.IPID, tos)
			}
			if p.SrcPort != a.SendPort() {
				t.Errorf("packet %d: Send left SrcPort %d, socket port %d", i, p.SrcPort, a.SendPort())
			}
			f := bth.Flow{Src: g.Src, Dst: g.Dst, SrcPort: g.SrcPort, DstPort: b.LocalPort(), ID: g.IPID, DF: g.Src.Is4()}
			if !f.Verify(g.Data) {
				t.Errorf("packet %d: ICRC does not verify with the reported flow %+v", i, f)
			}
			total++
			totalBytes += uint64(p.Len())
		}
	}
	after := b.Stats()
	if d := after.RxPackets - before.RxPackets; d != total {
		t.Errorf("RxPackets grew by %d, want %d", d, total)
	}
	if d := after.RxBytes - before.RxBytes; d != totalBytes {
		t.Errorf("RxBytes grew by %d, want %d", d, totalBytes)
	}
	if after.RxICRCErrors != before.RxICRCErrors || after.RxMalformed != before.RxMalformed {
		t.Errorf("drops: %+v", after)
	}
}

func TestLoopback(t *testing.T) {
	sizes := []int{1, 2, 7, 16, 33, 64, 64, 3}
	subnet := byte(10)
	for _, ipv6 := range []bool{false, true} {
		for _, off := range []struct {
			name     string
			gso, gro Offload
		}{{"gso+gro", OffloadAuto, OffloadAuto}, {"plain", OffloadOff, OffloadOff}, {"gso-only", OffloadAuto, OffloadOff}} {
			subnet++
			name := "ipv4/" + off.name
			if ipv6 {
				name = "ipv6/" + off.name
			}
			t.Run(name, func(t *testing.T) {
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				rng := rand.New(rand.NewPCG(seed, 1))
				a, b, ca, cb := pair(t, ipv6, off.gso, off.gro, subnet)
				if off.gso == OffloadOff && a.GSO() {
					t.Fatal("GSO on with OffloadOff")
				}
				exchange(t, rng, a, b, cb, sizes, 0)
				exchange(t, rng, b, a, ca, sizes, 0xB8|0x02) // DSCP EF, ECT(0)
				if s := a.Stats(); s.TxErrors != 0 {
					t.Errorf("a: %+v", s)
				}
			})
		}
	}
}

// TestDrops sends, from a plain socket, a good packet, one with a bad ICRC
// and garbage: the bad ones are counted and never reach the handler.
func TestDrops(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[ipv6], func(t *testing.T) {
			a, b, _, cb := pair(t, ipv6, OffloadAuto, OffloadAuto, 30)
			a.Close() // its address is the plain socket's now
			src := a.LocalAddrPort()
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(src))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			flow := bth.Flow{Src: src.Addr(), Dst: b.LocalAddr(), SrcPort: src.Port(), DstPort: b.LocalPort(), DF: !ipv6}
			good := transporttest.BuildPacket(rng, 0x04, 100, 5)
			flow.Seal(good)
			bad := append([]byte(nil), good...)
			bad[bth.BTHLen+17] ^= 0x10
			badOpcode := append([]byte(nil), good...)
			badOpcode[0] = 0x1F // undefined opcode
			flow.Seal(badOpcode)
			dst := net.UDPAddrFromAddrPort(b.LocalAddrPort())
			for _, d := range [][]byte{bad, {1, 2, 3}, badOpcode, make([]byte, 15), good} {
				if _, err := c.WriteToUDP(d, dst); err != nil {
					t.Fatal(err)
				}
			}
			got := cb.Wait(1, 5*time.Second)
			// The good packet went last; give the others' counts a moment.
			deadline := time.Now().Add(2 * time.Second)
			for b.Stats().RxMalformed < 3 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if len(got) != 1 || !bytes.Equal(got[0].Data, good) {
				t.Fatalf("got %d packets, want the good one", len(got))
			}
			s := b.Stats()
			if s.RxPackets != 1 || s.RxICRCErrors != 1 || s.RxMalformed != 3 {
				t.Errorf("stats %+v, want 1 packet, 1 ICRC error, 3 malformed", s)
			}
		})
	}
}

// TestForeignIPID sends IPv4 packets with rxe-like incrementing IDs from a
// raw socket: the receiver recovers each ID.
func TestForeignIPID(t *testing.T) {
	netnstest.RequireRoot(t)
	_, b, _, cb := pair(t, false, OffloadOff, OffloadAuto, 31)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		t.Skipf("raw socket: %v", err)
	}
	defer unix.Close(fd)
	rng := rand.New(rand.NewPCG(5, 6))
	src := netip.MustParseAddr("127.71.31.9")
	const n = 20
	var want [][]byte
	for i := range n {
		roce := transporttest.BuildPacket(rng, 0x01, 1024, bth.PSN(i))
		ff := bth.FrameFields{
			Flow: bth.Flow{Src: src, Dst: b.LocalAddr(), SrcPort: 0xC123, DstPort: b.LocalPort(), ID: 0xa4bc + uint16(i), DF: true},
			TOS:  0x02,
		}
		ff.Flow.Seal(roce)
		frame := make([]byte, ff.HeaderLen()+len(roce))
		copy(frame[ff.HeaderLen():], roce)
		bth.EncodeFrame(frame, &ff)
		if bth.FrameICRC(frame) != binary.LittleEndian.Uint32(roce[len(roce)-4:]) {
			t.Fatal("test frame ICRC mismatch")
		}
		if err := unix.Sendto(fd, frame, 0, &unix.SockaddrInet4{Addr: b.LocalAddr().As4()}); err != nil {
			t.Fatal(err)
		}
		want = append(want, roce)
	}
	got := cb.Wait(n, 5*time.Second)
	if len(got) != n {
		t.Fatalf("%d of %d arrived; %+v", len(got), n, b.Stats())
	}
	for i, g := range got {
		if g.IPID != 0xa4bc+uint16(i) || !bytes.Equal(g.Data, want[i]) || g.SrcPort != 0xC123 || g.Src != src || g.TOS != 0x02 {
			t.Errorf("packet %d: IPID %#x port %#x src %v TOS %#x", i, g.IPID, g.SrcPort, g.Src, g.TOS)
		}
	}
}

// TestWildcard binds one side to 0.0.0.0: it learns each packet's
// destination with IP_PKTINFO and sends from each packet's Src.
func TestWildcard(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[ipv6], func(t *testing.T) {
			any, local := netip.IPv4Unspecified(), netip.MustParseAddr("127.71.32.1")
			peer := netip.MustParseAddr("127.71.32.2")
			if ipv6 {
				any, local, peer = netip.IPv6Unspecified(), netip.IPv6Loopback(), netip.IPv6Loopback()
			}
			// Two ports that differ: each was free when freePort closed
			// it, so the kernel may give the same one twice, and the
			// wildcard bound to it would hold the peer's address too.
			pw, pp := freePort(t, any), freePort(t, peer)
			for i := 0; pp == pw && i < 100; i++ {
				pp = freePort(t, peer)
			}
			w := mustNew(t, &Config{Addr: netip.AddrPortFrom(any, pw), PeerPort: pp, MaxPacket: DefaultMaxPacket})
			p := mustNew(t, &Config{Addr: netip.AddrPortFrom(peer, pp), PeerPort: pw})
			cw, cp := transporttest.NewCollector(t), transporttest.NewCollector(t)
			if err := w.Start(cw.Handle); err != nil {
				t.Fatal(err)
			}
			if err := p.Start(cp.Handle); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			pkts := randomBatch(rng, 10, local, peer, 0)
			if err := w.Send(pkts); err != nil {
				t.Fatal(err)
			}
			if got := cp.Wait(10, 5*time.Second); len(got) != 10 || got[9].Src != local {
				t.Fatalf("peer got %d packets", len(got))
			}
			pkts = randomBatch(rng, 10, peer, local, 0)
			if err := p.Send(pkts); err != nil {
				t.Fatal(err)
			}
			got := cw.Wait(10, 5*time.Second)
			if len(got) != 10 {
				t.Fatalf("wildcard side got %d packets; %+v", len(got), w.Stats())
			}
			for _, g := range got {
				if g.Dst != local {
					t.Errorf("Dst %v, want %v from IP_PKTINFO", g.Dst, local)
				}
			}
			// Without Src a wildcard socket cannot predict the header.
			err := w.Send([]transport.Packet{{Data: pkts[0].Data, Dst: peer}})
			if !errors.Is(err, ErrBadPacket) || w.Stats().TxErrors != 1 {
				t.Errorf("Send without Src: %v, stats %+v", err, w.Stats())
			}
		})
	}
}

func TestSendErrors(t *testing.T) {
	a := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.33.1:4791")})
	dst := netip.MustParseAddr("127.71.33.2")
	big := make([]byte, a.MaxPacket()+1)
	good := transporttest.BuildPacket(rand.New(rand.NewPCG(1, 1)), 0x11, 0, 1)
	pkts := []transport.Packet{
		{Data: make([]byte, 15), Dst: dst},
		{Data: big, Dst: dst},
		{Data: good, Dst: netip.IPv6Loopback()},
		{Data: good, Dst: dst},
	}
	err := a.Send(pkts)
	if !errors.Is(err, ErrBadPacket) {
		t.Errorf("Send: %v, want ErrBadPacket", err)
	}
	if s := a.Stats(); s.TxErrors != 3 || s.TxPackets != 1 {
		t.Errorf("stats %+v, want 3 errors and 1 packet", s)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(pkts[3:]); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Start(func([]transport.Packet) {}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"batch", Config{BatchSize: 5000}},
		{"max packet", Config{MaxPacket: 70000}},
		{"offload", Config{GSO: 7}},
		{"negative", Config{BusyPoll: -1}},
		{"zone", Config{Addr: netip.MustParseAddrPort("[fe80::1%lo]:4791")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(&tc.cfg); !errors.Is(err, ErrBadConfig) {
				t.Errorf("New: %v, want ErrBadConfig", err)
			}
		})
	}
	t.Run("in use", func(t *testing.T) {
		a := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.34.1:4791")})
		if _, err := New(&Config{Addr: a.LocalAddrPort()}); !errors.Is(err, unix.EADDRINUSE) {
			t.Errorf("second New on %v: %v", a.LocalAddrPort(), err)
		}
		if err := a.Start(nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Start(nil): %v", err)
		}
		if err := a.Start(func([]transport.Packet) {}); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(func([]transport.Packet) {}); !errors.Is(err, ErrStarted) {
			t.Errorf("second Start: %v", err)
		}
	})
}

// TestCloseWaits checks that Close stops the receive goroutine, also while
// it busy-polls, and that no goroutine is left behind.
func TestCloseWaits(t *testing.T) {
	before := runtime.NumGoroutine()
	for i, busy := range []time.Duration{0, time.Hour} {
		a, err := New(&Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 71, 35, byte(i + 1)}), bth.UDPPort), BusyPoll: busy})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(func([]transport.Packet) {}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // let it block (or spin)
		done := make(chan error, 1)
		go func() { done <- a.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Close (busy poll %v) did not return", busy)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

func TestBusyPoll(t *testing.T) {
	a := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.36.1:4791"), BusyPoll: 50 * time.Millisecond})
	b := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.36.2:4791"), BusyPoll: 50 * time.Millisecond})
	cb := transporttest.NewCollector(t)
	if err := b.Start(cb.Handle); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	exchange(t, rng, a, b, cb, []int{1, 64, 5}, 0)
	time.Sleep(80 * time.Millisecond) // past the spin: the loop sleeps in the poller
	exchange(t, rng, a, b, cb, []int{3}, 0)
}

// TestStreamSpin drives the receive loop's read step by hand: after a
// batch of StreamBytes it looks again for StreamSpin and catches a
// datagram that comes meanwhile; once a look has run dry, or after small
// batches only, it leaves waiting to the poller at once.
func TestStreamSpin(t *testing.T) {
	a := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.37.1:4791")})
	b := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.37.2:4791"), StreamSpin: 10 * time.Second})
	rx := newRxState(b)
	cb := transporttest.NewCollector(t)
	rcv := newReceiver(cb.Handle, b.cfg.BatchSize, b.local.Port(), &b.stats)
	var fd int
	if err := b.rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 7))
	var mu sync.Mutex // rng
	send := func(n, size int) error {
		mu.Lock()
		defer mu.Unlock()
		pkts := make([]transport.Packet, n)
		for i := range pkts {
			pkts[i] = transport.Packet{Data: transporttest.BuildPacket(rng, bth.Opcode(0x01), size, bth.PSN(i)),
				Src: a.LocalAddr(), Dst: b.LocalAddr()}
		}
		return a.Send(pkts)
	}
	var late sync.WaitGroup
	defer late.Wait()
	// read runs one read step; with late, a datagram sent 200 ms later
	// comes while it spins, or is left for the next step.
	read := func(lateOne bool) bool {
		t.Helper()
		if lateOne {
			late.Go(func() {
				time.Sleep(200 * time.Millisecond)
				if err := send(1, 64); err != nil {
					t.Error(err)
				}
			})
		}
		if !rx.read(uintptr(fd)) {
			return false
		}
		b.deliver(rx, rcv)
		b.rxMu.Unlock()
		return true
	}

	if err := send(1, 64); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if !read(false) || rx.stream {
		t.Fatalf("a 64-byte batch: stream %v", rx.stream)
	}
	if read(true) {
		t.Fatal("after a small batch, the read step spun and caught a late datagram")
	}
	late.Wait()
	if !read(false) { // the late one, now waiting
		t.Fatal("the late datagram was not received")
	}

	if err := send(16, 4096); err != nil { // one GSO run: a GRO train of 64 KiB
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if !read(false) || !rx.stream {
		t.Fatalf("after a 64 KiB batch: stream %v", rx.stream)
	}
	if !read(true) {
		t.Fatal("after a stream's batch, the read step did not spin until the late datagram came")
	}

	rx.spin = 10 * time.Millisecond
	if read(false) || rx.stream {
		t.Fatalf("a spin that ran dry left stream %v", rx.stream)
	}
	rx.spin = 10 * time.Second
	if read(true) {
		t.Fatal("after a spin ran dry, the read step spun again")
	}
	late.Wait()
	if !read(false) {
		t.Fatal("the last late datagram was not received")
	}
	if got := cb.Wait(20, 5*time.Second); len(got) != 20 {
		t.Errorf("%d packets delivered, want 20", len(got))
	}
}

// TestAllocs shows that Send, and a whole round trip through the receive
// goroutine to the handler, allocate nothing in steady state.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, gso := range []Offload{OffloadOff, OffloadAuto} {
		t.Run("gso="+gso.String(), func(t *testing.T) {
			a := mustNew(t, &Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("127.71.37.%d:4791", 1+2*int(gso))), GSO: gso, GRO: gso})
			b := mustNew(t, &Config{Addr: netip.MustParseAddrPort(fmt.Sprintf("127.71.37.%d:4791", 2+2*int(gso))), GSO: gso, GRO: gso})
			got := make(chan int, 1024)
			if err := b.Start(func(p []transport.Packet) {
				select {
				case got <- len(p):
				default:
				}
			}); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(10, 10))
			pkts := randomBatch(rng, 32, a.LocalAddr(), b.LocalAddr(), 0)
			timer := time.NewTimer(time.Hour)
			roundTrip := func() {
				if err := a.Send(pkts); err != nil {
					t.Fatal(err)
				}
				timer.Reset(5 * time.Second)
				for n := 0; n < len(pkts); {
					select {
					case k := <-got:
						n += k
					case <-timer.C:
						t.Fatalf("round trip timed out; %+v", b.Stats())
					}
				}
				timer.Stop()
			}
			roundTrip() // warm up: solver tables, poller
			// The transport itself allocates nothing; what bth's ICRC
			// costs (one CRC per packet each way) is allowed for, so
			// this asserts 0 once bth allocates nothing.
			icrc := bthICRCAllocs()
			if icrc != 0 {
				t.Logf("bth allocates %v per ICRC; allowed for", icrc)
			}
			n := float64(len(pkts))
			if got := testing.AllocsPerRun(50, roundTrip); got > 2*n*icrc {
				t.Errorf("Send + receive: %v allocations per batch, want %v", got, 2*n*icrc)
			}
			// Send alone, to an address nobody listens on, so that no
			// receiver allocates meanwhile.
			for i := range pkts {
				pkts[i].Dst = netip.MustParseAddr("127.71.37.99")
			}
			if got := testing.AllocsPerRun(50, func() {
				if err := a.Send(pkts); err != nil {
					t.Fatal(err)
				}
			}); got > n*icrc {
				t.Errorf("Send: %v allocations per batch, want %v", got, n*icrc)
			}
		})
	}
}

// bthICRCAllocs is what one bth ICRC computation allocates: the pseudo
// header buffer of Flow.ICRC escapes through crc32.Update in bth as of this
// writing.
func bthICRCAllocs() float64 {
	f := bth.Flow{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"), DF: true}
	b := make([]byte, 64)
	var s bth.IDSolver
	s.Recover(&f, b)
	return max(testing.AllocsPerRun(100, func() { f.Seal(b) }), testing.AllocsPerRun(100, func() { s.Recover(&f, b) }))
}

// TestZeroChecksumIPv6 sends IPv6 datagrams whose UDP checksum is 0, as
// rxe sends RoCEv2 over IPv6: the receiver takes them (the kernel drops
// such datagrams on a socket without UDP_NO_CHECK6_RX).
func TestZeroChecksumIPv6(t *testing.T) {
	_, b, _, cb := pair(t, true, OffloadOff, OffloadAuto, 0)
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1); err != nil {
		t.Skipf("UDP_NO_CHECK6_TX: %v", err)
	}
	lo := netip.IPv6Loopback()
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: lo.As16()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	sport := uint16(sa.(*unix.SockaddrInet6).Port)
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 10
	var want [][]byte
	for i := range n {
		roce := transporttest.BuildPacket(rng, 0x01, 1024, bth.PSN(i))
		f := bth.Flow{Src: lo, Dst: b.LocalAddr(), SrcPort: sport, DstPort: b.LocalPort()}
		f.Seal(roce)
		if err := unix.Sendto(fd, roce, 0, &unix.SockaddrInet6{Addr: lo.As16(), Port: int(b.LocalPort())}); err != nil {
			t.Fatal(err)
		}
		want = append(want, roce)
	}
	got := cb.Wait(n, 5*time.Second)
	if len(got) != n {
		t.Fatalf("%d of %d datagrams with UDP checksum 0 arrived; %+v", len(got), n, b.Stats())
	}
	for i, g := range got {
		if !bytes.Equal(g.Data, want[i]) || g.SrcPort != sport || g.Src != lo {
			t.Errorf("packet %d: %d bytes from %v:%d, want %d from %v:%d", i, len(g.Data), g.Src, g.SrcPort, len(want[i]), lo, sport)
		}
	}
}

// TestFlowLabelIPv6 receives what the transport sends over IPv6 on a
// plain socket that reports the flow information: the flow label is 0, as
// rxe sends it, not one the kernel makes up per flow
// (net.ipv6.auto_flowlabels), and the traffic class is the packet's TOS.
func TestFlowLabelIPv6(t *testing.T) {
	const ipv6FlowInfo = 11 // IPV6_FLOWINFO of linux/in6.h: flow information with each datagram
	lo := netip.IPv6Loopback()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, ipv6FlowInfo, 1); err != nil {
		t.Skipf("IPV6_FLOWINFO: %v", err)
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: lo.As16()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	peer := uint16(sa.(*unix.SockaddrInet6).Port)
	a := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo)), PeerPort: peer})
	rng := rand.New(rand.NewPCG(9, 10))
	const tos = 0x68
	pkts := randomBatch(rng, 4, lo, lo, tos)
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 65536), make([]byte, 256)
	for i := range pkts {
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == ipv6FlowInfo && len(m.Data) >= 4 {
				found = true
				info := binary.BigEndian.Uint32(m.Data)
				if label, tc := info&0xFFFFF, uint8(info>>20); label != 0 || tc != tos {
					t.Errorf("packet %d: flow label %#x, traffic class %#x; want 0 and %#x", i, label, tc, tos)
				}
			}
		}
		if !found {
			t.Fatalf("packet %d: no IPV6_FLOWINFO control message", i)
		}
	}
}

// TestAdaptiveSpin: the receive goroutine's spin on an empty socket,
// when no stream runs, follows how long it slept before its wakes
// (rxState.learn): a short sleep makes the next spin outlast it, up to
// adaptMax; long sleeps halve it down to none. A read step with a spin
// learned looks for that long before it sleeps, and notes how long.
func TestAdaptiveSpin(t *testing.T) {
	b := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.71.37.4:4791")})
	rx := newRxState(b)
	steps := []struct {
		gap, want time.Duration
	}{
		{10 * time.Microsecond, 15 * time.Microsecond},
		{10 * time.Microsecond, 30 * time.Microsecond},
		{40 * time.Microsecond, adaptMax},
		{time.Millisecond, adaptMax / 2},
		{time.Millisecond, adaptMax / 4},
		{time.Second, adaptMax / 8},
	}
	for i, s := range steps {
		rx.learn(s.gap)
		if rx.adapt != s.want {
			t.Fatalf("step %d: after a gap of %v the spin is %v, want %v", i, s.gap, rx.adapt, s.want)
		}
	}
	for rx.adapt > 0 {
		rx.learn(time.Second)
	}
	var fd int
	if err := b.rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	rx.adapt = adaptMax
	start := time.Now()
	if rx.read(uintptr(fd)) {
		t.Fatal("a read step on an empty socket returned a batch")
	}
	if took := time.Since(start); took < adaptMax || rx.spun < adaptMax || rx.parked.IsZero() {
		t.Fatalf("the read step looked for %v (noted %v, parked %v), want at least %v", took, rx.spun, rx.parked, adaptMax)
	}
	// The next step learns from the sleep and the look before it.
	rx.parked = time.Now().Add(-time.Second)
	rx.read(uintptr(fd))
	if rx.adapt != adaptMax/2 {
		t.Fatalf("after a second's sleep the spin is %v, want %v", rx.adapt, adaptMax/2)
	}

	// A goroutine that no longer spins spins all the same once in
	// probeEvery sleeps, and a probe that catches a datagram starts the
	// spin again.
	rx.adapt, rx.sleeps = 0, 0
	spun := 0
	for range 2 * probeEvery {
		rx.parked = time.Time{}
		if rx.read(uintptr(fd)) {
			t.Fatal("a read step on an empty socket returned a batch")
		}
		if rx.spun > 0 {
			spun++
		}
	}
	if spun != 2 || rx.adapt != 0 {
		t.Fatalf("%d of %d sleeps spun (spin now %v), want 2 probes and no spin", spun, 2*probeEvery, rx.adapt)
	}
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(b.LocalAddrPort()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for try := 0; rx.adapt == 0 && try < 50; try++ {
		rx.sleeps, rx.parked = probeEvery-1, time.Time{}
		go func() {
			for t0 := time.Now(); time.Since(t0) < 10*time.Microsecond; {
			}
			c.Write([]byte("probe"))
		}()
		if rx.read(uintptr(fd)) {
			b.rxMu.Unlock()
		}
	}
	if rx.adapt == 0 {
		t.Fatal("no probe caught a datagram sent 10 us into it in 50 tries")
	}
}

// TestSendBesideSend checks that a small Send (three ACKs) does not wait
// for one in progress (its send state held, as a long sendmmsg holds
// it), that with every state held it waits for one and then goes, and
// that packets sent from several goroutines at once all arrive, each
// once and whole.
func TestSendBesideSend(t *testing.T) {
	a, b, _, cb := pair(t, false, OffloadAuto, OffloadAuto, 40)
	rng := rand.New(rand.NewPCG(1, 2))
	acks := func() []transport.Packet {
		pkts := make([]transport.Packet, 3)
		for i := range pkts {
			pkts[i] = transport.Packet{Data: transporttest.BuildPacket(rng, bth.Opcode(0x11), 0, bth.PSN(i)),
				Src: a.LocalAddr(), Dst: b.LocalAddr()}
		}
		return pkts
	}
	first, second := acks(), acks()
	done := make(chan error, 1)
	// The states the test holds, let go before the transports close.
	held := make([]bool, len(a.tx))
	hold := func(i int) { a.tx[i].mu.Lock(); held[i] = true }
	release := func() {
		for i := range held {
			if held[i] {
				held[i] = false
				a.tx[i].mu.Unlock()
			}
		}
	}
	t.Cleanup(release)
	// sent waits for the Send in progress to return, failing with why if
	// it does not within 5 s.
	sent := func(why string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal(why)
		}
	}
	hold(0)
	go func() { done <- a.Send(first) }()
	sent("a Send waited for the send in progress")
	if got := cb.Wait(3, 5*time.Second); len(got) != 3 {
		t.Fatalf("%d of 3 packets arrived", len(got))
	}
	for i := 1; i < len(a.tx); i++ {
		hold(i)
	}
	go func() { done <- a.Send(second) }()
	select {
	case err := <-done:
		t.Fatalf("a Send went with every send state held (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	sent("a Send waiting for a send state did not go once they were free")
	if got := cb.Wait(3, 5*time.Second); len(got) != 3 {
		t.Fatalf("%d of 3 packets arrived after the wait", len(got))
	}

	// Four senders at once, each its own run of PSNs (the sender in the
	// top bits).
	const senders, batches = 4, 100
	want := make(map[bth.PSN][]byte)
	sends := make([][][]transport.Packet, senders)
	for s := range sends {
		seq := 0
		for range batches {
			n := 1 + rng.IntN(8)
			pkts := make([]transport.Packet, n)
			for i := range pkts {
				psn := bth.PSN(s<<20 | seq)
				seq++
				data := transporttest.BuildPacket(rng, bth.Opcode(0x01), []int{256, 4096}[rng.IntN(2)], psn)
				pkts[i] = transport.Packet{Data: data, Src: a.LocalAddr(), Dst: b.LocalAddr()}
				want[psn] = data
			}
			sends[s] = append(sends[s], pkts)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for _, pkts := range sends[s] {
				if err := a.Send(pkts); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := cb.Wait(len(want), 10*time.Second)
	if len(got) != len(want) {
		t.Fatalf("%d of %d packets arrived; a %+v b %+v", len(got), len(want), a.Stats(), b.Stats())
	}
	for _, g := range got {
		psn := bth.BTH(g.Data).PSN()
		w, ok := want[psn]
		if !ok {
			t.Fatalf("PSN %#x arrived twice, or was never sent", psn)
		}
		// The ICRC is the transport's to write: compare the rest.
		if !bytes.Equal(g.Data[:len(g.Data)-bth.ICRCLen], w[:len(w)-bth.ICRCLen]) {
			t.Fatalf("PSN %#x arrived changed", psn)
		}
		delete(want, psn)
	}
}

// TestRxDropped checks that datagrams the kernel drops at a full receive
// buffer are counted: with the receiver's handler held and a small
// buffer, 2000 packets sent at it fill it, and once the handler goes on
// and further packets arrive one at a time, the packets delivered and
// those counted dropped add up to every packet sent.
func TestRxDropped(t *testing.T) {
	ca, cb := pairConfigs(t, false, 71, 91)
	ca.GSO, ca.GRO, cb.GSO, cb.GRO = OffloadOff, OffloadOff, OffloadOff, OffloadOff // a datagram a packet
	cb.ReadBuffer = 64 << 10
	a, b := mustNew(t, &ca), mustNew(t, &cb)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var got atomic.Uint64
	if err := b.Start(func(pkts []transport.Packet) {
		<-release
		got.Add(uint64(len(pkts)))
	}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const sent = 2000
	for range sent / 50 {
		if err := a.Send(randomBatch(rng, 50, a.LocalAddr(), b.LocalAddr(), 0)); err != nil {
			t.Fatal(err)
		}
	}
	free()
	// What the socket held comes through. Then one packet at a time until
	// every packet sent is delivered or counted: a packet queued after
	// the drops carries the socket's drop count.
	total := uint64(sent)
	for end := time.Now().Add(5 * time.Second); got.Load()+b.Stats().RxDropped != total; {
		if time.Now().After(end) {
			t.Fatalf("%d delivered and %d counted dropped of %d sent", got.Load(), b.Stats().RxDropped, total)
		}
		if err := a.Send(randomBatch(rng, 1, a.LocalAddr(), b.LocalAddr(), 0)); err != nil {
			t.Fatal(err)
		}
		total++
		time.Sleep(10 * time.Millisecond)
	}
	s := b.Stats()
	if s.RxDropped == 0 || s.RxDropped >= sent {
		t.Fatalf("RxDropped %d of %d sent (%d delivered): want some dropped, not all", s.RxDropped, total, got.Load())
	}
	if s.RxPackets != got.Load() {
		t.Fatalf("RxPackets %d, handler got %d", s.RxPackets, got.Load())
	}
}
