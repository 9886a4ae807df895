package qp

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// compState is the completer's state.
type compState struct {
	psn        bth.PSN // oldest PSN not yet acknowledged or answered
	retryLeft  uint8
	rnrLeft    uint8
	timerArmed bool      // packets are unacknowledged: deadline holds
	deadline   time.Time // when they time out
	// timerAt: the Go timer is set to fire then, which may be before
	// deadline (armTimer); zero when it is not set.
	timerAt     time.Time
	rnrWait     bool
	rnrPSN      bth.PSN
	rnrDeadline time.Time
	// retrying is set by a retry and cleared by progress: responses and
	// NAKs already in flight when the requester went back must not each
	// start another retry. A timeout retries regardless.
	retrying bool
	lastPSN  bth.PSN // comp.psn at the last progress, to grow the window
	// restarted: the requester asked again for the rest of a READ, from
	// restartPSN, and no response has come since.
	restarted  bool
	restartPSN bth.PSN
}

// complete handles a response to this QP's requests: an ACK or NAK, a READ
// response or an atomic ACK (rxe_comp.c's job).
func (q *QP) complete(p *bth.Packet, b *txBatch) {
	if q.state != verbs.StateRTS && q.state != verbs.StateSQD {
		q.ctr.DropBadState++
		return
	}
	psn := p.BTH.PSN()
	// A response answers a PSN sent and not yet acknowledged or answered.
	// Anything else answers no outstanding request: sent when nothing is
	// outstanding, naming a PSN never sent, or one already completed (a
	// repeated ACK among them). It is dropped, as rxe's completer drops a
	// response that matches no outstanding work request, so that a stale
	// or spoofed NAK cannot fail a request it does not name.
	if !psn.InRange(q.comp.psn, q.req.maxSent) {
		q.ctr.DropUnexpectedResp++
		return
	}
	switch p.Info.Operation {
	case bth.OpAcknowledge:
		q.ctr.AcksRcvd++
		q.handleAETH(p.AETH, psn, b)
	case bth.OpReadResponse:
		q.handleReadResponse(p, psn, b)
	case bth.OpAtomicAcknowledge:
		q.handleAtomicAck(p, psn, b)
	}
}

func (q *QP) handleAETH(a bth.AETH, psn bth.PSN, b *txBatch) {
	syn := a.Syndrome()
	switch syn.Kind() {
	case bth.KindACK:
		q.ackTo(psn, b)
	case bth.KindRNRNAK:
		q.ctr.RcvdRNRErr++
		w := q.responseTarget(psn, b)
		if w == nil {
			return
		}
		if q.comp.rnrLeft == 0 {
			q.ctr.RetryRNRExceededErr++
			q.failWQE(w, verbs.RNRRetryExcErr, b)
			return
		}
		if q.comp.rnrLeft != 7 {
			q.comp.rnrLeft--
		}
		q.startRNRWait(psn, bth.RNRTimerDuration(syn.Value()))
	case bth.KindNAK:
		if syn.NAKCode() == bth.NAKPSNSequenceError {
			q.ctr.RcvdSeqErr++
			q.ackTo(psn.Add(bth.PSNMask), b)
			if (q.state == verbs.StateRTS || q.state == verbs.StateSQD) && !q.comp.retrying {
				q.retry(b, psn)
			}
			return
		}
		st := verbs.RemOpErr
		switch syn.NAKCode() {
		case bth.NAKInvalidRequest:
			q.ctr.RcvdInvReqNAK++
			st = verbs.RemInvReqErr
		case bth.NAKRemoteAccessError:
			q.ctr.RcvdRemAccessNAK++
			st = verbs.RemAccessErr
		default:
			q.ctr.RcvdRemOpNAK++
		}
		if w := q.responseTarget(psn, b); w != nil {
			q.failWQE(w, st, b)
		}
	default:
		// A reserved syndrome: a bad response, as rxe's completer
		// takes it.
		if w := q.responseTarget(psn, b); w != nil {
			q.failWQE(w, verbs.BadRespErr, b)
		}
	}
}

