package layers_test

import (
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/layers"
)

// Build an RC SEND ONLY in Ethernet, IPv4 and UDP with gopacket, the ICRC
// computed from the IP and UDP layers, and decode it again.
func Example() {
	eth := &gplayers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2},
		EthernetType: gplayers.EthernetTypeIPv4}
	ip := &gplayers.IPv4{Version: 4, TTL: 64, Protocol: gplayers.IPProtocolUDP, Flags: gplayers.IPv4DontFragment,
		SrcIP: netip.MustParseAddr("198.18.0.1").AsSlice(), DstIP: netip.MustParseAddr("198.18.0.2").AsSlice()}
	udp := &gplayers.UDP{SrcPort: 0xc001, DstPort: bth.UDPPort}
	roce := &layers.RoCE{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x11,
		AckReq: true, PSN: 100}}
	// The ICRC covers the IP and UDP headers, as the UDP checksum does.
	if err := roce.SetNetworkLayerForICRC(ip, udp); err != nil {
		panic(err)
	}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		panic(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, roce, gopacket.Payload("hello"))
	if err != nil {
		panic(err)
	}

	p := gopacket.NewPacket(buf.Bytes(), gplayers.LayerTypeEthernet, gopacket.Default)
	got := p.Layer(layers.LayerTypeRoCE).(*layers.RoCE)
	fr := bth.Frame{}
	if err := bth.ParseFrame(&fr, buf.Bytes(), bth.LinkEthernet); err != nil {
		panic(err)
	}
	fmt.Println(got.BTH.Opcode, "qp", got.BTH.DestQP, "psn", got.BTH.PSN, "pad", got.BTH.PadCount)
	fmt.Printf("payload %q, ICRC ok %v\n", got.Payload, got.VerifyICRC(&fr.Flow))
	// Output:
	// RC_SEND_ONLY qp 17 psn 100 pad 3
	// payload "hello", ICRC ok true
}
