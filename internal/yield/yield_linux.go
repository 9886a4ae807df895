//go:build linux

package yield

import (
	"runtime"
	"syscall"
)

// CPU lets the other goroutines run (runtime.Gosched) and then the other
// threads that wait for this thread's core (sched_yield(2)); with nothing
// waiting, it returns at once.
func CPU() {
	runtime.Gosched()
	syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
