//go:build hwverbs && cgo && linux

package rdmacm

import (
	"testing"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilPointers calls every exported method of the package's types on a
// nil pointer: none panics, and each returns an error naming its type.
// It needs no RDMA device.
func TestNilPointers(t *testing.T) {
	apitest.NilReceivers(t, ".", (*Conn)(nil), (*Listener)(nil), (*Request)(nil), (*Params)(nil), (*ListenConfig)(nil), (*ConnInfo)(nil))
}
