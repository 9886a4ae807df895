package mad

import (
	"strconv"
	"time"
)

// TransportType is the 2-bit transport service type of a REQ (IBTA Vol. 1
// Table 106).
type TransportType uint8

// Transport service types.
const (
	TransportRC TransportType = 0 // reliable connected
	TransportUC TransportType = 1 // unreliable connected
	TransportRD TransportType = 2 // reliable datagram
	// TransportExtended means the REQ's ExtendedTransportType says which
	// (1 is XRC).
	TransportExtended TransportType = 3
)

// ExtTransportXRC is the extended transport type of an XRC REQ.
const ExtTransportXRC = 1

// String returns "RC", "UC", "RD" or "Extended".
func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportExtended:
		return "Extended"
	}
	return "TransportType(" + strconv.Itoa(int(t)) + ")"
}

// MaxTimeout is the largest 5-bit timeout exponent.
const MaxTimeout = 31

// timeoutUnit is 4.096 microseconds, the unit of IBTA timeouts.
const timeoutUnit = 4096 * time.Nanosecond

// Timeout returns the duration of a 5-bit IBTA timeout exponent t:
// 4.096 us * 2^t. CM response timeouts, the MRA service timeout, the REP
// target ACK delay and the local ACK timeout use it; for the local ACK
// timeout, 0 means no timeout, which the caller must check. t above 31 is
// treated as 31.
func Timeout(t uint8) time.Duration {
	return timeoutUnit << min(t, MaxTimeout)
}

// TimeoutExp returns the smallest timeout exponent whose Timeout is at
// least d, at most MaxTimeout.
func TimeoutExp(d time.Duration) uint8 {
	var t uint8
	for t < MaxTimeout && Timeout(t) < d {
		t++
	}
	return t
}

// RejectReason is the reason code of a REJ (IBTA Vol. 1 Table 109; enum
// ib_cm_rej_reason in the kernel's include/rdma/ib_cm.h).
type RejectReason uint16

// Reject reasons. Reason 34 has no name in the kernel's or Wireshark's
// tables and none here.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupportedReq            RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejectNames = [...]string{
	RejNoQP:                      "no QP available",
	RejNoEEC:                     "no EEC available",
	RejNoResources:               "no resources available",
	RejTimeout:                   "timeout",
	RejUnsupportedReq:            "unsupported request",
	RejInvalidCommID:             "invalid communication ID",
	RejInvalidCommInstance:       "invalid communication instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport service type",
	RejStaleConn:                 "stale connection",
	RejRDCNotExist:               "RDC does not exist",
	RejInvalidGID:                "invalid primary GID",
	RejInvalidLID:                "invalid primary LID",
	RejInvalidSL:                 "invalid primary SL",
	RejInvalidTrafficClass:       "invalid primary traffic class",
	RejInvalidHopLimit:           "invalid primary hop limit",
	RejInvalidPacketRate:         "invalid primary packet rate",
	RejInvalidAltGID:             "invalid alternate GID",
	RejInvalidAltLID:             "invalid alternate LID",
	RejInvalidAltSL:              "invalid alternate SL",
	RejInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejInvalidAltHopLimit:        "invalid alternate hop limit",
	RejInvalidAltPacketRate:      "invalid alternate packet rate",
	RejPortCMRedirect:            "port and CM redirection",
	RejPortRedirect:              "port redirection",
	RejInvalidMTU:                "invalid path MTU",
	RejInsufficientRespResources: "insufficient responder resources",
	RejConsumerDefined:           "consumer defined",
	RejInvalidRNRRetry:           "invalid RNR retry count",
	RejDuplicateLocalCommID:      "duplicate local communication ID",
	RejInvalidClassVersion:       "unsupported class version",
	RejInvalidFlowLabel:          "invalid primary flow label",
	RejInvalidAltFlowLabel:       "invalid alternate flow label",
	RejVendorOptionNotSupported:  "vendor option not supported",
}

