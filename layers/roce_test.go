package layers

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

var (
	ethIPv4UDPRoCE        = []gopacket.LayerType{gplayers.LayerTypeEthernet, gplayers.LayerTypeIPv4, gplayers.LayerTypeUDP, LayerTypeRoCE}
	ethIPv4UDPRoCEPayload = append(ethIPv4UDPRoCE[:4:4], gopacket.LayerTypePayload)
	ethIPv4UDPRoCEMAD     = append(ethIPv4UDPRoCE[:4:4], LayerTypeMAD, gopacket.LayerTypePayload)
)

// roceCase is a captured packet and what its RoCE layer holds, read by
// hand from the hexdump (and checked against Wireshark).
type roceCase struct {
	name   string
	data   []byte
	layers []gopacket.LayerType
	want   RoCE // BaseLayer, Pad and Packet are checked separately
	// payload is the payload the layer must hold.
	payload []byte
	pad     []byte
	// flow is the IP/UDP flow of the packet, for the ICRC.
	flow bth.Flow
}

func flowOf(src, dst string, sport uint16, id uint16) bth.Flow {
	return bth.Flow{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: sport,
		DstPort: bth.UDPPort, ID: id, DF: true}
}

func roceCases() []roceCase {
	return []roceCase{
		{
			name: "WriteOnly", data: testPacketRoCEWriteOnly, layers: ethIPv4UDPRoCEPayload,
			want: RoCE{
				BTH:  bth.BTHFields{Opcode: bth.RCWriteOnly, PKey: 0xFFFF, DestQP: 0x1e, AckReq: true, PSN: 0x4b9fec},
				RETH: bth.RETHFields{VA: 0x55b09114bd50, RKey: 0x1053, DMALen: 64},
				ICRC: 0xc8f752b4,
			},
			payload: []byte("rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\x00"),
			pad:     []byte{},
			flow:    flowOf("198.18.0.11", "198.18.0.12", 0xcb0e, 0x032d),
		},
		{
			name: "CompareSwap", data: testPacketRoCECompareSwap, layers: ethIPv4UDPRoCE,
			want: RoCE{
				BTH:       bth.BTHFields{Opcode: bth.RCCompareSwap, PKey: 0xFFFF, DestQP: 0x1a, AckReq: true, PSN: 0xf535f3},
				AtomicETH: bth.AtomicETHFields{VA: 0x56181a1f8000, RKey: 0xa2b},
				ICRC:      0xdc2c126f,
			},
			payload: []byte{}, pad: []byte{},
			flow: flowOf("198.18.0.12", "198.18.0.11", 0xc2a4, 0x0b2d),
		},
		{
			name: "AtomicAck", data: testPacketRoCEAtomicAck, layers: ethIPv4UDPRoCE,
			want: RoCE{
				BTH:          bth.BTHFields{Opcode: bth.RCAtomicAcknowledge, PKey: 0xFFFF, DestQP: 0x1a, PSN: 0xf535f3},
				AETH:         bth.AETHFields{Syndrome: 0x1f, MSN: 1},
				AtomicAckETH: bth.AtomicAckETHFields{Orig: 2402976003620033444},
				ICRC:         0xd1f7f308,
			},
			payload: []byte{}, pad: []byte{},
			flow: flowOf("198.18.0.11", "198.18.0.12", 0xc2a4, 0xf835),
		},
		{
			name: "RNRNAK", data: testPacketRoCERNRNAK, layers: ethIPv4UDPRoCE,
			want: RoCE{
				BTH:  bth.BTHFields{Opcode: bth.RCAcknowledge, PKey: 0xFFFF, DestQP: 0x11, PSN: 0xef126c},
				AETH: bth.AETHFields{Syndrome: 0x33, MSN: 3},
				ICRC: 0xa75ce5e7,
			},
			payload: []byte{}, pad: []byte{},
			flow: flowOf("198.18.0.11", "198.18.0.12", 0xc121, 0x0648),
		},
		{
			name: "CMREQ", data: testPacketRoCECMREQ, layers: ethIPv4UDPRoCEMAD,
			want: RoCE{
				BTH:  bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: 1, AckReq: true, PSN: 0},
				DETH: bth.DETHFields{QKey: 0x80010000, SrcQP: 1},
				ICRC: 0x97a82c1d,
			},
			payload: testPacketRoCECMREQ[62 : 62+256], pad: []byte{},
			flow: flowOf("198.18.0.12", "198.18.0.11", 0xd872, 0x1509),
		},
		{
			name: "Pad", data: testPacketRoCEPad, layers: ethIPv4UDPRoCEPayload,
			want: RoCE{
				BTH:  bth.BTHFields{Opcode: bth.RCWriteOnly, PadCount: 2, PKey: 0xFFFF, DestQP: 0x1b, AckReq: true, PSN: 0xc55f06},
				RETH: bth.RETHFields{VA: 0x55b8e620b000, RKey: 0xb7c, DMALen: 2},
				ICRC: 0x4613bf31,
			},
			payload: []byte{0x00, 0x01}, pad: []byte{0, 0},
			flow: flowOf("198.18.0.11", "198.18.0.12", 0xc2d9, 0xfb0f),
		},
		{
			name: "Truncated", data: testPacketRoCETruncated, layers: ethIPv4UDPRoCEPayload,
			want: RoCE{
				BTH:       bth.BTHFields{Opcode: bth.RCWriteFirst, PKey: 0xFFFF, DestQP: 0x23, PSN: 0x3dc4c5},
				RETH:      bth.RETHFields{VA: 0x55d0caf0d000, RKey: 0x15de, DMALen: 4096},
				Truncated: true,
			},
			payload: testPacketRoCETruncated[42+28:],
			flow:    flowOf("198.18.0.12", "198.18.0.11", 0xc4c9, 0x2155),
		},
	}
}

