package layers

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
)

// captureFrame is one frame of a capture in testdata/captures.
type captureFrame struct {
	file  string
	index int // frame number, from 1
	data  []byte
}

// readCaptures returns every frame of every capture, and fails when there
// are none.
func readCaptures(tb testing.TB) []captureFrame {
	tb.Helper()
	files, err := filepath.Glob("../testdata/captures/*.pcap")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no captures: %v", err)
	}
	var out []captureFrame
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			tb.Fatal(err)
		}
		r, err := pcapfile.NewReader(f)
		if err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		for i := 1; ; i++ {
			data, _, err := r.ReadPacket()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
			out = append(out, captureFrame{file: filepath.Base(file), index: i, data: data})
		}
		f.Close()
	}
	return out
}

// TestCaptures decodes every frame of every capture through
// gopacket.NewPacket and through a DecodingLayerParser. Each UDP/4791
// frame must give a RoCE layer with a defined opcode, the same fields both
// ways, an ICRC that verifies unless the capture truncated it, a MAD layer
// for QP1, and the same bytes when serialized again, ICRC recomputed.
func TestCaptures(t *testing.T) {
	var (
		eth     gplayers.Ethernet
		ip4     gplayers.IPv4
		ip6     gplayers.IPv6
		udp     gplayers.UDP
		roce    RoCE
		mad     MAD
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(gplayers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &roce, &mad, &payload)
	parser.IgnoreUnsupported = true // TCP out of band
	var decoded []gopacket.LayerType
	var nRoCE, nVerified, nTruncated, nMAD, nRebuilt int
	for _, cf := range readCaptures(t) {
		p := gopacket.NewPacket(cf.data, gplayers.LayerTypeEthernet, gopacket.Default)
		u, _ := p.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)
		if u == nil || u.DstPort != bth.UDPPort {
			if p.Layer(LayerTypeRoCE) != nil {
				t.Errorf("%s frame %d: RoCE layer on a non-RoCE frame", cf.file, cf.index)
			}
			continue
		}
		nRoCE++
		if p.ErrorLayer() != nil {
			t.Errorf("%s frame %d: %v", cf.file, cf.index, p.ErrorLayer().Error())
			continue
		}
		r, ok := p.Layer(LayerTypeRoCE).(*RoCE)
		if !ok {
			t.Errorf("%s frame %d: no RoCE layer", cf.file, cf.index)
			continue
		}
		if !r.BTH.Opcode.Valid() {
			t.Errorf("%s frame %d: unknown opcode %v", cf.file, cf.index, r.BTH.Opcode)
		}
		if r.Truncated != p.Metadata().Truncated {
			t.Errorf("%s frame %d: layer truncated %v, packet %v", cf.file, cf.index, r.Truncated, p.Metadata().Truncated)
		}
		if err := parser.DecodeLayers(cf.data, &decoded); err != nil {
			t.Errorf("%s frame %d: DecodingLayerParser: %v", cf.file, cf.index, err)
		} else {
			a, b := roce, *r
			a.BaseLayer, a.Packet, b.BaseLayer, b.Packet = gplayers.BaseLayer{}, bth.Packet{}, gplayers.BaseLayer{}, bth.Packet{}
			if !reflect.DeepEqual(a, b) || !bytes.Equal(roce.Payload, r.Payload) {
				t.Errorf("%s frame %d: DecodingLayerParser and NewPacket differ\n%+v\n%+v", cf.file, cf.index, a, b)
			}
		}
		if r.NextLayerType() == LayerTypeMAD {
			if p.Layer(LayerTypeMAD) == nil {
				t.Errorf("%s frame %d: no MAD layer on QP1", cf.file, cf.index)
			}
			nMAD++
		}
		if err := r.SetNetworkLayerForICRC(p.NetworkLayer(), u); err != nil {
			t.Fatalf("%s frame %d: %v", cf.file, cf.index, err)
		}
		if r.Truncated {
			nTruncated++
		} else {
			if !r.VerifyICRC(&r.flow) {
				t.Errorf("%s frame %d: ICRC %#08x does not verify", cf.file, cf.index, r.ICRC)
			}
			nVerified++
		}
		r.ICRC = 0
		got := serializeFrame(t, p, gopacket.SerializeOptions{ComputeChecksums: true})
		if !bytes.Equal(got, cf.data) {
			t.Errorf("%s frame %d: serialized frame differs\n got %x\nwant %x", cf.file, cf.index, got, cf.data)
			continue
		}
		nRebuilt++
	}
	t.Logf("%d RoCE frames: %d ICRCs verified, %d truncated, %d MADs, %d rebuilt byte for byte",
		nRoCE, nVerified, nTruncated, nMAD, nRebuilt)
	// The lab README's inventory: 2057 RoCE packets, of which 1380 have
	// their ICRC (the rest are in the two loss captures, cut to 128
	// bytes), and 5 + 10 CM MADs.
	if nRoCE != 2057 || nVerified != 1380 || nTruncated != 2057-1380 || nMAD != 15 || nRebuilt != nRoCE {
		t.Errorf("counts differ from the captures' inventory")
	}
}
