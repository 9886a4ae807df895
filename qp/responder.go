package qp

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// PostRecv posts receive work requests to the QP's own receive queue.
func (q *QP) PostRecv(wrs []verbs.RecvWR) error {
	if !q.ok() {
		return errNilQP
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("%w: PostRecv on QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	}
	if q.srq != nil {
		return fmt.Errorf("%w: post its receives to the SRQ", verbs.ErrHasSRQ)
	}
	if q.state == verbs.StateReset {
		return fmt.Errorf("%w: post receive in RESET: move the QP to INIT first (roce.ModifyToInit)", verbs.ErrInvalidState)
	}
	for i := range wrs {
		if err := checkRecvWR(&wrs[i], q.rq.maxSGE); err != nil {
			return &verbs.PostError{Index: i, Err: err}
		}
		if q.rq.full() {
			return &verbs.PostError{Index: i, Err: fmt.Errorf("%w: %d receives posted: wait for completions, "+
				"or create the QP with a larger QPCap.MaxRecvWR", verbs.ErrQueueFull, q.rq.max)}
		}
		q.rq.post(&wrs[i])
	}
	if q.state == verbs.StateErr {
		q.flushRecv()
	}
	return nil
}

// respState is the responder's state.
type respState struct {
	psn     bth.PSN // expected PSN
	msn     uint32  // messages completed, 24 bits on the wire
	nakSent bool    // a PSN-sequence NAK went out; silent until psn arrives

	// ackedPSN is the last SEND, WRITE or atomic packet carried out: a
	// duplicate SEND or WRITE is acknowledged with it (rxe's ack_psn - 1).
	ackedPSN bth.PSN

	inMsg    bth.Operation // SEND or WRITE message in progress, or OpInvalid
	recv     recvWQE       // the receive a SEND (or WRITE with immediate) fills
	haveRecv bool
	recvOff  uint64
	va       uint64 // WRITE in progress: next address, key, bytes left, total
	rkey     uint32
	resid    uint64
	dmaLen   uint32
	ucDrop   bool // UC: dropping the rest of a message after a gap

	res     []readResource // responder resources for READ, atomics, FLUSH and ATOMIC_WRITE
	resNext int

	ackPending  bool
	ackPSN      bth.PSN
	ackDeferred bool // on Device.acks' list (busy-poll mode)

	rq respQueue // responses owed behind a READ's, sent in turns (respq.go)
}

// readResource remembers an executed READ, atomic, FLUSH or ATOMIC_WRITE
// so a duplicate can be answered again (IBTA Vol. 1 §9.7.5.1.5): a READ is
// executed again, an atomic is answered with the value it found, a FLUSH
// or ATOMIC_WRITE is answered again and not carried out again.
type readResource struct {
	valid    bool
	kind     resKind
	firstPSN bth.PSN
	npsn     uint32
	orig     uint64 // atomic: the value found
	va       uint64 // READ: the memory it named
	length   uint32
	rkey     uint32
}

// respond handles a request to a connected QP (rxe_resp.c's job): it
// drops what is no request, raises COMM_EST for the first request in RTR,
// and checks the PSN (UC in its own way) before carrying the request out.
// The caller holds q.mu.
func (q *QP) respond(p *bth.Packet, b *txBatch) {
	switch p.Info.Operation {
	case bth.OpSend, bth.OpWrite, bth.OpReadRequest, bth.OpCompareSwap, bth.OpFetchAdd,
		bth.OpFlush, bth.OpAtomicWrite:
	default:
		q.ctr.DropBadOpcode++
		return
	}
	if q.state == verbs.StateRTR && !q.commEst {
		q.commEst = true
		q.dev.event(verbs.Event{Type: verbs.EventCommEstablished, QPN: q.qpn})
	}
	if q.typ == verbs.UC {
		q.respondUC(p, b)
		return
	}
	psn := p.BTH.PSN()
	switch d := psn.Diff(q.resp.psn); {
	case q.dev.seqNAKWindow > 0 && d > q.dev.seqNAKWindow:
		q.ctr.OutOfSeqRequest++
		q.ctr.DropFarPSN++
		return
	case d > 0:
		q.ctr.OutOfSeqRequest++
		if q.resp.nakSent {
			q.ctr.DropSilentPSN++
			return
		}
		q.resp.nakSent = true
		q.sendAck(b, bth.NAKSyndrome(bth.NAKPSNSequenceError), q.resp.psn)
		return
	case d < 0:
		q.ctr.DuplicateRequest++
		q.duplicate(p, psn, b)
		return
	}
	q.resp.nakSent = false
	q.respondRC(p, psn, b)
}

// respondRC executes an in-sequence RC request, checking it in the order
// rxe_resp.c does: opcode sequence, permission, resources, length, key.
func (q *QP) respondRC(p *bth.Packet, psn bth.PSN, b *txBatch) {
	info := p.Info
	op := info.Operation
	start := info.Position == bth.PosFirst || info.Position == bth.PosOnly
	end := info.Position == bth.PosLast || info.Position == bth.PosOnly
	// Opcode sequence: a message in progress continues with MIDDLE or
	// LAST of the same operation; otherwise a FIRST or ONLY starts one.
	if q.resp.inMsg != bth.OpInvalid && (start || op != q.resp.inMsg) || q.resp.inMsg == bth.OpInvalid && !start {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "opcode sequence")
		return
	}
	// The operation, and that the QP's access flags allow it (rxe's
	// check_op_valid): ATOMIC_WRITE needs remote write, a FLUSH the flush
	// rights of its placement type.
	var need verbs.Access
	switch op {
	case bth.OpWrite, bth.OpAtomicWrite:
		need = verbs.RemoteWrite
	case bth.OpFlush:
		need = flushAccess(p.FETH.Placement())
	case bth.OpReadRequest:
		need = verbs.RemoteRead
	case bth.OpCompareSwap, bth.OpFetchAdd:
		need = verbs.RemoteAtomic
	case bth.OpSend:
	default:
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "unsupported operation")
		return
	}
	if q.attr.Access&need != need {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "QP access flags")
		return
	}
	// READs, atomics, ATOMIC_WRITEs and FLUSHes need responder
	// resources: with max_dest_rd_atomic 0 there are none (rxe's
	// check_resource; rxe does not check a FLUSH, and writes it into a
	// resource array of no entries).
	if op != bth.OpSend && op != bth.OpWrite && len(q.resp.res) == 0 {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr,
			"no responder resources for a READ, atomic, FLUSH or ATOMIC_WRITE")
		return
	}
	// A SEND, and a WRITE with immediate at its end, consume a receive.
	if (op == bth.OpSend && start || op == bth.OpWrite && info.Imm) && !q.resp.haveRecv && !q.takeRecv() {
		q.sendPendingAck(b)
		syn := bth.RNRNAKSyndrome(q.attr.MinRNRTimer)
		q.sendAck(b, syn, psn)
		return
	}
	if why := q.checkLength(p); why != "" {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, why)
		return
	}
	switch op {
	case bth.OpSend:
		q.receiveSend(p, psn, start, end, b)
	case bth.OpWrite:
		q.receiveWrite(p, psn, start, end, b)
	case bth.OpReadRequest:
		q.receiveRead(p, psn, b)
	case bth.OpFlush:
		q.receiveFlush(p, psn, b)
	case bth.OpAtomicWrite:
		q.receiveAtomicWrite(p, psn, b)
	default:
		q.receiveAtomic(p, psn, b)
	}
}

