package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// goroce as the responder of IBTA 1.5's FLUSH and ATOMIC_WRITE, facing a
// hostile requester: every check rxe 6.12's rxe_resp.c makes of them, in
// its order (check_op_valid, check_resource, rxe_resp_check_length,
// check_rkey, then atomic_write_reply's alignment), and their duplicates.

const awValue = 0x1122334455667788

// atomicWrite returns the peer's ATOMIC_WRITE at PSN offset off of the 8
// bytes of v, to va with key k.
func (a *adversary) atomicWrite(off int, va uint64, k uint32, v uint64) *wire {
	w := a.req(bth.RCAtomicWrite, off, 8).rethOf(va, k, 8)
	binary.NativeEndian.PutUint64(w.payload, v)
	return w
}

// flush returns the peer's FLUSH at PSN offset off of n bytes at va with
// key k, at a level and of a placement type.
func (a *adversary) flush(off int, va uint64, k, n uint32, level verbs.FlushLevel, plt verbs.PlacementType) *wire {
	return a.req(bth.RCFlush, off, 0).rethOf(va, k, n).fethOf(level, plt)
}

// landed checks that the 8 bytes of v are at byte off of the peer's
// memory and that the rest is as it was.
func landed(off int, v uint64) func(a *adversary) {
	return func(a *adversary) {
		want := bytes.Clone(a.orig)
		binary.NativeEndian.PutUint64(want[off:], v)
		if !bytes.Equal(a.mr.Bytes(), want) {
			a.t.Errorf("memory: % x at %d, want the 8 bytes of %#x and the rest as it was",
				a.mr.Bytes()[off:off+8], off, v)
		}
	}
}

var (
	emptyRead = "RDMA_READ_RESPONSE_ONLY @0 0B"
	rts       = verbs.StateRTS
)

// TestAdversaryAtomicWrite: what the responder checks of an ATOMIC_WRITE,
// in rxe's order, and where its 8 bytes land.
func TestAdversaryAtomicWrite(t *testing.T) {
	inv := errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak")
	acc := errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak")
	done := check{sent: []string{emptyRead}, state: rts, changed: true}
	runAdvCases(t, []advCase{
		{name: "carried out", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), awValue))
		}, want: done, after: landed(64, awValue)},
		{name: "the MSN counts it", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), awValue))
			a.inject(a.req(bth.RCWriteOnly, 1, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack())
			var p bth.Packet
			for _, s := range a.link.take() {
				must(a.t, p.Parse(s.Data))
				if got := p.AETH.MSN(); got != uint32(p.BTH.PSN().Diff(advRQPSN))+1 {
					a.t.Errorf("%v @%d: MSN %d", p.BTH.Opcode(), p.BTH.PSN().Diff(advRQPSN), got)
				}
			}
		}, want: check{state: rts, changed: true}},
		{name: "on a QP without remote write", opts: advOpts{access: verbs.LocalWrite | verbs.RemoteRead | verbs.RemoteAtomic},
			run: func(a *adversary) { a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue)) }, want: inv},
		{name: "without responder resources", opts: advOpts{noDestRD: true}, run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue))
		}, want: inv},
		{name: "in the middle of a SEND", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendFirst, 0, 256), a.atomicWrite(1, a.mr.Addr(), a.mr.RKey(), awValue))
		}, want: errState(nakInvReq, 1, verbs.EventQPReqErr, "sent_inv_req_nak", "100 REM_INV_REQ_ERR")},
		{name: "longer than the MTU", run: func(a *adversary) {
			a.inject(a.req(bth.RCAtomicWrite, 0, 260).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: inv},
		{name: "with a pad", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue).withPad(1))
		}, want: inv},
		{name: "with an unknown key", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey()^0x100, awValue))
		}, want: acc},
		{name: "to a region without remote write", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.rbuf.Addr(), a.rbuf.RKey(), awValue))
		}, want: acc},
		{name: "to a region of another PD", run: func(a *adversary) {
			m, err := newPD(a.dev).Register(make([]byte, 64), verbs.LocalWrite|verbs.RemoteAccess)
			must(a.t, err)
			a.inject(a.atomicWrite(0, m.Addr(), m.RKey(), awValue))
		}, want: acc},
		{name: "past the region's end", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+advMemLen-4, a.mr.RKey(), awValue))
		}, want: acc},
		{name: "a RETH of 4 bytes", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue).rethOf(a.mr.Addr(), a.mr.RKey(), 4))
		}, want: inv},
		{name: "a RETH of 16 bytes", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue).rethOf(a.mr.Addr(), a.mr.RKey(), 16))
		}, want: inv},
		{name: "4 bytes of payload", run: func(a *adversary) {
			a.inject(a.req(bth.RCAtomicWrite, 0, 4).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
		}, want: inv},
		{name: "a RETH of 0 bytes and an unknown key: the key first", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey()^0x100, awValue).rethOf(a.mr.Addr(), a.mr.RKey()^0x100, 0))
		}, want: acc},
		{name: "a RETH of 0 bytes", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr(), a.mr.RKey(), awValue).rethOf(a.mr.Addr(), a.mr.RKey(), 0))
		}, want: inv},
		{name: "not 8-byte aligned", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+4, a.mr.RKey(), awValue))
		}, want: inv},
		{name: "misaligned past the region's end: the range first", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+advMemLen-4, a.mr.RKey(), awValue))
		}, want: acc},
		{name: "through a type 2 window", opts: advOpts{mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.link.take()
			a.inject(a.atomicWrite(0, a.mr.Addr()+advWinOff+16, w.RKey(), awValue))
		}, want: done, after: landed(advWinOff+16, awValue)},
		{name: "through a zero-based window", opts: advOpts{mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite|verbs.ZeroBased)
			a.inject(a.atomicWrite(0, 24, w.RKey(), awValue))
		}, want: done, after: landed(advWinOff+24, awValue)},
		{name: "through a window without remote write", opts: advOpts{mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteRead)
			a.inject(a.atomicWrite(0, a.mr.Addr()+advWinOff, w.RKey(), awValue))
		}, want: acc},
		{name: "a duplicate is answered again and not carried out again", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), awValue))
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), 7))
		}, want: check{sent: []string{emptyRead, emptyRead}, state: rts, changed: true,
			ctrs: map[string]uint64{"duplicate_request": 1}}, after: landed(64, awValue)},
		{name: "a duplicate of another operation at its PSN is dropped", run: func(a *adversary) {
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), awValue))
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 8, verbs.FlushRange, 0))
		}, want: check{sent: []string{emptyRead}, state: rts, changed: true,
			ctrs: map[string]uint64{"duplicate_request": 1, "drop_duplicate_unknown": 1}}},
		{name: "a duplicate whose resource was reused is dropped", run: func(a *adversary) {
			for i := range 5 { // four resources
				a.inject(a.atomicWrite(i, a.mr.Addr()+64, a.mr.RKey(), awValue+uint64(i)))
			}
			a.link.take()
			a.inject(a.atomicWrite(0, a.mr.Addr()+64, a.mr.RKey(), awValue))
		}, want: check{state: rts, changed: true, ctrs: map[string]uint64{"drop_duplicate_unknown": 1}},
			after: landed(64, awValue+4)},
		{name: "a duplicate SEND after it is acknowledged with its PSN", opts: advOpts{recvs: 1}, run: func(a *adversary) {
			a.inject(a.req(bth.RCSendOnly, 0, 8).ack(), a.atomicWrite(1, a.mr.Addr(), a.mr.RKey(), awValue))
			a.link.take()
			a.inject(a.req(bth.RCSendOnly, 0, 8).ack())
		}, want: check{sent: []string{"ACKNOWLEDGE @1"}, wcs: []string{"100 SUCCESS"}, state: rts, changed: true}},
	})
}

