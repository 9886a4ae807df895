// Package mr holds protection domains, memory regions and memory windows:
// registration of caller-owned memory, the lkey/rkey table, and the
// bounds, access and protection-domain checks every local and remote
// access goes through.
//
// Keys are 32 bits that look random in all their bits: each registration
// (and each Rekey) takes the next number of a counter through a keyed
// pseudo-random permutation whose secret comes from crypto/rand, per
// table. Knowing keys tells nothing about other keys, so a guesser who
// knows a valid address range still needs 2^32 / (live regions) tries on
// average; and since the permutation never repeats a value, a key is
// never issued twice until 2^32 keys have been (a stale key reaches no
// newer region). Lookups hash the key into a table searched without a
// lock: a few loads and the region's read lock, as with the sequential
// index keys were before.
//
// Deregistration and invalidation take effect at once: an access holds the
// region's read lock while it copies, and Dereg takes the write lock,
// so when it returns no packet in flight can touch the memory any more.
//
// A memory window (MW) is a range of a region that allows MWBind, with
// remote rights of its own, reached by peers through a key of its own.
// A window's key is 24 bits fixed when it is allocated, as unpredictable
// as a region's key (the same permutation makes them), and a low byte
// the program chooses at each bind (verbs.IncRKey), as libibverbs has it;
// the table gives a window a 24-bit prefix that no live region's or
// window's key has, and a region a key whose prefix no live window has,
// so every key names one region or one window. Lookup takes local keys
// (regions only); LookupRemote takes the keys of requests from peers, and
// checks one of a window against the window (its binding, protection
// domain, QP for a type 2 window, rights and range) before it reaches the
// region. Windows count against the table's limit as regions do. Binding,
// invalidating (Table.Invalidate, for LOCAL_INV and SEND with invalidate)
// and deallocating a window wait for the requests under way through it,
// as Dereg waits for those through a region; a region cannot be
// deregistered or invalidated while windows are bound to it.
package mr

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// Access is a set of access rights (verbs.Access).
type Access = verbs.Access

// Access rights.
const (
	LocalWrite   = verbs.LocalWrite
	RemoteWrite  = verbs.RemoteWrite
	RemoteRead   = verbs.RemoteRead
	RemoteAtomic = verbs.RemoteAtomic
	RemoteAccess = verbs.RemoteAccess
	knownAccess  = verbs.KnownAccess
)

// Errors.
var (
	// ErrInvalidAccess: remote write or remote atomic without local
	// write, or an unknown flag (ibv_reg_mr's EINVAL).
	ErrInvalidAccess = errors.New("mr: remote write and remote atomic need local write")
	// ErrTableFull: the table holds as many regions as it may.
	ErrTableFull = errors.New("mr: too many memory regions")
	// ErrDeregistered: the region was deregistered already.
	ErrDeregistered = errors.New("mr: memory region deregistered")
	// ErrPDBusy: the protection domain still has regions or queue pairs.
	ErrPDBusy = errors.New("mr: protection domain in use")
	// ErrKey: no valid region has this key.
	ErrKey = errors.New("mr: invalid key")
	// ErrPD: the region belongs to another protection domain.
	ErrPD = errors.New("mr: protection domain mismatch")
	// ErrBounds: the access falls outside the region.
	ErrBounds = errors.New("mr: access out of bounds")
	// ErrAccessRights: the region does not grant the access.
	ErrAccessRights = errors.New("mr: access not permitted")
	// ErrAlignment: an atomic access not 8-byte aligned.
	ErrAlignment = errors.New("mr: atomic access not 8-byte aligned")
	// ErrEmpty: a registration of no bytes (ibv_reg_mr's EINVAL on real
	// devices).
	ErrEmpty = errors.New("mr: empty memory region")
)

// argError is an error about a caller's argument. It wraps this
// package's sentinel and verbs.ErrInvalidAttr, so that code written for
// any backend can check the latter.
type argError struct {
	msg      string
	sentinel error
}

func (e *argError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return e.msg
}

func (e *argError) Unwrap() []error {
	if e == nil {
		return nil
	}
	return []error{e.sentinel, verbs.ErrInvalidAttr}
}

