package qp

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// goroce as the responder, facing a hostile requester.

type respCase struct {
	name string
	opts advOpts
	run  func(a *adversary)
	want check
}

func runRespCases(t *testing.T, cases []respCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAdversary(t, c.opts)
			c.run(a)
			a.expect(c.want)
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
	runRespCases(t, []respCase{
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
