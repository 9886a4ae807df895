package uverbs

import (
	"errors"
	"math/bits"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/yield"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// The worker: one goroutine per session takes the work requests the
// program posts into its rings and posts them to the engine.

const (
	// batchMax is the most work requests one post to the engine takes.
	batchMax = 32
	// turnMax is the most work requests one queue gets per drain; a
	// queue with more is taken up again on the next, after the others.
	turnMax = 256
	// bindInfoSize is the size of abi.BindInfo.
	bindInfoSize = int(unsafe.Sizeof(abi.BindInfo{}))
)

// worker holds the scratch space of one session's drains.
type worker struct {
	s      *session
	dirty  []wqOwner
	sqProd []uint32
	swr    [batchMax]verbs.SendWR
	rwr    [batchMax]verbs.RecvWR
	sge    [batchMax * 32]verbs.SGE // batchMax requests of up to roce.MaxSGE SGEs
	copies []byte                   // batchMax private copies of slots
}

func (s *session) work() {
	defer s.worker.Done()
	w := &worker{s: s}
	sleeping := u32(s.page, offSleeping)
	var b [8]byte
	for !w.stopped() {
		if w.drain() {
			continue
		}
		if s.srv.spin > 0 && w.spin() {
			continue
		}
		// Say the worker sleeps, then look once more: a program that
		// set its doorbell bit before it read Sleeping is seen here;
		// one that set it after reads 1 and writes the eventfd.
		sleeping.Store(1)
		if w.pending() {
			sleeping.Store(0)
			continue
		}
		_, err := s.doorbell.Read(b[:])
		sleeping.Store(0)
		if err != nil {
			return // the session is ending: teardown closed the doorbell
		}
	}
}

// stopped reports whether the session is ending.
func (w *worker) stopped() bool {
	select {
	case <-w.s.workerStop:
		return true
	default:
		return false
	}
}

// pending reports whether a doorbell bit is set.
func (w *worker) pending() bool {
	for i := range abi.DoorbellWords / 64 {
		if u64(w.s.page, offSummary+8*i).Load() != 0 {
			return true
		}
	}
	return false
}

// spin looks for work for the configured while; it reports whether it
// found some. It gives the processor away between looks, so that on a
// machine with fewer cores than spinners the program it waits for runs,
// and with one P it also receives what the link has (Server.pollSpin).
func (w *worker) spin() bool {
	deadline := time.Now().Add(time.Duration(w.s.srv.spin))
	for i := 0; ; i++ {
		if w.pending() {
			return true
		}
		if i%16 == 15 {
			if w.stopped() || time.Now().After(deadline) {
				return false
			}
			if w.s.srv.pollSpin {
				w.s.srv.dev.PollLink()
			}
			yield.CPU()
		}
	}
}

// ring sets doorbell bit d again, for a queue whose turn ended with work
// left.
func (w *worker) ring(d uint32) {
	u64(w.s.page, offDirty+8*int(d/64)).Or(1 << (d % 64))
	u64(w.s.page, offSummary+8*int(d/4096)).Or(1 << (d / 64 % 64))
}

// drain takes what the program posted to the queues whose doorbell bits
// are set, and reports whether there were any. Every receive side goes
// first, then the send sides up to where they stood when the drain began:
// a program posts a receive before the send whose answer it expects, so a
// receive published before a send the drain takes is taken before it.
func (w *worker) drain() bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.drainLocked()
}