func badArg(sentinel error, format string, args ...any) error {
	return &argError{msg: sentinel.Error() + ": " + fmt.Sprintf(format, args...), sentinel: sentinel}
}

// nilError reports a method called on a nil object, or on a zero value
// its constructor did not make.
func nilError(what, make string) error {
	return fmt.Errorf("%w: mr: %s: use one from %s", verbs.ErrNil, what, make)
}

// Table is the key table of one device. It is safe for concurrent use.
// The zero Table is ready to use; NewTable seeds its keys from
// crypto/rand at once.
type Table struct {
	mu   sync.Mutex // serializes registration, deregistration and rekeying
	keys keyTable[MR]
	mws  keyTable[MW] // windows, by the upper 24 bits of their keys
	gen  keyGen       // its secret made at the first registration of a zero Table
	max  int          // the most regions at once; 0 means DefaultMaxRegions
	pds  atomic.Uint32
	// spread is how many slots each region's accesses count themselves
	// in (SetSpread); 0 means 1.
	spread atomic.Int32
}

// MaxSpread bounds Table.SetSpread.
const MaxSpread = 8

// SetSpread makes the accesses to each region count themselves in n
// cache lines of the region's (n at most MaxSpread), one for each QP
// number modulo n, instead of one: for an engine that handles QPs on n
// cores at once, whose accesses to a region they share would otherwise
// all write one cache line. Each region then takes n times 64 bytes
// more. It must be called before the first region is registered, and
// fails after.
func (t *Table) SetSpread(n int) error {
	if t == nil {
		return nilError("SetSpread on a nil *Table", "NewTable")
	}
	if n < 1 || n > MaxSpread {
		return badArg(ErrBounds, "spread %d not in 1..%d", n, MaxSpread)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys.live > 0 || t.keys.used > 0 {
		return fmt.Errorf("%w: SetSpread after regions were registered: set it when the table is made", verbs.ErrInvalidAttr)
	}
	t.spread.Store(int32(n))
	return nil
}

const (
	// MaxRegions is the most regions a table can be configured for.
	MaxRegions = 1 << 24
	// DefaultMaxRegions is how many regions a table holds at once unless
	// NewTableMax says otherwise: rxe's long-standing RXE_MAX_MR.
	DefaultMaxRegions = 1 << 18
)

// NewTable returns an empty table that holds up to DefaultMaxRegions
// regions at once.
func NewTable() *Table { return NewTableMax(0) }

// NewTableMax returns an empty table that holds up to n regions and
// memory windows at once; n <= 0 means DefaultMaxRegions, and more than
// MaxRegions means MaxRegions. Registering or allocating more fails with
// ErrTableFull.
func NewTableMax(n int) *Table {
	t := &Table{gen: newKeyGen()}
	if n > 0 {
		t.max = min(n, MaxRegions)
	}
	return t
}

// Limit returns how many regions and windows the table holds at once (0
// for a nil Table).
func (t *Table) Limit() int {
	switch {
	case t == nil:
		return 0
	case t.max == 0:
		return DefaultMaxRegions
	}
	return t.max
}

// Len returns how many regions are registered (0 for a nil Table).
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keys.live
}

// newKey returns a key no live region has, whose upper 24 bits no live
// window has, and never 0; the caller holds t.mu.
func (t *Table) newKey() uint32 {
	if t.gen.block == nil {
		t.gen = newKeyGen()
	}
	for {
		// After 2^32 keys the permutation starts over: skip those still
		// in use.
		if k := t.gen.next(); k != 0 && t.keys.get(k) == nil && t.mws.get(k>>8) == nil {
			return k
		}
	}
}

// full returns ErrTableFull, wrapped, when the table holds as many
// regions and windows as it may; the caller holds t.mu.
func (t *Table) full() error {
	if n := t.keys.live + t.mws.live; n >= t.Limit() {
		return fmt.Errorf("%w: %d regions and %d memory windows exist, the most the device allows "+
			"(deregister or deallocate some, or raise its MaxMRs)", ErrTableFull, t.keys.live, t.mws.live)
	}
	return nil
}

