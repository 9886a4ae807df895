package rstream

import (
	"fmt"
	"io"
	"time"
)

// The result lines, as rstream prints them (librdmacm/examples/rstream.c
// and the size and count helpers of its common.c): a header, then one
// line per test with its name, transfer size, transfers per iteration,
// iterations, bytes moved both ways, seconds, gigabits a second and
// microseconds per one-way transfer.

// header is rstream's header line.
var header = fmt.Sprintf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")

// sizeStr writes a byte count as rstream does: in the largest of g, m
// and k (binary) it reaches, with one decimal below 10 of the unit when
// that decimal is not 0: 64, 1.5k, 96k, 1m.
func sizeStr(n int64) string {
	base, unit := int64(1), ""
	switch {
	case n >= 1<<30:
		base, unit = 1<<30, "g"
	case n >= 1<<20:
		base, unit = 1<<20, "m"
	case n >= 1<<10:
		base, unit = 1<<10, "k"
	}
	whole, tenth := n/base, int64(0)
	if whole < 10 {
		tenth = n % base * 10 / base
	}
	if tenth != 0 {
		return fmt.Sprintf("%d.%d%s", whole, tenth, unit)
	}
	return fmt.Sprintf("%d%s", whole, unit)
}

// cntStr writes a count as rstream does: in decimal thousands (k),
// millions (m) or billions (b), rounded down.
func cntStr(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}

// sizeToCount is how many transfers (bandwidth) or iterations (latency)
// rstream's series runs of a size: fewer for larger sizes.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// seriesName is a series test's name: its size in at most four
// characters (rstream formats it into 5 bytes with the terminating
// NUL), then _lat or _bw.
func seriesName(size int, kind string) string {
	s := sizeStr(int64(size))
	if len(s) > 4 {
		s = s[:4]
	}
	return s + "_" + kind
}

// result is one test's outcome.
type result struct {
	name                  string
	size, count, iters    int
	elapsed               time.Duration
	bytesBothWays         int64
	usecs, gbits, perXfer float64
}

// newResult computes the figures rstream prints. rstream keeps the
// elapsed microseconds in a float and divides per transfer in float
// arithmetic, the bandwidth in double: so does this, so that the
// rounding of the last digit is the same.
func newResult(name string, size, count, iters int, elapsed time.Duration) result {
	r := result{name: name, size: size, count: count, iters: iters, elapsed: elapsed}
	r.bytesBothWays = int64(iters) * int64(count) * int64(size) * 2
	usec := float32(elapsed.Microseconds())
	r.usecs = float64(usec)
	r.gbits = float64(r.bytesBothWays*8) / (1000 * float64(usec))
	r.perXfer = float64(usec / float32(iters) / float32(count*2))
	return r
}

// print writes r's line.
func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", r.name, sizeStr(int64(r.size)), cntStr(int64(r.count)),
		cntStr(int64(r.iters)), sizeStr(r.bytesBothWays), r.usecs/1e6, r.gbits, r.perXfer)
}
