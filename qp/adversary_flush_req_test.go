package qp

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// goroce as the requester of FLUSH and ATOMIC_WRITE, facing a hostile
// responder.

// flushWR returns a signaled FLUSH of n bytes at the peer's memory.
func (a *adversary) flushWR(id uint64, n uint32, level verbs.FlushLevel, plt verbs.PlacementType) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpFlush, Flags: verbs.Signaled, RemoteAddr: advRemoteVA,
		RKey: advRemoteRKey, Flush: verbs.FlushWR{Len: n, Type: plt, Level: level}}
}

// atomicWriteWR returns a signaled ATOMIC_WRITE of the 8 bytes of v.
func (a *adversary) atomicWriteWR(id uint64, v uint64) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpAtomicWrite, Flags: verbs.Signaled, RemoteAddr: advRemoteVA,
		RKey: advRemoteRKey, CompareAdd: v}
}

// emptyReadAt returns the peer's empty RDMA READ Response Only at
// goroce's PSN offset off: the answer of a FLUSH or an ATOMIC_WRITE.
func (a *adversary) emptyReadAt(off int) *wire { return a.resp(bth.RCReadResponseOnly, off, 0) }

// TestAdversaryFlushRequester: how goroce's requester sends FLUSH and
// ATOMIC_WRITE and takes their answers, as rxe's requester and completer
// do: an empty READ response or any ACK at or past the request completes
// it; a response that does not fit fails it; a NAK fails it with its
// status; timeouts and sequence NAKs send it again with its PSN; both
// count against max_rd_atomic and a fence waits for them.
func TestAdversaryFlushRequester(t *testing.T) {
	const fl, aw = "FLUSH @0", "ATOMIC_WRITE @0 8B"
	w := func(psn string) string { return "RDMA_WRITE_ONLY @" + psn + " 8B" }
	g := verbs.PlaceGlobal
	ok := func(sent []string, wcs ...string) check { return check{sent: sent, wcs: wcs, state: verbs.StateRTS} }
	failed := func(sent, wcs []string) check { return check{sent: sent, wcs: wcs, state: verbs.StateErr} }
	runAdvCases(t, []advCase{
		{name: "ATOMIC_WRITE completes on its empty READ response", run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, awValue))
			a.inject(a.emptyReadAt(0))
		}, want: ok([]string{aw}, "1 SUCCESS")},
		{name: "FLUSH completes on its empty READ response", run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushRange, g))
			a.inject(a.emptyReadAt(0))
		}, want: ok([]string{fl}, "1 SUCCESS")},
		{name: "an ACK completes a FLUSH", run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushMR, g))
			a.inject(a.ackAt(0, synACK))
		}, want: ok([]string{fl}, "1 SUCCESS")},
		{name: "an ACK past them completes both, their answers lost", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.flushWR(2, 64, verbs.FlushRange, g), a.atomicWriteWR(3, 1), a.write(4, 0, 8))
			a.inject(a.ackAt(3, synACK))
		}, want: ok([]string{w("0"), "FLUSH @1", "ATOMIC_WRITE @2 8B", w("3")}, "1 SUCCESS", "2 SUCCESS", "3 SUCCESS",
			"4 SUCCESS")},
		{name: "a READ response with data is LOC_PROT_ERR", run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushRange, g), a.write(2, 0, 8))
			a.inject(a.resp(bth.RCReadResponseOnly, 0, 8))
		}, want: failed([]string{fl, w("1")}, []string{"1 LOC_PROT_ERR", "2 WR_FLUSH_ERR"})},
		{name: "a READ response FIRST is BAD_RESP_ERR", run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, 1))
			a.inject(a.resp(bth.RCReadResponseFirst, 0, 256))
		}, want: failed([]string{aw}, []string{"1 BAD_RESP_ERR"})},
		{name: "a READ response with a NAK is BAD_RESP_ERR", run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushRange, g))
			a.inject(a.emptyReadAt(0).withSyn(synAccess))
		}, want: failed([]string{fl}, []string{"1 BAD_RESP_ERR"})},
		{name: "an atomic ACK to an ATOMIC_WRITE is BAD_RESP_ERR", run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, 1))
			a.inject(a.resp(bth.RCAtomicAcknowledge, 0, 0))
		}, want: failed([]string{aw}, []string{"1 BAD_RESP_ERR"})},
		{name: "a remote access NAK", run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushRange, g))
			a.inject(a.ackAt(0, synAccess))
		}, want: failed([]string{fl}, []string{"1 REM_ACCESS_ERR"})},
		{name: "an invalid request NAK", run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, 1))
			a.inject(a.ackAt(0, synInvReq))
		}, want: failed([]string{aw}, []string{"1 REM_INV_REQ_ERR"})},
		{name: "a timeout sends it again with its PSN", run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, 1))
			a.fire()
			a.inject(a.emptyReadAt(0))
		}, want: check{sent: []string{aw, aw}, wcs: []string{"1 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"completer_retry_err": 1}}},
		{name: "retry_cnt 0: the first timeout fails it", opts: advOpts{retry: u8(0)}, run: func(a *adversary) {
			a.post(a.flushWR(1, 64, verbs.FlushRange, g))
			a.fire()
		}, want: failed([]string{fl}, []string{"1 RETRY_EXC_ERR"})},
		{name: "a sequence NAK at the FLUSH sends it again", run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.flushWR(2, 64, verbs.FlushRange, g))
			a.inject(a.ackAt(1, synSeq))
			a.inject(a.emptyReadAt(1))
		}, want: ok([]string{w("0"), "FLUSH @1", "FLUSH @1"}, "1 SUCCESS", "2 SUCCESS")},
		{name: "its answer after a READ whose response was lost", run: func(a *adversary) {
			a.post(a.read(1, 0, 8), a.flushWR(2, 64, verbs.FlushRange, g))
			a.inject(a.emptyReadAt(1))
			a.inject(a.resp(bth.RCReadResponseOnly, 0, 8), a.emptyReadAt(1))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "FLUSH @1", "RDMA_READ_REQUEST @0", "FLUSH @1"},
			wcs: []string{"1 SUCCESS", "2 SUCCESS"}, state: verbs.StateRTS, lfrom: 8}},
		{name: "max_rd_atomic 1: one at a time", opts: advOpts{rdAtomic: 1}, run: func(a *adversary) {
			a.post(a.atomicWriteWR(1, 1), a.flushWR(2, 64, verbs.FlushRange, g), a.write(3, 0, 8))
			if got := a.sent(); len(got) != 1 || got[0] != aw {
				a.t.Errorf("sent %q before the answer", got)
			}
			a.inject(a.emptyReadAt(0))
			a.inject(a.emptyReadAt(1), a.ackAt(2, synACK))
		}, want: ok([]string{"FLUSH @1", w("2")}, "1 SUCCESS", "2 SUCCESS", "3 SUCCESS")},
		{name: "a fence waits for an ATOMIC_WRITE", run: func(a *adversary) {
			fenced := a.write(2, 0, 8)
			fenced.Flags |= verbs.Fence
			a.post(a.atomicWriteWR(1, 1), fenced)
			if got := a.sent(); len(got) != 1 {
				a.t.Errorf("sent %q before the answer", got)
			}
			a.inject(a.emptyReadAt(0), a.ackAt(1, synACK))
		}, want: ok([]string{w("1")}, "1 SUCCESS", "2 SUCCESS")},
	})
}

