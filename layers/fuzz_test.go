package layers

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

// fuzzMaxRoCE bounds the RoCE packet a fuzz input may carry, so that the
// IP and UDP lengths fit.
const fuzzMaxRoCE = 9000

// fuzzFrame wraps roce in Ethernet, IPv4 or IPv6 (ctrl bit 0) and UDP
// to port 4791, and when ctrl bit 7 is set cuts the frame inside the RoCE
// packet, as a capture's snap length would.
func fuzzFrame(ctrl uint8, roce []byte) (frame []byte, cut bool) {
	ff := bth.FrameFields{Ethernet: true, Flow: bth.Flow{
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 0xc000 | uint16(ctrl), DstPort: bth.UDPPort, ID: uint16(ctrl) << 4, DF: true}}
	if ctrl&1 == 1 {
		ff.Flow.Src, ff.Flow.Dst = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	}
	hl := ff.HeaderLen()
	frame = make([]byte, hl+len(roce))
	copy(frame[hl:], roce)
	bth.EncodeFrame(frame, &ff)
	if ctrl&0x80 != 0 && len(roce) > 0 {
		keep := len(roce) * int(ctrl&0x3f) / 64
		return frame[:hl+keep], true
	}
	return frame, false
}

// FuzzDecode feeds RoCE packets, whole or cut short, in an Ethernet frame
// to gopacket.NewPacket and to a DecodingLayerParser with panic recovery
// off. The two must agree; a packet that decodes whole must serialize to
// as many bytes, decode again to the same fields, and carry a verifying
// ICRC when serialized with ComputeChecksums.
func FuzzDecode(f *testing.F) {
	for _, c := range roceCases() {
		f.Add(uint8(0), c.data[42:])
	}
	seen := map[[2]string]bool{}
	for _, cf := range readCaptures(f) {
		var pkt bth.Packet
		var fr bth.Frame
		if bth.ParseFrame(&fr, cf.data, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort || fr.Truncated ||
			pkt.Parse(fr.Payload) != nil {
			continue
		}
		k := [2]string{cf.file, pkt.BTH.Opcode().String()}
		if !seen[k] {
			seen[k] = true
			f.Add(uint8(len(seen)), fr.Payload)
			f.Add(uint8(0x80|len(seen)), fr.Payload)
		}
	}
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
	parser.IgnorePanic = true
	var decoded []gopacket.LayerType
	f.Fuzz(func(t *testing.T, ctrl uint8, data []byte) {
		if len(data) > fuzzMaxRoCE {
			return
		}
		frame, cut := fuzzFrame(ctrl, data)
		p := gopacket.NewPacket(frame, gplayers.LayerTypeEthernet, gopacket.DecodeOptions{SkipDecodeRecovery: true})
		perr := parser.DecodeLayers(frame, &decoded)
		r, ok := p.Layer(LayerTypeRoCE).(*RoCE)
		parsedRoCE := len(decoded) >= 4 && decoded[3] == LayerTypeRoCE
		if ok != parsedRoCE {
			t.Fatalf("NewPacket RoCE layer %v, parser %v (err %v)", ok, decoded, perr)
		}
		if !ok {
			return
		}
		if r.Truncated != cut {
			t.Fatalf("truncated %v, cut %v", r.Truncated, cut)
		}
		a, b := roce, *r
		a.BaseLayer, a.Packet, b.BaseLayer, b.Packet = gplayers.BaseLayer{}, bth.Packet{}, gplayers.BaseLayer{}, bth.Packet{}
		if !reflect.DeepEqual(a, b) || !bytes.Equal(roce.Payload, r.Payload) {
			t.Fatalf("NewPacket and DecodingLayerParser differ\n%+v\n%+v", b, a)
		}
		if r.Truncated {
			return
		}
		// Serialize the decoded fields and decode them again.
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, r, gopacket.Payload(r.Payload)); err != nil {
			t.Fatalf("SerializeTo of a decoded packet: %v", err)
		}
		if len(buf.Bytes()) != len(data) {
			t.Fatalf("serialized %d bytes from %d", len(buf.Bytes()), len(data))
		}
		var again RoCE
		if err := again.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("decoding the serialized packet: %v", err)
		}
		x, y := again, *r
		x.BaseLayer, x.Packet, y.BaseLayer, y.Packet = gplayers.BaseLayer{}, bth.Packet{}, gplayers.BaseLayer{}, bth.Packet{}
		y.flow, y.hasFlow = bth.Flow{}, false
		if !reflect.DeepEqual(x, y) || !bytes.Equal(again.Payload, r.Payload) {
			t.Fatalf("serialize and decode changed the packet\n got %+v\nwant %+v", x, y)
		}
		// With the flow of the frame, a computed ICRC verifies.
		if err := r.SetNetworkLayerForICRC(p.NetworkLayer(), p.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)); err != nil {
			t.Fatal(err)
		}
		opts := gopacket.SerializeOptions{ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, r, gopacket.Payload(r.Payload)); err != nil {
			t.Fatal(err)
		}
		if err := again.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil || !again.VerifyICRC(&r.flow) {
			t.Fatalf("computed ICRC does not verify (err %v)", err)
		}
	})
}