// checkLength checks a request's payload and pad against its place in
// the message, and a RETH's DMA length, as rxe's check_length (and, for
// the pad, check_rkey) does, and says what is wrong, or "". A FIRST or
// MIDDLE packet carries exactly the path MTU and no pad, a LAST from 1
// byte to the MTU, an ONLY up to the MTU (IBTA C9-92); the pad of a LAST
// or ONLY makes the payload a multiple of 4 bytes; a message is at most
// 2^31 bytes (C9-94). goroce checks the pad of SENDs too, which rxe does
// only for WRITEs: a correct requester always sets it so.
func (q *QP) checkLength(p *bth.Packet) string {
	if p.Info.Payload {
		n, mtu, pad := len(p.Payload), q.mtu, p.BTH.PadCount()
		switch p.Info.Position {
		case bth.PosFirst, bth.PosMiddle:
			if n != mtu || pad != 0 {
				return "FIRST or MIDDLE packet not of the path MTU"
			}
		case bth.PosLast:
			if n == 0 || n > mtu {
				return "LAST packet empty or longer than the path MTU"
			}
		case bth.PosOnly:
			if n > mtu {
				return "ONLY packet longer than the path MTU"
			}
		}
		if pad != bth.PadCount(n) {
			return "pad count does not align the payload"
		}
	}
	if p.RETH != nil && p.RETH.DMALen() > verbs.MaxMsgSize {
		return "DMA length over 2^31"
	}
	return ""
}

