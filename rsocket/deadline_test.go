package rsocket

import (
	"testing"
	"time"
)

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestDeadline(t *testing.T) {
	d := newDeadline()
	if closedWithin(d.done(), 10*time.Millisecond) {
		t.Fatal("no deadline: closed")
	}
	// Past: closed at once; moved to the future: a new channel.
	d.set(time.Now().Add(-time.Second))
	if !closedWithin(d.done(), 0) {
		t.Fatal("past deadline: open")
	}
	d.set(time.Now().Add(time.Hour))
	ch := d.done()
	if closedWithin(ch, 10*time.Millisecond) {
		t.Fatal("deadline in an hour: closed")
	}
	// Brought forward while waited on: the same channel closes.
	d.set(time.Now().Add(20 * time.Millisecond))
	if !closedWithin(ch, 5*time.Second) {
		t.Fatal("deadline brought forward: the waited channel did not close")
	}
	// Pushed back before it passes: it does not close early, even when
	// the earlier timer had fired already.
	d.set(time.Now().Add(5 * time.Millisecond))
	ch = d.done()
	d.set(time.Now().Add(time.Hour))
	if closedWithin(ch, 50*time.Millisecond) {
		t.Fatal("deadline pushed back: closed at the old time")
	}
	// Cleared.
	d.set(time.Time{})
	if closedWithin(d.done(), 20*time.Millisecond) {
		t.Fatal("cleared deadline: closed")
	}
	// Stopped: set does nothing.
	d.stop()
	d.set(time.Now().Add(-time.Second))
	if closedWithin(d.done(), 10*time.Millisecond) {
		t.Fatal("stopped deadline: closed")
	}
}
