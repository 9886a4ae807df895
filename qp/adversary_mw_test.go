package qp

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Memory windows facing a hostile peer: hand-built requests through a
// window's key that fall outside the window, come after its
// invalidation, or come on another QP than the one a type 2 window is
// bound to.

const (
	advWinOff = 1024 // the windows' start in a.mr
	advWinLen = 512
)

// window binds a window of type typ, unsignaled, over advWinLen bytes of
// a.mr from advWinOff, through q (a.qp when nil), and returns it.
func (a *adversary) window(typ verbs.MWType, q *QP, access verbs.Access) *MW {
	a.t.Helper()
	if q == nil {
		q = a.qp
	}
	wi, err := a.pd.AllocMW(typ)
	must(a.t, err)
	w := wi.(*MW)
	info := verbs.MWBindInfo{MR: a.mr, Addr: a.mr.Addr() + advWinOff, Length: advWinLen, Access: access}
	if typ == verbs.MWType1 {
		must(a.t, q.BindMW(w, &verbs.MWBindWR{BindInfo: info}))
	} else {
		must(a.t, q.PostSend([]verbs.SendWR{{Opcode: verbs.OpBindMW,
			BindMW: &verbs.BindMW{MW: w, RKey: verbs.IncRKey(w.RKey()), BindInfo: info}}}))
	}
	if _, _, _, _, ok := w.Window().Bound(); !ok {
		a.t.Fatalf("the %v window is not bound", typ)
	}
	return w
}

// otherQP returns a second RC QP of goroce's device, in the PD, in RTS
// towards another QP of the peer.
func (a *adversary) otherQP() *QP {
	a.t.Helper()
	q, err := a.dev.createQP(a.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(a.t, err)
	must(a.t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.LocalWrite | verbs.RemoteAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(a.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: bth.MTU256, DestQPN: advPeerQPN + 1, RQPSN: 0,
		MaxDestRDAtomic: 4, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(advPeer)}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRDAtomic|verbs.AttrMinRNRTimer))
	must(a.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 4},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRDAtomic))
	return q
}

// localInv posts an unsignaled LOCAL_INV of key on a.qp.
func (a *adversary) localInv(key uint32) {
	a.t.Helper()
	a.post(verbs.SendWR{Opcode: verbs.OpLocalInv, InvRKey: key})
}

// TestAdversaryMW: goroce as the responder, requests through windows'
// keys checked against the windows: out of the window (within the
// region) they are NAKed as remote access errors and touch nothing; a
// type 2 window answers only on its QP, a type 1 window on any; after
// LOCAL_INV or SEND_WITH_INV the key reaches nothing; a SEND with
// invalidate may not invalidate what is not its to invalidate.
func TestAdversaryMW(t *testing.T) {
	acc := errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak")
	ok := check{sent: []string{"ACKNOWLEDGE @0"}, state: verbs.StateRTS, changed: true}
	write := func(a *adversary, va uint64, k uint32, n int) *wire {
		return a.req(bth.RCWriteOnly, 0, n).rethOf(va, k, uint32(n)).ack()
	}
	win := func(a *adversary) uint64 { return a.mr.Addr() + advWinOff }
	sendInv := func(a *adversary, psn int, key uint32) *wire {
		w := a.req(bth.RCSendOnlyInvalidate, psn, 8).ack()
		w.ieth = key
		return w
	}
	mw := advOpts{mwBind: true}
	runAdvCases(t, []advCase{
		{name: "WRITE in the window", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(write(a, win(a)+advWinLen-8, w.RKey(), 8))
		}, want: ok},
		{name: "WRITE past the window's end", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(write(a, win(a)+advWinLen-4, w.RKey(), 8))
		}, want: acc},
		{name: "WRITE before the window, within the region", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(write(a, win(a)-8, w.RKey(), 8))
		}, want: acc},
		{name: "WRITE FIRST of a message longer than the window", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(a.req(bth.RCWriteFirst, 0, 256).rethOf(win(a), w.RKey(), advWinLen+256))
		}, want: acc},
		{name: "READ past the window's end", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteRead)
			a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(win(a)+8, w.RKey(), advWinLen))
		}, want: acc},
		{name: "zero-based WRITE past the window's end", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite|verbs.ZeroBased)
			a.inject(write(a, advWinLen-4, w.RKey(), 8))
		}, want: acc},
		{name: "zero-based WRITE at the window's start", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite|verbs.ZeroBased)
			a.inject(write(a, 0, w.RKey(), 8))
		}, want: ok, after: func(a *adversary) {
			got := a.mr.Bytes()[advWinOff : advWinOff+8]
			if !bytes.Equal(got, a.req(bth.RCWriteOnly, 0, 8).payload) {
				a.t.Errorf("the zero-based WRITE did not land at the window's start: %x", got)
			}
		}},
		{name: "atomic without the window's atomic right", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(a.req(bth.RCFetchAdd, 0, 0).atomicOf(win(a), w.RKey(), 1, 0))
		}, want: acc},
		{name: "WRITE with another low byte of the key", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(write(a, win(a), w.RKey()^1, 8))
		}, want: acc},
		{name: "WRITE through an unbound window's key", opts: mw, run: func(a *adversary) {
			w, err := a.pd.AllocMW(verbs.MWType2)
			must(a.t, err)
			a.inject(write(a, win(a), w.RKey(), 8))
		}, want: acc},
		{name: "type 2 window bound through another QP", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, a.otherQP(), verbs.RemoteWrite)
			a.inject(write(a, win(a), w.RKey(), 8))
		}, want: acc},
		{name: "type 1 window bound through another QP", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType1, a.otherQP(), verbs.RemoteWrite)
			a.inject(write(a, win(a), w.RKey(), 8))
		}, want: ok},
		{name: "WRITE after LOCAL_INV", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.localInv(w.RKey())
			a.inject(write(a, win(a), w.RKey(), 8))
		}, want: acc},
		{name: "WRITE after SEND_WITH_INV", opts: advOpts{mwBind: true, recvs: 1}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(sendInv(a, 0, w.RKey()), a.req(bth.RCWriteOnly, 1, 8).rethOf(win(a), w.RKey(), 8).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @0", "ACKNOWLEDGE @1" + nakRemAccess}, wcs: []string{"100 SUCCESS"}, state: verbs.StateErr,
			events: []verbs.EventType{verbs.EventQPAccessErr}, ctrs: map[string]uint64{"sent_rem_access_nak": 1}}},
		{name: "SEND_WITH_INV of a window bound to another QP", opts: advOpts{mwBind: true, recvs: 1}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, a.otherQP(), verbs.RemoteWrite)
			a.inject(sendInv(a, 0, w.RKey()))
			if _, _, _, _, ok := w.Window().Bound(); !ok {
				a.t.Error("the window was invalidated from another QP")
			}
		}, want: errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR")},
		{name: "SEND_WITH_INV of a type 1 window", opts: advOpts{mwBind: true, recvs: 1}, run: func(a *adversary) {
			w := a.window(verbs.MWType1, nil, verbs.RemoteWrite)
			a.inject(sendInv(a, 0, w.RKey()))
		}, want: errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR")},
		{name: "SEND_WITH_INV of a region with a window bound", opts: advOpts{mwBind: true, recvs: 1}, run: func(a *adversary) {
			a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(sendInv(a, 0, a.mr.RKey()))
		}, want: errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR")},
	})
}

