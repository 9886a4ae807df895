// Package abi is the contract between goroce's soft RDMA device (package
// uverbs, run by `roce device`) and the C library that programs load to
// reach it (libgoroce, which implements the libibverbs ABI): the messages
// of the control socket, the layout of the rings in shared memory, and the
// error numbers. It is named after the kernel's uverbs ABI, which plays
// the same part between libibverbs and an RDMA driver.
//
// Both sides run on one host, so every layout is the host's: fixed-size
// fields in native byte order, naturally aligned, with explicit padding.
// The Go structs here are the definition; CHeader writes the C header the
// library is built with (go generate writes libgoroce/src/goroce_abi.h),
// and a test keeps the two the same.
//
// # The control socket
//
// A device listens on a Unix SOCK_SEQPACKET socket, <dir>/<name>.sock (see
// SocketDir). A program's library connects once per ibv_open_device and
// keeps the connection for the context's life: the device ends the
// session, and frees everything it holds, when the connection closes or
// the process exits. Each request is one packet: a Header, then the
// operation's request struct; each answer one packet: a Reply, then the
// operation's reply struct when Reply.Errno is 0. File descriptors travel
// as SCM_RIGHTS with Hello (program memory, doorbell, async events) and
// CreateCompChannel (the channel's write end), and come back with Hello's
// reply (the rings).
//
// # Shared memory
//
// The program's registered memory is shared with the device through one
// memfd per session whose file offset is the virtual address: the library
// maps the pages of every region it registers from that file at their own
// address (MAP_FIXED, after copying what they held), and the device maps
// the same file range. The file is sealed against shrinking, so the device
// never faults on it.
//
// The rings live in a second memfd, the device's: a session page at offset
// 0 (SessionPage), then one ring per send queue, receive queue, shared
// receive queue and completion queue, each a RingHeader followed by its
// slots. Indices are free-running uint32 counters; a slot is the index
// modulo the ring's entries, a power of two. The library produces work
// requests (SendWQE, RecvWQE) and the device consumes them; the device
// produces completions (CQE) and the library consumes them. Whatever the
// device reads from shared memory it copies first and checks after: a
// program can change it at any moment.
package abi

// Version is the ABI version Hello carries; a device refuses another.
const Version = 1

// DefaultRoot is the directory of devices' sockets when GOROCE_DIR is not
// set: /tmp/goroce-UID, made by the device with mode 0700 (SocketDir).
const DefaultRoot = "/tmp/goroce-"

// Op is a control operation.
type Op uint32

// Control operations. Each names its request and reply structs: Hello
// takes HelloReq and answers HelloReply, and so on; an operation with no
// reply struct answers the Reply alone.
const (
	OpHello Op = iota + 1
	OpQueryPort
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpReregMR
	OpDeregMR
	OpAllocMW
	OpDeallocMW
	OpCreateCompChannel
	OpDestroyCompChannel
	OpCreateCQ
	OpResizeCQ
	OpDestroyCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCreateSRQ
	OpModifySRQ
	OpQuerySRQ
	OpDestroySRQ
	OpCreateAH
	OpDestroyAH
	OpAttachMcast
	OpDetachMcast
	// OpInfo answers a HelloReply without opening a session (and with no
	// descriptor): what ibv_get_device_list learns of each device.
	OpInfo
	// The connection manager (librdmacm's rdma_cm; cm.go has the
	// messages).
	OpCMRegisterChannel
	OpCMUnregisterChannel
	OpCMCreateID
	OpCMDestroyID
	OpCMBind
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMListen
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMDisconnect
	OpCMEstablish
	OpCMMigrate
	OpCMQuery
	OpCMInitQPAttr
	OpCMJoinMcast
	OpCMLeaveMcast
	OpRSConnect
	OpRSListen
	OpRSAccept
	OpRSStatus
	OpRSBind
	OpRSMap
	OpRSUnmap
	OpRSIOWrite
	OpRSOption
	opEnd
)

