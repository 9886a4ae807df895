package qp

import (
	"slices"
	"strconv"
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

// TestAdversaryReadResponse: READ responses in the wrong opcode sequence,
// of the wrong length, with a NAK in their AETH, or for another kind of
// request fail the READ at once (BAD_RESP_ERR, LOC_LEN_ERR for too short,
// LOC_PROT_ERR for too long), move the QP to ERR and flush what follows;
// no byte of a rejected response reaches the READ's buffer. Atomic ACKs
// likewise.
func TestAdversaryReadResponse(t *testing.T) {
	const mtu = 256
	// A READ of three packets, and a fenced WRITE that waits for it.
	read3 := func(a *adversary) {
		fenced := a.write(2, 0, 8)
		fenced.Flags |= verbs.Fence
		a.post(a.read(1, 0, 3*mtu), fenced)
	}
	sentRead := []string{"RDMA_READ_REQUEST @0"}
	fails := func(st string, lfrom int) check {
		return check{sent: sentRead, wcs: []string{"1 " + st, "2 WR_FLUSH_ERR"}, state: verbs.StateErr, lfrom: lfrom}
	}
	first, middle, last, only := bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly
	// landed checks that lbuf holds the payload of the responses at offs.
	landed := func(offs ...int) func(a *adversary) {
		return func(a *adversary) {
			for _, off := range offs {
				want := a.resp(middle, off, mtu).payload
				if got := a.lbuf.Bytes()[off*mtu : (off+1)*mtu]; string(got) != string(want) {
					a.t.Errorf("response @%d did not land", off)
				}
			}
		}
	}
	runAdvCases(t, []advCase{
		{name: "in order", run: func(a *adversary) {
			a.post(a.read(1, 0, 3*mtu))
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu), a.resp(last, 2, mtu))
		}, want: check{sent: sentRead, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS, lfrom: 3 * mtu},
			after: landed(0, 1, 2)},
		{name: "a second FIRST", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(first, 1, mtu))
		}, want: fails("BAD_RESP_ERR", mtu), after: landed(0)},
		{name: "MIDDLE without FIRST", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(middle, 0, mtu))
		}, want: fails("BAD_RESP_ERR", 0)},
		{name: "LAST without FIRST", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(last, 0, mtu))
		}, want: fails("BAD_RESP_ERR", 0)},
		{name: "ONLY in the middle", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(only, 1, mtu))
		}, want: fails("BAD_RESP_ERR", mtu)},
		{name: "FIRST with a NAK", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu).withSyn(synInvReq))
		}, want: fails("BAD_RESP_ERR", 0)},
		{name: "LAST with an RNR NAK", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu), a.resp(last, 2, mtu).withSyn(synRNR))
		}, want: fails("BAD_RESP_ERR", 2*mtu)},
		{name: "ONLY with a reserved syndrome", run: func(a *adversary) {
			a.post(a.read(1, 0, 8))
			a.inject(a.resp(only, 0, 8).withSyn(0x40))
		}, want: check{sent: sentRead, wcs: []string{"1 BAD_RESP_ERR"}, state: verbs.StateErr}},
		{name: "ONLY ends a three-packet READ early", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(only, 0, mtu))
		}, want: fails("LOC_LEN_ERR", 0)},
		{name: "LAST ends it early", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(last, 1, mtu))
		}, want: fails("LOC_LEN_ERR", mtu)},
		{name: "MIDDLE shorter than the MTU", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu-4))
		}, want: fails("LOC_LEN_ERR", mtu)},
		{name: "LAST shorter than the rest", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu), a.resp(last, 2, mtu-4))
		}, want: fails("LOC_LEN_ERR", 2*mtu)},
		{name: "ONLY shorter than the READ", run: func(a *adversary) {
			a.post(a.read(1, 0, 100))
			a.inject(a.resp(only, 0, 96))
		}, want: check{sent: sentRead, wcs: []string{"1 LOC_LEN_ERR"}, state: verbs.StateErr}},
		{name: "ONLY longer than the READ", run: func(a *adversary) {
			a.post(a.read(1, 0, 100))
			a.inject(a.resp(only, 0, 104))
		}, want: check{sent: sentRead, wcs: []string{"1 LOC_PROT_ERR"}, state: verbs.StateErr}},
		{name: "LAST longer than the rest", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu), a.resp(last, 2, mtu+4))
		}, want: fails("LOC_PROT_ERR", 2*mtu)},
		{name: "MIDDLE at the last PSN: it goes on", run: func(a *adversary) {
			read3(a)
			a.inject(a.resp(first, 0, mtu), a.resp(middle, 1, mtu), a.resp(middle, 2, mtu))
		}, want: fails("LOC_PROT_ERR", 2*mtu)},
		{name: "FIRST for a one-packet READ: it goes on", run: func(a *adversary) {
			a.post(a.read(1, 0, mtu))
			a.inject(a.resp(first, 0, mtu))
		}, want: check{sent: sentRead, wcs: []string{"1 LOC_PROT_ERR"}, state: verbs.StateErr}},
		{name: "READ response for a WRITE", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.inject(a.resp(only, 0, 8))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 BAD_RESP_ERR"}, state: verbs.StateErr}},
		{name: "READ response for an atomic", run: func(a *adversary) {
			a.post(a.fetchAdd(1, 0))
			a.inject(a.resp(only, 0, 8))
		}, want: check{sent: []string{"FETCH_ADD @0"}, wcs: []string{"1 BAD_RESP_ERR"}, state: verbs.StateErr}},
		{name: "atomic ACK for a READ", run: func(a *adversary) {
			a.post(a.read(1, 0, 8))
			a.inject(a.resp(bth.RCAtomicAcknowledge, 0, 0).withOrig(5))
		}, want: check{sent: sentRead, wcs: []string{"1 BAD_RESP_ERR"}, state: verbs.StateErr}},
		{name: "atomic ACK with a NAK", run: func(a *adversary) {
			a.post(a.fetchAdd(1, 0))
			a.inject(a.resp(bth.RCAtomicAcknowledge, 0, 0).withOrig(5).withSyn(synAccess))
		}, want: check{sent: []string{"FETCH_ADD @0"}, wcs: []string{"1 BAD_RESP_ERR"}, state: verbs.StateErr}},
		{name: "atomic ACK", run: func(a *adversary) {
			a.post(a.fetchAdd(1, 0))
			a.inject(a.resp(bth.RCAtomicAcknowledge, 0, 0).withOrig(5))
		}, want: check{sent: []string{"FETCH_ADD @0"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS, lfrom: 8}},
		{name: "READ asked again from the middle, answered from FIRST", run: func(a *adversary) {
			a.post(a.read(1, 0, 3*mtu))
			a.inject(a.resp(first, 0, mtu))
			a.fire() // the rest is lost: ask again
			a.inject(a.resp(first, 1, mtu), a.resp(last, 2, mtu))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "RDMA_READ_REQUEST @1"}, wcs: []string{"1 SUCCESS"},
			state: verbs.StateRTS, lfrom: 3 * mtu}, after: landed(0, 1, 2)},
		{name: "READ asked again from the middle, answered from MIDDLE", run: func(a *adversary) {
			a.post(a.read(1, 0, 3*mtu))
			a.inject(a.resp(first, 0, mtu))
			a.fire()
			a.inject(a.resp(middle, 1, mtu), a.resp(last, 2, mtu))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "RDMA_READ_REQUEST @1"}, wcs: []string{"1 SUCCESS"},
			state: verbs.StateRTS, lfrom: 3 * mtu}, after: landed(0, 1, 2)},
		{name: "READ asked again, then a second FIRST", run: func(a *adversary) {
			a.post(a.read(1, 0, 3*mtu))
			a.inject(a.resp(first, 0, mtu))
			a.fire()
			a.inject(a.resp(first, 1, mtu), a.resp(first, 2, mtu))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "RDMA_READ_REQUEST @1"}, wcs: []string{"1 BAD_RESP_ERR"},
			state: verbs.StateErr, lfrom: 2 * mtu}, after: landed(0, 1)},
	})
}

