package qp

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// A RecvSource holds receives a program has posted that have not come
// through PostRecv yet: package uverbs's rings, which the device takes
// receives from on a goroutine of its own. A NIC sees a receive the
// moment its driver writes it into the queue; so that the engine does
// too, the responder asks the source when it finds the queue empty,
// before it answers with an RNR NAK (RC) or drops the message (UD, UC).
//
// Pull is called with the queue's lock held: it calls post for each
// receive waiting, oldest first (post checks it as PostRecv does, and an
// error ends the pull: the source keeps the receive for its own
// PostRecv), and must not block: a source busy posting elsewhere returns
// at once, as a receive whose doorbell is still on its way.
type RecvSource interface {
	Pull(post func(*verbs.RecvWR) error)
}

// SetRecvSource makes src the QP's source of receives besides PostRecv
// (nil: none). A QP with an SRQ takes its receives from the SRQ's.
func (q *QP) SetRecvSource(src RecvSource) {
	if !q.ok() {
		return
	}
	q.mu.Lock()
	q.recvSrc = src
	q.mu.Unlock()
}

// SetRecvSource makes src the SRQ's source of receives besides PostRecv
// (nil: none).
func (s *SRQ) SetRecvSource(src RecvSource) {
	if !s.ok() {
		return
	}
	s.mu.Lock()
	s.src = src
	s.mu.Unlock()
}

// pull asks the QP's source for receives; the caller holds q.mu and found
// the queue empty.
func (q *QP) pull() {
	if q.recvSrc == nil || q.destroyed {
		return
	}
	q.recvSrc.Pull(func(wr *verbs.RecvWR) error {
		if err := checkRecvWR(wr, q.rq.maxSGE); err != nil {
			return err
		}
		if q.rq.full() {
			return fmt.Errorf("%w: the receive queue is full", verbs.ErrQueueFull)
		}
		q.rq.post(wr)
		return nil
	})
}

// pull is QP.pull for the SRQ; the caller holds s.mu.
func (s *SRQ) pull() {
	if s.src == nil || s.dead {
		return
	}
	s.src.Pull(func(wr *verbs.RecvWR) error {
		if err := checkRecvWR(wr, s.q.maxSGE); err != nil {
			return err
		}
		if s.q.full() {
			return fmt.Errorf("%w: the SRQ is full", verbs.ErrQueueFull)
		}
		s.q.post(wr)
		return nil
	})
}
