package udp

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// randomBatch makes n packets to dst: bare ACKs, SENDs up to 4096 bytes of
// payload, and runs of equal-size packets (which GSO coalesces).
func randomBatch(rng *rand.Rand, n int, src, dst netip.Addr, tos uint8) []transport.Packet {
	pkts := make([]transport.Packet, n)
	size := 4096
	for i := range pkts {
		var data []byte
		switch k := rng.IntN(6); {
		case k == 0:
			data = transporttest.BuildPacket(rng, bth.Opcode(0x11), 0, bth.PSN(i)) // RC ACKNOWLEDGE
		case k == 1:
			data = transporttest.BuildPacket(rng, bth.Opcode(0x04), rng.IntN(4097), bth.PSN(i)) // RC SEND ONLY
		default:
			if rng.IntN(4) == 0 {
				size = []int{256, 1024, 4096}[rng.IntN(3)]
			}
			data = transporttest.BuildPacket(rng, bth.Opcode(0x01), size, bth.PSN(i)) // RC SEND MIDDLE
		}
		pkts[i] = transport.Packet{Data: data, Src: src, Dst: dst, SrcPort: 0xC000 + uint16(i), TOS: tos}
		if rng.IntN(3) == 0 {
			// The payload apart, as a zero-copy sender passes it.
			pkts[i].Data = append(data[:bth.BTHLen:bth.BTHLen], data[len(data)-bth.ICRCLen:]...)
			pkts[i].Payload = data[bth.BTHLen : len(data)-bth.ICRCLen]
		}
	}
	return pkts
}

func mustNew(tb testing.TB, cfg *Config) *Transport {
	tb.Helper()
	tr, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { tr.Close() })
	return tr
}