// String returns a description of the reason, or "reason(n)" for codes
// without a name.
func (r RejectReason) String() string {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return rejectNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// RejectedMsg is the 2-bit "message rejected" field of a REJ.
type RejectedMsg uint8

// Messages a REJ can reject.
const (
	RejectedREQ   RejectedMsg = 0
	RejectedREP   RejectedMsg = 1
	RejectedOther RejectedMsg = 2 // no message, or one other than REQ and REP
)

// String returns "REQ", "REP", "Other" or "RejectedMsg(n)".
func (m RejectedMsg) String() string {
	switch m {
	case RejectedREQ:
		return "REQ"
	case RejectedREP:
		return "REP"
	case RejectedOther:
		return "Other"
	}
	return "RejectedMsg(" + strconv.Itoa(int(m)) + ")"
}

// MRAedMsg is the 2-bit "message MRAed" field of an MRA.
type MRAedMsg uint8

// Messages an MRA can acknowledge.
const (
	MRAedREQ MRAedMsg = 0
	MRAedREP MRAedMsg = 1
	MRAedLAP MRAedMsg = 2
)

// String returns "REQ", "REP", "LAP" or "MRAedMsg(n)".
func (m MRAedMsg) String() string {
	switch m {
	case MRAedREQ:
		return "REQ"
	case MRAedREP:
		return "REP"
	case MRAedLAP:
		return "LAP"
	}
	return "MRAedMsg(" + strconv.Itoa(int(m)) + ")"
}

// SIDRStatus is the status of a SIDR_REP (enum ib_cm_sidr_status in the
// kernel's include/rdma/ib_cm.h).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRValid              SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRServiceUnsupported SIDRStatus = 1 // service ID not supported
	SIDRRejected           SIDRStatus = 2 // rejected by the service provider
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // redirect; ClassPortInfo in AdditionalInfo
	SIDRVersionUnsupported SIDRStatus = 5 // class version not supported
)

// String returns a description of the status.
func (s SIDRStatus) String() string {
	switch s {
	case SIDRValid:
		return "valid"
	case SIDRServiceUnsupported:
		return "service ID not supported"
	case SIDRRejected:
		return "rejected"
	case SIDRNoQP:
		return "no QP"
	case SIDRRedirect:
		return "redirect"
	case SIDRVersionUnsupported:
		return "version not supported"
	}
	return "SIDRStatus(" + strconv.Itoa(int(s)) + ")"
}

// APStatus is the status of an APR (enum ib_cm_apr_status in the kernel's
// include/rdma/ib_cm.h).
type APStatus uint8

// APR statuses.
const (
	APLoaded              APStatus = 0
	APInvalidCommID       APStatus = 1
	APUnsupported         APStatus = 2
	APRejected            APStatus = 3
	APRedirect            APStatus = 4
	APIsCurrent           APStatus = 5
	APInvalidQPN          APStatus = 6
	APInvalidLID          APStatus = 7
	APInvalidGID          APStatus = 8
	APInvalidFlowLabel    APStatus = 9
	APInvalidTrafficClass APStatus = 10
	APInvalidHopLimit     APStatus = 11
	APInvalidPacketRate   APStatus = 12
	APInvalidSL           APStatus = 13
)

var apNames = [...]string{
	APLoaded:              "path loaded",
	APInvalidCommID:       "invalid communication ID",
	APUnsupported:         "alternate paths not supported",
	APRejected:            "rejected",
	APRedirect:            "redirect",
	APIsCurrent:           "path is the current one",
	APInvalidQPN:          "invalid QPN/EECN",
	APInvalidLID:          "invalid LID",
	APInvalidGID:          "invalid GID",
	APInvalidFlowLabel:    "invalid flow label",
	APInvalidTrafficClass: "invalid traffic class",
	APInvalidHopLimit:     "invalid hop limit",
	APInvalidPacketRate:   "invalid packet rate",
	APInvalidSL:           "invalid SL",
}

// String returns a description of the status.
func (s APStatus) String() string {
	if int(s) < len(apNames) {
		return apNames[s]
	}
	return "APStatus(" + strconv.Itoa(int(s)) + ")"
}
