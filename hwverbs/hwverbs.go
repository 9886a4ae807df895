package hwverbs

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Interface checks: every object implements its verbs interface, in both
// builds.
var (
	_ verbs.Device = (*Device)(nil)
	_ verbs.PD     = (*PD)(nil)
	_ verbs.MR     = (*MR)(nil)
	_ verbs.CQ     = (*CQ)(nil)
	_ verbs.QP     = (*QP)(nil)
	_ verbs.SRQ    = (*SRQ)(nil)
	_ verbs.AH     = (*AH)(nil)
	_ verbs.MW     = (*MW)(nil)
)

// Config says how Open sets a device up. A nil *Config, or a zero field,
// means the default. Open copies it: it is a plain value, safe for
// concurrent use.
type Config struct {
	// Port is the port number; default 1.
	Port uint8
	// GIDIndex, when above 0, is the GID table index to use.
	GIDIndex int
	// GIDAddr, when valid and GIDIndex is 0, selects the GID table entry
	// that holds this address (IPv4 or IPv6), as rdma_cm selects one for
	// a bound address.
	GIDAddr netip.Addr
	// Logger receives state changes at Debug level and dropped events at
	// Warn; nil discards.
	Logger *slog.Logger
}

// Errors of Open.
var (
	// ErrNotBuilt means the program was built without the libibverbs
	// backend.
	ErrNotBuilt = errors.New("hwverbs: built without libibverbs support: " +
		"install libibverbs-dev and rdma-core (Debian/Ubuntu: apt-get install libibverbs-dev rdma-core), " +
		"then build with cgo enabled and `go build -tags hwverbs`")
	// ErrNoDevice means libibverbs found no RDMA device, or none of the
	// requested name.
	ErrNoDevice = errors.New("hwverbs: no RDMA device: install rdma-core and the provider library " +
		"(ibverbs-providers), load the device's driver, or create a soft-RoCE device with " +
		"`rdma link add rxe0 type rxe netdev eth0`")
	// ErrNoGID means the port has no usable GID (no IP address on the
	// interface, or none matching Config).
	ErrNoGID = errors.New("hwverbs: no usable GID on the port")
	// ErrUnsupported means the operation exists in goroce's verbs but not
	// through libibverbs (a GSI QP, which the kernel owns), or not on
	// this device or library (FLUSH and ATOMIC_WRITE where the device has
	// no capability bit for them, or libibverbs no ibv_wr_* builder).
	ErrUnsupported = errors.New("hwverbs: not supported through libibverbs")
)

// Error is a failed libibverbs call. It wraps the errno and, where one
// fits, the verbs sentinel error, so that errors.Is matches either. It is
// not modified once returned, so it is safe for concurrent use.
type Error struct {
	// Op is the libibverbs function, such as "ibv_modify_qp".
	Op string
	// Errno is what the call returned or left in errno.
	Errno syscall.Errno
	// Kind is the verbs sentinel error the errno means here, or nil.
	Kind error
	// Detail says more, when hwverbs knows more (may be empty).
	Detail string
}

