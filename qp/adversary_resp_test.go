package qp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
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
	nakSeq       = " " + bth.NAKSyndrome(bth.NAKPSNSequenceError).String()
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

// TestAdversaryLength: the length and pad of each request packet, and a
// RETH's DMA length, as rxe's check_length and check_rkey check them: a
// FIRST or MIDDLE carries the path MTU and no pad, a LAST 1 byte to the
// MTU, an ONLY up to the MTU, the pad of a LAST or ONLY aligns its
// payload, a message is at most 2^31 bytes. RC answers NAK invalid
// request and goes to ERR; UC drops the message.
func TestAdversaryLength(t *testing.T) {
	const mtu = 256
	inv := func(psn int, wcs ...string) check {
		return errState(nakInvReq, psn, verbs.EventQPReqErr, "sent_inv_req_nak", wcs...)
	}
	wfirst := func(a *adversary) *wire {
		return a.req(bth.RCWriteFirst, 0, mtu).rethOf(a.mr.Addr(), a.mr.RKey(), 2*mtu)
	}
	wonly := func(a *adversary, n int) *wire {
		return a.req(bth.RCWriteOnly, 0, n).rethOf(a.mr.Addr(), a.mr.RKey(), uint32(n)).ack()
	}
	changed := func(c check) check { c.changed = true; return c }
	runAdvCases(t, []advCase{
		{name: "SEND FIRST with a pad", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, mtu).withPad(1))
		}, want: inv(0, "100 REM_INV_REQ_ERR")},
		{name: "SEND MIDDLE with a pad", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, mtu), a.req(bth.RCSendMiddle, 1, mtu).withPad(3))
		}, want: inv(1, "100 REM_INV_REQ_ERR")},
		{name: "SEND MIDDLE shorter than the MTU", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, mtu), a.req(bth.RCSendMiddle, 1, mtu-4))
		}, want: inv(1, "100 REM_INV_REQ_ERR")},
		{name: "SEND LAST empty", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, mtu), a.req(bth.RCSendLast, 1, 0).ack())
		}, want: inv(1, "100 REM_INV_REQ_ERR")},
		{name: "SEND ONLY longer than the MTU", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, mtu+4).ack())
		}, want: inv(0, "100 REM_INV_REQ_ERR")},
		{name: "SEND ONLY with a pad that does not align it", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 5).withPad(0).ack())
		}, want: inv(0, "100 REM_INV_REQ_ERR")},
		{name: "SEND ONLY with the right pad", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 5).withPad(3).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @0"}, wcs: []string{"100 SUCCESS"}, state: verbs.StateRTS}},
		{name: "WRITE FIRST with a pad", run: func(a *adversary) {
			a.inject(wfirst(a).withPad(2))
		}, want: inv(0)},
		{name: "WRITE LAST empty", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteFirst, 0, mtu).rethOf(a.mr.Addr(), a.mr.RKey(), mtu), a.req(bth.RCWriteLast, 1, 0).ack())
		}, want: changed(inv(1))},
		{name: "WRITE LAST with a pad that does not align it", run: func(a *adversary) {
			a.inject(wfirst(a), a.req(bth.RCWriteLast, 1, mtu-3).withPad(0).ack())
		}, want: changed(inv(1))},
		{name: "WRITE ONLY with too much pad", run: func(a *adversary) {
			a.inject(wonly(a, 8).withPad(1))
		}, want: inv(0)},
		{name: "WRITE MIDDLE longer than the MTU", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteFirst, 0, mtu).rethOf(a.mr.Addr(), a.mr.RKey(), 4*mtu), a.req(bth.RCWriteMiddle, 1, mtu+4))
		}, want: changed(inv(1))},
		{name: "WRITE of more than 2^31 bytes", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteFirst, 0, mtu).rethOf(a.mr.Addr(), a.mr.RKey(), 1<<31+1))
		}, want: inv(0)},
		{name: "READ of more than 2^31 bytes", run: func(a *adversary) {
			a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 1<<31+1))
		}, want: inv(0)},
		{name: "UC SEND ONLY with a pad that does not align it", opts: advOpts{typ: verbs.UC, recvs: 2}, run: func(a *adversary) {
			a.inject(a.req(bth.UCSendOnly, 0, 5).withPad(0), a.req(bth.UCSendOnly, 1, 8))
		}, want: check{wcs: []string{"100 SUCCESS"}, state: verbs.StateRTS, ctrs: map[string]uint64{"drop_uc_message": 1}}},
		{name: "UC SEND LAST empty", opts: advOpts{typ: verbs.UC, recvs: 2}, run: func(a *adversary) {
			a.inject(a.req(bth.UCSendFirst, 0, mtu), a.req(bth.UCSendLast, 1, 0), a.req(bth.UCSendOnly, 2, 8))
		}, want: check{wcs: []string{"100 SUCCESS"}, state: verbs.StateRTS, ctrs: map[string]uint64{"drop_uc_message": 1}}},
	})
}

