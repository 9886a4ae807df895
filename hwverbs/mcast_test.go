//go:build hwverbs && cgo && linux

package hwverbs

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestMcastAttach: ibv_attach_mcast and ibv_detach_mcast on the device,
// as the kernel's ib_core and rxe answer them and goroce's engine does
// too: EINVAL for an RC QP, a GID that is not multicast, and a detach of
// a group the QP is not attached to; a second attach succeeds; an
// attached QP cannot be destroyed (EBUSY) until it is detached.
func TestMcastAttach(t *testing.T) {
	d := openT(t)
	ud, rc := newSide(t, d, verbs.UD, nil, nil), newSide(t, d, verbs.RC, nil, nil)
	group := verbs.MulticastGID(netip.MustParseAddr("239.255.47.1"))
	bad := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, verbs.ErrInvalidAttr) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL (verbs.ErrInvalidAttr)", what, err)
		}
	}
	bad(rc.qp.AttachMcast(group), "attach of an RC QP")
	bad(ud.qp.AttachMcast(verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.1"))), "attach to a unicast GID")
	bad(ud.qp.DetachMcast(group), "detach of a group not attached")
	if err := ud.qp.AttachMcast(group); err != nil {
		t.Fatal(err)
	}
	if err := ud.qp.AttachMcast(group); err != nil {
		t.Errorf("second attach: %v, want success (the kernel's uverbs)", err)
	}
	if err := ud.qp.Destroy(); !errors.Is(err, verbs.ErrBusy) || !errors.Is(err, syscall.EBUSY) {
		t.Errorf("destroy of an attached QP: %v, want EBUSY", err)
	}
	if err := ud.qp.DetachMcast(group); err != nil {
		t.Fatal(err)
	}
	bad(ud.qp.DetachMcast(group), "second detach")
	if err := ud.qp.Destroy(); err != nil {
		t.Errorf("destroy after detach: %v", err)
	}
}