// Error says which call failed, what that means, and the errno.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	s := "hwverbs: " + e.Op + ": "
	if e.Kind != nil {
		s += e.Kind.Error() + " (" + e.Errno.Error() + ")"
	} else {
		s += e.Errno.Error()
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel error, if any, and the errno.
func (e *Error) Unwrap() []error {
	if e == nil {
		return nil
	}
	if e.Kind != nil {
		return []error{e.Kind, e.Errno}
	}
	return []error{e.Errno}
}

// errKinds maps errnos to the verbs sentinel errors, per libibverbs call.
var errKinds = map[string]map[syscall.Errno]error{
	"ibv_post_send":       {syscall.ENOMEM: verbs.ErrQueueFull, syscall.EINVAL: verbs.ErrInvalidWR},
	"ibv_post_recv":       {syscall.ENOMEM: verbs.ErrQueueFull, syscall.EINVAL: verbs.ErrInvalidWR},
	"ibv_post_srq_recv":   {syscall.ENOMEM: verbs.ErrQueueFull, syscall.EINVAL: verbs.ErrInvalidWR},
	"ibv_create_qp":       {syscall.EINVAL: verbs.ErrInvalidCap},
	"ibv_create_cq":       {syscall.EINVAL: verbs.ErrInvalidCap},
	"ibv_create_srq":      {syscall.EINVAL: verbs.ErrInvalidCap},
	"ibv_create_ah":       {syscall.EINVAL: verbs.ErrInvalidAttr},
	"ibv_reg_mr":          {syscall.EINVAL: verbs.ErrInvalidAttr},
	"ibv_modify_qp":       {syscall.EINVAL: verbs.ErrInvalidAttr},
	"ibv_modify_srq":      {syscall.EINVAL: verbs.ErrInvalidAttr},
	"ibv_dealloc_pd":      {syscall.EBUSY: verbs.ErrBusy},
	"ibv_destroy_cq":      {syscall.EBUSY: verbs.ErrBusy},
	"ibv_destroy_srq":     {syscall.EBUSY: verbs.ErrBusy},
	"ibv_destroy_qp":      {syscall.EBUSY: verbs.ErrBusy},
	"ibv_destroy_ah":      {syscall.EBUSY: verbs.ErrBusy},
	"ibv_dereg_mr":        {syscall.EBUSY: verbs.ErrBusy, syscall.EINVAL: verbs.ErrBusy}, // rxe: EINVAL while windows are bound
	"ibv_alloc_mw":        {syscall.EINVAL: verbs.ErrInvalidAttr, syscall.EOPNOTSUPP: ErrUnsupported},
	"ibv_dealloc_mw":      {syscall.EBUSY: verbs.ErrBusy},
	"ibv_wr_complete":     {syscall.ENOMEM: verbs.ErrQueueFull, syscall.EINVAL: verbs.ErrInvalidWR, syscall.EOPNOTSUPP: ErrUnsupported},
	"ibv_bind_mw":         {syscall.ENOMEM: verbs.ErrQueueFull, syscall.EINVAL: verbs.ErrInvalidWR, syscall.EPERM: verbs.ErrInvalidWR},
	"ibv_query_gid":       {syscall.EINVAL: verbs.ErrInvalidAttr, syscall.ENODATA: verbs.ErrInvalidAttr},
	"ibv_attach_mcast":    {syscall.EINVAL: verbs.ErrInvalidAttr, syscall.ENOMEM: verbs.ErrMcastFull, syscall.EOPNOTSUPP: ErrUnsupported},
	"ibv_detach_mcast":    {syscall.EINVAL: verbs.ErrInvalidAttr, syscall.EOPNOTSUPP: ErrUnsupported},
	"ibv_req_notify_cq":   {},
	"ibv_get_async_event": {},
}

// errnoError returns the *Error of a failed call. A negative errno (some
// providers return -errno) is taken as positive; 0 becomes EIO, since the
// call failed without saying why.
func errnoError(op string, errno syscall.Errno) *Error {
	if int(errno) < 0 {
		errno = -errno
	}
	if errno == 0 {
		errno = syscall.EIO
	}
	return &Error{Op: op, Errno: errno, Kind: errKinds[op][errno]}
}

// gidEntry is one GID table entry as Open reads it.
type gidEntry struct {
	index int
	gid   [16]byte
	roce2 bool // RoCE v2 (IP/UDP) rather than v1 or IB
}

// chooseGID returns the table index of the GID to use: the one c names,
// else the first IPv4-mapped entry, preferring RoCE v2 (perftest's
// choice, which rdma-core's tools and rxe's IPv4 setups share).
func chooseGID(entries []gidEntry, c *Config) (int, error) {
	switch {
	case c.GIDIndex > 0:
		for _, e := range entries {
			if e.index == c.GIDIndex {
				return e.index, nil
			}
		}
		return 0, fmt.Errorf("%w: index %d is empty or out of range", ErrNoGID, c.GIDIndex)
	case c.GIDAddr.IsValid():
		want := verbs.GIDFromAddr(c.GIDAddr)
		for _, e := range entries {
			if e.gid == want {
				return e.index, nil
			}
		}
		return 0, fmt.Errorf("%w: no entry holds %v", ErrNoGID, c.GIDAddr)
	}
	best, bestScore := -1, -1
	for _, e := range entries {
		if e.gid == ([16]byte{}) {
			continue
		}
		score := 0
		if netip.AddrFrom16(e.gid).Is4In6() {
			score += 2
		}
		if e.roce2 {
			score++
		}
		if score > bestScore {
			best, bestScore = e.index, score
		}
	}
	if best < 0 {
		return 0, ErrNoGID
	}
	return best, nil
}

// tableIndex maps a GID index of goroce's verbs to the port's table:
// 0 is the device's chosen entry, any other index is itself.
func tableIndex(verbsIndex, chosen int) int {
	if verbsIndex == 0 {
		return chosen
	}
	return verbsIndex
}

// verbsIndex maps a table index back: the chosen entry is 0.
func verbsIndex(table, chosen int) int {
	if table == chosen {
		return 0
	}
	return table
}

// classifyModify explains why the device refused a modification with
// EINVAL, when the transition table can: an invalid transition, or a
// required attribute missing, or one the transition does not take. It
// returns nil when the mask is right, so the value itself was refused.
func classifyModify(typ verbs.QPType, cur, next verbs.QPState, mask verbs.AttrMask) error {
	if next == verbs.StateReset || next == verbs.StateErr {
		return nil // allowed from any state, with no attributes to check
	}
	return verbs.CheckModify(typ, cur, next, mask)
}

// checkSendOp reports whether a QP of type typ takes opcode op.
func checkSendOp(typ verbs.QPType, op verbs.WROpcode) error { return verbs.CheckSendOp(typ, op) }

// isFlushOrAtomicWrite reports whether op goes through the ibv_wr_* API:
// FLUSH and ATOMIC_WRITE, which ibv_post_send has no fields for.
func isFlushOrAtomicWrite(op verbs.WROpcode) bool {
	return op == verbs.OpFlush || op == verbs.OpAtomicWrite
}

// exOps returns the GR_QP_EX_WITH_* bits (IBV_QP_EX_WITH_FLUSH 1 << 11,
// IBV_QP_EX_WITH_ATOMIC_WRITE 1 << 12) to ask of an RC QP on a device
// with caps: the operations the device says it has.
func exOps(typ verbs.QPType, caps verbs.DeviceCap) uint32 {
	var ops uint32
	if typ != verbs.RC {
		return 0
	}
	if caps&(verbs.CapFlushGlobal|verbs.CapFlushPersistent) != 0 {
		ops |= exWithFlush
	}
	if caps&verbs.CapAtomicWrite != 0 {
		ops |= exWithAtomicWrite
	}
	return ops
}

const (
	exWithFlush       = 1 << 11
	exWithAtomicWrite = 1 << 12
)

// checkExWR checks a FLUSH or ATOMIC_WRITE before it is posted on a QP
// whose ibv_wr_* API has the operations in ops: no SGEs or inline data
// (ATOMIC_WRITE's 8 bytes are SendWR.CompareAdd, copied at post time as
// ibv_wr_atomic_write copies them), a FLUSH's type and level as the IBTA
// defines them, and an operation the QP was made with.
func checkExWR(wr *verbs.SendWR, ops uint32) error {
	if len(wr.SGL) != 0 || wr.Flags&verbs.Inline != 0 {
		return fmt.Errorf("%w: %v takes no SGEs and no inline data", verbs.ErrInvalidWR, wr.Opcode)
	}
	need, what := uint32(exWithAtomicWrite), "ATOMIC_WRITE (IBV_DEVICE_ATOMIC_WRITE)"
	if wr.Opcode == verbs.OpFlush {
		if wr.Flush.Type&^(verbs.PlaceGlobal|verbs.PlacePersistent) != 0 || wr.Flush.Level > verbs.FlushMR {
			return fmt.Errorf("%w: FLUSH of placement type %v at level %v: use PlaceGlobal or PlacePersistent, "+
				"FlushRange or FlushMR", verbs.ErrInvalidWR, wr.Flush.Type, wr.Flush.Level)
		}
		need, what = exWithFlush, "FLUSH (IBV_DEVICE_FLUSH_GLOBAL or _PERSISTENT)"
	}
	if ops&need == 0 {
		return fmt.Errorf("%w: the device or its libibverbs has no %s: it needs kernel 6.2's rxe or a NIC "+
			"that has it, and rdma-core 45 or later (verbs.CapsOf says what the device has): %w",
			ErrUnsupported, what, syscall.EOPNOTSUPP)
	}
	return nil
}

// errNilKind is the sentinel the errors of nil and zero receivers and
// arguments wrap, verbs.ErrNil as in the pure-Go backend.
var errNilKind = verbs.ErrNil

// checkQPInit checks what PD.CreateQP needs of init before the device
// sees it.
func checkQPInit(init *verbs.QPInitAttr) error {
	switch {
	case init == nil:
		return fmt.Errorf("%w: hwverbs: CreateQP of a nil *QPInitAttr: give the QP's type, CQs and capabilities", errNilKind)
	case init.SendCQ == nil:
		return fmt.Errorf("%w: hwverbs: QPInitAttr.SendCQ is missing: create one with Device.CreateCQ", errNilKind)
	case init.RecvCQ == nil:
		return fmt.Errorf("%w: hwverbs: QPInitAttr.RecvCQ is missing: create one with Device.CreateCQ (it may be the SendCQ)", errNilKind)
	}
	return nil
}

// checkModify checks what QP.Modify needs of attr and mask before the
// device sees them.
func checkModify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	switch {
	case attr == nil:
		return fmt.Errorf("%w: hwverbs: Modify with a nil *QPAttr: give the attributes the mask names", errNilKind)
	case mask&verbs.AttrRQPSN != 0 && !attr.RQPSN.Valid() || mask&verbs.AttrSQPSN != 0 && !attr.SQPSN.Valid():
		return fmt.Errorf("%w: PSN beyond 24 bits", verbs.ErrInvalidAttr)
	case mask&verbs.AttrDestQPN != 0 && attr.DestQPN > bth.MaxQPN:
		return fmt.Errorf("%w: dest QPN %#x", verbs.ErrInvalidAttr, attr.DestQPN)
	}
	return nil
}