// TestFlushRequestOnWire: the packets of a FLUSH and an ATOMIC_WRITE as
// rxe's requester builds them (a FETH and a RETH with the address, key
// and length given, no payload; a RETH of 8 bytes and the 8 bytes as
// they lie in memory), each asking for its answer; and their completions'
// opcodes and lengths.
func TestFlushRequestOnWire(t *testing.T) {
	a := newAdversary(t, advOpts{})
	a.post(a.flushWR(1, 300, verbs.FlushMR, verbs.PlaceGlobal|verbs.PlacePersistent), a.atomicWriteWR(2, awValue))
	pkts := a.link.take()
	if len(pkts) != 2 {
		t.Fatalf("%d packets, want 2", len(pkts))
	}
	var f, w bth.Packet
	must(t, f.Parse(pkts[0].Data))
	must(t, w.Parse(pkts[1].Data))
	if f.BTH.Opcode() != bth.RCFlush || !f.BTH.AckReq() || f.BTH.PSN() != advSQPSN || len(f.Payload) != 0 ||
		f.FETH.Fields() != (bth.FETHFields{Selectivity: 1, Placement: 3}) ||
		f.RETH.Fields() != (bth.RETHFields{VA: advRemoteVA, RKey: advRemoteRKey, DMALen: 300}) {
		t.Errorf("FLUSH: %v ack %v psn %v FETH %+v RETH %+v payload %d", f.BTH.Opcode(), f.BTH.AckReq(), f.BTH.PSN(),
			f.FETH.Fields(), f.RETH.Fields(), len(f.Payload))
	}
	var want [8]byte
	binary.NativeEndian.PutUint64(want[:], awValue)
	if w.BTH.Opcode() != bth.RCAtomicWrite || !w.BTH.AckReq() || w.BTH.PSN() != advSQPSN.Next() ||
		w.RETH.Fields() != (bth.RETHFields{VA: advRemoteVA, RKey: advRemoteRKey, DMALen: 8}) ||
		string(w.Payload) != string(want[:]) || w.BTH.PadCount() != 0 {
		t.Errorf("ATOMIC_WRITE: %v ack %v psn %v RETH %+v payload % x", w.BTH.Opcode(), w.BTH.AckReq(), w.BTH.PSN(),
			w.RETH.Fields(), w.Payload)
	}
	a.inject(a.emptyReadAt(0), a.emptyReadAt(1))
	wcs := make([]verbs.WC, 4)
	if n := a.cq.Poll(wcs); n != 2 {
		t.Fatalf("%d completions", n)
	}
	for i, want := range []verbs.WC{{ID: 1, Opcode: verbs.WCFlush, ByteLen: 300}, {ID: 2, Opcode: verbs.WCAtomicWrite, ByteLen: 8}} {
		want.QPN = a.qp.QPN()
		if wcs[i] != want {
			t.Errorf("completion %v, want %v", &wcs[i], &want)
		}
	}
}

