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

	"github.com/goroce/goroce/verbs"
)

// SRQ is a shared receive queue. It is safe for concurrent use.
type SRQ struct {
	pd   *PD
	id   uint64
	srq  *C.struct_ibv_srq
	mu   sync.Mutex
	rq   recvBatch
	dead bool
}

// CreateSRQ creates a shared receive queue; a Limit above 0 arms the SRQ
// limit event at once (ibv_modify_srq, since ibv_create_srq ignores it).
func (p *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	if err := p.made(); err != nil {
		return nil, err
	}
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	if attr.MaxWR == 0 || attr.Limit > attr.MaxWR {
		return nil, fmt.Errorf("%w: SRQ max_wr %d limit %d: max_wr must be at least 1, and the limit at most max_wr", verbs.ErrInvalidCap, attr.MaxWR, attr.Limit)
	}
	attr.MaxSGE = max(attr.MaxSGE, 1)
	s := &SRQ{pd: p, id: d.newID()}
	srq, err := C.gr_create_srq(p.pd, C.uint64_t(s.id), C.uint32_t(attr.MaxWR), C.uint32_t(attr.MaxSGE))
	if srq == nil {
		e := cErr("ibv_create_srq", err)
		e.Detail = fmt.Sprintf("%+v", attr)
		return nil, e
	}
	s.srq = srq
	var ok bool
	if s.rq, ok = newRecvBatch(nil, srq, int(min(attr.MaxWR, postBatch)), int(attr.MaxSGE)); !ok {
		C.ibv_destroy_srq(srq)
		return nil, errnoError("calloc", syscall.ENOMEM)
	}
	if attr.Limit > 0 {
		if rc := C.gr_modify_srq(srq, C.uint32_t(attr.Limit)); rc != 0 {
			s.rq.free()
			C.ibv_destroy_srq(srq)
			return nil, errnoError("ibv_modify_srq", syscall.Errno(rc))
		}
	}
	d.mu.Lock()
	d.srqs[s.id] = s
	d.mu.Unlock()
	return s, nil
}

// made reports an error for an SRQ that CreateSRQ did not make (nil, or
// the zero value).
func (s *SRQ) made() error {
	if s == nil || s.srq == nil || s.pd == nil {
		return errNilObject("*SRQ", "PD.CreateSRQ")
	}
	return nil
}

// PostRecv posts receives to the SRQ, batched like QP.PostRecv.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) error {
	if err := s.made(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	return s.rq.post(wrs)
}

// Modify arms the SRQ limit event: when fewer than limit receives remain,
// the device reports verbs.EventSRQLimitReached once.
func (s *SRQ) Modify(limit uint32) error {
	if err := s.made(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.gr_modify_srq(s.srq, C.uint32_t(limit)); rc != 0 {
		e := errnoError("ibv_modify_srq", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("limit %d", limit)
		return e
	}
	return nil
}

// Destroy destroys the SRQ; it fails with verbs.ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	if err := s.made(); err != nil {
		return err
	}
	s.pd.dev.life.RLock()
	defer s.pd.dev.life.RUnlock()
	return s.destroy()
}

func (s *SRQ) destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
		return errnoError("ibv_destroy_srq", syscall.Errno(C.gr_errno_ret(rc)))
	}
	s.dead = true
	s.rq.free()
	d := s.pd.dev
	d.mu.Lock()
	delete(d.srqs, s.id)
	d.mu.Unlock()
	return nil
}

// AH is an address handle, for UD sends. It is safe for concurrent use.
type AH struct {
	pd   *PD
	ah   *C.struct_ibv_ah
	attr verbs.AHAttr
	mu   sync.Mutex
	dead atomic.Bool
}

// CreateAH creates an address handle with a GRH towards attr.DGID.
// SGIDIndex 0 is the device's GID; Port 0 means the device's port.
func (p *PD) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	if err := p.made(); err != nil {
		return nil, err
	}
	if err := checkAH(&attr); err != nil {
		return nil, err
	}
	d := p.dev
	d.life.RLock()
	defer d.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	var g C.gr_ah
	d.toCAH(&g, &attr)
	ah, err := C.gr_create_ah(p.pd, &g)
	if ah == nil {
		e := cErr("ibv_create_ah", err)
		e.Detail = fmt.Sprintf("to %v", attr.DestAddr())
		return nil, e
	}
	a := &AH{pd: p, ah: ah, attr: attr}
	d.mu.Lock()
	d.ahs[a] = struct{}{}
	d.mu.Unlock()
	return a, nil
}

// Attr returns the attributes the handle was created with.
func (a *AH) Attr() verbs.AHAttr {
	if a == nil {
		return verbs.AHAttr{}
	}
	return a.attr
}

// Destroy destroys the address handle.
func (a *AH) Destroy() error {
	if a == nil || a.ah == nil || a.pd == nil {
		return errNilObject("*AH", "PD.CreateAH")
	}
	a.pd.dev.life.RLock()
	defer a.pd.dev.life.RUnlock()
	return a.destroy()
}

func (a *AH) destroy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dead.Load() {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_ah(a.ah); rc != 0 {
		return errnoError("ibv_destroy_ah", syscall.Errno(C.gr_errno_ret(rc)))
	}
	a.dead.Store(true)
	d := a.pd.dev
	d.mu.Lock()
	delete(d.ahs, a)
	d.mu.Unlock()
	return nil
}