// checkRegMR checks what PD.RegMR needs of buf and access.
func checkRegMR(buf []byte, access verbs.Access) error {
	if len(buf) == 0 {
		return fmt.Errorf("%w: hwverbs: RegMR of an empty buffer: libibverbs registers no zero-length region; register 1 byte or more", verbs.ErrInvalidAttr)
	}
	if access&^verbs.KnownAccess != 0 {
		return fmt.Errorf("%w: access %v", verbs.ErrInvalidAttr, access)
	}
	return nil
}

// checkAH checks what PD.CreateAH needs of attr.
func checkAH(attr *verbs.AHAttr) error {
	if attr.DGID == ([16]byte{}) {
		return fmt.Errorf("%w: hwverbs: the address handle's DGID is zero: give the destination's GID (verbs.GIDFromAddr)", verbs.ErrInvalidAttr)
	}
	return nil
}

// eventType maps an ibv_event_type to goroce's; ok is false for the
// events goroce does not name (port, GID and device events).
func eventType(ibv int) (verbs.EventType, bool) {
	switch ibv {
	case 0:
		return verbs.EventCQErr, true
	case 1:
		return verbs.EventQPFatal, true
	case 2:
		return verbs.EventQPReqErr, true
	case 3:
		return verbs.EventQPAccessErr, true
	case 4:
		return verbs.EventCommEstablished, true
	case 5:
		return verbs.EventSQDrained, true
	case 15:
		return verbs.EventSRQLimitReached, true
	case 16:
		return verbs.EventLastWQEReached, true
	}
	return 0, false
}
