//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// AttachMcast attaches the UD QP to the multicast group of gid
// (ibv_attach_mcast, with multicast LID 0: RoCE has no LIDs). The device
// and the kernel check it: a QP that is not UD or a GID that is not
// multicast is refused with verbs.ErrInvalidAttr (EINVAL), a device out of
// room with verbs.ErrMcastFull (ENOMEM); attaching twice succeeds. On a
// RoCE device the attach does not join the group's IP address on the
// interface (rxe adds the group's MAC address to its network device, and
// the IP stack drops what no socket joined): rdma_cm's join does that for
// IPv4 groups (hwverbs/rdmacm), or anything on the host that joins the
// group on the interface.
func (q *QP) AttachMcast(gid [16]byte) error { return q.mcast(gid, true) }

// DetachMcast detaches the QP from the group of gid (ibv_detach_mcast);
// a group the QP is not attached to is refused with verbs.ErrInvalidAttr
// (EINVAL). A QP attached to a group cannot be destroyed (EBUSY).
func (q *QP) DetachMcast(gid [16]byte) error { return q.mcast(gid, false) }

func (q *QP) mcast(gid [16]byte, attach bool) error {
	if err := q.made(); err != nil {
		return err
	}
	op := "ibv_detach_mcast"
	if attach {
		op = "ibv_attach_mcast"
	}
	q.dev.life.RLock()
	defer q.dev.life.RUnlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	if q.dead.Load() {
		return fmt.Errorf("%w: %s of a destroyed QP", verbs.ErrDestroyed, op)
	}
	var g C.union_ibv_gid // no Go pointers in it: C may have its address for the call
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&g)), len(gid)), gid[:])
	var rc C.int
	if attach {
		rc = C.ibv_attach_mcast(q.qp, &g, 0)
	} else {
		rc = C.ibv_detach_mcast(q.qp, &g, 0)
	}
	if rc != 0 {
		e := errnoError(op, syscall.Errno(C.gr_errno_ret(rc)))
		e.Detail = fmt.Sprintf("QP %d, group %v", q.qpn, verbs.AddrFromGID(gid))
		return e
	}
	return nil
}
