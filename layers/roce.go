package layers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

// Layer type numbers. gopacket leaves numbers of 2000 and up to
// applications; these follow the RoCEv2 port.
const (
	layerNumRoCE = bth.UDPPort
	layerNumMAD  = 4792
)

// LayerTypeRoCE is the gopacket layer type of a RoCEv2 transport packet, the
// UDP payload from the BTH through the ICRC.
var LayerTypeRoCE = gopacket.RegisterLayerType(layerNumRoCE,
	gopacket.LayerTypeMetadata{Name: "RoCE", Decoder: gopacket.DecodeFunc(decodeRoCE)})

// Both layers decode without allocating and serialize.
var (
	_ gopacket.DecodingLayer     = (*RoCE)(nil)
	_ gopacket.SerializableLayer = (*RoCE)(nil)
	_ gopacket.DecodingLayer     = (*MAD)(nil)
	_ gopacket.SerializableLayer = (*MAD)(nil)
)

func init() {
	gplayers.RegisterUDPPortLayerType(gplayers.UDPPort(bth.UDPPort), LayerTypeRoCE)
}

// Errors from serialization.
var (
	// ErrFieldRange means a field of a layer does not fit in its bits on
	// the wire (a QPN or PSN above 24 bits, a pad count above 3...).
	ErrFieldRange = errors.New("layers: field does not fit its wire width")
	// ErrUndefinedOpcode means SerializeTo was asked for an opcode that
	// bth's opcode table does not define, so the headers are unknown.
	ErrUndefinedOpcode = errors.New("layers: undefined RoCE opcode")
	// ErrNoICRCFlow means SerializeTo was asked to compute the ICRC
	// (SerializeOptions.ComputeChecksums) without a flow to compute it over;
	// call SetICRCFlow or SetNetworkLayerForICRC first.
	ErrNoICRCFlow = errors.New("layers: ICRC needs the IP and UDP headers: call SetNetworkLayerForICRC")
	// ErrICRCNetworkLayer means SetNetworkLayerForICRC got a layer it
	// cannot derive the ICRC flow from (not IPv4 or IPv6, or an IPv4
	// header with options).
	ErrICRCNetworkLayer = errors.New("layers: ICRC flow needs an IPv4 header without options or an IPv6 header")
	// ErrNil means a required argument, or the layer a method was called
	// on, is nil.
	ErrNil = errors.New("layers: nil argument")
)

// nilError reports a nil argument or receiver: what names it.
func nilError(what string) error { return fmt.Errorf("%w: %s", ErrNil, what) }

// FieldError names the field that does not fit. It unwraps to
// ErrFieldRange. It is not modified after it is returned, so it is safe for
// concurrent use.
type FieldError struct {
	Field string // such as "BTH.PSN"
	Value uint64
	Max   uint64 // the largest value the field takes
}

// Error describes the field, its value and what it takes.
func (e *FieldError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return "layers: " + e.Field + " " + strconv.FormatUint(e.Value, 10) + " does not fit its wire width: at most " +
		strconv.FormatUint(e.Max, 10)
}

// Unwrap returns ErrFieldRange.
func (e *FieldError) Unwrap() error {
	if e == nil {
		return nil
	}
	return ErrFieldRange
}

