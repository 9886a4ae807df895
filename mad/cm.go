package mad

import "github.com/goroce/goroce/bth"

// Private data and additional-information sizes of the CM messages (IBTA
// Vol. 1 §12.6; the kernel's enum ib_cm_data_size).
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REJARILen             = 72
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	LAPPrivateDataLen     = 168
	APRPrivateDataLen     = 148
	APRInfoLen            = 72
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	SIDRREPInfoLen        = 72
)

// Path is one path of a REQ (primary or alternate) or the alternate path of
// a LAP (IBTA Vol. 1 Tables 106 and 115). Local is the sender of the
// message (the active side), Remote its receiver. Over RoCE the LIDs are
// 0xFFFF and the GIDs are the IPv4-mapped or IPv6 addresses of the two
// ends.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, IBTA rate enumeration
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits, service level
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits, 4.096 us * 2^t; see Timeout
}

// pathFields names the range-checked fields of a path, for FieldError.
type pathFields struct{ flowLabel, packetRate, sl, ackTimeout string }

var (
	primaryFields   = pathFields{"Primary.FlowLabel", "Primary.PacketRate", "Primary.SL", "Primary.LocalACKTimeout"}
	alternateFields = pathFields{"Alternate.FlowLabel", "Alternate.PacketRate", "Alternate.SL", "Alternate.LocalACKTimeout"}
)

func (p *Path) check(c *checker, names *pathFields) {
	c.bits(names.flowLabel, uint64(p.FlowLabel), 20)
	c.bits(names.packetRate, uint64(p.PacketRate), 6)
	c.bits(names.sl, uint64(p.SL), 4)
	c.bits(names.ackTimeout, uint64(p.LocalACKTimeout), 5)
}

// putREQ writes the 44-byte REQ layout of p to b; b[43] gets only the ACK
// timeout (the caller adds SAP Supported for the alternate path).
func (p *Path) putREQ(b []byte) {
	put16(b[0:], p.LocalLID)
	put16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	put32(b[36:], p.FlowLabel<<12|uint32(p.PacketRate))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | bit(p.SubnetLocal, 0x08)
	b[43] = p.LocalACKTimeout << 3
}

