package udp

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/stats"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// TestReceiverCaptures feeds the RoCE packets of the kernel rxe captures
// (over IPv4, and over IPv6 in captures/ipv6) through the receive path as a
// UDP socket would hand them over (payload, source, destination, no IP ID):
// every untruncated packet verifies, with the IPv4 ID rxe really sent
// recovered.
func TestReceiverCaptures(t *testing.T) {
	files, err := filepath.Glob("../../testdata/captures/*.pcap")
	files6, err6 := filepath.Glob("../../testdata/captures/ipv6/*.pcap")
	if err != nil || err6 != nil || len(files) == 0 || len(files6) == 0 {
		t.Fatalf("no captures: %v %v", err, err6)
	}
	files = append(files, files6...)
	total := 0
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := pcapfile.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			var counts stats.Counters
			var got []transport.Packet
			rcv := newReceiver(func(p []transport.Packet) { got = append(got, p...) }, 4, bth.UDPPort, &counts)
			want := 0
			for range 100000 {
				data, _, err := r.ReadPacket()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				var fr bth.Frame
				if bth.ParseFrame(&fr, data, bth.LinkEthernet) != nil || fr.Truncated || fr.Flow.DstPort != bth.UDPPort {
					continue
				}
				got = got[:0]
				src := netip.AddrPortFrom(fr.Flow.Src, fr.Flow.SrcPort)
				tos := uint8(0)
				if fr.IPv4 != nil {
					tos = fr.IPv4.TOS()
				} else {
					tos = fr.IPv6.TrafficClass()
				}
				rcv.datagram(fr.Payload, src, fr.Flow.Dst, tos, 0)
				rcv.flush()
				want++
				if len(got) != 1 {
					t.Fatalf("packet %d not delivered: %+v", want, counts.Snapshot())
				}
				if err := transporttest.CheckParsed(&got[0]); err != nil {
					t.Errorf("packet %d: %v", want, err)
				}
				if got[0].IPID != fr.Flow.ID || got[0].Src != fr.Flow.Src || got[0].SrcPort != fr.Flow.SrcPort {
					t.Errorf("packet %d: IPID %#x from %v:%d, frame has %#x %v:%d", want, got[0].IPID,
						got[0].Src, got[0].SrcPort, fr.Flow.ID, fr.Flow.Src, fr.Flow.SrcPort)
				}
			}
			if s := counts.Snapshot(); s.RxPackets != uint64(want) || s.RxICRCErrors+s.RxMalformed != 0 {
				t.Errorf("stats %+v for %d packets", s, want)
			}
			total += want
		})
	}
	if total < 500 {
		t.Errorf("only %d untruncated RoCE packets in the captures", total)
	}
}

// TestReceiverGRO splits a GRO train into its segments, each with its own
// recovered ID and its own parse, and counts a bad segment without losing
// the others.
func TestReceiverGRO(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := netip.MustParseAddrPort("198.18.0.11:49153")
	dst := netip.MustParseAddr("198.18.0.1")
	flow := bth.Flow{Src: src.Addr(), Dst: dst, SrcPort: src.Port(), DstPort: bth.UDPPort, DF: true}
	var train []byte
	const seg, n = 1040, 5
	for i := range n {
		p := transporttest.BuildPacket(rng, 0x01, 1024, bth.PSN(i))
		if len(p) != seg {
			t.Fatalf("packet of %d bytes", len(p))
		}
		flow.ID = 0x1000 + uint16(i)
		flow.Seal(p)
		if i == 2 {
			p[40] ^= 1
		}
		train = append(train, p...)
	}
	last := transporttest.BuildPacket(rng, 0x02, 100, n) // shorter last segment
	flow.ID = 0x1000 + n
	flow.Seal(last)
	train = append(train, last...)
	var counts stats.Counters
	var ids []uint16
	var psns []bth.PSN
	rcv := newReceiver(func(p []transport.Packet) {
		for _, q := range p {
			ids = append(ids, q.IPID)
			if err := transporttest.CheckParsed(&q); err != nil {
				t.Errorf("segment with ID %#x: %v", q.IPID, err)
				continue
			}
			psns = append(psns, q.Parsed.BTH.PSN())
		}
	}, 2, bth.UDPPort, &counts)
	rcv.datagram(train, src, dst, 0, seg)
	rcv.flush()
	want := []uint16{0x1000, 0x1001, 0x1003, 0x1004, 0x1005}
	if len(ids) != len(want) {
		t.Fatalf("IDs %x, want %x", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("IDs %x, want %x", ids, want)
		}
	}
	if wantPSNs := []bth.PSN{0, 1, 3, 4, 5}; !slices.Equal(psns, wantPSNs) {
		t.Errorf("parsed PSNs %v, want %v", psns, wantPSNs)
	}
	if s := counts.Snapshot(); s.RxPackets != 5 || s.RxICRCErrors != 1 {
		t.Errorf("stats %+v", s)
	}
}

// FuzzDatagram checks that any datagram, cut at any GRO segment size, is
// accounted for segment by segment (delivered, ICRC error or malformed)
// and never panics, and that what is delivered verifies.
func FuzzDatagram(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	good := transporttest.BuildPacket(rng, 0x04, 64, 1)
	flow := bth.Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: bth.UDPPort, DstPort: bth.UDPPort, DF: true}
	flow.Seal(good)
	f.Add(good, 0, false)
	f.Add(append(append([]byte(nil), good...), good...), len(good), false)
	f.Add([]byte{0x11, 0, 0xff, 0xff}, 2, true)
	f.Add(make([]byte, 40), 16, false)
	f.Fuzz(func(t *testing.T, data []byte, seg int, v6 bool) {
		src, dst := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddr("10.0.0.2")
		if v6 {
			src, dst = netip.MustParseAddrPort("[2001:db8::1]:4791"), netip.MustParseAddr("2001:db8::2")
		}
		var counts stats.Counters
		delivered := 0
		rcv := newReceiver(func(p []transport.Packet) {
			for _, q := range p {
				delivered++
				fl := bth.Flow{Src: q.Src, Dst: q.Dst, SrcPort: q.SrcPort, DstPort: bth.UDPPort, ID: q.IPID, DF: !v6}
				if !fl.Verify(q.Data) {
					t.Fatalf("delivered a packet that does not verify")
				}
				if err := transporttest.CheckParsed(&q); err != nil {
					t.Fatal(err)
				}
			}
		}, 3, bth.UDPPort, &counts)
		rcv.maxPacket = 4224
		rcv.datagram(data, src, dst, 0, seg)
		rcv.flush()
		s := counts.Snapshot()
		segments := 1
		if k := seg; k > 0 && k <= len(data) {
			segments = (len(data) + k - 1) / k
		}
		if got := s.RxPackets + s.RxICRCErrors + s.RxMalformed; got != uint64(segments) {
			t.Fatalf("%d segments, accounted %d (%+v)", segments, got, s)
		}
		if uint64(delivered) != s.RxPackets {
			t.Fatalf("delivered %d, counted %d", delivered, s.RxPackets)
		}
	})
}
