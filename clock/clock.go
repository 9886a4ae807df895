// Package clock gives the engine its sense of time through an interface,
// so that reliability tests can run timers on a manual clock and be
// deterministic, in the way of gVisor's faketime.
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock tells the time and runs functions after a delay.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (Real) or from Advance
	// (Manual) once d has passed, unless the timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call from AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether
	// it did so.
	Stop() bool
	// Reset makes the timer fire after d from now, stopped or not; it
	// reports whether it was pending.
	Reset(d time.Duration) bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, orNop(f))} }

// orNop returns f, or a function that does nothing for a nil f: a timer
// of a nil function fires and does nothing.
func orNop(f func()) func() {
	if f == nil {
		return func() {}
	}
	return f
}

type realTimer struct{ t *time.Timer }

func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Manual is a clock that moves only when told to. Timers fire from
// Advance, in deadline order (ties in the order they were set), on the
// caller's goroutine. It is safe for concurrent use; a timer function may
// set, reset and stop timers. The zero Manual reads the zero time; a nil
// *Manual reads it too, and its timers never fire.
type Manual struct {
	mu   sync.Mutex
	now  time.Time
	seq  uint64
	heap timerHeap
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arranges for f to be called by the Advance that passes now+d.
func (c *Manual) AfterFunc(d time.Duration, f func()) Timer {
	if c == nil {
		return (*manualTimer)(nil) // never fires; Stop and Reset report false
	}
	t := &manualTimer{c: c, f: orNop(f), index: -1}
	t.Reset(d)
	return t
}

// Next returns the deadline of the earliest pending timer, and false when
// none is pending.
func (c *Manual) Next() (time.Time, bool) {
	if c == nil {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.heap) == 0 {
		return time.Time{}, false
	}
	return c.heap[0].when, true
}

// Advance moves the clock forward by d, firing every timer due on the way
// at its deadline.
func (c *Manual) Advance(d time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	c.AdvanceTo(end)
}

// AdvanceTo moves the clock to t (if later), firing every timer due by
// then, each with the clock set to its deadline.
func (c *Manual) AdvanceTo(t time.Time) {
	if c == nil {
		return
	}
	for {
		c.mu.Lock()
		if len(c.heap) == 0 || c.heap[0].when.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		mt := heap.Pop(&c.heap).(*manualTimer)
		if mt.when.After(c.now) {
			c.now = mt.when
		}
		f := mt.f
		c.mu.Unlock()
		f()
	}
}

type manualTimer struct {
	c     *Manual
	f     func()
	when  time.Time
	seq   uint64
	index int // in the heap, -1 when not pending
}

func (t *manualTimer) Stop() bool {
	if t == nil {
		return false
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.heap, t.index)
	return true
}

func (t *manualTimer) Reset(d time.Duration) bool {
	if t == nil {
		return false
	}
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := t.index >= 0
	if pending {
		heap.Remove(&c.heap, t.index)
	}
	c.seq++
	t.when, t.seq = c.now.Add(d), c.seq
	heap.Push(&c.heap, t)
	return pending
}

type timerHeap []*manualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