// checkLayers compares the layer types of p with want.
func checkLayers(t *testing.T, p gopacket.Packet, want []gopacket.LayerType) {
	t.Helper()
	var got []gopacket.LayerType
	for _, l := range p.Layers() {
		got = append(got, l.LayerType())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layers %v, want %v", got, want)
	}
}

// checkRoCE compares the decoded fields of got with c.
func checkRoCE(t *testing.T, c *roceCase, got *RoCE) {
	t.Helper()
	cmp := *got
	cmp.BaseLayer, cmp.Pad, cmp.Packet = gplayers.BaseLayer{}, nil, bth.Packet{}
	cmp.flow, cmp.hasFlow = bth.Flow{}, false
	if !reflect.DeepEqual(cmp, c.want) {
		t.Errorf("RoCE fields\n got %+v\nwant %+v", cmp, c.want)
	}
	if !bytes.Equal(got.Payload, c.payload) {
		t.Errorf("payload %x, want %x", got.Payload, c.payload)
	}
	if !bytes.Equal(got.Pad, c.pad) || (got.Pad == nil) != (c.pad == nil) {
		t.Errorf("pad %x (nil %v), want %x (nil %v)", got.Pad, got.Pad == nil, c.pad, c.pad == nil)
	}
	hl := c.want.BTH.Opcode.HeaderLen()
	if start := 42; !bytes.Equal(got.Contents, c.data[start:start+hl]) {
		t.Errorf("contents %x, want the %d header bytes after UDP", got.Contents, hl)
	}
	if got.Packet.Info == nil || got.Packet.BTH.Opcode() != c.want.BTH.Opcode {
		t.Errorf("Packet views not set: %+v", got.Packet.Info)
	}
}