func (q *QP) receiveSend(p *bth.Packet, psn bth.PSN, start, end bool, b *txBatch) {
	if start {
		q.resp.recvOff = 0
	}
	r := &q.resp.recv
	n := uint64(len(p.Payload))
	if q.resp.recvOff+n > r.len {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.LocLenErr, "message longer than the receive")
		return
	}
	if !q.scatter(r.sgl, q.resp.recvOff, p.Payload) {
		q.respError(b, bth.NAKRemoteOpError, psn, verbs.LocProtErr, "receive SGE")
		return
	}
	q.resp.recvOff += n
	q.resp.inMsg = bth.OpSend
	if !end {
		q.advance(p, psn)
		return
	}
	wc := verbs.WC{ID: r.id, Opcode: verbs.WCRecv, ByteLen: uint32(q.resp.recvOff), QPN: q.qpn}
	if p.ImmDt != nil {
		wc.Imm, wc.Flags = p.ImmDt.Imm(), verbs.WithImm
	}
	if p.IETH != nil {
		// A region of the QP's PD without windows bound, or a bound type
		// 2 window of the PD bound to this QP (mr.Table.Invalidate).
		if err := q.dev.mrs.Invalidate(q.pd, p.IETH.RKey(), q.id); err != nil {
			// rxe (its class J) acknowledges such a SEND and then goes
			// to ERR; goroce NAKs it, so that the requester learns why.
			q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "invalidate key: "+err.Error())
			return
		}
		wc.Imm, wc.Flags = p.IETH.RKey(), verbs.WithInv
	}
	q.ctr.RDMARecvs++
	q.finishMessage(p, psn, &wc)
}

func (q *QP) receiveWrite(p *bth.Packet, psn bth.PSN, start, end bool, b *txBatch) {
	if start {
		f := p.RETH.Fields()
		if !q.checkRETH(b, psn, &f, verbs.RemoteWrite) {
			return
		}
		q.resp.va, q.resp.rkey, q.resp.resid, q.resp.dmaLen = f.VA, f.RKey, uint64(f.DMALen), f.DMALen
	}
	n := uint64(len(p.Payload))
	if n > 0 && q.resp.dmaLen == 0 {
		// A zero-length WRITE names no memory: its payload has nowhere
		// to go (rxe: an R_Key violation).
		q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, "payload for a WRITE of zero bytes")
		return
	}
	if n > q.resp.resid || end && n != q.resp.resid {
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "WRITE longer or shorter than its DMA length")
		return
	}
	if n > 0 {
		// Look the key up for every packet: a region deregistered in the
		// middle of a message stops the rest.
		m, mem, err := q.dev.mrs.LookupRemote(q.pd, q.id, q.resp.rkey, q.resp.va, uint32(n), verbs.RemoteWrite)
		if err != nil {
			q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, err.Error())
			return
		}
		copy(mem, p.Payload)
		m.Release(q.id)
	}
	q.resp.va += n
	q.resp.resid -= n
	q.resp.inMsg = bth.OpWrite
	if !end {
		q.advance(p, psn)
		return
	}
	if p.ImmDt == nil {
		q.finishMessage(p, psn, nil)
		return
	}
	wc := verbs.WC{ID: q.resp.recv.id, Opcode: verbs.WCRecvRDMAWithIm, ByteLen: q.resp.dmaLen, QPN: q.qpn,
		Imm: p.ImmDt.Imm(), Flags: verbs.WithImm}
	q.finishMessage(p, psn, &wc)
}

