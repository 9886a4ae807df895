package rdmacm

import (
	"fmt"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// knownAttrs are the attribute mask bits of ibv_modify_qp that verbs
// names (IBV_QP_STATE to IBV_QP_DEST_QPN). The kernel's rdma_cm may set
// bits above them that ibv_modify_qp refuses (librdmacm clears them for
// InfiniBand ports; on RoCE they carry nothing the QP needs).
const knownAttrs = verbs.AttrMask(1<<21 - 1)

// qpAttrs is what rdma_init_qp_attr gives for one state of a
// connection's QP: the attributes, their mask, and the GID table index
// of the address vector's source GID.
type qpAttrs struct {
	attr      verbs.QPAttr
	mask      verbs.AttrMask
	sgidTable int
}

// forDevice returns the attributes as a hwverbs QP takes them, on a
// device whose GID index 0 is its table entry chosen (hwverbs numbers
// GIDs so): the source GID's table index becomes hwverbs's.
func (a *qpAttrs) forDevice(chosen int) (verbs.QPAttr, verbs.AttrMask, error) {
	at, mask := a.attr, a.mask&knownAttrs
	if mask&verbs.AttrAV != 0 {
		switch {
		case a.sgidTable == chosen:
			at.AH.SGIDIndex = 0
		case a.sgidTable == 0 || a.sgidTable > 255:
			return at, mask, fmt.Errorf("rdmacm: %w: rdma_cm chose GID table entry %d for this connection, which a "+
				"hwverbs device using entry %d cannot name: open the device with hwverbs.Config.GIDIndex %d "+
				"(or GIDAddr, the local address of the connection)", cm.ErrAddr, a.sgidTable, chosen, a.sgidTable)
		default:
			at.AH.SGIDIndex = uint8(a.sgidTable)
		}
	}
	return at, mask, nil
}

// keep, as a depth for setRTR or setRTS, keeps rdma_cm's value.
const keep = -1

// setRTR applies this side's choices to the RTR attributes: the READ and
// atomic requests it serves (keep takes rdma_cm's, which the kernel took
// from the REP for the dialling side) and its minimum RNR timer.
func (a *qpAttrs) setRTR(p *Params, responderResources int) {
	if responderResources != keep {
		a.attr.MaxDestRDAtomic = uint8(responderResources)
		a.mask |= verbs.AttrMaxDestRDAtomic
	}
	if p.MinRNRTimer != 0 {
		a.attr.MinRNRTimer = p.MinRNRTimer
		a.mask |= verbs.AttrMinRNRTimer
	}
}

// setRTS applies this side's choices to the RTS attributes: the READ and
// atomic requests it issues (keep takes rdma_cm's) and its ACK timeout.
func (a *qpAttrs) setRTS(p *Params, initiatorDepth int) {
	if initiatorDepth != keep {
		a.attr.MaxRDAtomic = uint8(initiatorDepth)
		a.mask |= verbs.AttrMaxQPRDAtomic
	}
	if p.ACKTimeout != 0 {
		a.attr.Timeout = p.ACKTimeout
		a.mask |= verbs.AttrTimeout
	}
}

// connInfo is what the QP of a connection took in RTR and RTS.
func connInfo(qpn uint32, rtr, rts *qpAttrs) ConnInfo {
	return ConnInfo{
		LocalQPN: qpn, RemoteQPN: rtr.attr.DestQPN,
		SendPSN: uint32(rts.attr.SQPSN), RecvPSN: uint32(rtr.attr.RQPSN),
		ResponderResources: rtr.attr.MaxDestRDAtomic, InitiatorDepth: rts.attr.MaxRDAtomic,
		PathMTU: rtr.attr.PathMTU, RetryCount: rts.attr.RetryCnt, RNRRetryCount: rts.attr.RNRRetry,
		LocalACKTimeout: rts.attr.Timeout, MinRNRTimer: rtr.attr.MinRNRTimer,
	}
}