var opNames = [...]string{"", "HELLO", "QUERY_PORT", "ALLOC_PD", "DEALLOC_PD", "REG_MR", "REREG_MR", "DEREG_MR",
	"ALLOC_MW", "DEALLOC_MW", "CREATE_COMP_CHANNEL", "DESTROY_COMP_CHANNEL", "CREATE_CQ", "RESIZE_CQ",
	"DESTROY_CQ", "CREATE_QP", "MODIFY_QP", "QUERY_QP", "DESTROY_QP", "CREATE_SRQ", "MODIFY_SRQ", "QUERY_SRQ",
	"DESTROY_SRQ", "CREATE_AH", "DESTROY_AH", "ATTACH_MCAST", "DETACH_MCAST", "INFO",
	"CM_REGISTER_CHANNEL", "CM_UNREGISTER_CHANNEL", "CM_CREATE_ID", "CM_DESTROY_ID", "CM_BIND", "CM_RESOLVE_ADDR",
	"CM_RESOLVE_ROUTE", "CM_LISTEN", "CM_CONNECT", "CM_ACCEPT", "CM_REJECT", "CM_DISCONNECT", "CM_ESTABLISH",
	"CM_MIGRATE", "CM_QUERY", "CM_INIT_QP_ATTR", "CM_JOIN_MCAST", "CM_LEAVE_MCAST",
	"RS_CONNECT", "RS_LISTEN", "RS_ACCEPT", "RS_STATUS", "RS_BIND", "RS_MAP", "RS_UNMAP", "RS_IOWRITE", "RS_OPTION"}

// String returns the operation's name (CREATE_QP, ...).
func (o Op) String() string {
	if o > 0 && o < opEnd {
		return opNames[o]
	}
	return "OP_" + utoa(uint64(o))
}

func utoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// MaxMessage bounds a control packet, either way.
const MaxMessage = 4096

// Header opens every request.
type Header struct {
	Op   Op
	Size uint32 // bytes after the header
}

// Reply opens every answer. Errno is 0 on success, else the positive
// errno the verb returns (or sets): EINVAL, ENOMEM, ...
type Reply struct {
	Errno uint32 `c:"err"`
	Size  uint32 // bytes after the reply
}

// Error numbers of Linux, as replies carry them.
const (
	EPERM         = 1
	ENOENT        = 2
	EINTR         = 4
	EIO           = 5
	EBADF         = 9
	EAGAIN        = 11
	ENOMEM        = 12
	EACCES        = 13
	EFAULT        = 14
	EBUSY         = 16
	EEXIST        = 17
	ENODEV        = 19
	EINVAL        = 22
	ENOSPC        = 28
	ENOSYS        = 38
	EPROTO        = 71
	EOPNOTSUPP    = 95
	EADDRNOTAVAIL = 99
)

// HelloReq opens a session. It carries three descriptors, in this order:
// the program-memory memfd (sized MemFileSize and sealed against
// shrinking), the doorbell eventfd (the device reads it), and the write end
// of the async event pipe (the device writes AsyncEvent records to it).
type HelloReq struct {
	Version uint32
	Pid     uint32
}

// MemFileSize is the size of the program-memory file: every user-space
// address of x86-64 and arm64 with 4-level paging lies below it.
const MemFileSize = 1 << 47

// HelloReply describes the device. It carries one descriptor: the ring
// memfd, whose first SessionPageSize bytes are the session page.
type HelloReply struct {
	Device DeviceAttr
	Port   PortAttr
	GIDs   uint32 `c:"num_gids"` // entries of GID that are valid
	_      uint32
	GID    [MaxGIDs]GIDEntry
}

// MaxGIDs bounds a device's GID table.
const MaxGIDs = 16

// GIDEntry is one entry of the port's GID table.
type GIDEntry struct {
	GID     [16]byte
	Type    uint32 // GIDTypeRoCEv2
	Ifindex uint32 // the interface the address is on (0 if none)
}

// GID types, as ibv_gid_type_sysfs numbers them.
const (
	GIDTypeIB     = 0
	GIDTypeRoCEv1 = 1
	GIDTypeRoCEv2 = 2
)

// DeviceAttr holds what ibv_query_device and ibv_query_device_ex report.
type DeviceAttr struct {
	Name         [64]byte // NUL-terminated: goroce0
	FwVer        [64]byte
	NodeGUID     uint64 // as ibv_device_attr holds it: big-endian bytes in memory
	SysImageGUID uint64
	MaxMRSize    uint64
	PageSizeCap  uint64
	CapFlags     uint64 // device_cap_flags_ex; its low 32 bits are device_cap_flags
	VendorID     uint32
	VendorPartID uint32
	HwVer        uint32
	MaxQP        uint32
	MaxQPWR      uint32 `c:"max_qp_wr"`
	MaxSGE       uint32
	MaxSGERd     uint32
	MaxCQ        uint32
	MaxCQE       uint32
	MaxMR        uint32
	MaxPD        uint32
	MaxQPRdAtom  uint32
	MaxResRdAtom uint32
	MaxQPInitRd  uint32
	AtomicCap    uint32
	MaxMW        uint32
	MaxAH        uint32
	MaxSRQ       uint32
	MaxSRQWR     uint32 `c:"max_srq_wr"`
	MaxSRQSGE    uint32 `c:"max_srq_sge"`
	MaxInline    uint32
	MaxPkeys     uint16
	LocalAckDly  uint8
	PortCnt      uint8
	// The multicast limits: groups, QPs of one group, attachments in all.
	MaxMcastGrp           uint32 `c:"max_mcast_grp"`
	MaxMcastQPAttach      uint32 `c:"max_mcast_qp_attach"`
	MaxTotalMcastQPAttach uint32 `c:"max_total_mcast_qp_attach"`
	_                     uint32
}

