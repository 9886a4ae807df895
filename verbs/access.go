package verbs

import "fmt"

// Access is a set of access rights, with the values of ibv_access_flags.
type Access uint32

// Access rights.
const (
	LocalWrite   Access = 1 << 0
	RemoteWrite  Access = 1 << 1
	RemoteRead   Access = 1 << 2
	RemoteAtomic Access = 1 << 3
	// MWBind lets memory windows be bound to a region
	// (IBV_ACCESS_MW_BIND).
	MWBind Access = 1 << 4
	// ZeroBased makes a type 2 window's addresses offsets from its
	// start (IBV_ACCESS_ZERO_BASED): a peer names byte 0 of the window
	// as address 0. Only binds take it.
	ZeroBased Access = 1 << 5
	// FlushGlobal lets a peer's FLUSH of placement type PlaceGlobal
	// reach the memory or the QP (IBV_ACCESS_FLUSH_GLOBAL).
	FlushGlobal Access = 1 << 8
	// FlushPersistent lets a peer's FLUSH of placement type
	// PlacePersistent reach the memory or the QP
	// (IBV_ACCESS_FLUSH_PERSISTENT). Only persistent memory takes it.
	FlushPersistent Access = 1 << 9
	// RemoteAccess is every remote right of RDMA and atomics.
	RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic
	// FlushAccess is both flush rights.
	FlushAccess = FlushGlobal | FlushPersistent
	// KnownAccess is every flag goroce knows. Regions take LocalWrite,
	// the remote rights, MWBind and the flush rights; QPs the remote
	// and flush rights; binds of windows the remote and flush rights and
	// ZeroBased.
	KnownAccess = LocalWrite | RemoteAccess | MWBind | ZeroBased | FlushAccess
)

// accessNames are the names of the flags, by bit (ON_DEMAND and HUGETLB,
// bits 6 and 7, goroce does not know).
var accessNames = [...]string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "MW_BIND", "ZERO_BASED",
	"", "", "FLUSH_GLOBAL", "FLUSH_PERSISTENT"}

// String lists the rights by their ibverbs names (LOCAL_WRITE|REMOTE_READ), or "none".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var b []byte
	for i, n := range accessNames {
		if n != "" && a&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n...)
		}
	}
	if rest := a &^ KnownAccess; rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "%#x", uint32(rest))
	}
	return string(b)
}