// TestFlushPostChecks: what a post refuses of a FLUSH or ATOMIC_WRITE.
func TestFlushPostChecks(t *testing.T) {
	a := newAdversary(t, advOpts{})
	uc := newAdversary(t, advOpts{typ: verbs.UC})
	withSGE := a.atomicWriteWR(1, 1)
	withSGE.SGL = []verbs.SGE{sge(a.lbuf, 0, 8)}
	inline := a.flushWR(1, 8, verbs.FlushRange, verbs.PlaceGlobal)
	inline.Flags |= verbs.Inline
	for _, c := range []struct {
		name string
		qp   *QP
		wr   verbs.SendWR
		says string
	}{
		{"ATOMIC_WRITE with an SGE", a.qp, withSGE, "CompareAdd"},
		{"FLUSH inline", a.qp, inline, "no data"},
		{"FLUSH of a reserved placement type", a.qp, a.flushWR(1, 8, verbs.FlushRange, 4), "placement type"},
		{"FLUSH of a reserved level", a.qp, a.flushWR(1, 8, 2, verbs.PlaceGlobal), "FLUSH level"},
		{"FLUSH on UC", uc.qp, a.flushWR(1, 8, verbs.FlushRange, verbs.PlaceGlobal), "UC QP"},
		{"ATOMIC_WRITE on UC", uc.qp, a.atomicWriteWR(1, 1), "UC QP"},
	} {
		err := c.qp.PostSend([]verbs.SendWR{c.wr})
		if !errors.Is(err, verbs.ErrInvalidWR) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if got := a.link.take(); len(got) != 0 {
		t.Errorf("%d packets sent for refused requests", len(got))
	}
}