// drainLocked is drain with s.mu held.
func (w *worker) drainLocked() bool {
	s := w.s
	if w.stopped() {
		return false
	}
	w.dirty = w.dirty[:0]
	for i := range abi.DoorbellWords / 64 {
		sum := u64(s.page, offSummary+8*i)
		if sum.Load() == 0 {
			continue
		}
		for m := sum.Swap(0); m != 0; m &= m - 1 {
			word := i*64 + bits.TrailingZeros64(m)
			for d := u64(s.page, offDirty+8*word).Swap(0); d != 0; d &= d - 1 {
				if o := s.wqs[uint32(word*64+bits.TrailingZeros64(d))]; o != nil {
					w.dirty = append(w.dirty, o)
				}
			}
		}
	}
	if len(w.dirty) == 0 {
		return false
	}
	w.sqProd = w.sqProd[:0]
	for _, o := range w.dirty {
		if q, ok := o.(*qpObj); ok {
			w.sqProd = append(w.sqProd, q.sq.prod().Load())
		}
	}
	for _, o := range w.dirty {
		switch o := o.(type) {
		case *qpObj:
			if o.rq.mem != nil {
				o.rqMu.Lock()
				o.rqc = w.drainRecv(o.db, &o.rq, o.rqc, func(wrs []verbs.RecvWR) error { return o.qp.PostRecv(wrs) },
					o.cap.MaxRecvSGE, abi.KindRecv, o.h, o.rcq, o.qp.QPN())
				o.rqMu.Unlock()
			}
		case *srqObj:
			o.rqMu.Lock()
			o.rqc = w.drainRecv(o.db, &o.rq, o.rqc, o.srq.PostRecv, o.maxSGE, abi.KindSRQ, o.h, nil, 0)
			o.rqMu.Unlock()
		}
	}
	i := 0
	for _, o := range w.dirty {
		if q, ok := o.(*qpObj); ok {
			w.drainSend(q, w.sqProd[i])
			i++
		}
	}
	return true
}

// copySlot copies slot i of r into private space j of the batch and
// returns the copy: from here on the program's writes cannot change it.
func (w *worker) copySlot(r *ring, i uint32, j int) []byte {
	n := int(r.stride)
	if len(w.copies) < batchMax*n {
		w.copies = make([]byte, batchMax*n)
	}
	c := w.copies[j*n : (j+1)*n : (j+1)*n]
	copy(c, r.slot(i))
	return c
}

// take returns how many slots to take from a ring whose consumer index is
// cons and whose producer index the program set to prod, within a turn;
// it rings the queue's bit again when it leaves some.
func (w *worker) take(d, cons, prod, entries uint32) uint32 {
	n := prod - cons
	if n > entries {
		n = entries // a producer index no program sets: take what the ring holds
	}
	if n > turnMax {
		n = turnMax
		w.ring(d)
	}
	return n
}

// drainRecv posts the receives of ring r (a QP's, or an SRQ's when cq is
// nil) and returns the new consumer index.
func (w *worker) drainRecv(d uint32, r *ring, cons uint32, post func([]verbs.RecvWR) error, maxSGE uint32,
	kind uint8, h uint32, cq *cqObj, qpn uint32) uint32 {
	n := w.take(d, cons, r.prod().Load(), r.entries)
	j := uint32(0)
	flush := func() {
		w.postRecv(w.rwr[:j], post, kind, h, cq, qpn)
		j = 0
	}
	for i := range n {
		b := w.copySlot(r, cons+i, int(j))
		r.cons().Store(cons + i + 1) // the slot is free: the copy is what counts
		e := (*abi.RecvWQE)(unsafe.Pointer(&b[0]))
		if e.NumSGE > maxSGE || abi.RecvWQESize+int(e.NumSGE)*abi.SGESize > len(b) {
			// The library checks this: a receive it let through anyway
			// completes with an error rather than not at all.
			flush()
			if cq != nil {
				cq.synth(kind, h, uint32(e.WRID), verbs.LocLenErr, verbs.WCRecv, qpn)
			}
			continue
		}
		w.rwr[j] = verbs.RecvWR{ID: wrID(kind, h, uint32(e.WRID)),
			SGL: appendSGEs(w.sge[j*32:j*32], b[abi.RecvWQESize:], e.NumSGE)}
		if j++; j == batchMax {
			flush()
		}
	}
	flush()
	return cons + n
}

