package clock

import (
	"testing"
	"time"
)

func TestManualOrder(t *testing.T) {
	c := NewManual(time.Unix(0, 0))
	var got []int
	c.AfterFunc(30*time.Millisecond, func() { got = append(got, 3) })
	c.AfterFunc(10*time.Millisecond, func() { got = append(got, 1) })
	t2 := c.AfterFunc(20*time.Millisecond, func() { got = append(got, 2) })
	stopped := c.AfterFunc(15*time.Millisecond, func() { got = append(got, 99) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if next, ok := c.Next(); !ok || next != time.Unix(0, 0).Add(10*time.Millisecond) {
		t.Fatalf("Next = %v %v", next, ok)
	}
	c.Advance(25 * time.Millisecond)
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after 25ms fired %v", got)
	}
	if t2.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	// A timer that re-arms itself from its function.
	var tm Timer
	n := 0
	tm = c.AfterFunc(time.Millisecond, func() {
		n++
		if n < 3 {
			tm.Reset(time.Millisecond)
		}
	})
	c.Advance(10 * time.Millisecond)
	if n != 3 || len(got) != 3 || got[2] != 3 {
		t.Fatalf("n=%d got=%v", n, got)
	}
	if c.Now() != time.Unix(0, 0).Add(35*time.Millisecond) {
		t.Fatalf("Now = %v", c.Now())
	}
}
