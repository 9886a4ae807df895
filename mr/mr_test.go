package mr

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestKeys: keys are never 0, never issued twice, and every one of their
// 32 bits varies from registration to registration.
func TestKeys(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	seen := map[uint32]bool{}
	var ones [32]int
	const n = 20000
	live := make([]*MR, 0, 16)
	for i := range n {
		m, err := pd.Register(make([]byte, 64), LocalWrite)
		must(t, err)
		k := m.LKey()
		if k == 0 || seen[k] || m.RKey() != k {
			t.Fatalf("registration %d: key %#x is zero or was issued before (rkey %#x)", i, k, m.RKey())
		}
		seen[k] = true
		for b := range ones {
			ones[b] += int(k >> b & 1)
		}
		// Keep a few regions live and free the rest, so slots are reused.
		if live = append(live, m); len(live) == cap(live) {
			for _, m := range live {
				must(t, m.Dereg())
			}
			live = live[:0]
		}
	}
	for b, c := range ones {
		if c < n*45/100 || c > n*55/100 {
			t.Errorf("bit %d of the keys is set in %d of %d registrations", b, c, n)
		}
	}
}

// TestKeysNotSequential: a key says nothing about the next one. (Keys
// were a sequential 24-bit index and 8 random bits: the next region's
// key was the last one's index + 1, found in at most 256 guesses.)
func TestKeysNotSequential(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	var prev uint32
	near := 0
	const n = 2000
	for i := range n {
		m, err := pd.Register(make([]byte, 8), LocalWrite)
		must(t, err)
		k := m.LKey()
		if d := k>>8 - prev>>8; i > 0 && d < 4 {
			near++
		}
		prev = k
	}
	if near > n/100 {
		t.Errorf("%d of %d keys are within 4 of the previous one in their upper 24 bits", near, n)
	}
}

// TestStaleKey: a deregistered region's key is never accepted again, however
// many regions come after it. (A reused index used to get a new random low
// byte, which could be the stale key's again after a few reuses.)
func TestStaleKey(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	old, err := pd.Register(make([]byte, 64), LocalWrite|RemoteWrite)
	must(t, err)
	stale := old.RKey()
	must(t, old.Dereg())
	for i := range 5000 {
		m, err := pd.Register(make([]byte, 64), LocalWrite|RemoteWrite)
		must(t, err)
		if _, _, err := tab.Lookup(pd, 0, stale, m.Addr(), 1, RemoteWrite); !errors.Is(err, ErrKey) {
			t.Fatalf("registration %d: the stale key %#x reaches a new region (%v)", i, stale, err)
		}
		must(t, m.Dereg())
	}
}

// TestLimit: a table holds at most its limit of regions; a refusal says
// so and wraps ErrTableFull, and a freed slot can be used again.
func TestLimit(t *testing.T) {
	tab := NewTableMax(10)
	pd := tab.AllocPD()
	var ms []*MR
	for range 10 {
		m, err := pd.Register(make([]byte, 8), LocalWrite)
		must(t, err)
		ms = append(ms, m)
	}
	if _, err := pd.Register(make([]byte, 8), LocalWrite); !errors.Is(err, ErrTableFull) {
		t.Fatalf("the 11th region of a table of 10: %v", err)
	}
	if tab.Len() != 10 || tab.Limit() != 10 {
		t.Fatalf("Len %d, Limit %d", tab.Len(), tab.Limit())
	}
	must(t, ms[3].Dereg())
	if _, err := pd.Register(make([]byte, 8), LocalWrite); err != nil {
		t.Fatalf("after a deregistration: %v", err)
	}
	if NewTable().Limit() != DefaultMaxRegions || NewTableMax(MaxRegions+5).Limit() != MaxRegions {
		t.Fatal("default or capped limit")
	}
}

