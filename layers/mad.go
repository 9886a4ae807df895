package layers

import (
	"encoding/binary"
	"errors"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
)

// LayerTypeMAD is the gopacket layer type of a management datagram, the
// payload of a UD SEND to QP1.
var LayerTypeMAD = gopacket.RegisterLayerType(layerNumMAD,
	gopacket.LayerTypeMetadata{Name: "MAD", Decoder: gopacket.DecodeFunc(decodeMAD)})

// MAD sizes (IBTA Vol. 1 §13.4.2).
const (
	// MADHeaderLen is the length of the common MAD header.
	MADHeaderLen = 24
	// MADLen is the length of a whole MAD, header and data.
	MADLen = 256
)

// Management classes (IBTA Vol. 1 Table 118).
const (
	MADClassSubnLID      = 0x01 // subnet management, LID routed
	MADClassSubnAdm      = 0x03 // subnet administration
	MADClassPerfMgmt     = 0x04 // performance management
	MADClassBM           = 0x05 // baseboard management
	MADClassDevMgmt      = 0x06 // device management
	MADClassCM           = 0x07 // communication management
	MADClassSNMP         = 0x08 // SNMP tunneling
	MADClassCongestion   = 0x21 // congestion control
	MADClassSubnDirected = 0x81 // subnet management, directed route
)

// Communication management attribute IDs (IBTA Vol. 1 §12.6).
const (
	CMAttrClassPortInfo = 0x0001
	CMAttrREQ           = 0x0010
	CMAttrMRA           = 0x0011
	CMAttrREJ           = 0x0012
	CMAttrREP           = 0x0013
	CMAttrRTU           = 0x0014
	CMAttrDREQ          = 0x0015
	CMAttrDREP          = 0x0016
	CMAttrSIDRREQ       = 0x0017
	CMAttrSIDRREP       = 0x0018
	CMAttrLAP           = 0x0019
	CMAttrAPR           = 0x001A
)

// MADResponseBit is the R bit of the method byte: set on responses.
const MADResponseBit = 0x80

// ErrMADTruncated means a MAD layer had fewer than MADHeaderLen bytes.
var ErrMADTruncated = errors.New("layers: MAD shorter than its 24-byte header")

// MAD is the common header of a management datagram (IBTA Vol. 1 §13.4.2,
// Figure 147) followed by its class-specific data:
//
//	 0             1             2             3
//	+-------------+-------------+-------------+---+---------+
//	| BaseVersion | MgmtClass   | ClassVersion| R | Method  |
//	+-------------+-------------+-------------+---+---------+
//	| Status                    | ClassSpecific             |
//	+---------------------------+---------------------------+
//	| TransactionID (8 bytes)                               |
//	+---------------------------+---------------------------+
//	| AttributeID               | Reserved                  |
//	+---------------------------+---------------------------+
//	| AttributeModifier                                     |
//	+-------------------------------------------------------+
//	| MAD data (232 bytes in a 256-byte MAD)                |
//
// Contents is the header and Payload the MAD data, which is where a codec
// for the class (package mad's CM messages, say) takes over; see
// RegisterMADClassLayerType.
//
// A MAD is not safe for concurrent use: decode into it from one goroutine.
type MAD struct {
	gplayers.BaseLayer
	BaseVersion  uint8
	MgmtClass    uint8
	ClassVersion uint8
	// Method is the whole method byte, R bit (MADResponseBit) included.
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TransactionID uint64
	AttributeID   uint16
	// AttributeModifier qualifies the attribute; its meaning depends on the
	// class and the attribute.
	AttributeModifier uint32
}

// madClassLayer maps a management class to the layer type that decodes its
// MAD data; zero means gopacket.LayerTypePayload.
var madClassLayer [256]gopacket.LayerType

// RegisterMADClassLayerType makes MAD layers of management class class
// hand their data to layer type lt (for example a CM layer for class 0x07).
// Like gopacket's own registrations it is meant for init functions: it is
// not safe to call while packets are being decoded.
func RegisterMADClassLayerType(class uint8, lt gopacket.LayerType) { madClassLayer[class] = lt }

// LayerType returns LayerTypeMAD.
func (m *MAD) LayerType() gopacket.LayerType { return LayerTypeMAD }

// CanDecode returns LayerTypeMAD.
func (m *MAD) CanDecode() gopacket.LayerClass { return LayerTypeMAD }

// NextLayerType returns the layer type registered for the management class
// with RegisterMADClassLayerType, or gopacket.LayerTypePayload.
func (m *MAD) NextLayerType() gopacket.LayerType {
	if m == nil {
		return gopacket.LayerTypeZero
	}
	if lt := madClassLayer[m.MgmtClass]; lt != gopacket.LayerTypeZero {
		return lt
	}
	return gopacket.LayerTypePayload
}

