package qp

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
)

// TestGRHFromCaptures builds the GRH area of each UD SEND of rxe's
// ud_pingpong captures, over IPv4 and over IPv6, from what a transport
// hands over, and compares it with the packet's own IP header, which rxe
// copies into a UD receive: the IPv6 header whole, or 20 zero bytes and
// the IPv4 header.
func TestGRHFromCaptures(t *testing.T) {
	for _, name := range []string{"rxe_ud_pingpong.pcap", "ipv6/rxe_ud_pingpong_ipv6.pcap"} {
		t.Run(filepath.Base(name), func(t *testing.T) {
			f, err := os.Open(filepath.Join("../testdata/captures", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := pcapfile.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for i := 1; i <= 1000; i++ {
				data, _, err := r.ReadPacket()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				var fr bth.Frame
				var p bth.Packet
				if bth.ParseFrame(&fr, data, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort || fr.Truncated ||
					p.Parse(fr.Payload) != nil || p.BTH.Opcode() != bth.UDSendOnly {
					continue
				}
				tp := transport.Packet{Data: fr.Payload, Src: fr.Flow.Src, Dst: fr.Flow.Dst, SrcPort: fr.Flow.SrcPort, IPID: fr.Flow.ID}
				var want [GRHLen]byte
				if fr.IPv4 != nil {
					tp.TOS = fr.IPv4.TOS()
					copy(want[20:], fr.IP[:bth.IPv4MinLen])
				} else {
					tp.TOS = fr.IPv6.TrafficClass()
					copy(want[:], fr.IP[:bth.IPv6Len])
				}
				var g [GRHLen]byte
				buildGRH(&g, &tp)
				if g != want {
					t.Errorf("frame %d: GRH area\n got % x\nwant % x", i, g, want)
				}
				n++
			}
			if n < 6 {
				t.Errorf("only %d UD SENDs in the capture", n)
			}
		})
	}
}
