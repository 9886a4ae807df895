package clock

import (
	"container/heap"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics. A timer of a nil function
// fires and does nothing; a nil Manual reads the zero time and its timers
// never fire.
func TestNilArgs(t *testing.T) {
	apitest.Run(t, ".", apitest.Table{
		"Real.Now": func(t *testing.T) {
			if (Real{}).Now().IsZero() {
				t.Error("the system clock reads zero")
			}
		},
		"Real.AfterFunc": func(t *testing.T) {
			Real{}.AfterFunc(0, nil)
			time.Sleep(20 * time.Millisecond) // the nil function runs, or crashes the test
		},
		"realTimer.Stop": func(t *testing.T) {
			if !(Real{}).AfterFunc(time.Hour, nil).Stop() {
				t.Error("Stop of a pending timer reports false")
			}
		},
		"realTimer.Reset": func(t *testing.T) {
			tm := Real{}.AfterFunc(time.Hour, nil)
			if !tm.Reset(time.Hour) || !tm.Stop() {
				t.Error("Reset or Stop of a pending timer reports false")
			}
		},
		"NewManual": func(t *testing.T) {
			if !NewManual(time.Time{}).Now().IsZero() {
				t.Error("a manual clock started at zero reads otherwise")
			}
		},
		"Manual.Now": func(t *testing.T) {
			if !(*Manual)(nil).Now().IsZero() {
				t.Error("a nil Manual reads a time")
			}
		},
		"Manual.AfterFunc": func(t *testing.T) {
			c := NewManual(time.Unix(0, 0))
			c.AfterFunc(time.Second, nil)
			c.Advance(2 * time.Second) // the nil function fires
			tm := (*Manual)(nil).AfterFunc(0, func() { t.Error("a nil Manual's timer fired") })
			if tm.Reset(0) || tm.Stop() {
				t.Error("a nil Manual's timer is pending")
			}
		},
		"Manual.Next": func(t *testing.T) {
			if _, ok := (*Manual)(nil).Next(); ok {
				t.Error("a nil Manual has a timer")
			}
		},
		"Manual.Advance": func(t *testing.T) {
			(*Manual)(nil).Advance(time.Second)
			var c Manual
			c.Advance(-time.Second)
			if !c.Now().IsZero() {
				t.Errorf("a negative advance moved the clock to %v", c.Now())
			}
		},
		"Manual.AdvanceTo": func(t *testing.T) { (*Manual)(nil).AdvanceTo(time.Now()) },
		"manualTimer.Stop": func(t *testing.T) {
			if (*manualTimer)(nil).Stop() {
				t.Error("a nil timer stopped")
			}
		},
		"manualTimer.Reset": func(t *testing.T) {
			if (*manualTimer)(nil).Reset(0) {
				t.Error("a nil timer was pending")
			}
		},
		// The heap's methods are container/heap's to call.
		"timerHeap.Len": func(t *testing.T) {
			if (timerHeap{}).Len() != 0 {
				t.Error("an empty heap has timers")
			}
		},
		"timerHeap.Less": func(t *testing.T) { heapOrder(t) },
		"timerHeap.Swap": func(t *testing.T) { heapOrder(t) },
		"timerHeap.Push": func(t *testing.T) { heapOrder(t) },
		"timerHeap.Pop":  func(t *testing.T) { heapOrder(t) },
	})
	apitest.NilReceivers(t, ".", (*Manual)(nil))
}

// heapOrder pushes timers out of order and pops them in order.
func heapOrder(t *testing.T) {
	var h timerHeap
	for i, d := range []int{3, 1, 2} {
		heap.Push(&h, &manualTimer{when: time.Unix(int64(d), 0), seq: uint64(i)})
	}
	for want := 1; want <= 3; want++ {
		if got := heap.Pop(&h).(*manualTimer); got.when.Unix() != int64(want) || got.index != -1 {
			t.Fatalf("popped %v (index %d), want %d", got.when.Unix(), got.index, want)
		}
	}
}
