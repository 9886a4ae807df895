package qp

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// TestAdversaryLocalInv: LOCAL_INV on goroce's requester. It waits for
// every request before it to complete, as rxe's requester does (the
// local invalidate fence): the region a WRITE sends from stays valid
// until the WRITE is acknowledged, so that a retransmission still finds
// it. A key it cannot invalidate completes LOC_QP_OP_ERR, rxe's status,
// and the QP goes to ERR.
func TestAdversaryLocalInv(t *testing.T) {
	valid := func(a *adversary) bool {
		m, _, err := a.dev.mrs.Lookup(a.pd.pd, 0, a.lbuf.LKey(), a.lbuf.Addr(), 8, 0)
		if err == nil {
			m.Release(0)
		}
		return err == nil
	}
	runAdvCases(t, []advCase{
		{name: "waits for the WRITE before it", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: a.lbuf.LKey()})
			if !valid(a) {
				a.t.Error("the region was invalidated while a WRITE from it was outstanding")
			}
			a.inject(a.ackAt(0, bth.NAKSyndrome(bth.NAKPSNSequenceError)))
			a.inject(a.ackAt(0, bth.ACKSyndrome(bth.NoCredits)))
			if valid(a) {
				a.t.Error("the region is still valid after the LOCAL_INV completed")
			}
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B", "RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS", "2 SUCCESS"},
			state: verbs.StateRTS}},
		{name: "with nothing before it, at once", run: func(a *adversary) {
			a.post(verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: a.lbuf.LKey()})
			if valid(a) {
				a.t.Error("the region is still valid")
			}
		}, want: check{wcs: []string{"2 SUCCESS"}, state: verbs.StateRTS}},
		{name: "of an unknown key", run: func(a *adversary) {
			a.post(verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: a.lbuf.LKey() + 0x100})
		}, want: check{wcs: []string{"2 LOC_QP_OP_ERR"}, state: verbs.StateErr}},
		{name: "of a region of another PD", run: func(a *adversary) {
			m, err := newPD(a.dev).Register(make([]byte, 8), verbs.LocalWrite)
			must(a.t, err)
			a.post(verbs.SendWR{ID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: m.LKey()})
		}, want: check{wcs: []string{"2 LOC_QP_OP_ERR"}, state: verbs.StateErr}},
	})
}