func TestPacketRoCE(t *testing.T) {
	for _, c := range roceCases() {
		t.Run(c.name, func(t *testing.T) {
			p := gopacket.NewPacket(c.data, gplayers.LayerTypeEthernet, gopacket.Default)
			if p.ErrorLayer() != nil {
				t.Fatal("decode failed:", p.ErrorLayer().Error())
			}
			checkLayers(t, p, c.layers)
			got, ok := p.Layer(LayerTypeRoCE).(*RoCE)
			if !ok {
				t.Fatal("no RoCE layer")
			}
			checkRoCE(t, &c, got)
			if p.Metadata().Truncated != c.want.Truncated {
				t.Errorf("packet truncated %v, want %v", p.Metadata().Truncated, c.want.Truncated)
			}
			if c.want.Truncated {
				if got.VerifyICRC(&c.flow) {
					t.Error("VerifyICRC true on a truncated packet")
				}
				return
			}
			if !got.VerifyICRC(&c.flow) {
				t.Error("ICRC does not verify")
			}
			ipStart := 14
			if icrc := bth.FrameICRC(c.data[ipStart:]); icrc != got.ICRC {
				t.Errorf("FrameICRC %#08x, layer ICRC %#08x", icrc, got.ICRC)
			}
		})
	}
}

// TestDecodingLayerParserRoCE decodes the same packets with a
// DecodingLayerParser and expects the same layers and fields.
func TestDecodingLayerParserRoCE(t *testing.T) {
	var (
		eth     gplayers.Ethernet
		ip4     gplayers.IPv4
		udp     gplayers.UDP
		roce    RoCE
		mad     MAD
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(gplayers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &mad, &payload)
	var decoded []gopacket.LayerType
	for _, c := range roceCases() {
		t.Run(c.name, func(t *testing.T) {
			if err := parser.DecodeLayers(c.data, &decoded); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(decoded, c.layers) {
				t.Errorf("decoded %v, want %v", decoded, c.layers)
			}
			if parser.Truncated != c.want.Truncated {
				t.Errorf("parser truncated %v, want %v", parser.Truncated, c.want.Truncated)
			}
			checkRoCE(t, &c, &roce)
		})
	}
}

// serializeFrame serializes the layers of p again: the RoCE layer and what
// follows it with opts, the Ethernet, IP and UDP headers as they were.
func serializeFrame(t *testing.T, p gopacket.Packet, roceOpts gopacket.SerializeOptions) []byte {
	t.Helper()
	b := gopacket.NewSerializeBuffer()
	ls := p.Layers()
	for i := len(ls) - 1; i >= 0; i-- {
		opts := gopacket.SerializeOptions{}
		switch ls[i].LayerType() {
		case LayerTypeRoCE, LayerTypeMAD, gopacket.LayerTypePayload:
			opts = roceOpts
		}
		sl, ok := ls[i].(gopacket.SerializableLayer)
		if !ok {
			t.Fatalf("layer %v is not serializable", ls[i].LayerType())
		}
		if err := sl.SerializeTo(b, opts); err != nil {
			t.Fatalf("%v.SerializeTo: %v", ls[i].LayerType(), err)
		}
	}
	return b.Bytes()
}

// TestRoCESerializeRoundTrip decodes each packet and serializes it again:
// once writing the decoded ICRC back, once computing it afresh from the IP
// and UDP layers. Both must give the captured bytes.
func TestRoCESerializeRoundTrip(t *testing.T) {
	for _, c := range roceCases() {
		t.Run(c.name, func(t *testing.T) {
			p := gopacket.NewPacket(c.data, gplayers.LayerTypeEthernet, gopacket.Default)
			r := p.Layer(LayerTypeRoCE).(*RoCE)
			if got := serializeFrame(t, p, gopacket.SerializeOptions{}); !bytes.Equal(got, c.data) {
				t.Errorf("round trip\n got %x\nwant %x", got, c.data)
			}
			if err := r.SetNetworkLayerForICRC(p.NetworkLayer(), p.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)); err != nil {
				t.Fatal(err)
			}
			r.ICRC = 0
			opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
			if got := serializeFrame(t, p, opts); !bytes.Equal(got, c.data) {
				t.Errorf("round trip with a computed ICRC\n got %x\nwant %x", got, c.data)
			}
		})
	}
}

