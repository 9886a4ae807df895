// Package layers teaches gopacket (github.com/gopacket/gopacket) to decode
// and serialize RoCEv2: importing it registers LayerTypeRoCE on UDP port
// 4791, so that
//
//	gopacket.NewPacket(frame, gplayers.LayerTypeEthernet, gopacket.Default)
//
// yields Ethernet, IPv4 or IPv6, UDP, RoCE and then either a gopacket.Payload
// or, for management datagrams to QP1, a MAD layer.
//
// The RoCE layer holds the Base Transport Header and the extension headers
// its opcode carries (IBTA Vol. 1 §9.2-§9.3). Its contents are those headers,
// its payload is the payload without the pad, and the pad and the invariant
// CRC (ICRC, Annex A17 §A17.4.1.1) are fields of the layer, the way a trailer
// is. The header layouts are not repeated here: decoding goes through
// bth.Packet and the bth header views, and serializing through their Encode
// methods.
//
// The MAD layer decodes the 24-byte common MAD header (IBTA Vol. 1 §13.4.2)
// and leaves the class-specific MAD data as its payload. Decoders for the
// data of a management class plug in with RegisterMADClassLayerType.
//
// Both layers implement gopacket.DecodingLayer, so a
// gopacket.DecodingLayerParser decodes them without allocating, and
// gopacket.SerializableLayer, so that decode followed by serialize gives back
// the same bytes, ICRC included.
package layers
