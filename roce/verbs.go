// Re-exports of package verbs, so that programs need import only roce.
// TestReexports checks that every exported name of verbs is here.

package roce

import (
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// The verbs vocabulary.
type (
	QPType     = verbs.QPType
	QPState    = verbs.QPState
	MTU        = verbs.MTU
	WROpcode   = verbs.WROpcode
	SendFlags  = verbs.SendFlags
	SGE        = verbs.SGE
	SendWR     = verbs.SendWR
	RecvWR     = verbs.RecvWR
	Status     = verbs.Status
	WCOpcode   = verbs.WCOpcode
	WCFlags    = verbs.WCFlags
	WC         = verbs.WC
	QPCap      = verbs.QPCap
	QPInitAttr = verbs.QPInitAttr
	AHAttr     = verbs.AHAttr
	QPAttr     = verbs.QPAttr
	AttrMask   = verbs.AttrMask
	PostError  = verbs.PostError
	EventType  = verbs.EventType
	Event      = verbs.Event
	SRQAttr    = verbs.SRQAttr
	Access     = verbs.Access
	Device     = verbs.Device
	PD         = verbs.PD
	MR         = verbs.MR
	CQ         = verbs.CQ
	QP         = verbs.QP
	SRQ        = verbs.SRQ
	AH         = verbs.AH
)

// Constants of the verbs vocabulary.
const (
	RC                   = verbs.RC
	UC                   = verbs.UC
	UD                   = verbs.UD
	GSI                  = verbs.GSI
	StateReset           = verbs.StateReset
	StateInit            = verbs.StateInit
	StateRTR             = verbs.StateRTR
	StateRTS             = verbs.StateRTS
	StateSQD             = verbs.StateSQD
	StateSQE             = verbs.StateSQE
	StateErr             = verbs.StateErr
	MTU256               = verbs.MTU256
	MTU512               = verbs.MTU512
	MTU1024              = verbs.MTU1024
	MTU2048              = verbs.MTU2048
	MTU4096              = verbs.MTU4096
	OpWrite              = verbs.OpWrite
	OpWriteImm           = verbs.OpWriteImm
	OpSend               = verbs.OpSend
	OpSendImm            = verbs.OpSendImm
	OpRead               = verbs.OpRead
	OpAtomicCmpSwp       = verbs.OpAtomicCmpSwp
	OpAtomicFetchAdd     = verbs.OpAtomicFetchAdd
	OpLocalInv           = verbs.OpLocalInv
	OpSendInv            = verbs.OpSendInv
	Fence                = verbs.Fence
	Signaled             = verbs.Signaled
	Solicited            = verbs.Solicited
	Inline               = verbs.Inline
	Success              = verbs.Success
	LocLenErr            = verbs.LocLenErr
	LocQPOpErr           = verbs.LocQPOpErr
	LocProtErr           = verbs.LocProtErr
	WRFlushErr           = verbs.WRFlushErr
	MWBindErr            = verbs.MWBindErr
	BadRespErr           = verbs.BadRespErr
	LocAccessErr         = verbs.LocAccessErr
	RemInvReqErr         = verbs.RemInvReqErr
	RemAccessErr         = verbs.RemAccessErr
	RemOpErr             = verbs.RemOpErr
	RetryExcErr          = verbs.RetryExcErr
	RNRRetryExcErr       = verbs.RNRRetryExcErr
	RemAbortErr          = verbs.RemAbortErr
	GeneralErr           = verbs.GeneralErr
	WCSend               = verbs.WCSend
	WCWrite              = verbs.WCWrite
	WCRead               = verbs.WCRead
	WCCompSwap           = verbs.WCCompSwap
	WCFetchAdd           = verbs.WCFetchAdd
	WCBindMW             = verbs.WCBindMW
	WCLocalInv           = verbs.WCLocalInv
	WCRecv               = verbs.WCRecv
	WCRecvRDMAWithIm     = verbs.WCRecvRDMAWithIm
	WithGRH              = verbs.WithGRH
	WithImm              = verbs.WithImm
	WithInv              = verbs.WithInv
	AttrState            = verbs.AttrState
	AttrCurState         = verbs.AttrCurState
	AttrEnSQDAsyncNotfy  = verbs.AttrEnSQDAsyncNotfy
	AttrAccessFlags      = verbs.AttrAccessFlags
	AttrPKeyIndex        = verbs.AttrPKeyIndex
	AttrPort             = verbs.AttrPort
	AttrQKey             = verbs.AttrQKey
	AttrAV               = verbs.AttrAV
	AttrPathMTU          = verbs.AttrPathMTU
	AttrTimeout          = verbs.AttrTimeout
	AttrRetryCnt         = verbs.AttrRetryCnt
	AttrRNRRetry         = verbs.AttrRNRRetry
	AttrRQPSN            = verbs.AttrRQPSN
	AttrMaxQPRDAtomic    = verbs.AttrMaxQPRDAtomic
	AttrAltPath          = verbs.AttrAltPath
	AttrMinRNRTimer      = verbs.AttrMinRNRTimer
	AttrSQPSN            = verbs.AttrSQPSN
	AttrMaxDestRDAtomic  = verbs.AttrMaxDestRDAtomic
	AttrPathMigState     = verbs.AttrPathMigState
	AttrCap              = verbs.AttrCap
	AttrDestQPN          = verbs.AttrDestQPN
	EventCQErr           = verbs.EventCQErr
	EventQPFatal         = verbs.EventQPFatal
	EventQPReqErr        = verbs.EventQPReqErr
	EventQPAccessErr     = verbs.EventQPAccessErr
	EventCommEstablished = verbs.EventCommEstablished
	EventSQDrained       = verbs.EventSQDrained
	EventLastWQEReached  = verbs.EventLastWQEReached
	EventSRQLimitReached = verbs.EventSRQLimitReached
	LocalWrite           = verbs.LocalWrite
	RemoteWrite          = verbs.RemoteWrite
	RemoteRead           = verbs.RemoteRead
	RemoteAtomic         = verbs.RemoteAtomic
	RemoteAccess         = verbs.RemoteAccess
	KnownAccess          = verbs.KnownAccess
	MaxMsgSize           = verbs.MaxMsgSize
	DefaultQKey          = verbs.DefaultQKey
)

// Errors of the verbs vocabulary.
var (
	ErrInvalidTransition = verbs.ErrInvalidTransition
	ErrMissingAttr       = verbs.ErrMissingAttr
	ErrExtraAttr         = verbs.ErrExtraAttr
	ErrInvalidAttr       = verbs.ErrInvalidAttr
	ErrInvalidState      = verbs.ErrInvalidState
	ErrQueueFull         = verbs.ErrQueueFull
	ErrInvalidWR         = verbs.ErrInvalidWR
	ErrTooManySGE        = verbs.ErrTooManySGE
	ErrInlineTooLong     = verbs.ErrInlineTooLong
	ErrHasSRQ            = verbs.ErrHasSRQ
	ErrInvalidCap        = verbs.ErrInvalidCap
	ErrDestroyed         = verbs.ErrDestroyed
	ErrBusy              = verbs.ErrBusy
	ErrClosed            = verbs.ErrClosed
	ErrNoQPN             = verbs.ErrNoQPN
	ErrGSIExists         = verbs.ErrGSIExists
	ErrForeign           = verbs.ErrForeign
	ErrNil               = verbs.ErrNil
)

// MTUFromBytes returns the largest MTU not above n bytes, and false when
// n is below 256.
func MTUFromBytes(n int) (MTU, bool) { return verbs.MTUFromBytes(n) }

// GIDFromAddr returns the RoCEv2 GID of an IP address: the address itself
// for IPv6, the IPv4-mapped address for IPv4.
func GIDFromAddr(a netip.Addr) [16]byte { return verbs.GIDFromAddr(a) }

// CheckModify checks a QP modification's attribute mask by the rules of
// ibv_modify_qp (verbs.CheckModify).
func CheckModify(typ QPType, cur, next QPState, mask AttrMask) error {
	return verbs.CheckModify(typ, cur, next, mask)
}

// CheckSendOp reports whether a QP of type typ takes send opcode op
// (verbs.CheckSendOp).
func CheckSendOp(typ QPType, op WROpcode) error { return verbs.CheckSendOp(typ, op) }