// postRecv posts receives; one the engine refuses completes with an error
// (on a QP's receive CQ), and those after it are posted after it.
func (w *worker) postRecv(wrs []verbs.RecvWR, post func([]verbs.RecvWR) error, kind uint8, h uint32, cq *cqObj, qpn uint32) {
	for len(wrs) > 0 {
		err := post(wrs)
		if err == nil {
			return
		}
		i, st := 0, verbs.WRFlushErr // refused as a whole: the QP is not in a state to receive
		if pe, ok := errors.AsType[*verbs.PostError](err); ok {
			i, st = pe.Index, verbs.LocLenErr
		}
		for _, wr := range wrs[:i+1] {
			if _, _, seq := splitID(wr.ID); cq != nil && (st == verbs.WRFlushErr || wr.ID == wrs[i].ID) {
				cq.synth(kind, h, seq, st, verbs.WCRecv, qpn)
			}
		}
		if st == verbs.WRFlushErr {
			for _, wr := range wrs[i+1:] {
				_, _, seq := splitID(wr.ID)
				if cq != nil {
					cq.synth(kind, h, seq, st, verbs.WCRecv, qpn)
				}
			}
			return
		}
		wrs = wrs[i+1:]
	}
}

// appendSGEs appends the n SGEs at b (abi.SGE layout) to sgl.
func appendSGEs(sgl []verbs.SGE, b []byte, n uint32) []verbs.SGE {
	for i := range n {
		e := (*abi.SGE)(unsafe.Pointer(&b[int(i)*abi.SGESize]))
		sgl = append(sgl, verbs.SGE{Addr: e.Addr, Length: e.Length, LKey: e.LKey})
	}
	return sgl
}

// drainSend posts the send work requests of q up to prod.
func (w *worker) drainSend(q *qpObj, prod uint32) {
	n := w.take(q.db, q.sqc, prod, q.sq.entries)
	j := 0
	flush := func() {
		w.postSend(q, w.swr[:j])
		j = 0
	}
	for i := range n {
		b := w.copySlot(&q.sq, q.sqc+i, j)
		// The slot is free once copied: the program may reuse it as soon
		// as it has the request's completion, which the post below may
		// give before this drain ends.
		q.sq.cons().Store(q.sqc + i + 1)
		e := (*abi.SendWQE)(unsafe.Pointer(&b[0]))
		st := w.sendWR(q, &w.swr[j], b, j)
		switch {
		case st != verbs.Success:
			// Post what came before, then fail this one.
			flush()
			w.refuse(q, uint32(e.WRID), e.Opcode, st)
		case e.Opcode == abi.OpBindMW && w.swr[j].BindMW == nil:
			// A type 1 window's bind (ibv_bind_mw), posted in its place.
			flush()
			w.bind1(q, b)
		default:
			if j++; j == batchMax {
				flush()
			}
		}
	}
	flush()
	q.sqc += n
}

// sendWR fills wr from the copy b of a send queue's slot; it returns the
// status of a request the device cannot post (LOC_QP_OP_ERR, as rxe's
// requester fails a request whose address handle it cannot find), or
// Success.
func (w *worker) sendWR(q *qpObj, wr *verbs.SendWR, b []byte, j int) verbs.Status {
	e := (*abi.SendWQE)(unsafe.Pointer(&b[0]))
	*wr = verbs.SendWR{ID: wrID(abi.KindSend, q.h, uint32(e.WRID)), Opcode: verbs.WROpcode(e.Opcode),
		Flags: verbs.SendFlags(e.Flags & 0xF), RemoteAddr: e.RemoteAddr, RKey: e.RKey, CompareAdd: e.CompareAdd,
		Swap: e.Swap, RemoteQPN: e.RemoteQPN, RemoteQKey: e.RemoteQKey}
	switch e.Opcode {
	case abi.OpWriteImm, abi.OpSendImm:
		wr.Imm = bits.ReverseBytes32(e.Imm) // imm_data is big-endian in memory
	case abi.OpSendInv, abi.OpLocalInv:
		wr.InvRKey = e.Imm
	case abi.OpBindMW:
		return w.bindWR(q, wr, b)
	case abi.OpFlush:
		// CompareAdd carries the length, Swap the placement type and,
		// in its second byte, the level (ibv_wr_flush's arguments).
		wr.CompareAdd, wr.Swap = 0, 0
		wr.Flush = verbs.FlushWR{Len: uint32(e.CompareAdd), Type: verbs.PlacementType(e.Swap),
			Level: verbs.FlushLevel(e.Swap >> 8)}
		if e.CompareAdd > 1<<32-1 {
			return verbs.LocLenErr
		}
		return verbs.Success
	case abi.OpAtomicWrite:
		return verbs.Success // the 8 bytes are CompareAdd, as ibv_wr_atomic_write's atomic_wr lies in memory
	}
	if q.typ == verbs.UD {
		a := w.s.ahs[e.AH]
		if a == nil {
			return verbs.LocQPOpErr
		}
		wr.AH = a.ah
	}
	payload := b[abi.SendWQESize:]
	if e.Flags&abi.FlagInline != 0 {
		if e.NumSGE > q.maxInline || int(e.NumSGE) > len(payload) {
			return verbs.LocLenErr
		}
		wr.InlineData = payload[:e.NumSGE]
		return verbs.Success
	}
	if e.NumSGE > q.cap.MaxSendSGE || int(e.NumSGE)*abi.SGESize > len(payload) {
		return verbs.LocLenErr
	}
	wr.SGL = appendSGEs(w.sge[j*32:j*32], payload, e.NumSGE)
	return verbs.Success
}