// TestTableShrinks: the key table's memory follows the live regions, not
// the most there ever were.
func TestTableShrinks(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	ms := make([]*MR, 50000)
	for i := range ms {
		var err error
		ms[i], err = pd.Register(make([]byte, 1), LocalWrite)
		must(t, err)
	}
	big := len(tab.keys.slots.Load().keys)
	for _, m := range ms[1:] {
		must(t, m.Dereg())
	}
	if n := len(tab.keys.slots.Load().keys); n > minSlots || big < 2*len(ms) {
		t.Fatalf("%d slots for 50000 regions, %d left for 1", big, n)
	}
	got, _, err := tab.Lookup(pd, 0, ms[0].LKey(), ms[0].Addr(), 1, 0)
	must(t, err)
	got.Release(0)
}

// TestPermutation: the key permutation is one (it has an inverse, and
// distinct inputs give distinct keys), and another secret gives other
// keys.
func TestPermutation(t *testing.T) {
	g, h := newKeyGen(), newKeyGen()
	seen := make(map[uint32]bool, 1<<16)
	same := 0
	for x := range uint32(1 << 16) {
		k := g.permute(x * 65521)
		if seen[k] {
			t.Fatalf("two inputs give the key %#x", k)
		}
		seen[k] = true
		if inverse(&g, k) != x*65521 {
			t.Fatalf("permute(%#x) = %#x does not invert", x*65521, k)
		}
		if h.permute(x*65521) == k {
			same++
		}
	}
	if same > 4 {
		t.Errorf("two secrets agree on %d of 65536 keys", same)
	}
}

// inverse undoes keyGen.permute.
func inverse(g *keyGen, k uint32) uint32 {
	l, r := uint16(k>>16), uint16(k)
	for i := feistelRounds - 1; i >= 0; i-- {
		l, r = r^g.round(uint8(i), l), l
	}
	return uint32(l)<<16 | uint32(r)
}

// TestConcurrentChurn: lookups of live keys succeed and of dead ones fail
// while other goroutines register, deregister and rekey (and the table
// grows, shrinks and is rebuilt under them); run it with -race.
func TestConcurrentChurn(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	fixed, err := pd.Register(make([]byte, 64), LocalWrite|RemoteRead)
	must(t, err)
	key := fixed.RKey()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var misses, hits atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint32(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, _, err := tab.Lookup(pd, 0, key, fixed.Addr(), 64, RemoteRead)
				if err != nil {
					misses.Add(1)
				} else {
					r.Release(0)
					hits.Add(1)
				}
				if _, _, err := tab.Lookup(pd, 0, i*0x9E3779B9|1, 0, 1, 0); err == nil {
					misses.Add(1 << 20) // a guess hit: counted as a failure below
				}
			}
		}()
	}
	for round := range 20 {
		ms := make([]*MR, 1000*(round%4+1))
		for i := range ms {
			ms[i], err = pd.Register(make([]byte, 8), LocalWrite)
			must(t, err)
		}
		for i, m := range ms {
			if i%3 == 0 {
				m.Invalidate()
				_, err := m.Rekey()
				must(t, err)
			}
			must(t, m.Dereg())
		}
	}
	close(stop)
	wg.Wait()
	if misses.Load() != 0 || hits.Load() == 0 {
		t.Fatalf("%d failed lookups of a live key (or hits of guesses, in units of 2^20), %d good", misses.Load(), hits.Load())
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
		{"wrong low bit", pd, k ^ 1, 0x1000, 1, 0, ErrKey},
		{"wrong high bit", pd, k ^ 1<<31, 0x1000, 1, 0, ErrKey},
		{"zero key", pd, 0, 0x1000, 1, 0, ErrKey},
		{"other PD", other, k, 0x1000, 1, 0, ErrPD},
		{"no remote write", pd, k, 0x1000, 1, RemoteWrite, ErrAccessRights},
	} {
		got, mem, err := tab.Lookup(c.pd, 0, c.key, c.addr, c.n, c.want)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
			continue
		}
		if err == nil {
			if len(mem) != int(c.n) {
				t.Errorf("%s: %d bytes", c.name, len(mem))
			}
			got.Release(0)
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
	if _, _, err := tab.Lookup(pd, 0, k, m.Addr(), 1, 0); !errors.Is(err, ErrKey) {
		t.Fatalf("invalidated key: %v", err)
	}
	if f, err := tab.Find(pd, k); err != nil || f != m {
		t.Fatalf("Find of an invalidated region: %v", err)
	}
	k2, err := m.Rekey()
	must(t, err)
	if k2 == k {
		t.Fatalf("rekey %#x -> %#x", k, k2)
	}
	if _, _, err := tab.Lookup(pd, 0, k, m.Addr(), 1, 0); !errors.Is(err, ErrKey) {
		t.Fatal("the old key still works after a rekey")
	}
	got, _, err := tab.Lookup(pd, 0, k2, m.Addr(), 1, 0)
	must(t, err)
	got.Release(0)
}

