package uverbs

import (
	"github.com/goroce/goroce/uverbs/abi"
)

// Multicast: ATTACH_MCAST and DETACH_MCAST attach a session's UD QP to a
// group through the engine (qp.QP.AttachMcast), as the kernel's uverbs
// does through the driver: it keeps the session's list of each QP's
// groups (GID and LID), answers an attach of a pair listed already with
// success and a detach of one not listed with EINVAL, and detaches
// whatever is left when the QP goes with its session. DESTROY_QP of a QP
// still attached fails with EBUSY, as ibv_destroy_qp does. RoCE has no
// LIDs: the engine attaches by GID, once, however many LIDs a GID is
// listed with.

func (s *session) attachMcast(body []byte) uint32 {
	var req abi.McastReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	q := s.qps[req.QP]
	if q == nil {
		return abi.EINVAL
	}
	for _, m := range q.mcast {
		if m.GID == req.GID && m.LID == req.LID {
			return 0
		}
	}
	if err := q.qp.AttachMcast(req.GID); err != nil {
		return errno(err)
	}
	q.mcast = append(q.mcast, abi.McastReq{QP: req.QP, LID: req.LID, GID: req.GID})
	return 0
}

func (s *session) detachMcast(body []byte) uint32 {
	var req abi.McastReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	q := s.qps[req.QP]
	if q == nil {
		return abi.EINVAL
	}
	i, others := -1, 0
	for j, m := range q.mcast {
		switch {
		case m.GID == req.GID && m.LID == req.LID:
			i = j
		case m.GID == req.GID:
			others++
		}
	}
	if i < 0 {
		return abi.EINVAL
	}
	if others == 0 {
		if err := q.qp.DetachMcast(req.GID); err != nil {
			return errno(err)
		}
	}
	q.mcast = append(q.mcast[:i], q.mcast[i+1:]...)
	return 0
}

// detachAll detaches q from every group left, as the kernel does for the
// QPs of a process that ends (freeQP).
func (s *session) detachAll(q *qpObj) {
	done := map[[16]byte]bool{}
	for _, m := range q.mcast {
		if !done[m.GID] {
			done[m.GID] = true
			if err := q.qp.DetachMcast(m.GID); err != nil {
				s.log.Warn("detach from multicast group", "qpn", q.qp.QPN(), "err", err)
			}
		}
	}
	q.mcast = nil
}
