package bth

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestFlushICRCRXE checks rxe's FLUSH ICRC against a FLUSH rxe sent (a
// Debian 13 guest's rxe0, kernel 6.12, captured on the lab's tap): the
// IBTA's ICRC of its bytes does not match what it carries, rxe's does,
// and unfolding it gives the IBTA's back.
func TestFlushICRCRXE(t *testing.T) {
	// BTH (RC_FLUSH, QP 0x261, AckReq, PSN 0xc2b98a), FETH (range,
	// global), RETH (va 0x5594b2f94400, rkey 0x2d329, 256 bytes), ICRC.
	pkt := []byte{
		0x1c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x02, 0x61, 0x80, 0xc2, 0xb9, 0x8a,
		0x00, 0x00, 0x00, 0x01,
		0x00, 0x00, 0x55, 0x94, 0xb2, 0xf9, 0x44, 0x00, 0x00, 0x02, 0xd3, 0x29, 0x00, 0x00, 0x01, 0x00,
		0xf4, 0x4e, 0x25, 0xf2,
	}
	f := Flow{Src: netip.MustParseAddr("198.18.0.12"), Dst: netip.MustParseAddr("198.18.0.11"), SrcPort: 58533,
		DstPort: 4791, DF: true, ID: 0xce81}
	if !IsFlush(pkt) {
		t.Fatal("IsFlush: false for a FLUSH")
	}
	wire := binary.LittleEndian.Uint32(pkt[flushLen:])
	ibta := f.ICRC(pkt[:flushLen])
	if ibta == wire {
		t.Fatalf("the IBTA's ICRC %#x is what rxe sent: nothing to convert", ibta)
	}
	if got := FlushICRCRXE(ibta, pkt); got != wire {
		t.Errorf("FlushICRCRXE = %#x, rxe sent %#x", got, wire)
	}
	q := append([]byte(nil), pkt...)
	UnfoldFlushICRC(q)
	if !f.Verify(q) {
		t.Errorf("after UnfoldFlushICRC the IBTA's ICRC does not verify: %#x, want %#x",
			binary.LittleEndian.Uint32(q[flushLen:]), ibta)
	}
	// Not a FLUSH: untouched.
	w := append([]byte(nil), pkt...)
	w[0] = byte(RCAtomicWrite)
	UnfoldFlushICRC(w)
	if string(w[1:]) != string(pkt[1:]) || FlushICRCRXE(7, w) != 7 || IsFlush(w) {
		t.Error("a packet that is not a FLUSH was changed")
	}
}
