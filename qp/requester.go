package qp

import (
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// PostSend posts send work requests, in order. Requests are checked as
// they are posted; the first bad one stops the post with a *PostError.
// In the ERR state requests are accepted and complete with WR_FLUSH_ERR.
func (q *QP) PostSend(wrs []verbs.SendWR) error {
	if !q.ok() {
		return errNilQP
	}
	return q.post(wrs, false)
}

// post posts wrs and sends what it can; verb is set for QP.BindMW.
func (q *QP) post(wrs []verbs.SendWR, verb bool) error {
	b := q.dev.getBatch()
	q.mu.Lock()
	q.cc.turnUsed = 0 // the program's post is a turn of its own (pace.go)
	err := q.postSend(wrs, verb)
	// An ACK left for this post (deferack.go) goes with it. Before a
	// short answer it would end the GSO run at once (a run's later
	// packets may be shorter, not longer, and an ACK is as short as a
	// packet gets), so after a one-packet answer it goes after it, and
	// the two make one datagram for the peer's kernel to carry instead
	// of two; the peer handles the ACK first all the same
	// (Device.receive), and so completes its request before it sees the
	// answer. Before a longer answer it goes first, not to wait for it.
	ackAfter := q.resp.ackPending && q.onePacketToSend()
	if !ackAfter {
		q.sendPendingAck(b)
	}
	switch q.state {
	case verbs.StateRTS:
		q.request(b)
	case verbs.StateErr, verbs.StateSQE:
		q.flushSend()
	}
	q.sendPendingAck(b)
	q.flushAndUnlock(b)
	q.dev.putBatch(b)
	return err
}

// onePacketToSend reports whether the requester has one request to send,
// in one packet.
func (q *QP) onePacketToSend() bool {
	if q.state != verbs.StateRTS || q.sq.tail-q.sq.next != 1 {
		return false
	}
	w := q.sq.at(q.sq.next)
	switch {
	case w.wr.Opcode.IsRDAtomic():
		return true
	case w.wr.Opcode.IsLocal():
		return false
	}
	return q.packets(w.length-w.sent) == 1
}

func (q *QP) postSend(wrs []verbs.SendWR, verb bool) error {
	if q.destroyed {
		return fmt.Errorf("%w: PostSend on QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	}
	switch q.state {
	case verbs.StateReset, verbs.StateInit, verbs.StateRTR:
		return fmt.Errorf("%w: post send in %v: move the QP to RTS first (roce.Connect)", verbs.ErrInvalidState, q.state)
	}
	for i := range wrs {
		wr := &wrs[i]
		bind, err := q.checkSendWR(wr, verb)
		if err != nil {
			return &verbs.PostError{Index: i, Err: err}
		}
		if q.sq.tail-q.sq.first == q.sq.max {
			return &verbs.PostError{Index: i, Err: fmt.Errorf("%w: %d send requests outstanding: poll the CQ, "+
				"or create the QP with a larger QPCap.MaxSendWR", verbs.ErrQueueFull, q.sq.max)}
		}
		q.sq.post(wr, q)
		if bind != nil {
			q.sq.at(q.sq.tail - 1).bind = bind
			bind.m.rkey.Store(bind.b.RKey) // ibv_mw.rkey is the posted bind's
		}
	}
	return nil
}

// checkSendWR checks a work request as it is posted; for a BIND_MW it
// returns the bind to carry out.
func (q *QP) checkSendWR(wr *verbs.SendWR, verb bool) (*mwBind, error) {
	if err := q.checkSendOp(wr); err != nil {
		return nil, err
	}
	if wr.Opcode == verbs.OpBindMW {
		return q.checkBindWR(wr, verb)
	}
	return nil, nil
}

func (q *QP) checkSendOp(wr *verbs.SendWR) error {
	op := wr.Opcode
	if err := verbs.CheckSendOp(q.typ, op); err != nil {
		return err
	}
	if q.typ == verbs.UD || q.typ == verbs.GSI {
		if ah, ok := wr.AH.(*AH); wr.AH == nil || ok && ah == nil {
			return fmt.Errorf("%w: a UD send without an address handle: set SendWR.AH to one from PD.CreateAH",
				verbs.ErrInvalidWR)
		}
		if wr.RemoteQPN > bth.MaxQPN {
			return fmt.Errorf("%w: remote QPN %#x does not fit in 24 bits", verbs.ErrInvalidWR, wr.RemoteQPN)
		}
	}
	if len(wr.SGL) > q.sq.maxSGE {
		return fmt.Errorf("%w: %d SGEs, and the QP takes at most %d (QPCap.MaxSendSGE)", verbs.ErrTooManySGE,
			len(wr.SGL), q.sq.maxSGE)
	}
	if wr.Flags&verbs.Inline != 0 {
		if len(wr.InlineData) > int(q.cap.MaxInlineData) {
			return fmt.Errorf("%w: %d bytes, and the QP takes at most %d (QPCap.MaxInlineData)", verbs.ErrInlineTooLong,
				len(wr.InlineData), q.cap.MaxInlineData)
		}
		if op.NeedsResponse() {
			return fmt.Errorf("%w: %v cannot be inline: its data comes back into the SGEs", verbs.ErrInvalidWR, op)
		}
	}
	if op.IsAtomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		return fmt.Errorf("%w: an atomic takes one 8-byte SGE", verbs.ErrInvalidWR)
	}
	if isFlushOrAtomicWrite(op) {
		return checkFlushWR(wr)
	}
	return nil
}

// reqState is the requester's state.
type reqState struct {
	psn     bth.PSN // next PSN to send
	maxSent bth.PSN // one past the highest PSN ever sent, to count retransmissions
	// flushRXE: the FLUSHes this QP sends carry the ICRC Linux's rxe
	// gives FLUSH, not the IBTA's (bth.FlushICRCRXE); flush.go.
	flushRXE      bool
	rdOutstanding int    // READ and atomic requests sent and not complete
	sinceAckReq   uint32 // packets since the last AckReq
	drainNotify   bool
	// cwnd is how many PSNs may be unacknowledged: Device.maxUnacked at
	// best, halved by every retry and grown again by acknowledgements,
	// so that go-back-N resends little on a lossy path.
	cwnd      uint32
	cwndAcked uint32
	// active: PSNs are unacknowledged, and the QP counts in
	// Device.activeRC, among the QPs that share the device's window;
	// counted is how many of its PSNs Device.inflight holds.
	active  bool
	counted uint32
	turnEnd bth.PSN   // the first PSN after the QP's turn (admit.go)
	loss    lossState // RTT samples and loss probes (probe.go)
}

// minWindow is the smallest window the requester shrinks to.
const minWindow = 8

// request sends what the send queue holds, as far as the QP's state, the
// window, fences and the READ/atomic limit allow.
func (q *QP) request(b *txBatch) {
	if q.state != verbs.StateRTS && q.state != verbs.StateSQD || q.comp.rnrWait || !q.startTurn() {
		return
	}
	if !q.req.active && q.typ == verbs.RC && q.sq.next != q.sq.tail {
		// Count among the senders before sending, so that QPs starting
		// together take shares at once.
		q.req.active = true
		q.dev.activeRC.Add(1)
	}
	for q.sq.next != q.sq.tail {
		w := q.sq.at(q.sq.next)
		if w.state == wqeDone {
			// A local operation carried out before a rewind: it is not
			// carried out again.
			q.sq.next++
			continue
		}
		if w.state == wqePosted {
			if q.state == verbs.StateSQD {
				break
			}
			op := w.wr.Opcode
			if w.wr.Flags&verbs.Fence != 0 && q.req.rdOutstanding > 0 {
				break
			}
			if op.IsRDAtomic() && q.req.rdOutstanding >= max(1, int(q.attr.MaxRDAtomic)) {
				break
			}
			if op.IsLocal() {
				// LOCAL_INV waits for every request before it to
				// complete (the local invalidate fence, IBTA §10.6.5.1,
				// which rxe always applies), so that none of them finds
				// its memory gone, a retransmission among them; a bind
				// does not wait.
				if op == verbs.OpLocalInv && q.sq.first != q.sq.next {
					break
				}
				// A local operation takes no PSN; it is assigned so that
				// rewinds and acknowledgements step over it (localOp
				// says which status a refused one fails with).
				w.firstPSN, w.npsn, w.assigned = q.req.psn, 0, true
				if st := q.localOp(w); st != verbs.Success {
					q.failWQE(w, st, b)
					return
				}
				q.sq.next++
				q.retire()
				continue
			}
			if w.length > verbs.MaxMsgSize || (q.typ == verbs.UD || q.typ == verbs.GSI) && w.length > uint64(q.mtu) {
				q.failWQE(w, verbs.LocLenErr, b)
				return
			}
			w.firstPSN, w.assigned = q.req.psn, true
			w.npsn = q.packets(w.length)
			if op.IsAtomic() {
				w.npsn = 1
			}
			w.piece = q.readPieceOf(w)
		}
		if !q.emit(w, b) {
			break
		}
		q.sq.next++
		switch {
		case q.typ != verbs.RC:
			w.state = wqeDone // UC and UD complete once sent
			q.retire()
		case w.wr.Opcode.IsRDAtomic() && w.wr.Opcode != verbs.OpRead:
			q.req.rdOutstanding++ // a READ counts its pieces as it asks (emitRead)
		}
	}
	if q.typ == verbs.RC {
		q.armTimerIfIdle()
	}
}

// packets returns the number of packets (PSNs) for n bytes.
func (q *QP) packets(n uint64) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(q.mtu) - 1) / uint64(q.mtu))
}

