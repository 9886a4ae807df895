package mr

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// mwFixture is a table with two PDs, a region of 0x100 bytes at 0x1000
// in the first that allows windows, and one window of each type.
type mwFixture struct {
	tab       *Table
	pd, other *PD
	m         *MR
	w1, w2    *MW
}

const (
	qpA, qpB = 7, 8 // QP numbers as the engine gives them
	every    = RemoteAccess
)

func newMWFixture(t *testing.T) *mwFixture {
	t.Helper()
	f := &mwFixture{tab: NewTable()}
	f.pd, f.other = f.tab.AllocPD(), f.tab.AllocPD()
	var err error
	f.m, err = f.pd.RegisterIOVA(make([]byte, 0x100), 0x1000, LocalWrite|RemoteAccess|verbs.MWBind)
	must(t, err)
	f.w1, err = f.pd.AllocMW(verbs.MWType1)
	must(t, err)
	f.w2, err = f.pd.AllocMW(verbs.MWType2)
	must(t, err)
	return f
}

// bind binds w to [addr, addr+n) of the fixture's region through QP qp,
// with the next key.
func (f *mwFixture) bind(w *MW, qp uint64, addr, n uint64, access Access) error {
	return w.Bind(&Bind{PD: f.pd, QP: qp, RKey: verbs.IncRKey(w.RKey()), MR: f.m, Addr: addr, Length: n, Access: access})
}

// TestMWBindChecks: each check of a bind, in a table: a refused bind
// leaves the window as it was.
func TestMWBindChecks(t *testing.T) {
	f := newMWFixture(t)
	noBind, err := f.pd.RegisterIOVA(make([]byte, 0x100), 0x4000, LocalWrite|RemoteAccess)
	must(t, err)
	readOnly, err := f.pd.RegisterIOVA(make([]byte, 0x100), 0x5000, RemoteRead|verbs.MWBind)
	must(t, err)
	otherPD, err := f.other.RegisterIOVA(make([]byte, 0x100), 0x6000, LocalWrite|RemoteAccess|verbs.MWBind)
	must(t, err)
	gone, err := f.pd.RegisterIOVA(make([]byte, 0x100), 0x7000, LocalWrite|RemoteAccess|verbs.MWBind)
	must(t, err)
	must(t, gone.Dereg())
	invalid, err := f.pd.RegisterIOVA(make([]byte, 0x100), 0x8000, LocalWrite|RemoteAccess|verbs.MWBind)
	must(t, err)
	must(t, f.tab.Invalidate(f.pd, invalid.RKey(), 0))
	base := func(w *MW) Bind {
		return Bind{PD: f.pd, QP: qpA, RKey: verbs.IncRKey(w.RKey()), MR: f.m, Addr: 0x1000, Length: 0x100, Access: every}
	}
	for _, c := range []struct {
		name string
		w    *MW
		edit func(b *Bind)
		err  error
	}{
		{"type 1, whole region", f.w1, func(*Bind) {}, nil},
		{"type 2, whole region", f.w2, func(*Bind) {}, nil},
		{"last byte", f.w2, func(b *Bind) { b.Addr, b.Length = 0x10FF, 1 }, nil},
		{"type 2 zero-based", f.w2, func(b *Bind) { b.Addr, b.Length, b.Access = 0x1080, 0x80, RemoteRead|verbs.ZeroBased }, nil},
		{"type 1 of length 0 (unbinds)", f.w1, func(b *Bind) { b.MR, b.Addr, b.Length = nil, 0, 0 }, nil},
		{"type 1 zero-based", f.w1, func(b *Bind) { b.Access |= verbs.ZeroBased }, ErrInvalidAccess},
		{"local write asked of a window", f.w2, func(b *Bind) { b.Access = LocalWrite }, ErrInvalidAccess},
		{"type 2 of length 0", f.w2, func(b *Bind) { b.Length = 0 }, ErrBounds},
		{"type 2 without a region", f.w2, func(b *Bind) { b.MR, b.Addr, b.Length = nil, 0, 0 }, ErrBounds},
		{"type 1 of a length without a region", f.w1, func(b *Bind) { b.MR = nil }, ErrBounds},
		{"before the region", f.w2, func(b *Bind) { b.Addr = 0xFFF }, ErrBounds},
		{"past the region's end", f.w2, func(b *Bind) { b.Addr, b.Length = 0x1001, 0x100 }, ErrBounds},
		{"zero-based past the region's end", f.w2, func(b *Bind) { b.Addr, b.Length, b.Access = 0x1080, 0x81, verbs.ZeroBased }, ErrBounds},
		{"wrapping", f.w2, func(b *Bind) { b.Addr, b.Length = 0x1080, 1<<64-0x10 }, ErrBounds},
		{"new key of another index", f.w2, func(b *Bind) { b.RKey += 0x100 }, ErrKey},
		{"QP of another PD", f.w2, func(b *Bind) { b.PD = f.other }, ErrPD},
		{"type 1 through a QP of another PD", f.w1, func(b *Bind) { b.PD = f.other }, ErrPD},
		{"region of another PD", f.w2, func(b *Bind) { b.MR, b.Addr = otherPD, 0x6000 }, ErrPD},
		{"region without MWBind", f.w2, func(b *Bind) { b.MR, b.Addr = noBind, 0x4000 }, ErrNoMWBind},
		{"writable window on a region without LocalWrite", f.w2, func(b *Bind) { b.MR, b.Addr = readOnly, 0x5000 }, ErrAccessRights},
		{"read-only window on a region without LocalWrite", f.w2, func(b *Bind) { b.MR, b.Addr, b.Access = readOnly, 0x5000, RemoteRead }, nil},
		{"deregistered region", f.w2, func(b *Bind) { b.MR, b.Addr = gone, 0x7000 }, ErrDeregistered},
		{"invalidated region", f.w2, func(b *Bind) { b.MR, b.Addr = invalid, 0x8000 }, ErrDeregistered},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := base(c.w)
			c.edit(&b)
			key := c.w.RKey()
			before := summary(c.w)
			err := c.w.Bind(&b)
			if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
				t.Fatalf("Bind: %v, want %v", err, c.err)
			}
			if err != nil {
				if c.w.RKey() != key || summary(c.w) != before {
					t.Errorf("a refused bind changed the window: key %#x -> %#x, %s -> %s", key, c.w.RKey(), before, summary(c.w))
				}
				return
			}
			if c.w.RKey() != b.RKey {
				t.Errorf("key %#x, want %#x", c.w.RKey(), b.RKey)
			}
			if c.w.Type() == verbs.MWType2 {
				must(t, f.tab.Invalidate(f.pd, c.w.RKey(), 0))
			}
		})
	}
}

