package verbs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// QPType is a queue pair's transport service.
type QPType uint8

// QP types. GSI is the general services QP, QP 1, that carries management
// datagrams (the IB CM) as UD.
const (
	RC QPType = iota + 1
	UC
	UD
	GSI
)

// String returns the type's name: RC, UC, UD or GSI.
func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	case GSI:
		return "GSI"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair's state (IBTA Vol. 1 §10.3.1).
type QPState uint8

// QP states, with the numbering of ibv_qp_state.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name: RESET, INIT, RTR, RTS, SQD, SQE or ERR.
func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// WROpcode is the operation of a send work request, numbered as
// ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes.
const (
	OpWrite          WROpcode = 0
	OpWriteImm       WROpcode = 1
	OpSend           WROpcode = 2
	OpSendImm        WROpcode = 3
	OpRead           WROpcode = 4
	OpAtomicCmpSwp   WROpcode = 5
	OpAtomicFetchAdd WROpcode = 6
	OpLocalInv       WROpcode = 7
	// OpBindMW binds a type 2 memory window (SendWR.BindMW); QP.BindMW
	// posts it for a type 1 window.
	OpBindMW  WROpcode = 8
	OpSendInv WROpcode = 9
	// OpFlush asks the peer to make the memory it names visible
	// (IBV_WR_FLUSH, IBTA 1.5's RDMA FLUSH): SendWR.Flush says which
	// placement and how much, RemoteAddr and RKey where. It carries no
	// data, and completes once the peer has placed every earlier WRITE
	// and atomic of the QP.
	OpFlush WROpcode = 14
	// OpAtomicWrite writes the 8 bytes of SendWR.CompareAdd into the
	// peer's memory at RemoteAddr in one piece (IBV_WR_ATOMIC_WRITE,
	// IBTA 1.5's ATOMIC WRITE): no reader sees half of them.
	OpAtomicWrite WROpcode = 15
)

var opcodeNames = map[WROpcode]string{
	OpWrite: "RDMA_WRITE", OpWriteImm: "RDMA_WRITE_WITH_IMM", OpSend: "SEND",
	OpSendImm: "SEND_WITH_IMM", OpRead: "RDMA_READ", OpAtomicCmpSwp: "ATOMIC_CMP_AND_SWP",
	OpAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", OpLocalInv: "LOCAL_INV", OpBindMW: "BIND_MW",
	OpSendInv: "SEND_WITH_INV", OpFlush: "FLUSH", OpAtomicWrite: "ATOMIC_WRITE",
}