// windowFull reports whether npsn more PSNs would exceed the number of
// unacknowledged PSNs allowed. A request always fits an empty window.
func (q *QP) windowFull(npsn uint32) bool {
	out := uint32(q.req.psn.Diff(q.comp.psn))
	// The pacer and the turns (pace.go) hold nothing back from an empty
	// window either: after a rewind, the first request goes at once, as
	// the completer expects (a READ answered meanwhile would otherwise
	// complete behind the send point, and the requests after it take
	// its PSNs).
	if q.turnOver() || q.windowFullAt(out, npsn) {
		return true
	}
	held := q.paceHeld() // also reads the clock paceSent charges at
	return out != 0 && (held || q.turnSpent())
}

// windowFullAt is windowFull with out PSNs unacknowledged.
func (q *QP) windowFullAt(out, npsn uint32) bool {
	if q.typ != verbs.RC {
		return false
	}
	if out == 0 {
		return false
	}
	if out+npsn > q.window() {
		return true
	}
	// The device's total too, counting what this QP sent since it last
	// reported.
	d := q.dev
	return d.activeRC.Load() > 1 && d.inflight.Load()+int64(out)-int64(q.req.counted)+int64(npsn) > int64(d.sharedUnacked)
}

// window is how many PSNs may be unacknowledged now: the QP's cwnd, and
// its share of the device's window while other QPs have packets in
// flight too, so that many streams together overrun a receiver no more
// than one does.
func (q *QP) window() uint32 {
	if q.req.loss.probing {
		return 1 // a loss probe waits for its answer (probe.go)
	}
	w := q.req.cwnd
	if n := uint32(q.dev.activeRC.Load()); n > 1 {
		w = min(w, max(minWindow, q.dev.sharedUnacked/n))
	}
	return w
}