// responseTarget takes the acknowledgement a NAK, READ response or
// atomic ACK for psn carries of every PSN before it, and returns the
// request the response is about: the oldest one not complete, if psn is
// one of its PSNs. When psn names a later request, the responses of the
// READs or atomics before it were lost and the requester asks again
// (rxe's completer retries too); nil then.
func (q *QP) responseTarget(psn bth.PSN, b *txBatch) *sendWQE {
	q.ackTo(psn.Add(bth.PSNMask), b)
	if q.state != verbs.StateRTS && q.state != verbs.StateSQD {
		return nil
	}
	w := q.headPending()
	switch {
	case w != nil && psn.InWindow(w.firstPSN, max(w.npsn, 1)):
		return w
	case w != nil && !q.comp.retrying:
		q.retry(b, q.comp.psn)
	default:
		q.ctr.DropBadResp++
	}
	return nil
}

// ackTo takes an acknowledgement of every PSN up to and including psn.
//
// The send queue keeps these invariants: requests in [first, next) were
// sent in the current pass, the one at next may be partly sent, and later
// ones wait to be sent with the PSNs they had before any rewind (PSNs are
// handed out the same way every time).
//
// SENDs and WRITEs the acknowledgement covers complete, wherever they are:
// one at or past next (the responder got it before a rewind) is not sent
// again, and the send point moves past it. An acknowledgement that passes
// a READ or atomic sent in this pass and still unanswered means its
// response was lost, so the requester asks again.
func (q *QP) ackTo(psn bth.PSN, b *txBatch) {
	if psn.LessThan(q.comp.psn) {
		return // old news
	}
	progress, lost := false, false
	for s := q.sq.first; s != q.sq.tail; s++ {
		w := q.sq.at(s)
		if w.state == wqeDone {
			continue // a local operation, or failed
		}
		if !w.assigned || psn.LessThan(w.firstPSN) {
			break
		}
		if w.wr.Opcode.NeedsResponse() {
			// Sent in this pass, and the responder acknowledges PSNs
			// whose responses have not come: they were lost.
			lost = s < q.sq.next && !psn.LessThan(q.comp.psn)
			break
		}
		if last := w.lastPSN(); !psn.LessThan(last) {
			if w.wr.Opcode.IsRDAtomic() && s < q.sq.next {
				q.req.rdOutstanding-- // a FLUSH or ATOMIC_WRITE: an ACK past it completes it
			}
			w.state = wqeDone
			q.comp.psn = last.Next()
			progress = true
			if s >= q.sq.next {
				q.sq.next = s + 1
				q.req.psn = q.comp.psn
				q.req.sinceAckReq = 0
			}
			continue
		}
		q.comp.psn = psn.Next()
		progress = true
		if s == q.sq.next && q.req.psn.LessThan(q.comp.psn) {
			// Partly acknowledged past the send point: resume after it.
			w.state = wqeStarted
			w.sent = uint64(q.comp.psn.Diff(w.firstPSN)) * uint64(q.mtu)
			q.req.psn = q.comp.psn
		}
		break
	}
	if progress {
		q.progress()
		q.retire()
		q.request(b)
	}
	if lost && !q.comp.retrying {
		q.retry(b, q.comp.psn)
	}
}

// progress notes that the peer answered: retry counts start over and the
// timer restarts for what is left.
func (q *QP) progress() {
	q.progressSample()
	q.grow(uint32(q.comp.psn.Diff(q.comp.lastPSN)))
	q.comp.lastPSN = q.comp.psn
	q.comp.retrying = false
	q.comp.retryLeft = q.attr.RetryCnt
	q.comp.rnrLeft = q.attr.RNRRetry
	q.armTimer()
	q.checkDrained()
}