// Response reports whether the method's R bit is set.
func (m *MAD) Response() bool { return m != nil && m.Method&MADResponseBit != 0 }

// DecodeFromBytes decodes the MAD header from data; the rest of data is the
// MAD data (the layer's payload).
func (m *MAD) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if m == nil {
		return nilError("DecodeFromBytes into a nil *MAD")
	}
	if len(data) < MADHeaderLen {
		*m = MAD{}
		return ErrMADTruncated
	}
	m.BaseVersion = data[0]
	m.MgmtClass = data[1]
	m.ClassVersion = data[2]
	m.Method = data[3]
	m.Status = binary.BigEndian.Uint16(data[4:])
	m.ClassSpecific = binary.BigEndian.Uint16(data[6:])
	m.TransactionID = binary.BigEndian.Uint64(data[8:])
	m.AttributeID = binary.BigEndian.Uint16(data[16:])
	m.AttributeModifier = binary.BigEndian.Uint32(data[20:])
	m.BaseLayer = gplayers.BaseLayer{Contents: data[:MADHeaderLen], Payload: data[MADHeaderLen:]}
	return nil
}

func decodeMAD(data []byte, p gopacket.PacketBuilder) error {
	m := &MAD{}
	if err := m.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(m)
	return p.NextDecoder(m.NextLayerType())
}

// SerializeTo writes the MAD header in front of the MAD data already in b,
// implementing gopacket.SerializableLayer. The reserved field is written as
// zero.
func (m *MAD) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	switch {
	case m == nil:
		return nilError("SerializeTo of a nil *MAD")
	case b == nil:
		return nilError("SerializeTo needs a gopacket.SerializeBuffer")
	}
	h, err := b.PrependBytes(MADHeaderLen)
	if err != nil {
		return err
	}
	h[0], h[1], h[2], h[3] = m.BaseVersion, m.MgmtClass, m.ClassVersion, m.Method
	binary.BigEndian.PutUint16(h[4:], m.Status)
	binary.BigEndian.PutUint16(h[6:], m.ClassSpecific)
	binary.BigEndian.PutUint64(h[8:], m.TransactionID)
	binary.BigEndian.PutUint16(h[16:], m.AttributeID)
	h[18], h[19] = 0, 0
	binary.BigEndian.PutUint32(h[20:], m.AttributeModifier)
	return nil
}

var madClassNames = map[uint8]string{
	MADClassSubnLID: "SubnMgmt", MADClassSubnAdm: "SubnAdm", MADClassPerfMgmt: "PerfMgmt",
	MADClassBM: "BM", MADClassDevMgmt: "DevMgmt", MADClassCM: "CM", MADClassSNMP: "SNMP",
	MADClassCongestion: "CongestionControl", MADClassSubnDirected: "SubnMgmtDR",
}

// MADClassName returns the name of a management class, such as "CM", or ""
// when it is not one of the classes above.
func MADClassName(class uint8) string { return madClassNames[class] }

var madMethodNames = map[uint8]string{
	0x01: "Get", 0x02: "Set", 0x03: "Send", 0x05: "Trap", 0x06: "Report", 0x07: "TrapRepress",
	0x12: "GetTable", 0x13: "GetTraceTable", 0x14: "GetMulti", 0x15: "Delete",
	0x81: "GetResp", 0x86: "ReportResp", 0x92: "GetTableResp", 0x94: "GetMultiResp",
	0x95: "DeleteResp",
}

// MADMethodName returns the name of a method byte (R bit included), such as
// "Send" or "GetResp", or "" when unknown.
func MADMethodName(method uint8) string { return madMethodNames[method] }

var cmAttrNames = map[uint16]string{
	CMAttrClassPortInfo: "ClassPortInfo", CMAttrREQ: "REQ", CMAttrMRA: "MRA", CMAttrREJ: "REJ",
	CMAttrREP: "REP", CMAttrRTU: "RTU", CMAttrDREQ: "DREQ", CMAttrDREP: "DREP",
	CMAttrSIDRREQ: "SIDR_REQ", CMAttrSIDRREP: "SIDR_REP", CMAttrLAP: "LAP", CMAttrAPR: "APR",
}

// MADAttributeName returns the name of attribute attr of management class
// class, such as "REQ" for a CM ConnectRequest, or "" when unknown. Only the
// CM attributes and the ClassPortInfo and Notice attributes that every class
// shares are named.
func MADAttributeName(class uint8, attr uint16) string {
	if class == MADClassCM {
		return cmAttrNames[attr]
	}
	switch attr {
	case 0x0001:
		return "ClassPortInfo"
	case 0x0002:
		return "Notice"
	}
	return ""
}
