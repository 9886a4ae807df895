package bth

// Opcode is the 8-bit BTH opcode (IBTA Vol. 1 §9.2.1, Table 35). The top
// three bits select the transport (RC 000, UC 001, RD 010, UD 011, CNP 100)
// and the low five bits the operation.
type Opcode uint8

// Reliable Connected opcodes.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0A
	RCWriteOnlyImm       Opcode = 0x0B
	RCReadRequest        Opcode = 0x0C
	RCReadResponseFirst  Opcode = 0x0D
	RCReadResponseMiddle Opcode = 0x0E
	RCReadResponseLast   Opcode = 0x0F
	RCReadResponseOnly   Opcode = 0x10
	RCAcknowledge        Opcode = 0x11
	RCAtomicAcknowledge  Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInvalidate Opcode = 0x16
	RCSendOnlyInvalidate Opcode = 0x17
	RCFlush              Opcode = 0x1C
	RCAtomicWrite        Opcode = 0x1D
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2A
	UCWriteOnlyImm       Opcode = 0x2B
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	CNP                  Opcode = 0x81
)

// The top three bits of an opcode select the transport.
const (
	transportRC   Opcode = 0x00
	transportUC   Opcode = 0x20
	transportRD   Opcode = 0x40
	transportUD   Opcode = 0x60
	operationMask Opcode = 0x1F
)

// Transport is the service class an opcode belongs to.
type Transport uint8

// Transports, as the top three bits of the opcode select them.
const (
	TransportInvalid Transport = iota
	TransportRC
	TransportUC
	TransportRD
	TransportUD
	TransportCNP
)

var transportNames = [...]string{"invalid", "RC", "UC", "RD", "UD", "CNP"}

// String returns the name of the Transport.
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "invalid"
}

// Operation is what an opcode asks of the responder, independent of the
// transport and of the packet's place in the message.
type Operation uint8

// Operations.
const (
	OpInvalid Operation = iota
	OpSend
	OpWrite
	OpReadRequest
	OpReadResponse
	OpAcknowledge
	OpAtomicAcknowledge
	OpCompareSwap
	OpFetchAdd
	OpFlush
	OpAtomicWrite
	OpResync
	OpCNP
)

var operationNames = [...]string{"invalid", "SEND", "RDMA_WRITE", "RDMA_READ_REQUEST",
	"RDMA_READ_RESPONSE", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD",
	"FLUSH", "ATOMIC_WRITE", "RESYNC", "CNP"}

// String returns the name of the Operation.
func (o Operation) String() string {
	if int(o) < len(operationNames) {
		return operationNames[o]
	}
	return "invalid"
}

// Position is a packet's place in a multi-packet message.
type Position uint8

// Positions. A request or response that is a whole message is Only.
const (
	PosNone Position = iota
	PosFirst
	PosMiddle
	PosLast
	PosOnly
)

// Header is a bit set naming the extension headers that follow the BTH.
type Header uint16

// Extension headers, in the order they appear on the wire after the BTH.
const (
	HdrRDETH Header = 1 << iota
	HdrDETH
	HdrFETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	// HdrCNPPad marks the 16 reserved bytes that follow the BTH of a CNP.
	HdrCNPPad
	numHeaders = iota
)

// headerSizes is indexed by the bit number of a Header.
var headerSizes = [numHeaders]int{
	RDETHLen, DETHLen, FETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckETHLen, ImmDtLen,
	IETHLen, CNPPadLen,
}

var headerNames = [numHeaders]string{
	"RDETH", "DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPPad",
}

// OpInfo describes an opcode: its name, its transport, the operation, its
// position in a message, the extension headers it carries (in wire order),
// and where they sit.
type OpInfo struct {
	Name      string
	Transport Transport
	Operation Operation
	Position  Position
	Headers   Header
	// Payload reports whether the packet carries a payload (it may be empty).
	Payload bool
	// Imm and Invalidate report an ImmDt or IETH header; they complete a
	// receive with the immediate or invalidate flag.
	Imm, Invalidate bool
	// HeaderLen is the length of the BTH and every extension header.
	HeaderLen int
	// off holds the offset from the BTH of each header, or 0 when absent.
	off [numHeaders]uint8
}

