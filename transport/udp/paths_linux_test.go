//go:build linux

package udp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// pathsPair returns two started transports of n paths each that send to
// each other (IPv4: two loopback addresses; IPv6: ::1 and two ports).
func pathsPair(t *testing.T, ipv6 bool, n int, subnet byte) (a, b *Transport, cb *transporttest.Collector) {
	t.Helper()
	ca, cfgb := pairConfigs(t, ipv6, 72, subnet)
	ca.Paths, cfgb.Paths = n, n
	a, b = mustNew(t, &ca), mustNew(t, &cfgb)
	cb = transporttest.NewCollector(t)
	if err := a.Start(transporttest.NewCollector(t).Handle); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(cb.Handle); err != nil {
		t.Fatal(err)
	}
	return a, b, cb
}

// pathOfTransport returns path k of t.
func pathOfTransport(t *Transport, k int) *Transport {
	if k == 0 {
		return t
	}
	return t.more[k-1]
}

// TestPaths sends batches to many destination QPs between two transports
// of four paths: every packet arrives whole and once, each QP's packets in
// the order sent, each sent from the port of its QP's path and received
// on the path of that port.
func TestPaths(t *testing.T) {
	const n, qps = 4, 13
	for i, ipv6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[ipv6], func(t *testing.T) {
			a, b, cb := pathsPair(t, ipv6, n, byte(i+1))
			for k := range n {
				if p := pathOfTransport(a, k).txPort; int(p)%n != k {
					t.Errorf("path %d sends from port %d (%% %d = %d)", k, p, n, int(p)%n)
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			var sent []transport.Packet
			for _, size := range []int{1, 5, 64, 64, 33} {
				pkts := randomBatch(rng, size, a.LocalAddr(), b.LocalAddr(), 0)
				for j := range pkts {
					setDestQP(pkts[j].Data, uint32(0x40+rng.IntN(qps)))
				}
				if err := a.Send(pkts); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, pkts...)
			}
			got := cb.Wait(len(sent), 5*time.Second)
			if len(got) != len(sent) {
				t.Fatalf("%d of %d packets arrived; a %+v b %+v", len(got), len(sent), a.Stats(), b.Stats())
			}
			// Per QP, what arrived is what was sent, in order.
			want := map[uint32][][]byte{}
			perPath := make([]uint64, n)
			for j := range sent {
				p := &sent[j]
				q := destQP(p.Data)
				want[q] = append(want[q], p.AppendTo(nil))
				k := pathOf(p, n)
				if want := pathOfTransport(a, k).txPort; p.SrcPort != want {
					t.Fatalf("packet %d to QP %#x left from port %d, want path %d's %d", j, q, p.SrcPort, k, want)
				}
				perPath[k]++
			}
			for j := range got {
				g := &got[j]
				q := destQP(g.Data)
				if len(want[q]) == 0 || !bytes.Equal(g.Data, want[q][0]) {
					t.Fatalf("packet %d for QP %#x: not the next one sent to it", j, q)
				}
				want[q] = want[q][1:]
				f := bth.Flow{Src: g.Src, Dst: g.Dst, SrcPort: g.SrcPort, DstPort: b.LocalPort(), ID: g.IPID, DF: g.Src.Is4()}
				if !f.Verify(g.Data) {
					t.Errorf("packet %d: ICRC does not verify with %+v", j, f)
				}
			}
			for k := range n {
				if rx := pathOfTransport(b, k).stats.Snapshot().RxPackets; rx != perPath[k] {
					t.Errorf("path %d received %d packets, want the %d sent from its port", k, rx, perPath[k])
				}
			}
			if s := b.Stats(); s.RxPackets != uint64(len(sent)) || s.RxMalformed+s.RxICRCErrors != 0 {
				t.Errorf("b: %+v, want %d packets, no drops", s, len(sent))
			}
		})
	}
}