// TestAdversaryNoResponderResources: with max_dest_rd_atomic 0 the
// responder has no resources for READs and atomics, and NAKs them as
// invalid requests (rxe's check_resource); SENDs and WRITEs go on.
func TestAdversaryNoResponderResources(t *testing.T) {
	inv := errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak")
	runAdvCases(t, []advCase{
		{name: "READ", opts: advOpts{noDestRD: true}, run: func(a *adversary) {
			a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 64))
		}, want: inv},
		{name: "FETCH_ADD", opts: advOpts{noDestRD: true}, run: func(a *adversary) {
			a.inject(a.req(bth.RCFetchAdd, 0, 0).atomicOf(a.mr.Addr(), a.mr.RKey(), 1, 0))
		}, want: inv},
		{name: "COMPARE_SWAP", opts: advOpts{noDestRD: true}, run: func(a *adversary) {
			a.inject(a.req(bth.RCCompareSwap, 0, 0).atomicOf(a.mr.Addr(), a.mr.RKey(), 1, 0))
		}, want: inv},
		{name: "WRITE", opts: advOpts{noDestRD: true}, run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @0"}, state: verbs.StateRTS, changed: true}},
	})
}

// TestAdversaryFewerResponderResources: max_dest_rd_atomic lowered in SQD
// (the one transition that allows it) leaves a ring the next READ fits.
func TestAdversaryFewerResponderResources(t *testing.T) {
	a := newAdversary(t, advOpts{})
	for i := range 3 {
		a.inject(a.req(bth.RCReadRequest, i, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
	}
	a.modify(verbs.StateSQD)
	must(t, a.qp.Modify(&verbs.QPAttr{MaxDestRDAtomic: 2}, verbs.AttrMaxDestRDAtomic))
	a.modify(verbs.StateRTS)
	a.inject(a.req(bth.RCReadRequest, 3, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
	a.expect(check{sent: []string{"RDMA_READ_RESPONSE_ONLY @0 8B", "RDMA_READ_RESPONSE_ONLY @1 8B",
		"RDMA_READ_RESPONSE_ONLY @2 8B", "RDMA_READ_RESPONSE_ONLY @3 8B"}, state: verbs.StateRTS})
}

// TestAdversaryRequestChecks: the operation and memory checks of rxe's
// check_op_valid and check_rkey, in its order: an operation the QP does
// not allow is an invalid request; the key,
// protection domain, rights and range of the memory a request names
// (VA + length overflowing 64 bits among them) a remote access error,
// before an atomic's alignment is looked at; a request of zero bytes names
// no memory. The memory is untouched by every failed request.
func TestAdversaryRequestChecks(t *testing.T) {
	inv := errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak")
	acc := errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak")
	other := func(a *adversary, access verbs.Access) *mr.MR {
		m, err := a.pd.pd.Register(make([]byte, 1024), access)
		must(a.t, err)
		return m
	}
	write := func(a *adversary, va uint64, k uint32, n int) *wire {
		return a.req(bth.RCWriteOnly, 0, n).rethOf(va, k, uint32(n)).ack()
	}
	read := func(a *adversary, va uint64, k uint32, n uint32) *wire {
		return a.req(bth.RCReadRequest, 0, 0).rethOf(va, k, n)
	}
	fetchAdd := func(a *adversary, va uint64, k uint32) *wire {
		return a.req(bth.RCFetchAdd, 0, 0).atomicOf(va, k, 1, 0)
	}
	runAdvCases(t, []advCase{
		{name: "WRITE on a QP without remote write", opts: advOpts{access: verbs.LocalWrite | verbs.RemoteRead},
			run: func(a *adversary) { a.inject(write(a, a.mr.Addr(), a.mr.RKey(), 8)) }, want: inv},
		{name: "atomic on a QP without remote atomic", opts: advOpts{access: verbs.LocalWrite | verbs.RemoteRead | verbs.RemoteWrite},
			run: func(a *adversary) { a.inject(fetchAdd(a, a.mr.Addr(), a.mr.RKey())) }, want: inv},
		{name: "WRITE with an unknown key", run: func(a *adversary) {
			a.inject(write(a, a.mr.Addr(), a.mr.RKey()+0x100, 8))
		}, want: acc},
		{name: "WRITE to a region without remote write", run: func(a *adversary) {
			m := other(a, verbs.LocalWrite|verbs.RemoteRead)
			a.inject(write(a, m.Addr(), m.RKey(), 8))
		}, want: acc},
		{name: "WRITE to a region of another PD", run: func(a *adversary) {
			m, err := newPD(a.dev).Register(make([]byte, 64), verbs.LocalWrite|verbs.RemoteAccess)
			must(a.t, err)
			a.inject(write(a, m.Addr(), m.RKey(), 8))
		}, want: acc},
		{name: "WRITE past the region's end", run: func(a *adversary) {
			a.inject(write(a, a.mr.Addr()+advMemLen-4, a.mr.RKey(), 8))
		}, want: acc},
		{name: "WRITE whose VA + length overflows", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteFirst, 0, 256).rethOf(^uint64(0)-255, a.mr.RKey(), 512))
		}, want: acc},
		{name: "WRITE of zero bytes names no memory", run: func(a *adversary) {
			a.inject(write(a, 0, 0xDEAD00, 0))
		}, want: check{sent: []string{"ACKNOWLEDGE @0"}, state: verbs.StateRTS}},
		{name: "WRITE of zero bytes with a payload", run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 0).ack())
		}, want: acc},
		{name: "READ of zero bytes names no memory", run: func(a *adversary) {
			a.inject(read(a, 0, 0xDEAD00, 0))
		}, want: check{sent: []string{"RDMA_READ_RESPONSE_ONLY @0 0B"}, state: verbs.StateRTS}},
		{name: "READ whose VA + length overflows", run: func(a *adversary) {
			a.inject(read(a, ^uint64(0)-7, a.mr.RKey(), 16))
		}, want: acc},
		{name: "READ from a region without remote read", run: func(a *adversary) {
			m := other(a, verbs.LocalWrite|verbs.RemoteWrite)
			a.inject(read(a, m.Addr(), m.RKey(), 8))
		}, want: acc},
		{name: "atomic misaligned", run: func(a *adversary) {
			a.inject(fetchAdd(a, a.mr.Addr()+4, a.mr.RKey()))
		}, want: inv},
		{name: "atomic misaligned with an unknown key", run: func(a *adversary) {
			a.inject(fetchAdd(a, a.mr.Addr()+4, a.mr.RKey()+0x100))
		}, want: acc},
		{name: "atomic on a region without the atomic right", run: func(a *adversary) {
			m := other(a, verbs.LocalWrite|verbs.RemoteRead|verbs.RemoteWrite)
			a.inject(fetchAdd(a, m.Addr(), m.RKey()))
		}, want: acc},
		{name: "atomic past the region's end", run: func(a *adversary) {
			a.inject(fetchAdd(a, a.mr.Addr()+advMemLen, a.mr.RKey()))
		}, want: acc},
		{name: "WRITE MIDDLE after the region was deregistered", run: func(a *adversary) {
			m := other(a, verbs.LocalWrite|verbs.RemoteWrite)
			a.inject(a.req(bth.RCWriteFirst, 0, 256).rethOf(m.Addr(), m.RKey(), 512))
			must(a.t, m.Dereg())
			a.inject(a.req(bth.RCWriteLast, 1, 256).ack())
		}, want: errState(nakRemAccess, 1, verbs.EventQPAccessErr, "sent_rem_access_nak")},
		{name: "SEND with invalidate of an unknown key", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			w := a.req(bth.RCSendOnlyInvalidate, 0, 8).ack()
			w.ieth = 0xDEAD00
			a.inject(w)
		}, want: errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR")},
	})
}

