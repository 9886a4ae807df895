//go:build !linux

package hwverbs

import (
	"fmt"
	"runtime"
)

// Alloc returns n bytes of memory outside the Go heap, for memory
// regions. It is implemented on Linux only.
func Alloc(n int) ([]byte, error) {
	return nil, fmt.Errorf("hwverbs: Alloc is not implemented on %s", runtime.GOOS)
}

// Free unmaps memory from Alloc. It is implemented on Linux only.
func Free(b []byte) error {
	return fmt.Errorf("hwverbs: Free is not implemented on %s", runtime.GOOS)
}