// RoCE is a RoCEv2 transport packet: the Base Transport Header, the
// extension headers its opcode carries, the payload, the pad and the ICRC
// (IBTA Vol. 1 §9.2-§9.3, Annex A17):
//
//	+-----+-----------------+---------------------+-----+------+
//	| BTH | extension hdrs  | payload             | pad | ICRC |
//	+-----+-----------------+---------------------+-----+------+
//	 <------- Contents ----> <----- Payload -----> <- fields -->
//
// Only the header fields the opcode carries (see Has) are meaningful; the
// others are zero after decoding and ignored by SerializeTo.
//
// A RoCE is not safe for concurrent use: decode into it from one goroutine.
type RoCE struct {
	gplayers.BaseLayer

	BTH          bth.BTHFields
	RDETH        bth.RDETHFields
	DETH         bth.DETHFields
	FETH         bth.FETHFields
	RETH         bth.RETHFields
	AtomicETH    bth.AtomicETHFields
	AETH         bth.AETHFields
	AtomicAckETH bth.AtomicAckETHFields
	ImmDt        bth.ImmDtFields
	IETH         bth.IETHFields

	// Pad holds the pad bytes after the payload (BTH.PadCount of them);
	// nil when Truncated.
	Pad []byte
	// ICRC is the invariant CRC the packet carries, as the CRC value: its
	// four wire bytes read least-significant byte first. Zero when
	// Truncated. (Wireshark shows the same four bytes read big-endian.)
	ICRC uint32
	// Truncated reports a packet cut short by the capture (gopacket's
	// truncation feedback was set when it was decoded): the headers are
	// whole, Payload holds what the capture kept, and there is no Pad or
	// ICRC. SerializeTo then writes just the headers and the payload.
	Truncated bool

	// Packet holds bth's zero-copy views of the bytes last decoded, for
	// code that wants the views rather than the fields. SerializeTo does
	// not read it.
	Packet bth.Packet

	flow    bth.Flow
	hasFlow bool
}

// LayerType returns LayerTypeRoCE.
func (r *RoCE) LayerType() gopacket.LayerType { return LayerTypeRoCE }

// CanDecode returns LayerTypeRoCE.
func (r *RoCE) CanDecode() gopacket.LayerClass { return LayerTypeRoCE }

// Has reports whether the packet's opcode carries extension header h.
func (r *RoCE) Has(h bth.Header) bool { return r != nil && r.BTH.Opcode.Info().Has(h) }