func (q *QP) handleReadResponse(p *bth.Packet, psn bth.PSN, b *txBatch) {
	w := q.responseTarget(psn, b)
	if w == nil {
		return
	}
	if isFlushOrAtomicWrite(w.wr.Opcode) {
		q.handleFlushResponse(p, psn, w, b)
		return
	}
	if w.wr.Opcode != verbs.OpRead {
		// A READ response for a SEND, WRITE or atomic: BAD_RESP_ERR, the
		// IBTA's status for an unexpected opcode from the responder
		// (rxe fails the request too, with FATAL_ERR).
		q.failWQE(w, verbs.BadRespErr, b)
		return
	}
	if psn != q.comp.psn {
		if !q.comp.retrying {
			q.retry(b, q.comp.psn) // responses lost before this one
		}
		return
	}
	if st := q.checkReadResponse(p, psn, w); st != verbs.Success {
		q.failWQE(w, st, b)
		return
	}
	off := uint64(psn.Diff(w.firstPSN)) * uint64(q.mtu)
	if !q.scatter(w.sgl, off, p.Payload) {
		q.failWQE(w, verbs.LocProtErr, b)
		return
	}
	q.comp.restarted = false
	q.comp.psn = psn.Next()
	// The end of a piece (readPiece) frees its READ resource; that of
	// the last, the READ.
	end := p.Info.Position == bth.PosLast || p.Info.Position == bth.PosOnly
	if end {
		q.req.rdOutstanding--
		if psn == w.lastPSN() {
			w.state = wqeDone
		}
	}
	q.progress()
	if end {
		q.retire()
		q.request(b)
	}
}

// checkReadResponse checks the response for psn, the next one READ w
// waits for, as rxe's completer does (check_ack, do_read), and returns the
// status w fails with, or SUCCESS. Nothing of a response that fails
// reaches w's memory.
//
//   - Its opcode must fit its place in its piece (readPiece: each piece
//     is a READ request of its own): the first response is a FIRST or
//     ONLY, every later one a MIDDLE or LAST, except the first after the
//     requester asked again for the rest of a piece, which may be either
//     (rxe's responder goes on with the message, goroce's starts a new
//     one). A FIRST, LAST and ONLY carry an ACK. Anything else is
//     BAD_RESP_ERR.
//   - Its payload must be what is due at its place: the path MTU, the
//     rest at the READ's last PSN; the piece's last PSN must be a LAST
//     or ONLY. A response that carries more than is due, or goes on
//     past the piece's last PSN, is LOC_PROT_ERR, as rxe reports data
//     that overruns the READ's buffer; one that carries less, or ends
//     before the piece's last PSN, is LOC_LEN_ERR (rxe waits for data
//     that never comes and retries until its count is spent).
func (q *QP) checkReadResponse(p *bth.Packet, psn bth.PSN, w *sendWQE) verbs.Status {
	pos := p.Info.Position
	start := pos == bth.PosFirst || pos == bth.PosOnly
	end := pos == bth.PosLast || pos == bth.PosOnly
	restart := q.comp.restarted && psn == q.comp.restartPSN
	first, lastOfPiece := pieceOf(w, psn)
	if psn == first && !start || psn != first && start && !restart {
		return verbs.BadRespErr
	}
	if p.AETH != nil && p.AETH.Syndrome().Kind() != bth.KindACK {
		return verbs.BadRespErr
	}
	off := uint64(psn.Diff(w.firstPSN)) * uint64(q.mtu)
	due := min(uint64(q.mtu), w.length-off)
	last := psn == lastOfPiece
	n := uint64(len(p.Payload))
	switch {
	case n > due || last && !end:
		return verbs.LocProtErr
	case n < due || end && !last:
		return verbs.LocLenErr
	}
	return verbs.Success
}

func (q *QP) handleAtomicAck(p *bth.Packet, psn bth.PSN, b *txBatch) {
	w := q.responseTarget(psn, b)
	if w == nil {
		return
	}
	// An atomic ACK for another kind of request, or one that does not
	// carry an ACK, is a bad response (rxe fails the request too, with
	// no status of its own).
	if !w.wr.Opcode.IsAtomic() || p.AETH.Syndrome().Kind() != bth.KindACK {
		q.failWQE(w, verbs.BadRespErr, b)
		return
	}
	w.orig = p.AtomicAckETH.Orig()
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], w.orig)
	if !q.scatter(w.sgl, 0, v[:]) {
		q.failWQE(w, verbs.LocProtErr, b)
		return
	}
	q.comp.psn = psn.Next()
	w.state = wqeDone
	q.req.rdOutstanding--
	q.progress()
	q.retire()
	q.request(b)
}