func (p *Path) getREQ(b []byte) {
	p.LocalLID = get16(b[0:])
	p.RemoteLID = get16(b[2:])
	p.LocalGID = [16]byte(b[4:20])
	p.RemoteGID = [16]byte(b[20:36])
	w := get32(b[36:])
	p.FlowLabel = w >> 12
	p.PacketRate = uint8(w & 0x3F)
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

// putLAP writes the 44-byte LAP layout of p (traffic class beside the flow
// label, hop limit before the packet rate) to b.
func (p *Path) putLAP(b []byte) {
	put16(b[0:], p.LocalLID)
	put16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	put32(b[36:], p.FlowLabel<<12|uint32(p.TrafficClass))
	b[40] = p.HopLimit
	b[41] = p.PacketRate
	b[42] = p.SL<<4 | bit(p.SubnetLocal, 0x08)
	b[43] = p.LocalACKTimeout << 3
}

func (p *Path) getLAP(b []byte) {
	p.LocalLID = get16(b[0:])
	p.RemoteLID = get16(b[2:])
	p.LocalGID = [16]byte(b[4:20])
	p.RemoteGID = [16]byte(b[20:36])
	w := get32(b[36:])
	p.FlowLabel = w >> 12
	p.TrafficClass = uint8(w)
	p.HopLimit = b[40]
	p.PacketRate = b[41] & 0x3F
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

// REQ is the ConnectRequest message (IBTA Vol. 1 Table 106), sent by the
// active side. For rdma_cm the private data starts with a CMAHeader.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 LocalCommID(32)
//	 4 reserved(8) VendorID(24)
//	 8 ServiceID(64)
//	16 LocalCAGUID(64)
//	24 reserved(32)
//	28 LocalQKey(32)
//	32 LocalQPN(24) ResponderResources(8)
//	36 LocalEECN(24) InitiatorDepth(8)
//	40 RemoteEECN(24) RemoteCMResponseTimeout(5) TransportServiceType(2) EndToEndFlowControl(1)
//	44 StartingPSN(24) LocalCMResponseTimeout(5) RetryCount(3)
//	48 PKey(16) PathMTU(4) RDCExists(1) RNRRetryCount(3) MaxCMRetries(4) SRQ(1) ExtendedTransportType(3)
//	52 primary path (44 bytes), 96 alternate path (44 bytes; SAPSupported in byte 139 bit 5)
//	140 PrivateData(92 bytes)
type REQ struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits, IBTA 1.4 enhanced connection establishment (ECE)
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32        // 24 bits
	RemoteCMResponseTimeout uint8         // 5 bits; see Timeout
	TransportServiceType    TransportType // 2 bits
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits: the active side's receive PSN, where the passive side starts sending
	LocalCMResponseTimeout  uint8  // 5 bits; see Timeout
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 bth.MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits; 7 means retry forever
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits; 1 is XRC when TransportServiceType is 3
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             [REQPrivateDataLen]byte
}

// AttrID returns AttrREQ.
func (*REQ) AttrID() uint16 { return AttrREQ }

func (m *REQ) check() error {
	c := checker{msg: "REQ"}
	c.bits("VendorID", uint64(m.VendorID), 24)
	c.bits("LocalQPN", uint64(m.LocalQPN), 24)
	c.bits("LocalEECN", uint64(m.LocalEECN), 24)
	c.bits("RemoteEECN", uint64(m.RemoteEECN), 24)
	c.bits("RemoteCMResponseTimeout", uint64(m.RemoteCMResponseTimeout), 5)
	c.bits("TransportServiceType", uint64(m.TransportServiceType), 2)
	c.bits("StartingPSN", uint64(m.StartingPSN), 24)
	c.bits("LocalCMResponseTimeout", uint64(m.LocalCMResponseTimeout), 5)
	c.bits("RetryCount", uint64(m.RetryCount), 3)
	c.bits("PathMTU", uint64(m.PathMTU), 4)
	c.bits("RNRRetryCount", uint64(m.RNRRetryCount), 3)
	c.bits("MaxCMRetries", uint64(m.MaxCMRetries), 4)
	c.bits("ExtendedTransportType", uint64(m.ExtendedTransportType), 3)
	m.Primary.check(&c, &primaryFields)
	m.Alternate.check(&c, &alternateFields)
	return c.err
}

// Marshal implements Message.
func (m *REQ) Marshal(b []byte) error {
	b, err := data(b, m == nil, "REQ")
	if err != nil {
		return err
	}
	if err := m.check(); err != nil {
		return err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.VendorID)
	put64(b[8:], m.ServiceID)
	put64(b[16:], m.LocalCAGUID)
	put32(b[24:], 0)
	put32(b[28:], m.LocalQKey)
	put32(b[32:], m.LocalQPN<<8|uint32(m.ResponderResources))
	put32(b[36:], m.LocalEECN<<8|uint32(m.InitiatorDepth))
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | uint8(m.TransportServiceType)<<1 | bit(m.EndToEndFlowControl, 0x01)
	put24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount
	put16(b[48:], m.PKey)
	b[50] = uint8(m.PathMTU)<<4 | bit(m.RDCExists, 0x08) | m.RNRRetryCount
	b[51] = m.MaxCMRetries<<4 | bit(m.SRQ, 0x08) | m.ExtendedTransportType
	m.Primary.putREQ(b[52:96])
	m.Alternate.putREQ(b[96:140])
	b[139] |= bit(m.SAPSupported, 0x04)
	copy(b[140:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *REQ) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "REQ")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.VendorID = get24(b[5:])
	m.ServiceID = get64(b[8:])
	m.LocalCAGUID = get64(b[16:])
	m.LocalQKey = get32(b[28:])
	m.LocalQPN = get24(b[32:])
	m.ResponderResources = b[35]
	m.LocalEECN = get24(b[36:])
	m.InitiatorDepth = b[39]
	m.RemoteEECN = get24(b[40:])
	m.RemoteCMResponseTimeout = b[43] >> 3
	m.TransportServiceType = TransportType(b[43] >> 1 & 3)
	m.EndToEndFlowControl = b[43]&0x01 != 0
	m.StartingPSN = get24(b[44:])
	m.LocalCMResponseTimeout = b[47] >> 3
	m.RetryCount = b[47] & 7
	m.PKey = get16(b[48:])
	m.PathMTU = bth.MTU(b[50] >> 4)
	m.RDCExists = b[50]&0x08 != 0
	m.RNRRetryCount = b[50] & 7
	m.MaxCMRetries = b[51] >> 4
	m.SRQ = b[51]&0x08 != 0
	m.ExtendedTransportType = b[51] & 7
	m.Primary.getREQ(b[52:96])
	m.Alternate.getREQ(b[96:140])
	m.SAPSupported = b[139]&0x04 != 0
	m.PrivateData = [REQPrivateDataLen]byte(b[140:])
	return nil
}

// MRA is the MessageReceiptAcknowledgement message (IBTA Vol. 1 Table
// 107): "received your REQ, REP or LAP; the answer will take up to
// ServiceTimeout".
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	0 LocalCommID(32)
//	4 RemoteCommID(32)
//	8 MessageMRAed(2) reserved(6)
//	9 ServiceTimeout(5) reserved(3)
//	10 PrivateData(222 bytes)
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MRAedMsg // 2 bits
	ServiceTimeout uint8    // 5 bits; see Timeout
	PrivateData    [MRAPrivateDataLen]byte
}