// advance accepts a packet in the middle of a message.
func (q *QP) advance(p *bth.Packet, psn bth.PSN) {
	q.resp.psn, q.resp.ackedPSN = psn.Next(), psn
	if p.BTH.AckReq() {
		q.pendAck(psn)
	}
}

// finishMessage completes a SEND or WRITE message: the receive completes
// (if wc is set), the MSN counts it, and it is acknowledged if asked.
func (q *QP) finishMessage(p *bth.Packet, psn bth.PSN, wc *verbs.WC) {
	q.resp.inMsg = bth.OpInvalid
	q.resp.msn++
	if wc != nil {
		q.resp.haveRecv = false
		if !q.pushRecv(wc, p.BTH.SE()) {
			return // the QP went to ERR: no ACK, as rxe's class G error
		}
	}
	q.resp.psn, q.resp.ackedPSN = psn.Next(), psn
	if q.typ == verbs.RC && p.BTH.AckReq() {
		q.pendAck(psn)
	}
}

// checkRETH checks the range of a WRITE's or READ's RETH against the
// memory it names, before any byte is touched, and answers a failure with
// a remote access error NAK. A zero-length request names no memory.
func (q *QP) checkRETH(b *txBatch, psn bth.PSN, f *bth.RETHFields, access verbs.Access) bool {
	if f.DMALen == 0 {
		return true
	}
	m, _, err := q.dev.mrs.LookupRemote(q.pd, q.id, f.RKey, f.VA, f.DMALen, access)
	if err != nil {
		q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, err.Error())
		return false
	}
	m.Release(q.id)
	return true
}

func (q *QP) receiveRead(p *bth.Packet, psn bth.PSN, b *txBatch) {
	f := p.RETH.Fields()
	if !q.checkRETH(b, psn, &f, verbs.RemoteRead) {
		return
	}
	npsn := q.packets(uint64(f.DMALen))
	q.saveResource(readResource{valid: true, kind: resRead, firstPSN: psn, npsn: npsn, va: f.VA, length: f.DMALen,
		rkey: f.RKey})
	// rxe counts the READ as a completed message before it answers
	// (C9-148), so the responses carry the new MSN.
	q.resp.msn++
	q.resp.psn = psn.Add(npsn)
	q.sendReadResponses(b, psn, &f)
}

// sendReadResponses sends the responses to a READ of f, starting at psn,
// a turn's worth at a time (respq.go).
func (q *QP) sendReadResponses(b *txBatch, psn bth.PSN, f *bth.RETHFields) {
	q.sendPendingAck(b)
	q.queueRead(b, psn, f, false)
}

