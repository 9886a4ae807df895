package uverbs

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// The handlers of QP and SRQ requests.

// qpType returns the engine's type of an ibv_qp_type: the types goroce
// does not have (raw packet, XRC, the driver's) are EOPNOTSUPP, numbers
// ibverbs does not define EINVAL.
func qpType(t uint32) (verbs.QPType, uint32) {
	switch t {
	case 2:
		return verbs.RC, 0
	case 3:
		return verbs.UC, 0
	case 4:
		return verbs.UD, 0
	case 8, 9, 10, 0xff:
		return 0, abi.EOPNOTSUPP
	}
	return 0, abi.EINVAL
}

// sendStride is the slot size of a send queue: a SendWQE and room for its
// SGEs, its inline data or a bind, in whole cache lines.
func sendStride(c verbs.QPCap) uint32 {
	n := max(c.MaxSendSGE*abi.SGESize, c.MaxInlineData, uint32(bindInfoSize))
	return (abi.SendWQESize + n + 63) &^ 63
}

// recvStride is the slot size of a receive queue.
func recvStride(maxSGE uint32) uint32 { return abi.RecvWQESize + max(maxSGE, 1)*abi.SGESize }

// allocDoorbell returns a free doorbell bit.
func (s *session) allocDoorbell() (uint32, bool) {
	if n := len(s.freeDB); n > 0 {
		d := s.freeDB[n-1]
		s.freeDB = s.freeDB[:n-1]
		return d, true
	}
	if s.nextDB >= abi.Doorbells {
		return 0, false
	}
	s.nextDB++
	return s.nextDB - 1, true
}