// AttrID returns AttrMRA.
func (*MRA) AttrID() uint16 { return AttrMRA }

// Marshal implements Message.
func (m *MRA) Marshal(b []byte) error {
	b, err := data(b, m == nil, "MRA")
	if err != nil {
		return err
	}
	c := checker{msg: "MRA"}
	c.bits("MessageMRAed", uint64(m.MessageMRAed), 2)
	c.bits("ServiceTimeout", uint64(m.ServiceTimeout), 5)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	b[8] = uint8(m.MessageMRAed) << 6
	b[9] = m.ServiceTimeout << 3
	copy(b[10:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *MRA) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "MRA")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.MessageMRAed = MRAedMsg(b[8] >> 6)
	m.ServiceTimeout = b[9] >> 3
	m.PrivateData = [MRAPrivateDataLen]byte(b[10:])
	return nil
}

// REJ is the Reject message (IBTA Vol. 1 Table 108).
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	0 LocalCommID(32)
//	4 RemoteCommID(32)
//	8 MessageRejected(2) reserved(6)
//	9 RejectInfoLength(7) reserved(1)
//	10 Reason(16)
//	12 ARI(72 bytes), additional reject information
//	84 PrivateData(148 bytes)
type REJ struct {
	LocalCommID      uint32
	RemoteCommID     uint32
	MessageRejected  RejectedMsg // 2 bits
	RejectInfoLength uint8       // 7 bits: bytes of ARI used
	Reason           RejectReason
	ARI              [REJARILen]byte
	PrivateData      [REJPrivateDataLen]byte
}

// AttrID returns AttrREJ.
func (*REJ) AttrID() uint16 { return AttrREJ }

// Marshal implements Message.
func (m *REJ) Marshal(b []byte) error {
	b, err := data(b, m == nil, "REJ")
	if err != nil {
		return err
	}
	c := checker{msg: "REJ"}
	c.bits("MessageRejected", uint64(m.MessageRejected), 2)
	c.bits("RejectInfoLength", uint64(m.RejectInfoLength), 7)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	b[8] = uint8(m.MessageRejected) << 6
	b[9] = m.RejectInfoLength << 1
	put16(b[10:], uint16(m.Reason))
	copy(b[12:84], m.ARI[:])
	copy(b[84:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *REJ) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "REJ")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.MessageRejected = RejectedMsg(b[8] >> 6)
	m.RejectInfoLength = b[9] >> 1
	m.Reason = RejectReason(get16(b[10:]))
	m.ARI = [REJARILen]byte(b[12:84])
	m.PrivateData = [REJPrivateDataLen]byte(b[84:])
	return nil
}

// ARIBytes returns the used part of the additional reject information:
// RejectInfoLength bytes of ARI, at most all of it.
func (m *REJ) ARIBytes() []byte {
	if m == nil {
		return nil
	}
	return m.ARI[:min(int(m.RejectInfoLength), REJARILen)]
}

// REP is the ConnectReply message (IBTA Vol. 1 Table 110), sent by the
// passive side.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 LocalCommID(32)
//	 4 RemoteCommID(32)
//	 8 LocalQKey(32)
//	12 LocalQPN(24) VendorID bits 23-16 (8)
//	16 LocalEECN(24) VendorID bits 15-8 (8)
//	20 StartingPSN(24) VendorID bits 7-0 (8)
//	24 ResponderResources(8) InitiatorDepth(8)
//	26 TargetACKDelay(5) FailoverAccepted(2) EndToEndFlowControl(1)
//	27 RNRRetryCount(3) SRQ(1) reserved(4)
//	28 LocalCAGUID(64)
//	36 PrivateData(196 bytes)
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits
	StartingPSN         uint32 // 24 bits: the passive side's receive PSN, where the active side starts sending
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits: 0 accepted, 1 not supported, 2 rejected
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	VendorID            uint32 // 24 bits, IBTA 1.4 ECE; split over bytes 15, 19 and 23
	PrivateData         [REPPrivateDataLen]byte
}

