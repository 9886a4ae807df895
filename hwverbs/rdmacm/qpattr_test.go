package rdmacm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// rtrAttrs is what the kernel's rdma_cm gives for RTR on rxe over IPv4
// (GID table entry 1), with an old RoCE-only mask bit set.
func rtrAttrs() qpAttrs {
	return qpAttrs{
		attr: verbs.QPAttr{State: verbs.StateRTR, PathMTU: bth.MTU1024, RQPSN: 0x123456, DestQPN: 17,
			MaxDestRDAtomic: 16, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.12")), HopLimit: 64, Port: 1}},
		mask: verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer | 1<<21,
		sgidTable: 1,
	}
}

func TestForDevice(t *testing.T) {
	tests := []struct {
		name          string
		table, chosen int
		want          uint8
		err           error
	}{
		{"the device's own entry", 1, 1, 0, nil},
		{"another entry (IPv6 next to IPv4)", 2, 1, 2, nil},
		{"entry 0 when the device uses 0", 0, 0, 0, nil},
		{"entry 0 the device cannot name", 0, 1, 0, cm.ErrAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := rtrAttrs()
			a.sgidTable = tt.table
			at, mask, err := a.forDevice(tt.chosen)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("%v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if at.AH.SGIDIndex != tt.want {
				t.Errorf("SGID index %d, want %d", at.AH.SGIDIndex, tt.want)
			}
			if mask&^knownAttrs != 0 || mask&verbs.AttrAV == 0 || at.DestQPN != 17 {
				t.Errorf("mask %v, attr %+v", mask, at)
			}
		})
	}
	// Without an address vector the GID does not matter.
	a := qpAttrs{attr: verbs.QPAttr{State: verbs.StateRTS}, mask: verbs.AttrState | verbs.AttrSQPSN}
	if _, _, err := a.forDevice(1); err != nil {
		t.Errorf("RTS: %v", err)
	}
}

func TestSetRTRRTS(t *testing.T) {
	p := &Params{MinRNRTimer: 12, ACKTimeout: 14}
	rtr := rtrAttrs()
	rtr.setRTR(p, keep)
	if rtr.attr.MaxDestRDAtomic != 16 || rtr.attr.MinRNRTimer != 12 {
		t.Errorf("RTR kept: %+v", rtr.attr)
	}
	rtr.setRTR(&Params{}, 0)
	if rtr.attr.MaxDestRDAtomic != 0 || rtr.mask&verbs.AttrMaxDestRDAtomic == 0 || rtr.attr.MinRNRTimer != 12 {
		t.Errorf("RTR 0: %+v", rtr.attr)
	}
	rts := qpAttrs{attr: verbs.QPAttr{State: verbs.StateRTS, SQPSN: 0x654321, Timeout: 18, RetryCnt: 7, RNRRetry: 6,
		MaxRDAtomic: 16}, mask: verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt |
		verbs.AttrRNRRetry | verbs.AttrMaxQPRDAtomic}
	rts.setRTS(&Params{}, keep)
	if rts.attr.Timeout != 18 || rts.attr.MaxRDAtomic != 16 {
		t.Errorf("RTS kept: %+v", rts.attr)
	}
	rts.setRTS(p, 2)
	if rts.attr.Timeout != 14 || rts.attr.MaxRDAtomic != 2 {
		t.Errorf("RTS set: %+v", rts.attr)
	}
	info := connInfo(33, &rtr, &rts)
	want := ConnInfo{LocalQPN: 33, RemoteQPN: 17, SendPSN: 0x654321, RecvPSN: 0x123456, ResponderResources: 0,
		InitiatorDepth: 2, PathMTU: bth.MTU1024, RetryCount: 7, RNRRetryCount: 6, LocalACKTimeout: 14, MinRNRTimer: 12}
	if info != want {
		t.Errorf("connInfo\n got %+v\nwant %+v", info, want)
	}
}
