package bth

import (
	"encoding/binary"
	"strconv"
)

// Header sizes in bytes (IBTA Vol. 1 §9.2-§9.3).
const (
	BTHLen          = 12
	RDETHLen        = 4
	DETHLen         = 8
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPPadLen       = 16
	ICRCLen         = 4
)

// MaxQPN is the largest 24-bit queue pair number.
const MaxQPN = 1<<24 - 1

// DefaultPKey is the partition key RoCE uses: the full-membership default
// partition.
const DefaultPKey = 0xFFFF

// The General Services Interface: QP 1, where management datagrams (the
// CM's among them) are sent, with its well-known Q_Key (IBTA Vol. 1
// §13.5.1, §10.2.4).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// put24 writes v, which the caller checked fits in 24 bits.
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// check24 reports a field value wider than 24 bits.
func check24(hdr, field string, v uint32) error {
	if v > MaxQPN {
		return rangeError(hdr, field, uint64(v), "0xffffff (24 bits)")
	}
	return nil
}

// rangeError reports a value that does not fit its field.
func rangeError(hdr, field string, v uint64, max string) error {
	return &FieldError{Header: hdr, Field: field, Value: v, Max: max}
}

// shortView reports a view too short for its header.
func shortView(hdr string, have, need int) error {
	return &FieldError{Header: hdr, Value: uint64(have), Max: strconv.Itoa(need) + " bytes", short: true}
}

// FieldError reports a header that cannot be written: a value that does
// not fit its field (it wraps ErrRange) or a view shorter than its header
// (ErrShortBuffer). It is not modified after it is returned.
type FieldError struct {
	Header string // "BTH", "RETH", ...
	Field  string // "PSN", "DestQP", ...; empty for a short view
	Value  uint64 // the value given, or the view's length
	Max    string // what the field or view takes
	short  bool
}

// Error says what does not fit and what would.
func (e *FieldError) Error() string {
	if e == nil {
		return "<nil>"
	}
	if e.short {
		return "bth: " + e.Header + " view of " + strconv.FormatUint(e.Value, 10) + " bytes: a " + e.Header +
			" takes " + e.Max + "; give Encode a slice of at least that"
	}
	return "bth: " + e.Header + "." + e.Field + " 0x" + strconv.FormatUint(e.Value, 16) +
		" does not fit: the field takes at most " + e.Max
}

// Unwrap returns ErrShortBuffer or ErrRange.
func (e *FieldError) Unwrap() error {
	switch {
	case e == nil:
		return nil
	case e.short:
		return ErrShortBuffer
	}
	return ErrRange
}

// The header views below are byte slices. Their accessors read a view of
// at least the header's size (as Packet.Parse makes them); a shorter one,
// such as the nil view of a header a packet does not have, reads as
// zeros. Their setters and Encode methods write nothing and return an
// error (a *FieldError) when the view is too short or a value does not
// fit its field.

// BTH is the 12-byte Base Transport Header (IBTA Vol. 1 §9.2):
//
//	 0       1                   2   3   4       5   6   7   8       9  10  11
//	+-------+-------------------+-------+-------+-----------+-------+-----------+
//	|opcode |SE|M|Pad|TVer      | P_Key |F|B|rsv| DestQP    |A|rsv  | PSN       |
//	+-------+-------------------+-------+-------+-----------+-------+-----------+
type BTH []byte

// BTHFields holds the fields of a BTH, for Encode.
type BTHFields struct {
	Opcode   Opcode
	SE       bool // solicited event
	MigReq   bool
	PadCount uint8 // 0-3 bytes of pad after the payload
	TVer     uint8 // transport header version, 0
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQP   uint32 // 24 bits
	AckReq   bool
	PSN      PSN
}

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode {
	if len(b) < BTHLen {
		return 0
	}
	return Opcode(b[0])
}

// SE reports the solicited event bit.
func (b BTH) SE() bool { return len(b) >= BTHLen && b[1]&0x80 != 0 }

// MigReq reports the migration request bit.
func (b BTH) MigReq() bool { return len(b) >= BTHLen && b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes (0-3) before the ICRC.
func (b BTH) PadCount() int {
	if len(b) < BTHLen {
		return 0
	}
	return int(b[1]>>4) & 3
}

// TVer returns the transport header version.
func (b BTH) TVer() uint8 {
	if len(b) < BTHLen {
		return 0
	}
	return b[1] & 0x0F
}

// PKey returns the partition key.
func (b BTH) PKey() uint16 {
	if len(b) < BTHLen {
		return 0
	}
	return binary.BigEndian.Uint16(b[2:])
}

// FECN reports the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return len(b) >= BTHLen && b[4]&0x80 != 0 }

// BECN reports the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return len(b) >= BTHLen && b[4]&0x40 != 0 }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 {
	if len(b) < BTHLen {
		return 0
	}
	return get24(b[5:8])
}

