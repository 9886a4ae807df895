package diagram

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// Record is one decoded frame of a capture, with the fields `roce decode`
// prints for it. Frames that are not RoCEv2 are not records; a RoCE frame
// that does not decode is one with Malformed set.
//
// The extension headers are named and typed as in package layers' RoCE
// layer, so a decoder that has one copies them field by field; only those
// the opcode carries (BTH.Opcode.Info().Has) are read.
//
// A Record is plain data: safe to read from several goroutines, not to
// modify concurrently.
type Record struct {
	Frame   int           // frame number in the capture, from 1
	Time    time.Duration // since the first frame of the capture
	WireLen int           // frame length on the wire

	Src, Dst         netip.Addr // IP addresses; invalid when the frame had none
	SrcPort, DstPort uint16

	// Malformed says why the frame, a UDP datagram to port 4791, does not
	// decode; the fields below are then zero.
	Malformed string

	BTH          bth.BTHFields
	RDETH        bth.RDETHFields
	DETH         bth.DETHFields
	FETH         bth.FETHFields
	RETH         bth.RETHFields
	AtomicETH    bth.AtomicETHFields
	AETH         bth.AETHFields
	AtomicAckETH bth.AtomicAckETHFields
	ImmDt        bth.ImmDtFields
	IETH         bth.IETHFields

	// PayloadLen is the payload length without the pad, from the UDP
	// length when the capture cut the packet short.
	PayloadLen int
	// Truncated reports a packet cut short by the capture: its ICRC could
	// not be checked.
	Truncated bool
	// ICRCOK reports that the ICRC verifies; false when Truncated.
	ICRCOK bool

	// MAD is the management datagram a UD SEND to QP 1 carries, or nil.
	MAD *MAD
}

// MAD is the part of a management datagram the diagram shows: the common
// header and, for a CM message, the fields that say which connection it is
// about. It is plain data, like Record.
type MAD struct {
	Class  uint8
	Method mad.Method
	AttrID uint16
	TID    uint64

	// CM is set for a CM MAD (class mad.ClassCM) that decodes; CMError
	// says why one does not.
	CM      *CMMessage
	CMError string
}

// CMMessage holds the fields of a CM message (REQ, MRA, REJ, REP, RTU,
// DREQ, DREP) that tie it to a connection. Fields a message does not carry
// are zero. It is plain data, like Record.
type CMMessage struct {
	LocalCommID, RemoteCommID uint32
	// LocalQPN is the sender's QP (REQ, REP).
	LocalQPN uint32
	// StartingPSN is the first PSN the receiver of the message sends
	// with (REQ, REP).
	StartingPSN uint32
	// ServiceID is the service asked for (REQ); ServicePort its port
	// when it is an rdma_cm service ID.
	ServiceID   uint64
	ServicePort uint16
	IsRDMACM    bool // ServiceID is an rdma_cm one (ServicePort is set)
	// RemoteQPN is the receiver's QP (DREQ).
	RemoteQPN uint32
	// Rejected and Reason say what a REJ rejects and why.
	Rejected mad.RejectedMsg
	Reason   mad.RejectReason
	// MRAed says which message an MRA asks more time for.
	MRAed mad.MRAedMsg
}

// DecodeMAD returns the MAD of b, the payload of a UD SEND to QP 1. It
// returns nil when b is not a whole 256-byte MAD of base version 1. A CM
// MAD that does not decode as a CM message has CMError set.
func DecodeMAD(b []byte) *MAD {
	var h mad.Header
	if len(b) != mad.Len || h.Unmarshal(b) != nil {
		return nil
	}
	m := &MAD{Class: h.MgmtClass, Method: h.Method, AttrID: h.AttrID, TID: h.TID}
	if h.MgmtClass != mad.ClassCM {
		return m
	}
	_, msg, err := mad.Decode(b)
	if err != nil {
		m.CMError = err.Error()
		return m
	}
	m.CM = cmFields(msg)
	return m
}

// cmFields copies the fields of a decoded CM message.
func cmFields(msg mad.Message) *CMMessage {
	c := &CMMessage{}
	switch v := msg.(type) {
	case *mad.REQ:
		c.LocalCommID, c.LocalQPN, c.StartingPSN, c.ServiceID = v.LocalCommID, v.LocalQPN, v.StartingPSN, v.ServiceID
		if _, port, ok := mad.ParseServiceID(v.ServiceID); ok {
			c.ServicePort, c.IsRDMACM = port, true
		}
	case *mad.REP:
		c.LocalCommID, c.RemoteCommID, c.LocalQPN, c.StartingPSN = v.LocalCommID, v.RemoteCommID, v.LocalQPN, v.StartingPSN
	case *mad.RTU:
		c.LocalCommID, c.RemoteCommID = v.LocalCommID, v.RemoteCommID
	case *mad.DREQ:
		c.LocalCommID, c.RemoteCommID, c.RemoteQPN = v.LocalCommID, v.RemoteCommID, v.RemoteQPN
	case *mad.DREP:
		c.LocalCommID, c.RemoteCommID = v.LocalCommID, v.RemoteCommID
	case *mad.REJ:
		c.LocalCommID, c.RemoteCommID, c.Rejected, c.Reason = v.LocalCommID, v.RemoteCommID, v.MessageRejected, v.Reason
	case *mad.MRA:
		c.LocalCommID, c.RemoteCommID, c.MRAed = v.LocalCommID, v.RemoteCommID, v.MessageMRAed
	}
	return c
}
