//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// QP is a queue pair. It is safe for concurrent use: posts to the send
// queue, posts to the receive queue and the control path each have their
// own lock.
type QP struct {
	dev *Device
	pd  *PD
	typ verbs.QPType
	qpn uint32
	cap verbs.QPCap
	srq *SRQ
	qp  *C.struct_ibv_qp

	amu  sync.Mutex // Modify, Query, Destroy
	dead atomic.Bool

	smu       sync.Mutex
	exOps     uint32 // the operations of the ibv_wr_* API the QP was made with (exWithFlush, exWithAtomicWrite)
	sq        *C.gr_sq
	swr       []C.gr_swr
	sbind     []*MW // the windows the batch's BIND_MW requests bind, whose RKey they set once posted
	sge       []C.struct_ibv_sge
	inl       []byte
	inlAddr   uint64
	maxSGE    int
	maxInline int

	rmu sync.Mutex
	rq  recvBatch
}

// CreateQP creates a queue pair in the RESET state. Its CQs (and SRQ)
// must come from the same device; a GSI QP cannot be made (the kernel
// owns QP 1).
func (p *PD) CreateQP(init *verbs.QPInitAttr) (verbs.QP, error) {
	if err := p.made(); err != nil {
		return nil, err
	}
	if err := checkQPInit(init); err != nil {
		return nil, err
	}
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if ok1 && scq.made() != nil || ok2 && rcq.made() != nil {
		return nil, fmt.Errorf("%w (QPInitAttr's CQs)", errNilObject("*CQ", "Device.CreateCQ"))
	}
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("%w: send and receive CQs of this device are required", verbs.ErrForeign)
	}
	var srq *SRQ
	if init.SRQ != nil {
		s, ok := init.SRQ.(*SRQ)
		if !ok || s == nil || s.pd != p {
			return nil, fmt.Errorf("%w: SRQ of another PD or backend", verbs.ErrForeign)
		}
		srq = s
	}
	var qt C.uint32_t
	switch init.Type {
	case verbs.RC:
		qt = C.IBV_QPT_RC
	case verbs.UC:
		qt = C.IBV_QPT_UC
	case verbs.UD:
		qt = C.IBV_QPT_UD
	case verbs.GSI:
		return nil, fmt.Errorf("%w: a GSI QP (QP 1 belongs to the kernel)", ErrUnsupported)
	default:
		return nil, fmt.Errorf("%w: QP type %v", verbs.ErrInvalidAttr, init.Type)
	}
	c := init.Cap
	c.MaxSendWR, c.MaxSendSGE, c.MaxRecvSGE = max(c.MaxSendWR, 1), max(c.MaxSendSGE, 1), max(c.MaxRecvSGE, 1)
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else {
		c.MaxRecvWR = max(c.MaxRecvWR, 1)
	}
	in := C.gr_qpinit{send_cq: scq.cq, recv_cq: rcq.cq, qp_type: qt,
		max_send_wr: C.uint32_t(c.MaxSendWR), max_recv_wr: C.uint32_t(c.MaxRecvWR),
		max_send_sge: C.uint32_t(c.MaxSendSGE), max_recv_sge: C.uint32_t(c.MaxRecvSGE),
		max_inline: C.uint32_t(c.MaxInlineData)}
	if srq != nil {
		in.srq = srq.srq
	}
	if init.SignalAll {
		in.sig_all = 1
	}
	in.ex_ops = C.uint32_t(exOps(init.Type, d.caps))
	qp, err := C.gr_create_qp(p.pd, &in)
	if qp == nil {
		e := cErr("ibv_create_qp", err)
		e.Detail = fmt.Sprintf("%v %+v", init.Type, init.Cap)
		return nil, e
	}
	q := &QP{dev: d, pd: p, typ: init.Type, qpn: uint32(qp.qp_num), srq: srq, qp: qp, exOps: uint32(in.ex_ops),
		cap: verbs.QPCap{MaxSendWR: uint32(in.max_send_wr), MaxRecvWR: uint32(in.max_recv_wr),
			MaxSendSGE: uint32(in.max_send_sge), MaxRecvSGE: uint32(in.max_recv_sge),
			MaxInlineData: uint32(in.max_inline)}}
	if err := q.makeBatches(); err != nil {
		q.freeBatches()
		C.ibv_destroy_qp(qp)
		return nil, err
	}
	d.mu.Lock()
	d.qps[q] = struct{}{}
	d.mu.Unlock()
	d.log.Debug("create QP", "qpn", q.qpn, "type", q.typ, "cap", q.cap, "wr_api_ops", q.exOps)
	return q, nil
}

