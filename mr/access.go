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
// made each packet three times as slow (qp's BenchmarkReceivePaths). A
// table without spread counts in slot0, in the region; one with (the
// table's spread of them) in slots made apart, each in a cache line of
// its own (and none in the one of the region's fields, which every
// access reads), the first time an access comes. A writer announces
// itself, then waits for every slot to empty; a reader that sees it
// waits for it to finish.
type accessLock struct {
	wmu     sync.Mutex // held by the writer
	writing atomic.Bool
	slot0   accessSlot
	spread  atomic.Pointer[[]accessSlot]
}

// accessSlot is a count of readers and one of pins (MR.Pin), alone in
// its cache line.
type accessSlot struct {
	readers atomic.Int32
	pins    atomic.Int32
	_       [56]byte
}

// slot returns slot i of n spread slots, making them if they are not yet.
func (l *accessLock) slot(i, n int) *accessSlot {
	p := l.spread.Load()
	if p == nil {
		// n times 64 bytes: a size class whose objects are 64-byte
		// aligned.
		s := make([]accessSlot, n)
		if !l.spread.CompareAndSwap(nil, &s) {
			p = l.spread.Load()
		} else {
			p = &s
		}
	}
	return &(*p)[i]
}

// rlock takes the lock for reading in slot s.
func (l *accessLock) rlock(s *accessSlot) {
	for {
		s.readers.Add(1)
		// The writer sets writing, then looks at the slots: one of the
		// two sees the other.
		if !l.writing.Load() {
			return
		}
		s.readers.Add(-1)
		l.wmu.Lock()
		//lint:ignore SA2001 the writer holds wmu: taking it is waiting for the writer to finish
		l.wmu.Unlock()
	}
}

// runlock ends a read begun by rlock(s).
func (l *accessLock) runlock(s *accessSlot) { s.readers.Add(-1) }

// lock takes the lock for writing: no reader holds it once it returns,
// and none takes it until unlock.
func (l *accessLock) lock() {
	l.wmu.Lock()
	l.writing.Store(true)
	waitEmpty(&l.slot0)
	if p := l.spread.Load(); p != nil {
		for i := range *p {
			waitEmpty(&(*p)[i])
		}
	}
}

// unlock ends what lock began.
func (l *accessLock) unlock() {
	l.writing.Store(false)
	l.wmu.Unlock()
}

// pinned reports whether a slot counts a pin.
func (l *accessLock) pinned() bool {
	if l.slot0.pins.Load() > 0 {
		return true
	}
	if p := l.spread.Load(); p != nil {
		for i := range *p {
			if (*p)[i].pins.Load() > 0 {
				return true
			}
		}
	}
	return false
}

// waitEmpty waits for the readers of s to leave: a read lasts a copy of
// one packet's bytes, so a few yields first, then short sleeps.
func waitEmpty(s *accessSlot) {
	for i := 0; s.readers.Load() > 0; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond << min(i-64, 10))
		}
	}
}