// TestAdversaryDuplicates: requests with a PSN already seen, as rxe's
// duplicate_request handles them. A SEND or WRITE is acknowledged again
// with the PSN acknowledged last (never a READ's: an ACK with a READ's
// PSN completes the READ at rxe's requester) and not carried out again; a
// READ is answered again if a responder resource still remembers it and
// it asks for that READ's memory or part of it with the same key, else
// dropped; an atomic is answered with the value it found, not carried
// out again. A request ahead of the expected PSN gets one sequence NAK,
// then silence until the expected PSN comes.
func TestAdversaryDuplicates(t *testing.T) {
	const mtu = 256
	read := func(a *adversary, off int, va uint64, k, n uint32) *wire {
		return a.req(bth.RCReadRequest, off, 0).rethOf(va, k, n)
	}
	readOnly := func(psn, n int) string {
		return "RDMA_READ_RESPONSE_ONLY @" + strconv.Itoa(psn) + " " + strconv.Itoa(n) + "B"
	}
	dup := map[string]uint64{"duplicate_request": 1}
	dropped := map[string]uint64{"duplicate_request": 1, "drop_duplicate_unknown": 1}
	runAdvCases(t, []advCase{
		{name: "WRITE after a READ is acknowledged with its own PSN", run: func(a *adversary) {
			w := a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
			a.inject(w, read(a, 1, a.mr.Addr(), a.mr.RKey(), 8))
			a.inject(w)
		}, want: check{sent: []string{"ACKNOWLEDGE @0", readOnly(1, 8), "ACKNOWLEDGE @0"}, state: verbs.StateRTS,
			changed: true, ctrs: dup}},
		{name: "SEND is acknowledged and not delivered again", opts: advOpts{recvs: 2}, run: func(a *adversary) {
			w := a.req(bth.RCSendOnly, 0, 8).ack()
			a.inject(w)
			a.inject(w)
		}, want: check{sent: []string{"ACKNOWLEDGE @0", "ACKNOWLEDGE @0"}, wcs: []string{"100 SUCCESS"},
			state: verbs.StateRTS, ctrs: dup}},
		{name: "READ is answered again", run: func(a *adversary) {
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 16))
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 16))
		}, want: check{sent: []string{readOnly(0, 16), readOnly(0, 16)}, state: verbs.StateRTS, ctrs: dup}},
		{name: "READ of the rest of a READ", run: func(a *adversary) {
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 3*mtu))
			a.inject(read(a, 1, a.mr.Addr()+mtu, a.mr.RKey(), 2*mtu))
		}, want: check{sent: []string{"RDMA_READ_RESPONSE_FIRST @0 256B", "RDMA_READ_RESPONSE_MIDDLE @1 256B",
			"RDMA_READ_RESPONSE_LAST @2 256B", "RDMA_READ_RESPONSE_FIRST @1 256B", "RDMA_READ_RESPONSE_LAST @2 256B"},
			state: verbs.StateRTS, ctrs: dup}},
		{name: "READ with another key is dropped", run: func(a *adversary) {
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 16))
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey()+0x100, 16))
		}, want: check{sent: []string{readOnly(0, 16)}, state: verbs.StateRTS, ctrs: dropped}},
		{name: "READ of more than the READ is dropped", run: func(a *adversary) {
			a.inject(read(a, 0, a.mr.Addr()+64, a.mr.RKey(), 16))
			a.inject(read(a, 0, a.mr.Addr()+56, a.mr.RKey(), 16), read(a, 0, a.mr.Addr()+64, a.mr.RKey(), 24))
		}, want: check{sent: []string{readOnly(0, 16)}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"duplicate_request": 2, "drop_duplicate_unknown": 2}}},
		{name: "READ after its region was deregistered", run: func(a *adversary) {
			m, err := a.pd.pd.Register(make([]byte, 64), verbs.LocalWrite|verbs.RemoteRead)
			must(a.t, err)
			a.inject(read(a, 0, m.Addr(), m.RKey(), 16))
			must(a.t, m.Dereg())
			a.inject(read(a, 0, m.Addr(), m.RKey(), 16))
		}, want: check{sent: []string{readOnly(0, 16), "ACKNOWLEDGE @0" + nakRemAccess}, state: verbs.StateErr,
			events: []verbs.EventType{verbs.EventQPAccessErr}, ctrs: dup}},
		{name: "READ whose resource was evicted is dropped", run: func(a *adversary) {
			for i := range 5 { // four responder resources
				a.inject(read(a, i, a.mr.Addr(), a.mr.RKey(), 8))
			}
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 8), read(a, 1, a.mr.Addr(), a.mr.RKey(), 8))
		}, want: check{sent: []string{readOnly(0, 8), readOnly(1, 8), readOnly(2, 8), readOnly(3, 8), readOnly(4, 8), readOnly(1, 8)},
			state: verbs.StateRTS, ctrs: map[string]uint64{"duplicate_request": 2, "drop_duplicate_unknown": 1}}},
		{name: "atomic is answered with the value it found", run: func(a *adversary) {
			w := a.req(bth.RCFetchAdd, 0, 0).atomicOf(a.mr.Addr(), a.mr.RKey(), 1, 0)
			a.inject(w)
			a.inject(w)
		}, want: check{sent: []string{"ATOMIC_ACKNOWLEDGE @0", "ATOMIC_ACKNOWLEDGE @0"}, state: verbs.StateRTS, changed: true, ctrs: dup},
			after: func(a *adversary) {
				got, want := a.mr.Bytes()[:8], a.orig[:8]
				if binary.NativeEndian.Uint64(got) != binary.NativeEndian.Uint64(want)+1 {
					a.t.Errorf("the word is %x, was %x: added more than once", got, want)
				}
			}},
		{name: "out of sequence: one NAK, then silence", run: func(a *adversary) {
			a.inject(read(a, 1, a.mr.Addr(), a.mr.RKey(), 8), read(a, 2, a.mr.Addr(), a.mr.RKey(), 8))
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 8), read(a, 3, a.mr.Addr(), a.mr.RKey(), 8))
		}, want: check{sent: []string{"ACKNOWLEDGE @0" + nakSeq, readOnly(0, 8), "ACKNOWLEDGE @1" + nakSeq},
			state: verbs.StateRTS, ctrs: map[string]uint64{"out_of_seq_request": 3, "drop_after_nak": 1, "send_seq_err": 2}}},
		{name: "beyond SeqNAKWindow: dropped without a NAK", opts: advOpts{seqWindow: 1 << 16}, run: func(a *adversary) {
			for _, off := range []int{1<<16 + 1, 1 << 22, 1<<23 - 1} {
				a.inject(read(a, off, a.mr.Addr(), a.mr.RKey(), 8))
			}
			a.inject(read(a, 1<<16, a.mr.Addr(), a.mr.RKey(), 8)) // the edge: NAKed
			a.inject(read(a, 0, a.mr.Addr(), a.mr.RKey(), 8))
		}, want: check{sent: []string{"ACKNOWLEDGE @0" + nakSeq, readOnly(0, 8)},
			state: verbs.StateRTS, ctrs: map[string]uint64{"out_of_seq_request": 4, "drop_far_psn": 3, "send_seq_err": 1}}},
	})
}

