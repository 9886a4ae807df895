package bth

import "encoding/binary"

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

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	if v > MaxQPN {
		panic("bth: value does not fit in 24 bits")
	}
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

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
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE reports the solicited event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq reports the migration request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes (0-3) before the ICRC.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN reports the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN reports the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return get24(b[5:]) }

// AckReq reports whether the requester asks for an acknowledgement.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[9:])) }

// SetPSN sets the packet sequence number; it panics if psn is not a valid
// 24-bit PSN.
func (b BTH) SetPSN(psn PSN) { put24(b[9:], uint32(psn)) }

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) { b[8] = boolBit(v, 0x80) }

// SetDestQP sets the destination QP; it panics if qpn does not fit in 24 bits.
func (b BTH) SetDestQP(qpn uint32) { put24(b[5:], qpn) }

// SetECN sets the FECN and BECN bits and clears the reserved bits of byte 4.
func (b BTH) SetECN(fecn, becn bool) { b[4] = boolBit(fecn, 0x80) | boolBit(becn, 0x40) }

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

// Encode writes f into b. It panics if DestQP or PSN do not fit in 24 bits,
// PadCount exceeds 3 or TVer exceeds 15.
func (b BTH) Encode(f *BTHFields) {
	if f.PadCount > 3 || f.TVer > 15 {
		panic("bth: BTH PadCount or TVer out of range")
	}
	b[0] = byte(f.Opcode)
	b[1] = boolBit(f.SE, 0x80) | boolBit(f.MigReq, 0x40) | f.PadCount<<4 | f.TVer
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = boolBit(f.FECN, 0x80) | boolBit(f.BECN, 0x40)
	put24(b[5:], f.DestQP)
	b[8] = boolBit(f.AckReq, 0x80)
	put24(b[9:], uint32(f.PSN))
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
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// DMALen returns the length of the whole RDMA operation.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:]) }

// Fields returns every field of the header.
func (b RETH) Fields() RETHFields { return RETHFields{b.VA(), b.RKey(), b.DMALen()} }

// Encode writes f into b.
func (b RETH) Encode(f *RETHFields) {
	binary.BigEndian.PutUint64(b, f.VA)
	binary.BigEndian.PutUint32(b[8:], f.RKey)
	binary.BigEndian.PutUint32(b[12:], f.DMALen)
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
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[12:]) }

// Compare returns the compare value (COMPARE_SWAP).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[20:]) }

// Fields returns every field of the header.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{b.VA(), b.RKey(), b.SwapAdd(), b.Compare()}
}

// Encode writes f into b.
func (b AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(b, f.VA)
	binary.BigEndian.PutUint32(b[8:], f.RKey)
	binary.BigEndian.PutUint64(b[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(b[20:], f.Compare)
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
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// MSN returns the message sequence number.
func (b AETH) MSN() uint32 { return get24(b[1:]) }

// Fields returns every field of the header.
func (b AETH) Fields() AETHFields { return AETHFields{b.Syndrome(), b.MSN()} }

// Encode writes f into b. It panics if MSN does not fit in 24 bits.
func (b AETH) Encode(f *AETHFields) {
	b[0] = byte(f.Syndrome)
	put24(b[1:], f.MSN)
}

// AtomicAckETH is the 8-byte Atomic Acknowledge Extended Transport Header
// (IBTA Vol. 1 §9.3.6): the remote data before the atomic operation.
type AtomicAckETH []byte

// AtomicAckETHFields holds the fields of an AtomicAckETH.
type AtomicAckETHFields struct {
	Orig uint64
}

// Orig returns the original remote data.
func (b AtomicAckETH) Orig() uint64 { return binary.BigEndian.Uint64(b) }

// Fields returns every field of the header.
func (b AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{b.Orig()} }

// Encode writes f into b.
func (b AtomicAckETH) Encode(f *AtomicAckETHFields) { binary.BigEndian.PutUint64(b, f.Orig) }

// ImmDt is the 4-byte Immediate Data header (IBTA Vol. 1 §9.3.7).
type ImmDt []byte

// ImmDtFields holds the fields of an ImmDt.
type ImmDtFields struct {
	Imm uint32
}

// Imm returns the immediate value as the 32-bit big-endian number on the wire.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b) }

// Fields returns every field of the header.
func (b ImmDt) Fields() ImmDtFields { return ImmDtFields{b.Imm()} }

// Encode writes f into b.
func (b ImmDt) Encode(f *ImmDtFields) { binary.BigEndian.PutUint32(b, f.Imm) }

// IETH is the 4-byte Invalidate Extended Transport Header (IBTA Vol. 1
// §9.3.8): the R_Key the responder invalidates.
type IETH []byte

// IETHFields holds the fields of an IETH.
type IETHFields struct {
	RKey uint32
}

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// Fields returns every field of the header.
func (b IETH) Fields() IETHFields { return IETHFields{b.RKey()} }

// Encode writes f into b.
func (b IETH) Encode(f *IETHFields) { binary.BigEndian.PutUint32(b, f.RKey) }

// DETH is the 8-byte Datagram Extended Transport Header (IBTA Vol. 1
// §9.3.2): Q_Key (4), reserved (1), source QP (3).
type DETH []byte

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b) }

// SrcQP returns the sender's queue pair number.
func (b DETH) SrcQP() uint32 { return get24(b[5:]) }

// Fields returns every field of the header.
func (b DETH) Fields() DETHFields { return DETHFields{b.QKey(), b.SrcQP()} }

// Encode writes f into b. It panics if SrcQP does not fit in 24 bits.
func (b DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(b, f.QKey)
	b[4] = 0
	put24(b[5:], f.SrcQP)
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
func (b RDETH) EECnxt() uint32 { return get24(b[1:]) }

// Fields returns every field of the header.
func (b RDETH) Fields() RDETHFields { return RDETHFields{b.EECnxt()} }

// Encode writes f into b. It panics if EECnxt does not fit in 24 bits.
func (b RDETH) Encode(f *RDETHFields) {
	b[0] = 0
	put24(b[1:], f.EECnxt)
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
func (b FETH) Selectivity() uint8 { return b[3] >> 4 & 3 }

// Placement returns the placement type bits.
func (b FETH) Placement() uint8 { return b[3] & 0x0F }

// Fields returns every field of the header.
func (b FETH) Fields() FETHFields { return FETHFields{b.Selectivity(), b.Placement()} }

// Encode writes f into b. It panics if a field is too wide.
func (b FETH) Encode(f *FETHFields) {
	if f.Selectivity > 3 || f.Placement > 15 {
		panic("bth: FETH field out of range")
	}
	b[0], b[1], b[2] = 0, 0, 0
	b[3] = f.Selectivity<<4 | f.Placement
}