func (q *QP) receiveAtomic(p *bth.Packet, psn bth.PSN, b *txBatch) {
	f := p.AtomicETH.Fields()
	// The key and range first, then the alignment, in rxe's order.
	q.dev.atomicMu.Lock()
	m, mem, err := q.dev.mrs.LookupRemote(q.pd, q.id, f.RKey, f.VA, 8, verbs.RemoteAtomic)
	if err != nil {
		q.dev.atomicMu.Unlock()
		q.respError(b, bth.NAKRemoteAccessError, psn, verbs.RemAccessErr, err.Error())
		return
	}
	if f.VA%8 != 0 {
		m.Release(q.id)
		q.dev.atomicMu.Unlock()
		q.respError(b, bth.NAKInvalidRequest, psn, verbs.RemInvReqErr, "atomic not 8-byte aligned")
		return
	}
	orig := binary.NativeEndian.Uint64(mem)
	switch p.Info.Operation {
	case bth.OpCompareSwap:
		if orig == f.Compare {
			binary.NativeEndian.PutUint64(mem, f.SwapAdd)
		}
	case bth.OpFetchAdd:
		binary.NativeEndian.PutUint64(mem, orig+f.SwapAdd)
	}
	m.Release(q.id)
	q.dev.atomicMu.Unlock()
	q.saveResource(readResource{valid: true, kind: resAtomic, firstPSN: psn, npsn: 1, orig: orig})
	q.resp.msn++
	q.resp.psn, q.resp.ackedPSN = psn.Next(), psn
	q.sendAtomicAck(b, psn, orig)
}

func (q *QP) saveResource(r readResource) {
	if len(q.resp.res) == 0 {
		return
	}
	q.resp.res[q.resp.resNext] = r
	q.resp.resNext = (q.resp.resNext + 1) % len(q.resp.res)
}

// duplicate answers a request the responder has seen before: SENDs and
// WRITEs are acknowledged again, READs executed again from the PSN asked
// for, atomics answered with the value they found, FLUSHes and
// ATOMIC_WRITEs answered again (rxe's resource of a FLUSH keeps no PSN,
// so that rxe finds it only by chance and lets its requester retry until
// its count is spent; goroce's keeps it).
func (q *QP) duplicate(p *bth.Packet, psn bth.PSN, b *txBatch) {
	switch p.Info.Operation {
	case bth.OpSend, bth.OpWrite:
		// C9-105: acknowledge again what was acknowledged last, not the
		// PSN of a READ answered since: an ACK with a READ's PSN would
		// complete the READ at a requester such as rxe's.
		q.pendAck(q.resp.ackedPSN)
		return
	}
	for i := range q.resp.res {
		r := &q.resp.res[i]
		if !r.valid || !psn.InWindow(r.firstPSN, r.npsn) {
			continue
		}
		switch r.kind {
		case resAtomic:
			if psn == r.firstPSN && p.AtomicETH != nil {
				q.sendAtomicAck(b, psn, r.orig)
				return
			}
		case resFlush, resAtomicWrite:
			if op := p.Info.Operation; r.kind == resFlush && op == bth.OpFlush ||
				r.kind == resAtomicWrite && op == bth.OpAtomicWrite {
				q.sendEmptyReadResponse(b, psn)
				return
			}
		}
		if r.kind != resRead {
			break
		}
		if p.Info.Operation != bth.OpReadRequest {
			break
		}
		f := p.RETH.Fields()
		if !r.covers(&f) {
			break // not the READ remembered, or more than it: rxe drops it too
		}
		// The region may have gone since: look at it again.
		if !q.checkRETH(b, psn, &f, verbs.RemoteRead) {
			return
		}
		q.sendPendingAck(b)
		q.queueRead(b, psn, &f, true)
		return
	}
	// A resource evicted since (or never had): silence, as rxe's class D.
	q.ctr.DropDuplicates++
}

// covers reports whether the READ of f asks for the memory of the READ r
// remembers, or part of it, with the same key.
func (r *readResource) covers(f *bth.RETHFields) bool {
	if f.DMALen == 0 {
		return true // names no memory
	}
	return f.RKey == r.rkey && f.VA >= r.va && f.DMALen <= r.length && f.VA-r.va <= uint64(r.length-f.DMALen)
}

// pendAck notes that psn must be acknowledged. ACKs are cumulative, so
// while the QP handles a batch of packets only the last one goes out.
func (q *QP) pendAck(psn bth.PSN) {
	if q.resp.ackPending {
		q.ctr.AckDeferred++
	}
	q.resp.ackPending, q.resp.ackPSN = true, psn
}

