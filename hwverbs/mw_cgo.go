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

// MW is a memory window. It is safe for concurrent use.
type MW struct {
	pd  *PD
	mw  *C.struct_ibv_mw
	typ verbs.MWType
	// rkey is ibv_mw.rkey as goroce keeps it: the provider sets the C
	// field for a type 1 bind, goroce sets this one for both types.
	rkey atomic.Uint32
	mu   sync.Mutex
	dead bool
}

// AllocMW allocates a memory window of type typ (ibv_alloc_mw).
func (p *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	if err := p.made(); err != nil {
		return nil, err
	}
	if typ != verbs.MWType1 && typ != verbs.MWType2 {
		return nil, fmt.Errorf("%w: memory window type %v: want verbs.MWType1 or verbs.MWType2", verbs.ErrInvalidAttr, typ)
	}
	p.dev.life.RLock()
	defer p.dev.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	mw, err := C.gr_alloc_mw(p.pd, C.int(typ))
	if mw == nil {
		e := cErr("ibv_alloc_mw", err)
		e.Detail = typ.String()
		return nil, e
	}
	m := &MW{pd: p, mw: mw, typ: typ}
	m.rkey.Store(uint32(mw.rkey))
	p.dev.mu.Lock()
	p.dev.mws[m] = struct{}{}
	p.dev.mu.Unlock()
	return m, nil
}

// made reports an error for an MW that AllocMW did not make.
func (m *MW) made() error {
	if m == nil || m.mw == nil || m.pd == nil {
		return errNilObject("*MW", "PD.AllocMW")
	}
	return nil
}

// RKey returns the window's key as ibv_mw.rkey holds it: the one it was
// allocated with, then that of the last bind posted (BindMW, or a
// BIND_MW work request of a type 2 window); 0 for a nil MW.
func (m *MW) RKey() uint32 {
	if m.made() != nil {
		return 0
	}
	return m.rkey.Load()
}

// Type returns the window's type (0 for a nil MW).
func (m *MW) Type() verbs.MWType {
	if m.made() != nil {
		return 0
	}
	return m.typ
}

// Dealloc frees the window, unbinding it if it is bound
// (ibv_dealloc_mw).
func (m *MW) Dealloc() error {
	if err := m.made(); err != nil {
		return err
	}
	m.pd.dev.life.RLock()
	defer m.pd.dev.life.RUnlock()
	return m.dealloc()
}

func (m *MW) dealloc() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.gr_dealloc_mw(m.mw); rc != 0 {
		return errnoError("ibv_dealloc_mw", syscall.Errno(rc))
	}
	m.dead = true
	d := m.pd.dev
	d.mu.Lock()
	delete(d.mws, m)
	d.mu.Unlock()
	return nil
}

// BindMW posts the bind of a type 1 window (ibv_bind_mw); RKey is the
// window's new key from then on, as the provider sets it. A bind the
// device refuses completes MW_BIND_ERR. A window is unbound with a
// region of its PD and Length 0: rxe's provider reads the region even
// then, so a nil region is refused here.
func (q *QP) BindMW(mw verbs.MW, bind *verbs.MWBindWR) error {
	if err := q.made(); err != nil {
		return err
	}
	m, err := q.ownMW(mw)
	switch {
	case err != nil:
		return err
	case bind == nil:
		return fmt.Errorf("%w: hwverbs: BindMW of a nil *verbs.MWBindWR", errNilKind)
	case m.typ != verbs.MWType1:
		return fmt.Errorf("%w: BindMW binds type 1 windows: bind a %v window with a BIND_MW work request (PostSend)",
			verbs.ErrInvalidWR, m.typ)
	}
	info := &bind.BindInfo
	r, err := q.bindRegion(info)
	if err != nil {
		return err
	}
	b := C.gr_mwbind{id: C.uint64_t(bind.ID), flags: C.uint32_t(bind.Flags), mr: r.mr,
		addr: C.uint64_t(info.Addr), length: C.uint64_t(info.Length), access: C.uint32_t(info.Access)}
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.dead.Load() {
		return verbs.ErrDestroyed
	}
	m.mu.Lock() // Dealloc waits for the call
	defer m.mu.Unlock()
	if m.dead {
		return fmt.Errorf("%w: the memory window was deallocated", verbs.ErrDestroyed)
	}
	var rkey C.uint32_t
	if rc := C.gr_bind_mw(q.qp, m.mw, &b, &rkey); rc != 0 {
		e := errnoError("ibv_bind_mw", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("%d bytes at %#x, %v", info.Length, info.Addr, info.Access)
		return e
	}
	m.rkey.Store(uint32(rkey))
	return nil
}

// ownMW returns mw as a window of q's device.
func (q *QP) ownMW(mw verbs.MW) (*MW, error) {
	m, ok := mw.(*MW)
	switch {
	case mw == nil || ok && m == nil:
		return nil, fmt.Errorf("%w: hwverbs: no memory window (*MW): allocate one with PD.AllocMW", errNilKind)
	case !ok || m.made() != nil:
		return nil, fmt.Errorf("%w: a memory window of another backend, or a zero MW", verbs.ErrForeign)
	case m.pd.dev != q.dev:
		return nil, fmt.Errorf("%w: the memory window belongs to another device", verbs.ErrForeign)
	case m.isDead():
		return nil, fmt.Errorf("%w: the memory window was deallocated", verbs.ErrDestroyed)
	}
	return m, nil
}

// isDead reports whether the window was deallocated. (As with address
// handles, a window or region deallocated while a post that names it
// runs is the program's race, which libibverbs does not guard either.)
func (m *MW) isDead() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead
}

