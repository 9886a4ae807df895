package bth

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestCRCShort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		seed := r.Uint32()
		if got, want := crcShort(seed, p), crc32.Update(seed, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d: crcShort %#x, crc32.Update %#x", n, got, want)
		}
	}
}

func TestSealAllocs(t *testing.T) {
	pkt := make([]byte, 4096+BTHLen+ICRCLen)
	f := Flow{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: UDPPort, DstPort: UDPPort, DF: true}
	f6 := Flow{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		SrcPort: UDPPort, DstPort: UDPPort}
	if n := testing.AllocsPerRun(100, func() {
		f.Seal(pkt)
		f6.Seal(pkt)
		if !f6.Verify(pkt) {
			t.Fatal("verify")
		}
	}); n != 0 {
		t.Fatalf("Seal/Verify allocate %v times", n)
	}
}