// TestAdversaryMWUnderWay: a message through a window that is
// invalidated between its packets: what arrived before stays, the rest
// is refused (a remote access error NAK at the next packet), as rxe's
// responder looks the key up for every packet; a READ answered again
// after the invalidation is refused too.
func TestAdversaryMWUnderWay(t *testing.T) {
	mw := advOpts{mwBind: true}
	runAdvCases(t, []advCase{
		{name: "WRITE LAST after LOCAL_INV", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(a.req(bth.RCWriteFirst, 0, 256).rethOf(a.mr.Addr()+advWinOff, w.RKey(), 512))
			a.localInv(w.RKey())
			a.inject(a.req(bth.RCWriteLast, 1, 256).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @1" + nakRemAccess}, state: verbs.StateErr, changed: true,
			events: []verbs.EventType{verbs.EventQPAccessErr}},
			after: func(a *adversary) {
				got, orig := a.mr.Bytes()[advWinOff:advWinOff+512], a.orig[advWinOff:advWinOff+512]
				if !bytes.Equal(got[:256], a.req(bth.RCWriteFirst, 0, 256).payload) || !bytes.Equal(got[256:], orig[256:]) {
					a.t.Error("want the FIRST packet's bytes in place and the LAST's refused")
				}
				if !bytes.Equal(a.mr.Bytes()[:advWinOff], a.orig[:advWinOff]) || !bytes.Equal(a.mr.Bytes()[advWinOff+512:], a.orig[advWinOff+512:]) {
					a.t.Error("memory outside the message changed")
				}
			}},
		{name: "READ answered again after LOCAL_INV", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteRead)
			r := a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr()+advWinOff, w.RKey(), 16)
			a.inject(r)
			a.localInv(w.RKey())
			a.inject(r)
		}, want: check{sent: []string{"RDMA_READ_RESPONSE_ONLY @0 16B", "ACKNOWLEDGE @0" + nakRemAccess}, state: verbs.StateErr,
			events: []verbs.EventType{verbs.EventQPAccessErr}, ctrs: map[string]uint64{"duplicate_request": 1}}},
	})
}

// TestAdversaryMWRequester: goroce's own requests and windows. A
// window's key is no lkey: a WRITE whose SGE names it fails with
// LOC_PROT_ERR before anything is sent. A bind, which unlike LOCAL_INV
// does not wait for the requests before it, carried out before a rewind
// is not carried out again (a type 2 window bound already would refuse
// it, and a window invalidated since would come back).
func TestAdversaryMWRequester(t *testing.T) {
	mw := advOpts{mwBind: true}
	runAdvCases(t, []advCase{
		{name: "a window's key as an lkey", opts: mw, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteRead)
			a.post(verbs.SendWR{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
				SGL: []verbs.SGE{{Addr: a.mr.Addr() + advWinOff, Length: 8, LKey: w.RKey()}}, RemoteAddr: advRemoteVA, RKey: advRemoteRKey})
		}, want: check{wcs: []string{"1 LOC_PROT_ERR"}, state: verbs.StateErr}},
		{name: "a bind before a rewind is not carried out again", opts: mw, run: func(a *adversary) {
			wi, err := a.pd.AllocMW(verbs.MWType2)
			must(a.t, err)
			w := wi.(*MW)
			a.post(a.write(1, 0, 8), verbs.SendWR{ID: 2, Opcode: verbs.OpBindMW, Flags: verbs.Signaled,
				BindMW: &verbs.BindMW{MW: w, RKey: verbs.IncRKey(w.RKey()), BindInfo: verbs.MWBindInfo{MR: a.mr,
					Addr: a.mr.Addr(), Length: 64, Access: verbs.RemoteRead}}})
			a.inject(a.ackAt(0, bth.NAKSyndrome(bth.NAKPSNSequenceError)))
			a.inject(a.ackAt(0, bth.ACKSyndrome(bth.NoCredits)))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B", "RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS", "2 SUCCESS"},
			state: verbs.StateRTS}},
	})
}
