package abi

// SessionPage opens the ring file. The device sets Sleeping before it
// blocks on the doorbell eventfd and clears it when it wakes; a library
// that has published work sets the work queue's doorbell bit (Dirty, then
// Summary) and, if it then reads Sleeping as 1, writes the eventfd. Both
// sides use sequentially consistent atomics, so that either the device sees
// the bit or the library sees it sleeping.
//
// Doorbell bit d is bit d%64 of Dirty[d/64], and Dirty[w] is announced by
// bit w%64 of Summary[w/64]. The device swaps a Summary word to 0, then
// each Dirty word it names.
type SessionPage struct {
	Sleeping uint32
	Version  uint32
	_        [56]byte
	Summary  [DoorbellWords / 64]uint64
	_        [64]byte
	Dirty    [DoorbellWords]uint64
}

// Doorbells is how many work queues (QPs and SRQs) a session has bits for.
const Doorbells = DoorbellWords * 64

// DoorbellWords is the length of SessionPage.Dirty.
const DoorbellWords = 1024

// SessionPageSize is the space the session page takes at the start of the
// ring file.
const SessionPageSize = 16384

// RingHeader opens every ring. The producer owns Prod, the consumer Cons,
// each on a cache line of its own. On a CQ's ring, Armed is the library's
// request for a completion event (ibv_req_notify_cq): ArmAny or
// ArmSolicited; the device swaps it back to 0 when it sends the event.
type RingHeader struct {
	Prod  uint32
	_     [60]byte
	Cons  uint32
	_     [60]byte
	Armed uint32
	_     [60]byte
	_     [64]byte
}

// RingHeaderSize is the size of RingHeader: a ring's slots start there.
const RingHeaderSize = 256

// Values of RingHeader.Armed.
const (
	ArmAny       = 1
	ArmSolicited = 2
)

// SendWQE is the fixed part of a send queue's slot; after it come NumSGE
// SGEs, or NumSGE bytes of inline data (FlagInline), or a BindInfo
// (OpBindMW). An OpAtomicWrite's 8 bytes are CompareAdd as they lie in
// memory; an OpFlush's length is CompareAdd, its placement type the low
// byte of Swap and its level the next. Opcode and Flags have ibverbs' values (ibv_wr_opcode,
// ibv_send_flags); Imm is imm_data as ibv_send_wr holds it (big-endian)
// or the key to invalidate; AH, RemoteQPN and RemoteQKey address a UD
// send.
type SendWQE struct {
	WRID       uint64 `c:"wr_id"`
	Opcode     uint32
	Flags      uint32
	Imm        uint32
	NumSGE     uint32
	RemoteAddr uint64
	RKey       uint32 `c:"rkey"`
	RemoteQPN  uint32
	CompareAdd uint64
	Swap       uint64
	AH         uint32
	RemoteQKey uint32 `c:"remote_qkey"`
}

// SendWQESize is the size of SendWQE.
const SendWQESize = 64

// SGE is a scatter/gather element (ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32 `c:"lkey"`
}

// SGESize is the size of SGE.
const SGESize = 16

// BindInfo follows a BIND_MW work request: the window and the region are
// handles; Type1 is 1 for ibv_bind_mw's bind of a type 1 window.
type BindInfo struct {
	MW     uint32
	RKey   uint32 `c:"rkey"`
	MR     uint32
	Access uint32
	Addr   uint64
	Length uint64
	Type1  uint32
	_      uint32
}

// Send flags (ibv_send_flags) the device acts on.
const (
	FlagFence     = 1 << 0
	FlagSignaled  = 1 << 1
	FlagSolicited = 1 << 2
	FlagInline    = 1 << 3
)

// Work request opcodes (ibv_wr_opcode).
const (
	OpWrite          = 0
	OpWriteImm       = 1
	OpSend           = 2
	OpSendImm        = 3
	OpRead           = 4
	OpAtomicCmpSwp   = 5
	OpAtomicFetchAdd = 6
	OpLocalInv       = 7
	OpBindMW         = 8
	OpSendInv        = 9
	OpTSO            = 10
	OpDriver1        = 11
	OpFlush          = 14
	OpAtomicWrite    = 15
)

// RecvWQE is the fixed part of a receive queue's slot; NumSGE SGEs follow.
type RecvWQE struct {
	WRID   uint64 `c:"wr_id"`
	NumSGE uint32
	_      uint32
}

// RecvWQESize is the size of RecvWQE.
const RecvWQESize = 16

// CQE is one slot of a completion queue's ring: the fields of ibv_wc (Imm
// as a number: the library stores it big-endian in imm_data, as is in
// invalidated_rkey), and which work queue it retires: Kind and Handle name
// the queue, Seq the index of the work request in it (a send queue's
// completion also retires the unsignaled requests before it).
type CQE struct {
	WRID         uint64 `c:"wr_id"`
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	Imm          uint32
	QPN          uint32
	SrcQP        uint32
	WCFlags      uint32
	PKeyIndex    uint16 `c:"pkey_index"`
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	Kind         uint8
	_            uint8
	Seq          uint32
	Handle       uint32
	_            uint64
}

// CQESize is the size of CQE.
const CQESize = 64

// Values of CQE.Kind.
const (
	KindSend = 0 // Handle is the QP's; Seq retires its send queue through this request
	KindRecv = 1 // Handle is the QP's; Seq is the receive's index in its receive queue
	KindSRQ  = 2 // Handle is the SRQ's; the completion frees one of its receives
)
