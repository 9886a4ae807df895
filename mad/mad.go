package mad

import (
	"errors"
	"fmt"
	"strconv"
)

// Sizes and fixed values of a MAD (IBTA Vol. 1 §13.4 and §13.5).
const (
	// Len is the length of every MAD sent to QP 1.
	Len = 256
	// HeaderLen is the length of the common MAD header.
	HeaderLen = 24
	// DataLen is the length of the class data that follows the header.
	DataLen = Len - HeaderLen
	// BaseVersion is the only MAD base version InfiniBand defines.
	BaseVersion = 1
	// CMClassVersion is the CM class version rdma_cm uses.
	CMClassVersion = 2
)

// Management classes (IBTA Vol. 1 §13.4).
const (
	ClassSubnLID      uint8 = 0x01 // subnet management, LID routed
	ClassSubnAdm      uint8 = 0x03 // subnet administration
	ClassPerf         uint8 = 0x04 // performance management
	ClassBM           uint8 = 0x05 // baseboard management
	ClassDevMgt       uint8 = 0x06 // device management
	ClassCM           uint8 = 0x07 // communication management
	ClassSNMP         uint8 = 0x08 // SNMP tunneling
	ClassSubnDirected uint8 = 0x81 // subnet management, directed route
)

// Method is the method byte of a MAD header: the response bit (0x80) and
// a 7-bit method (IBTA Vol. 1 §13.4).
type Method uint8

// Methods common to the management classes.
const (
	MethodGet         Method = 0x01
	MethodSet         Method = 0x02
	MethodSend        Method = 0x03
	MethodTrap        Method = 0x05
	MethodReport      Method = 0x06
	MethodTrapRepress Method = 0x07
	MethodGetResp     Method = 0x81
	MethodReportResp  Method = 0x86
	// MethodResp is the response bit of the method byte.
	MethodResp Method = 0x80
)

// String returns the IBTA name of the method, or its value in hex.
func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodTrap:
		return "Trap"
	case MethodReport:
		return "Report"
	case MethodTrapRepress:
		return "TrapRepress"
	case MethodGetResp:
		return "GetResp"
	case MethodReportResp:
		return "ReportResp"
	}
	return "Method(0x" + strconv.FormatUint(uint64(m), 16) + ")"
}

// CM attribute IDs (IBTA Vol. 1 chapter 12; the kernel's include/rdma/ib_cm.h)
// and the ClassPortInfo attribute every class has.
const (
	AttrClassPortInfo uint16 = 0x0001
	AttrREQ           uint16 = 0x0010
	AttrMRA           uint16 = 0x0011
	AttrREJ           uint16 = 0x0012
	AttrREP           uint16 = 0x0013
	AttrRTU           uint16 = 0x0014
	AttrDREQ          uint16 = 0x0015
	AttrDREP          uint16 = 0x0016
	AttrSIDRREQ       uint16 = 0x0017
	AttrSIDRREP       uint16 = 0x0018
	AttrLAP           uint16 = 0x0019
	AttrAPR           uint16 = 0x001A
)

// AttrName returns the short IBTA name of a CM attribute ID ("REQ",
// "SIDR_REP", "ClassPortInfo", ...), or "Attr(0x....)" for others.
func AttrName(id uint16) string {
	switch id {
	case AttrClassPortInfo:
		return "ClassPortInfo"
	case AttrREQ:
		return "REQ"
	case AttrMRA:
		return "MRA"
	case AttrREJ:
		return "REJ"
	case AttrREP:
		return "REP"
	case AttrRTU:
		return "RTU"
	case AttrDREQ:
		return "DREQ"
	case AttrDREP:
		return "DREP"
	case AttrSIDRREQ:
		return "SIDR_REQ"
	case AttrSIDRREP:
		return "SIDR_REP"
	case AttrLAP:
		return "LAP"
	case AttrAPR:
		return "APR"
	}
	return "Attr(" + hex4(id) + ")"
}

// Errors from the decoders and encoders.
var (
	// ErrShort means a buffer is smaller than what it must hold.
	ErrShort = errors.New("mad: buffer too short")
	// ErrLength means a MAD given to Decode is not exactly Len bytes.
	ErrLength = errors.New("mad: MAD is not 256 bytes")
	// ErrBaseVersion means a header's base version is not 1.
	ErrBaseVersion = errors.New("mad: unsupported base version")
	// ErrClass means Decode got a MAD of another management class than CM.
	ErrClass = errors.New("mad: not a CM MAD")
	// ErrClassVersion means Decode got a CM MAD of another class version
	// than 2.
	ErrClassVersion = errors.New("mad: unsupported CM class version")
	// ErrUnknownAttr means Decode got a CM attribute ID it does not know.
	ErrUnknownAttr = errors.New("mad: unknown CM attribute")
	// ErrRange means a value does not fit its field; the error is a
	// *FieldError.
	ErrRange = errors.New("mad: value out of range")
	// ErrCMAVersion means an rdma_cm private-data header has a version
	// other than 0.
	ErrCMAVersion = errors.New("mad: unsupported rdma_cm header version")
	// ErrIPVersion means an rdma_cm private-data header has an IP version
	// other than 4 or 6.
	ErrIPVersion = errors.New("mad: rdma_cm header IP version is not 4 or 6")
	// ErrAddr means a CMAHeader to marshal has an invalid address, or a
	// source and destination of different families.
	ErrAddr = errors.New("mad: rdma_cm header addresses invalid or of mixed families")
	// ErrNil means a required argument, or the message or header a method
	// was called on, is nil.
	ErrNil = errors.New("mad: nil argument")
)