// String returns the opcode's ibverbs name (RDMA_WRITE, SEND, ...).
func (o WROpcode) String() string {
	if n, ok := opcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// IsAtomic reports whether the operation is an atomic that returns the
// value it found (CMP_AND_SWP, FETCH_AND_ADD); ATOMIC_WRITE is not one.
func (o WROpcode) IsAtomic() bool { return o == OpAtomicCmpSwp || o == OpAtomicFetchAdd }

// IsRDAtomic reports whether the operation takes one of the peer's
// responder resources, and so counts against QPAttr.MaxRDAtomic: READ,
// the atomics, ATOMIC_WRITE and FLUSH.
func (o WROpcode) IsRDAtomic() bool {
	return o.NeedsResponse() || o == OpAtomicWrite || o == OpFlush
}

// NeedsResponse reports whether the operation completes on a response
// (READ, atomics) rather than an ACK.
func (o WROpcode) NeedsResponse() bool { return o == OpRead || o.IsAtomic() }

// IsLocal reports whether the operation is carried out on this side
// alone, with no packet: LOCAL_INV and BIND_MW.
func (o WROpcode) IsLocal() bool { return o == OpLocalInv || o == OpBindMW }

// IsSend reports whether the operation is a SEND of some kind.
func (o WROpcode) IsSend() bool { return o == OpSend || o == OpSendImm || o == OpSendInv }

// Valid reports whether the operation is one the verbs define.
func (o WROpcode) Valid() bool { _, ok := opcodeNames[o]; return ok }

// SendFlags modify a send work request, with the values of
// ibv_send_flags.
type SendFlags uint8

// Send flags.
const (
	// Fence waits for earlier RDMA READ and atomic operations to
	// complete before this request starts.
	Fence SendFlags = 1 << 0
	// Signaled asks for a completion even on success (always given when
	// the QP was created with SignalAll).
	Signaled SendFlags = 1 << 1
	// Solicited sets the solicited event bit on the last packet.
	Solicited SendFlags = 1 << 2
	// Inline copies the payload from SendWR.InlineData at post time.
	Inline SendFlags = 1 << 3
)

// SGE is a scatter/gather element: Length bytes at address Addr of the
// memory region with key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request, the fields of ibv_send_wr.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// InlineData is the payload of an Inline request, copied at post
	// time; SGL is then ignored.
	InlineData []byte
	// Imm is the immediate data of *_WITH_IMM, as the 32-bit number that
	// goes on the wire big-endian.
	Imm uint32
	// InvRKey is the key to invalidate: the peer's for SEND_WITH_INV, a
	// local one for LOCAL_INV (a region's, or a type 2 window's).
	InvRKey uint32
	// BindMW is what a BIND_MW request binds; the backend copies it at
	// post time.
	BindMW *BindMW
	// RemoteAddr and RKey address the peer's memory for RDMA and atomics.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap the swap value of CMP_AND_SWP. For
	// ATOMIC_WRITE, CompareAdd holds the 8 bytes to write, as this
	// host's byte order lays them out in memory (the bytes
	// ibv_wr_atomic_write's atomic_wr points to): they land in the
	// peer's memory as they are.
	CompareAdd uint64
	Swap       uint64
	// Flush is what a FLUSH asks of the peer (ibv_wr_flush's len, type
	// and level).
	Flush FlushWR
	// AH, RemoteQPN and RemoteQKey address a UD send. A Q_Key with the
	// high bit set means the QP's own Q_Key.
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// FlushWR is the part of a FLUSH work request ibv_wr_flush takes beside
// the key and the address.
type FlushWR struct {
	// Len is how many bytes from SendWR.RemoteAddr the flush covers at
	// the FlushRange level (the whole region at FlushMR).
	Len uint32
	// Type is the placement type: FlushGlobal, FlushPersistent or both.
	Type PlacementType
	// Level is the selectivity level: FlushRange or FlushMR.
	Level FlushLevel
}

// PlacementType says where a FLUSH places memory, with the values of
// ibv_placement_type (the FETH's placement type bits).
type PlacementType uint8

// Placement types.
const (
	// PlaceGlobal makes the memory visible to every reader of the
	// peer (IBV_FLUSH_GLOBAL).
	PlaceGlobal PlacementType = 1 << 0
	// PlacePersistent makes it persistent too (IBV_FLUSH_PERSISTENT).
	PlacePersistent PlacementType = 1 << 1
)

// String returns the type's ibverbs names (GLOBAL|PERSISTENT), or
// "none".
func (t PlacementType) String() string {
	var b []byte
	for i, n := range [...]string{"GLOBAL", "PERSISTENT"} {
		if t&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n...)
		}
	}
	if rest := t &^ (PlaceGlobal | PlacePersistent); rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "%#x", uint8(rest))
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// FlushLevel is how much of the memory a FLUSH names it covers, with the
// values of ibv_selectivity_level (the FETH's selectivity level).
type FlushLevel uint8

// Selectivity levels.
const (
	// FlushRange covers Len bytes from the address (IBV_FLUSH_RANGE).
	FlushRange FlushLevel = 0
	// FlushMR covers the whole region the key names (IBV_FLUSH_MR).
	FlushMR FlushLevel = 1
)

