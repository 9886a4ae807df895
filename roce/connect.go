package roce

import (
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Remote is what a program learns about the other end of a connection
// from the out-of-band exchange or the connection manager. It is plain
// data, safe to share once filled.
type Remote struct {
	QPN uint32
	PSN uint32 // the PSN the peer starts sending with
	GID [16]byte
}

// ConnParams are the attributes Connect gives a QP. The zero value (and a
// nil *ConnParams) gives the values of rdma-core's example programs: path
// MTU 1024, local ACK timeout 14, 7 retries, 7 RNR retries (forever),
// minimum RNR timer 12, one outstanding READ or atomic each way, every
// remote right. It is plain data, safe to share once filled.
type ConnParams struct {
	MTU bth.MTU
	// PSN is the PSN this side starts sending with.
	PSN uint32
	// Access is what the peer may do to this side's memory through the
	// QP; 0 means every remote right.
	Access          verbs.Access
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MinRNRTimer     uint8
	MaxRDAtomic     uint8
	MaxDestRDAtomic uint8
	TrafficClass    uint8
	HopLimit        uint8
	SGIDIndex       uint8
	// QKey is a UD QP's Q_Key; 0 means verbs.DefaultQKey.
	QKey uint32
	// NoAccess gives the peer no remote rights (Access 0 means all).
	NoAccess bool
}

func (p *ConnParams) withDefaults() ConnParams {
	c := ConnParams{}
	if p != nil {
		c = *p
	}
	if c.MTU == 0 {
		c.MTU = bth.MTU1024
	}
	if c.Access == 0 && !c.NoAccess {
		c.Access = verbs.LocalWrite | verbs.RemoteAccess
	}
	if c.Timeout == 0 {
		c.Timeout = 14
	}
	if c.RetryCnt == 0 {
		c.RetryCnt = 7
	}
	if c.RNRRetry == 0 {
		c.RNRRetry = 7
	}
	if c.MinRNRTimer == 0 {
		c.MinRNRTimer = 12
	}
	if c.MaxRDAtomic == 0 {
		c.MaxRDAtomic = 1
	}
	if c.MaxDestRDAtomic == 0 {
		c.MaxDestRDAtomic = 1
	}
	if c.HopLimit == 0 {
		c.HopLimit = 64
	}
	if c.QKey == 0 {
		c.QKey = verbs.DefaultQKey
	}
	return c
}

// checkQP reports a nil QP given to step.
func checkQP(q verbs.QP, step string) error {
	if q == nil {
		return fmt.Errorf("roce: %s: %w: a QP from PD.CreateQP is required", step, verbs.ErrNil)
	}
	return nil
}

// ModifyToInit moves a QP from RESET to INIT: port 1, P_Key index 0, and
// the remote rights (RC, UC) or the Q_Key (UD).
func ModifyToInit(q verbs.QP, p *ConnParams) error {
	if err := checkQP(q, "ModifyToInit"); err != nil {
		return err
	}
	c := p.withDefaults()
	a := verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: c.Access, QKey: c.QKey}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if q.Type() == verbs.UD || q.Type() == verbs.GSI {
		mask |= verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	if err := q.Modify(&a, mask); err != nil {
		return fmt.Errorf("roce: QP %d to INIT: %w", q.QPN(), err)
	}
	return nil
}

// ModifyToRTR moves a QP from INIT to RTR towards r; r may be nil for a
// UD QP.
func ModifyToRTR(q verbs.QP, r *Remote, p *ConnParams) error {
	if err := checkQP(q, "ModifyToRTR"); err != nil {
		return err
	}
	c := p.withDefaults()
	a := verbs.QPAttr{State: verbs.StateRTR}
	mask := verbs.AttrState
	switch q.Type() {
	case verbs.RC, verbs.UC:
		if err := checkRemote(q, r); err != nil {
			return err
		}
		a.PathMTU, a.DestQPN, a.RQPSN = c.MTU, r.QPN, bth.PSN(r.PSN)
		a.AH = verbs.AHAttr{DGID: r.GID, SGIDIndex: c.SGIDIndex, HopLimit: c.HopLimit, TrafficClass: c.TrafficClass, Port: 1}
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if q.Type() == verbs.RC {
			a.MaxDestRDAtomic, a.MinRNRTimer = c.MaxDestRDAtomic, c.MinRNRTimer
			mask |= verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer
		}
	}
	if err := q.Modify(&a, mask); err != nil {
		return fmt.Errorf("roce: QP %d to RTR: %w", q.QPN(), err)
	}
	return nil
}

// checkRemote checks what a connected QP needs to know of its peer.
func checkRemote(q verbs.QP, r *Remote) error {
	switch {
	case r == nil:
		return fmt.Errorf("roce: %v QP %d to RTR: %w: a *Remote with the peer's QPN, PSN and GID is required",
			q.Type(), q.QPN(), verbs.ErrNil)
	case r.GID == [16]byte{}:
		return fmt.Errorf("roce: %v QP %d to RTR: %w: the remote GID is missing (Remote.GID is zero): "+
			"set it to the peer's GID (its Device.GID(0), or verbs.GIDFromAddr of its address)", q.Type(), q.QPN(), verbs.ErrInvalidAttr)
	case r.QPN > bth.MaxQPN || r.PSN > bth.PSNMask:
		return fmt.Errorf("roce: QP %d to RTR: %w: remote QPN %#x or PSN %#x does not fit in 24 bits",
			q.QPN(), verbs.ErrInvalidAttr, r.QPN, r.PSN)
	}
	return nil
}

// ModifyToRTS moves a QP from RTR to RTS, sending from PSN p.PSN.
func ModifyToRTS(q verbs.QP, p *ConnParams) error {
	if err := checkQP(q, "ModifyToRTS"); err != nil {
		return err
	}
	c := p.withDefaults()
	if c.PSN > bth.PSNMask {
		return fmt.Errorf("roce: QP %d to RTS: %w: ConnParams.PSN %#x does not fit in 24 bits", q.QPN(), verbs.ErrInvalidAttr, c.PSN)
	}
	a := verbs.QPAttr{State: verbs.StateRTS, SQPSN: bth.PSN(c.PSN), Timeout: c.Timeout, RetryCnt: c.RetryCnt,
		RNRRetry: c.RNRRetry, MaxRDAtomic: c.MaxRDAtomic}
	mask := verbs.AttrState | verbs.AttrSQPSN
	if q.Type() == verbs.RC {
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRDAtomic
	}
	if err := q.Modify(&a, mask); err != nil {
		return fmt.Errorf("roce: QP %d to RTS: %w", q.QPN(), err)
	}
	return nil
}

// Connect moves a QP in RESET through INIT and RTR to RTS towards r (a QP
// already in INIT goes on from there). For UD, r may be nil.
func Connect(q verbs.QP, r *Remote, p *ConnParams) error {
	if err := checkQP(q, "Connect"); err != nil {
		return err
	}
	st, err := q.Query()
	if err != nil {
		return fmt.Errorf("roce: Connect: %w", err)
	}
	if st.State == verbs.StateReset {
		if err := ModifyToInit(q, p); err != nil {
			return err
		}
	}
	if err := ModifyToRTR(q, r, p); err != nil {
		return err
	}
	return ModifyToRTS(q, p)
}