// TestAdversaryHeaderChecks: the checks of rxe_recv.c, each counted by
// its reason and silent: the transport version, the destination QP, the
// opcode's transport against the QP's type, the QP's state, the source
// and destination addresses of a connected QP, the P_Key, the Q_Key of a
// datagram QP. Where a packet fails two, rxe's order decides the count.
func TestAdversaryHeaderChecks(t *testing.T) {
	write := func(a *adversary) *wire {
		return a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
	}
	silent := func(ctr string) check {
		return check{state: verbs.StateRTS, ctrs: map[string]uint64{ctr: 1, "acks_sent": 0}}
	}
	other := netip.MustParseAddr("198.18.0.9")
	dev := func(f func(s Stats) uint64) func(a *adversary) {
		return func(a *adversary) {
			if f(a.dev.Stats()) != 1 {
				a.t.Errorf("device drops %+v", a.dev.Stats())
			}
		}
	}
	runAdvCases(t, []advCase{
		{name: "transport version 1", run: func(a *adversary) { a.inject(write(a).withTVer(1)) },
			want: check{state: verbs.StateRTS}, after: dev(func(s Stats) uint64 { return s.DropTVer })},
		{name: "unknown QP", run: func(a *adversary) { a.inject(write(a).withDestQP(0x123456)) },
			want: check{state: verbs.StateRTS}, after: dev(func(s Stats) uint64 { return s.DropNoQP })},
		{name: "QP 0", run: func(a *adversary) { a.inject(write(a).withDestQP(0)) },
			want: check{state: verbs.StateRTS}, after: dev(func(s Stats) uint64 { return s.DropNoQP })},
		{name: "UC opcode to an RC QP", run: func(a *adversary) {
			a.inject(a.req(bth.UCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: silent("drop_bad_transport")},
		{name: "UD opcode to an RC QP", run: func(a *adversary) {
			a.inject(a.req(bth.UDSendOnly, 0, 8).withQKey(advQKey))
		}, want: silent("drop_bad_transport")},
		{name: "CNP to an RC QP", run: func(a *adversary) { a.inject(a.req(bth.CNP, 0, 0)) },
			want: silent("rp_cnp_handled")},
		{name: "CNP from another address", run: func(a *adversary) { a.inject(a.req(bth.CNP, 0, 0).from(other)) },
			want: silent("drop_bad_addr")},
		{name: "CNP to a UD QP", opts: advOpts{typ: verbs.UD}, run: func(a *adversary) { a.inject(a.req(bth.CNP, 0, 0)) },
			want: silent("drop_bad_transport")},
		{name: "RC opcode to a UD QP", opts: advOpts{typ: verbs.UD, recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 8))
		}, want: silent("drop_bad_transport")},
		{name: "request after ERR", run: func(a *adversary) {
			a.modify(verbs.StateErr)
			a.inject(write(a))
		}, want: check{state: verbs.StateErr, ctrs: map[string]uint64{"drop_bad_state": 1}}},
		{name: "request in INIT", run: func(a *adversary) {
			a.modify(verbs.StateReset)
			must(a.t, a.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.RemoteAccess},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
			a.inject(write(a))
		}, want: check{state: verbs.StateInit, ctrs: map[string]uint64{"drop_bad_state": 1}}},
		{name: "wrong source address", run: func(a *adversary) { a.inject(write(a).from(other)) },
			want: silent("drop_bad_addr")},
		{name: "wrong destination address", run: func(a *adversary) { a.inject(write(a).to(other)) },
			want: silent("drop_bad_addr")},
		{name: "bad P_Key", run: func(a *adversary) { a.inject(write(a).withPKey(0x1234)) },
			want: silent("drop_bad_pkey")},
		{name: "bad P_Key from the wrong address counts the address", run: func(a *adversary) {
			a.inject(write(a).withPKey(0x1234).from(other))
		}, want: check{state: verbs.StateRTS, ctrs: map[string]uint64{"drop_bad_addr": 1, "drop_bad_pkey": 0}}},
		{name: "P_Key of a limited member", run: func(a *adversary) { a.inject(write(a).withPKey(0x7FFF)) },
			want: check{sent: []string{"ACKNOWLEDGE @0"}, state: verbs.StateRTS, changed: true}},
		{name: "UD bad Q_Key", opts: advOpts{typ: verbs.UD, recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.UDSendOnly, 0, 8).withQKey(advQKey+1), a.req(bth.UDSendOnly, 1, 8).withQKey(advQKey))
		}, want: check{wcs: []string{"100 SUCCESS"}, state: verbs.StateRTS, ctrs: map[string]uint64{"drop_bad_qkey": 1}}},
		{name: "UD from any address", opts: advOpts{typ: verbs.UD, recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.UDSendOnly, 0, 8).withQKey(advQKey).from(other))
		}, want: check{wcs: []string{"100 SUCCESS"}, state: verbs.StateRTS}},
	})
}

