//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// recvBatch is the Go view of a gr_rq.
type recvBatch struct {
	r      *C.gr_rq
	rwr    []C.gr_rwr
	sge    []C.struct_ibv_sge
	max    int
	maxSGE int
	op     string
}

func newRecvBatch(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, max, maxSGE int) (recvBatch, bool) {
	r := C.gr_rq_new(qp, srq, C.int(max), C.int(maxSGE))
	if r == nil {
		return recvBatch{}, false
	}
	op := "ibv_post_recv"
	if srq != nil {
		op = "ibv_post_srq_recv"
	}
	return recvBatch{r: r, rwr: unsafe.Slice(r.rwr, max), sge: unsafe.Slice(r.sge, max*maxSGE),
		max: max, maxSGE: maxSGE, op: op}, true
}

func (b *recvBatch) free() {
	C.gr_rq_free(b.r)
	*b = recvBatch{}
}

// post posts wrs in batches; the caller holds the queue's lock.
func (b *recvBatch) post(wrs []verbs.RecvWR) error {
	for base := 0; base < len(wrs); {
		n := min(len(wrs)-base, b.max)
		for i := range n {
			wr := &wrs[base+i]
			if len(wr.SGL) > b.maxSGE {
				if i > 0 {
					if err := b.flush(base, i); err != nil {
						return err
					}
				}
				return &verbs.PostError{Index: base + i, Err: verbs.ErrTooManySGE}
			}
			b.rwr[i].id = C.uint64_t(wr.ID)
			b.rwr[i].num_sge = C.uint32_t(len(wr.SGL))
			sge := b.sge[i*b.maxSGE:]
			for j, s := range wr.SGL {
				sge[j].addr, sge[j].length, sge[j].lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
			}
		}
		if err := b.flush(base, n); err != nil {
			return err
		}
		base += n
	}
	return nil
}

func (b *recvBatch) flush(base, n int) error {
	if rc := C.gr_post_recv(b.r, C.int(n)); rc != 0 {
		return &verbs.PostError{Index: base + int(b.r.bad), Err: errnoError(b.op, syscall.Errno(rc))}
	}
	return nil
}

// PostSend posts send work requests. They are checked and translated
// into the QP's C batch, up to 32 at a time, and posted with one
// ibv_post_send per batch; a refused one is a *verbs.PostError, and it
// and those after it are not posted. PostSend allocates nothing unless it
// fails.
func (q *QP) PostSend(wrs []verbs.SendWR) error {
	if err := q.made(); err != nil {
		return err
	}
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	for base := 0; base < len(wrs); {
		n := min(len(wrs)-base, len(q.swr))
		ex := false
		for i := range n {
			if isFlushOrAtomicWrite(wrs[base+i].Opcode) {
				// What is batched before it goes first, then it alone.
				n, ex = i, true
				break
			}
			if err := q.fillSend(i, &wrs[base+i]); err != nil {
				if i > 0 {
					if perr := q.flushSend(base, i); perr != nil {
						return perr
					}
				}
				return &verbs.PostError{Index: base + i, Err: err}
			}
		}
		if n > 0 {
			if err := q.flushSend(base, n); err != nil {
				return err
			}
		}
		base += n
		if ex {
			if err := q.postEx(&wrs[base]); err != nil {
				return &verbs.PostError{Index: base, Err: err}
			}
			base++
		}
	}
	return nil
}

// postEx posts a FLUSH or ATOMIC_WRITE through the ibv_wr_* API, in the
// first slot of the send batch (the batch before it is posted already);
// the caller holds q.smu.
func (q *QP) postEx(wr *verbs.SendWR) error {
	if err := checkSendOp(q.typ, wr.Opcode); err != nil {
		return err
	}
	if err := checkExWR(wr, q.exOps); err != nil {
		return err
	}
	g := &q.swr[0]
	q.sbind[0] = nil
	g.id, g.opcode, g.flags = C.uint64_t(wr.ID), C.uint32_t(wr.Opcode), C.uint32_t(wr.Flags)
	g.remote_addr, g.rkey, g.compare_add = C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint64_t(wr.CompareAdd)
	g.flush_len, g.flush_type, g.flush_level = C.uint32_t(wr.Flush.Len), C.uint8_t(wr.Flush.Type), C.uint8_t(wr.Flush.Level)
	if rc := C.gr_post_ex(q.qp, g); rc != 0 {
		return errnoError("ibv_wr_complete", syscall.Errno(rc))
	}
	return nil
}

