package mr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// Errors of memory windows. The engine turns them into completion
// statuses and NAKs (MW_BIND_ERR, LOC_QP_OP_ERR, a remote access or
// invalid request NAK); they say why in its debug log.
var (
	// ErrBound: memory windows are bound to the region, which therefore
	// can be neither deregistered nor invalidated (rxe refuses both
	// too). It matches verbs.ErrBusy.
	ErrBound = fmt.Errorf("mr: memory windows are bound to the region (%w)", verbs.ErrBusy)
	// ErrMWState: the window is not in a state for the operation: a
	// type 2 window bound already, or not bound when invalidated; a type
	// 1 window invalidated (only a bind of length 0 unbinds one).
	ErrMWState = errors.New("mr: memory window not in a state for this")
	// ErrNoMWBind: the region was registered without MWBind.
	ErrNoMWBind = errors.New("mr: the region does not allow memory windows (register it with MWBind)")
	// ErrQP: the type 2 window is bound to another QP.
	ErrQP = errors.New("mr: memory window bound to another QP")
)

// maxMWType is the highest window type.
const maxMWType = verbs.MWType2

// MW is a memory window (ibv_mw): a range of a region, with remote
// rights of its own, reached through a key of its own: 24 bits the table
// chose when it was allocated, which no region's key and no other
// window's key starts with, and a low byte each bind sets. A type 1 window is bound through
// any QP of its PD and reached through any; a type 2 window through one
// QP, which alone reaches it (type 2B), until invalidated. It is safe for
// concurrent use; its methods on a nil MW (or one not made by AllocMW)
// return zero values, or an error wrapping verbs.ErrNil.
//
// A request through a window holds the window while it is checked and
// then the region, as a request with the region's own key does; binding,
// invalidating and deallocating wait for the requests under way through
// the window, so that when they return none reaches memory any more.
type MW struct {
	pd     *PD
	typ    verbs.MWType
	prefix uint32 // the upper 24 bits of its keys

	mu     sync.RWMutex // held for reading while a request is checked against the window
	key    uint32       // prefix << 8 | the 8 bits of the last bind (random at first)
	mr     *MR          // the region it is bound to; nil when not bound
	addr   uint64       // the region's address the window starts at
	length uint64
	access Access // remote rights and ZeroBased
	qp     uint64 // type 2: the QP it was bound through
	gone   bool   // deallocated
}