// AttrID returns AttrREP.
func (*REP) AttrID() uint16 { return AttrREP }

// Marshal implements Message.
func (m *REP) Marshal(b []byte) error {
	b, err := data(b, m == nil, "REP")
	if err != nil {
		return err
	}
	c := checker{msg: "REP"}
	c.bits("LocalQPN", uint64(m.LocalQPN), 24)
	c.bits("LocalEECN", uint64(m.LocalEECN), 24)
	c.bits("StartingPSN", uint64(m.StartingPSN), 24)
	c.bits("TargetACKDelay", uint64(m.TargetACKDelay), 5)
	c.bits("FailoverAccepted", uint64(m.FailoverAccepted), 2)
	c.bits("RNRRetryCount", uint64(m.RNRRetryCount), 3)
	c.bits("VendorID", uint64(m.VendorID), 24)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	put32(b[8:], m.LocalQKey)
	put32(b[12:], m.LocalQPN<<8|m.VendorID>>16)
	put32(b[16:], m.LocalEECN<<8|m.VendorID>>8&0xFF)
	put32(b[20:], m.StartingPSN<<8|m.VendorID&0xFF)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | m.FailoverAccepted<<1 | bit(m.EndToEndFlowControl, 0x01)
	b[27] = m.RNRRetryCount<<5 | bit(m.SRQ, 0x10)
	put64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *REP) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "REP")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.LocalQKey = get32(b[8:])
	m.LocalQPN = get24(b[12:])
	m.LocalEECN = get24(b[16:])
	m.StartingPSN = get24(b[20:])
	m.VendorID = uint32(b[15])<<16 | uint32(b[19])<<8 | uint32(b[23])
	m.ResponderResources = b[24]
	m.InitiatorDepth = b[25]
	m.TargetACKDelay = b[26] >> 3
	m.FailoverAccepted = b[26] >> 1 & 3
	m.EndToEndFlowControl = b[26]&0x01 != 0
	m.RNRRetryCount = b[27] >> 5
	m.SRQ = b[27]&0x10 != 0
	m.LocalCAGUID = get64(b[28:])
	m.PrivateData = [REPPrivateDataLen]byte(b[36:])
	return nil
}

// RTU is the ReadyToUse message (IBTA Vol. 1 Table 111), the active side's
// answer to a REP.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	0 LocalCommID(32)
//	4 RemoteCommID(32)
//	8 PrivateData(224 bytes)
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID returns AttrRTU.
func (*RTU) AttrID() uint16 { return AttrRTU }

// Marshal implements Message.
func (m *RTU) Marshal(b []byte) error {
	b, err := data(b, m == nil, "RTU")
	if err != nil {
		return err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *RTU) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "RTU")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.PrivateData = [RTUPrivateDataLen]byte(b[8:])
	return nil
}

// DREQ is the DisconnectRequest message (IBTA Vol. 1 Table 112), sent by
// either side.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 LocalCommID(32)
//	 4 RemoteCommID(32)
//	 8 RemoteQPN(24) (remote QPN/EECN) reserved(8)
//	12 PrivateData(220 bytes)
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData  [DREQPrivateDataLen]byte
}

// AttrID returns AttrDREQ.
func (*DREQ) AttrID() uint16 { return AttrDREQ }

// Marshal implements Message.
func (m *DREQ) Marshal(b []byte) error {
	b, err := data(b, m == nil, "DREQ")
	if err != nil {
		return err
	}
	c := checker{msg: "DREQ"}
	c.bits("RemoteQPN", uint64(m.RemoteQPN), 24)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	put32(b[8:], m.RemoteQPN<<8)
	copy(b[12:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *DREQ) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "DREQ")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.RemoteQPN = get24(b[8:])
	m.PrivateData = [DREQPrivateDataLen]byte(b[12:])
	return nil
}