// bindWR fills a type 2 window's BIND_MW request; a type 1 window's bind
// (ibv_bind_mw) leaves wr.BindMW nil for drainSend to post on its own.
func (w *worker) bindWR(q *qpObj, wr *verbs.SendWR, b []byte) verbs.Status {
	bi, mw, info, ok := w.bindInfo(b)
	if !ok {
		return verbs.MWBindErr
	}
	if bi.Type1 != 0 {
		return verbs.Success
	}
	wr.BindMW = &verbs.BindMW{MW: mw, RKey: bi.RKey, BindInfo: info}
	return verbs.Success
}

// bindInfo reads the bind that follows a BIND_MW request.
func (w *worker) bindInfo(b []byte) (*abi.BindInfo, verbs.MW, verbs.MWBindInfo, bool) {
	if len(b) < abi.SendWQESize+bindInfoSize {
		return nil, nil, verbs.MWBindInfo{}, false
	}
	bi := (*abi.BindInfo)(unsafe.Pointer(&b[abi.SendWQESize]))
	mw := w.s.mws[bi.MW]
	if mw == nil {
		return nil, nil, verbs.MWBindInfo{}, false
	}
	info := verbs.MWBindInfo{Addr: bi.Addr, Length: bi.Length, Access: verbs.Access(bi.Access)}
	if m := w.s.mrs[bi.MR]; m != nil {
		info.MR = m.mr
	} else if bi.Length != 0 || bi.MR != 0 {
		return nil, nil, verbs.MWBindInfo{}, false
	}
	return bi, mw.mw, info, true
}

// bind1 posts a type 1 window's bind (QP.BindMW).
func (w *worker) bind1(q *qpObj, b []byte) {
	e := (*abi.SendWQE)(unsafe.Pointer(&b[0]))
	idx := uint32(e.WRID)
	_, mw, info, ok := w.bindInfo(b)
	if !ok {
		w.refuse(q, idx, abi.OpBindMW, verbs.MWBindErr)
		return
	}
	err := q.qp.BindMW(mw, &verbs.MWBindWR{ID: wrID(abi.KindSend, q.h, uint32(e.WRID)),
		Flags: verbs.SendFlags(e.Flags & 0xF), BindInfo: info})
	if err != nil {
		w.refuse(q, idx, abi.OpBindMW, verbs.MWBindErr)
	}
}

// postSend posts wrs; a request the engine refuses completes with an
// error, and those after it are posted after it.
func (w *worker) postSend(q *qpObj, wrs []verbs.SendWR) {
	for len(wrs) > 0 {
		err := q.qp.PostSend(wrs)
		if err == nil {
			return
		}
		pe, ok := errors.AsType[*verbs.PostError](err)
		if !ok {
			// Refused as a whole: the QP is not in a state to send (the
			// program moved it while the requests waited in the ring).
			for i := range wrs {
				_, _, seq := splitID(wrs[i].ID)
				q.scq.synth(abi.KindSend, q.h, seq, verbs.WRFlushErr, wcOpcode(uint32(wrs[i].Opcode)), q.qp.QPN())
			}
			return
		}
		_, _, seq := splitID(wrs[pe.Index].ID)
		w.refuse(q, seq, uint32(wrs[pe.Index].Opcode), verbs.LocQPOpErr)
		wrs = wrs[pe.Index+1:]
	}
}