// updateActive keeps Device.activeRC, the number of RC QPs with PSNs in
// flight, and Device.inflight, their sum, up to date; it runs wherever a
// QP's lock is released after its PSNs may have moved, and before a QP
// starts sending from idle.
func (q *QP) updateActive() {
	var out uint32
	if !q.destroyed && q.typ == verbs.RC && (q.state == verbs.StateRTS || q.state == verbs.StateSQD) {
		out = uint32(q.req.psn.Diff(q.comp.psn))
	}
	if act := out != 0; act != q.req.active {
		q.req.active = act
		if act {
			q.dev.activeRC.Add(1)
		} else {
			q.dev.activeRC.Add(-1)
		}
	}
	if out != q.req.counted {
		q.dev.inflight.Add(int64(out) - int64(q.req.counted))
		q.req.counted = out
	}
	q.endTurn(out)
}

// grow widens the window as n more PSNs are acknowledged: by an eighth
// for every window's worth.
func (q *QP) grow(n uint32) {
	if q.ccGrow(n) || q.req.cwnd >= q.dev.maxUnacked {
		return
	}
	q.req.cwndAcked += n
	if q.req.cwndAcked >= q.req.cwnd {
		q.req.cwndAcked = 0
		q.req.cwnd = min(q.dev.maxUnacked, q.req.cwnd+q.req.cwnd/8+1)
	}
}