// DREP is the DisconnectReply message (IBTA Vol. 1 Table 113).
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	0 LocalCommID(32)
//	4 RemoteCommID(32)
//	8 PrivateData(224 bytes)
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// AttrID returns AttrDREP.
func (*DREP) AttrID() uint16 { return AttrDREP }

// Marshal implements Message.
func (m *DREP) Marshal(b []byte) error {
	b, err := data(b, m == nil, "DREP")
	if err != nil {
		return err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *DREP) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "DREP")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.PrivateData = [DREPPrivateDataLen]byte(b[8:])
	return nil
}

// LAP is the LoadAlternatePath message (IBTA Vol. 1 Table 115).
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 LocalCommID(32)
//	 4 RemoteCommID(32)
//	 8 reserved(32)
//	12 RemoteQPN(24) (remote QPN/EECN) RemoteCMResponseTimeout(5) reserved(3)
//	16 reserved(32)
//	20 AlternateLocalLID(16) AlternateRemoteLID(16)
//	24 AlternateLocalGID(128), 40 AlternateRemoteGID(128)
//	56 FlowLabel(20) reserved(4) TrafficClass(8)
//	60 HopLimit(8) reserved(2) PacketRate(6) SL(4) SubnetLocal(1) reserved(3)
//	   LocalACKTimeout(5) reserved(3)
//	64 PrivateData(168 bytes)
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               Path
	PrivateData             [LAPPrivateDataLen]byte
}

// AttrID returns AttrLAP.
func (*LAP) AttrID() uint16 { return AttrLAP }

// Marshal implements Message.
func (m *LAP) Marshal(b []byte) error {
	b, err := data(b, m == nil, "LAP")
	if err != nil {
		return err
	}
	c := checker{msg: "LAP"}
	c.bits("RemoteQPN", uint64(m.RemoteQPN), 24)
	c.bits("RemoteCMResponseTimeout", uint64(m.RemoteCMResponseTimeout), 5)
	m.Alternate.check(&c, &alternateFields)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	put32(b[8:], 0)
	put24(b[12:], m.RemoteQPN)
	b[15] = m.RemoteCMResponseTimeout << 3
	put32(b[16:], 0)
	m.Alternate.putLAP(b[20:64])
	copy(b[64:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *LAP) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "LAP")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.RemoteQPN = get24(b[12:])
	m.RemoteCMResponseTimeout = b[15] >> 3
	m.Alternate.getLAP(b[20:64])
	m.PrivateData = [LAPPrivateDataLen]byte(b[64:])
	return nil
}

// APR is the AlternatePathResponse message (IBTA Vol. 1 Table 116).
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 LocalCommID(32)
//	 4 RemoteCommID(32)
//	 8 AdditionalInfoLength(8) Status(8) reserved(16)
//	12 AdditionalInfo(72 bytes)
//	84 PrivateData(148 bytes)
type APR struct {
	LocalCommID          uint32
	RemoteCommID         uint32
	AdditionalInfoLength uint8
	Status               APStatus
	AdditionalInfo       [APRInfoLen]byte
	PrivateData          [APRPrivateDataLen]byte
}

// AttrID returns AttrAPR.
func (*APR) AttrID() uint16 { return AttrAPR }

// Marshal implements Message.
func (m *APR) Marshal(b []byte) error {
	b, err := data(b, m == nil, "APR")
	if err != nil {
		return err
	}
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	b[8] = m.AdditionalInfoLength
	b[9] = uint8(m.Status)
	b[10], b[11] = 0, 0
	copy(b[12:84], m.AdditionalInfo[:])
	copy(b[84:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *APR) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "APR")
	if err != nil {
		return err
	}
	m.LocalCommID = get32(b[0:])
	m.RemoteCommID = get32(b[4:])
	m.AdditionalInfoLength = b[8]
	m.Status = APStatus(b[9])
	m.AdditionalInfo = [APRInfoLen]byte(b[12:84])
	m.PrivateData = [APRPrivateDataLen]byte(b[84:])
	return nil
}

// SIDRREQ is the ServiceIDResolutionRequest message (IBTA Vol. 1 Table
// 119), which asks for the UD QP serving a service ID. rdma_cm's UDP port
// space puts a CMAHeader at the start of its private data.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 RequestID(32)
//	 4 PKey(16) reserved(16)
//	 8 ServiceID(64)
//	16 PrivateData(216 bytes)
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateDataLen]byte
}