// sendPendingAck sends the pending ACK, if any; it goes out before any
// other responder packet so that the peer sees PSNs in order.
func (q *QP) sendPendingAck(b *txBatch) {
	if q.resp.ackPending {
		q.resp.ackPending = false
		q.sendAck(b, bth.ACKSyndrome(bth.NoCredits), q.resp.ackPSN)
	}
}

// sendAck sends an ACKNOWLEDGE packet with syndrome syn for psn.
func (q *QP) sendAck(b *txBatch, syn bth.Syndrome, psn bth.PSN) {
	if q.queueAck(syn, psn) {
		return // behind a READ's responses (respq.go)
	}
	if syn.Kind() != bth.KindACK {
		q.sendPendingAck(b)
		q.ctr.countNAKSent(syn)
	}
	buf := b.buf()
	var p bth.Packet
	size := p.Build(buf, &bth.BTHFields{Opcode: bth.RCAcknowledge, PKey: bth.DefaultPKey,
		DestQP: q.attr.DestQPN, PSN: psn}, 0)
	p.AETH.Encode(&bth.AETHFields{Syndrome: syn, MSN: q.resp.msn & bth.PSNMask})
	b.add(size, q.dest, q.sport, q.dataTOS())
	q.ctr.SentPkts++
	q.ctr.AcksSent++
}

func (q *QP) sendAtomicAck(b *txBatch, psn bth.PSN, orig uint64) {
	if q.queueAtomicAck(b, psn, orig) {
		return // behind a READ's responses (respq.go)
	}
	q.sendPendingAck(b)
	buf := b.buf()
	var p bth.Packet
	size := p.Build(buf, &bth.BTHFields{Opcode: bth.RCAtomicAcknowledge, PKey: bth.DefaultPKey,
		DestQP: q.attr.DestQPN, PSN: psn}, 0)
	p.AETH.Encode(&bth.AETHFields{Syndrome: bth.ACKSyndrome(bth.NoCredits), MSN: q.resp.msn & bth.PSNMask})
	p.AtomicAckETH.Encode(&bth.AtomicAckETHFields{Orig: orig})
	b.add(size, q.dest, q.sport, q.dataTOS())
	q.ctr.SentPkts++
}

// respError NAKs psn with code, raises the asynchronous event of the
// error's class and moves the QP to ERR, as rxe's class A and C errors do.
// The receive a message in progress took, if any, completes with status
// st (rxe completes it with the error too); the rest are flushed.
func (q *QP) respError(b *txBatch, code bth.NAKCode, psn bth.PSN, st verbs.Status, why string) {
	q.dev.log.Debug("responder error", "qpn", q.qpn, "psn", uint32(psn), "nak", code, "status", st, "why", why)
	if q.resp.haveRecv {
		wc := verbs.WC{ID: q.resp.recv.id, Status: st, Opcode: verbs.WCRecv, QPN: q.qpn}
		q.pushRecv(&wc, false)
		q.resp.haveRecv = false
	}
	q.sendAck(b, bth.NAKSyndrome(code), psn)
	q.dev.event(verbs.Event{Type: respErrorEvent(code), QPN: q.qpn})
	q.toErr(b)
}

// respErrorEvent returns the affiliated asynchronous error a responder
// raises with a NAK (IBTA Vol. 1 §11.6.3.1): an invalid request is an
// Invalid Request Local Work Queue Error, a remote access error a Local
// Access Violation Work Queue Error, and anything else (the receive
// queue itself is broken) a Local Work Queue Catastrophic Error.
func respErrorEvent(code bth.NAKCode) verbs.EventType {
	switch code {
	case bth.NAKInvalidRequest:
		return verbs.EventQPReqErr
	case bth.NAKRemoteAccessError:
		return verbs.EventQPAccessErr
	}
	return verbs.EventQPFatal
}

