// Package yield gives the processor away for a moment: to the other
// goroutines of the program and, where the system lets a thread do so, to
// the other threads and processes that wait for the CPU. A loop that
// spins waiting for a peer calls CPU between looks, so that on a machine
// with fewer cores than runnable threads the peer it waits for (often on
// the same core) runs at once instead of at the end of the spinner's time
// slice.
package yield