// TestAdversaryRetries: the completer's retry and RNR paths, as rxe's
// (check_ack, COMPST_ERROR_RETRY, COMPST_RNR_RETRY): a sequence NAK goes
// back to its PSN once, however many come; an RNR NAK waits its timer,
// then sends again, rnr_retry times, and without end at 7; a timeout
// goes back to the oldest unacknowledged PSN, retry_cnt times; progress
// restores both counts. Where goroce differs: retry_cnt 7 is seven
// retries, as the IBTA counts, where rxe retries without end.
func TestAdversaryRetries(t *testing.T) {
	w := func(psn int) string { return "RDMA_WRITE_ONLY @" + strconv.Itoa(psn) + " 8B" }
	send := func(a *adversary) {
		a.post(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(a.lbuf, 0, 8)}})
	}
	sendOnly := "SEND_ONLY @0 8B"
	times := func(n int, s string) []string { return slices.Repeat([]string{s}, n) }
	runAdvCases(t, []advCase{
		{name: "sequence NAK goes back once", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8), a.write(3, 0, 8))
			a.inject(a.ackAt(1, synSeq), a.ackAt(1, synSeq))
			a.inject(a.ackAt(2, synACK))
		}, want: check{sent: []string{w(0), w(1), w(2), w(1), w(2)}, wcs: []string{"1 SUCCESS", "2 SUCCESS", "3 SUCCESS"},
			state: verbs.StateRTS, ctrs: map[string]uint64{"rcvd_seq_err": 2, "completer_retry_err": 1}}},
		{name: "RNR NAK waits its timer", run: func(a *adversary) {
			send(a)
			a.inject(a.ackAt(0, synRNR))
			if len(a.sent()) != 1 {
				a.t.Error("sent again before the RNR timer")
			}
			a.fire()
			a.inject(a.ackAt(0, synACK))
		}, want: check{sent: []string{sendOnly}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"rcvd_rnr_err": 1}}},
		{name: "rnr_retry 2: the third RNR NAK fails the SEND", opts: advOpts{rnrRetry: u8(2)}, run: func(a *adversary) {
			send(a)
			for range 2 {
				a.inject(a.ackAt(0, synRNR))
				a.fire()
			}
			a.inject(a.ackAt(0, synRNR))
		}, want: check{sent: times(3, sendOnly), wcs: []string{"1 RNR_RETRY_EXC_ERR"}, state: verbs.StateErr,
			ctrs: map[string]uint64{"rcvd_rnr_err": 3, "retry_rnr_exceeded_err": 1}}},
		{name: "rnr_retry 7 retries without end", run: func(a *adversary) {
			send(a)
			for range 50 {
				a.inject(a.ackAt(0, synRNR))
				a.fire()
			}
			a.inject(a.ackAt(0, synACK))
		}, want: check{sent: times(51, sendOnly), wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"rcvd_rnr_err": 50}}},
		{name: "retry_cnt 0: the first timeout fails", opts: advOpts{retry: u8(0)}, run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.fire()
		}, want: check{sent: []string{w(0)}, wcs: []string{"1 RETRY_EXC_ERR"}, state: verbs.StateErr,
			ctrs: map[string]uint64{"retry_exceeded_err": 1}}},
		{name: "retry_cnt 7 is seven retries", run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			for range 8 {
				a.fire()
			}
		}, want: check{sent: times(8, w(0)), wcs: []string{"1 RETRY_EXC_ERR"}, state: verbs.StateErr,
			ctrs: map[string]uint64{"completer_retry_err": 8, "retry_exceeded_err": 1}}},
		{name: "progress restores the retry count", opts: advOpts{retry: u8(1)}, run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8))
			a.fire() // the one retry
			a.inject(a.ackAt(0, synACK))
			a.fire() // a retry again
			a.fire()
		}, want: check{sent: []string{w(0), w(1), w(0), w(1), w(1)}, wcs: []string{"1 SUCCESS", "2 RETRY_EXC_ERR"},
			state: verbs.StateErr, ctrs: map[string]uint64{"completer_retry_err": 3, "retry_exceeded_err": 1}}},
		{name: "timeout 0: no retransmission timer", opts: advOpts{noTimeout: true}, run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			if _, ok := a.clk.Next(); ok {
				a.t.Error("a timer runs with timeout 0")
			}
		}, want: check{sent: []string{w(0)}, state: verbs.StateRTS}},
		{name: "ACKs part way through a message", run: func(a *adversary) {
			a.post(a.write(1, 0, 3*256))
			a.inject(a.ackAt(1, synACK))
			if got := a.polled(); len(got) != 0 {
				a.t.Errorf("completed on a partial ACK: %v", got)
			}
			a.inject(a.ackAt(2, synACK))
		}, want: check{sent: []string{"RDMA_WRITE_FIRST @0 256B", "RDMA_WRITE_MIDDLE @1 256B", "RDMA_WRITE_LAST @2 256B"},
			wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS}},
	})
}