// takeRecv makes the oldest posted receive (of the QP or its SRQ) the
// current one. It reports false when there is none.
func (q *QP) takeRecv() bool {
	r := &q.resp.recv
	if q.srq != nil {
		if !q.srq.take(r) {
			return false
		}
	} else {
		w := q.rq.peek()
		if w == nil {
			q.pull()
			w = q.rq.peek()
		}
		if w == nil {
			return false
		}
		r.id, r.len = w.id, w.len
		r.sgl = append(r.sgl[:0], w.sgl...)
		q.rq.pop()
	}
	q.resp.haveRecv = true
	return true
}

// respondUC executes a UC request. UC has no ACKs: a PSN gap drops the
// rest of the message in progress, and the responder picks up again at
// the next FIRST or ONLY.
func (q *QP) respondUC(p *bth.Packet, b *txBatch) {
	info := p.Info
	psn := p.BTH.PSN()
	start := info.Position == bth.PosFirst || info.Position == bth.PosOnly
	end := info.Position == bth.PosLast || info.Position == bth.PosOnly
	if psn != q.resp.psn {
		q.ctr.OutOfSeqRequest++
		if q.resp.inMsg != bth.OpInvalid {
			q.ctr.DropUCMessage++
			q.resp.inMsg = bth.OpInvalid
		}
		q.resp.ucDrop = !start
	}
	q.resp.psn = psn.Next()
	if q.resp.ucDrop {
		if !start {
			return
		}
		q.resp.ucDrop = false
	}
	op := info.Operation
	if q.resp.inMsg != bth.OpInvalid && (start || op != q.resp.inMsg) || q.resp.inMsg == bth.OpInvalid && !start {
		q.ucDropMessage(start, end)
		return
	}
	if op == bth.OpWrite && q.attr.Access&verbs.RemoteWrite == 0 {
		q.ucDropMessage(start, end)
		return
	}
	if (op == bth.OpSend && start || op == bth.OpWrite && info.Imm) && !q.resp.haveRecv && !q.takeRecv() {
		q.ctr.DropNoRecv++
		q.ucDropMessage(start, end)
		return
	}
	if q.checkLength(p) != "" {
		q.ucDropMessage(start, end)
		return
	}
	if op == bth.OpSend {
		q.ucReceiveSend(p, psn, start, end)
		return
	}
	q.ucReceiveWrite(p, psn, start, end)
}

// ucReceiveSend places a UC SEND packet into the receive in progress.
func (q *QP) ucReceiveSend(p *bth.Packet, psn bth.PSN, start, end bool) {
	if start {
		q.resp.recvOff = 0
	}
	n := uint64(len(p.Payload))
	r := &q.resp.recv
	if q.resp.recvOff+n > r.len || !q.scatter(r.sgl, q.resp.recvOff, p.Payload) {
		// The receive completes in error; the QP goes on.
		wc := verbs.WC{ID: r.id, Status: verbs.LocLenErr, Opcode: verbs.WCRecv, QPN: q.qpn}
		q.pushRecv(&wc, false)
		q.resp.haveRecv = false
		q.ucDropMessage(start, end)
		return
	}
	q.resp.recvOff += n
	q.resp.inMsg = bth.OpSend
	if end {
		wc := verbs.WC{ID: r.id, Opcode: verbs.WCRecv, ByteLen: uint32(q.resp.recvOff), QPN: q.qpn}
		if p.ImmDt != nil {
			wc.Imm, wc.Flags = p.ImmDt.Imm(), verbs.WithImm
		}
		q.ctr.RDMARecvs++
		q.finishMessage(p, psn, &wc)
	}
}

