package verbs

import "fmt"

// MWType is a memory window's type, numbered as ibv_mw_type.
type MWType uint8

// Memory window types (IBTA Vol. 1 §10.6.7).
const (
	// MWType1 windows are bound by QP.BindMW (ibv_bind_mw) through any
	// QP of their protection domain, and reached by requests on any such
	// QP; a bind of Length 0 unbinds one. They cannot be invalidated.
	MWType1 MWType = 1
	// MWType2 windows are bound by a BIND_MW send work request, to the
	// QP it is posted on: only requests arriving on that QP reach them
	// (type 2B, as rxe implements it). LOCAL_INV, or a peer's
	// SEND_WITH_INV on that QP, invalidates one; it may then be bound
	// again.
	MWType2 MWType = 2
)

// String returns the type's ibverbs name: TYPE_1 or TYPE_2.
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "TYPE_1"
	case MWType2:
		return "TYPE_2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MW is a memory window (ibv_mw): a range of a registered region with
// remote rights of its own, which a peer reaches with the window's key as
// it would a region with the region's. A window is allocated unbound
// (PD.AllocMW) and reaches memory once bound. Implementations are safe
// for concurrent use.
type MW interface {
	// RKey is the window's remote key, as ibv_mw.rkey holds it: the key
	// it was allocated with, then the key of the last bind posted
	// through goroce (QP.BindMW, or a BIND_MW work request of a type 2
	// window), from the moment it is posted. A bind that completes with
	// an error leaves the window's key on the device as it was: the
	// program then knows the key the window still has (libibverbs asks
	// the same of type 1 binds).
	RKey() uint32
	// Type is the window's type.
	Type() MWType
	// Dealloc unbinds the window if it is bound and frees it
	// (ibv_dealloc_mw). When it returns, no request reaches memory
	// through it any more.
	Dealloc() error
}

// MWBindInfo says where a bind puts a window and what it allows
// (ibv_mw_bind_info).
type MWBindInfo struct {
	// MR is the region the window opens onto; it must allow MWBind and
	// belong to the window's protection domain. A type 1 window is
	// unbound with a nil MR, Addr 0 and Length 0.
	MR MR
	// Addr and Length are the window's range, in the region's addresses
	// (MR.Addr() and on); the range lies within the region.
	Addr   uint64
	Length uint64
	// Access is the window's rights: RemoteRead, RemoteWrite and
	// RemoteAtomic (the last two need LocalWrite on the region), and for
	// a type 2 window ZeroBased.
	Access Access
}

// MWBindWR is a bind of a type 1 window (ibv_mw_bind), which QP.BindMW
// posts as a work request.
type MWBindWR struct {
	// ID and Flags are those of the work request: its completion
	// (BIND_MW) carries ID; Signaled asks for one, Fence waits for
	// earlier READs and atomics.
	ID       uint64
	Flags    SendFlags
	BindInfo MWBindInfo
}

// BindMW is what a BIND_MW send work request binds (ibv_send_wr's
// bind_mw): a type 2 window, its new key and where it goes.
type BindMW struct {
	MW MW
	// RKey is the window's key once bound: its current key with a new
	// low byte, the part the program owns; IncRKey(MW.RKey()) is the
	// usual choice.
	RKey     uint32
	BindInfo MWBindInfo
}

// IncRKey returns rkey with its low 8 bits, the part of a window's key
// the program chooses at each bind, one higher (wrapping from 0xFF to
// 0), as ibv_inc_rkey does.
func IncRKey(rkey uint32) uint32 { return rkey&^0xFF | (rkey+1)&0xFF }