// TestAdversaryResponseHeaderChecks: a response that fails a header check
// is dropped as a request is, and what it would have answered stays
// outstanding.
func TestAdversaryResponseHeaderChecks(t *testing.T) {
	other := netip.MustParseAddr("198.18.0.9")
	cases := []struct {
		name string
		bad  func(w *wire) *wire
		ctr  string
	}{
		{"bad P_Key", func(w *wire) *wire { return w.withPKey(0x1234) }, "drop_bad_pkey"},
		{"wrong source address", func(w *wire) *wire { return w.from(other) }, "drop_bad_addr"},
		{"wrong destination address", func(w *wire) *wire { return w.to(other) }, "drop_bad_addr"},
	}
	var adv []advCase
	for _, c := range cases {
		adv = append(adv, advCase{name: c.name, run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.inject(c.bad(a.ackAt(0, bth.NAKSyndrome(bth.NAKInvalidRequest))), a.ackAt(0, bth.ACKSyndrome(bth.NoCredits)))
		}, want: check{sent: []string{"RDMA_WRITE_ONLY @0 8B"}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{c.ctr: 1}}})
	}
	runAdvCases(t, adv)
}

// TestAdversaryReceiveQueue: a SEND, or a WRITE with immediate, that finds
// no receive gets an RNR NAK with the QP's min_rnr_timer and changes
// nothing; sent again once a receive is posted, it is carried out. An SRQ
// that falls below its limit raises SRQ_LIMIT_REACHED, once.
func TestAdversaryReceiveQueue(t *testing.T) {
	rnr := "ACKNOWLEDGE @0 " + bth.RNRNAKSyndrome(1).String()
	runAdvCases(t, []advCase{
		{name: "SEND without a receive", run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 8).ack())
			a.postRecv(5, 0, 64)
			a.inject(a.req(bth.RCSendOnly, 0, 8).ack())
		}, want: check{sent: []string{rnr, "ACKNOWLEDGE @0"}, wcs: []string{"5 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"send_rnr_err": 1, "rdma_recvs": 1}}},
		{name: "WRITE with immediate without a receive", run: func(a *adversary) {
			w := a.req(bth.RCWriteOnlyImm, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
			a.inject(w)
			if !bytes.Equal(a.mr.Bytes(), a.orig) {
				a.t.Error("the WRITE was carried out before its RNR NAK")
			}
			a.postRecv(5, 0, 64)
			a.inject(w)
		}, want: check{sent: []string{rnr, "ACKNOWLEDGE @0"}, wcs: []string{"5 SUCCESS"}, state: verbs.StateRTS,
			changed: true, ctrs: map[string]uint64{"send_rnr_err": 1}}},
		{name: "SEND FIRST without a receive on an SRQ", opts: advOpts{srq: true}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, 256))
		}, want: check{sent: []string{rnr}, state: verbs.StateRTS, ctrs: map[string]uint64{"send_rnr_err": 1}}},
		{name: "SRQ below its limit", opts: advOpts{srq: true, recvs: 3, srqLimit: 2}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 8), a.req(bth.RCSendOnly, 1, 8), a.req(bth.RCSendOnly, 2, 8).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @2"}, wcs: []string{"100 SUCCESS", "101 SUCCESS", "102 SUCCESS"},
			state: verbs.StateRTS, events: []verbs.EventType{verbs.EventSRQLimitReached}}},
	})
}