// AllocMW allocates a memory window of type typ in pd, not bound
// (ibv_alloc_mw). Its key is made as a region's is, from the table's
// keyed permutation, with upper 24 bits that no live region's or window's
// key has. It fails with ErrTableFull when the table holds as many
// regions and windows as it may.
func (pd *PD) AllocMW(typ verbs.MWType) (*MW, error) {
	switch {
	case pd == nil || pd.t == nil:
		return nil, nilError("AllocMW on a nil *PD", "Table.AllocPD (roce: Device.AllocPD)")
	case typ == 0 || typ > maxMWType:
		return nil, fmt.Errorf("%w: memory window type %v: want verbs.MWType1 or verbs.MWType2", verbs.ErrInvalidAttr, typ)
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.full(); err != nil {
		return nil, err
	}
	key := t.newMWKey()
	w := &MW{pd: pd, typ: typ, prefix: key >> 8, key: key}
	t.mws.put(w.prefix, w)
	pd.Hold()
	return w, nil
}

// newMWKey returns the first key of a new window: its upper 24 bits,
// never 0, are those of no live window's key and of no live region's;
// the caller holds t.mu.
func (t *Table) newMWKey() uint32 {
	if t.gen.block == nil {
		t.gen = newKeyGen()
	}
	for {
		k := t.gen.next()
		if p := k >> 8; p != 0 && t.mws.get(p) == nil && !t.regionWithPrefix(p) {
			return k
		}
	}
}

// regionWithPrefix reports whether a live region's key has upper 24 bits
// p; the caller holds t.mu.
func (t *Table) regionWithPrefix(p uint32) bool {
	for b := range uint32(256) {
		if t.keys.get(p<<8|b) != nil {
			return true
		}
	}
	return false
}

// window returns the window whose keys have key's upper 24 bits, or nil;
// its key may differ in the low byte.
func (t *Table) window(key uint32) *MW { return t.mws.get(key >> 8) }

// ok reports whether w was made by AllocMW.
func (w *MW) ok() bool { return w != nil && w.pd != nil }

// RKey returns the window's key on the device: the one it was allocated
// with, then the one of its last successful bind (0 for a nil MW).
func (w *MW) RKey() uint32 {
	if !w.ok() {
		return 0
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.key
}

// Type returns the window's type (0 for a nil MW).
func (w *MW) Type() verbs.MWType {
	if !w.ok() {
		return 0
	}
	return w.typ
}

// PD returns the window's protection domain.
func (w *MW) PD() *PD {
	if w == nil {
		return nil
	}
	return w.pd
}

// Bound reports whether the window is bound, and to what: the region, the
// range in the region's addresses and the rights.
func (w *MW) Bound() (m *MR, addr, length uint64, access Access, ok bool) {
	if !w.ok() {
		return nil, 0, 0, 0, false
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.mr, w.addr, w.length, w.access, w.mr != nil
}

// Dealloc unbinds the window if it is bound and frees it and its key
// (ibv_dealloc_mw); it waits for the requests under way through it.
func (w *MW) Dealloc() error {
	if !w.ok() {
		return nilError("Dealloc of a nil *MW", "PD.AllocMW")
	}
	w.mu.Lock()
	if w.gone {
		w.mu.Unlock()
		return fmt.Errorf("%w: Dealloc called twice on the memory window of key %#x", verbs.ErrDestroyed, w.key)
	}
	w.gone = true
	w.unbind()
	w.mu.Unlock()
	t := w.pd.t
	t.mu.Lock()
	t.mws.remove(w.prefix)
	t.mu.Unlock()
	w.pd.Drop()
	return nil
}

// unbind lets go of the region the window is bound to, if any, once the
// requests under way through it (which hold the region) are done. The
// caller holds w.mu.
func (w *MW) unbind() {
	if m := w.mr; m != nil {
		m.mu.lock()
		m.windows--
		m.mu.unlock()
	}
	w.mr, w.addr, w.length, w.access, w.qp = nil, 0, 0, 0, 0
}

// Bind is what a bind asks of a window: ibv_mw_bind_info, with the new
// key and the QP and protection domain it goes through.
type Bind struct {
	// PD is the protection domain of the QP the bind goes through; QP is
	// a number the engine gives that QP alone, to which a type 2 window
	// is bound.
	PD *PD
	QP uint64
	// RKey is the window's new key: its upper 24 bits, and the low 8
	// bits the program chose (verbs.IncRKey).
	RKey uint32
	// MR, Addr and Length are the range, in the region's addresses; a
	// type 1 window is unbound with Length 0 (MR may then be nil).
	MR     *MR
	Addr   uint64
	Length uint64
	// Access is the window's rights: RemoteRead, RemoteWrite,
	// RemoteAtomic, FlushGlobal, and ZeroBased for a type 2 window.
	Access Access
}

// Bind binds the window, or fails and leaves it as it was, with the
// checks of IBTA Vol. 1 §10.6.7 as rxe's rxe_bind_mw makes them: a type
// 1 window is not zero-based; a type 2 window is not bound already
// (invalidate it first) and is bound to a region, with a length; the
// QP's PD is the window's, and so is the region's (rxe checks the first
// for type 2 windows only, libibverbs the second for type 1); the region
// is registered and valid, allows MWBind, and LocalWrite when the window
// allows RemoteWrite or RemoteAtomic; the range lies within the region
// (for a zero-based window too, whose Addr is where it starts in the
// region: rxe checks only its length against the region's); the new key
// keeps the window's upper 24 bits. It waits for the requests under
// way through the window's old binding.
func (w *MW) Bind(b *Bind) error {
	if !w.ok() {
		return nilError("Bind of a nil *MW", "PD.AllocMW")
	}
	if b == nil {
		return fmt.Errorf("%w: Bind of a nil *Bind", verbs.ErrNil)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.checkBind(b); err != nil {
		return err
	}
	if b.Length == 0 { // type 1: unbound
		w.unbind()
		w.key = b.RKey
		return nil
	}
	m := b.MR
	m.mu.lock()
	err := checkBindRegion(m, w.pd, b)
	if err == nil {
		m.windows++
	}
	m.mu.unlock()
	if err != nil {
		return err
	}
	w.unbind()
	w.mr, w.addr, w.length, w.access, w.key = m, b.Addr, b.Length, b.Access, b.RKey
	if w.typ == verbs.MWType2 {
		w.qp = b.QP
	}
	return nil
}

// checkBind checks a bind against the window; the caller holds w.mu.
func (w *MW) checkBind(b *Bind) error {
	switch {
	case w.gone:
		return fmt.Errorf("%w: the window was deallocated", ErrKey)
	case b.RKey>>8 != w.prefix:
		return fmt.Errorf("%w: new key %#x does not keep the upper 24 bits of the window's %#x: change its low 8 bits only",
			ErrKey, b.RKey, w.key)
	case b.PD != w.pd:
		return fmt.Errorf("%w: the QP is of another protection domain than the window", ErrPD)
	case b.Access&^(RemoteAccess|verbs.ZeroBased|verbs.FlushGlobal) != 0:
		return fmt.Errorf("%w: a window takes remote rights, FlushGlobal and ZeroBased, not %v "+
			"(FlushPersistent needs persistent memory)", ErrInvalidAccess, b.Access)
	case w.typ == verbs.MWType1 && b.Access&verbs.ZeroBased != 0:
		return fmt.Errorf("%w: a type 1 window is not zero-based (IBTA o10-36.2.2)", ErrInvalidAccess)
	case w.typ == verbs.MWType2 && w.mr != nil:
		return fmt.Errorf("%w: the type 2 window is bound already: invalidate it first", ErrMWState)
	case w.typ == verbs.MWType2 && (b.MR == nil || b.Length == 0):
		return fmt.Errorf("%w: a type 2 window is bound to a region with a length of 1 or more", ErrBounds)
	case b.Length != 0 && b.MR == nil:
		return fmt.Errorf("%w: a bind of %d bytes without a region", ErrBounds, b.Length)
	}
	return nil
}

// checkBindRegion checks a bind against the region; the caller holds
// m.mu.
func checkBindRegion(m *MR, pd *PD, b *Bind) error {
	n := uint64(len(m.buf))
	switch {
	case m.gone || !m.valid:
		return fmt.Errorf("%w: the region of key %#x is deregistered or invalidated", ErrDeregistered, m.key)
	case m.pd != pd:
		return fmt.Errorf("%w: the region is of another protection domain than the window", ErrPD)
	case m.access&verbs.MWBind == 0:
		return ErrNoMWBind
	case b.Access&(RemoteWrite|RemoteAtomic) != 0 && m.access&LocalWrite == 0:
		return fmt.Errorf("%w: a window with %v on a region without LocalWrite", ErrAccessRights, b.Access)
	case b.Addr < m.iova || b.Addr-m.iova > n || b.Length > n-(b.Addr-m.iova):
		return fmt.Errorf("%w: %d bytes at %#x, outside the region's %d at %#x", ErrBounds, b.Length, b.Addr, n, m.iova)
	}
	return nil
}

// LookupRemote is Lookup for a request from a peer: key is a region's or
// a window's, and qp the number the engine gave the QP the request came
// on. Through a window the request is checked against the window (valid,
// its PD, its QP for type 2, its rights, its range: from its start for a
// zero-based one) and reaches the region under it; the region is held
// for reading, as Lookup holds it. Its errors are bare sentinels.
func (t *Table) LookupRemote(pd *PD, qp uint64, key uint32, addr uint64, n uint32, want Access) (*MR, []byte, error) {
	if t == nil {
		return nil, nil, nilError("LookupRemote on a nil *Table", "NewTable")
	}
	if m := t.keys.get(key); m != nil {
		mem, err := m.hold(m.slotOf(qp), pd, key, addr, n, want)
		if err != nil {
			return nil, nil, err
		}
		return m, mem, nil
	}
	w := t.window(key)
	if w == nil {
		return nil, nil, ErrKey
	}
	w.mu.RLock()
	va, err := w.check(pd, qp, key, addr, n, want)
	if err != nil {
		w.mu.RUnlock()
		return nil, nil, err
	}
	m := w.mr
	s := m.slotOf(qp)
	m.mu.rlock(s)
	w.mu.RUnlock()
	if !m.valid { // MR.Invalidate, which Table.Invalidate refuses here
		m.mu.runlock(s)
		return nil, nil, ErrKey
	}
	// The bind checked the range against the region, which cannot be
	// deregistered while the window is bound to it.
	off := va - m.iova
	return m, m.buf[off : off+uint64(n) : off+uint64(n)], nil
}

// LookupRemoteRegion is LookupRemote for a request that names a whole
// region by its key, whatever the address, as a FLUSH of the FlushMR
// level does (rxe checks no range for it): key, protection domain and
// rights are checked, and through a window its binding and QP too; the
// region (through a window, the window's) is held for reading until
// Release. Its errors are bare sentinels.
func (t *Table) LookupRemoteRegion(pd *PD, qp uint64, key uint32, want Access) (*MR, error) {
	if t == nil {
		return nil, nilError("LookupRemoteRegion on a nil *Table", "NewTable")
	}
	if m := t.keys.get(key); m != nil {
		if _, err := m.hold(m.slotOf(qp), pd, key, m.iova, 0, want); err != nil {
			return nil, err
		}
		return m, nil
	}
	w := t.window(key)
	if w == nil {
		return nil, ErrKey
	}
	w.mu.RLock()
	start := w.addr
	if w.access&verbs.ZeroBased != 0 {
		start = 0
	}
	if _, err := w.check(pd, qp, key, start, 0, want); err != nil {
		w.mu.RUnlock()
		return nil, err
	}
	m := w.mr
	s := m.slotOf(qp)
	m.mu.rlock(s)
	w.mu.RUnlock()
	if !m.valid {
		m.mu.runlock(s)
		return nil, ErrKey
	}
	return m, nil
}

// check checks a request through the window and returns the region's
// address it starts at; the caller holds w.mu for reading.
func (w *MW) check(pd *PD, qp uint64, key uint32, addr uint64, n uint32, want Access) (uint64, error) {
	switch {
	case w.key != key || w.mr == nil:
		return 0, ErrKey
	case w.pd != pd:
		return 0, ErrPD
	case w.typ == verbs.MWType2 && w.qp != qp:
		return 0, ErrQP
	case w.access&want != want:
		return 0, ErrAccessRights
	}
	off := addr
	if w.access&verbs.ZeroBased == 0 {
		off = addr - w.addr
		if addr < w.addr {
			return 0, ErrBounds
		}
	}
	if off > w.length || uint64(n) > w.length-off {
		return 0, ErrBounds
	}
	return w.addr + off, nil
}

// Invalidate invalidates the region or the type 2 window of key in pd,
// as LOCAL_INV does (remoteQP 0) or a peer's SEND with invalidate that
// came on the QP the engine numbered remoteQP: the key reaches no memory
// any more. A region cannot be invalidated while windows are bound to it
// (ErrBound), a type 1 window never (ErrMWState), a type 2 window only
// while bound and, from a peer, only through the QP it is bound to
// (ErrQP); rxe checks neither the QP nor the protection domain. It waits
// for the requests under way through the key.
func (t *Table) Invalidate(pd *PD, key uint32, remoteQP uint64) error {
	if t == nil {
		return nilError("Invalidate on a nil *Table", "NewTable")
	}
	if m := t.keys.get(key); m != nil {
		m.mu.lock()
		defer m.mu.unlock()
		switch {
		case m.key != key || m.gone:
			return ErrKey
		case m.pd != pd:
			return ErrPD
		case m.windows > 0:
			return ErrBound
		}
		m.valid = false
		return nil
	}
	w := t.window(key)
	if w == nil {
		return ErrKey
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.key != key || w.gone:
		return ErrKey
	case w.pd != pd:
		return ErrPD
	case w.typ != verbs.MWType2 || w.mr == nil:
		return ErrMWState
	case remoteQP != 0 && w.qp != remoteQP:
		return ErrQP
	}
	w.unbind()
	return nil
}