// ucReceiveWrite carries out a UC WRITE packet.
func (q *QP) ucReceiveWrite(p *bth.Packet, psn bth.PSN, start, end bool) {
	if start {
		f := p.RETH.Fields()
		q.resp.va, q.resp.rkey, q.resp.resid, q.resp.dmaLen = f.VA, f.RKey, uint64(f.DMALen), f.DMALen
	}
	n := uint64(len(p.Payload))
	if n > q.resp.resid || end && n != q.resp.resid {
		q.ucDropMessage(start, end)
		return
	}
	if n > 0 {
		m, mem, err := q.dev.mrs.LookupRemote(q.pd, q.id, q.resp.rkey, q.resp.va, uint32(n), verbs.RemoteWrite)
		if err != nil {
			q.ucDropMessage(start, end)
			return
		}
		copy(mem, p.Payload)
		m.Release(q.id)
	}
	q.resp.va += n
	q.resp.resid -= n
	q.resp.inMsg = bth.OpWrite
	if end {
		var wc *verbs.WC
		if p.ImmDt != nil {
			wc = &verbs.WC{ID: q.resp.recv.id, Opcode: verbs.WCRecvRDMAWithIm, ByteLen: q.resp.dmaLen, QPN: q.qpn,
				Imm: p.ImmDt.Imm(), Flags: verbs.WithImm}
		}
		q.finishMessage(p, psn, wc)
	}
}

// ucDropMessage abandons the UC message this packet belongs to.
func (q *QP) ucDropMessage(start, end bool) {
	q.ctr.DropUCMessage++
	q.resp.inMsg = bth.OpInvalid
	q.resp.ucDrop = !end
}

// GRHLen is the size of the GRH area at the start of a UD receive buffer.
const GRHLen = 40

// respondUD delivers a UD SEND into the next receive, after a 40-byte GRH
// area that holds the IPv6 header, or for IPv4 20 zero bytes and the IPv4
// header, as rxe writes it.
func (q *QP) respondUD(p *bth.Packet, tp *transport.Packet, b *txBatch) {
	if p.Info.Operation != bth.OpSend {
		q.ctr.DropBadOpcode++
		return
	}
	if !q.takeRecv() {
		q.ctr.DropNoRecv++
		return
	}
	r := &q.resp.recv
	q.resp.haveRecv = false
	n := uint64(len(p.Payload))
	wc := verbs.WC{ID: r.id, Opcode: verbs.WCRecv, QPN: q.qpn, SrcQP: p.DETH.SrcQP(), Flags: verbs.WithGRH}
	var grh [GRHLen]byte
	buildGRH(&grh, tp)
	if GRHLen+n > r.len || !q.scatter(r.sgl, 0, grh[:]) || !q.scatter(r.sgl, GRHLen, p.Payload) {
		wc.Status, wc.Flags = verbs.LocLenErr, 0
		q.pushRecv(&wc, false)
		return
	}
	wc.ByteLen = uint32(GRHLen + n)
	if p.ImmDt != nil {
		wc.Imm, wc.Flags = p.ImmDt.Imm(), wc.Flags|verbs.WithImm
	}
	q.resp.psn = p.BTH.PSN().Next()
	q.ctr.RDMARecvs++
	q.pushRecv(&wc, p.BTH.SE())
}

// buildGRH writes the network header of tp into g the way a UD receive
// sees it.
func buildGRH(g *[GRHLen]byte, tp *transport.Packet) {
	udpLen := bth.UDPLen + len(tp.Data)
	if tp.Src.Is4() {
		h := g[20:]
		h[0], h[1] = 0x45, tp.TOS
		binary.BigEndian.PutUint16(h[2:], uint16(bth.IPv4MinLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], tp.IPID)
		h[6], h[8], h[9] = 0x40, 64, bth.ProtocolUDP
		s, d := tp.Src.As4(), tp.Dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		var sum uint32
		for i := 0; i < bth.IPv4MinLen; i += 2 {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
		for sum > 0xFFFF {
			sum = sum>>16 + sum&0xFFFF
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	binary.BigEndian.PutUint32(g[0:], 6<<28|uint32(tp.TOS)<<20)
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen))
	g[6], g[7] = bth.ProtocolUDP, 64
	s, d := tp.Src.As16(), tp.Dst.As16()
	copy(g[8:], s[:])
	copy(g[24:], d[:])
}