// NextLayerType returns LayerTypeMAD for a UD SEND to QP1 (the general
// services interface, where MADs travel) and gopacket.LayerTypePayload
// otherwise.
func (r *RoCE) NextLayerType() gopacket.LayerType {
	if r == nil {
		return gopacket.LayerTypeZero
	}
	if r.BTH.Opcode.Transport() == bth.TransportUD && r.BTH.DestQP == bth.GSIQPN {
		return LayerTypeMAD
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes a RoCE packet, BTH through ICRC, from data. When
// df reports that the capture truncated the packet (gopacket sets this from
// the IP and UDP lengths), it decodes the headers and takes what follows as
// payload. The layer's slices point into data.
func (r *RoCE) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if r == nil {
		return nilError("DecodeFromBytes into a nil *RoCE")
	}
	trunc := captureTruncated(df)
	var err error
	if trunc {
		err = r.Packet.ParseTruncated(data)
	} else {
		err = r.Packet.Parse(data)
	}
	if err != nil {
		r.reset()
		return err
	}
	p := &r.Packet
	r.BaseLayer = gplayers.BaseLayer{Contents: data[:p.Info.HeaderLen], Payload: p.Payload}
	r.BTH = p.BTH.Fields()
	r.RDETH, r.DETH, r.FETH, r.RETH = bth.RDETHFields{}, bth.DETHFields{}, bth.FETHFields{}, bth.RETHFields{}
	r.AtomicETH, r.AETH, r.AtomicAckETH = bth.AtomicETHFields{}, bth.AETHFields{}, bth.AtomicAckETHFields{}
	r.ImmDt, r.IETH = bth.ImmDtFields{}, bth.IETHFields{}
	if p.RDETH != nil {
		r.RDETH = p.RDETH.Fields()
	}
	if p.DETH != nil {
		r.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		r.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		r.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		r.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		r.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		r.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		r.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		r.IETH = p.IETH.Fields()
	}
	r.Pad, r.Truncated, r.ICRC = p.Pad, p.Truncated, 0
	if !p.Truncated {
		r.ICRC = p.ICRCValue()
	}
	return nil
}

// reset clears what a failed decode may have left, keeping the flow.
func (r *RoCE) reset() {
	flow, has := r.flow, r.hasFlow
	*r = RoCE{flow: flow, hasFlow: has}
}

// captureTruncated reports whether the decoder driving this layer has been
// told that the capture cut the packet short: a DecodingLayerParser keeps
// that in its Truncated field, a gopacket.Packet in its metadata.
func captureTruncated(df gopacket.DecodeFeedback) bool {
	switch d := df.(type) {
	case *gopacket.DecodingLayerParser:
		return d.Truncated
	case packetWithMetadata:
		return d.Metadata().Truncated
	}
	return false
}

// packetWithMetadata is what gopacket's packets, the PacketBuilders of
// NewPacket, offer besides the builder methods.
type packetWithMetadata interface {
	Metadata() *gopacket.PacketMetadata
}

func decodeRoCE(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCE{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	return p.NextDecoder(r.NextLayerType())
}

// SetICRCFlow sets the IP addresses, UDP ports and IPv4 ID and DF bit that
// the ICRC covers, for SerializeTo with ComputeChecksums.
func (r *RoCE) SetICRCFlow(f bth.Flow) {
	if r != nil {
		r.flow, r.hasFlow = f, true
	}
}

// SetNetworkLayerForICRC takes the ICRC flow from the gopacket IPv4 or IPv6
// layer and the UDP layer that will carry the packet, as UDP's
// SetNetworkLayerForChecksum does for its checksum. The IPv4 header must
// have no options: the ICRC covers the whole IP header and bth computes it
// for the 20-byte one.
func (r *RoCE) SetNetworkLayerForICRC(ip gopacket.NetworkLayer, udp *gplayers.UDP) error {
	switch {
	case r == nil:
		return nilError("SetNetworkLayerForICRC on a nil *RoCE")
	case udp == nil:
		return nilError("SetNetworkLayerForICRC needs the packet's *layers.UDP")
	}
	f := bth.Flow{SrcPort: uint16(udp.SrcPort), DstPort: uint16(udp.DstPort)}
	var ok1, ok2 bool
	switch h := ip.(type) {
	case *gplayers.IPv4:
		if h == nil {
			return nilError("SetNetworkLayerForICRC got a nil *layers.IPv4")
		}
		if len(h.Options) > 0 || h.IHL > 5 {
			return ErrICRCNetworkLayer
		}
		f.Src, ok1 = netip.AddrFromSlice(h.SrcIP.To4())
		f.Dst, ok2 = netip.AddrFromSlice(h.DstIP.To4())
		f.ID, f.DF = h.Id, h.Flags&gplayers.IPv4DontFragment != 0
	case *gplayers.IPv6:
		if h == nil {
			return nilError("SetNetworkLayerForICRC got a nil *layers.IPv6")
		}
		f.Src, ok1 = netip.AddrFromSlice(h.SrcIP.To16())
		f.Dst, ok2 = netip.AddrFromSlice(h.DstIP.To16())
	}
	if !ok1 || !ok2 {
		return ErrICRCNetworkLayer
	}
	r.SetICRCFlow(f)
	return nil
}

// VerifyICRC reports whether the packet last decoded carries the right ICRC
// for flow f. It is false for a truncated packet.
func (r *RoCE) VerifyICRC(f *bth.Flow) bool {
	return r != nil && !r.Truncated && r.Packet.Raw != nil && f.Verify(r.Packet.Raw)
}

// SerializeTo writes the headers in front of the payload already in b and
// the pad and ICRC after it, implementing gopacket.SerializableLayer.
//
// With opts.FixLengths the pad count follows from the payload length;
// otherwise BTH.PadCount is kept and Pad is written when it has that length
// (zeros when not). With opts.ComputeChecksums the ICRC is computed over the
// flow set by SetNetworkLayerForICRC or SetICRCFlow; otherwise the ICRC field
// is written as it is. Reserved bits are written as zero. A Truncated layer
// writes the headers only, with no pad or ICRC.
func (r *RoCE) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	switch {
	case r == nil:
		return nilError("SerializeTo of a nil *RoCE")
	case b == nil:
		return nilError("SerializeTo needs a gopacket.SerializeBuffer")
	}
	info := r.BTH.Opcode.Info()
	if !info.Valid() {
		return fmt.Errorf("%w: %v: set BTH.Opcode to one the IBTA defines", ErrUndefinedOpcode, r.BTH.Opcode)
	}
	if err := r.checkFields(info); err != nil {
		return err
	}
	payloadLen := len(b.Bytes())
	bf := r.BTH
	if !r.Truncated {
		if opts.FixLengths {
			bf.PadCount = uint8(bth.PadCount(payloadLen))
		}
		pad := int(bf.PadCount)
		tail, err := b.AppendBytes(pad + bth.ICRCLen)
		if err != nil {
			return err
		}
		if len(r.Pad) == pad {
			copy(tail, r.Pad)
		} else {
			clear(tail[:pad])
		}
	}
	if _, err := b.PrependBytes(info.HeaderLen); err != nil {
		return err
	}
	pkt := b.Bytes()
	if err := bth.BTH(pkt[:bth.BTHLen]).Encode(&bf); err != nil {
		return err
	}
	clear(pkt[bth.BTHLen:info.HeaderLen])
	if err := r.encodeHeaders(info, pkt); err != nil {
		return err
	}
	if r.Truncated {
		return nil
	}
	if opts.ComputeChecksums {
		if !r.hasFlow {
			return ErrNoICRCFlow
		}
		return r.flow.Seal(pkt)
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-bth.ICRCLen:], r.ICRC)
	return nil
}