// AttrID returns AttrSIDRREQ.
func (*SIDRREQ) AttrID() uint16 { return AttrSIDRREQ }

// Marshal implements Message.
func (m *SIDRREQ) Marshal(b []byte) error {
	b, err := data(b, m == nil, "SIDRREQ")
	if err != nil {
		return err
	}
	put32(b[0:], m.RequestID)
	put16(b[4:], m.PKey)
	put16(b[6:], 0)
	put64(b[8:], m.ServiceID)
	copy(b[16:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *SIDRREQ) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "SIDRREQ")
	if err != nil {
		return err
	}
	m.RequestID = get32(b[0:])
	m.PKey = get16(b[4:])
	m.ServiceID = get64(b[8:])
	m.PrivateData = [SIDRREQPrivateDataLen]byte(b[16:])
	return nil
}

// SIDRREP is the ServiceIDResolutionResponse message (IBTA Vol. 1 Table
// 120).
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 RequestID(32)
//	 4 Status(8) AdditionalInfoLength(8) VendorID bits 23-8 (16)
//	 8 QPN(24) VendorID bits 7-0 (8)
//	12 ServiceID(64)
//	20 QKey(32)
//	24 AdditionalInfo(72 bytes)
//	96 PrivateData(136 bytes)
type SIDRREP struct {
	RequestID            uint32
	Status               SIDRStatus
	AdditionalInfoLength uint8
	QPN                  uint32 // 24 bits
	ServiceID            uint64
	QKey                 uint32
	VendorID             uint32 // 24 bits, IBTA 1.4 ECE
	AdditionalInfo       [SIDRREPInfoLen]byte
	PrivateData          [SIDRREPPrivateDataLen]byte
}

// AttrID returns AttrSIDRREP.
func (*SIDRREP) AttrID() uint16 { return AttrSIDRREP }

// Marshal implements Message.
func (m *SIDRREP) Marshal(b []byte) error {
	b, err := data(b, m == nil, "SIDRREP")
	if err != nil {
		return err
	}
	c := checker{msg: "SIDR_REP"}
	c.bits("QPN", uint64(m.QPN), 24)
	c.bits("VendorID", uint64(m.VendorID), 24)
	if c.err != nil {
		return c.err
	}
	put32(b[0:], m.RequestID)
	b[4] = uint8(m.Status)
	b[5] = m.AdditionalInfoLength
	put16(b[6:], uint16(m.VendorID>>8))
	put32(b[8:], m.QPN<<8|m.VendorID&0xFF)
	put64(b[12:], m.ServiceID)
	put32(b[20:], m.QKey)
	copy(b[24:96], m.AdditionalInfo[:])
	copy(b[96:], m.PrivateData[:])
	return nil
}

// Unmarshal implements Message.
func (m *SIDRREP) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "SIDRREP")
	if err != nil {
		return err
	}
	m.RequestID = get32(b[0:])
	m.Status = SIDRStatus(b[4])
	m.AdditionalInfoLength = b[5]
	m.QPN = get24(b[8:])
	m.VendorID = uint32(get16(b[6:]))<<8 | uint32(b[11])
	m.ServiceID = get64(b[12:])
	m.QKey = get32(b[20:])
	m.AdditionalInfo = [SIDRREPInfoLen]byte(b[24:96])
	m.PrivateData = [SIDRREPPrivateDataLen]byte(b[96:])
	return nil
}

// ClassPortInfoLen is the length of the ClassPortInfo attribute; the rest
// of the class data is reserved.
const ClassPortInfoLen = 72

