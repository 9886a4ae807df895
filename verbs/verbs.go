// Package verbs is the vocabulary goroce's backends share: the work
// requests, completions, attributes and statuses of the InfiniBand verbs
// (with ibverbs' names and numbering), and the interfaces a backend
// implements. Package qp implements them in pure Go over a transport;
// package hwverbs implements them through libibverbs. Applications open
// a device with roce.Open (or hwverbs.Open) and use this package's types
// with it.
//
// Memory windows (ibv_mw) open a range of a region registered with
// MWBind to peers under a key of their own, with rights of their own:
// PD.AllocMW allocates one (MWType1 or MWType2), QP.BindMW binds a type 1
// window, a BIND_MW send work request (OpBindMW, SendWR.BindMW) a type 2
// window to the QP it is posted on, with a key whose low byte the
// program chooses (IncRKey). LOCAL_INV (OpLocalInv) or a peer's
// SEND_WITH_INV (OpSendInv) invalidates a type 2 window; a bind
// completes WCBindMW, or MWBindErr when refused.
package verbs

import (
	"context"

	"github.com/goroce/goroce/bth"
)

// Device is an RDMA device: an RNIC, kernel rxe through libibverbs, or
// goroce's software engine. Implementations are safe for concurrent use.
type Device interface {
	// Name names the device (rxe0, goroce:198.18.0.1...).
	Name() string
	// GID returns the RoCEv2 GID of the given index, as an IP address.
	GID(index int) ([16]byte, error)
	// ActiveMTU is the port's active MTU: the largest path MTU, and the
	// message limit of UD.
	ActiveMTU() bth.MTU
	AllocPD() (PD, error)
	// CreateCQ returns a completion queue of at least cqe entries.
	CreateCQ(cqe int) (CQ, error)
	// Events delivers asynchronous events (ibv_get_async_event).
	Events() <-chan Event
	// Close frees the device and everything made from it.
	Close() error
}

// PD is a protection domain: memory regions, queue pairs and address
// handles of one PD work together, and no other combination.
type PD interface {
	// RegMR registers buf with the given rights. Hardware backends need
	// memory that never moves: see the backend's documentation.
	RegMR(buf []byte, access Access) (MR, error)
	CreateQP(attr *QPInitAttr) (QP, error)
	CreateSRQ(attr SRQAttr) (SRQ, error)
	CreateAH(attr AHAttr) (AH, error)
	// AllocMW allocates a memory window of the given type, not bound
	// (ibv_alloc_mw).
	AllocMW(typ MWType) (MW, error)
	// Dealloc frees the PD; it fails while objects use it.
	Dealloc() error
}

// MR is a registered memory region.
type MR interface {
	// Addr is the address SGEs and peers use for Bytes()[0].
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	Bytes() []byte
	// Dereg deregisters the region; when it returns no access is under
	// way and none will start.
	Dereg() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many;
	// it never blocks.
	Poll(wc []WC) int
	// ReqNotify arms the CQ: the next completion (only a solicited one
	// or an error, if solicitedOnly) sends a value on C.
	ReqNotify(solicitedOnly bool)
	// C is the completion channel.
	C() <-chan struct{}
	// Wait blocks until a completion is waiting or ctx is done.
	Wait(ctx context.Context) error
	Destroy() error
}

// QP is a queue pair.
type QP interface {
	QPN() uint32
	Type() QPType
	// Modify changes attributes and state with ibv_modify_qp's rules.
	Modify(attr *QPAttr, mask AttrMask) error
	// Query returns the current attributes.
	Query() (QPAttr, error)
	// PostSend posts send work requests; a refused one is reported as a
	// *PostError and it and those after it are not posted.
	PostSend(wrs []SendWR) error
	PostRecv(wrs []RecvWR) error
	// BindMW posts the bind of a type 1 memory window (ibv_bind_mw); a
	// type 2 window is bound with a BIND_MW work request (PostSend).
	BindMW(mw MW, bind *MWBindWR) error
	// AttachMcast attaches a UD QP to the multicast group of gid
	// (ibv_attach_mcast): the QP receives a copy of each SEND to the
	// group (destination QPN MulticastQPN) that carries its Q_Key. A
	// RoCE device joins the group's IP address on its interface for the
	// first QP it attaches (see the backend's documentation). Attaching
	// a QP to a group it is attached to already does nothing, as in the
	// kernel. A QP that is not UD, or a gid that is not a multicast GID
	// (IsMulticastGID), is refused with ErrInvalidAttr; a device out of
	// room for groups or attachments with ErrMcastFull.
	AttachMcast(gid [16]byte) error
	// DetachMcast detaches the QP from the group of gid
	// (ibv_detach_mcast); a group the QP is not attached to is refused
	// with ErrInvalidAttr. A QP still attached to a group cannot be
	// destroyed (ErrBusy), as ibv_destroy_qp refuses it (EBUSY).
	DetachMcast(gid [16]byte) error
	Destroy() error
}

// SRQ is a shared receive queue.
type SRQ interface {
	PostRecv(wrs []RecvWR) error
	// Modify re-arms the SRQ limit event with a new threshold.
	Modify(limit uint32) error
	Destroy() error
}

// AH is an address handle, the destination of UD sends.
type AH interface {
	Attr() AHAttr
	Destroy() error
}

// DefaultQKey is the Q_Key rdma-core's UD examples and rdma_cm use for UD
// QPs (RDMA_UDP_QKEY).
const DefaultQKey = 0x01234567