// TestAdversaryFlush: what the responder checks of a FLUSH, in rxe's
// order: the QP's flush rights for its placement type (an invalid
// request), its responder resources, its RETH's length, then the key,
// rights and range of the memory (a remote access error) unless it names
// the whole region. A persistent FLUSH finds no region to reach: goroce's
// memory is not persistent.
func TestAdversaryFlush(t *testing.T) {
	inv := errState(nakInvReq, 0, verbs.EventQPReqErr, "sent_inv_req_nak")
	acc := errState(nakRemAccess, 0, verbs.EventQPAccessErr, "sent_rem_access_nak")
	done := check{sent: []string{emptyRead}, state: rts}
	fl := advOpts{access: verbs.LocalWrite | verbs.RemoteAccess | verbs.FlushGlobal, mrFlush: true}
	flp := fl
	flp.access |= verbs.FlushPersistent
	g := verbs.PlaceGlobal
	runAdvCases(t, []advCase{
		{name: "global, a range", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr()+64, a.mr.RKey(), 256, verbs.FlushRange, g))
		}, want: done},
		{name: "global, the whole region", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, 0, a.mr.RKey(), 0, verbs.FlushMR, g))
		}, want: done},
		{name: "global, a range of 0 bytes", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr()+advMemLen, a.mr.RKey(), 0, verbs.FlushRange, g))
		}, want: done},
		{name: "on a QP without FlushGlobal", opts: advOpts{mrFlush: true}, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g))
		}, want: inv},
		{name: "persistent, on a QP without FlushPersistent", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, verbs.PlacePersistent))
		}, want: inv},
		{name: "global and persistent, on a QP with FlushGlobal only", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g|verbs.PlacePersistent))
		}, want: inv},
		{name: "persistent: no region is persistent", opts: flp, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushMR, verbs.PlacePersistent))
		}, want: acc},
		{name: "of no placement type needs no rights", run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, 0))
		}, want: done},
		{name: "the reserved placement bits need no rights", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g|0xC))
		}, want: done},
		{name: "without responder resources", opts: advOpts{access: fl.access, mrFlush: true, noDestRD: true},
			run:  func(a *adversary) { a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g)) },
			want: inv},
		{name: "of more than 2^31 bytes", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 1<<31+1, verbs.FlushMR, g))
		}, want: inv},
		{name: "in the middle of a WRITE", opts: fl, run: func(a *adversary) {
			a.inject(a.req(bth.RCWriteFirst, 0, 256).rethOf(a.mr.Addr(), a.mr.RKey(), 512),
				a.flush(1, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g))
		}, want: check{sent: []string{"ACKNOWLEDGE @1" + nakInvReq}, state: verbs.StateErr, changed: true,
			events: []verbs.EventType{verbs.EventQPReqErr}}},
		{name: "to a region without FlushGlobal", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.rbuf.Addr(), a.rbuf.RKey(), 64, verbs.FlushRange, g))
		}, want: acc},
		{name: "the whole of a region without FlushGlobal", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.rbuf.Addr(), a.rbuf.RKey(), 64, verbs.FlushMR, g))
		}, want: acc},
		{name: "with an unknown key", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey()^0x100, 64, verbs.FlushRange, g))
		}, want: acc},
		{name: "the whole region of an unknown key", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey()^0x100, 64, verbs.FlushMR, g))
		}, want: acc},
		{name: "to a region of another PD", opts: fl, run: func(a *adversary) {
			m, err := newPD(a.dev).Register(make([]byte, 64), verbs.LocalWrite|verbs.FlushGlobal)
			must(a.t, err)
			a.inject(a.flush(0, m.Addr(), m.RKey(), 64, verbs.FlushMR, g))
		}, want: acc},
		{name: "a range past the region's end", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr()+advMemLen-4, a.mr.RKey(), 8, verbs.FlushRange, g))
		}, want: acc},
		{name: "the whole region, whatever the range says", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr()+advMemLen-4, a.mr.RKey(), 8, verbs.FlushMR, g))
		}, want: done},
		{name: "a reserved level: the range is checked", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr()+advMemLen-4, a.mr.RKey(), 8, 2, g))
		}, want: acc},
		{name: "a reserved level within the region", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 8, 3, g))
		}, want: done},
		{name: "through a window with FlushGlobal", opts: advOpts{access: fl.access, mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.FlushGlobal)
			a.inject(a.flush(0, a.mr.Addr()+advWinOff, w.RKey(), advWinLen, verbs.FlushRange, g))
		}, want: done},
		{name: "past a window's end", opts: advOpts{access: fl.access, mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.FlushGlobal)
			a.inject(a.flush(0, a.mr.Addr()+advWinOff, w.RKey(), advWinLen+1, verbs.FlushRange, g))
		}, want: acc},
		{name: "through a window without it", opts: advOpts{access: fl.access, mwBind: true}, run: func(a *adversary) {
			w := a.window(verbs.MWType2, nil, verbs.RemoteWrite)
			a.inject(a.flush(0, a.mr.Addr()+advWinOff, w.RKey(), 8, verbs.FlushMR, g))
		}, want: acc},
		{name: "a duplicate is answered again", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g))
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g))
		}, want: check{sent: []string{emptyRead, emptyRead}, state: rts, ctrs: map[string]uint64{"duplicate_request": 1}}},
		{name: "a duplicate is answered again after other requests", opts: fl, run: func(a *adversary) {
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g),
				a.req(bth.RCWriteOnly, 1, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack(),
				a.atomicWrite(2, a.mr.Addr()+64, a.mr.RKey(), awValue))
			a.link.take()
			a.inject(a.flush(0, a.mr.Addr(), a.mr.RKey(), 64, verbs.FlushRange, g))
		}, want: check{sent: []string{emptyRead}, state: rts, changed: true}},
		{name: "after the WRITE before it, when that comes again", opts: fl, run: func(a *adversary) {
			// The WRITE @0 is lost: the FLUSH @1 is out of sequence and
			// NAKed; the requester goes back, and the FLUSH is answered
			// only once the WRITE is in the memory.
			wr := a.req(bth.RCWriteOnly, 0, 16).rethOf(a.mr.Addr()+128, a.mr.RKey(), 16)
			a.inject(a.flush(1, a.mr.Addr(), a.mr.RKey(), 0, verbs.FlushMR, g))
			if !bytes.Equal(a.mr.Bytes(), a.orig) {
				a.t.Error("memory changed before the WRITE came")
			}
			a.inject(wr, a.flush(1, a.mr.Addr(), a.mr.RKey(), 0, verbs.FlushMR, g))
			if !bytes.Equal(a.mr.Bytes()[128:144], wr.payload) {
				a.t.Error("the FLUSH was answered before the WRITE was placed")
			}
		}, want: check{sent: []string{"ACKNOWLEDGE @0" + nakSeq, "RDMA_READ_RESPONSE_ONLY @1 0B"}, state: rts,
			changed: true}},
	})
}
