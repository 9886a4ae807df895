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
		{(LocalWrite | MWBind | 1<<9).String(), "LOCAL_WRITE|MW_BIND|0x200", 0, 0},
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
