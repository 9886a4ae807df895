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
	// RemoteAccess is every remote right.
	RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic
	// KnownAccess is every right goroce knows.
	KnownAccess = LocalWrite | RemoteAccess
)

// String lists the rights by their ibverbs names (LOCAL_WRITE|REMOTE_READ), or "none".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var b []byte
	for i, n := range []string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC"} {
		if a&(1<<i) != 0 {
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