// String returns the level's ibverbs name: RANGE or MR.
func (l FlushLevel) String() string {
	switch l {
	case FlushRange:
		return "RANGE"
	case FlushMR:
		return "MR"
	}
	return fmt.Sprintf("FlushLevel(%d)", uint8(l))
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Status is a work completion's status, numbered as ibv_wc_status.
type Status uint8

// Completion statuses.
const (
	Success           Status = 0
	LocLenErr         Status = 1
	LocQPOpErr        Status = 2
	LocProtErr        Status = 4
	WRFlushErr        Status = 5
	MWBindErr         Status = 6
	BadRespErr        Status = 7
	LocAccessErr      Status = 8
	RemInvReqErr      Status = 9
	RemAccessErr      Status = 10
	RemOpErr          Status = 11
	RetryExcErr       Status = 12
	RNRRetryExcErr    Status = 13
	RemAbortErr       Status = 16
	GeneralErr        Status = 21
	statusNamesLength        = 22
)

var statusNames = [statusNamesLength]string{
	Success: "SUCCESS", LocLenErr: "LOC_LEN_ERR", LocQPOpErr: "LOC_QP_OP_ERR", 3: "LOC_EEC_OP_ERR",
	LocProtErr: "LOC_PROT_ERR", WRFlushErr: "WR_FLUSH_ERR", MWBindErr: "MW_BIND_ERR",
	BadRespErr: "BAD_RESP_ERR", LocAccessErr: "LOC_ACCESS_ERR", RemInvReqErr: "REM_INV_REQ_ERR",
	RemAccessErr: "REM_ACCESS_ERR", RemOpErr: "REM_OP_ERR", RetryExcErr: "RETRY_EXC_ERR",
	RNRRetryExcErr: "RNR_RETRY_EXC_ERR", 14: "LOC_RDD_VIOL_ERR", 15: "REM_INV_RD_REQ_ERR",
	RemAbortErr: "REM_ABORT_ERR", 17: "INV_EECN_ERR", 18: "INV_EEC_STATE_ERR", 19: "FATAL_ERR",
	20: "RESP_TIMEOUT_ERR", GeneralErr: "GENERAL_ERR",
}

// String returns the status's ibverbs name (SUCCESS, WR_FLUSH_ERR, ...).
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// WCOpcode is what a completion completed, numbered as ibv_wc_opcode.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend           WCOpcode = 0
	WCWrite          WCOpcode = 1
	WCRead           WCOpcode = 2
	WCCompSwap       WCOpcode = 3
	WCFetchAdd       WCOpcode = 4
	WCBindMW         WCOpcode = 5
	WCLocalInv       WCOpcode = 6
	WCFlush          WCOpcode = 8
	WCAtomicWrite    WCOpcode = 9
	WCRecv           WCOpcode = 128
	WCRecvRDMAWithIm WCOpcode = 129
)

// String returns the completion opcode's ibverbs name (SEND, RECV, ...).
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCWrite:
		return "RDMA_WRITE"
	case WCRead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCFlush:
		return "FLUSH"
	case WCAtomicWrite:
		return "ATOMIC_WRITE"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithIm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags describe a completion, with the values of ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	WithGRH WCFlags = 1 << 0
	WithImm WCFlags = 1 << 1
	WithInv WCFlags = 1 << 3
)