// PortAttr holds what ibv_query_port reports.
type PortAttr struct {
	State        uint32 // ibv_port_state: 4, ACTIVE
	MaxMTU       uint32 // ibv_mtu: 1 (256) to 5 (4096)
	ActiveMTU    uint32
	GIDTblLen    uint32
	CapFlags     uint32
	MaxMsgSz     uint32
	PkeyTblLen   uint16
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8 // 5, LINK_UP
	LinkLayer    uint8 // 2, ETHERNET
	MaxVLNum     uint8
	_            uint8
	CapFlags2    uint16
	_            uint16
	ActiveSpdExt uint32 // active_speed_ex
}

// QueryPortReq asks for the port's attributes now (the link's MTU may
// have changed since Hello).
type QueryPortReq struct {
	Port uint32
	_    uint32
}

// HandleReq names one object of the session: what Dealloc, Dereg and
// Destroy operations take.
type HandleReq struct {
	Handle uint32
	_      uint32
}

// HandleReply returns a new object's handle.
type HandleReply struct {
	Handle uint32
	_      uint32
}

// RegMRReq registers [Addr, Addr+Length) of the program at address IOVA
// (ibv_reg_mr_iova2). The library has mapped the pages of the range from
// the program-memory file before it asks.
type RegMRReq struct {
	PD     uint32
	Access uint32
	Addr   uint64
	Length uint64
	IOVA   uint64
}

// RegMRReply returns the region's handle and keys.
type RegMRReply struct {
	Handle uint32
	LKey   uint32 `c:"lkey"`
	RKey   uint32 `c:"rkey"`
	_      uint32
}

// ReregMRReq changes a region (ibv_rereg_mr): Flags are
// IBV_REREG_MR_CHANGE_*, and the fields they name are read.
type ReregMRReq struct {
	Handle uint32
	Flags  uint32
	PD     uint32
	Access uint32
	Addr   uint64
	Length uint64
	IOVA   uint64
}

// AllocMWReq allocates a memory window of Type (1 or 2) in PD.
type AllocMWReq struct {
	PD   uint32
	Type uint32
}

// AllocMWReply returns the window's handle and key.
type AllocMWReply struct {
	Handle uint32
	RKey   uint32 `c:"rkey"`
}

// CreateCQReq creates a completion queue of at least CQE entries; Channel
// is a completion channel's handle, or 0.
type CreateCQReq struct {
	CQE        uint32
	Channel    uint32
	CompVector uint32
	_          uint32
}

// RingReply places a ring in the ring file: Offset of its RingHeader,
// Size of the whole mapping, Entries slots of Stride bytes after the
// header.
type RingReply struct {
	Offset  uint64
	Size    uint64
	Entries uint32
	Stride  uint32
}

// CreateCQReply returns the CQ's handle, its capacity (ibv_cq.cqe) and
// its ring.
type CreateCQReply struct {
	Handle uint32
	CQE    uint32
	Ring   RingReply
}

// ResizeCQReq resizes a CQ to at least CQE entries. The library holds the
// CQ's lock from before it asks until it has mapped the new ring: the
// device moves the completions not yet polled into it.
type ResizeCQReq struct {
	Handle uint32
	CQE    uint32
}

// ResizeCQReply returns the new capacity and ring.
type ResizeCQReply struct {
	CQE  uint32
	_    uint32
	Ring RingReply
}

// QPCap holds a queue pair's queue sizes (ibv_qp_cap).
type QPCap struct {
	MaxSendWR  uint32
	MaxRecvWR  uint32
	MaxSendSGE uint32
	MaxRecvSGE uint32
	MaxInline  uint32
	_          uint32
}