// PD is a protection domain: regions and queue pairs of one PD may be used
// together, and no other combination. It is safe for concurrent use. Its
// methods on a nil PD do nothing, or return an error wrapping
// verbs.ErrNil.
type PD struct {
	t     *Table
	id    uint32
	users atomic.Int64
}

// AllocPD returns a new protection domain, or nil on a nil Table.
func (t *Table) AllocPD() *PD {
	if t == nil {
		return nil
	}
	return &PD{t: t, id: t.pds.Add(1)}
}

// ID returns a number that identifies the PD on its device (0 for nil).
func (pd *PD) ID() uint32 {
	if pd == nil {
		return 0
	}
	return pd.id
}

// Hold counts an object (a queue pair, say) that uses the PD, so that
// Dealloc refuses while it exists. Drop undoes it.
func (pd *PD) Hold() {
	if pd != nil {
		pd.users.Add(1)
	}
}

// Drop undoes a Hold.
func (pd *PD) Drop() {
	if pd != nil {
		pd.users.Add(-1)
	}
}

// Dealloc frees the PD; it fails with ErrPDBusy while regions or queue
// pairs use it.
func (pd *PD) Dealloc() error {
	if pd == nil {
		return nilError("Dealloc of a nil *PD", "Table.AllocPD")
	}
	if n := pd.users.Load(); n != 0 {
		return fmt.Errorf("%w: %d memory regions or queue pairs use it: deregister and destroy them first", ErrPDBusy, n)
	}
	return nil
}

// MR is a registered memory region: a caller-owned byte slice, the I/O
// virtual address peers use to name it, its access rights and its key.
// It is safe for concurrent use. Its methods on a nil MR (or one not made
// by Register) return zero values, or an error wrapping verbs.ErrNil.
type MR struct {
	// What every access reads, in the region's first cache line.
	pd     *PD
	buf    []byte
	iova   uint64
	access Access
	key    uint32 // from Table.newKey
	valid  bool   // false once invalidated or deregistered
	gone   bool   // deregistered

	mu      accessLock // held for reading during every access; guards the fields above it that change
	windows int        // windows bound to the region
}

