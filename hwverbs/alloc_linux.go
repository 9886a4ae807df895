package hwverbs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Alloc returns n bytes of zeroed memory mapped outside the Go heap
// (anonymous, private mmap), rounded up to whole pages, for memory
// regions: the garbage collector never moves or frees it. Free it with
// Free after the region is deregistered.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hwverbs: alloc %d bytes: size must be positive", n)
	}
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("hwverbs: alloc %d bytes: mmap: %w", n, err)
	}
	return b[:n:size], nil
}

// Free unmaps memory from Alloc: b is what Alloc returned, or a reslice
// b[:k] of it. The memory must not be registered any more.
func Free(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b[:cap(b)]); err != nil {
		return fmt.Errorf("hwverbs: free: %w", err)
	}
	return nil
}