// bindRegion returns the region a bind names, of this device; libibverbs
// refuses one of another PD than the window's (EPERM), rxe's provider
// crashes on none.
func (q *QP) bindRegion(info *verbs.MWBindInfo) (*MR, error) {
	r, ok := info.MR.(*MR)
	switch {
	case info.MR == nil || ok && r == nil:
		return nil, fmt.Errorf("%w: a bind without a region (BindInfo.MR): name one of the window's PD, "+
			"with Length 0 to unbind a type 1 window (rxe's provider reads it)", verbs.ErrInvalidWR)
	case !ok || r.mr == nil || r.pd == nil:
		return nil, fmt.Errorf("%w: BindInfo.MR is a region of another backend, or a zero MR", verbs.ErrForeign)
	case r.pd.dev != q.dev:
		return nil, fmt.Errorf("%w: BindInfo.MR belongs to another device", verbs.ErrForeign)
	}
	r.mu.Lock()
	dead := r.dead
	r.mu.Unlock()
	if dead {
		return nil, fmt.Errorf("%w: BindInfo.MR was deregistered", verbs.ErrDestroyed)
	}
	return r, nil
}

// fillBind checks a BIND_MW work request and writes it into g: a type 2
// window and a region of this device, no SGEs, the new key keeping the
// window's upper 24 bits.
func (q *QP) fillBind(g *C.gr_swr, wr *verbs.SendWR) (*MW, error) {
	bw := wr.BindMW
	if bw == nil {
		return nil, fmt.Errorf("%w: BIND_MW without SendWR.BindMW: name the window and what to bind", verbs.ErrInvalidWR)
	}
	m, err := q.ownMW(bw.MW)
	if err != nil {
		return nil, err
	}
	info := &bw.BindInfo
	switch {
	case len(wr.SGL) != 0 || wr.Flags&verbs.Inline != 0:
		return nil, fmt.Errorf("%w: BIND_MW carries no data: no SGEs, not inline", verbs.ErrInvalidWR)
	case m.typ != verbs.MWType2:
		return nil, fmt.Errorf("%w: a type 1 window is bound with QP.BindMW (ibv_bind_mw), not a work request", verbs.ErrInvalidWR)
	case bw.RKey>>8 != m.RKey()>>8:
		return nil, fmt.Errorf("%w: new key %#x does not keep the upper 24 bits of the window's key %#x: "+
			"change its low byte only (verbs.IncRKey(mw.RKey()))", verbs.ErrInvalidWR, bw.RKey, m.RKey())
	}
	r, err := q.bindRegion(info)
	if err != nil {
		return nil, err
	}
	g.num_sge, g.imm = 0, 0
	g.mw, g.mw_mr, g.mw_rkey = m.mw, r.mr, C.uint32_t(bw.RKey)
	g.mw_addr, g.mw_length, g.mw_access = C.uint64_t(info.Addr), C.uint64_t(info.Length), C.uint32_t(info.Access)
	return m, nil
}