// Register registers buf in pd with the given rights. The region's
// address (what SGEs and peers use) is the address of buf[0], as with
// ibv_reg_mr; RegisterIOVA chooses another. The caller must not let buf
// go until Dereg returns.
func (pd *PD) Register(buf []byte, access Access) (*MR, error) {
	var iova uint64
	if len(buf) > 0 {
		iova = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	return pd.RegisterIOVA(buf, iova, access)
}

// RegisterIOVA is Register with the region's address chosen by the caller
// (ibv_reg_mr_iova). Errors about the arguments wrap both this package's
// sentinel (ErrEmpty, ErrInvalidAccess, ErrBounds) and
// verbs.ErrInvalidAttr.
func (pd *PD) RegisterIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if err := checkRegister(pd, buf, iova, access); err != nil {
		return nil, err
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.full(); err != nil {
		return nil, err
	}
	m := &MR{pd: pd, buf: buf, iova: iova, access: access, valid: true}
	if n := t.spread.Load(); n > 1 {
		m.mu.slots = spreadSlots(int(n))
	}
	m.key = t.newKey()
	t.keys.put(m.key, m)
	pd.Hold()
	return m, nil
}

func checkRegister(pd *PD, buf []byte, iova uint64, access Access) error {
	switch {
	case pd == nil || pd.t == nil:
		return nilError("Register on a nil *PD", "Table.AllocPD (roce: Device.AllocPD)")
	case len(buf) == 0:
		return badArg(ErrEmpty, "register at least one byte (libibverbs refuses zero-length regions too)")
	case access&^knownAccess != 0:
		return badArg(ErrInvalidAccess, "access %v has unknown flags: use LocalWrite, RemoteWrite, RemoteRead, "+
			"RemoteAtomic, MWBind, FlushGlobal", access)
	case access&verbs.FlushPersistent != 0:
		return badArg(ErrInvalidAccess, "access %v: FlushPersistent needs persistent memory, and goroce's is not "+
			"(rxe refuses it on memory that is not pmem too): use FlushGlobal", access)
	case access&verbs.ZeroBased != 0:
		return badArg(ErrInvalidAccess, "access %v: ZeroBased is for the binds of windows; "+
			"a region whose peers address it from 0 is registered with RegisterIOVA at address 0", access)
	case access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0:
		return badArg(ErrInvalidAccess, "access %v: add LocalWrite", access)
	case iova+uint64(len(buf)) < iova:
		return badArg(ErrBounds, "%d bytes at address %#x wrap around the 64-bit address space: choose a lower address",
			len(buf), iova)
	}
	return nil
}

// Dereg removes the region (ibv_dereg_mr). When it returns, no access is under way
// and none will start, and no packet that carries the region's bytes in
// place (Pin) is still on its way to the link; the memory is the caller's
// again. It fails with
// ErrBound while memory windows are bound to the region.
func (m *MR) Dereg() error {
	if m == nil || m.pd == nil {
		return nilError("Dereg of a nil *MR", "PD.Register")
	}
	m.mu.lock()
	if m.gone {
		m.mu.unlock()
		return fmt.Errorf("%w: Dereg called twice on the region of key %#x", ErrDeregistered, m.key)
	}
	if m.windows > 0 {
		n := m.windows
		m.mu.unlock()
		return fmt.Errorf("%w: the region of key %#x has %d: invalidate or deallocate them first "+
			"(ibv_dereg_mr fails so too)", ErrBound, m.key, n)
	}
	m.gone, m.valid = true, false
	m.mu.unlock()
	m.waitPins()
	t := m.pd.t
	t.mu.Lock()
	t.keys.remove(m.key)
	t.mu.Unlock()
	m.pd.Drop()
	return nil
}

// Invalidate makes the region's key unusable, as LOCAL_INV and SEND with
// invalidate do, until Rekey. It waits for accesses under way and for the
// packets that carry the region's bytes in place.
func (m *MR) Invalidate() {
	if m == nil {
		return
	}
	m.mu.lock()
	m.valid = false
	m.mu.unlock()
	m.waitPins()
}

// Rekey gives a region a new key and makes it valid again, as a fast
// registration does after an invalidation. It returns the new key; the
// old one is never accepted again.
func (m *MR) Rekey() (uint32, error) {
	if m == nil || m.pd == nil {
		return 0, nilError("Rekey of a nil *MR", "PD.Register")
	}
	t := m.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	m.mu.lock()
	defer m.mu.unlock()
	if m.gone {
		return 0, fmt.Errorf("%w: Rekey after Dereg: register the memory again", ErrDeregistered)
	}
	t.keys.remove(m.key)
	m.key = t.newKey()
	t.keys.put(m.key, m)
	m.valid = true
	return m.key, nil
}

// Sync waits for accesses under way and orders the engine's accesses to
// the region and the caller's on either side of it. A program that, in
// the same process, reads memory the engine wrote on a peer's behalf (an
// RDMA WRITE from a device whose completion it polled), or writes memory
// a peer's device is about to read through the engine, calls it in
// between: the completion or request that links the two may have
// travelled through the kernel's sockets, where Go's memory model (and
// the race detector) cannot see it. Programs with one device per process
// do not need it.
func (m *MR) Sync() {
	if m == nil {
		return
	}
	m.mu.lock() // taking the lock is the point: it orders the accesses on either side
	m.mu.unlock()
}

// LKey returns the local key.
func (m *MR) LKey() uint32 {
	if m == nil {
		return 0
	}
	s := &m.mu.slot0
	m.mu.rlock(s)
	defer m.mu.runlock(s)
	return m.key
}

// RKey returns the remote key; the same value as the local key.
func (m *MR) RKey() uint32 { return m.LKey() }

// Addr returns the region's address.
func (m *MR) Addr() uint64 {
	if m == nil {
		return 0
	}
	return m.iova
}

// Len returns the region's length.
func (m *MR) Len() int {
	if m == nil {
		return 0
	}
	return len(m.buf)
}

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte {
	if m == nil {
		return nil
	}
	return m.buf
}

// Access returns the region's access rights.
func (m *MR) Access() Access {
	if m == nil {
		return 0
	}
	return m.access
}

// PD returns the region's protection domain.
func (m *MR) PD() *PD {
	if m == nil {
		return nil
	}
	return m.pd
}

// Lookup finds the valid region with key in pd and checks that
// [addr, addr+n) lies within it and that it grants want. On success the
// region is held for reading: the caller copies through the returned
// slice, which is exactly the n bytes asked for, and then calls Release.
// Lookup takes no lock on the table. Its errors are the bare sentinels
// (ErrKey, ErrPD, ErrAccessRights, ErrBounds), which the engine turns
// into NAKs and completion statuses: a peer's bad request costs no
// allocation.
func (t *Table) Lookup(pd *PD, qp uint64, key uint32, addr uint64, n uint32, want Access) (*MR, []byte, error) {
	if t == nil {
		return nil, nil, nilError("Lookup on a nil *Table", "NewTable")
	}
	m := t.keys.get(key)
	if m == nil {
		return nil, nil, ErrKey
	}
	mem, err := m.hold(m.slotOf(qp), pd, key, addr, n, want)
	if err != nil {
		return nil, nil, err
	}
	return m, mem, nil
}

// hold checks an access to [addr, addr+n) of m with key in pd and, when
// it passes, returns the memory with m held for reading in slot s.
func (m *MR) hold(s *accessSlot, pd *PD, key uint32, addr uint64, n uint32, want Access) ([]byte, error) {
	m.mu.rlock(s)
	if !m.valid || m.key != key {
		m.mu.runlock(s)
		return nil, ErrKey
	}
	if m.pd != pd {
		m.mu.runlock(s)
		return nil, ErrPD
	}
	if m.access&want != want {
		m.mu.runlock(s)
		return nil, ErrAccessRights
	}
	off := addr - m.iova
	if addr < m.iova || off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		m.mu.runlock(s)
		return nil, ErrBounds
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], nil
}