// summary describes a window's binding.
func summary(w *MW) string {
	m, addr, n, access, ok := w.Bound()
	if !ok {
		return "unbound"
	}
	return fmt.Sprintf("%v %#x+%#x of %#x", access, addr, n, m.RKey())
}

// TestMWTypeTwoBindsOnce: a type 2 window bound already refuses another
// bind until invalidated (IBTA o10-37.2.30); a type 1 window is bound
// again over its binding, and a bind of length 0 unbinds it.
func TestMWTypeTwoBindsOnce(t *testing.T) {
	f := newMWFixture(t)
	must(t, f.bind(f.w2, qpA, 0x1000, 0x10, every))
	if err := f.bind(f.w2, qpA, 0x1000, 0x20, every); !errors.Is(err, ErrMWState) {
		t.Fatalf("second bind of a type 2 window: %v", err)
	}
	must(t, f.tab.Invalidate(f.pd, f.w2.RKey(), 0))
	must(t, f.bind(f.w2, qpA, 0x1000, 0x20, every))
	must(t, f.bind(f.w1, qpA, 0x1000, 0x10, every))
	must(t, f.bind(f.w1, qpB, 0x1010, 0x10, every))
	if _, addr, n, _, ok := f.w1.Bound(); !ok || addr != 0x1010 || n != 0x10 {
		t.Fatalf("rebound type 1 window: %#x+%#x %v", addr, n, ok)
	}
	must(t, f.w1.Bind(&Bind{PD: f.pd, RKey: verbs.IncRKey(f.w1.RKey())}))
	if _, _, _, _, ok := f.w1.Bound(); ok {
		t.Fatal("a bind of length 0 left the type 1 window bound")
	}
}

