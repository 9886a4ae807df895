package qp

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// IBTA 1.5's FLUSH and ATOMIC_WRITE, as kernel rxe (6.2 and later) runs
// them: the requester sends each as one packet of one PSN (a FLUSH with a
// FETH and a RETH and no payload, an ATOMIC_WRITE with a RETH and the 8
// bytes), counted against max_rd_atomic; the responder carries it out
// with a responder resource, and answers it with an RDMA READ Response
// Only that carries no payload; the completer takes that response, or
// any ACK past it, as the request's completion.

// Caps returns the device's capabilities (ibv_query_device_ex's
// device_cap_flags_ex): RNR NAKs, type 2 memory windows, FLUSH of the
// global placement type and ATOMIC_WRITE. FLUSH of the persistent
// placement type is not one: goroce's memory is not persistent, and no
// region takes FlushPersistent (a peer's persistent FLUSH is NAKed as a
// remote access error, as rxe's is for memory that is not pmem).
func (d *Device) Caps() verbs.DeviceCap {
	if d == nil {
		return 0
	}
	return verbs.CapRCRNRNAKGen | verbs.CapMemWindow | verbs.CapMemWindowType2B | verbs.CapFlushGlobal |
		verbs.CapAtomicWrite
}

// isFlushOrAtomicWrite reports whether op is FLUSH or ATOMIC_WRITE: one
// packet, answered by an empty READ response or any later ACK.
func isFlushOrAtomicWrite(op verbs.WROpcode) bool {
	return op == verbs.OpFlush || op == verbs.OpAtomicWrite
}

// checkFlushWR checks a FLUSH or ATOMIC_WRITE as it is posted: neither
// takes SGEs or inline data (ATOMIC_WRITE's 8 bytes are in CompareAdd, as
// ibv_wr_atomic_write copies them at post time), and a FLUSH's placement
// type and level are ones the IBTA defines.
func checkFlushWR(wr *verbs.SendWR) error {
	if len(wr.SGL) != 0 || wr.Flags&verbs.Inline != 0 {
		what := "the 8 bytes it writes are SendWR.CompareAdd"
		if wr.Opcode == verbs.OpFlush {
			what = "it carries no data"
		}
		return fmt.Errorf("%w: %v takes no SGEs and no inline data: %s", verbs.ErrInvalidWR, wr.Opcode, what)
	}
	if wr.Opcode != verbs.OpFlush {
		return nil
	}
	if wr.Flush.Type&^(verbs.PlaceGlobal|verbs.PlacePersistent) != 0 {
		return fmt.Errorf("%w: FLUSH placement type %v: use PlaceGlobal, PlacePersistent or both",
			verbs.ErrInvalidWR, wr.Flush.Type)
	}
	if wr.Flush.Level != verbs.FlushRange && wr.Flush.Level != verbs.FlushMR {
		return fmt.Errorf("%w: FLUSH level %v: use FlushRange or FlushMR", verbs.ErrInvalidWR, wr.Flush.Level)
	}
	return nil
}

// emitFlush sends the one packet of a FLUSH or ATOMIC_WRITE, asking for
// its answer, as rxe does. The RETH of a FLUSH names the memory it
// flushes (rxe sends the address and length it was given at either
// level); that of an ATOMIC_WRITE the 8 bytes it writes.
func (q *QP) emitFlush(w *sendWQE, b *txBatch) bool {
	if q.windowFull(1) {
		return false
	}
	op, n, dmaLen := bth.RCFlush, 0, w.wr.Flush.Len
	if w.wr.Opcode == verbs.OpAtomicWrite {
		op, n, dmaLen = bth.RCAtomicWrite, 8, 8
	}
	buf := b.buf()
	var p bth.Packet
	size := p.Build(buf, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: q.attr.DestQPN,
		PSN: q.req.psn, AckReq: true}, n)
	p.RETH.Encode(&bth.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: dmaLen})
	if p.FETH != nil {
		p.FETH.Encode(&bth.FETHFields{Selectivity: uint8(w.wr.Flush.Level), Placement: uint8(w.wr.Flush.Type)})
	} else {
		binary.NativeEndian.PutUint64(p.Payload, w.wr.CompareAdd)
	}
	b.add(size, q.dest, q.sport, q.dataTOS())
	if op == bth.RCFlush {
		b.pkts[len(b.pkts)-1].RXEFlushICRC = q.flushICRC(w)
	}
	q.countSent(true, size)
	q.req.sinceAckReq = 0
	w.state = wqeSent
	return true
}

// flushICRC chooses the ICRC of FLUSH w as it goes out, and reports
// whether it is rxe's (bth.FlushICRCRXE). rxe drops a FLUSH with the
// IBTA's ICRC and a peer that follows the IBTA would drop one with rxe's,
// so a FLUSH goes with the style the QP last used (rxe's once its peer
// sent a FLUSH with it: recv.go), and each time it goes again, with the
// other: a peer of either kind answers by the second try.
func (q *QP) flushICRC(w *sendWQE) bool {
	if w.flushTries++; w.flushTries > 1 {
		q.req.flushRXE = !q.req.flushRXE
	}
	return q.req.flushRXE
}

// wcByteLen is the byte_len of a send completion: the bytes the request
// moved, and for a FLUSH the length it asked for, as rxe reports them.
func wcByteLen(w *sendWQE) uint32 {
	switch w.wr.Opcode {
	case verbs.OpFlush:
		return w.wr.Flush.Len
	case verbs.OpAtomicWrite:
		return 8
	}
	return uint32(w.length)
}

