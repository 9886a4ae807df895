package qp

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// MW is a memory window of the software device (package mr holds the
// window itself: its key, binding and checks). It is safe for concurrent
// use.
type MW struct {
	pd *PD
	w  *mr.MW
	// rkey is the key as ibv_mw.rkey has it: that of the last bind
	// posted, which the window gets on the device when the bind runs.
	rkey atomic.Uint32
}

// AllocMW allocates a memory window of type typ, not bound
// (ibv_alloc_mw).
func (p *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	if p.dev.closed.Load() {
		return nil, fmt.Errorf("%w: AllocMW after Close", verbs.ErrClosed)
	}
	w, err := p.pd.AllocMW(typ)
	if err != nil {
		return nil, err
	}
	m := &MW{pd: p, w: w}
	m.rkey.Store(w.RKey())
	return m, nil
}

// ok reports whether m was made by AllocMW.
func (m *MW) ok() bool { return m != nil && m.pd.ok() && m.w != nil }

// errNilMW is what the methods of a nil MW return.
var errNilMW = nilError("nil *MW", "PD.AllocMW")

// RKey returns the window's key as ibv_mw.rkey holds it: the key of the
// last bind posted (QP.BindMW, or a BIND_MW work request), or the one it
// was allocated with; 0 for a nil MW.
func (m *MW) RKey() uint32 {
	if !m.ok() {
		return 0
	}
	return m.rkey.Load()
}

// Type returns the window's type (0 for a nil MW).
func (m *MW) Type() verbs.MWType {
	if !m.ok() {
		return 0
	}
	return m.w.Type()
}

// Window returns the engine's window behind m, whose RKey is the key the
// window has on the device now.
func (m *MW) Window() *mr.MW {
	if m == nil {
		return nil
	}
	return m.w
}

// Dealloc unbinds the window if it is bound and frees it (ibv_dealloc_mw).
// When it returns, no request reaches memory through it.
func (m *MW) Dealloc() error {
	if !m.ok() {
		return errNilMW
	}
	return m.w.Dealloc()
}

// BindMW posts the bind of a type 1 window (ibv_bind_mw): a BIND_MW work
// request with the window's key one higher in its low byte
// (verbs.IncRKey), which RKey returns from now on. Its completion, if
// signaled or failed, is a BIND_MW one with bind's ID; MW_BIND_ERR says
// the bind was refused, and the QP goes to ERR as for any failed request.
// The QP must be RC or UC, the region of the window's PD, the window not
// zero-based; a region of nil, Addr 0 and Length 0 unbinds the window.
func (q *QP) BindMW(mw verbs.MW, bind *verbs.MWBindWR) error {
	if !q.ok() {
		return errNilQP
	}
	m, err := q.ownMW(mw)
	switch {
	case err != nil:
		return err
	case bind == nil:
		return fmt.Errorf("%w: BindMW of a nil *verbs.MWBindWR", verbs.ErrNil)
	case m.w.Type() != verbs.MWType1:
		return fmt.Errorf("%w: BindMW binds type 1 windows: bind a %v window with a BIND_MW work request (PostSend)",
			verbs.ErrInvalidWR, m.w.Type())
	}
	info := bind.BindInfo
	if r, ok := info.MR.(*mr.MR); ok && r != nil && r.PD() != m.w.PD() {
		return fmt.Errorf("%w: the region is of another protection domain than the window (libibverbs: EPERM)", verbs.ErrInvalidWR)
	}
	key := verbs.IncRKey(m.RKey())
	wr := verbs.SendWR{ID: bind.ID, Opcode: verbs.OpBindMW, Flags: bind.Flags,
		BindMW: &verbs.BindMW{MW: mw, RKey: key, BindInfo: info}}
	if err := q.post([]verbs.SendWR{wr}, true); err != nil {
		if pe, ok := errors.AsType[*verbs.PostError](err); ok {
			return pe.Err
		}
		return err
	}
	return nil
}

