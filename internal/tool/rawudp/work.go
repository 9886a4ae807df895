package rawudp

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// workFlow is the flow --work's ICRCs are computed over on both sides:
// the same pseudo-header work as a real flow's.
var workFlow = bth.Flow{Src: netip.AddrFrom4([4]byte{127, 0, 0, 2}), Dst: netip.AddrFrom4([4]byte{127, 0, 0, 1}),
	SrcPort: 49152, DstPort: bth.UDPPort, DF: true}

// seal writes the ICRC of each size-byte datagram of run into its last
// four bytes, as goroce's transport seals each packet before it sends.
func seal(run []byte, size int) {
	for o := 0; o+size <= len(run); o += size {
		d := run[o : o+size]
		binary.LittleEndian.PutUint32(d[size-bth.ICRCLen:], workFlow.ICRC(d[:size-bth.ICRCLen]))
	}
}

// placer is --work's receiver: it checks each datagram's ICRC and copies
// its payload (after a BTH, or a BTH and a RETH for the first-byte
// datagram of a WRITE's framing) into a 64 KiB region, one payload after
// the other, as the packets of 64 KiB WRITEs land in their buffer.
type placer struct {
	region [65536]byte
	off    int
	bad    uint64
}

// place takes one received datagram, or a GRO run of size-byte ones.
func (p *placer) place(d []byte, size, first int) {
	for len(d) > 0 {
		seg, hdr := d[:min(len(d), size)], bth.BTHLen
		if first > 0 && len(d) == first {
			seg, hdr = d, bth.BTHLen+bth.RETHLen
		}
		d = d[len(seg):]
		if len(seg) < hdr+bth.ICRCLen {
			p.bad++
			continue
		}
		end := len(seg) - bth.ICRCLen
		if workFlow.ICRC(seg[:end]) != binary.LittleEndian.Uint32(seg[end:]) {
			p.bad++
			continue
		}
		if p.off+end-hdr > len(p.region) {
			p.off = 0
		}
		p.off += copy(p.region[p.off:], seg[hdr:end])
	}
}