// WC is a work completion, the fields of ibv_wc.
type WC struct {
	ID        uint64
	Status    Status
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// Imm is the immediate data (WithImm), or the invalidated key
	// (WithInv).
	Imm   uint32
	QPN   uint32
	SrcQP uint32
	Flags WCFlags
	// PKeyIndex, SLID, SL and DLIDPathBits are as ibverbs has them; on
	// RoCE they are 0 but for the P_Key index.
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// String prints the completion's fields with ibv_wc's names.
func (w *WC) String() string {
	if w == nil {
		return "<nil>"
	}
	return fmt.Sprintf("wr_id=%d status=%s opcode=%s byte_len=%d qp_num=%d src_qp=%d flags=%#x imm=%#x",
		w.ID, w.Status, w.Opcode, w.ByteLen, w.QPN, w.SrcQP, uint8(w.Flags), w.Imm)
}

// QPCap holds a queue pair's queue sizes.
type QPCap struct {
	MaxSendWR, MaxRecvWR   uint32
	MaxSendSGE, MaxRecvSGE uint32
	MaxInlineData          uint32
}

// MaxMsgSize is the largest message RoCE carries (2^31 bytes).
const MaxMsgSize = 1 << 31

// QPInitAttr holds what a queue pair is created with (ibv_qp_init_attr).
// The CQs and the SRQ must come from the same device as the PD.
type QPInitAttr struct {
	Type   QPType
	SendCQ CQ
	RecvCQ CQ
	SRQ    SRQ // nil: the QP has its own receive queue
	Cap    QPCap
	// SignalAll generates a completion for every send request, signaled
	// or not (sq_sig_all).
	SignalAll bool
}

// AHAttr is an address vector: where a path leads (ibv_ah_attr with its
// GRH, for RoCE).
type AHAttr struct {
	// DGID is the destination GID; for RoCEv2 an IPv6 address or an
	// IPv4-mapped one.
	DGID         [16]byte
	SGIDIndex    uint8
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	Port         uint8
}

// DestAddr returns the IP address of the destination GID (AddrFromGID).
func (a AHAttr) DestAddr() netip.Addr { return AddrFromGID(a.DGID) }

// GIDFromAddr returns the RoCEv2 GID of an IP address: an IPv6 address as
// is, an IPv4 address as the IPv4-mapped IPv6 address ::ffff:a.b.c.d (the
// form rxe and every RoCEv2 device use). A zone is dropped; the zero Addr
// gives the zero GID.
func GIDFromAddr(a netip.Addr) [16]byte { return a.As16() }

// AddrFromGID returns the IP address of a RoCEv2 GID: an IPv4-mapped GID
// (::ffff:a.b.c.d) as the IPv4 address a.b.c.d, any other as an IPv6
// address.
func AddrFromGID(gid [16]byte) netip.Addr { return netip.AddrFrom16(gid).Unmap() }

// QPAttr holds a queue pair's attributes (ibv_qp_attr).
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         bth.MTU
	QKey            uint32
	RQPSN           bth.PSN
	SQPSN           bth.PSN
	DestQPN         uint32
	Access          Access // remote operations the QP accepts
	PKeyIndex       uint16
	Port            uint8
	AH              AHAttr
	Timeout         uint8 // local ACK timeout, 4.096 µs × 2^Timeout
	RetryCnt        uint8 // retries after a timeout or a sequence NAK (7 is seven; rxe's 7 is without end)
	RNRRetry        uint8 // retries after an RNR NAK; 7 means without end
	MinRNRTimer     uint8
	MaxRDAtomic     uint8 // outstanding READ and atomic requests as requester
	MaxDestRDAtomic uint8 // as responder
	SQDrainNotify   bool
	Cap             QPCap // read-only: returned by Query
}

// AttrMask says which fields of QPAttr a Modify sets, with the values of
// ibv_qp_attr_mask.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState           AttrMask = 1 << 0
	AttrCurState        AttrMask = 1 << 1
	AttrEnSQDAsyncNotfy AttrMask = 1 << 2
	AttrAccessFlags     AttrMask = 1 << 3
	AttrPKeyIndex       AttrMask = 1 << 4
	AttrPort            AttrMask = 1 << 5
	AttrQKey            AttrMask = 1 << 6
	AttrAV              AttrMask = 1 << 7
	AttrPathMTU         AttrMask = 1 << 8
	AttrTimeout         AttrMask = 1 << 9
	AttrRetryCnt        AttrMask = 1 << 10
	AttrRNRRetry        AttrMask = 1 << 11
	AttrRQPSN           AttrMask = 1 << 12
	AttrMaxQPRDAtomic   AttrMask = 1 << 13
	AttrAltPath         AttrMask = 1 << 14
	AttrMinRNRTimer     AttrMask = 1 << 15
	AttrSQPSN           AttrMask = 1 << 16
	AttrMaxDestRDAtomic AttrMask = 1 << 17
	AttrPathMigState    AttrMask = 1 << 18
	AttrCap             AttrMask = 1 << 19
	AttrDestQPN         AttrMask = 1 << 20
)

var attrNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC",
	"ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the mask's bits by their ibverbs names, joined by |.
func (m AttrMask) String() string {
	var b []byte
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n...)
		}
	}
	if len(b) == 0 {
		return "0"
	}
	return string(b)
}

