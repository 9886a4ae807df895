package perfstat

import "time"

// CPU is the processor time a process used: user and system time, as
// getrusage(2) counts it. It is a plain value.
type CPU struct {
	User, Sys time.Duration
}

// Sub returns c - before: the time used between two samples.
func (c CPU) Sub(before CPU) CPU { return CPU{User: c.User - before.User, Sys: c.Sys - before.Sys} }

// Total returns user plus system time.
func (c CPU) Total() time.Duration { return c.User + c.Sys }

// PerMsg returns the total in microseconds per message over n messages
// (0 for none).
func (c CPU) PerMsg(n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(c.Total().Nanoseconds()) / 1e3 / float64(n)
}