// TestAdversaryRequestPSN: the responder's PSN edges. A request before
// the expected PSN is a duplicate, even one never seen (the starting PSN
// - 1): a WRITE there is acknowledged again with the PSN before the
// first, and not carried out; a READ there finds no resource and is
// dropped. Requests cross the 24-bit wrap in sequence. A PSN up to 2^23 -
// 1 ahead is out of sequence, one 2^23 away is in the past.
func TestAdversaryRequestPSN(t *testing.T) {
	write := func(a *adversary, off int) *wire {
		return a.req(bth.RCWriteOnly, off, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
	}
	runAdvCases(t, []advCase{
		{name: "WRITE for the starting PSN - 1", run: func(a *adversary) { a.inject(write(a, -1)) },
			want: check{sent: []string{"ACKNOWLEDGE @-1"}, state: verbs.StateRTS, ctrs: map[string]uint64{"duplicate_request": 1}}},
		{name: "READ for the starting PSN - 1", run: func(a *adversary) {
			a.inject(a.req(bth.RCReadRequest, -1, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: check{state: verbs.StateRTS, ctrs: map[string]uint64{"duplicate_request": 1, "drop_duplicate_unknown": 1}}},
		{name: "across the 24-bit wrap", run: func(a *adversary) {
			a.inject(write(a, 0), write(a, 1), write(a, 2), write(a, 3))
		}, want: check{sent: []string{"ACKNOWLEDGE @3"}, state: verbs.StateRTS, changed: true, ctrs: map[string]uint64{"ack_deferred": 3}}},
		{name: "2^23 - 1 ahead", run: func(a *adversary) { a.inject(write(a, 1<<23-1)) },
			want: check{sent: []string{"ACKNOWLEDGE @0" + nakSeq}, state: verbs.StateRTS, ctrs: map[string]uint64{"out_of_seq_request": 1}}},
		{name: "2^23 away", run: func(a *adversary) { a.inject(write(a, 1<<23)) },
			want: check{sent: []string{"ACKNOWLEDGE @-1"}, state: verbs.StateRTS, ctrs: map[string]uint64{"duplicate_request": 1}}},
	})
}