// refuse completes request seq of q with status st and moves q to ERR,
// as a request that fails moves an RC QP there: what follows is flushed.
func (w *worker) refuse(q *qpObj, seq, op uint32, st verbs.Status) {
	q.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	q.scq.synth(abi.KindSend, q.h, seq, st, wcOpcode(op), q.qp.QPN())
}

// wcOpcode returns the completion opcode of a work request's.
func wcOpcode(op uint32) verbs.WCOpcode {
	switch op {
	case abi.OpWrite, abi.OpWriteImm:
		return verbs.WCWrite
	case abi.OpRead:
		return verbs.WCRead
	case abi.OpAtomicCmpSwp:
		return verbs.WCCompSwap
	case abi.OpAtomicFetchAdd:
		return verbs.WCFetchAdd
	case abi.OpLocalInv:
		return verbs.WCLocalInv
	case abi.OpBindMW:
		return verbs.WCBindMW
	case abi.OpFlush:
		return verbs.WCFlush
	case abi.OpAtomicWrite:
		return verbs.WCAtomicWrite
	}
	return verbs.WCSend
}

// The engine's pulls (qp.RecvSource): a receive the program has published
// in its ring is the engine's to take at once when a message needs one,
// as a NIC sees a receive as soon as it is written, before the worker's
// drain gets to it: a UD or UC message otherwise finds no receive and is
// dropped (an RC one gets an RNR NAK).

// pullMax is the most receives one pull takes.
const pullMax = 64

// Pull gives the engine the receives the program posted to q's ring and
// the worker has not taken yet (qp.RecvSource); it returns at once while
// the worker drains the ring.
func (q *qpObj) Pull(post func(*verbs.RecvWR) error) {
	if !q.rqMu.TryLock() {
		return
	}
	defer q.rqMu.Unlock()
	q.rqc = pullRing(&q.rq, q.rqc, q.cap.MaxRecvSGE, abi.KindRecv, q.h, post, &q.pullSGE)
}

// Pull is qpObj.Pull for an SRQ's ring.
func (o *srqObj) Pull(post func(*verbs.RecvWR) error) {
	if !o.rqMu.TryLock() {
		return
	}
	defer o.rqMu.Unlock()
	o.rqc = pullRing(&o.rq, o.rqc, o.maxSGE, abi.KindSRQ, o.h, post, &o.sge)
}

// pullRing posts the receives of ring r from its consumer index cons on,
// up to pullMax, and returns the new consumer index. It stops at one that
// post refuses or that is malformed: the worker's drain completes those
// with an error.
func pullRing(r *ring, cons, maxSGE uint32, kind uint8, h uint32, post func(*verbs.RecvWR) error, sge *[32]verbs.SGE) uint32 {
	n := r.prod().Load() - cons
	if n > r.entries {
		return cons // a producer index no program sets: the drain's to sort out
	}
	for range min(n, pullMax) {
		b := r.slot(cons)
		e := (*abi.RecvWQE)(unsafe.Pointer(&b[0]))
		// Each field is read once: the program may write the slot (its
		// own memory) meanwhile, and the engine copies what post takes.
		nsge, id := e.NumSGE, e.WRID
		if nsge > maxSGE || abi.RecvWQESize+int(nsge)*abi.SGESize > len(b) {
			break
		}
		wr := verbs.RecvWR{ID: wrID(kind, h, uint32(id)), SGL: appendSGEs(sge[:0], b[abi.RecvWQESize:], nsge)}
		if post(&wr) != nil {
			break
		}
		cons++
		r.cons().Store(cons)
	}
	return cons
}