// Header is the common MAD header (IBTA Vol. 1 §13.4). The 16 reserved
// bits at offset 18 are not kept.
//
// It is plain data: safe to read from several goroutines, not to modify
// concurrently.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        uint16
	AttrMod       uint32 // attribute modifier
}

// CMHeader returns the header of a CM MAD with the given method and
// transaction ID; Encode fills in the attribute ID.
func CMHeader(m Method, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion, Method: m, TID: tid}
}

// Marshal writes the header to b[:HeaderLen], reserved bits as zero. The
// base version must be BaseVersion.
func (h *Header) Marshal(b []byte) error {
	switch {
	case h == nil:
		return nilError("Marshal of a nil *Header")
	case len(b) < HeaderLen:
		return shortError("MAD header", len(b), HeaderLen)
	case h.BaseVersion != BaseVersion:
		return fmt.Errorf("%w: %d: set it to BaseVersion (1), as CMHeader does", ErrBaseVersion, h.BaseVersion)
	}
	b = b[:HeaderLen:HeaderLen]
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, byte(h.Method)
	put16(b[4:], h.Status)
	put16(b[6:], h.ClassSpecific)
	put64(b[8:], h.TID)
	put16(b[16:], h.AttrID)
	b[18], b[19] = 0, 0
	put32(b[20:], h.AttrMod)
	return nil
}

// Unmarshal reads the header from b[:HeaderLen]. It checks the length and
// the base version, and nothing about the class.
func (h *Header) Unmarshal(b []byte) error {
	switch {
	case h == nil:
		return nilError("Unmarshal into a nil *Header")
	case len(b) < HeaderLen:
		return shortError("MAD header", len(b), HeaderLen)
	case b[0] != BaseVersion:
		return fmt.Errorf("%w: %d, where InfiniBand defines only 1", ErrBaseVersion, b[0])
	}
	*h = Header{
		BaseVersion:   b[0],
		MgmtClass:     b[1],
		ClassVersion:  b[2],
		Method:        Method(b[3]),
		Status:        get16(b[4:]),
		ClassSpecific: get16(b[6:]),
		TID:           get64(b[8:]),
		AttrID:        get16(b[16:]),
		AttrMod:       get32(b[20:]),
	}
	return nil
}

// Message is a CM message or attribute carried in a MAD's class data. Each
// is implemented by a pointer to one of this package's structs, which are
// plain data: not safe for concurrent modification.
type Message interface {
	// AttrID returns the attribute ID that carries the message.
	AttrID() uint16
	// Marshal writes the message to b[:DataLen], the class data after the
	// MAD header: every byte, reserved bits and unused bytes as zero. It
	// fails with a *FieldError if a value does not fit its field, and then
	// leaves b untouched.
	Marshal(b []byte) error
	// Unmarshal reads the message from b[:DataLen], ignoring reserved bits.
	Unmarshal(b []byte) error
}

// Compile-time checks that every message type is a Message.
var (
	_ Message = (*ClassPortInfo)(nil)
	_ Message = (*REQ)(nil)
	_ Message = (*MRA)(nil)
	_ Message = (*REJ)(nil)
	_ Message = (*REP)(nil)
	_ Message = (*RTU)(nil)
	_ Message = (*DREQ)(nil)
	_ Message = (*DREP)(nil)
	_ Message = (*SIDRREQ)(nil)
	_ Message = (*SIDRREP)(nil)
	_ Message = (*LAP)(nil)
	_ Message = (*APR)(nil)
)

// NewMessage returns a new zero message for a CM attribute ID, or nil if
// the ID is not one.
func NewMessage(attr uint16) Message {
	switch attr {
	case AttrClassPortInfo:
		return new(ClassPortInfo)
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	case AttrLAP:
		return new(LAP)
	case AttrAPR:
		return new(APR)
	}
	return nil
}

// Decode decodes a CM MAD: exactly Len bytes, base version 1, class CM,
// class version 2, and a known attribute ID. The message is a pointer to
// the struct of that attribute (*REQ for AttrREQ, ...); it does not refer
// to mad.
func Decode(mad []byte) (Header, Message, error) {
	var h Header
	if len(mad) != Len {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrLength, len(mad))
	}
	if err := h.Unmarshal(mad); err != nil {
		return h, nil, err
	}
	if h.MgmtClass != ClassCM {
		return h, nil, fmt.Errorf("%w: management class %#02x", ErrClass, h.MgmtClass)
	}
	if h.ClassVersion != CMClassVersion {
		return h, nil, fmt.Errorf("%w: %d", ErrClassVersion, h.ClassVersion)
	}
	m := NewMessage(h.AttrID)
	if m == nil {
		return h, nil, fmt.Errorf("%w: %s", ErrUnknownAttr, AttrName(h.AttrID))
	}
	if err := m.Unmarshal(mad[HeaderLen:]); err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// Encode writes the MAD of header h and message m to b[:Len]. The
// attribute ID written is m.AttrID(), whatever h.AttrID says. On error b is
// left untouched.
func Encode(h Header, m Message, b []byte) error {
	switch {
	case m == nil:
		return nilError("Encode needs a Message (a *REQ, *REP, ...)")
	case len(b) < Len:
		return shortError("MAD", len(b), Len)
	case h.BaseVersion != BaseVersion:
		return fmt.Errorf("%w: %d: set it to BaseVersion (1), as CMHeader does", ErrBaseVersion, h.BaseVersion)
	}
	if err := m.Marshal(b[HeaderLen:Len]); err != nil {
		return err
	}
	h.AttrID = m.AttrID()
	return h.Marshal(b)
}
