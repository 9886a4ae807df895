package bth

import "encoding/binary"

// The ICRC Linux's rxe gives FLUSH. rxe (kernel 6.2 and later) lists no
// payload offset for RC_FLUSH in its opcode table, so the payload its ICRC
// code finds starts at the BTH: its ICRC of a FLUSH covers the packet as
// the IBTA says (the masked headers, FETH, RETH) and then the 32 bytes of
// BTH, FETH and RETH a second time, unmasked. rxe sends FLUSH so and drops
// one that carries the IBTA's ICRC; its other opcodes, ATOMIC_WRITE among
// them, carry the IBTA's. FlushICRCRXE and UnfoldFlushICRC convert between
// the two, so that a receiver can take either and a sender can speak the
// peer's (qp/flush.go chooses).

// flushLen is the length of a FLUSH packet before its ICRC: BTH, FETH, RETH.
const flushLen = BTHLen + FETHLen + RETHLen

// IsFlush reports whether pkt (BTH onwards) is an RC FLUSH of the length
// one has: the packets whose ICRC rxe computes its own way.
func IsFlush(pkt []byte) bool {
	return len(pkt) == flushLen+ICRCLen && Opcode(pkt[0]) == RCFlush
}

// FlushICRCRXE returns the ICRC rxe gives the FLUSH pkt (BTH through
// ICRC) whose IBTA ICRC is icrc; icrc itself for a packet that is not a
// FLUSH (IsFlush).
func FlushICRCRXE(icrc uint32, pkt []byte) uint32 {
	if !IsFlush(pkt) {
		return icrc
	}
	return crcShort(icrc, pkt[:flushLen])
}

// UnfoldFlushICRC rewrites the ICRC of pkt, a FLUSH (IsFlush) that carries
// rxe's, as the IBTA's ICRC it was computed from; it does nothing to a
// packet that is not a FLUSH. A check of the IBTA's ICRC after it tells
// whether the packet came with rxe's.
func UnfoldFlushICRC(pkt []byte) {
	if !IsFlush(pkt) {
		return
	}
	// Undo the CRC's steps over the 32 header bytes, last first: a step
	// takes s to t[k] ^ s>>8 with k = (s ^ b) & 0xFF, and the top byte of
	// t[k] names k.
	t := &crcTables[0]
	s := ^binary.LittleEndian.Uint32(pkt[flushLen:])
	for i := flushLen - 1; i >= 0; i-- {
		k := crcTop[s>>24]
		s = (s^t[k])<<8 | uint32(k^pkt[i])
	}
	binary.LittleEndian.PutUint32(pkt[flushLen:], ^s)
}

// crcTop maps the top byte of crcTables[0][k] back to k (the 256 top
// bytes of the CRC-32 table are distinct).
var crcTop = func() (m [256]byte) {
	for k := range 256 {
		m[crcTables[0][k]>>24] = byte(k)
	}
	return m
}()
