//go:build linux

package udp

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// window bounds the packets in flight, well inside the socket buffers, so
// that the benchmarks measure throughput and not loss.
const window = 512

// waitFor waits until *n reaches want; false after a second without
// progress (a loss).
func waitFor(n *atomic.Int64, want int64) bool {
	last, since := n.Load(), time.Now()
	for range 10_000_000 {
		v := n.Load()
		if v >= want {
			return true
		}
		if v != last {
			last, since = v, time.Now()
		} else if time.Since(since) > time.Second {
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return false
}

// BenchmarkThroughput moves SEND MIDDLE packets with 4096 bytes of payload
// (4112 bytes of RoCE) one way over loopback, in batches of 64.
func BenchmarkThroughput(b *testing.B) {
	for i, mode := range []struct {
		name string
		off  Offload
	}{{"gso+gro", OffloadOn}, {"plain", OffloadOff}} {
		b.Run(mode.name, func(b *testing.B) {
			tx := mustNew(b, &Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 71, 40, byte(2*i + 1)}), bth.UDPPort), GSO: mode.off, GRO: mode.off})
			rx := mustNew(b, &Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 71, 40, byte(2*i + 2)}), bth.UDPPort), GSO: mode.off, GRO: mode.off})
			var got atomic.Int64
			if err := rx.Start(func(p []transport.Packet) { got.Add(int64(len(p))) }); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			pkts := make([]transport.Packet, 64)
			for k := range pkts {
				pkts[k] = transport.Packet{Data: transporttest.BuildPacket(rng, 0x01, 4096, bth.PSN(k)), Dst: rx.LocalAddr()}
			}
			b.SetBytes(int64(len(pkts[0].Data)))
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(len(pkts), b.N-sent)
				if err := tx.Send(pkts[:n]); err != nil {
					b.Fatal(err)
				}
				sent += n
				if !waitFor(&got, int64(sent-window)) {
					b.Fatalf("stalled: sent %d, received %d; %+v", sent, got.Load(), rx.Stats())
				}
			}
			if !waitFor(&got, int64(b.N)) {
				b.Fatalf("lost packets: sent %d, received %d; %+v", b.N, got.Load(), rx.Stats())
			}
		})
	}
}

// BenchmarkRawUDP is the baseline: plain sendmmsg and recvmmsg (through
// x/net's batch API) of 4112-byte datagrams in batches of 64, no ICRC.
func BenchmarkRawUDP(b *testing.B) {
	rxc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 71, 40, 10)})
	if err != nil {
		b.Fatal(err)
	}
	defer rxc.Close()
	txc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 71, 40, 9)})
	if err != nil {
		b.Fatal(err)
	}
	defer txc.Close()
	rxc.SetReadBuffer(DefaultSocketBuffer)
	txc.SetWriteBuffer(DefaultSocketBuffer)
	rp, tp := ipv4.NewPacketConn(rxc), ipv4.NewPacketConn(txc)
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ms := make([]ipv4.Message, 64)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 4200)}
		}
		for {
			n, err := rp.ReadBatch(ms, 0)
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	dst := rxc.LocalAddr()
	ms := make([]ipv4.Message, 64)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 4112)}
		ms[i].Addr = dst
	}
	b.SetBytes(4112)
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(len(ms), b.N-sent)
		for off := 0; off < n; {
			k, err := tp.WriteBatch(ms[off:n], 0)
			if err != nil {
				b.Fatal(err)
			}
			off += k
		}
		sent += n
		if !waitFor(&got, int64(sent-window)) {
			b.Fatalf("stalled: sent %d, received %d", sent, got.Load())
		}
	}
	if !waitFor(&got, int64(b.N)) {
		b.Fatalf("lost packets: sent %d, received %d", b.N, got.Load())
	}
	b.StopTimer()
	rxc.Close()
	<-done
}
