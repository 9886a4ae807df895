package afpacket

import (
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/goroce/goroce/bth"
)

func TestFilter(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("2001:db8:1::2")
	frame := func(src, dst netip.Addr, dport uint16, mod func([]byte)) []byte {
		ff := bth.FrameFields{Ethernet: true, Flow: bth.Flow{Src: src, Dst: dst, SrcPort: 0xC000, DstPort: dport, DF: true}}
		b := make([]byte, ff.HeaderLen()+bth.BTHLen+bth.ICRCLen)
		bth.EncodeFrame(b, &ff)
		if mod != nil {
			mod(b)
		}
		return b
	}
	peer4, peer6 := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("2001:db8:1::1")
	for _, tc := range []struct {
		name  string
		local netip.Addr
		frame []byte
		want  bool
	}{
		{"v4 ours", v4, frame(peer4, v4, bth.UDPPort, nil), true},
		{"v4 other port", v4, frame(peer4, v4, 4792, nil), false},
		{"v4 other address", v4, frame(peer4, netip.MustParseAddr("198.18.1.3"), bth.UDPPort, nil), false},
		{"v4 fragment", v4, frame(peer4, v4, bth.UDPPort, func(b []byte) { b[14+6] |= 0x20 }), false},
		{"v4 not UDP", v4, frame(peer4, v4, bth.UDPPort, func(b []byte) { b[14+9] = 6 }), false},
		{"v4 options", v4, func() []byte {
			// IHL 6: the port is 4 bytes further on.
			b := frame(peer4, v4, bth.UDPPort, nil)
			out := append(append(append([]byte(nil), b[:34]...), 0, 0, 0, 0), b[34:]...)
			out[14] = 0x46
			return out
		}(), true},
		{"v4 frame to v6 filter", v6, frame(peer4, v4, bth.UDPPort, nil), false},
		{"ARP", v4, append([]byte{12: 0x08, 13: 0x06}, make([]byte, 28)...), false},
		{"short", v4, []byte{1, 2, 3}, false},
		{"v6 ours", v6, frame(peer6, v6, bth.UDPPort, nil), true},
		{"v6 other port", v6, frame(peer6, v6, 4790, nil), false},
		{"v6 other address", v6, frame(peer6, netip.MustParseAddr("2001:db8:1::3"), bth.UDPPort, nil), false},
		{"v6 not UDP", v6, frame(peer6, v6, bth.UDPPort, func(b []byte) { b[14+6] = 58 }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := filter(tc.local, bth.UDPPort)
			if err != nil {
				t.Fatal(err)
			}
			ins, ok := bpf.Disassemble(raw)
			if !ok {
				t.Fatal("filter does not disassemble")
			}
			vm, err := bpf.NewVM(ins)
			if err != nil {
				t.Fatal(err)
			}
			n, err := vm.Run(tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			if got := n > 0; got != tc.want {
				t.Errorf("accepted %v, want %v", got, tc.want)
			}
		})
	}
}