// Valid reports whether the opcode is defined.
func (i *OpInfo) Valid() bool { return i != nil && i.Transport != TransportInvalid }

// Has reports whether the opcode carries header h.
func (i *OpInfo) Has(h Header) bool { return i != nil && i.Headers&h != 0 }

// opTable has an entry for every opcode; undefined ones have Transport
// TransportInvalid.
var opTable [256]OpInfo

// Info returns the description of op. The result for an undefined opcode
// has Valid() false.
func (op Opcode) Info() *OpInfo { return &opTable[op] }

// Valid reports whether op is a defined opcode.
func (op Opcode) Valid() bool { return opTable[op].Transport != TransportInvalid }

// String returns the opcode's name in the style of ib_pack.h without the
// IB_OPCODE_ prefix, such as "RC_SEND_FIRST", or "0xNN" when undefined.
func (op Opcode) String() string {
	if n := opTable[op].Name; n != "" {
		return n
	}
	const hex = "0123456789abcdef"
	return string([]byte{'0', 'x', hex[op>>4], hex[op&15]})
}

// Transport returns the opcode's transport class.
func (op Opcode) Transport() Transport { return opTable[op].Transport }

// HeaderLen returns the length of the BTH and the extension headers of op.
func (op Opcode) HeaderLen() int { return opTable[op].HeaderLen }

// WithTransport returns the opcode for the same operation on transport t:
// RCSendFirst.WithTransport(TransportUC) is UCSendFirst. The result may be
// undefined (check Valid) when t does not offer the operation.
func (op Opcode) WithTransport(t Transport) Opcode {
	var base Opcode
	switch t {
	case TransportRC:
		base = transportRC
	case TransportUC:
		base = transportUC
	case TransportRD:
		base = transportRD
	case TransportUD:
		base = transportUD
	default:
		return 0xFF
	}
	return base | op&operationMask
}

// rcOps lists the operations the RC, UC and RD transports share, by the low
// five bits of the opcode.
var rcOps = [32]struct {
	name    string
	op      Operation
	pos     Position
	hdr     Header
	payload bool
}{
	0x00: {"SEND_FIRST", OpSend, PosFirst, 0, true},
	0x01: {"SEND_MIDDLE", OpSend, PosMiddle, 0, true},
	0x02: {"SEND_LAST", OpSend, PosLast, 0, true},
	0x03: {"SEND_LAST_WITH_IMMEDIATE", OpSend, PosLast, HdrImmDt, true},
	0x04: {"SEND_ONLY", OpSend, PosOnly, 0, true},
	0x05: {"SEND_ONLY_WITH_IMMEDIATE", OpSend, PosOnly, HdrImmDt, true},
	0x06: {"RDMA_WRITE_FIRST", OpWrite, PosFirst, HdrRETH, true},
	0x07: {"RDMA_WRITE_MIDDLE", OpWrite, PosMiddle, 0, true},
	0x08: {"RDMA_WRITE_LAST", OpWrite, PosLast, 0, true},
	0x09: {"RDMA_WRITE_LAST_WITH_IMMEDIATE", OpWrite, PosLast, HdrImmDt, true},
	0x0A: {"RDMA_WRITE_ONLY", OpWrite, PosOnly, HdrRETH, true},
	0x0B: {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpWrite, PosOnly, HdrRETH | HdrImmDt, true},
	0x0C: {"RDMA_READ_REQUEST", OpReadRequest, PosOnly, HdrRETH, false},
	0x0D: {"RDMA_READ_RESPONSE_FIRST", OpReadResponse, PosFirst, HdrAETH, true},
	0x0E: {"RDMA_READ_RESPONSE_MIDDLE", OpReadResponse, PosMiddle, 0, true},
	0x0F: {"RDMA_READ_RESPONSE_LAST", OpReadResponse, PosLast, HdrAETH, true},
	0x10: {"RDMA_READ_RESPONSE_ONLY", OpReadResponse, PosOnly, HdrAETH, true},
	0x11: {"ACKNOWLEDGE", OpAcknowledge, PosOnly, HdrAETH, false},
	0x12: {"ATOMIC_ACKNOWLEDGE", OpAtomicAcknowledge, PosOnly, HdrAETH | HdrAtomicAckETH, false},
	0x13: {"COMPARE_SWAP", OpCompareSwap, PosOnly, HdrAtomicETH, false},
	0x14: {"FETCH_ADD", OpFetchAdd, PosOnly, HdrAtomicETH, false},
	0x15: {"RESYNC", OpResync, PosOnly, 0, false},
	0x16: {"SEND_LAST_WITH_INVALIDATE", OpSend, PosLast, HdrIETH, true},
	0x17: {"SEND_ONLY_WITH_INVALIDATE", OpSend, PosOnly, HdrIETH, true},
	0x1C: {"FLUSH", OpFlush, PosOnly, HdrFETH | HdrRETH, false},
	0x1D: {"ATOMIC_WRITE", OpAtomicWrite, PosOnly, HdrRETH, true},
}