// TestMWLookupRemote: a request through a window's key is checked
// against the window: its key (all 32 bits), state, PD, QP (type 2),
// rights and range, from its start when zero-based; it reaches the
// region's memory under the window. A window's key is no lkey.
func TestMWLookupRemote(t *testing.T) {
	f := newMWFixture(t)
	for i := range f.m.Bytes() {
		f.m.Bytes()[i] = byte(i)
	}
	w3, err := f.pd.AllocMW(verbs.MWType2)
	must(t, err)
	must(t, f.bind(f.w1, qpA, 0x1010, 0x20, RemoteRead))
	must(t, f.bind(f.w2, qpA, 0x1040, 0x20, RemoteWrite|RemoteAtomic))
	must(t, f.bind(w3, qpB, 0x1080, 0x40, RemoteRead|verbs.ZeroBased))
	k1, k2, k3 := f.w1.RKey(), f.w2.RKey(), w3.RKey()
	for _, c := range []struct {
		name  string
		pd    *PD
		qp    uint64
		key   uint32
		addr  uint64
		n     uint32
		want  Access
		err   error
		first byte // the region's byte the access starts at
	}{
		{"type 1 whole", f.pd, qpA, k1, 0x1010, 0x20, RemoteRead, nil, 0x10},
		{"type 1 from another QP", f.pd, qpB, k1, 0x1010, 1, RemoteRead, nil, 0x10},
		{"type 1 last byte", f.pd, qpA, k1, 0x102F, 1, RemoteRead, nil, 0x2F},
		{"type 1 before", f.pd, qpA, k1, 0x100F, 1, RemoteRead, ErrBounds, 0},
		{"type 1 past the end", f.pd, qpA, k1, 0x102F, 2, RemoteRead, ErrBounds, 0},
		{"type 1 inside the region, outside the window", f.pd, qpA, k1, 0x1000, 1, RemoteRead, ErrBounds, 0},
		{"type 1 without the right", f.pd, qpA, k1, 0x1010, 1, RemoteWrite, ErrAccessRights, 0},
		{"type 1 from another PD", f.other, qpA, k1, 0x1010, 1, RemoteRead, ErrPD, 0},
		{"type 1 other low byte", f.pd, qpA, k1 ^ 1, 0x1010, 1, RemoteRead, ErrKey, 0},
		{"type 2 whole", f.pd, qpA, k2, 0x1040, 0x20, RemoteWrite, nil, 0x40},
		{"type 2 atomic", f.pd, qpA, k2, 0x1058, 8, RemoteAtomic, nil, 0x58},
		{"type 2 from another QP", f.pd, qpB, k2, 0x1040, 1, RemoteWrite, ErrQP, 0},
		{"type 2 without the right", f.pd, qpA, k2, 0x1040, 1, RemoteRead, ErrAccessRights, 0},
		{"type 2 wrapping", f.pd, qpA, k2, 0x1050, 1<<32 - 1, RemoteWrite, ErrBounds, 0},
		{"zero-based from 0", f.pd, qpB, k3, 0, 0x40, RemoteRead, nil, 0x80},
		{"zero-based in the middle", f.pd, qpB, k3, 0x3F, 1, RemoteRead, nil, 0xBF},
		{"zero-based past the end", f.pd, qpB, k3, 0x3F, 2, RemoteRead, ErrBounds, 0},
		{"zero-based by the region's address", f.pd, qpB, k3, 0x1080, 1, RemoteRead, ErrBounds, 0},
		{"zero-based from the window's QP only", f.pd, qpA, k3, 0, 1, RemoteRead, ErrQP, 0},
	} {
		m, mem, err := f.tab.LookupRemote(c.pd, c.qp, c.key, c.addr, c.n, c.want)
		if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if m != f.m || len(mem) != int(c.n) || mem[0] != c.first || cap(mem) != int(c.n) {
			t.Errorf("%s: region %p, %d bytes from %#x (cap %d)", c.name, m, len(mem), mem[0], cap(mem))
		}
		m.Release(0)
	}
	for _, k := range []uint32{k1, k2, k3} {
		if _, _, err := f.tab.Lookup(f.pd, 0, k, 0x1040, 1, 0); !errors.Is(err, ErrKey) {
			t.Errorf("a window's key %#x as an lkey: %v", k, err)
		}
	}
	// The region's own key still reaches all of it.
	m, _, err := f.tab.LookupRemote(f.pd, qpB, f.m.RKey(), 0x1000, 0x100, RemoteAccess)
	must(t, err)
	m.Release(0)
}

