package qp

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// wqeState is how far a send work request has got.
type wqeState uint8

const (
	wqePosted  wqeState = iota // not started
	wqeStarted                 // some packets sent
	wqeSent                    // every packet sent, waiting for ACK or response
	wqeDone                    // complete (status says how), waiting to retire in order
	numWQEState
)

// sendWQE is a posted send work request and its progress.
type sendWQE struct {
	wr     verbs.SendWR // wr.SGL aliases sgl
	sgl    []verbs.SGE
	inline []byte
	length uint64
	dest   netip.Addr // UD: the address handle's address and traffic class
	tos    uint8

	state    wqeState
	status   verbs.Status
	assigned bool // firstPSN and npsn are set; they stay right across rewinds
	firstPSN bth.PSN
	npsn     uint32  // PSNs the request takes (responses for a READ)
	sent     uint64  // payload bytes sent (SEND, WRITE) or asked for (READ)
	piece    uint32  // READ: the PSNs one of its READ requests asks for at most (readPiece)
	orig     uint64  // atomic: the original remote value
	bind     *mwBind // BIND_MW: what to bind
	// flushTries counts the times a FLUSH went out (QP.flushICRC).
	flushTries uint8
}

// lastPSN returns the last PSN of the request.
func (w *sendWQE) lastPSN() bth.PSN { return w.firstPSN.Add(w.npsn - 1) }

// sendQueue is the ring of send work requests, allocated on first use.
// Sequence numbers only grow; the slot is the number modulo the size.
//
//	first: oldest request not yet retired (completed in order)
//	next:  the request the requester works on
//	tail:  where the next post goes
type sendQueue struct {
	ring              []sendWQE
	first, next, tail uint64
	max               uint64
	maxSGE            int
}

func (s *sendQueue) at(seq uint64) *sendWQE { return &s.ring[seq%s.max] }

// post appends a copy of wr; the caller checked it and that there is room.
func (s *sendQueue) post(wr *verbs.SendWR, q *QP) {
	if s.ring == nil {
		// One array backs every slot's SGE list, so that posting
		// allocates nothing once the ring exists.
		s.ring = make([]sendWQE, s.max)
		sges := make([]verbs.SGE, int(s.max)*s.maxSGE)
		for i := range s.ring {
			s.ring[i].sgl = sges[i*s.maxSGE : i*s.maxSGE : (i+1)*s.maxSGE]
		}
	}
	w := s.at(s.tail)
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.wr = *wr
	w.wr.SGL = w.sgl
	w.wr.BindMW, w.bind = nil, nil // the caller sets bind, a copy
	w.inline = w.inline[:0]
	w.length = 0
	if wr.Flags&verbs.Inline != 0 {
		if cap(w.inline) < int(q.cap.MaxInlineData) {
			w.inline = make([]byte, 0, q.cap.MaxInlineData)
		}
		w.inline = append(w.inline, wr.InlineData...)
		w.length = uint64(len(w.inline))
	} else {
		for _, e := range wr.SGL {
			w.length += uint64(e.Length)
		}
	}
	if wr.AH != nil {
		a := wr.AH.Attr()
		w.dest, w.tos = a.DestAddr(), a.TrafficClass
	}
	w.state, w.status, w.sent, w.npsn, w.orig, w.assigned = wqePosted, verbs.Success, 0, 0, 0, false
	w.flushTries = 0
	s.tail++
}

// recvWQE is a posted receive.
type recvWQE struct {
	id  uint64
	sgl []verbs.SGE
	len uint64 // total length of sgl
}

// recvQueue is a ring of posted receives, allocated on first use so that
// idle queue pairs stay small. The owner's lock protects it.
type recvQueue struct {
	ring   []recvWQE
	head   int
	n      int
	max    int
	maxSGE int
}

func (q *recvQueue) full() bool { return q.n == q.max }

// post appends wr; the caller checked it.
func (q *recvQueue) post(wr *verbs.RecvWR) {
	if q.ring == nil {
		q.ring = make([]recvWQE, q.max)
		sges := make([]verbs.SGE, q.max*q.maxSGE)
		for i := range q.ring {
			q.ring[i].sgl = sges[i*q.maxSGE : i*q.maxSGE : (i+1)*q.maxSGE]
		}
	}
	i := (q.head + q.n) % q.max
	w := &q.ring[i]
	w.id = wr.ID
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.len = 0
	for _, s := range wr.SGL {
		w.len += uint64(s.Length)
	}
	q.n++
}

// peek returns the oldest receive, or nil.
func (q *recvQueue) peek() *recvWQE {
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

// pop removes the oldest receive.
func (q *recvQueue) pop() {
	q.head++
	if q.head == q.max {
		q.head = 0
	}
	q.n--
}

func checkRecvWR(wr *verbs.RecvWR, maxSGE int) error {
	if len(wr.SGL) > maxSGE {
		return fmt.Errorf("%w: %d SGEs, and the queue takes at most %d (MaxRecvSGE, MaxSGE of an SRQ)",
			verbs.ErrTooManySGE, len(wr.SGL), maxSGE)
	}
	return nil
}