func (s *session) createQP(body []byte) (any, uint32) {
	var req abi.CreateQPReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	typ, e := qpType(req.Type)
	if e != 0 {
		return nil, e
	}
	p, scq, rcq := s.pds[req.PD], s.cqs[req.SendCQ], s.cqs[req.RecvCQ]
	if p == nil || scq == nil || rcq == nil {
		return nil, abi.EINVAL
	}
	var srq *srqObj
	if req.SRQ != 0 {
		if srq = s.srqs[req.SRQ]; srq == nil {
			return nil, abi.EINVAL
		}
	}
	init := &verbs.QPInitAttr{Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, SignalAll: req.SigAll != 0,
		Cap: verbs.QPCap{MaxSendWR: req.Cap.MaxSendWR, MaxRecvWR: req.Cap.MaxRecvWR, MaxSendSGE: req.Cap.MaxSendSGE,
			MaxRecvSGE: req.Cap.MaxRecvSGE, MaxInlineData: req.Cap.MaxInline}}
	if srq != nil {
		init.SRQ = srq.srq
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	db, ok := s.allocDoorbell()
	if !ok {
		return nil, abi.ENOMEM
	}
	q, err := p.pd.CreateQP(init)
	if err != nil {
		s.freeDB = append(s.freeDB, db)
		return nil, errno(err)
	}
	a, _ := q.Query()
	c := a.Cap
	o := &qpObj{s: s, h: h, qp: q, typ: typ, scq: scq, rcq: rcq, srq: srq, db: db, sigAll: req.SigAll != 0, cap: c,
		maxInline: c.MaxInlineData}
	if o.sq, err = s.rings.newRing(c.MaxSendWR, sendStride(c)); err == nil && srq == nil {
		o.rq, err = s.rings.newRing(c.MaxRecvWR, recvStride(c.MaxRecvSGE))
	}
	if err != nil {
		q.Destroy()
		s.rings.free(o.sq.off, o.sq.mem)
		s.freeDB = append(s.freeDB, db)
		return nil, abi.ENOMEM
	}
	if srq != nil {
		srq.users++
	}
	if srq == nil {
		roce.SetRecvSource(q, o)
	}
	s.qps[h] = o
	s.wqs[db] = o
	s.srv.mu.Lock()
	s.srv.byQPN[q.QPN()] = o
	s.srv.mu.Unlock()
	return &abi.CreateQPReply{Handle: h, QPN: q.QPN(), Doorbell: db,
		Cap: abi.QPCap{MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE,
			MaxInline: c.MaxInlineData},
		SQ: o.sq.reply(), RQ: o.rq.reply()}, 0
}

func (s *session) modifyQP(body []byte) uint32 {
	var req abi.ModifyQPReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	q := s.qps[req.Handle]
	switch {
	case q == nil:
		return abi.EINVAL
	case req.Mask >= 1<<21:
		// Rate limits, and bits no attribute has: the kernel's uverbs
		// refuses what is past IBV_QP_DEST_QPN before a driver sees it.
		return abi.EOPNOTSUPP
	}
	mask := verbs.AttrMask(req.Mask)
	attr, e := s.qpAttr(&req.Attr, mask)
	if e != 0 {
		return e
	}
	if err := q.qp.Modify(&attr, mask); err != nil {
		return errno(err)
	}
	if mask&verbs.AttrState != 0 && attr.State == verbs.StateReset {
		// A reset QP forgets what was posted and not yet taken.
		q.sqc = q.sq.prod().Load()
		q.sq.cons().Store(q.sqc)
		if q.rq.mem != nil {
			q.rqMu.Lock()
			q.rqc = q.rq.prod().Load()
			q.rq.cons().Store(q.rqc)
			q.rqMu.Unlock()
		}
	}
	return 0
}

// qpAttr converts the attributes mask names.
func (s *session) qpAttr(a *abi.QPAttr, mask verbs.AttrMask) (verbs.QPAttr, uint32) {
	v := verbs.QPAttr{State: verbs.QPState(a.State), CurState: verbs.QPState(a.CurState), PathMTU: bth.MTU(a.PathMTU),
		QKey: a.QKey, RQPSN: bth.PSN(a.RQPSN), SQPSN: bth.PSN(a.SQPSN), DestQPN: a.DestQPN, Access: verbs.Access(a.Access),
		PKeyIndex: a.PKeyIndex, Port: a.Port, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		MinRNRTimer: a.MinRNRTimer, MaxRDAtomic: a.MaxRdAtomic, MaxDestRDAtomic: a.MaxDestRdAtomic,
		SQDrainNotify: a.SQDNotify != 0}
	if mask&verbs.AttrAV != 0 {
		ah, e := s.ahAttr(&a.AH)
		if e != 0 {
			return v, e
		}
		v.AH = ah
	}
	return v, 0
}

func (s *session) queryQP(body []byte) (any, uint32) {
	var req abi.QueryQPReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	q := s.qps[req.Handle]
	if q == nil {
		return nil, abi.EINVAL
	}
	a, err := q.qp.Query()
	if err != nil {
		return nil, errno(err)
	}
	r := &abi.QueryQPReply{Attr: abi.QPAttr{State: uint32(a.State), CurState: uint32(a.CurState), PathMTU: uint32(a.PathMTU),
		QKey: a.QKey, RQPSN: uint32(a.RQPSN), SQPSN: uint32(a.SQPSN), DestQPN: a.DestQPN, Access: uint32(a.Access),
		PKeyIndex: a.PKeyIndex,
		Cap: abi.QPCap{MaxSendWR: q.cap.MaxSendWR, MaxRecvWR: q.cap.MaxRecvWR, MaxSendSGE: q.cap.MaxSendSGE,
			MaxRecvSGE: q.cap.MaxRecvSGE, MaxInline: q.cap.MaxInlineData},
		AH: abi.AHAttr{DGID: a.AH.DGID, FlowLabel: a.AH.FlowLabel, SGIDIndex: a.AH.SGIDIndex, HopLimit: a.AH.HopLimit,
			TrafficClass: a.AH.TrafficClass, SL: a.AH.SL, IsGlobal: 1, Port: max(a.AH.Port, 1)},
		SQDNotify: b2u8(a.SQDrainNotify), MaxRdAtomic: a.MaxRDAtomic, MaxDestRdAtomic: a.MaxDestRDAtomic,
		MinRNRTimer: a.MinRNRTimer, Port: max(a.Port, 1), Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry},
		SigAll: uint32(b2u8(q.sigAll))}
	if q.typ == verbs.UD {
		r.Attr.AH = abi.AHAttr{}
	}
	return r, 0
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (s *session) destroyQP(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	q := s.qps[req.Handle]
	if q == nil {
		return abi.EINVAL
	}
	s.drainPosted(q)
	if err := q.qp.Destroy(); err != nil {
		return errno(err)
	}
	s.freeQP(q)
	return 0
}

// drainPosted takes to the engine every send the program posted to q
// that the worker has not taken yet. The kernel's ibv_post_send hands a
// request to rxe before it returns, so a program that posts and then
// destroys the QP at once (mckey's sender) has its datagrams sent; here
// they would still be in the ring. The caller holds s.mu, which keeps the
// worker out.
func (s *session) drainPosted(q *qpObj) {
	if q.sq.mem == nil {
		return
	}
	w := &worker{s: s}
	left := min(q.sq.prod().Load()-q.sqc, q.sq.entries) // a producer index no program sets: what the ring holds
	for left > 0 {
		before := q.sqc
		w.drainSend(q, q.sqc+left)
		left -= q.sqc - before
	}
}

// freeQP destroys q and frees its rings and doorbell. Once the engine's
// Destroy has returned, no completion of q comes any more.
func (s *session) freeQP(q *qpObj) {
	s.log.Debug("destroy QP", "qpn", q.qp.QPN(), "handle", q.h)
	s.detachAll(q) // mcast_linux.go
	q.qp.Destroy()
	s.srv.mu.Lock()
	if s.srv.byQPN[q.qp.QPN()] == q {
		delete(s.srv.byQPN, q.qp.QPN())
	}
	s.srv.mu.Unlock()
	s.rings.free(q.sq.off, q.sq.mem)
	s.rings.free(q.rq.off, q.rq.mem)
	q.sq, q.rq = ring{}, ring{}
	if q.srq != nil {
		q.srq.users--
	}
	delete(s.wqs, q.db)
	s.freeDB = append(s.freeDB, q.db)
	delete(s.qps, q.h)
}

func (s *session) createSRQ(body []byte) (any, uint32) {
	var req abi.CreateSRQReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	p := s.pds[req.PD]
	if p == nil {
		return nil, abi.EINVAL
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	db, ok := s.allocDoorbell()
	if !ok {
		return nil, abi.ENOMEM
	}
	srq, err := p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: req.MaxWR, MaxSGE: req.MaxSGE, Limit: req.Limit})
	if err != nil {
		s.freeDB = append(s.freeDB, db)
		return nil, errno(err)
	}
	o := &srqObj{s: s, h: h, srq: srq, db: db, maxWR: req.MaxWR, maxSGE: max(req.MaxSGE, 1)}
	o.limit.Store(req.Limit)
	if o.rq, err = s.rings.newRing(o.maxWR, recvStride(o.maxSGE)); err != nil {
		srq.Destroy()
		s.freeDB = append(s.freeDB, db)
		return nil, abi.ENOMEM
	}
	roce.SetRecvSource(srq, o)
	s.srqs[h] = o
	s.wqs[db] = o
	s.srv.mu.Lock()
	s.srv.bySRQ[srq] = o
	s.srv.mu.Unlock()
	return &abi.CreateSRQReply{Handle: h, Doorbell: db, MaxWR: o.maxWR, MaxSGE: o.maxSGE, Ring: o.rq.reply()}, 0
}

// ibv_srq_attr_mask.
const (
	srqMaxWR = 1 << 0
	srqLimit = 1 << 1
)

func (s *session) modifySRQ(body []byte) uint32 {
	var req abi.ModifySRQReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	r := s.srqs[req.Handle]
	switch {
	case r == nil, req.Mask == 0, req.Mask&^(srqMaxWR|srqLimit) != 0:
		return abi.EINVAL
	case req.Mask&srqMaxWR != 0:
		return abi.EINVAL // no IBV_DEVICE_SRQ_RESIZE: an SRQ keeps its size
	case req.Limit > r.maxWR:
		return abi.EINVAL
	}
	if err := r.srq.Modify(req.Limit); err != nil {
		return errno(err)
	}
	r.limit.Store(req.Limit)
	return 0
}

func (s *session) querySRQ(body []byte) (any, uint32) {
	var req abi.HandleReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	r := s.srqs[req.Handle]
	if r == nil {
		return nil, abi.EINVAL
	}
	return &abi.QuerySRQReply{MaxWR: r.maxWR, MaxSGE: r.maxSGE, Limit: r.limit.Load()}, 0
}

func (s *session) destroySRQ(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	r := s.srqs[req.Handle]
	switch {
	case r == nil:
		return abi.EINVAL
	case r.users > 0:
		return abi.EBUSY
	}
	if err := r.srq.Destroy(); err != nil {
		return errno(err)
	}
	s.freeSRQ(r)
	return 0
}

func (s *session) freeSRQ(r *srqObj) {
	r.srq.Destroy()
	s.srv.mu.Lock()
	delete(s.srv.bySRQ, r.srq)
	s.srv.mu.Unlock()
	s.rings.free(r.rq.off, r.rq.mem)
	r.rq = ring{}
	delete(s.wqs, r.db)
	s.freeDB = append(s.freeDB, r.db)
	delete(s.srqs, r.h)
}
