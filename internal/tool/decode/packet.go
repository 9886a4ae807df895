package decode

import (
	"errors"
	"math/bits"
	"net/netip"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/diagram"
	"github.com/goroce/goroce/layers"
)

// packetKind says what a frame turned out to be.
type packetKind int

const (
	kindOther     packetKind = iota // not RoCE: skipped, counted by --flows
	kindRoCE                        // a RoCE packet (possibly with a malformed MAD)
	kindMalformed                   // a frame that does not decode
)

// packetRecord is one decoded frame. The RoCE and MAD layers point into the
// decoder and hold until the next frame is decoded.
type packetRecord struct {
	kind    packetKind
	frame   int     // frame number in the capture, from 1
	time    float64 // seconds since the first frame
	wireLen int     // frame length on the wire

	hasAddr          bool // src to dport are set
	src, dst         netip.Addr
	sport, dport     uint16
	roce             *layers.RoCE
	mad              *layers.MAD
	payloadLen       int    // the packet's payload length, from the UDP length when truncated
	truncated        bool   // the capture cut the packet: no ICRC
	icrcOK           bool   // the ICRC verifies (when not truncated)
	icrcRXE          bool   // ... as Linux's rxe computes it for a FLUSH (bth.FlushICRCRXE)
	icrcWire         uint32 // the ICRC's four wire bytes read big-endian, as Wireshark shows it
	malformed        string // why the frame (or its MAD) does not decode
	madMalformedOnly bool   // the RoCE packet is fine; only its MAD is malformed
}

// packetDecoder decodes frames with gopacket DecodingLayerParsers, one per
// first layer, that share the layer values. It is not safe for concurrent
// use.
type packetDecoder struct {
	eth     gplayers.Ethernet
	dot1q   gplayers.Dot1Q
	sll     gplayers.LinuxSLL
	sll2    gplayers.LinuxSLL2
	ip4     gplayers.IPv4
	ip6     gplayers.IPv6
	udp     gplayers.UDP
	roce    layers.RoCE
	mad     layers.MAD
	payload gopacket.Payload
	frame   bth.Frame

	parsers map[gopacket.LayerType]*gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
	// roceParser decodes a UDP payload that ports takes for RoCE on a
	// port other than 4791, which gopacket does not know.
	roceParser *gopacket.DecodingLayerParser
	ports      *diagram.Ports
	inner      []gopacket.LayerType
}

// newPacketDecoder returns a decoder that takes for RoCEv2 the UDP
// datagrams ports does (nil: port 4791 only).
func newPacketDecoder(ports *diagram.Ports) *packetDecoder {
	d := &packetDecoder{parsers: map[gopacket.LayerType]*gopacket.DecodingLayerParser{}, ports: ports}
	d.roceParser = gopacket.NewDecodingLayerParser(layers.LayerTypeRoCE, &d.roce, &d.mad, &d.payload)
	for _, first := range []gopacket.LayerType{gplayers.LayerTypeEthernet, gplayers.LayerTypeLinuxSLL,
		gplayers.LayerTypeLinuxSLL2, gplayers.LayerTypeIPv4, gplayers.LayerTypeIPv6} {
		d.parsers[first] = gopacket.NewDecodingLayerParser(first, &d.eth, &d.dot1q, &d.sll, &d.sll2,
			&d.ip4, &d.ip6, &d.udp, &d.roce, &d.mad, &d.payload)
	}
	d.decoded = make([]gopacket.LayerType, 0, 16)
	return d
}

