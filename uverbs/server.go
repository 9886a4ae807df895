package uverbs

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// Config says how Serve presents a device. A nil *Config means the
// defaults. It is plain data; Serve reads it and keeps a copy.
type Config struct {
	// Name is the device's name as ibv_devices lists it (default
	// goroce0): letters, digits, '_' and '-', at most 63 bytes. Its
	// socket is Dir/Name.sock.
	Name string
	// Dir is the directory of the socket; default SocketDir(). Serve
	// makes it, with mode 0700, if it does not exist, and refuses one
	// that another user owns or that others may write to.
	Dir string
	// Mode is the socket's permission (default 0600: only its owner's
	// programs reach the device). 0660 lets the socket's group in, with
	// the directory opened to it as well.
	Mode os.FileMode
	// GIDs is the port's GID table, first entry first; default the
	// device's addresses laid out as rxe's table is (index 1 the IPv4
	// address, 2 the IPv6 one, 0 the first of them again). A device sends
	// to an IPv6 peer from its IPv6 address and to an IPv4 peer from its
	// IPv4 address, so the table holds at most one of each that it sends
	// from.
	GIDs []netip.Addr
	// Ifindex is the network interface the GIDs are on, as
	// ibv_query_gid_ex reports it (0: none).
	Ifindex int
	// Spin is how long a session's worker looks for more work after
	// its last before it sleeps on the doorbell: shorter costs the
	// program a system call and the device a wakeup per request that
	// finds it asleep; longer costs a core while it spins. 0 means
	// DefaultSpin; negative, never spin.
	Spin time.Duration
	// Logger receives the device's records (sessions opened and closed,
	// refused requests at Debug); nil discards.
	Logger *slog.Logger
}

// DefaultSpin is the worker's default spin (Config.Spin).
//
// A request/response program posts its next request a round trip after
// its last, and the spin should outlast that. On two devices of a 2-vCPU
// VM, ib_send_lat -s 2 took 96-170 us typical with the worker spinning
// 50 µs, 97 us with 150 µs, 56-93 us with 300 µs and 71-83 us with 1 ms
// (the longer spins taking the core from the programs); rping 1142-1179
// us per ping with 50 µs, 926-927 with 300 µs. ib_write_lat, whose
// programs spin on memory beside the workers, kept its typical (85-103
// us) but its average went from 225-261 us to 466-487. The worker spins
// after a burst of work only: at most this much of a core each.
const DefaultSpin = 300 * time.Microsecond

// SocketDir returns the directory of devices' sockets: $GOROCE_DIR, or
// /tmp/goroce-UID. libgoroce looks there too.
func SocketDir() string {
	if d := os.Getenv("GOROCE_DIR"); d != "" {
		return d
	}
	return abi.DefaultRoot + strconv.Itoa(os.Getuid())
}

// Errors Serve returns.
var (
	// ErrName: Config.Name is not a valid device name.
	ErrName = errors.New("uverbs: bad device name")
	// ErrDir: the socket directory is not safe to use.
	ErrDir = errors.New("uverbs: unsafe socket directory")
	// ErrInUse: a device of that name is serving already.
	ErrInUse = errors.New("uverbs: device name in use")
	// ErrUnsupported: this system cannot serve a device (it needs
	// Linux: memfd, eventfd, SCM_RIGHTS).
	ErrUnsupported = errors.New("uverbs: not supported on this system")
)

// checkName checks a device name.
func checkName(n string) error {
	if n == "" || len(n) > 63 {
		return fmt.Errorf("%w %q: want 1 to 63 bytes", ErrName, n)
	}
	for _, c := range []byte(n) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w %q: use letters, digits, '_' and '-' only", ErrName, n)
		}
	}
	return nil
}

// errno turns an error of the engine into the errno a verb returns, as the
// kernel's uverbs and rxe return them.
func errno(err error) uint32 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, verbs.ErrQueueFull), errors.Is(err, verbs.ErrNoQPN), errors.Is(err, mr.ErrTableFull),
		errors.Is(err, verbs.ErrMcastFull):
		return abi.ENOMEM
	case errors.Is(err, verbs.ErrBusy), errors.Is(err, mr.ErrPDBusy), errors.Is(err, mr.ErrBound):
		return abi.EBUSY
	case errors.Is(err, verbs.ErrClosed):
		return abi.ENODEV
	case errors.Is(err, errors.ErrUnsupported):
		return abi.EOPNOTSUPP
	}
	return abi.EINVAL
}

// nameBytes returns s as a NUL-terminated 64-byte field.
func nameBytes(s string) (b [64]byte) {
	copy(b[:63], s)
	return b
}
