package roce

import (
	"fmt"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/verbs"
)

// CQSink takes the completions of a CQ that CreateCQSink made, in place of
// the CQ's own ring (qp.CQSink says how the engine calls it).
type CQSink = qp.CQSink

// CreateCQSink returns a completion queue whose completions go to s (a
// ring in memory another process polls, as package uverbs keeps one): its
// Poll finds none. cqe is checked as CreateCQ checks it.
func (d *Device) CreateCQSink(cqe int, s CQSink) (verbs.CQ, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	return d.dev.eng.CreateCQSink(cqe, s)
}

// RegMRIOVA registers buf in pd, a protection domain of an untraced
// Device, at address iova: SGEs and peers name buf[0] as iova
// (ibv_reg_mr_iova). The caller must not let buf go until the region is
// deregistered.
func RegMRIOVA(pd verbs.PD, buf []byte, iova uint64, access verbs.Access) (verbs.MR, error) {
	p, ok := pd.(*qp.PD)
	if !ok || p == nil {
		return nil, fmt.Errorf("roce: %w: RegMRIOVA takes a PD of an untraced roce Device (got %T)", verbs.ErrForeign, pd)
	}
	return p.RegMRIOVA(buf, iova, access)
}

// Limits of the software device: the most work requests a queue holds,
// SGEs a request has, inline bytes a send carries, completions a CQ holds
// and READs and atomics a QP has outstanding, and the queue pairs a device
// has by default (Config.MaxQPs).
const (
	MaxWR         = qp.MaxWR
	MaxSGE        = qp.MaxSGE
	MaxInlineData = qp.MaxInlineData
	MaxCQE        = qp.MaxCQE
	MaxRDAtomic   = qp.MaxRDAtomic
	DefaultMaxQPs = qp.DefaultMaxQPs
)