// ownMW returns mw as a window of this device.
func (q *QP) ownMW(mw verbs.MW) (*MW, error) {
	m, ok := mw.(*MW)
	switch {
	case mw == nil || ok && m == nil:
		return nil, fmt.Errorf("%w: no memory window: allocate one with PD.AllocMW", verbs.ErrNil)
	case !ok || !m.ok():
		return nil, fmt.Errorf("%w: a memory window of another backend, or a zero MW", verbs.ErrForeign)
	case m.pd.dev != q.dev:
		return nil, fmt.Errorf("%w: the memory window belongs to another device", verbs.ErrForeign)
	}
	return m, nil
}

// mwBind is a BIND_MW request as posted: the window and the bind, copied
// from the work request.
type mwBind struct {
	m *MW
	b mr.Bind
}

// checkBindWR checks a BIND_MW work request and returns the bind it
// posts. verb is set for QP.BindMW, which alone binds type 1 windows;
// the checks of libibverbs' ibv_bind_mw it made already.
func (q *QP) checkBindWR(wr *verbs.SendWR, verb bool) (*mwBind, error) {
	bw := wr.BindMW
	if bw == nil {
		return nil, fmt.Errorf("%w: BIND_MW without SendWR.BindMW: name the window and what to bind", verbs.ErrInvalidWR)
	}
	m, err := q.ownMW(bw.MW)
	if err != nil {
		return nil, err
	}
	info := &bw.BindInfo
	r, ok := info.MR.(*mr.MR)
	switch {
	case len(wr.SGL) != 0 || wr.Flags&verbs.Inline != 0:
		return nil, fmt.Errorf("%w: BIND_MW carries no data: no SGEs, not inline", verbs.ErrInvalidWR)
	case m.w.Type() == verbs.MWType1 && !verb:
		return nil, fmt.Errorf("%w: a type 1 window is bound with QP.BindMW (ibv_bind_mw), not a work request", verbs.ErrInvalidWR)
	case bw.RKey>>8 != m.RKey()>>8:
		return nil, fmt.Errorf("%w: new key %#x does not keep the upper 24 bits of the window's key %#x: "+
			"change its low byte only (verbs.IncRKey(mw.RKey()))", verbs.ErrInvalidWR, bw.RKey, m.RKey())
	case info.MR == nil && (info.Addr != 0 || info.Length != 0 || m.w.Type() == verbs.MWType2):
		return nil, fmt.Errorf("%w: a bind of %d bytes at %#x without a region (BindInfo.MR)", verbs.ErrInvalidWR,
			info.Length, info.Addr)
	case info.MR != nil && (!ok || r == nil):
		return nil, fmt.Errorf("%w: BindInfo.MR is a region of another backend", verbs.ErrForeign)
	case m.w.Type() == verbs.MWType1 && info.Access&verbs.ZeroBased != 0:
		return nil, fmt.Errorf("%w: a type 1 window is not zero-based (rxe's ibv_bind_mw: EINVAL)", verbs.ErrInvalidWR)
	}
	return &mwBind{m: m, b: mr.Bind{PD: q.pd, QP: q.id, RKey: bw.RKey, MR: r, Addr: info.Addr, Length: info.Length,
		Access: info.Access}}, nil
}

// localOp carries out a LOCAL_INV or BIND_MW request, which takes no
// PSN, and returns its status: rxe's LOC_QP_OP_ERR for an invalidation
// refused (a key of no region or type 2 window of the PD, a region with
// windows bound, a type 1 or unbound window), MW_BIND_ERR for a bind.
func (q *QP) localOp(w *sendWQE) verbs.Status {
	var err error
	st := verbs.LocQPOpErr
	if w.wr.Opcode == verbs.OpBindMW {
		err, st = w.bind.m.w.Bind(&w.bind.b), verbs.MWBindErr
	} else {
		err = q.dev.mrs.Invalidate(q.pd, w.wr.InvRKey, 0)
	}
	if err != nil {
		q.dev.log.Debug("local operation failed", "qpn", q.qpn, "op", w.wr.Opcode, "err", err)
		return st
	}
	w.state = wqeDone
	return verbs.Success
}