func (q *QP) flushSend(base, n int) error {
	rc := C.gr_post_send(q.sq, C.int(n))
	posted := n
	if rc != 0 {
		posted = int(q.sq.bad)
	}
	for i, m := range q.sbind[:posted] {
		if m != nil { // ibv_mw.rkey is the posted bind's
			m.rkey.Store(uint32(q.swr[i].mw_rkey))
		}
	}
	if rc != 0 {
		return &verbs.PostError{Index: base + posted, Err: errnoError("ibv_post_send", syscall.Errno(rc))}
	}
	return nil
}

// fillSend checks wr and writes it into slot i of the send batch.
func (q *QP) fillSend(i int, wr *verbs.SendWR) error {
	if err := checkSendOp(q.typ, wr.Opcode); err != nil {
		return err
	}
	g := &q.swr[i]
	q.sbind[i] = nil
	if wr.Opcode == verbs.OpBindMW {
		m, err := q.fillBind(g, wr)
		if err != nil {
			return err
		}
		g.id, g.opcode, g.flags, g.ah = C.uint64_t(wr.ID), C.uint32_t(wr.Opcode), C.uint32_t(wr.Flags), nil
		q.sbind[i] = m
		return nil
	}
	sge := q.sge[i*q.maxSGE : (i+1)*q.maxSGE]
	if wr.Flags&verbs.Inline != 0 {
		if len(wr.InlineData) > q.maxInline {
			return verbs.ErrInlineTooLong
		}
		if wr.Opcode.NeedsResponse() {
			return fmt.Errorf("%w: inline %v", verbs.ErrInvalidWR, wr.Opcode)
		}
		off := i * q.maxInline
		n := copy(q.inl[off:off+q.maxInline], wr.InlineData)
		sge[0].addr, sge[0].length, sge[0].lkey = C.uint64_t(q.inlAddr+uint64(off)), C.uint32_t(n), 0
		g.num_sge = 0
		if n > 0 {
			g.num_sge = 1
		}
	} else {
		if len(wr.SGL) > q.maxSGE {
			return verbs.ErrTooManySGE
		}
		for j, s := range wr.SGL {
			sge[j].addr, sge[j].length, sge[j].lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
		}
		g.num_sge = C.uint32_t(len(wr.SGL))
	}
	if wr.Opcode.IsAtomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8) {
		return fmt.Errorf("%w: an atomic takes one 8-byte SGE", verbs.ErrInvalidWR)
	}
	g.id, g.opcode, g.flags = C.uint64_t(wr.ID), C.uint32_t(wr.Opcode), C.uint32_t(wr.Flags)
	g.imm = C.uint32_t(wr.Imm)
	if wr.Opcode == verbs.OpSendInv || wr.Opcode == verbs.OpLocalInv {
		g.imm = C.uint32_t(wr.InvRKey)
	}
	g.remote_addr, g.rkey = C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey)
	g.compare_add, g.swap = C.uint64_t(wr.CompareAdd), C.uint64_t(wr.Swap)
	g.ah = nil
	if q.typ == verbs.UD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah == nil || ah.ah == nil || ah.pd == nil {
			return fmt.Errorf("%w: a UD send needs an address handle of this backend (PD.CreateAH)", verbs.ErrInvalidWR)
		}
		if ah.pd.dev != q.dev || ah.dead.Load() {
			return fmt.Errorf("%w: address handle of another device, or destroyed", verbs.ErrInvalidWR)
		}
		if wr.RemoteQPN > bth.MaxQPN {
			return fmt.Errorf("%w: remote QPN %#x", verbs.ErrInvalidWR, wr.RemoteQPN)
		}
		g.ah, g.remote_qpn, g.remote_qkey = ah.ah, C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	}
	return nil
}

// PostRecv posts receive work requests to the QP's own receive queue,
// batched like PostSend; it fails with verbs.ErrHasSRQ on a QP with an
// SRQ.
func (q *QP) PostRecv(wrs []verbs.RecvWR) error {
	if err := q.made(); err != nil {
		return err
	}
	if q.srq != nil {
		return verbs.ErrHasSRQ
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	return q.rq.post(wrs)
}