// handleFlushResponse takes a READ response to a FLUSH or ATOMIC_WRITE,
// w, the oldest request not complete: an RDMA READ Response Only with an
// ACK and no payload completes it (and everything before it); a response
// with data is LOC_PROT_ERR, as rxe finds data with nowhere to go; any
// other is BAD_RESP_ERR.
func (q *QP) handleFlushResponse(p *bth.Packet, psn bth.PSN, w *sendWQE, b *txBatch) {
	switch {
	case p.Info.Position != bth.PosOnly || p.AETH.Syndrome().Kind() != bth.KindACK:
		q.failWQE(w, verbs.BadRespErr, b)
	case len(p.Payload) != 0:
		q.failWQE(w, verbs.LocProtErr, b)
	default:
		q.ackTo(psn, b)
	}
}

// flushAccess returns the rights a FLUSH of placement type plt needs, of
// the QP and of the memory (rxe's check_qp_attr_access and check_rkey).
// The bits the IBTA reserves need none.
func flushAccess(plt uint8) verbs.Access {
	var a verbs.Access
	if plt&uint8(verbs.PlaceGlobal) != 0 {
		a |= verbs.FlushGlobal
	}
	if plt&uint8(verbs.PlacePersistent) != 0 {
		a |= verbs.FlushPersistent
	}
	return a
}

// receiveFlush carries out a FLUSH, checked as rxe's check_rkey checks it:
// the key must reach the memory with the rights of the placement type,
// and at every level but FlushMR the RETH's range too (rxe checks the
// range of the two levels the IBTA reserves, and then flushes the whole
// region for them); a failure is a remote access error NAK.
//
// Every WRITE and atomic before the FLUSH on this QP was copied into its
// memory before the FLUSH was taken (the responder carries requests out
// in PSN order, each to the end), so the FLUSH has nothing left to wait
// for; taking the region's lock orders it after them for any other
// reader. It is answered with an empty RDMA READ Response Only.
func (q *QP) receiveFlush(p *bth.Packet, psn bth.PSN, b *txBatch) {
	fe, f := p.FETH.Fields(), p.RETH.Fields()
	want := flushAccess(fe.Placement)
	var m *mr.MR
	var err error
	if fe.Selectivity == uint8(verbs.FlushMR) {
		m, err = q.dev.mrs.LookupRemoteRegion(q.pd, q.id, f.RKey, want)
	} else {
		m, _, err = q.dev.mrs.LookupRemote(q.pd, q.id, f.RKey, f.VA, f.DMALen, want)
	}
	if err != nil {
		q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, "FLUSH: "+err.Error())
		return
	}
	m.Release(q.id)
	q.finishFlush(resFlush, psn, b)
}

// receiveAtomicWrite carries out an ATOMIC_WRITE in rxe's order: the
// key, rights (remote write) and range of the RETH, a remote access
// error NAK if they fail; then exactly 8 bytes in the RETH and the
// payload, with no pad (IBTA oA19-28), and an 8-byte aligned address,
// else an invalid request NAK. The 8 bytes land in one store, under the
// device's atomic lock so that no CMP_AND_SWP or FETCH_AND_ADD of the
// device comes between its read and its write.
func (q *QP) receiveAtomicWrite(p *bth.Packet, psn bth.PSN, b *txBatch) {
	f := p.RETH.Fields()
	m, mem, err := q.dev.mrs.LookupRemote(q.pd, q.id, f.RKey, f.VA, f.DMALen, verbs.RemoteWrite)
	if err != nil {
		q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, "ATOMIC_WRITE: "+err.Error())
		return
	}
	var why string
	switch {
	case f.DMALen != 8 || len(p.Payload) != 8 || p.BTH.PadCount() != 0:
		why = "ATOMIC_WRITE of other than 8 bytes"
	case f.VA%8 != 0:
		why = "ATOMIC_WRITE not 8-byte aligned"
	}
	if why != "" {
		m.Release(q.id)
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, why)
		return
	}
	v := binary.NativeEndian.Uint64(p.Payload)
	q.dev.atomicMu.Lock()
	if ptr := unsafe.Pointer(unsafe.SliceData(mem)); uintptr(ptr)%8 == 0 {
		atomic.StoreUint64((*uint64)(ptr), v)
	} else {
		// A region registered at an address of its own (RegisterIOVA)
		// may put an aligned address on memory that is not: the bytes
		// go in one copy, atomic against the device's atomics only.
		binary.NativeEndian.PutUint64(mem, v)
	}
	q.dev.atomicMu.Unlock()
	m.Release(q.id)
	q.finishFlush(resAtomicWrite, psn, b)
}

// finishFlush ends a FLUSH or ATOMIC_WRITE carried out: a responder
// resource remembers it for its duplicates, the MSN counts it, and the
// empty READ response answers it. Its PSN is the one a duplicate SEND or
// WRITE is acknowledged with (rxe's ack_psn).
func (q *QP) finishFlush(kind resKind, psn bth.PSN, b *txBatch) {
	q.saveResource(readResource{valid: true, kind: kind, firstPSN: psn, npsn: 1})
	q.resp.msn++
	q.resp.psn, q.resp.ackedPSN = psn.Next(), psn
	q.sendEmptyReadResponse(b, psn)
}

// sendEmptyReadResponse answers psn with an RDMA READ Response Only of no
// payload, the answer of a FLUSH and an ATOMIC_WRITE.
func (q *QP) sendEmptyReadResponse(b *txBatch, psn bth.PSN) {
	q.sendReadResponses(b, psn, &bth.RETHFields{})
}

// resKind is what a responder resource remembers.
type resKind uint8

const (
	resRead resKind = iota
	resAtomic
	resAtomicWrite
	resFlush
)
