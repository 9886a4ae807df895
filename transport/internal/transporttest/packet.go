package transporttest

import (
	"math/rand/v2"

	"github.com/goroce/goroce/bth"
)

// BuildPacket returns a RoCE packet (BTH through a zero ICRC) of the given
// opcode with payloadLen bytes of payload drawn from rng; an AETH, if the
// opcode has one, acknowledges with MSN 7.
func BuildPacket(rng *rand.Rand, op bth.Opcode, payloadLen int, psn bth.PSN) []byte {
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