// TestIsomorphicPacketRoCE builds a packet of every defined opcode from
// fields, serializes it with a computed ICRC, decodes it, and expects the
// same fields and a verifying ICRC.
func TestIsomorphicPacketRoCE(t *testing.T) {
	flows := []bth.Flow{
		flowOf("198.18.0.1", "198.18.0.2", 0xc123, 7),
		{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), SrcPort: 0xc001, DstPort: bth.UDPPort},
	}
	n := 0
	for op := 0; op < 256; op++ {
		info := bth.Opcode(op).Info()
		if !info.Valid() {
			continue
		}
		n++
		for _, fl := range flows {
			for _, plen := range []int{0, 1, 7, 64} {
				if !info.Payload && plen > 0 {
					continue
				}
				want := RoCE{
					BTH: bth.BTHFields{Opcode: bth.Opcode(op), SE: op&1 == 1, MigReq: true, PKey: 0xFFFF,
						FECN: true, BECN: op&2 == 2, DestQP: 0xABCDEF, AckReq: true, PSN: 0x123456,
						PadCount: uint8(bth.PadCount(plen))},
				}
				if info.Has(bth.HdrRDETH) {
					want.RDETH.EECnxt = 0x010203
				}
				if info.Has(bth.HdrDETH) {
					want.DETH = bth.DETHFields{QKey: 0x80010000, SrcQP: 0x0a0b0c}
				}
				if info.Has(bth.HdrFETH) {
					want.FETH = bth.FETHFields{Selectivity: 2, Placement: 5}
				}
				if info.Has(bth.HdrRETH) {
					want.RETH = bth.RETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, DMALen: uint32(plen)}
				}
				if info.Has(bth.HdrAtomicETH) {
					want.AtomicETH = bth.AtomicETHFields{VA: 0x1000, RKey: 7, SwapAdd: 1 << 63, Compare: 42}
				}
				if info.Has(bth.HdrAETH) {
					want.AETH = bth.AETHFields{Syndrome: bth.NAKSyndrome(bth.NAKRemoteAccessError), MSN: 0xFFFFFF}
				}
				if info.Has(bth.HdrAtomicAckETH) {
					want.AtomicAckETH.Orig = 0xFEDCBA9876543210
				}
				if info.Has(bth.HdrImmDt) {
					want.ImmDt.Imm = 0xdeadbeef
				}
				if info.Has(bth.HdrIETH) {
					want.IETH.RKey = 0x1234
				}
				payload := bytes.Repeat([]byte{0x5a}, plen)
				r := want
				r.SetICRCFlow(fl)
				b := gopacket.NewSerializeBuffer()
				opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
				if err := gopacket.SerializeLayers(b, opts, &r, gopacket.Payload(payload)); err != nil {
					t.Fatalf("%v: %v", bth.Opcode(op), err)
				}
				if got, wantLen := len(b.Bytes()), bth.Len(bth.Opcode(op), plen); got != wantLen {
					t.Fatalf("%v len %d: serialized %d bytes, want %d", bth.Opcode(op), plen, got, wantLen)
				}
				p := gopacket.NewPacket(b.Bytes(), LayerTypeRoCE, gopacket.Default)
				if p.ErrorLayer() != nil {
					t.Fatalf("%v: %v", bth.Opcode(op), p.ErrorLayer().Error())
				}
				got := p.Layer(LayerTypeRoCE).(*RoCE)
				if !got.VerifyICRC(&fl) {
					t.Errorf("%v len %d over %v: ICRC does not verify", bth.Opcode(op), plen, fl.Src)
				}
				cmp := *got
				cmp.BaseLayer, cmp.Pad, cmp.Packet, cmp.ICRC = gplayers.BaseLayer{}, nil, bth.Packet{}, 0
				if !reflect.DeepEqual(cmp, want) {
					t.Errorf("%v len %d:\n got %+v\nwant %+v", bth.Opcode(op), plen, cmp, want)
				}
				if !bytes.Equal(got.Payload, payload) || len(got.Pad) != bth.PadCount(plen) {
					t.Errorf("%v len %d: payload %x pad %x", bth.Opcode(op), plen, got.Payload, got.Pad)
				}
			}
		}
	}
	if n < 60 {
		t.Errorf("only %d opcodes defined", n)
	}
}

