package qp

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// goroce as the requester, facing a hostile responder.

var (
	synACK    = bth.ACKSyndrome(bth.NoCredits)
	synInvReq = bth.NAKSyndrome(bth.NAKInvalidRequest)
	synAccess = bth.NAKSyndrome(bth.NAKRemoteAccessError)
	synSeq    = bth.NAKSyndrome(bth.NAKPSNSequenceError)
	synRNR    = bth.RNRNAKSyndrome(1)
)

// TestAdversaryUnexpectedResponse: a response that answers no outstanding
// request is dropped and counted, whatever it says; the QP goes on (a
// WRITE posted after it completes), at each PSN edge: the starting PSN
// - 1, a PSN never sent, one already completed, across the 24-bit wrap,
// and in RTR, SQD and ERR.
func TestAdversaryUnexpectedResponse(t *testing.T) {
	alive := func(a *adversary) {
		a.post(a.write(1, 0, 8))
		a.inject(a.ackAt(0, synACK))
	}
	wantAlive := func(ctrs map[string]uint64) check {
		return check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS, ctrs: ctrs}
	}
	dropped := map[string]uint64{"drop_unexpected_resp": 1}
	var cases []advCase
	for _, s := range []struct {
		name string
		syn  bth.Syndrome
		ctr  string // counts nothing of what is dropped
		n    uint64 // what alive makes it
	}{
		{"invalid request NAK", synInvReq, "rcvd_inv_req_nak", 0},
		{"remote access NAK", synAccess, "rcvd_rem_access_nak", 0},
		{"remote operational NAK", bth.NAKSyndrome(bth.NAKRemoteOpError), "rcvd_rem_op_nak", 0},
		{"sequence NAK", synSeq, "rcvd_seq_err", 0},
		{"RNR NAK", synRNR, "rcvd_rnr_err", 0},
		{"ACK", synACK, "acks_rcvd", 1},
	} {
		cases = append(cases, advCase{name: s.name + " for the starting PSN - 1, nothing outstanding",
			run: func(a *adversary) {
				a.inject(a.ackAt(-1, s.syn))
				alive(a)
			}, want: wantAlive(map[string]uint64{"drop_unexpected_resp": 1, s.ctr: s.n})})
		cases = append(cases, advCase{name: s.name + " for a PSN never sent, nothing outstanding",
			run: func(a *adversary) {
				a.inject(a.ackAt(0, s.syn), a.ackAt(5, s.syn))
				alive(a)
			}, want: wantAlive(map[string]uint64{"drop_unexpected_resp": 2, s.ctr: s.n})})
	}
	cases = append(cases, []advCase{
		{name: "NAK for a PSN already completed", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8))
			a.inject(a.ackAt(0, synACK), a.ackAt(0, synInvReq), a.ackAt(1, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B", "RDMA_WRITE_ONLY @1 8B"}, wcs: []string{"1 SUCCESS", "2 SUCCESS"},
			state: verbs.StateRTS, ctrs: map[string]uint64{"drop_unexpected_resp": 1, "rcvd_inv_req_nak": 0}}},
		{name: "repeated ACK", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8))
			a.inject(a.ackAt(0, synACK), a.ackAt(0, synACK), a.ackAt(1, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B", "RDMA_WRITE_ONLY @1 8B"}, wcs: []string{"1 SUCCESS", "2 SUCCESS"},
			state: verbs.StateRTS, ctrs: dropped}},
		{name: "ACK for a PSN never sent, one outstanding", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.inject(a.ackAt(1, synACK), a.ackAt(0, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS, ctrs: dropped}},
		{name: "NAKs across the 24-bit wrap", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8), a.write(3, 0, 8), a.write(4, 0, 8))
			// @3 is PSN 0: it acknowledges 0xFFFFFD through 0.
			a.inject(a.ackAt(3, synACK), a.ackAt(2, synInvReq), a.ackAt(4, synInvReq))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B", "RDMA_WRITE_ONLY @1 8B", "RDMA_WRITE_ONLY @2 8B", "RDMA_WRITE_ONLY @3 8B"},
			wcs: []string{"1 SUCCESS", "2 SUCCESS", "3 SUCCESS", "4 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"drop_unexpected_resp": 2, "rcvd_inv_req_nak": 0}}},
		{name: "RNR NAK for a PSN outside the window", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.inject(a.ackAt(1, synRNR), a.ackAt(-1, synRNR), a.ackAt(0, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"drop_unexpected_resp": 2, "rcvd_rnr_err": 0}}},
		{name: "NAK names a request while a READ before it waits", run: func(a *adversary) {
			a.post(a.read(1, 0, 8), a.write(2, 0, 8))
			a.inject(a.ackAt(1, synInvReq))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "RDMA_WRITE_ONLY @1 8B", "RDMA_READ_REQUEST @0", "RDMA_WRITE_ONLY @1 8B"},
			state: verbs.StateRTS, ctrs: map[string]uint64{"completer_retry_err": 1}}},
		{name: "response in RTR", opts: advOpts{rtr: true}, run: func(a *adversary) {
			a.inject(a.ackAt(-1, synInvReq), a.ackAt(0, synACK))
		}, want: check{state: verbs.StateRTR, ctrs: map[string]uint64{"drop_bad_state": 2}}},
		{name: "response in SQD", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.modify(verbs.StateSQD)
			a.inject(a.ackAt(-1, synInvReq), a.ackAt(1, synAccess), a.ackAt(0, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateSQD,
			ctrs: map[string]uint64{"drop_unexpected_resp": 2}}},
		{name: "response after ERR", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.modify(verbs.StateErr)
			a.inject(a.ackAt(0, synInvReq), a.ackAt(0, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 WR_FLUSH_ERR"}, state: verbs.StateErr,
			ctrs: map[string]uint64{"drop_bad_state": 2}}},
	}...)
	runAdvCases(t, cases)
}