// TestMWInvalidate: what LOCAL_INV (remoteQP 0) and a peer's SEND with
// invalidate may invalidate, and that the key then reaches nothing, while
// the region's own key still does.
func TestMWInvalidate(t *testing.T) {
	f := newMWFixture(t)
	must(t, f.bind(f.w1, qpA, 0x1000, 0x10, every))
	for _, c := range []struct {
		name   string
		pd     *PD
		key    uint32
		remote uint64
		err    error
	}{
		{"type 1", f.pd, f.w1.RKey(), 0, ErrMWState},
		{"unbound type 2", f.pd, f.w2.RKey(), 0, ErrMWState},
		{"unknown index", f.pd, f.w2.RKey() + 0x100000, 0, ErrKey},
	} {
		if err := f.tab.Invalidate(c.pd, c.key, c.remote); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	must(t, f.bind(f.w2, qpA, 0x1000, 0x10, every))
	k := f.w2.RKey()
	for _, c := range []struct {
		name   string
		pd     *PD
		key    uint32
		remote uint64
		err    error
	}{
		{"region with windows bound", f.pd, f.m.RKey(), 0, ErrBound},
		{"from another PD", f.other, k, 0, ErrPD},
		{"other low byte", f.pd, k ^ 0x80, 0, ErrKey},
		{"from a peer on another QP", f.pd, k, qpB, ErrQP},
		{"from a peer on its QP", f.pd, k, qpA, nil},
		{"again", f.pd, k, qpA, ErrMWState},
	} {
		if err := f.tab.Invalidate(c.pd, c.key, c.remote); !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	if _, _, err := f.tab.LookupRemote(f.pd, qpA, k, 0x1000, 1, RemoteRead); !errors.Is(err, ErrKey) {
		t.Errorf("through the invalidated window: %v", err)
	}
	if err := f.tab.Invalidate(f.pd, f.w1.RKey(), qpA); !errors.Is(err, ErrMWState) {
		t.Errorf("a peer invalidating a type 1 window: %v", err)
	}
	m, _, err := f.tab.LookupRemote(f.pd, qpA, f.m.RKey(), 0x1000, 1, RemoteRead)
	must(t, err)
	m.Release(0)
}

// TestMWRegionBusy: a region with windows bound can be neither
// deregistered nor invalidated (ErrBound, which is verbs.ErrBusy); once
// its windows are unbound, invalidated or deallocated, it can.
func TestMWRegionBusy(t *testing.T) {
	f := newMWFixture(t)
	must(t, f.bind(f.w1, qpA, 0x1000, 0x10, every))
	must(t, f.bind(f.w2, qpA, 0x1000, 0x10, every))
	for range 2 {
		err := f.m.Dereg()
		if !errors.Is(err, ErrBound) || !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Dereg with windows bound: %v", err)
		}
		if err := f.tab.Invalidate(f.pd, f.m.RKey(), 0); !errors.Is(err, ErrBound) {
			t.Fatalf("Invalidate with windows bound: %v", err)
		}
		if f.w2.Type() == verbs.MWType2 {
			must(t, f.tab.Invalidate(f.pd, f.w2.RKey(), 0))
			f.w2 = f.w1 // now one left
		}
	}
	must(t, f.w1.Dealloc())
	if _, _, err := f.tab.LookupRemote(f.pd, qpA, f.w1.RKey(), 0x1000, 1, RemoteRead); !errors.Is(err, ErrKey) {
		t.Errorf("through a deallocated window: %v", err)
	}
	if err := f.pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Errorf("PD with a region and a window: %v", err)
	}
	must(t, f.m.Dereg())
	w2, err := f.pd.AllocMW(verbs.MWType2)
	must(t, err)
	_ = w2
	if err := f.pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Errorf("PD with two windows: %v", err)
	}
}

// TestMWKeys: a window's key keeps its upper 24 bits across binds, which
// no region's key and no other window's key has, and a deallocated
// window's keys reach nothing.
func TestMWKeys(t *testing.T) {
	f := newMWFixture(t)
	seen := map[uint32]bool{}
	for _, k := range []uint32{f.m.RKey(), f.w1.RKey(), f.w2.RKey()} {
		if seen[k>>8] {
			t.Fatalf("upper 24 bits %#x twice", k>>8)
		}
		seen[k>>8] = true
	}
	k := f.w1.RKey()
	for range 300 {
		must(t, f.bind(f.w1, qpA, 0x1000, 1, RemoteRead))
		if f.w1.RKey()>>8 != k>>8 {
			t.Fatalf("key %#x after a bind, was %#x", f.w1.RKey(), k)
		}
	}
	last := f.w1.RKey()
	must(t, f.w1.Dealloc())
	for b := range uint32(256) {
		if _, _, err := f.tab.LookupRemote(f.pd, qpA, last&^0xFF|b, 0x1000, 1, RemoteRead); !errors.Is(err, ErrKey) {
			t.Fatalf("key %#x of the deallocated window: %v", last&^0xFF|b, err)
		}
	}
}

