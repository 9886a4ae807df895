package abi

// The connection manager's messages: rdma_cm's ids, connections and
// events, carried out by the device's cm.Agent (one per device, on its
// QP 1) for the session's ids.
//
// An event channel (rdma_create_event_channel) has a pipe for each
// device whose ids use it: the library registers the pipe's write end
// with the device (OpCMRegisterChannel), with a tag of its own, and the
// device writes a CMEvent record to it for each event of those ids (a
// record is less than PIPE_BUF bytes: one write each). The device closes
// its end when it stops, which the library reports as DEVICE_REMOVAL to
// the ids on it. An id (rdma_create_id) exists on the device once the
// library has picked the device it is on: at its bind or address
// resolution.

// Socket addresses travel as their C struct sockaddr_in or sockaddr_in6
// bytes, in a field of SockaddrSize (zero: none).
const SockaddrSize = 28

// CMEventSize is the size of CMEvent.
const CMEventSize = 384

// MaxPrivateData bounds the private data of a CM message: a REP's 196
// bytes is the most any carries.
const MaxPrivateData = 196

// CMRegisterChannelReq registers an event channel; it carries one
// descriptor, the write end of the channel's pipe for the device. Tag is what the device
// writes in every CMEvent of the channel.
type CMRegisterChannelReq struct {
	Tag uint32
	_   uint32
}

// CMCreateIDReq creates an id on the channel of handle Channel (0: a
// synchronous id, whose events the library waits for itself on a channel
// of its own), in port space PS (rdma_port_space: RDMA_PS_TCP 0x106,
// RDMA_PS_UDP 0x111) for QPs of type QPType. Cookie is the library's
// name for the id, written in its events.
type CMCreateIDReq struct {
	Channel uint32
	PS      uint32
	QPType  uint32
	_       uint32
	Cookie  uint64
}

// CMAddrReq binds an id (OpCMBind: Src), or resolves its destination
// (OpCMResolveAddr: Src may be zero, Dst not; TimeoutMs bounds it) or
// its route (OpCMResolveRoute: TimeoutMs).
type CMAddrReq struct {
	ID        uint32
	TimeoutMs uint32
	Src       [SockaddrSize]byte
	Dst       [SockaddrSize]byte
}

// CMListenReq starts an id listening with a backlog.
type CMListenReq struct {
	ID      uint32
	Backlog uint32
}

// CMConnParam is rdma_conn_param (and, for a UD id, the Q_Key of
// rdma_accept's SIDR_REP), with its private data in place.
type CMConnParam struct {
	PrivateDataLen     uint8
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                uint8
	_                  uint8
	QPNum              uint32
	QKey               uint32
	PrivateData        [MaxPrivateData]byte
}

// CMConnectReq connects an id (OpCMConnect) or accepts a connection
// request on it (OpCMAccept); QP is the handle of the id's QP, or 0 for a
// program that drives its QP itself (Param.QPNum is then its number).
// ACKTimeout and TOS are what rdma_set_option set (0: unset).
type CMConnectReq struct {
	ID         uint32
	QP         uint32
	ACKTimeout uint8
	TOS        uint8
	_          uint16
	_          uint32
	Param      CMConnParam
}

// CMRejectReq rejects a connection request on an id, with private data.
type CMRejectReq struct {
	ID             uint32
	PrivateDataLen uint32
	PrivateData    [MaxPrivateData]byte
}

// CMMigrateReq moves an id's events to another channel.
type CMMigrateReq struct {
	ID      uint32
	Channel uint32
}

// CMNewIDReply returns a new id's handle.
type CMNewIDReply struct {
	ID uint32
	_  uint32
}

// CMQueryReply is what an id knows of its addresses and path: what
// rdma_cm_id.route holds.
type CMQueryReply struct {
	Src       [SockaddrSize]byte
	Dst       [SockaddrSize]byte
	SGID      [16]byte
	DGID      [16]byte
	PathMTU   uint32 // ibv_mtu
	SGIDIndex uint32
	Port      uint32
	State     uint32
}

// CMInitQPAttrReq asks what rdma_init_qp_attr gives for a QP moving to
// State (ibv_qp_state).
type CMInitQPAttrReq struct {
	ID    uint32
	State uint32
}

// CMInitQPAttrReply is the attributes and their ibv_qp_attr_mask.
type CMInitQPAttrReply struct {
	Mask uint32
	_    uint32
	Attr QPAttr
}

// CMJoinMcastReq joins id ID to the multicast group at Addr
// (rdma_join_multicast, with JoinFlags as rdma_join_multicast_ex takes
// them); its MULTICAST_JOIN event carries UID, the library's name for the
// join. The library attaches the id's QP when the event comes, as
// librdmacm does.
type CMJoinMcastReq struct {
	ID        uint32
	JoinFlags uint32
	UID       uint64
	Addr      [SockaddrSize]byte
	_         uint32
}

// CMLeaveMcastReq leaves the join UID of id ID (rdma_leave_multicast).
type CMLeaveMcastReq struct {
	ID  uint32
	_   uint32
	UID uint64
}

// CMEvent is one rdma_cm event as the device writes it to a channel.
// Type is rdma_cm_event_type, Status its status; ID the id's handle (for
// a connection request, the new id's, made on the device for the
// request), Cookie the library's name for it (0 for a new id), ListenID
// the listening id's handle (a request's), Tag the channel's. For
// requests and established connections Param carries the peer's private
// data and parameters; for datagram ids UD the peer's address handle, QPN
// and Q_Key; Src and Dst are a new id's addresses.
type CMEvent struct {
	Type     uint32
	Status   int32
	ID       uint32
	ListenID uint32
	Tag      uint32
	_        uint32
	Cookie   uint64
	Param    CMConnParam
	UD       AHAttr
	UDQPN    uint32 `c:"ud_qpn"`
	UDQKey   uint32 `c:"ud_qkey"`
	Src      [SockaddrSize]byte
	Dst      [SockaddrSize]byte
	PathMTU  uint32
	// UID is the library's name for the multicast join a
	// MULTICAST_JOIN or MULTICAST_ERROR event is about (CMJoinMcastReq).
	UID uint64
	_   [32]byte
}

// rdma_cm event types.
const (
	CMEventAddrResolved   = 0
	CMEventAddrError      = 1
	CMEventRouteResolved  = 2
	CMEventRouteError     = 3
	CMEventConnectRequest = 4
	CMEventConnectResp    = 5
	CMEventConnectError   = 6
	CMEventUnreachable    = 7
	CMEventRejected       = 8
	CMEventEstablished    = 9
	CMEventDisconnected   = 10
	CMEventDeviceRemoval  = 11
	CMEventMulticastJoin  = 12
	CMEventMulticastError = 13
	CMEventAddrChange     = 14
	CMEventTimewaitExit   = 15
)

// rdma_cm port spaces.
const (
	PSTCP = 0x0106
	PSUDP = 0x0111
	PSIB  = 0x013F
)