// checkFields returns a *FieldError for the first field that the bth
// encoders would reject.
func (r *RoCE) checkFields(info *bth.OpInfo) error {
	const max24 = 1<<24 - 1
	type check struct {
		on    bool
		name  string
		v, mx uint64
	}
	for _, c := range [...]check{
		{true, "BTH.PadCount", uint64(r.BTH.PadCount), 3},
		{true, "BTH.TVer", uint64(r.BTH.TVer), 15},
		{true, "BTH.DestQP", uint64(r.BTH.DestQP), max24},
		{true, "BTH.PSN", uint64(r.BTH.PSN), max24},
		{info.Has(bth.HdrAETH), "AETH.MSN", uint64(r.AETH.MSN), max24},
		{info.Has(bth.HdrDETH), "DETH.SrcQP", uint64(r.DETH.SrcQP), max24},
		{info.Has(bth.HdrRDETH), "RDETH.EECnxt", uint64(r.RDETH.EECnxt), max24},
		{info.Has(bth.HdrFETH), "FETH.Selectivity", uint64(r.FETH.Selectivity), 3},
		{info.Has(bth.HdrFETH), "FETH.Placement", uint64(r.FETH.Placement), 15},
	} {
		if c.on && c.v > c.mx {
			return &FieldError{Field: c.name, Value: c.v, Max: c.mx}
		}
	}
	return nil
}

// encodeHeaders writes the extension headers of the opcode into pkt through
// the bth views.
func (r *RoCE) encodeHeaders(info *bth.OpInfo, pkt []byte) error {
	if v := headerAt(info, pkt, bth.HdrRDETH, bth.RDETHLen); v != nil {
		if err := bth.RDETH(v).Encode(&r.RDETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrDETH, bth.DETHLen); v != nil {
		if err := bth.DETH(v).Encode(&r.DETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrFETH, bth.FETHLen); v != nil {
		if err := bth.FETH(v).Encode(&r.FETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrRETH, bth.RETHLen); v != nil {
		if err := bth.RETH(v).Encode(&r.RETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrAtomicETH, bth.AtomicETHLen); v != nil {
		if err := bth.AtomicETH(v).Encode(&r.AtomicETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrAETH, bth.AETHLen); v != nil {
		if err := bth.AETH(v).Encode(&r.AETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrAtomicAckETH, bth.AtomicAckETHLen); v != nil {
		if err := bth.AtomicAckETH(v).Encode(&r.AtomicAckETH); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrImmDt, bth.ImmDtLen); v != nil {
		if err := bth.ImmDt(v).Encode(&r.ImmDt); err != nil {
			return err
		}
	}
	if v := headerAt(info, pkt, bth.HdrIETH, bth.IETHLen); v != nil {
		if err := bth.IETH(v).Encode(&r.IETH); err != nil {
			return err
		}
	}
	return nil
}

// headerAt returns the n bytes of header h in pkt, or nil when the opcode
// does not carry h.
func headerAt(info *bth.OpInfo, pkt []byte, h bth.Header, n int) []byte {
	o := info.Offset(h)
	if o < 0 {
		return nil
	}
	return pkt[o : o+n]
}
