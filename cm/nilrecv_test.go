package cm

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilPointers calls every exported method of the package's types on a
// nil pointer: none panics, and each returns an error naming its type.
func TestNilPointers(t *testing.T) {
	apitest.NilReceivers(t, ".", (*Agent)(nil), (*Listener)(nil), (*Conn)(nil), (*RejectError)(nil),
		(*DatagramListener)(nil), (*Request)(nil), (*SIDRError)(nil), (*DatagramRequest)(nil), (*Multicast)(nil))
}

// TestNilRejectErrorIs asks a nil *RejectError, as errors.Is would hold
// one in a chain, whether it is each of the package's sentinels.
func TestNilRejectErrorIs(t *testing.T) {
	var e *RejectError
	for _, target := range []error{ErrRejected, ErrConnRefused, ErrInvalid, nil} {
		apitest.NoPanic(t, "(*RejectError)(nil).Is", func() {
			if e.Is(target) {
				t.Errorf("a nil *RejectError is %v", target)
			}
		})
	}
	if errors.Is(error(e), ErrRejected) {
		t.Error("errors.Is(nil *RejectError, ErrRejected)")
	}
}
