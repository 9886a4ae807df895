package mr

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestKeys(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	low := map[uint32]int{}
	var prev uint32
	for range 2000 {
		m, err := pd.Register(make([]byte, 64), LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		k := m.LKey()
		if k == prev || m.RKey() != k || k>>8 == 0 {
			t.Fatalf("key %#x: same as the last at its index, zero index, or rkey %#x", k, m.RKey())
		}
		prev = k
		low[k&0xFF]++
		must(t, m.Dereg())
	}
	// Indices are reused, so the random low byte is what tells regions
	// apart: all 256 values should appear.
	if len(low) < 200 {
		t.Fatalf("only %d distinct 8-bit keys in 2000 registrations", len(low))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLookupChecks(t *testing.T) {
	tab := NewTable()
	pd, other := tab.AllocPD(), tab.AllocPD()
	buf := make([]byte, 100)
	m, err := pd.RegisterIOVA(buf, 0x1000, LocalWrite|RemoteRead)
	must(t, err)
	k := m.LKey()
	for _, c := range []struct {
		name string
		pd   *PD
		key  uint32
		addr uint64
		n    uint32
		want Access
		err  error
	}{
		{"whole", pd, k, 0x1000, 100, RemoteRead, nil},
		{"last byte", pd, k, 0x1063, 1, 0, nil},
		{"empty at end", pd, k, 0x1064, 0, 0, nil},
		{"one past", pd, k, 0x1064, 1, 0, ErrBounds},
		{"before", pd, k, 0xFFF, 1, 0, ErrBounds},
		{"too long", pd, k, 0x1000, 101, 0, ErrBounds},
		{"wrapping", pd, k, ^uint64(0) - 2, 10, 0, ErrBounds},
		{"wrong key byte", pd, k ^ 1, 0x1000, 1, 0, ErrKey},
		{"unknown index", pd, k + 0x100, 0x1000, 1, 0, ErrKey},
		{"other PD", other, k, 0x1000, 1, 0, ErrPD},
		{"no remote write", pd, k, 0x1000, 1, RemoteWrite, ErrAccessRights},
	} {
		got, mem, err := tab.Lookup(c.pd, c.key, c.addr, c.n, c.want)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
			continue
		}
		if err == nil {
			if len(mem) != int(c.n) {
				t.Errorf("%s: %d bytes", c.name, len(mem))
			}
			got.Release()
		}
	}
	if _, err := pd.Register(buf, RemoteWrite); !errors.Is(err, ErrInvalidAccess) {
		t.Errorf("remote write without local write: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Errorf("dealloc with a region: %v", err)
	}
	must(t, m.Dereg())
	if err := m.Dereg(); !errors.Is(err, ErrDeregistered) {
		t.Errorf("second dereg: %v", err)
	}
	must(t, pd.Dealloc())
}

func TestInvalidateRekey(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	m, err := pd.Register(make([]byte, 8), LocalWrite)
	must(t, err)
	k := m.LKey()
	m.Invalidate()
	if _, _, err := tab.Lookup(pd, k, m.Addr(), 1, 0); !errors.Is(err, ErrKey) {
		t.Fatalf("invalidated key: %v", err)
	}
	if f, err := tab.Find(pd, k); err != nil || f != m {
		t.Fatalf("Find of an invalidated region: %v", err)
	}
	k2, err := m.Rekey()
	must(t, err)
	if k2 == k || k2>>8 != k>>8 {
		t.Fatalf("rekey %#x -> %#x", k, k2)
	}
	if _, _, err := tab.Lookup(pd, k, m.Addr(), 1, 0); !errors.Is(err, ErrKey) {
		t.Fatal("the old key still works after a rekey")
	}
	got, _, err := tab.Lookup(pd, k2, m.Addr(), 1, 0)
	must(t, err)
	got.Release()
}

// TestDeregWaitsForAccess: Dereg returns only when no access is under way,
// and no access starts after it.
func TestDeregWaitsForAccess(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	for range 50 {
		m, err := pd.Register(make([]byte, 4096), LocalWrite)
		must(t, err)
		key := m.LKey()
		var gone atomic.Bool
		var bad atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 2000 {
					r, mem, err := tab.Lookup(pd, key, m.Addr(), 4096, LocalWrite)
					if err != nil {
						return
					}
					mem[0]++
					if gone.Load() {
						bad.Add(1) // an access while deregistered
					}
					r.Release()
				}
			}()
		}
		must(t, m.Dereg())
		gone.Store(true)
		wg.Wait()
		if bad.Load() != 0 {
			t.Fatalf("%d accesses after Dereg returned", bad.Load())
		}
	}
}