// shrink halves the window after a loss.
func (q *QP) shrink() {
	if q.ccShrink() {
		return
	}
	q.req.cwnd = max(minWindow, q.req.cwnd/2)
	q.req.cwndAcked = 0
}

// emit sends the remaining packets of w. It reports whether w is fully
// sent; false means stop for now (window full, or w failed).
func (q *QP) emit(w *sendWQE, b *txBatch) bool {
	op := w.wr.Opcode
	if op == verbs.OpRead {
		return q.emitRead(w, b)
	}
	if op.IsAtomic() {
		return q.emitAtomic(w, b)
	}
	if isFlushOrAtomicWrite(op) {
		return q.emitFlush(w, b)
	}
	for {
		if q.windowFull(1) {
			return false
		}
		n := w.length - w.sent
		if n > uint64(q.mtu) {
			n = uint64(q.mtu)
		}
		first, last := w.sent == 0, w.sent+n == w.length
		f := bth.BTHFields{
			Opcode: wireOpcode(op, first, last, q.typ),
			SE:     last && w.wr.Flags&verbs.Solicited != 0,
			PKey:   bth.DefaultPKey,
			DestQP: q.attr.DestQPN,
			PSN:    q.req.psn,
			AckReq: q.askAck(last),
		}
		dest, tos := q.dest, q.dataTOS()
		if q.typ == verbs.UD || q.typ == verbs.GSI {
			f.DestQP, dest, tos = w.wr.RemoteQPN, w.dest, w.tos
		}
		buf := b.buf()
		var p bth.Packet
		size := p.Build(buf, &f, int(n))
		if p.RETH != nil {
			p.RETH.Encode(&bth.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)})
		}
		if p.ImmDt != nil {
			p.ImmDt.Encode(&bth.ImmDtFields{Imm: w.wr.Imm})
		}
		if p.IETH != nil {
			p.IETH.Encode(&bth.IETHFields{RKey: w.wr.InvRKey})
		}
		if p.DETH != nil {
			qkey := w.wr.RemoteQKey
			if qkey&0x80000000 != 0 && q.typ != verbs.GSI {
				qkey = q.attr.QKey
			}
			p.DETH.Encode(&bth.DETHFields{QKey: qkey, SrcQP: q.qpn})
		}
		// A packet sent again is copied: the ACK of the original may be
		// in the same receive batch, and complete the request (and let
		// the program reuse its memory) before the batch reaches the
		// link.
		var ref []byte
		var m *mr.MR
		if !q.req.psn.LessThan(q.req.maxSent) {
			ref, m = q.payloadRef(w, w.sent, n)
		}
		if ref != nil {
			b.addRef(size-int(n)-bth.ICRCLen, ref, pin{m, q.id}, dest, q.sport, tos)
		} else {
			if !q.gather(w, w.sent, p.Payload) {
				q.failWQE(w, verbs.LocProtErr, b)
				return false
			}
			b.add(size, dest, q.sport, tos)
		}
		q.countSent(f.AckReq, size)
		w.sent += n
		w.state = wqeStarted
		if last {
			w.state = wqeSent
			if op.IsSend() {
				q.ctr.RDMASends++
			}
			return true
		}
	}
}

// askAck decides the AckReq bit of the next packet, the last of its
// message or not. rxe asks for an ACK on RC (see ackReq) and, though no
// one answers it, on every QP1 datagram; UC and UD never. A packet that
// fills the window, or ends the QP's turn (admit.go), asks too, or
// nothing would open it but the retransmission timer.
func (q *QP) askAck(last bool) bool {
	switch q.typ {
	case verbs.RC:
		return q.turnLast(q.req.psn) || q.ackReq(last) || q.windowFullAt(uint32(q.req.psn.Diff(q.comp.psn))+1, 1)
	case verbs.GSI:
		return true
	}
	return false
}

// ackReq decides the AckReq bit: on the last packet of a message, and at
// least every AckReqEvery packets (never more than half the window).
func (q *QP) ackReq(last bool) bool {
	q.req.sinceAckReq++
	every := min(q.dev.ackReqEvery, q.window()/2)
	if last || q.req.sinceAckReq >= every {
		q.req.sinceAckReq = 0
		return true
	}
	return false
}

