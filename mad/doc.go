// Package mad encodes and decodes InfiniBand management datagrams (MADs)
// and the Communication Management (CM) messages that rdma_cm exchanges to
// connect RoCE queue pairs.
//
// A MAD is 256 bytes: a 24-byte common header (IBTA Vol. 1 §13.4) and
// 232 bytes of class data. rdma_cm sends them as UD SEND Only packets to
// QP 1 (the General Services Interface) with Q_Key 0x80010000, using the CM
// class (0x07, class version 2) and method Send:
//
//	offset  0  BaseVersion | MgmtClass | ClassVersion | R+Method
//	offset  4  Status (16)             | ClassSpecific (16)
//	offset  8  TransactionID (64)
//	offset 16  AttributeID (16)        | Reserved (16)
//	offset 20  AttributeModifier (32)
//	offset 24  class data: one CM message (232 bytes)
//
// Each CM message of IBTA Vol. 1 chapter 12 (REQ, MRA, REJ, REP, RTU, DREQ,
// DREP, LAP, APR, SIDR_REQ, SIDR_REP) and the ClassPortInfo attribute
// (§13.4) is a plain struct with every field of its table, sub-byte
// fields included, and private data as a fixed-size array, because CM
// messages always carry their whole private data area on the wire. The
// layouts follow the kernel's include/rdma/ibta_vol1_c12.h and were checked
// against captures of the kernel's soft-RoCE driver and Wireshark's
// dissector.
//
// Marshal writes every byte of a message's area, reserved bits as zero, and
// fails with a *FieldError (matching ErrRange) when a value does not fit its
// field. Unmarshal ignores reserved bits, as IBTA asks receivers to, so
// Decode(Encode(m)) == m for every m that Decode returns. Decode allocates
// only the returned message; Header.Unmarshal followed by a concrete type's
// Unmarshal allocates nothing.
//
// CMAHeader is the 36-byte header rdma_cm puts at the start of a REQ's
// private data (IBTA Vol. 1 Annex A11, "IP addressing CM REQ message
// private data format"), and ServiceID builds the service ID rdma_cm derives from a port
// space and port.
//
// Starting PSNs: each side puts in its REQ or REP the PSN its own receive
// queue expects first, so the active side sends from the REP's Starting
// PSN and the passive side from the REQ's (the kernel's cm.c; checked
// against the captures).
//
// Values of the types in this package are plain data: safe to read from
// several goroutines, not to modify concurrently. The package has no
// mutable state.
package mad