// CreateQPReq creates a queue pair (ibv_create_qp): Type is ibv_qp_type
// (2 RC, 3 UC, 4 UD), the CQs and the SRQ (0: none) are handles.
type CreateQPReq struct {
	PD     uint32
	Type   uint32
	SendCQ uint32
	RecvCQ uint32
	SRQ    uint32
	SigAll uint32
	Cap    QPCap
}

// CreateQPReply returns the QP's handle, number, the sizes it got, its
// doorbell bit (SessionPage) and its send and receive rings (a QP on an
// SRQ has no receive ring: RQ.Entries is 0).
type CreateQPReply struct {
	Handle   uint32
	QPN      uint32
	Doorbell uint32
	_        uint32
	Cap      QPCap
	SQ       RingReply
	RQ       RingReply
}

// AHAttr is an address vector (ibv_ah_attr with its GRH).
type AHAttr struct {
	DGID         [16]byte
	FlowLabel    uint32
	DLID         uint16
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     uint8
	Port         uint8
	_            uint16
}

// QPAttr holds a queue pair's attributes (ibv_qp_attr), with ibverbs'
// numbering of states, MTUs and access flags.
type QPAttr struct {
	State           uint32
	CurState        uint32
	PathMTU         uint32
	PathMigState    uint32
	QKey            uint32 `c:"qkey"`
	RQPSN           uint32 `c:"rq_psn"`
	SQPSN           uint32 `c:"sq_psn"`
	DestQPN         uint32
	Access          uint32
	PKeyIndex       uint16 `c:"pkey_index"`
	AltPKeyIndex    uint16 `c:"alt_pkey_index"`
	Cap             QPCap
	AH              AHAttr
	AltAH           AHAttr
	SQDNotify       uint8
	SQDraining      uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Port            uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	AltPort         uint8
	AltTimeout      uint8
	_               uint8
	RateLimit       uint32
}

// ModifyQPReq modifies a QP (ibv_modify_qp): Mask is ibv_qp_attr_mask.
type ModifyQPReq struct {
	Handle uint32
	Mask   uint32
	Attr   QPAttr
}

// QueryQPReq asks for a QP's attributes (ibv_query_qp).
type QueryQPReq struct {
	Handle uint32
	Mask   uint32
}

// QueryQPReply returns the attributes and the creation attributes
// ibv_query_qp reports in its init_attr.
type QueryQPReply struct {
	Attr   QPAttr
	SigAll uint32
	_      uint32
}

// CreateSRQReq creates a shared receive queue (ibv_create_srq).
type CreateSRQReq struct {
	PD     uint32
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
}

// CreateSRQReply returns the SRQ's handle, the sizes it got, its doorbell
// bit and its ring.
type CreateSRQReply struct {
	Handle   uint32
	Doorbell uint32
	MaxWR    uint32
	MaxSGE   uint32
	Ring     RingReply
}

// ModifySRQReq modifies an SRQ (ibv_modify_srq): Mask is
// ibv_srq_attr_mask.
type ModifySRQReq struct {
	Handle uint32
	Mask   uint32
	MaxWR  uint32
	Limit  uint32
}

// QuerySRQReply returns an SRQ's attributes (ibv_query_srq).
type QuerySRQReply struct {
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
	_      uint32
}

// CreateAHReq creates an address handle in PD (ibv_create_ah).
type CreateAHReq struct {
	PD   uint32
	_    uint32
	Attr AHAttr
}

// McastReq attaches a QP to a multicast group, or detaches it.
type McastReq struct {
	QP  uint32
	LID uint16
	_   uint16
	GID [16]byte
}

// CreateCompChannelReq creates a completion channel. It carries one
// descriptor, the write end of the channel's pipe: the device writes a
// CompEvent to it for each completion event.
type CreateCompChannelReq struct {
	_ uint64
}

// CompEvent is what a completion channel's pipe carries: the handle of
// the CQ that had the event.
type CompEvent struct {
	CQ uint32
	_  uint32
}

// AsyncEvent is what the async event pipe carries: Type is ibv_event_type,
// Handle the QP, CQ or SRQ it is about (or the port number).
type AsyncEvent struct {
	Type   uint32
	Handle uint32
}

// Asynchronous event types, as ibv_event_type numbers them.
const (
	EventCQErr           = 0
	EventQPFatal         = 1
	EventQPReqErr        = 2
	EventQPAccessErr     = 3
	EventCommEst         = 4
	EventSQDrained       = 5
	EventDeviceFatal     = 8
	EventPortActive      = 9
	EventPortErr         = 10
	EventSRQErr          = 14
	EventSRQLimitReached = 15
	EventQPLastWQE       = 16
	EventGIDChange       = 18
)