// countSent counts a request packet of size bytes, which asks for an ACK
// if ackReq, and advances the send PSN.
func (q *QP) countSent(ackReq bool, size int) {
	q.ctr.SentPkts++
	q.paceSent(size)
	q.cc.turnUsed++
	if q.req.psn.LessThan(q.req.maxSent) {
		q.ctr.Retransmits++
	} else if ackReq {
		q.sentSample(q.req.psn)
	}
	q.req.psn = q.req.psn.Next()
	if q.req.maxSent.LessThan(q.req.psn) {
		q.req.maxSent = q.req.psn
	}
}

// readPiece is the most responses one READ request asks for, where the
// peer takes two READs at once or more (max_rd_atomic): a READ of more is
// asked for in pieces of readPiece PSNs, each a READ request of its own
// for its part of the memory, as far as the window and max_rd_atomic let
// it. A READ's responses have no window of their own (the requester
// acknowledges none): asked for at once, the responses of a 1 GiB READ, a
// quarter of a million packets at the path MTU of 4096, overran a
// requester that took them slower than they came, and every loss sent
// the rest again from there. In pieces, what is in flight is bounded by
// the window as a WRITE's data is, and the next piece goes while the one
// before it is answered. The responder sees READ requests as any
// requester sends them. With max_rd_atomic 1 a piece could go only once
// the one before it was answered, a round trip lost each time, so a READ
// is asked for whole there, as before. The pieces' bounds are fixed by
// the READ's first PSN, so that a request asked again after a loss
// (rewind) asks for the rest of its piece.
const readPiece = 256

// readPieceOf returns the piece size (in PSNs) of w: readPiece for a READ
// where the peer takes two or more at once, else all of it.
func (q *QP) readPieceOf(w *sendWQE) uint32 {
	if w.wr.Opcode == verbs.OpRead && q.attr.MaxRDAtomic >= 2 {
		return readPiece
	}
	return max(w.npsn, 1)
}

// pieceOf returns the first and last PSN of the piece of READ w that
// holds psn.
func pieceOf(w *sendWQE, psn bth.PSN) (first, last bth.PSN) {
	i := uint32(psn.Diff(w.firstPSN)) / w.piece * w.piece
	return w.firstPSN.Add(i), w.firstPSN.Add(min(i+w.piece, w.npsn) - 1)
}

// piecesLeft returns the pieces of READ w, sent in full, whose responses
// have not all come.
func (q *QP) piecesLeft(w *sendWQE) int {
	done := uint32(0)
	if w.firstPSN.LessThan(q.comp.psn) {
		done = uint32(q.comp.psn.Diff(w.firstPSN))
	}
	if done >= w.npsn {
		return 0 // the last piece, shorter than the others, answered too
	}
	return int((w.npsn+w.piece-1)/w.piece - done/w.piece)
}

// emitRead sends the READ requests for what of w has not been asked for
// yet, a piece (w.piece) at a time: all of it, or after a loss the rest
// from the first missing response PSN. It reports whether the last piece
// went.
func (q *QP) emitRead(w *sendWQE, b *txBatch) bool {
	mtu := uint64(q.mtu)
	for {
		i := uint32(w.sent / mtu)
		end := min((i/w.piece+1)*w.piece, w.npsn)
		npsn := end - i
		n := min(w.length-w.sent, uint64(npsn)*mtu)
		if q.req.rdOutstanding >= max(1, int(q.attr.MaxRDAtomic)) || q.windowFull(npsn) {
			if w.sent != 0 {
				w.state = wqeStarted // partly asked for: it stays at next
			}
			return false
		}
		buf := b.buf()
		var p bth.Packet
		size := p.Build(buf, &bth.BTHFields{Opcode: bth.RCReadRequest, PKey: bth.DefaultPKey,
			DestQP: q.attr.DestQPN, PSN: q.req.psn, AckReq: true}, 0)
		p.RETH.Encode(&bth.RETHFields{VA: w.wr.RemoteAddr + w.sent, RKey: w.wr.RKey, DMALen: uint32(n)})
		b.add(size, q.dest, q.sport, q.dataTOS())
		q.countSent(true, size)
		// The request takes one PSN per response packet.
		q.req.psn = q.req.psn.Add(npsn - 1)
		if q.req.maxSent.LessThan(q.req.psn) {
			q.req.maxSent = q.req.psn
		}
		q.req.sinceAckReq = 0
		q.req.rdOutstanding++
		w.sent += n
		if w.sent >= w.length {
			w.state = wqeSent
			return true
		}
	}
}

