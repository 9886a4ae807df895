package bth

import (
	"hash/crc32"
	"net/netip"
	"strconv"
	"testing"
)

// capturedFrame returns the first whole frame of opcode op in the captures.
func capturedFrame(tb testing.TB, op Opcode) captureFrame {
	tb.Helper()
	for _, cf := range loadCaptures(tb) {
		if !cf.frame.Truncated && cf.packet.BTH.Opcode() == op {
			return cf
		}
	}
	tb.Fatalf("no whole %v frame in the captures", op)
	return captureFrame{}
}

var benchFlow = Flow{
	Src: netip.MustParseAddr("198.18.0.12"), Dst: netip.MustParseAddr("198.18.0.11"),
	SrcPort: 0xc0de, DstPort: UDPPort, ID: 0x1234, DF: true,
}

// buildWrite lays out an RC RDMA WRITE ONLY with a payload of n bytes in
// buf, copies payload in and seals it: what a sender does per packet.
func buildWrite(p *Packet, buf, payload []byte) int {
	bf := BTHFields{Opcode: RCWriteOnly, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0x123456}
	n := p.Build(buf, &bf, len(payload))
	p.RETH.Encode(&RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: uint32(len(payload))})
	copy(p.Payload, payload)
	benchFlow.Seal(p.Raw)
	return n
}

// BenchmarkPacketParse parses a captured RC RDMA WRITE FIRST (BTH, RETH,
// 1 KiB of payload).
func BenchmarkPacketParse(b *testing.B) {
	cf := capturedFrame(b, RCWriteFirst)
	pkt := cf.frame.Payload
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Parse(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseFrame parses the Ethernet, IPv4 and UDP headers of the same
// captured frame.
func BenchmarkParseFrame(b *testing.B) {
	cf := capturedFrame(b, RCWriteFirst)
	var fr Frame
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseFrame(&fr, cf.data, LinkEthernet); err != nil {
			b.Fatal(err)
		}
	}
}

var benchSizes = []int{256, 1024, 4096}

// BenchmarkICRC computes the ICRC of RDMA WRITE packets with payloads of
// each size; BenchmarkCRC32IEEE runs hash/crc32 over the same bytes for
// comparison.
func BenchmarkICRC(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			buf := make([]byte, Len(RCWriteOnly, size))
			var p Packet
			n := buildWrite(&p, buf, make([]byte, size))
			pkt := buf[:n-ICRCLen]
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				benchFlow.ICRC(pkt)
			}
		})
	}
}

// BenchmarkCRC32IEEE is crc32.ChecksumIEEE over the bytes BenchmarkICRC
// covers: the ICRC's floor.
func BenchmarkCRC32IEEE(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			buf := make([]byte, Len(RCWriteOnly, size))
			var p Packet
			n := buildWrite(&p, buf, make([]byte, size))
			pkt := buf[:n-ICRCLen]
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				crc32.ChecksumIEEE(pkt)
			}
		})
	}
}

// BenchmarkBuildSeal builds a whole RC RDMA WRITE ONLY packet per
// iteration: Build, RETH, payload copy and Seal.
func BenchmarkBuildSeal(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			buf := make([]byte, Len(RCWriteOnly, size))
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(i)
			}
			var p Packet
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				buildWrite(&p, buf, payload)
			}
		})
	}
}

// TestZeroAllocs checks that parsing, building and sealing a packet
// allocate nothing.
func TestZeroAllocs(t *testing.T) {
	cf := capturedFrame(t, RCWriteFirst)
	var p Packet
	var fr Frame
	buf := make([]byte, Len(RCWriteOnly, 4096))
	payload := make([]byte, 4096)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Parse", func() {
			if err := p.Parse(cf.frame.Payload); err != nil {
				t.Fatal(err)
			}
		}},
		{"ParseFrame", func() {
			if err := ParseFrame(&fr, cf.data, LinkEthernet); err != nil {
				t.Fatal(err)
			}
		}},
		{"Build", func() {
			p.Build(buf, &BTHFields{Opcode: RCWriteOnly, PKey: DefaultPKey, DestQP: 1, PSN: 2}, len(payload))
		}},
		{"Seal", func() { benchFlow.Seal(buf) }},
		{"FrameICRC", func() { FrameICRC(cf.frame.IP) }},
		{"BuildWriteSeal", func() { buildWrite(&p, buf, payload) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tc.f); n != 0 {
				t.Errorf("%v allocations, want 0", n)
			}
		})
	}
}
