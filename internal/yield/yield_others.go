//go:build !linux

package yield

import "runtime"

// CPU lets the other goroutines run (runtime.Gosched). On this system the
// thread does not give its core to other threads.
func CPU() { runtime.Gosched() }
