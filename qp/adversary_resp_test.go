package qp

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// goroce as the responder, facing a hostile requester.

// advCase is one case of the adversary, in either role.
type advCase struct {
	name string
	opts advOpts
	run  func(a *adversary)
	want check
	// after, if set, checks more once want holds.
	after func(a *adversary)
}

func runAdvCases(t *testing.T, cases []advCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAdversary(t, c.opts)
			c.run(a)
			a.expect(c.want)
			if c.after != nil {
				c.after(a)
			}
		})
	}
}

var (
	nakInvReq    = " " + bth.NAKSyndrome(bth.NAKInvalidRequest).String()
	nakRemAccess = " " + bth.NAKSyndrome(bth.NAKRemoteAccessError).String()
	nakRemOp     = " " + bth.NAKSyndrome(bth.NAKRemoteOpError).String()
)

// errState is the check of a responder error: the NAK, ERR, the event,
// and the NAK counted.
func errState(nak string, psn int, ev verbs.EventType, ctr string, wcs ...string) check {
	return check{sent: []string{"ACKNOWLEDGE @" + strconv.Itoa(psn) + nak}, wcs: wcs, state: verbs.StateErr,
		events: []verbs.EventType{ev}, ctrs: map[string]uint64{ctr: 1}}
}

// TestAdversaryResponderEvents: each class of responder error raises its
// asynchronous event as it NAKs and moves the QP to ERR.
func TestAdversaryResponderEvents(t *testing.T) {
	runAdvCases(t, []advCase{
		{name: "remote access error raises QP_ACCESS_ERR", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey()^0x80, 8).ack())
		}, want: errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak")},
		{name: "invalid request raises QP_REQ_ERR", opts: advOpts{access: verbs.LocalWrite | verbs.RemoteWrite},
			run: func(a *adversary) {
				a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
			}, want: errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak")},
		{name: "broken receive raises QP_FATAL", run: func(a *adversary) {
			must(a.t, a.qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{{Addr: a.rbuf.Addr(), Length: 64, LKey: 0x12345600}}}}))
			a.inject(a.req(bth.RCSendOnly, 0, 8).ack())
		}, want: errState(nakRemOp, 0, verbs.EventQPFatal, "sent_rem_op_nak", "7 LOC_PROT_ERR")},
	})
}

// TestAdversaryReceiveAccounting: a receive that a SEND (or a WRITE with
// immediate) took completes exactly once however the message ends: with
// the error that ended it, or WR_FLUSH_ERR when the QP went to ERR.
func TestAdversaryReceiveAccounting(t *testing.T) {
	first := func(a *adversary) { a.inject(a.req(bth.RCSendFirst, 0, a.mtu)) }
	runAdvCases(t, []advCase{
		{name: "SEND FIRST then a READ", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			first(a)
			a.inject(a.req(bth.RCReadRequest, 1, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: errState(nakInvReq, 1, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR", "101 WR_FLUSH_ERR")},
		{name: "SEND FIRST then a short MIDDLE", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			first(a)
			a.inject(a.req(bth.RCSendMiddle, 1, 100))
		}, want: errState(nakInvReq, 1, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR", "101 WR_FLUSH_ERR")},
		{name: "SEND FIRST then a WRITE MIDDLE", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			first(a)
			a.inject(a.req(bth.RCWriteMiddle, 1, a.mtu))
		}, want: errState(nakInvReq, 1, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR", "101 WR_FLUSH_ERR")},
		{name: "SEND longer than its receive", opts: advOpts{}, run: func(a *adversary) {
			a.postRecv(5, 0, 300)
			first(a)
			a.inject(a.req(bth.RCSendLast, 1, 100))
		}, want: errState(nakInvReq, 1, verbs.EventQPReqErr, "sent_inv_req_nak", "5 LOC_LEN_ERR")},
		{name: "SEND FIRST then the QP is modified to ERR", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			first(a)
			must(a.t, a.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
		}, want: check{wcs: []string{"100 WR_FLUSH_ERR", "101 WR_FLUSH_ERR"}, state: verbs.StateErr}},
		{name: "SEND FIRST on an SRQ then a READ", opts: advOpts{srq: true, recvs: 2}, run: func(a *adversary) {
			first(a)
			a.inject(a.req(bth.RCReadRequest, 1, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: check{sent: []string{"ACKNOWLEDGE @1" + nakInvReq}, wcs: []string{"100 REM_INV_REQ_ERR"},
			state: verbs.StateErr, events: []verbs.EventType{verbs.EventQPReqErr, verbs.EventLastWQEReached}}},
		{name: "SEND FIRST on an SRQ then the QP is modified to ERR", opts: advOpts{srq: true, recvs: 2}, run: func(a *adversary) {
			first(a)
			must(a.t, a.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
		}, want: check{wcs: []string{"100 WR_FLUSH_ERR"}, state: verbs.StateErr,
			events: []verbs.EventType{verbs.EventLastWQEReached}}},
		{name: "WRITE with immediate to a bad key", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteOnlyImm, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey()+1, 8).ack())
		}, want: errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak", "100 REM_ACCESS_ERR", "101 WR_FLUSH_ERR")},
	})
}