// TestMWKeyPrefixes: the table gives no region a key that starts as a
// live window's keys do, and no window the prefix of a live region's key,
// so that a window's 256 keys name it alone: the generator's next key is
// made to collide, and must be skipped.
func TestMWKeyPrefixes(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	next := tab.gen.permute(tab.gen.n)
	tab.mu.Lock()
	tab.mws.put(next>>8, &MW{pd: pd, typ: verbs.MWType1, prefix: next >> 8, key: next})
	tab.mu.Unlock()
	m, err := pd.Register(make([]byte, 8), LocalWrite)
	must(t, err)
	if m.RKey()>>8 == next>>8 {
		t.Errorf("region key %#x starts as the window's keys %#x do", m.RKey(), next)
	}

	next = tab.gen.permute(tab.gen.n)
	tab.mu.Lock()
	tab.keys.put(next>>8<<8|0x5A, &MR{pd: pd, buf: make([]byte, 8), key: next>>8<<8 | 0x5A, valid: true})
	tab.mu.Unlock()
	w, err := pd.AllocMW(verbs.MWType2)
	must(t, err)
	if w.RKey()>>8 == next>>8 {
		t.Errorf("window key %#x starts as region key %#x does", w.RKey(), next>>8<<8|0x5A)
	}
}

// TestMWLimit: windows count against the table's limit as regions do.
func TestMWLimit(t *testing.T) {
	tab := NewTableMax(2)
	pd := tab.AllocPD()
	_, err := pd.Register(make([]byte, 8), LocalWrite|verbs.MWBind)
	must(t, err)
	w, err := pd.AllocMW(verbs.MWType1)
	must(t, err)
	if _, err := pd.AllocMW(verbs.MWType2); !errors.Is(err, ErrTableFull) {
		t.Errorf("a third object in a table of 2: %v", err)
	}
	if _, err := pd.Register(make([]byte, 8), LocalWrite); !errors.Is(err, ErrTableFull) {
		t.Errorf("a region beyond a region and a window in a table of 2: %v", err)
	}
	must(t, w.Dealloc())
	if _, err := pd.Register(make([]byte, 8), LocalWrite); err != nil {
		t.Errorf("a region once the window is gone: %v", err)
	}
}

