package mr

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// accessLock is a region's lock: many readers (the accesses of packets,
// each as long as a copy) and rare writers (Dereg, Invalidate, Rekey,
// binds). Readers count themselves in a slot the caller names, so that
// readers on different cores (QPs of different receive paths) write
// different cache lines instead of all of them the one of a
// sync.RWMutex's reader count: a region that QPs of two paths wrote into
// made each packet three times as slow (qp's BenchmarkReceivePaths).
//
// A region of a table without spread counts in slot0; one with (n slots)
// in slots made with the region, apart from it, each in a cache line of
// its own and none in the region's, whose fields every access reads. A reader adds one to its slot, and reads it as the sign of the
// sum: a writer takes wmu and subtracts writerBias from every slot, then
// waits for each to come down to -writerBias (its readers gone), and
// adds writerBias back when it is done; a reader that finds its sum
// negative takes its one back and waits for wmu. So a read costs one
// atomic add to begin and one to end, as sync.RWMutex's does.
type accessLock struct {
	wmu   sync.Mutex // held by the writer
	slot0 accessSlot
	slots []accessSlot // the spread slots, if any; set before the first access
}

// writerBias is what a writer subtracts from every slot: more than
// readers can ever add.
const writerBias = 1 << 30

// accessSlot is a count of readers and one of pins (MR.Pin), alone in
// its cache line.
type accessSlot struct {
	readers atomic.Int32
	pins    atomic.Int32
	_       [56]byte
}

// spreadSlots returns n slots apart: n times 64 bytes, a size class
// whose objects are 64-byte aligned.
func spreadSlots(n int) []accessSlot { return make([]accessSlot, n) }

// rlock takes the lock for reading in slot s.
func (l *accessLock) rlock(s *accessSlot) {
	if s.readers.Add(1) <= 0 {
		l.rlockSlow(s)
	}
}

// rlockSlow is rlock once it has found a writer at work.
func (l *accessLock) rlockSlow(s *accessSlot) {
	for {
		s.readers.Add(-1)
		l.wmu.Lock()
		//lint:ignore SA2001 the writer holds wmu: taking it is waiting for the writer to finish
		l.wmu.Unlock()
		if s.readers.Add(1) > 0 {
			return
		}
	}
}

// runlock ends a read begun by rlock(s).
func (l *accessLock) runlock(s *accessSlot) { s.readers.Add(-1) }

// lock takes the lock for writing: no reader holds it once it returns,
// and none takes it until unlock.
func (l *accessLock) lock() {
	l.wmu.Lock()
	l.each(func(s *accessSlot) { s.readers.Add(-writerBias) })
	l.each(waitReaders)
}

// unlock ends what lock began.
func (l *accessLock) unlock() {
	l.each(func(s *accessSlot) { s.readers.Add(writerBias) })
	l.wmu.Unlock()
}

// each calls f for every slot.
func (l *accessLock) each(f func(*accessSlot)) {
	f(&l.slot0)
	for i := range l.slots {
		f(&l.slots[i])
	}
}

// pinned reports whether a slot counts a pin.
func (l *accessLock) pinned() bool {
	n := false
	l.each(func(s *accessSlot) { n = n || s.pins.Load() > 0 })
	return n
}

// waitReaders waits for the readers of s, which a writer has biased, to
// leave: a read lasts a copy of one packet's bytes, so a few yields
// first, then short sleeps.
func waitReaders(s *accessSlot) {
	for i := 0; s.readers.Load() != -writerBias; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond << min(i-64, 10))
		}
	}
}