// ClassPortInfo is the ClassPortInfo attribute every management class has
// (IBTA Vol. 1 §13.4; struct ib_class_port_info in the kernel's
// include/rdma/ib_mad.h): the class's capabilities and where to redirect
// requests and send traps.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
//
//	 0 BaseVersion(8) ClassVersion(8) CapabilityMask(16)
//	 4 CapabilityMask2(27) RespTimeValue(5)
//	 8 RedirectGID(128)
//	24 RedirectTC(8) RedirectSL(4) RedirectFL(20)
//	28 RedirectLID(16) RedirectPKey(16)
//	32 reserved(8) RedirectQP(24)
//	36 RedirectQKey(32)
//	40 TrapGID(128)
//	56 TrapTC(8) TrapSL(4) TrapFL(20)
//	60 TrapLID(16) TrapPKey(16)
//	64 TrapHL(8) TrapQP(24)
//	68 TrapQKey(32)
type ClassPortInfo struct {
	BaseVersion     uint8
	ClassVersion    uint8
	CapabilityMask  uint16
	CapabilityMask2 uint32 // 27 bits
	RespTimeValue   uint8  // 5 bits
	RedirectGID     [16]byte
	RedirectTC      uint8
	RedirectSL      uint8  // 4 bits
	RedirectFL      uint32 // 20 bits
	RedirectLID     uint16
	RedirectPKey    uint16
	RedirectQP      uint32 // 24 bits
	RedirectQKey    uint32
	TrapGID         [16]byte
	TrapTC          uint8
	TrapSL          uint8  // 4 bits
	TrapFL          uint32 // 20 bits
	TrapLID         uint16
	TrapPKey        uint16
	TrapHL          uint8
	TrapQP          uint32 // 24 bits
	TrapQKey        uint32
}

// AttrID returns AttrClassPortInfo.
func (*ClassPortInfo) AttrID() uint16 { return AttrClassPortInfo }

// Marshal implements Message; the bytes after the attribute are zeroed.
func (m *ClassPortInfo) Marshal(b []byte) error {
	b, err := data(b, m == nil, "ClassPortInfo")
	if err != nil {
		return err
	}
	c := checker{msg: "ClassPortInfo"}
	c.bits("CapabilityMask2", uint64(m.CapabilityMask2), 27)
	c.bits("RespTimeValue", uint64(m.RespTimeValue), 5)
	c.bits("RedirectSL", uint64(m.RedirectSL), 4)
	c.bits("RedirectFL", uint64(m.RedirectFL), 20)
	c.bits("RedirectQP", uint64(m.RedirectQP), 24)
	c.bits("TrapSL", uint64(m.TrapSL), 4)
	c.bits("TrapFL", uint64(m.TrapFL), 20)
	c.bits("TrapQP", uint64(m.TrapQP), 24)
	if c.err != nil {
		return c.err
	}
	b[0], b[1] = m.BaseVersion, m.ClassVersion
	put16(b[2:], m.CapabilityMask)
	put32(b[4:], m.CapabilityMask2<<5|uint32(m.RespTimeValue))
	copy(b[8:24], m.RedirectGID[:])
	put32(b[24:], uint32(m.RedirectTC)<<24|uint32(m.RedirectSL)<<20|m.RedirectFL)
	put16(b[28:], m.RedirectLID)
	put16(b[30:], m.RedirectPKey)
	put32(b[32:], m.RedirectQP)
	put32(b[36:], m.RedirectQKey)
	copy(b[40:56], m.TrapGID[:])
	put32(b[56:], uint32(m.TrapTC)<<24|uint32(m.TrapSL)<<20|m.TrapFL)
	put16(b[60:], m.TrapLID)
	put16(b[62:], m.TrapPKey)
	put32(b[64:], uint32(m.TrapHL)<<24|m.TrapQP)
	put32(b[68:], m.TrapQKey)
	clear(b[ClassPortInfoLen:])
	return nil
}

// Unmarshal implements Message.
func (m *ClassPortInfo) Unmarshal(b []byte) error {
	b, err := data(b, m == nil, "ClassPortInfo")
	if err != nil {
		return err
	}
	m.BaseVersion, m.ClassVersion = b[0], b[1]
	m.CapabilityMask = get16(b[2:])
	w := get32(b[4:])
	m.CapabilityMask2, m.RespTimeValue = w>>5, uint8(w&0x1F)
	m.RedirectGID = [16]byte(b[8:24])
	w = get32(b[24:])
	m.RedirectTC, m.RedirectSL, m.RedirectFL = uint8(w>>24), uint8(w>>20&0xF), w&0xFFFFF
	m.RedirectLID = get16(b[28:])
	m.RedirectPKey = get16(b[30:])
	m.RedirectQP = get24(b[33:])
	m.RedirectQKey = get32(b[36:])
	m.TrapGID = [16]byte(b[40:56])
	w = get32(b[56:])
	m.TrapTC, m.TrapSL, m.TrapFL = uint8(w>>24), uint8(w>>20&0xF), w&0xFFFFF
	m.TrapLID = get16(b[60:])
	m.TrapPKey = get16(b[62:])
	m.TrapHL, m.TrapQP = b[64], get24(b[65:])
	m.TrapQKey = get32(b[68:])
	return nil
}