// TestMWWaitsForAccess: invalidation, deallocation and a bind over a
// type 1 window's binding wait for a request under way through the
// window, and the window reaches nothing once they return.
func TestMWWaitsForAccess(t *testing.T) {
	for _, op := range []string{"invalidate", "dealloc", "rebind"} {
		t.Run(op, func(t *testing.T) {
			f := newMWFixture(t)
			w := f.w2
			if op == "rebind" {
				w = f.w1
			}
			must(t, f.bind(w, qpA, 0x1000, 0x10, RemoteWrite))
			key := w.RKey()
			m, mem, err := f.tab.LookupRemote(f.pd, qpA, key, 0x1000, 4, RemoteWrite)
			must(t, err)
			done := make(chan error, 1)
			go func() {
				switch op {
				case "invalidate":
					done <- f.tab.Invalidate(f.pd, key, qpA)
				case "dealloc":
					done <- w.Dealloc()
				default:
					done <- f.bind(w, qpA, 0x1080, 0x10, RemoteWrite)
				}
			}()
			select {
			case err := <-done:
				t.Fatalf("returned (%v) while a request was under way", err)
			case <-time.After(20 * time.Millisecond):
			}
			copy(mem, "data")
			m.Release(0)
			select {
			case err := <-done:
				must(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("did not return once the request was done")
			}
			if _, _, err := f.tab.LookupRemote(f.pd, qpA, key, 0x1000, 4, RemoteWrite); err == nil {
				t.Error("the old binding still reaches memory")
			}
		})
	}
}

// TestMWConcurrent: requests through a window while another goroutine
// binds it to one range after another and invalidates it reach memory
// only within a binding, each write lands once; run it with -race.
func TestMWConcurrent(t *testing.T) {
	f := newMWFixture(t)
	var stop atomic.Bool
	var hits atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for g := range 2 {
		wg.Go(func() {
			started <- struct{}{}
			for i := 0; !stop.Load(); i++ {
				// Each goroutine writes bytes of its own: even or odd.
				off := uint64(2*i+g) % 0x100
				m, mem, err := f.tab.LookupRemote(f.pd, qpA, f.w2.RKey(), 0x1000+off, 1, RemoteWrite)
				if err != nil {
					continue
				}
				mem[0]++
				m.Release(0)
				hits.Add(1)
			}
		})
	}
	<-started
	<-started
	for i := range 2000 {
		off := uint64(i%8) * 0x20
		if err := f.bind(f.w2, qpA, 0x1000+off, 0x20, RemoteWrite); err != nil {
			t.Fatal(err)
		}
		if err := f.tab.Invalidate(f.pd, f.w2.RKey(), qpA); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	var sum byte
	for _, b := range f.m.Bytes() {
		sum += b
	}
	if sum != byte(hits.Load()) {
		t.Errorf("the region's bytes add up to %d, and %d writes reached it (mod 256)", sum, byte(hits.Load()))
	}
	t.Logf("%d requests reached memory", hits.Load())
}

// TestFlushRights: regions take FlushGlobal and refuse FlushPersistent
// (goroce's memory is not persistent: rxe refuses it on memory that is
// not pmem); windows take FlushGlobal; LookupRemoteRegion checks a key
// against the whole region, as a FLUSH of the FlushMR level names it.
func TestFlushRights(t *testing.T) {
	f := newMWFixture(t)
	g, err := f.pd.RegisterIOVA(make([]byte, 0x40), 0x8000, LocalWrite|verbs.FlushGlobal|verbs.MWBind)
	must(t, err)
	if _, err := f.pd.Register(make([]byte, 8), verbs.FlushPersistent); !errors.Is(err, ErrInvalidAccess) ||
		!errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("a region with FlushPersistent: %v", err)
	}
	if err := f.bind(f.w1, qpA, 0x1000, 0x10, RemoteRead|verbs.FlushPersistent); !errors.Is(err, ErrInvalidAccess) {
		t.Errorf("a window with FlushPersistent: %v", err)
	}
	must(t, f.bind(f.w2, qpA, 0x1010, 0x10, verbs.FlushGlobal))
	must(t, f.bind(f.w1, qpA, 0x1020, 0x10, RemoteRead))
	for _, c := range []struct {
		name string
		pd   *PD
		qp   uint64
		key  uint32
		want Access
		m    *MR
		err  error
	}{
		{"region with the right", f.pd, qpA, g.RKey(), verbs.FlushGlobal, g, nil},
		{"region without it", f.pd, qpA, f.m.RKey(), verbs.FlushGlobal, nil, ErrAccessRights},
		{"region, no right asked", f.pd, qpA, f.m.RKey(), 0, f.m, nil},
		{"region of another PD", f.other, qpA, g.RKey(), verbs.FlushGlobal, nil, ErrPD},
		{"type 2 window with the right", f.pd, qpA, f.w2.RKey(), verbs.FlushGlobal, f.m, nil},
		{"type 2 window from another QP", f.pd, qpB, f.w2.RKey(), verbs.FlushGlobal, nil, ErrQP},
		{"type 1 window without it", f.pd, qpB, f.w1.RKey(), verbs.FlushGlobal, nil, ErrAccessRights},
		{"unknown key", f.pd, qpA, g.RKey() ^ 0x80, verbs.FlushGlobal, nil, ErrKey},
	} {
		m, err := f.tab.LookupRemoteRegion(c.pd, c.qp, c.key, c.want)
		if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) || m != c.m {
			t.Errorf("%s: %p, %v; want %p, %v", c.name, m, err, c.m, c.err)
		}
		m.Release(c.qp)
	}
	// A region invalidated is out of reach; its lock was released by
	// every lookup above, or Invalidate would wait for ever.
	g.Invalidate()
	if _, err := f.tab.LookupRemoteRegion(f.pd, qpA, g.RKey(), verbs.FlushGlobal); !errors.Is(err, ErrKey) {
		t.Errorf("an invalidated region: %v", err)
	}
}
