package verbs

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilArgs calls every exported function and method of the package
// with zero and out-of-range arguments: none panics, and errors name what
// is wrong and wrap their sentinel.
func TestNilArgs(t *testing.T) {
	apitest.Run(t, ".", apitest.Table{
		"Access.String": func(t *testing.T) {
			if got := Access(0).String(); got != "none" {
				t.Errorf("Access(0) = %q", got)
			}
			if got := Access(1 << 7).String(); got != "0x80" {
				t.Errorf("Access(0x80) = %q", got)
			}
		},
		"CheckModify": func(t *testing.T) {
			apitest.Err(t, CheckModify(0, StateReset, StateInit, 0), ErrInvalidAttr, "QP type", "want RC, UC, UD or GSI")
			apitest.Err(t, CheckModify(RC, 200, StateInit, 0), ErrInvalidAttr, "state", "RESET to ERR")
			apitest.Err(t, CheckModify(RC, StateReset, StateRTS, AttrState), ErrInvalidTransition,
				"RESET to RTS", "goes to RESET, INIT")
			apitest.Err(t, CheckModify(RC, StateSQE, StateRTS, AttrState), ErrInvalidTransition, "goes to RESET, ERR")
			apitest.Err(t, CheckModify(UD, StateReset, StateInit, AttrState), ErrMissingAttr,
				"a UD QP needs", "PKEY_INDEX", "add them to the mask")
			apitest.Err(t, CheckModify(RC, StateReset, StateInit, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags|AttrQKey),
				ErrExtraAttr, "an RC QP does not take QKEY", "leave them out")
		},
		"CheckSendOp": func(t *testing.T) {
			apitest.Err(t, CheckSendOp(0, OpSend), ErrInvalidAttr, "QP type QPType(0)")
			apitest.Err(t, CheckSendOp(RC, 10), ErrInvalidWR, "WROpcode(10)")
			apitest.Err(t, CheckSendOp(UD, OpRead), ErrInvalidWR, "RDMA_READ on a UD QP", "only SEND")
			apitest.Err(t, CheckSendOp(GSI, OpWrite), ErrInvalidWR, "on a GSI QP")
			apitest.Err(t, CheckSendOp(UC, OpAtomicCmpSwp), ErrInvalidWR, "UC QP", "use an RC QP")
			if err := CheckSendOp(RC, OpWrite); err != nil {
				t.Error(err)
			}
		},
		"QPType.String": func(t *testing.T) { wantString(t, QPType(0).String(), "QPType(0)") },
		"PlacementType.String": func(t *testing.T) {
			wantString(t, PlacementType(0xF0).String(), "0xf0")
		},
		"FlushLevel.String": func(t *testing.T) { wantString(t, FlushLevel(9).String(), "FlushLevel(9)") },
		"DeviceCap.String":  func(t *testing.T) { wantString(t, DeviceCap(1).String(), "0x1") },
		"CapsOf": func(t *testing.T) {
			if CapsOf(nil) != 0 {
				t.Error("CapsOf(nil) is not 0")
			}
		},
		"WROpcode.IsRDAtomic": func(t *testing.T) {
			if WROpcode(0xFF).IsRDAtomic() {
				t.Error("0xFF takes a responder resource")
			}
		},
		"QPState.String":  func(t *testing.T) { wantString(t, QPState(99).String(), "QPState(99)") },
		"WROpcode.String": func(t *testing.T) { wantString(t, WROpcode(10).String(), "WROpcode(10)") },
		"WROpcode.IsLocal": func(t *testing.T) {
			if WROpcode(0xFF).IsLocal() {
				t.Error("0xFF is local")
			}
		},
		"MWType.String": func(t *testing.T) { wantString(t, MWType(0).String(), "MWType(0)") },
		"IncRKey": func(t *testing.T) {
			if IncRKey(0) != 1 || IncRKey(0xFFFFFFFF) != 0xFFFFFF00 {
				t.Errorf("IncRKey(0) = %#x, IncRKey(0xFFFFFFFF) = %#x", IncRKey(0), IncRKey(0xFFFFFFFF))
			}
		},
		"WROpcode.IsAtomic": func(t *testing.T) {
			if WROpcode(0xFF).IsAtomic() {
				t.Error("0xFF is atomic")
			}
		},
		"WROpcode.NeedsResponse": func(t *testing.T) {
			if WROpcode(0xFF).NeedsResponse() {
				t.Error("0xFF needs a response")
			}
		},
		"WROpcode.IsSend": func(t *testing.T) {
			if WROpcode(0xFF).IsSend() {
				t.Error("0xFF is a send")
			}
		},
		"WROpcode.Valid": func(t *testing.T) {
			if WROpcode(10).Valid() {
				t.Error("10 is valid")
			}
		},
		"Status.String":   func(t *testing.T) { wantString(t, Status(255).String(), "Status(255)") },
		"WCOpcode.String": func(t *testing.T) { wantString(t, WCOpcode(99).String(), "WCOpcode(99)") },
		"WC.String": func(t *testing.T) {
			wantString(t, (*WC)(nil).String(), "<nil>")
			wantString(t, (&WC{}).String(), "wr_id=0 status=SUCCESS opcode=SEND byte_len=0 qp_num=0 src_qp=0 flags=0x0 imm=0x0")
		},
		"AHAttr.DestAddr": func(t *testing.T) {
			if a := (AHAttr{}).DestAddr(); a != netip.IPv6Unspecified() {
				t.Errorf("zero AHAttr's address %v", a)
			}
		},
		"GIDFromAddr": func(t *testing.T) {
			if g := GIDFromAddr(netip.Addr{}); g != [16]byte{} {
				t.Errorf("GID of the zero Addr: %x", g)
			}
		},
		"IsMulticastGID": func(t *testing.T) {
			for gid, want := range map[[16]byte]bool{{}: false, GIDFromAddr(netip.MustParseAddr("239.255.0.1")): true,
				GIDFromAddr(netip.MustParseAddr("198.18.0.1")): false, GIDFromAddr(netip.MustParseAddr("ff15::1")): true,
				{0xff, 0x0e, 10: 0xff, 11: 0xff, 12: 239, 15: 1}: true, // a RoCE v1 IPv4 group
			} {
				if got := IsMulticastGID(gid); got != want {
					t.Errorf("IsMulticastGID(%v) = %v", netip.AddrFrom16(gid), got)
				}
			}
		},
		"MulticastGID": func(t *testing.T) {
			if g := MulticastGID(netip.Addr{}); g != [16]byte{} {
				t.Errorf("GID of the zero Addr: %x", g)
			}
			want := [16]byte{10: 0xff, 11: 0xff, 12: 239, 13: 255, 15: 1}
			for _, a := range []string{"239.255.0.1", "::ffff:239.255.0.1"} {
				if g := MulticastGID(netip.MustParseAddr(a)); g != want {
					t.Errorf("MulticastGID(%s) = %v, want ::ffff:239.255.0.1 (cma_iboe_set_mgid for RoCEv2)", a, netip.AddrFrom16(g))
				}
			}
		},
		"AddrFromGID": func(t *testing.T) {
			if a := AddrFromGID([16]byte{}); a != netip.IPv6Unspecified() {
				t.Errorf("address of the zero GID: %v", a)
			}
		},
		"AttrMask.String": func(t *testing.T) { wantString(t, AttrMask(0).String(), "0") },
		"PostError.Error": func(t *testing.T) {
			wantString(t, (*PostError)(nil).Error(), "<nil>")
			wantString(t, (&PostError{Index: 2}).Error(), "work request 2: <nil>")
		},
		"PostError.Unwrap": func(t *testing.T) {
			if (*PostError)(nil).Unwrap() != nil {
				t.Error("nil PostError unwraps")
			}
			if !errors.Is(&PostError{Err: ErrQueueFull}, ErrQueueFull) {
				t.Error("PostError does not unwrap")
			}
		},
		"EventType.String": func(t *testing.T) { wantString(t, EventType(0).String(), "UNKNOWN") },
		"Status.Error":     func(t *testing.T) { wantString(t, Status(99).Error(), "Status(99)") },
		"WC.Err": func(t *testing.T) {
			if err := (*WC)(nil).Err(); err == nil {
				t.Error("a nil *WC has no error")
			}
			if err := (&WC{}).Err(); err != nil {
				t.Errorf("a successful WC: %v", err)
			}
		},
		"WCError.Error": func(t *testing.T) {
			wantString(t, (*WCError)(nil).Error(), "<nil>")
			wantString(t, (&WCError{}).Error(), "verbs: work request 0 on QP 0 completed with SUCCESS (opcode SEND)")
		},
		"WCError.Unwrap": func(t *testing.T) {
			if (*WCError)(nil).Unwrap() != nil {
				t.Error("a nil *WCError unwraps to a status")
			}
		},
	})
	apitest.NilReceivers(t, ".", (*WC)(nil), (*PostError)(nil), (*WCError)(nil))
}

func wantString(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