// headPending returns the oldest sent (or partly sent) request that is
// not complete.
func (q *QP) headPending() *sendWQE {
	for s := q.sq.first; s != q.sq.tail; s++ {
		w := q.sq.at(s)
		switch {
		case w.state == wqeDone:
			continue
		case s < q.sq.next || w.state == wqeStarted:
			// Sent, or partly sent: a request the window cut short
			// (after a rewind, one larger than the window) stays at
			// next while it goes out.
			return w
		}
		return nil
	}
	return nil
}

// retry sends again from psn after a NAK or a timeout, counting against
// retry_cnt; when the count is spent, the oldest request fails with
// RETRY_EXC_ERR. retry_cnt 7 is seven retries, as the IBTA says and real
// RNICs do: only rnr_retry 7 means "without end". (Linux's rxe retries
// for ever at 7, so that a dead peer is never noticed; goroce does not
// follow it there.)
func (q *QP) retry(b *txBatch, psn bth.PSN) {
	q.dev.log.Debug("retry", "qpn", q.qpn, "psn", uint32(psn), "comp_psn", uint32(q.comp.psn),
		"req_psn", uint32(q.req.psn), "left", q.comp.retryLeft, "cwnd", q.req.cwnd)
	q.ctr.CompleterRetryErr++
	if q.comp.retryLeft == 0 {
		q.ctr.RetryExceededErr++
		q.failHead(verbs.RetryExcErr, b)
		return
	}
	q.comp.retryLeft--
	q.comp.retrying = true
	q.shrink()
	q.rewind(psn)
	q.request(b)
	q.armTimer()
}

// failHead fails the oldest outstanding request.
func (q *QP) failHead(st verbs.Status, b *txBatch) {
	if w := q.headPending(); w != nil {
		q.failWQE(w, st, b)
		return
	}
	q.toErr(b)
}

// failWQE completes w with an error status and moves the QP to ERR (SQE for
// UC and UD, whose receive side goes on), flushing the rest.
func (q *QP) failWQE(w *sendWQE, st verbs.Status, b *txBatch) {
	w.state, w.status = wqeDone, st
	if q.typ == verbs.RC {
		q.toErr(b)
		return
	}
	q.state = verbs.StateSQE
	q.stopTimers()
	q.flushSend()
}

// retire completes finished requests from the head of the send queue, in
// order, with a completion for those signaled or failed.
func (q *QP) retire() {
	lost := 0
	for q.sq.first != q.sq.next {
		w := q.sq.at(q.sq.first)
		if w.state != wqeDone {
			break
		}
		if w.status != verbs.Success || w.wr.Flags&verbs.Signaled != 0 || q.sigAll {
			wc := verbs.WC{ID: w.wr.ID, Status: w.status, Opcode: wcOpcode(w.wr.Opcode), QPN: q.qpn,
				ByteLen: wcByteLen(w)}
			if !q.scq.push(&wc, false) {
				lost++
			}
		}
		q.sq.first++
	}
	for range lost {
		q.lostCompletion()
	}
	q.checkDrained()
}

func wcOpcode(op verbs.WROpcode) verbs.WCOpcode {
	switch op {
	case verbs.OpWrite, verbs.OpWriteImm:
		return verbs.WCWrite
	case verbs.OpRead:
		return verbs.WCRead
	case verbs.OpAtomicCmpSwp:
		return verbs.WCCompSwap
	case verbs.OpAtomicFetchAdd:
		return verbs.WCFetchAdd
	case verbs.OpLocalInv:
		return verbs.WCLocalInv
	case verbs.OpBindMW:
		return verbs.WCBindMW
	case verbs.OpFlush:
		return verbs.WCFlush
	case verbs.OpAtomicWrite:
		return verbs.WCAtomicWrite
	}
	return verbs.WCSend
}

// checkDrained reports SQ_DRAINED once an SQD QP has nothing in flight.
func (q *QP) checkDrained() {
	if q.state == verbs.StateSQD && q.req.drainNotify && q.sq.first == q.sq.next {
		q.req.drainNotify = false
		q.dev.event(verbs.Event{Type: verbs.EventSQDrained, QPN: q.qpn})
	}
}