func TestRoCESerializeErrors(t *testing.T) {
	ok := bth.BTHFields{Opcode: bth.RCAcknowledge, PKey: 0xFFFF}
	for _, tc := range []struct {
		name  string
		r     RoCE
		opts  gopacket.SerializeOptions
		err   error
		field string
	}{
		{"UndefinedOpcode", RoCE{BTH: bth.BTHFields{Opcode: 0x1F}}, gopacket.SerializeOptions{}, ErrUndefinedOpcode, ""},
		{"PSN", RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PSN: 1 << 24}}, gopacket.SerializeOptions{}, ErrFieldRange, "BTH.PSN"},
		{"DestQP", RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, DestQP: 1 << 24}}, gopacket.SerializeOptions{}, ErrFieldRange, "BTH.DestQP"},
		{"PadCount", RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PadCount: 4}}, gopacket.SerializeOptions{}, ErrFieldRange, "BTH.PadCount"},
		{"TVer", RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, TVer: 16}}, gopacket.SerializeOptions{}, ErrFieldRange, "BTH.TVer"},
		{"MSN", RoCE{BTH: ok, AETH: bth.AETHFields{MSN: 1 << 24}}, gopacket.SerializeOptions{}, ErrFieldRange, "AETH.MSN"},
		{"SrcQP", RoCE{BTH: bth.BTHFields{Opcode: bth.UDSendOnly}, DETH: bth.DETHFields{SrcQP: 1 << 24}}, gopacket.SerializeOptions{}, ErrFieldRange, "DETH.SrcQP"},
		{"FETH", RoCE{BTH: bth.BTHFields{Opcode: bth.RCFlush}, FETH: bth.FETHFields{Placement: 16}}, gopacket.SerializeOptions{}, ErrFieldRange, "FETH.Placement"},
		{"NoFlow", RoCE{BTH: ok}, gopacket.SerializeOptions{ComputeChecksums: true}, ErrNoICRCFlow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := gopacket.NewSerializeBuffer()
			err := tc.r.SerializeTo(b, tc.opts)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if tc.field != "" && !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	// A field of a header the opcode does not carry is ignored.
	r := RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly}, AETH: bth.AETHFields{MSN: 1 << 24}}
	if err := r.SerializeTo(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{}); err != nil {
		t.Errorf("absent AETH checked: %v", err)
	}
}

func TestRoCEDecodeErrors(t *testing.T) {
	valid := testPacketRoCERNRNAK[42:]
	for _, tc := range []struct {
		name string
		data []byte
		err  error
	}{
		{"Empty", nil, bth.ErrTruncated},
		{"ShortBTH", valid[:11], bth.ErrTruncated},
		{"NoICRC", valid[:bth.BTHLen+bth.AETHLen], bth.ErrTruncated},
		{"UnknownOpcode", append([]byte{0x1F}, valid[1:]...), bth.ErrUnknownOpcode},
		{"PadTooLong", append([]byte{byte(bth.RCSendOnly), 0x30}, valid[2:bth.BTHLen+bth.ICRCLen]...), bth.ErrPadCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r RoCE
			r.SetICRCFlow(bth.Flow{SrcPort: 9})
			if err := r.DecodeFromBytes(tc.data, gopacket.NilDecodeFeedback); !errors.Is(err, tc.err) {
				t.Fatalf("DecodeFromBytes: %v, want %v", err, tc.err)
			}
			if r.Contents != nil || r.Payload != nil || r.BTH != (bth.BTHFields{}) {
				t.Errorf("failed decode left fields: %+v", r.BTH)
			}
			if !r.hasFlow || r.flow.SrcPort != 9 {
				t.Error("failed decode dropped the ICRC flow")
			}
			p := gopacket.NewPacket(tc.data, LayerTypeRoCE, gopacket.Default)
			if p.ErrorLayer() == nil || !errors.Is(p.ErrorLayer().Error(), tc.err) {
				t.Errorf("NewPacket error layer %v, want %v", p.ErrorLayer(), tc.err)
			}
		})
	}
}