// Pin keeps Dereg and Invalidate from returning until Unpin. A sender
// calls it before Release, while the access Lookup began for the QP
// numbered qp still holds the region, for bytes it reads after Release:
// a packet's payload sent from the region in place, as a NIC reads it by
// DMA (no copy). Unpin, with the same qp, once the packet is out; the
// packets that carry the region's bytes in place are counted where its
// accesses are (Table.SetSpread). A nil MR does nothing.
func (m *MR) Pin(qp uint64) {
	if m != nil {
		m.slotOf(qp).pins.Add(1)
	}
}

// Unpin ends what Pin(qp) began. A nil MR does nothing.
func (m *MR) Unpin(qp uint64) {
	if m != nil {
		m.slotOf(qp).pins.Add(-1)
	}
}

// waitPins waits for the packets that carry the region's bytes in place
// to be sent (microseconds: a pin lasts one send of a batch). No pin can
// start once the region is invalid.
func (m *MR) waitPins() {
	for d := time.Microsecond; m.mu.pinned(); d = min(2*d, time.Millisecond) {
		time.Sleep(d)
	}
}

// Release ends an access begun by Lookup or LookupRemote for the QP
// numbered qp. It does nothing on a nil MR, which they never return with
// a nil error.
func (m *MR) Release(qp uint64) {
	if m != nil {
		m.mu.runlock(m.slotOf(qp))
	}
}

// slotOf returns the slot of m's lock that accesses for the QP numbered
// qp count themselves in (Table.SetSpread).
func (m *MR) slotOf(qp uint64) *accessSlot {
	if n := len(m.mu.slots); n > 0 {
		return &m.mu.slots[qp%uint64(n)]
	}
	return &m.mu.slot0
}

// Find returns the registered region with key in pd, valid or not, for
// invalidation. It fails when no region has the key or the PD differs.
func (t *Table) Find(pd *PD, key uint32) (*MR, error) {
	if t == nil {
		return nil, nilError("Find on a nil *Table", "NewTable")
	}
	m := t.keys.get(key)
	if m == nil || m.LKey() != key {
		return nil, ErrKey
	}
	if m.pd != pd {
		return nil, ErrPD
	}
	return m, nil
}