func (q *QP) makeBatches() error {
	c := q.cap
	q.maxSGE = max(int(c.MaxSendSGE), 1)
	q.maxInline = int(min(c.MaxInlineData, 1<<16))
	n := int(min(max(c.MaxSendWR, 1), postBatch))
	ud := C.int(0)
	if q.typ == verbs.UD {
		ud = 1
	}
	q.sq = C.gr_sq_new(q.qp, C.int(n), C.int(q.maxSGE), C.int(q.maxInline), ud)
	if q.sq == nil {
		return errnoError("calloc", syscall.ENOMEM)
	}
	q.swr = unsafe.Slice(q.sq.swr, n)
	q.sbind = make([]*MW, n)
	q.sge = unsafe.Slice(q.sq.sge, n*q.maxSGE)
	if q.maxInline > 0 {
		q.inl = unsafe.Slice((*byte)(unsafe.Pointer(q.sq.inl)), n*q.maxInline)
		q.inlAddr = uint64(uintptr(unsafe.Pointer(q.sq.inl)))
	}
	if q.srq == nil {
		var ok bool
		if q.rq, ok = newRecvBatch(q.qp, nil, int(min(max(c.MaxRecvWR, 1), postBatch)), max(int(c.MaxRecvSGE), 1)); !ok {
			return errnoError("calloc", syscall.ENOMEM)
		}
	}
	return nil
}

func (q *QP) freeBatches() {
	C.gr_sq_free(q.sq)
	q.sq, q.swr, q.sge, q.inl, q.sbind = nil, nil, nil, nil, nil
	if q.rq.r != nil {
		q.rq.free()
	}
}

// made reports an error for a QP that CreateQP did not make (nil, or the
// zero value).
func (q *QP) made() error {
	if q == nil || q.qp == nil || q.dev == nil {
		return errNilObject("*QP", "PD.CreateQP")
	}
	return nil
}

// QPN returns the queue pair number (0 for a nil QP).
func (q *QP) QPN() uint32 {
	if q == nil {
		return 0
	}
	return q.qpn
}

// Type returns the QP's transport service.
func (q *QP) Type() verbs.QPType {
	if q == nil {
		return 0
	}
	return q.typ
}

// Cap returns the queue sizes the device gave the QP.
func (q *QP) Cap() verbs.QPCap {
	if q == nil {
		return verbs.QPCap{}
	}
	return q.cap
}

func (d *Device) toCAH(g *C.gr_ah, a *verbs.AHAttr) {
	for i, b := range a.DGID {
		g.dgid[i] = C.uint8_t(b)
	}
	g.flow_label = C.uint32_t(a.FlowLabel)
	g.sgid_index = C.uint8_t(tableIndex(int(a.SGIDIndex), d.gidIdx))
	g.hop_limit = C.uint8_t(a.HopLimit)
	g.traffic_class = C.uint8_t(a.TrafficClass)
	g.sl = C.uint8_t(a.SL)
	g.port = C.uint8_t(a.Port)
	if a.Port == 0 {
		g.port = C.uint8_t(d.port)
	}
}

func (d *Device) fromCAH(a *verbs.AHAttr, g *C.gr_ah) {
	for i := range a.DGID {
		a.DGID[i] = byte(g.dgid[i])
	}
	a.FlowLabel = uint32(g.flow_label)
	a.SGIDIndex = uint8(verbsIndex(int(g.sgid_index), d.gidIdx))
	a.HopLimit, a.TrafficClass = uint8(g.hop_limit), uint8(g.traffic_class)
	a.SL, a.Port = uint8(g.sl), uint8(g.port)
}