// AckReq reports whether the requester asks for an acknowledgement.
func (b BTH) AckReq() bool { return len(b) >= BTHLen && b[8]&0x80 != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN {
	if len(b) < BTHLen {
		return 0
	}
	return PSN(get24(b[9:12]))
}

// SetPSN sets the packet sequence number. It fails, writing nothing, if
// psn does not fit in 24 bits or b is shorter than a BTH.
func (b BTH) SetPSN(psn PSN) error {
	if len(b) < BTHLen {
		return shortView("BTH", len(b), BTHLen)
	}
	if err := check24("BTH", "PSN", uint32(psn)); err != nil {
		return err
	}
	put24(b[9:12], uint32(psn))
	return nil
}

// SetAckReq sets or clears the AckReq bit (and clears the reserved bits
// of byte 8). It fails if b is shorter than a BTH.
func (b BTH) SetAckReq(v bool) error {
	if len(b) < BTHLen {
		return shortView("BTH", len(b), BTHLen)
	}
	b[8] = boolBit(v, 0x80)
	return nil
}

// SetDestQP sets the destination QP. It fails, writing nothing, if qpn
// does not fit in 24 bits or b is shorter than a BTH.
func (b BTH) SetDestQP(qpn uint32) error {
	if len(b) < BTHLen {
		return shortView("BTH", len(b), BTHLen)
	}
	if err := check24("BTH", "DestQP", qpn); err != nil {
		return err
	}
	put24(b[5:8], qpn)
	return nil
}

// SetECN sets the FECN and BECN bits and clears the reserved bits of byte
// 4. It fails if b is shorter than a BTH.
func (b BTH) SetECN(fecn, becn bool) error {
	if len(b) < BTHLen {
		return shortView("BTH", len(b), BTHLen)
	}
	b[4] = boolBit(fecn, 0x80) | boolBit(becn, 0x40)
	return nil
}

func boolBit(v bool, bit byte) byte {
	if v {
		return bit
	}
	return 0
}

// Fields returns every field of the header.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCount: uint8(b.PadCount()),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(),
		AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// Encode writes f into b. It fails, writing nothing, if b is shorter than
// a BTH, DestQP or PSN do not fit in 24 bits, PadCount exceeds 3 or TVer
// exceeds 15.
func (b BTH) Encode(f *BTHFields) error {
	if err := f.check(len(b)); err != nil {
		return err
	}
	b.encode(f)
	return nil
}

// encode writes f, which the caller checked, into b.
func (b BTH) encode(f *BTHFields) {
	b = b[:BTHLen]
	b[0] = byte(f.Opcode)
	b[1] = boolBit(f.SE, 0x80) | boolBit(f.MigReq, 0x40) | f.PadCount<<4 | f.TVer
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = boolBit(f.FECN, 0x80) | boolBit(f.BECN, 0x40)
	put24(b[5:], f.DestQP)
	b[8] = boolBit(f.AckReq, 0x80)
	put24(b[9:], uint32(f.PSN))
}

// check reports why f cannot be written into a view of n bytes.
func (f *BTHFields) check(n int) error {
	switch {
	case f == nil:
		return errNilFields("BTHFields")
	case n < BTHLen:
		return shortView("BTH", n, BTHLen)
	case f.PadCount > 3:
		return rangeError("BTH", "PadCount", uint64(f.PadCount), "3")
	case f.TVer > 15:
		return rangeError("BTH", "TVer", uint64(f.TVer), "15")
	}
	if err := check24("BTH", "DestQP", f.DestQP); err != nil {
		return err
	}
	return check24("BTH", "PSN", uint32(f.PSN))
}

// errNilFields reports a nil *Fields given to an Encode.
func errNilFields(typ string) error {
	return nilError("Encode needs a *" + typ)
}

// RETH is the 16-byte RDMA Extended Transport Header (IBTA Vol. 1 §9.3.3.3):
// virtual address (8), R_Key (4), DMA length (4).
type RETH []byte

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// VA returns the remote virtual address.
func (b RETH) VA() uint64 {
	if len(b) < RETHLen {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// RKey returns the remote key.
func (b RETH) RKey() uint32 {
	if len(b) < RETHLen {
		return 0
	}
	return binary.BigEndian.Uint32(b[8:])
}

// DMALen returns the length of the whole RDMA operation.
func (b RETH) DMALen() uint32 {
	if len(b) < RETHLen {
		return 0
	}
	return binary.BigEndian.Uint32(b[12:])
}

// Fields returns every field of the header.
func (b RETH) Fields() RETHFields { return RETHFields{b.VA(), b.RKey(), b.DMALen()} }

// Encode writes f into b. It fails if b is shorter than a RETH.
func (b RETH) Encode(f *RETHFields) error {
	if err := checkView(f == nil, "RETH", len(b), RETHLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(b, f.VA)
	binary.BigEndian.PutUint32(b[8:], f.RKey)
	binary.BigEndian.PutUint32(b[12:], f.DMALen)
	return nil
}

// checkView reports a nil *Fields or a view of n bytes too short for hdr.
func checkView(nilFields bool, hdr string, n, need int) error {
	if nilFields {
		return errNilFields(hdr + "Fields")
	}
	if n < need {
		return shortView(hdr, n, need)
	}
	return nil
}

// AtomicETH is the 28-byte Atomic Extended Transport Header (IBTA Vol. 1
// §9.3.3.4): virtual address (8), R_Key (4), swap or add data (8), compare
// data (8).
type AtomicETH []byte

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// VA returns the remote virtual address (8-byte aligned for a valid request).
func (b AtomicETH) VA() uint64 {
	if len(b) < AtomicETHLen {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 {
	if len(b) < AtomicETHLen {
		return 0
	}
	return binary.BigEndian.Uint32(b[8:])
}

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (b AtomicETH) SwapAdd() uint64 {
	if len(b) < AtomicETHLen {
		return 0
	}
	return binary.BigEndian.Uint64(b[12:])
}

// Compare returns the compare value (COMPARE_SWAP).
func (b AtomicETH) Compare() uint64 {
	if len(b) < AtomicETHLen {
		return 0
	}
	return binary.BigEndian.Uint64(b[20:])
}

// Fields returns every field of the header.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{b.VA(), b.RKey(), b.SwapAdd(), b.Compare()}
}

// Encode writes f into b. It fails if b is shorter than an AtomicETH.
func (b AtomicETH) Encode(f *AtomicETHFields) error {
	if err := checkView(f == nil, "AtomicETH", len(b), AtomicETHLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(b, f.VA)
	binary.BigEndian.PutUint32(b[8:], f.RKey)
	binary.BigEndian.PutUint64(b[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(b[20:], f.Compare)
	return nil
}

// AETH is the 4-byte ACK Extended Transport Header (IBTA Vol. 1 §9.3.5):
// syndrome (1) and message sequence number (3).
type AETH []byte

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// Syndrome returns the syndrome: ACK, RNR NAK or NAK and its value.
func (b AETH) Syndrome() Syndrome {
	if len(b) < AETHLen {
		return 0
	}
	return Syndrome(b[0])
}

// MSN returns the message sequence number.
func (b AETH) MSN() uint32 {
	if len(b) < AETHLen {
		return 0
	}
	return get24(b[1:4])
}

// Fields returns every field of the header.
func (b AETH) Fields() AETHFields { return AETHFields{b.Syndrome(), b.MSN()} }

// Encode writes f into b. It fails, writing nothing, if b is shorter than
// an AETH or MSN does not fit in 24 bits.
func (b AETH) Encode(f *AETHFields) error {
	if err := checkView(f == nil, "AETH", len(b), AETHLen); err != nil {
		return err
	}
	if err := check24("AETH", "MSN", f.MSN); err != nil {
		return err
	}
	b[0] = byte(f.Syndrome)
	put24(b[1:4], f.MSN)
	return nil
}

// AtomicAckETH is the 8-byte Atomic Acknowledge Extended Transport Header
// (IBTA Vol. 1 §9.3.6): the remote data before the atomic operation.
type AtomicAckETH []byte

// AtomicAckETHFields holds the fields of an AtomicAckETH.
type AtomicAckETHFields struct {
	Orig uint64
}

// Orig returns the original remote data.
func (b AtomicAckETH) Orig() uint64 {
	if len(b) < AtomicAckETHLen {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// Fields returns every field of the header.
func (b AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{b.Orig()} }

// Encode writes f into b. It fails if b is shorter than an AtomicAckETH.
func (b AtomicAckETH) Encode(f *AtomicAckETHFields) error {
	if err := checkView(f == nil, "AtomicAckETH", len(b), AtomicAckETHLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint64(b, f.Orig)
	return nil
}

// ImmDt is the 4-byte Immediate Data header (IBTA Vol. 1 §9.3.7).
type ImmDt []byte

// ImmDtFields holds the fields of an ImmDt.
type ImmDtFields struct {
	Imm uint32
}

// Imm returns the immediate value as the 32-bit big-endian number on the wire.
func (b ImmDt) Imm() uint32 {
	if len(b) < ImmDtLen {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Fields returns every field of the header.
func (b ImmDt) Fields() ImmDtFields { return ImmDtFields{b.Imm()} }

// Encode writes f into b. It fails if b is shorter than an ImmDt.
func (b ImmDt) Encode(f *ImmDtFields) error {
	if err := checkView(f == nil, "ImmDt", len(b), ImmDtLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, f.Imm)
	return nil
}

// IETH is the 4-byte Invalidate Extended Transport Header (IBTA Vol. 1
// §9.3.8): the R_Key the responder invalidates.
type IETH []byte

// IETHFields holds the fields of an IETH.
type IETHFields struct {
	RKey uint32
}

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 {
	if len(b) < IETHLen {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Fields returns every field of the header.
func (b IETH) Fields() IETHFields { return IETHFields{b.RKey()} }

// Encode writes f into b. It fails if b is shorter than an IETH.
func (b IETH) Encode(f *IETHFields) error {
	if err := checkView(f == nil, "IETH", len(b), IETHLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, f.RKey)
	return nil
}

// DETH is the 8-byte Datagram Extended Transport Header (IBTA Vol. 1
// §9.3.2): Q_Key (4), reserved (1), source QP (3).
type DETH []byte

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// QKey returns the queue key.
func (b DETH) QKey() uint32 {
	if len(b) < DETHLen {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// SrcQP returns the sender's queue pair number.
func (b DETH) SrcQP() uint32 {
	if len(b) < DETHLen {
		return 0
	}
	return get24(b[5:8])
}

// Fields returns every field of the header.
func (b DETH) Fields() DETHFields { return DETHFields{b.QKey(), b.SrcQP()} }

// Encode writes f into b. It fails, writing nothing, if b is shorter than
// a DETH or SrcQP does not fit in 24 bits.
func (b DETH) Encode(f *DETHFields) error {
	if err := checkView(f == nil, "DETH", len(b), DETHLen); err != nil {
		return err
	}
	if err := check24("DETH", "SrcQP", f.SrcQP); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, f.QKey)
	b[4] = 0
	put24(b[5:8], f.SrcQP)
	return nil
}

// RDETH is the 4-byte Reliable Datagram Extended Transport Header (IBTA
// Vol. 1 §9.3.1): reserved (1), EE context (3). goroce decodes RD but does
// not implement it.
type RDETH []byte

// RDETHFields holds the fields of an RDETH.
type RDETHFields struct {
	EECnxt uint32 // 24 bits
}

// EECnxt returns the end-to-end context.
func (b RDETH) EECnxt() uint32 {
	if len(b) < RDETHLen {
		return 0
	}
	return get24(b[1:4])
}

// Fields returns every field of the header.
func (b RDETH) Fields() RDETHFields { return RDETHFields{b.EECnxt()} }

// Encode writes f into b. It fails, writing nothing, if b is shorter than
// an RDETH or EECnxt does not fit in 24 bits.
func (b RDETH) Encode(f *RDETHFields) error {
	if err := checkView(f == nil, "RDETH", len(b), RDETHLen); err != nil {
		return err
	}
	if err := check24("RDETH", "EECnxt", f.EECnxt); err != nil {
		return err
	}
	b[0] = 0
	put24(b[1:4], f.EECnxt)
	return nil
}

// FETH is the 4-byte Flush Extended Transport Header (IBTA Vol. 1 §9.3.10,
// added with FLUSH in release 1.5): reserved (26 bits), selectivity level (2),
// placement type (4).
type FETH []byte

// FETHFields holds the fields of a FETH.
type FETHFields struct {
	Selectivity uint8 // 2 bits
	Placement   uint8 // 4 bits
}

// Selectivity returns the selectivity level.
func (b FETH) Selectivity() uint8 {
	if len(b) < FETHLen {
		return 0
	}
	return b[3] >> 4 & 3
}

// Placement returns the placement type bits.
func (b FETH) Placement() uint8 {
	if len(b) < FETHLen {
		return 0
	}
	return b[3] & 0x0F
}

// Fields returns every field of the header.
func (b FETH) Fields() FETHFields { return FETHFields{b.Selectivity(), b.Placement()} }

// Encode writes f into b. It fails, writing nothing, if b is shorter than
// a FETH or a field is too wide.
func (b FETH) Encode(f *FETHFields) error {
	if err := checkView(f == nil, "FETH", len(b), FETHLen); err != nil {
		return err
	}
	switch {
	case f.Selectivity > 3:
		return rangeError("FETH", "Selectivity", uint64(f.Selectivity), "3")
	case f.Placement > 15:
		return rangeError("FETH", "Placement", uint64(f.Placement), "15")
	}
	b[0], b[1], b[2] = 0, 0, 0
	b[3] = f.Selectivity<<4 | f.Placement
	return nil
}