// TestDeregWaitsForAccess: Dereg returns only when no access is under way,
// and no access starts after it, with the accesses counted in one slot
// and spread over four (SetSpread), each goroutine a QP of its own.
func TestDeregWaitsForAccess(t *testing.T) {
	for _, spread := range []int{1, 4} {
		tab := NewTable()
		must(t, tab.SetSpread(spread))
		pd := tab.AllocPD()
		for range 50 {
			m, err := pd.Register(make([]byte, 4096), LocalWrite)
			must(t, err)
			key := m.LKey()
			var gone atomic.Bool
			var bad atomic.Int32
			var wg sync.WaitGroup
			for g := range 4 {
				qp := uint64(g)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 2000 {
						r, mem, err := tab.Lookup(pd, qp, key, m.Addr(), 4096, LocalWrite)
						if err != nil {
							return
						}
						mem[g]++
						if gone.Load() {
							bad.Add(1) // an access while deregistered
						}
						r.Release(qp)
					}
				}()
			}
			must(t, m.Dereg())
			gone.Store(true)
			wg.Wait()
			if bad.Load() != 0 {
				t.Fatalf("spread %d: %d accesses after Dereg returned", spread, bad.Load())
			}
		}
	}
}

// TestSpreadHeld: an access held, or a pin, in any slot of a spread
// region keeps Invalidate from returning until it is released or
// unpinned, and SetSpread refuses bad counts and a table that has
// regions.
func TestSpreadHeld(t *testing.T) {
	tab := NewTable()
	for _, n := range []int{0, -1, MaxSpread + 1} {
		if err := tab.SetSpread(n); !errors.Is(err, ErrBounds) {
			t.Errorf("SetSpread(%d): %v, want ErrBounds", n, err)
		}
	}
	must(t, tab.SetSpread(4))
	pd := tab.AllocPD()
	m, err := pd.Register(make([]byte, 64), LocalWrite)
	must(t, err)
	if err := tab.SetSpread(2); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("SetSpread after Register: %v, want ErrInvalidAttr", err)
	}
	for qp := range uint64(5) {
		// Held, then pinned: Invalidate waits for each in turn.
		r, _, err := tab.Lookup(pd, qp, m.LKey(), m.Addr(), 8, 0)
		must(t, err)
		done := make(chan struct{})
		go func() {
			m.Invalidate()
			close(done)
		}()
		for _, step := range []struct {
			what string
			end  func()
		}{
			{"an access was held", func() { m.Pin(qp); r.Release(qp) }},
			{"a pin was held", func() { m.Unpin(qp) }},
		} {
			select {
			case <-done:
				t.Fatalf("QP %d: Invalidate returned while %s", qp, step.what)
			case <-time.After(20 * time.Millisecond):
			}
			step.end()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("QP %d: Invalidate still waits after the release and the unpin", qp)
		}
		if _, err := m.Rekey(); err != nil {
			t.Fatal(err)
		}
	}
}
