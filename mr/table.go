package mr

import "sync/atomic"

// keyTable maps the keys of live regions to the regions (and, in a second
// table, the 24-bit key prefixes of live memory windows to the windows): an open-addressed
// hash table with linear probing that readers search without a lock, and
// writers (who hold Table.mu) change one slot at a time or replace whole.
// Keys come from keyGen and look random, so a key's low bits are its
// bucket: nobody who does not know the table's secret can choose keys
// that collide, and a guessed key costs a probe of a few slots, most
// often one cache line of keys.
type keyTable[T any] struct {
	slots atomic.Pointer[slotArray[T]]
	live  int // entries in the table
	used  int // slots with a key: live regions and tombstones
}

// slotArray is one generation of the table; its length is a power of two,
// and it always has an empty slot, where a search for a missing key ends.
// A slot's key is set once (0: empty) and its region is set before the
// key and cleared when the region leaves, which leaves a tombstone: a key
// without a region, that searches go past. Rebuilding drops tombstones.
type slotArray[T any] struct {
	mask uint32
	keys []atomic.Uint32
	vals []atomic.Pointer[T]
}

// minSlots is the smallest table.
const minSlots = 64

// get returns the entry with key, or nil.
func (kt *keyTable[T]) get(key uint32) *T {
	a := kt.slots.Load()
	if a == nil || key == 0 {
		return nil
	}
	for i := key & a.mask; ; i = (i + 1) & a.mask {
		switch a.keys[i].Load() {
		case 0:
			return nil
		case key:
			if m := a.vals[i].Load(); m != nil {
				return m
			}
		}
	}
}

// put adds key, which no live entry has, for m; the caller holds
// Table.mu.
func (kt *keyTable[T]) put(key uint32, m *T) {
	a := kt.slots.Load()
	if a == nil || 4*(kt.used+1) > 3*len(a.keys) {
		a = kt.rebuild(kt.live + 1)
	}
	kt.used++
	kt.live++
	a.store(key, m)
}

// store puts key and m in the first empty slot of key's probe sequence.
func (a *slotArray[T]) store(key uint32, m *T) {
	i := key & a.mask
	for a.keys[i].Load() != 0 {
		i = (i + 1) & a.mask
	}
	a.vals[i].Store(m)
	a.keys[i].Store(key)
}

// remove takes key out of the table; the caller holds Table.mu.
func (kt *keyTable[T]) remove(key uint32) {
	a := kt.slots.Load()
	if a == nil || key == 0 {
		return
	}
	for i := key & a.mask; ; i = (i + 1) & a.mask {
		k := a.keys[i].Load()
		if k == 0 {
			return
		}
		if k == key && a.vals[i].Load() != nil {
			a.vals[i].Store(nil)
			kt.live--
			break
		}
	}
	if len(a.keys) > minSlots && 16*kt.live < len(a.keys) {
		kt.rebuild(kt.live)
	}
}

// rebuild replaces the slots with a new array sized for n regions (at
// most half full), holding the live regions and no tombstones. Searches
// under way finish on the old array, whose regions stay valid or are
// found invalid under their own lock.
func (kt *keyTable[T]) rebuild(n int) *slotArray[T] {
	size := minSlots
	for size < 2*n {
		size *= 2
	}
	na := &slotArray[T]{mask: uint32(size - 1), keys: make([]atomic.Uint32, size), vals: make([]atomic.Pointer[T], size)}
	if old := kt.slots.Load(); old != nil {
		for i := range old.keys {
			if m := old.vals[i].Load(); m != nil {
				na.store(old.keys[i].Load(), m)
			}
		}
	}
	kt.used = kt.live
	kt.slots.Store(na)
	return na
}
