package roce

import (
	"fmt"

	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/verbs"
)

// CongestionInfo is a QP's congestion control as it stands: its mode,
// window, RTT and DCQCN rate (qp.CongestionInfo).
type CongestionInfo = qp.CongestionInfo

// softQP returns the engine's QP behind q (traced or not), and false for
// a QP of another backend.
func softQP(q verbs.QP) (*qp.QP, bool) {
	if t, ok := q.(*traceQP); ok {
		q = t.QP
	}
	s, ok := q.(*qp.QP)
	return s, ok
}

// SetCongestion gives the QP q congestion control settings of its own in
// place of its device's (Config.Congestion); nil goes back to the
// device's. See qp.QP.SetCongestion. It fails with an error wrapping
// verbs.ErrNil for a nil QP, verbs.ErrInvalidAttr for bad settings, and
// ErrNotSoft for a QP of another backend (a NIC's congestion control is
// its firmware's: mlxconfig, sysfs).
func SetCongestion(q verbs.QP, c *congestion.Config) error {
	if q == nil {
		return fmt.Errorf("roce: %w: SetCongestion of a nil QP", verbs.ErrNil)
	}
	s, ok := softQP(q)
	if !ok {
		return fmt.Errorf("roce: SetCongestion of a %T: %w", q, ErrNotSoft)
	}
	return s.SetCongestion(c)
}

// Congestion returns the QP q's congestion control as it stands, and
// false for a nil QP or one of another backend.
func Congestion(q verbs.QP) (CongestionInfo, bool) {
	s, ok := softQP(q)
	if !ok || s == nil {
		return CongestionInfo{}, false
	}
	return s.Congestion(), true
}

// ErrNotSoft means a call that only goroce's own engine carries out got a
// QP of another backend (hwverbs).
var ErrNotSoft = fmt.Errorf("%w: not a QP of goroce's engine", verbs.ErrInvalidAttr)