func init() {
	add := func(op Opcode, name string, t Transport, o Operation, pos Position, hdr Header, payload bool) {
		info := OpInfo{Name: name, Transport: t, Operation: o, Position: pos, Headers: hdr,
			Payload: payload, Imm: hdr&HdrImmDt != 0, Invalidate: hdr&HdrIETH != 0}
		off := BTHLen
		for i := 0; i < numHeaders; i++ {
			if hdr&(1<<i) != 0 {
				info.off[i] = uint8(off)
				off += headerSizes[i]
			}
		}
		info.HeaderLen = off
		opTable[op] = info
	}
	for low, e := range rcOps {
		if e.name == "" {
			continue
		}
		op := Opcode(low)
		// RC: everything but RESYNC, which is RD only.
		if e.op != OpResync {
			add(transportRC|op, "RC_"+e.name, TransportRC, e.op, e.pos, e.hdr, e.payload)
		}
		// UC: SEND and RDMA WRITE without invalidate.
		if low <= 0x0B {
			add(transportUC|op, "UC_"+e.name, TransportUC, e.op, e.pos, e.hdr, e.payload)
		}
		// RD: 0x40-0x55. Requests carry RDETH and DETH, responses RDETH.
		if low <= 0x15 {
			hdr := e.hdr | HdrRDETH
			switch e.op {
			case OpSend, OpWrite, OpReadRequest, OpCompareSwap, OpFetchAdd, OpResync:
				hdr |= HdrDETH
			}
			add(transportRD|op, "RD_"+e.name, TransportRD, e.op, e.pos, hdr, e.payload)
		}
	}
	add(UDSendOnly, "UD_SEND_ONLY", TransportUD, OpSend, PosOnly, HdrDETH, true)
	add(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", TransportUD, OpSend, PosOnly, HdrDETH|HdrImmDt, true)
	add(CNP, "CNP", TransportCNP, OpCNP, PosOnly, HdrCNPPad, false)
}

// Offset returns the offset of header h (one header) from the start of
// the BTH for opcode op, or -1 when op does not carry h.
func (i *OpInfo) Offset(h Header) int {
	if i == nil || h&(h-1) != 0 || i.Headers&h == 0 {
		return -1
	}
	return int(i.off[bitIndex(h)])
}

func bitIndex(h Header) int {
	n := 0
	for h > 1 {
		h >>= 1
		n++
	}
	return n
}

// String returns the names of the headers in h, in wire order, joined by '+'.
func (h Header) String() string {
	var b []byte
	for i := 0; i < numHeaders; i++ {
		if h&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '+')
			}
			b = append(b, headerNames[i]...)
		}
	}
	return string(b)
}
