package rsocket

import (
	"sync"
	"time"
)

// deadline is a read or write deadline: a channel closed when it passes.
// Setting a new deadline keeps the channel unless it was closed already,
// so a call blocked on it sees the change; one timer is reused. It is safe
// for concurrent use.
type deadline struct {
	mu      sync.Mutex
	t       time.Time
	ch      chan struct{}
	expired bool // ch is closed
	stopped bool // for good: the Conn is closed
	timer   *time.Timer
	// wake, when set, is called (with mu held) whenever the deadline
	// moves or passes: a call that waits without watching ch (a Read
	// leading the device's receive) looks again.
	wake func()
}

func newDeadline() *deadline { return &deadline{ch: make(chan struct{})} }

// set moves the deadline to t; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.t = t
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.expired {
		d.ch, d.expired = make(chan struct{}), false
	}
	if d.wake != nil {
		defer d.wake()
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(d.ch)
		d.expired = true
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
	} else {
		d.timer.Reset(wait)
	}
}

// fire closes the channel if the deadline has passed: a timer stopped
// too late for an earlier deadline may still call it.
func (d *deadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired || d.t.IsZero() {
		return
	}
	if wait := time.Until(d.t); wait > 0 {
		d.timer.Reset(wait)
		return
	}
	close(d.ch)
	d.expired = true
	if d.wake != nil {
		d.wake()
	}
}

// when returns the deadline; the zero Time means none.
func (d *deadline) when() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.t
}

// done returns the channel closed when the deadline passes.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

// stop stops the timer, for good.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.t, d.stopped = time.Time{}, true
}