func (q *QP) emitAtomic(w *sendWQE, b *txBatch) bool {
	if q.windowFull(1) {
		return false
	}
	f := bth.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	op := bth.RCFetchAdd
	if w.wr.Opcode == verbs.OpAtomicCmpSwp {
		op, f.SwapAdd, f.Compare = bth.RCCompareSwap, w.wr.Swap, w.wr.CompareAdd
	}
	buf := b.buf()
	var p bth.Packet
	size := p.Build(buf, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: q.attr.DestQPN,
		PSN: q.req.psn, AckReq: true}, 0)
	p.AtomicETH.Encode(&f)
	b.add(size, q.dest, q.sport, q.dataTOS())
	q.countSent(true, size)
	q.req.sinceAckReq = 0
	w.state = wqeSent
	return true
}

// wireOpcode returns the BTH opcode for a packet of a SEND or WRITE.
func wireOpcode(op verbs.WROpcode, first, last bool, t verbs.QPType) bth.Opcode {
	var o bth.Opcode
	switch op {
	case verbs.OpSend, verbs.OpSendImm, verbs.OpSendInv:
		switch {
		case first && last:
			o = bth.RCSendOnly
		case first:
			o = bth.RCSendFirst
		case last:
			o = bth.RCSendLast
		default:
			o = bth.RCSendMiddle
		}
		if last {
			switch op {
			case verbs.OpSendImm:
				o++ // SEND_LAST_WITH_IMMEDIATE, SEND_ONLY_WITH_IMMEDIATE
			case verbs.OpSendInv:
				if first {
					o = bth.RCSendOnlyInvalidate
				} else {
					o = bth.RCSendLastInvalidate
				}
			}
		}
	default: // OpWrite, OpWriteImm
		switch {
		case first && last:
			o = bth.RCWriteOnly
		case first:
			o = bth.RCWriteFirst
		case last:
			o = bth.RCWriteLast
		default:
			o = bth.RCWriteMiddle
		}
		if last && op == verbs.OpWriteImm {
			o++
		}
	}
	switch t {
	case verbs.UC:
		return o.WithTransport(bth.TransportUC)
	case verbs.UD, verbs.GSI:
		if op == verbs.OpSendImm {
			return bth.UDSendOnlyImm
		}
		return bth.UDSendOnly
	}
	return o
}

// rewind makes the requester send from psn (go-back-N): the request
// holding psn restarts at the packet with that PSN (a READ asks again for
// the responses from there on), and every later request starts over with
// the PSNs it had. psn may also lie ahead of the send point, when the
// responder already has what a previous rewind was about to resend.
func (q *QP) rewind(psn bth.PSN) {
	if psn == q.req.psn {
		return
	}
	found := false
	q.req.rdOutstanding = 0
	for s := q.sq.first; s != q.sq.tail; s++ {
		w := q.sq.at(s)
		if !w.assigned {
			break
		}
		if found {
			if w.state != wqeDone { // a local operation done stays done
				w.state, w.sent = wqePosted, 0
			}
			continue
		}
		if w.state == wqeDone {
			continue
		}
		if psn.InWindow(w.firstPSN, w.npsn) {
			found = true
			q.sq.next = s
			w.sent = uint64(psn.Diff(w.firstPSN)) * uint64(q.mtu)
			w.state = wqeStarted
			if w.wr.Opcode.IsAtomic() {
				w.sent = 0
			}
			q.comp.restarted, q.comp.restartPSN = w.sent != 0 && w.wr.Opcode == verbs.OpRead, psn
			continue
		}
		switch {
		case w.wr.Opcode == verbs.OpRead:
			q.req.rdOutstanding += q.piecesLeft(w)
		case w.wr.Opcode.IsRDAtomic():
			q.req.rdOutstanding++
		}
	}
	if !found {
		return
	}
	// Rebuilt packets get their old PSNs.
	q.req.psn = psn
	q.req.sinceAckReq = 0
	q.rewoundSample(psn)
}