// setDestQP writes qpn into the BTH at p, and destQP reads it.
func setDestQP(p []byte, qpn uint32) {
	p[5], p[6], p[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
}

func destQP(p []byte) uint32 { return uint32(p[5])<<16 | uint32(p[6])<<8 | uint32(p[7]) }

// TestPathsForeignPorts: datagrams from a peer that picks its source port
// per QP (as rxe does) reach the path of their port.
func TestPathsForeignPorts(t *testing.T) {
	const n = 3
	b := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.72.9.2:4791"), Paths: n})
	cb := transporttest.NewCollector(t)
	if err := b.Start(cb.Handle); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	src := netip.MustParseAddr("127.72.9.1")
	want := make([]uint64, n)
	for i, port := range []uint16{0xC001, 0xC002, 0xC003, 0xC007, 0xD00F} {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, port)))
		if err != nil {
			t.Skipf("port %d: %v", port, err)
		}
		for range i + 1 {
			data := transporttest.BuildPacket(rng, bth.Opcode(0x04), 16, 0)
			f := bth.Flow{Src: src, Dst: b.LocalAddr(), SrcPort: port, DstPort: bth.UDPPort, DF: true}
			f.Seal(data)
			if _, err := c.WriteToUDPAddrPort(data, b.LocalAddrPort()); err != nil {
				t.Fatal(err)
			}
			want[int(port)%n]++
		}
		c.Close()
	}
	if got := cb.Wait(15, 5*time.Second); len(got) != 15 {
		t.Fatalf("%d of 15 arrived: %+v", len(got), b.Stats())
	}
	for k := range n {
		if rx := pathOfTransport(b, k).stats.Snapshot().RxPackets; rx != want[k] {
			t.Errorf("path %d received %d, want %d", k, rx, want[k])
		}
	}
}

// TestPathsPortInUse: a transport of several paths does not join a port
// another socket holds, with or without SO_REUSEPORT, and a bad count is
// refused.
func TestPathsPortInUse(t *testing.T) {
	addr := netip.MustParseAddrPort("127.72.10.1:4791")
	first := mustNew(t, &Config{Addr: addr, Paths: 2})
	for _, paths := range []int{0, 2} {
		if tr, err := New(&Config{Addr: addr, Paths: paths}); !errors.Is(err, syscall.EADDRINUSE) {
			if tr != nil {
				tr.Close()
			}
			t.Errorf("Paths %d on a port a transport of paths holds: %v, want EADDRINUSE", paths, err)
		}
	}
	first.Close()
	plain := mustNew(t, &Config{Addr: addr})
	if tr, err := New(&Config{Addr: addr, Paths: 2}); !errors.Is(err, syscall.EADDRINUSE) {
		if tr != nil {
			tr.Close()
		}
		t.Errorf("Paths 2 on a port a plain transport holds: %v, want EADDRINUSE", err)
	}
	plain.Close()
	for _, paths := range []int{-1, MaxPaths + 1} {
		if _, err := New(&Config{Addr: addr, Paths: paths}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Paths %d: %v, want ErrBadConfig", paths, err)
		}
	}
}

// TestPathsUnreachable: packets to a port where nothing listens, sent
// from every path's socket (to a QP of each path), each draw their ICMP
// port unreachable notice, and the stop function ends every path's.
func TestPathsUnreachable(t *testing.T) {
	const n = 3
	lo := netip.MustParseAddr("127.72.11.1")
	dead := freePort(t, lo)
	tr := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo)), PeerPort: dead, Paths: n})
	if err := tr.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	ch := make(chan transport.Unreachable, 16)
	stop := tr.NotifyUnreachable(func(u transport.Unreachable) { ch <- u })
	rng := rand.New(rand.NewPCG(4, 4))
	send := func() {
		t.Helper()
		pkts := make([]transport.Packet, n)
		for k := range pkts {
			pkts[k] = transport.Packet{Data: transporttest.BuildPacket(rng, bth.UDSendOnly, 64, 0), Dst: lo}
			setDestQP(pkts[k].Data, uint32(0x100+k)) // QP k's path is k
		}
		if err := tr.Send(pkts); err != nil {
			t.Fatal(err)
		}
	}
	send()
	paths := map[uint32]bool{}
	for len(paths) < n {
		select {
		case u := <-ch:
			paths[destQP(u.Packet)%n] = true
		case <-time.After(3 * time.Second):
			t.Fatalf("notices for the packets of paths %v only", paths)
		}
	}
	stop()
	send()
	select {
	case u := <-ch:
		t.Fatalf("a notice after stop: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
}