// Modify changes attributes and state (ibv_modify_qp). GID index 0 in the
// address vector is the device's GID. When the device refuses with
// EINVAL, the error says why where the transition table can tell
// (verbs.ErrInvalidTransition, ErrMissingAttr, ErrExtraAttr), and is
// verbs.ErrInvalidAttr otherwise.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	if err := q.made(); err != nil {
		return err
	}
	if err := checkModify(attr, mask); err != nil {
		return err
	}
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	a := C.gr_qpattr{state: C.uint32_t(attr.State), cur_state: C.uint32_t(attr.CurState),
		path_mtu: C.uint32_t(attr.PathMTU), qkey: C.uint32_t(attr.QKey), rq_psn: C.uint32_t(attr.RQPSN),
		sq_psn: C.uint32_t(attr.SQPSN), dest_qpn: C.uint32_t(attr.DestQPN), access: C.uint32_t(attr.Access),
		pkey_index: C.uint16_t(attr.PKeyIndex), port: C.uint8_t(attr.Port), timeout: C.uint8_t(attr.Timeout),
		retry_cnt: C.uint8_t(attr.RetryCnt), rnr_retry: C.uint8_t(attr.RNRRetry),
		min_rnr_timer: C.uint8_t(attr.MinRNRTimer), max_rd_atomic: C.uint8_t(attr.MaxRDAtomic),
		max_dest_rd_atomic: C.uint8_t(attr.MaxDestRDAtomic)}
	if attr.SQDrainNotify {
		a.sqd_notify = 1
	}
	q.dev.toCAH(&a.ah, &attr.AH)
	if rc := C.gr_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		e := errnoError("ibv_modify_qp", syscall.Errno(rc))
		if e.Errno == syscall.EINVAL {
			if cur, err := q.query(); err == nil {
				next := cur.State
				if mask&verbs.AttrState != 0 {
					next = attr.State
				}
				if k := classifyModify(q.typ, cur.State, next, mask); k != nil {
					e.Kind = k
				}
			}
		}
		e.Detail = fmt.Sprintf("QP %d mask %v", q.qpn, mask)
		return e
	}
	if mask&verbs.AttrState != 0 {
		q.dev.log.Debug("modify QP", "qpn", q.qpn, "state", attr.State, "mask", mask,
			"sq_psn", uint32(attr.SQPSN), "rq_psn", uint32(attr.RQPSN))
	}
	return nil
}

// Query returns the QP's current attributes (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, error) {
	if err := q.made(); err != nil {
		return verbs.QPAttr{}, err
	}
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	if q.dead.Load() {
		return verbs.QPAttr{}, verbs.ErrDestroyed
	}
	return q.query()
}

func (q *QP) query() (verbs.QPAttr, error) {
	var g C.gr_qpattr
	if rc := C.gr_query_qp(q.qp, &g); rc != 0 {
		return verbs.QPAttr{}, errnoError("ibv_query_qp", syscall.Errno(rc))
	}
	a := verbs.QPAttr{State: verbs.QPState(g.state), CurState: verbs.QPState(g.cur_state),
		PathMTU: bth.MTU(g.path_mtu), QKey: uint32(g.qkey), RQPSN: bth.PSN(g.rq_psn),
		SQPSN: bth.PSN(g.sq_psn), DestQPN: uint32(g.dest_qpn), Access: verbs.Access(g.access),
		PKeyIndex: uint16(g.pkey_index), Port: uint8(g.port), Timeout: uint8(g.timeout),
		RetryCnt: uint8(g.retry_cnt), RNRRetry: uint8(g.rnr_retry), MinRNRTimer: uint8(g.min_rnr_timer),
		MaxRDAtomic: uint8(g.max_rd_atomic), MaxDestRDAtomic: uint8(g.max_dest_rd_atomic),
		SQDrainNotify: g.sqd_notify != 0,
		Cap: verbs.QPCap{MaxSendWR: uint32(g.max_send_wr), MaxRecvWR: uint32(g.max_recv_wr),
			MaxSendSGE: uint32(g.max_send_sge), MaxRecvSGE: uint32(g.max_recv_sge),
			MaxInlineData: uint32(g.max_inline)}}
	q.dev.fromCAH(&a.AH, &g.ah)
	return a, nil
}

// Destroy destroys the QP (ibv_destroy_qp); outstanding work requests
// complete no more.
func (q *QP) Destroy() error {
	if err := q.made(); err != nil {
		return err
	}
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	return q.destroy()
}

func (q *QP) destroy() error {
	q.amu.Lock()
	defer q.amu.Unlock()
	q.smu.Lock()
	defer q.smu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoError("ibv_destroy_qp", syscall.Errno(C.gr_errno_ret(rc)))
	}
	q.dead.Store(true)
	q.freeBatches()
	q.dev.mu.Lock()
	delete(q.dev.qps, q)
	q.dev.mu.Unlock()
	q.dev.log.Debug("destroy QP", "qpn", q.qpn)
	return nil
}