// decode decodes data, a frame that starts with layer first, into rec.
func (d *packetDecoder) decode(data []byte, first gopacket.LayerType, rec *packetRecord) {
	err := d.parsers[first].DecodeLayers(data, &d.decoded)
	var unsupported gopacket.UnsupportedLayerType
	if errors.As(err, &unsupported) {
		err = nil // a layer this tool does not decode, such as TCP
	}
	var ipOff, ipLen int
	var haveIP, haveUDP, haveRoCE, haveMAD bool
	for _, lt := range d.decoded {
		switch lt {
		case gplayers.LayerTypeEthernet:
			ipOff += len(d.eth.Contents)
		case gplayers.LayerTypeDot1Q:
			ipOff += len(d.dot1q.Contents)
		case gplayers.LayerTypeLinuxSLL:
			ipOff += len(d.sll.Contents)
		case gplayers.LayerTypeLinuxSLL2:
			ipOff += len(d.sll2.Contents)
		case gplayers.LayerTypeIPv4:
			haveIP, ipLen = true, len(d.ip4.Contents)+len(d.ip4.Payload)
			rec.src, _ = netip.AddrFromSlice(d.ip4.SrcIP)
			rec.dst, _ = netip.AddrFromSlice(d.ip4.DstIP)
		case gplayers.LayerTypeIPv6:
			haveIP, ipLen = true, len(d.ip6.Contents)+len(d.ip6.Payload)
			rec.src, _ = netip.AddrFromSlice(d.ip6.SrcIP)
			rec.dst, _ = netip.AddrFromSlice(d.ip6.DstIP)
		case gplayers.LayerTypeUDP:
			haveUDP = true
			rec.sport, rec.dport = uint16(d.udp.SrcPort), uint16(d.udp.DstPort)
		case layers.LayerTypeRoCE:
			haveRoCE = true
		case layers.LayerTypeMAD:
			haveMAD = true
		}
	}
	rec.hasAddr = haveIP && haveUDP
	if haveRoCE {
		d.ports.TakeRoCE()
	} else if rec.hasAddr && d.ports != nil && bth.ParseFrame(&d.frame, data[ipOff:ipOff+ipLen], bth.LinkIP) == nil &&
		d.ports.Take(&d.frame) {
		// RoCE on another port: decode the UDP payload as gopacket would
		// on 4791.
		err = d.roceParser.DecodeLayers(d.udp.Payload, &d.inner)
		if errors.As(err, &unsupported) {
			err = nil
		}
		for _, lt := range d.inner {
			switch lt {
			case layers.LayerTypeRoCE:
				haveRoCE = true
			case layers.LayerTypeMAD:
				haveMAD = true
			}
		}
		if !haveRoCE && err != nil {
			rec.kind, rec.malformed = kindMalformed, "RoCE: "+err.Error()
			return
		}
	}
	if !haveRoCE {
		if err != nil {
			rec.kind, rec.malformed = kindMalformed, err.Error()
			if haveUDP && (rec.dport == bth.UDPPort || rec.sport == bth.UDPPort) {
				rec.malformed = "RoCE: " + rec.malformed
			}
		}
		return
	}
	r := &d.roce
	// Check the IP and UDP headers the way bth does, and take the IP packet
	// for the ICRC, which covers its header.
	fr := &d.frame
	if ferr := bth.ParseFrame(fr, data[ipOff:ipOff+ipLen], bth.LinkIP); ferr != nil {
		rec.kind, rec.malformed = kindMalformed, "RoCE: "+ferr.Error()
		return
	}
	rec.kind, rec.roce = kindRoCE, r
	rec.truncated = r.Truncated || fr.Truncated
	if haveMAD {
		rec.mad = &d.mad
	} else if err != nil && r.NextLayerType() == layers.LayerTypeMAD && !rec.truncated {
		rec.malformed, rec.madMalformedOnly = "MAD: "+err.Error(), true
	}
	info := r.BTH.Opcode.Info()
	if rec.truncated {
		rec.payloadLen = fr.UDP.Length() - bth.UDPLen - info.HeaderLen - int(r.BTH.PadCount) - bth.ICRCLen
		if rec.payloadLen < 0 {
			rec.kind, rec.malformed = kindMalformed, "RoCE: UDP length too short for the "+r.BTH.Opcode.String()+" headers"
		}
		return
	}
	rec.payloadLen = len(r.Payload)
	want := bth.FrameICRC(fr.IP)
	rec.icrcOK = want == r.ICRC
	if !rec.icrcOK && bth.FlushICRCRXE(want, fr.Payload) == r.ICRC && bth.IsFlush(fr.Payload) {
		rec.icrcOK, rec.icrcRXE = true, true // Linux's rxe's ICRC of a FLUSH
	}
	rec.icrcWire = bits.ReverseBytes32(r.ICRC)
}
