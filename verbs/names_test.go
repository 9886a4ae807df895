package verbs

import (
	"testing"
)

func TestNames(t *testing.T) {
	for s, want := range []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"} {
		if got := QPState(s).String(); got != want {
			t.Errorf("state %d: %q, want %q", s, got, want)
		}
	}
	for _, c := range []struct {
		got, want string
	}{
		{RC.String(), "RC"}, {UD.String(), "UD"}, {OpWriteImm.String(), "RDMA_WRITE_WITH_IMM"},
		{RemAccessErr.String(), "REM_ACCESS_ERR"}, {WRFlushErr.String(), "WR_FLUSH_ERR"},
		{WCRecvRDMAWithIm.String(), "RECV_RDMA_WITH_IMM"},
		{(AttrState | AttrSQPSN).String(), "STATE|SQ_PSN"}, {(LocalWrite | RemoteRead).String(), "LOCAL_WRITE|REMOTE_READ"},
		{EventCommEstablished.String(), "COMM_EST"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestMWNames: the memory window vocabulary has ibverbs' names and
// numbers (IBV_WR_BIND_MW 8, IBV_ACCESS_MW_BIND 1 << 4, IBV_ACCESS_ZERO_BASED
// 1 << 5, IBV_MW_TYPE_1 1 and _2 2).
func TestMWNames(t *testing.T) {
	for _, c := range []struct {
		got, want string
		num, wnum uint32
	}{
		{OpBindMW.String(), "BIND_MW", uint32(OpBindMW), 8},
		{MWBind.String(), "MW_BIND", uint32(MWBind), 0x10},
		{ZeroBased.String(), "ZERO_BASED", uint32(ZeroBased), 0x20},
		{MWType1.String(), "TYPE_1", uint32(MWType1), 1},
		{MWType2.String(), "TYPE_2", uint32(MWType2), 2},
		{WCBindMW.String(), "BIND_MW", uint32(WCBindMW), 5},
		{MWBindErr.String(), "MW_BIND_ERR", uint32(MWBindErr), 6},
		{(LocalWrite | MWBind | 1<<11).String(), "LOCAL_WRITE|MW_BIND|0x800", 0, 0},
	} {
		if c.got != c.want || c.num != c.wnum {
			t.Errorf("%q (%d), want %q (%d)", c.got, c.num, c.want, c.wnum)
		}
	}
	if !OpBindMW.Valid() || !OpBindMW.IsLocal() || !OpLocalInv.IsLocal() || OpSendInv.IsLocal() || OpBindMW.IsSend() {
		t.Error("BIND_MW and LOCAL_INV are the local operations, and valid")
	}
}

// TestIncRKey: only the low byte changes, and it wraps.
func TestIncRKey(t *testing.T) {
	for in, want := range map[uint32]uint32{0x12345600: 0x12345601, 0x123456FE: 0x123456FF, 0x123456FF: 0x12345600, 0xFFFFFFFF: 0xFFFFFF00} {
		if got := IncRKey(in); got != want {
			t.Errorf("IncRKey(%#x) = %#x, want %#x", in, got, want)
		}
	}
}

// TestCheckSendOpBind: windows are bound through RC and UC QPs only.
func TestCheckSendOpBind(t *testing.T) {
	for typ, ok := range map[QPType]bool{RC: true, UC: true, UD: false, GSI: false} {
		if err := CheckSendOp(typ, OpBindMW); (err == nil) != ok {
			t.Errorf("BIND_MW on %v: %v", typ, err)
		}
	}
}

// TestFlushAtomicWriteNames: IBTA 1.5's operations have ibverbs' names
// and numbers (rdma-core 56's verbs.h: IBV_WR_FLUSH 14, IBV_WR_ATOMIC_WRITE
// 15, IBV_WC_FLUSH 8, IBV_WC_ATOMIC_WRITE 9, IBV_ACCESS_FLUSH_GLOBAL
// 1 << 8 and _PERSISTENT 1 << 9, IBV_FLUSH_GLOBAL 1 and _PERSISTENT 2,
// IBV_FLUSH_RANGE 0 and _MR 1; ib_user_verbs.h's
// IB_UVERBS_DEVICE_FLUSH_GLOBAL 1 << 38, _PERSISTENT 1 << 39 and
// _ATOMIC_WRITE 1 << 40).
func TestFlushAtomicWriteNames(t *testing.T) {
	for _, c := range []struct {
		got, want string
		num, wnum uint64
	}{
		{OpFlush.String(), "FLUSH", uint64(OpFlush), 14},
		{OpAtomicWrite.String(), "ATOMIC_WRITE", uint64(OpAtomicWrite), 15},
		{WCFlush.String(), "FLUSH", uint64(WCFlush), 8},
		{WCAtomicWrite.String(), "ATOMIC_WRITE", uint64(WCAtomicWrite), 9},
		{FlushGlobal.String(), "FLUSH_GLOBAL", uint64(FlushGlobal), 0x100},
		{FlushPersistent.String(), "FLUSH_PERSISTENT", uint64(FlushPersistent), 0x200},
		{(RemoteWrite | FlushAccess | 1<<6).String(), "REMOTE_WRITE|FLUSH_GLOBAL|FLUSH_PERSISTENT|0x40", 0, 0},
		{PlaceGlobal.String(), "GLOBAL", uint64(PlaceGlobal), 1},
		{PlacePersistent.String(), "PERSISTENT", uint64(PlacePersistent), 2},
		{(PlaceGlobal | PlacePersistent | 8).String(), "GLOBAL|PERSISTENT|0x8", 0, 0},
		{PlacementType(0).String(), "none", 0, 0},
		{FlushRange.String(), "RANGE", uint64(FlushRange), 0},
		{FlushMR.String(), "MR", uint64(FlushMR), 1},
		{FlushLevel(2).String(), "FlushLevel(2)", 0, 0},
		{CapFlushGlobal.String(), "FLUSH_GLOBAL", uint64(CapFlushGlobal), 1 << 38},
		{CapFlushPersistent.String(), "FLUSH_PERSISTENT", uint64(CapFlushPersistent), 1 << 39},
		{CapAtomicWrite.String(), "ATOMIC_WRITE", uint64(CapAtomicWrite), 1 << 40},
		// rxe 6.12's device_cap_flags_ex, as its guest reports it.
		{DeviceCap(0x1C001223C76).String(), "RC_RNR_NAK_GEN|MEM_WINDOW|MEM_WINDOW_TYPE_2B|FLUSH_GLOBAL|" +
			"FLUSH_PERSISTENT|ATOMIC_WRITE|0x202c76", 0, 0},
		{DeviceCap(0).String(), "none", 0, 0},
	} {
		if c.got != c.want || c.num != c.wnum {
			t.Errorf("%q (%d), want %q (%d)", c.got, c.num, c.want, c.wnum)
		}
	}
	for op, want := range map[WROpcode][4]bool{ // valid, IsAtomic, NeedsResponse, IsRDAtomic
		OpFlush: {true, false, false, true}, OpAtomicWrite: {true, false, false, true},
		OpRead: {true, false, true, true}, OpAtomicFetchAdd: {true, true, true, true},
		OpWrite: {true, false, false, false}, 10: {false, false, false, false},
	} {
		if got := [4]bool{op.Valid(), op.IsAtomic(), op.NeedsResponse(), op.IsRDAtomic()}; got != want {
			t.Errorf("%v: Valid, IsAtomic, NeedsResponse, IsRDAtomic = %v, want %v", op, got, want)
		}
	}
}

// TestCheckSendOpFlushAtomicWrite: FLUSH and ATOMIC_WRITE are RC's alone,
// as in rxe's rxe_wr_opcode_info.
func TestCheckSendOpFlushAtomicWrite(t *testing.T) {
	for _, op := range []WROpcode{OpFlush, OpAtomicWrite} {
		for typ, ok := range map[QPType]bool{RC: true, UC: false, UD: false, GSI: false} {
			if err := CheckSendOp(typ, op); (err == nil) != ok {
				t.Errorf("%v on %v: %v", op, typ, err)
			}
		}
	}
}

// TestCapsOf: a device's capabilities come from its Caps method; a
// device without one, or none, has none.
func TestCapsOf(t *testing.T) {
	if got := CapsOf(capsDevice{c: CapAtomicWrite}); got != CapAtomicWrite {
		t.Errorf("CapsOf = %v", got)
	}
	if got := CapsOf(nil); got != 0 {
		t.Errorf("CapsOf(nil) = %v", got)
	}
	if got := CapsOf(plainDevice{}); got != 0 {
		t.Errorf("CapsOf of a device without Caps = %v", got)
	}
}

type plainDevice struct{ Device }

type capsDevice struct {
	Device
	c DeviceCap
}

func (d capsDevice) Caps() DeviceCap { return d.c }
