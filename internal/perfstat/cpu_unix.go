//go:build unix

package perfstat

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time the calling process has used so far;
// zero where the system does not say.
func ProcessCPU() CPU {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return CPU{}
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return CPU{User: tv(ru.Utime), Sys: tv(ru.Stime)}
}