// Errors returned by the verbs. Remote errors and flushed requests are
// completion statuses, not errors.
var (
	ErrInvalidTransition = errors.New("verbs: invalid state transition")
	ErrMissingAttr       = errors.New("verbs: required attribute missing")
	ErrExtraAttr         = errors.New("verbs: attribute not allowed in this transition")
	ErrInvalidAttr       = errors.New("verbs: invalid attribute value")
	ErrInvalidState      = errors.New("verbs: operation not allowed in this QP state")
	ErrQueueFull         = errors.New("verbs: work queue full")
	ErrInvalidWR         = errors.New("verbs: invalid work request")
	ErrTooManySGE        = errors.New("verbs: too many scatter/gather elements")
	ErrInlineTooLong     = errors.New("verbs: inline data too long")
	ErrHasSRQ            = errors.New("verbs: QP uses a shared receive queue")
	ErrInvalidCap        = errors.New("verbs: queue size or capability out of range")
	ErrDestroyed         = errors.New("verbs: object destroyed")
	ErrBusy              = errors.New("verbs: object in use")
	// ErrClosed means the device was closed. It matches net.ErrClosed,
	// as a closed net.Conn's errors do (and cm.ErrClosed, a closed
	// connection manager): errors.Is(err, net.ErrClosed) is the one check
	// for "closed on this side" across goroce.
	ErrClosed    = fmt.Errorf("verbs: device closed (%w)", net.ErrClosed)
	ErrNoQPN     = errors.New("verbs: no free QP number")
	ErrGSIExists = errors.New("verbs: the device already has a GSI QP")
	ErrForeign   = errors.New("verbs: object belongs to another device or backend")
	// ErrMcastFull means the device has no room for another multicast
	// group, or the group for another QP (its max_mcast_grp,
	// max_mcast_qp_attach or max_total_mcast_qp_attach; ENOMEM from
	// ibv_attach_mcast).
	ErrMcastFull = errors.New("verbs: multicast groups or attachments at the device's limit")
	// ErrNil means a required argument is nil, or a method was called on
	// a nil object (or on a zero value its constructor did not make).
	ErrNil = errors.New("verbs: nil argument")
)

// PostError reports the first work request a post refused. Requests
// before it were posted; it and those after were not (ibv_post_send's
// bad_wr).
type PostError struct {
	Index int
	Err   error
}

// Error names the refused request and why it was refused.
func (e *PostError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("work request %d: %v", e.Index, e.Err)
}

// Unwrap returns the reason the request was refused.
func (e *PostError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// EventType is the kind of an asynchronous event.
type EventType uint8

// Asynchronous events, as ibv_event_type names them. Each names its
// object in Event: the CQ, the QP's number, or the SRQ.
const (
	// EventCQErr: a completion found its CQ full and was lost.
	EventCQErr EventType = iota + 1
	// EventQPFatal: the QP went to ERR for an error of its own: a
	// completion it could not deliver, a receive it could not use.
	EventQPFatal
	// EventQPReqErr: the QP, as responder, received an invalid request
	// (NAKed as such) and went to ERR.
	EventQPReqErr
	// EventQPAccessErr: the QP, as responder, received a request for
	// memory it may not access (NAKed as a remote access error) and went
	// to ERR.
	EventQPAccessErr
	// EventCommEstablished: the first request reached a QP in RTR.
	EventCommEstablished
	// EventSQDrained: a QP in SQD asked to be told has nothing in flight.
	EventSQDrained
	// EventLastWQEReached: a QP on an SRQ went to ERR; it takes no more
	// receives from the SRQ.
	EventLastWQEReached
	// EventSRQLimitReached: an SRQ fell below the limit it was armed with.
	EventSRQLimitReached
)

// String returns the event's ibverbs name (CQ_ERR, COMM_EST, ...).
func (t EventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventQPReqErr:
		return "QP_REQ_ERR"
	case EventQPAccessErr:
		return "QP_ACCESS_ERR"
	case EventCommEstablished:
		return "COMM_EST"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	}
	return "UNKNOWN"
}

// Event is an asynchronous event; the field for its kind of object is set.
type Event struct {
	Type EventType
	QPN  uint32
	CQ   CQ
	SRQ  SRQ
}

// SRQAttr holds a shared receive queue's sizes and limit (ibv_srq_attr).
type SRQAttr struct {
	MaxWR  uint32
	MaxSGE uint32
	// Limit arms the SRQ limit event: when fewer receives than Limit
	// remain, the device reports EventSRQLimitReached once.
	Limit uint32
}
