package yield

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestCPULetsOthersRun spins on one processor with CPU between looks and
// checks that another goroutine, which needs that processor, has run
// after a few of them: a spin that did not give way would look many times
// before the scheduler preempted it (every 10 ms).
func TestCPULetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	go ran.Store(true)
	for i := 0; !ran.Load(); i++ {
		if i == 3 {
			t.Fatal("the other goroutine did not run while the spinner yielded")
		}
		CPU()
	}
}
