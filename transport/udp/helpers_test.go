package udp

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// buildPacket returns a RoCE packet (BTH through a zero ICRC) of the given
// opcode with payloadLen bytes of payload drawn from rng.
func buildPacket(rng *rand.Rand, op bth.Opcode, payloadLen int, psn bth.PSN) []byte {
	b := make([]byte, bth.Len(op, payloadLen))
	var p bth.Packet
	p.Build(b, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: 0x12, PSN: psn, AckReq: true}, payloadLen)
	for i := range p.Payload {
		p.Payload[i] = byte(rng.Uint32())
	}
	if p.AETH != nil {
		p.AETH.Encode(&bth.AETHFields{Syndrome: bth.ACKSyndrome(31), MSN: 7})
	}
	return b
}

// randomBatch makes n packets to dst: bare ACKs, SENDs up to 4096 bytes of
// payload, and runs of equal-size packets (which GSO coalesces).
func randomBatch(rng *rand.Rand, n int, src, dst netip.Addr, tos uint8) []transport.Packet {
	pkts := make([]transport.Packet, n)
	size := 4096
	for i := range pkts {
		var data []byte
		switch k := rng.IntN(6); {
		case k == 0:
			data = buildPacket(rng, bth.Opcode(0x11), 0, bth.PSN(i)) // RC ACKNOWLEDGE
		case k == 1:
			data = buildPacket(rng, bth.Opcode(0x04), rng.IntN(4097), bth.PSN(i)) // RC SEND ONLY
		default:
			if rng.IntN(4) == 0 {
				size = []int{256, 1024, 4096}[rng.IntN(3)]
			}
			data = buildPacket(rng, bth.Opcode(0x01), size, bth.PSN(i)) // RC SEND MIDDLE
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

// collector gathers what a transport delivers.
type collector struct {
	mu   sync.Mutex
	pkts []transport.Packet
	got  chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 1)} }

func (c *collector) handle(pkts []transport.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		p.Data = append([]byte(nil), p.Data...)
		c.pkts = append(c.pkts, p)
	}
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
}

// wait returns the packets once n have arrived, or what there is after
// the timeout.
func (c *collector) wait(n int, timeout time.Duration) []transport.Packet {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if len(c.pkts) >= n {
			p := c.pkts
			c.pkts = nil
			c.mu.Unlock()
			return p
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline.C:
			c.mu.Lock()
			p := c.pkts
			c.pkts = nil
			c.mu.Unlock()
			return p
		}
	}
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