func TestSetNetworkLayerForICRC(t *testing.T) {
	var r RoCE
	udp := &gplayers.UDP{SrcPort: 1, DstPort: bth.UDPPort}
	ip := &gplayers.IPv4{SrcIP: []byte{198, 18, 0, 1}, DstIP: []byte{198, 18, 0, 2}, IHL: 6,
		Options: []gplayers.IPv4Option{{OptionType: 1}}}
	if err := r.SetNetworkLayerForICRC(ip, udp); !errors.Is(err, ErrICRCNetworkLayer) {
		t.Errorf("IPv4 with options: %v", err)
	}
	if err := r.SetNetworkLayerForICRC(&gplayers.IPv4{IHL: 5}, udp); !errors.Is(err, ErrICRCNetworkLayer) {
		t.Errorf("IPv4 without addresses: %v", err)
	}
	ip6 := &gplayers.IPv6{SrcIP: netip.MustParseAddr("2001:db8::1").AsSlice(), DstIP: netip.MustParseAddr("2001:db8::2").AsSlice()}
	if err := r.SetNetworkLayerForICRC(ip6, udp); err != nil {
		t.Fatal(err)
	}
	if r.flow.Src != netip.MustParseAddr("2001:db8::1") || r.flow.SrcPort != 1 || r.flow.DstPort != bth.UDPPort {
		t.Errorf("flow %+v", r.flow)
	}
}

// TestDecodingLayerParserAllocs checks that the fast path allocates
// nothing per packet.
func TestDecodingLayerParserAllocs(t *testing.T) {
	var (
		eth     gplayers.Ethernet
		ip4     gplayers.IPv4
		udp     gplayers.UDP
		roce    RoCE
		mad     MAD
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(gplayers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &mad, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	for _, c := range roceCases() {
		allocs := testing.AllocsPerRun(100, func() {
			if err := parser.DecodeLayers(c.data, &decoded); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per packet", c.name, allocs)
		}
	}
}

func BenchmarkDecodePacketRoCE(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		gopacket.NewPacket(testPacketRoCEWriteOnly, gplayers.LayerTypeEthernet, gopacket.NoCopy)
	}
}

func BenchmarkDecodingLayerParserRoCE(b *testing.B) {
	var (
		eth     gplayers.Ethernet
		ip4     gplayers.IPv4
		udp     gplayers.UDP
		roce    RoCE
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(gplayers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	b.SetBytes(int64(len(testPacketRoCEWriteOnly)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parser.DecodeLayers(testPacketRoCEWriteOnly, &decoded); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSerializeRoCE(b *testing.B) {
	p := gopacket.NewPacket(testPacketRoCEWriteOnly, gplayers.LayerTypeEthernet, gopacket.Default)
	r := p.Layer(LayerTypeRoCE).(*RoCE)
	if err := r.SetNetworkLayerForICRC(p.NetworkLayer(), p.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)); err != nil {
		b.Fatal(err)
	}
	payload := gopacket.Payload(r.Payload)
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
	b.SetBytes(int64(len(r.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := gopacket.SerializeLayers(buf, opts, r, &payload); err != nil {
			b.Fatal(err)
		}
	}
}
