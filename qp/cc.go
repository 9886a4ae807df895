package qp

import (
	"fmt"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/verbs"
)

// Congestion control: each RC and UC QP runs the machines of package
// congestion its mode asks for (Config.Congestion, QP.SetCongestion),
// from its own paths, under its lock:
//
//   - the QP's packets go out ECN-capable, ECT(0), when the mode uses
//     ECN (dataTOS);
//   - the receive path answers a CE-marked packet with a CNP to the
//     peer's QP, at most one per QP per MinTimeBetweenCNPs (cnp.go: the
//     notification point), and hands the CNPs it gets to DCQCN's
//     reaction point, whose rate a paced QP keeps to (pace.go);
//   - the completer hands its RTT samples (probe.go) and the PSNs each
//     ACK covers to the delay window, and NAKs and timeouts to it as
//     losses; the window bounds the PSNs in flight (reqState.cwnd).
//
// Mode Off is the engine before congestion control: the window halved at
// every retry and grown by an eighth per window (requester.go), no ECN;
// DCQCN, the default, keeps that window and adds ECN, CNPs and pacing.

// ccState is a QP's congestion control.
type ccState struct {
	cfg  *congestion.Config // the device's, or own
	own  congestion.Config  // the QP's own settings (SetCongestion)
	mode congestion.Mode
	win  congestion.Window
	rp   congestion.ReactionPoint
	pace congestion.Pacer
	// now is the time paceHeld read, for the packet it let go.
	now time.Time
	// lineRate is the rate a paced mode paces at when DCQCN does not
	// (Config.LineRate); 0: none.
	lineRate float64
	// The pacing timer (pace.go): set to fire at paceAt when armed.
	paceTimer clock.Timer
	paceAt    time.Time
	paceArmed bool
	// lastCNP is when the notification point last sent a CNP (cnp.go).
	lastCNP time.Time
	// turnUsed counts the request packets sent this turn (pace.go).
	turnUsed int
}

// resolveCongestion returns the resolved settings of c, or an error
// wrapping verbs.ErrInvalidAttr and congestion.ErrInvalid that names the
// setting.
func resolveCongestion(c *congestion.Config, where string) (congestion.Config, error) {
	r, err := c.Resolved()
	if err != nil {
		return r, fmt.Errorf("%w: qp: %s: %w", verbs.ErrInvalidAttr, where, err)
	}
	return r, nil
}

// ccStart readies the QP's machines as it connects (INIT to RTR), or
// takes new settings. The caller holds q.mu.
func (q *QP) ccStart() {
	c := &q.cc
	if c.cfg == nil {
		c.cfg = &q.dev.cc
	}
	c.mode = c.cfg.Mode
	if q.typ != verbs.RC && q.typ != verbs.UC {
		c.mode = congestion.Off // datagram QPs: no flow to control
	}
	q.ctr.clearModes()
	switch c.mode {
	case congestion.Auto:
		q.ctr.CCModeAuto = 1
	case congestion.Off:
		q.ctr.CCModeOff = 1
	case congestion.DCQCN:
		q.ctr.CCModeDCQCN = 1
	case congestion.Delay:
		q.ctr.CCModeDelay = 1
	}
	c.win.Init(&c.cfg.Delay, int(q.dev.maxUnacked))
	c.rp.Init(&c.cfg.DCQCN, c.cfg.LineRate)
	c.pace.Reset()
	c.lineRate = 0
	if c.mode.Paced() {
		c.lineRate = c.cfg.LineRate
	}
	c.lastCNP = time.Time{}
	q.ccWindow()
}

// ccWindow sets the requester's window from the delay window, in a mode
// that has one.
func (q *QP) ccWindow() {
	if q.cc.mode.Windowed() {
		q.req.cwnd = min(max(q.cc.win.Packets(), 1), q.dev.maxUnacked)
	}
}

// ccGrow takes n PSNs acknowledged, and reports whether the mode's window
// took them (false: the engine's own window grows, in Off and DCQCN).
func (q *QP) ccGrow(n uint32) bool {
	if !q.cc.mode.Windowed() {
		return false
	}
	q.cc.win.Acked(n)
	q.ccWindow()
	return true
}

// ccShrink takes a retry (a NAK's or a timeout's), and reports whether the
// mode took it (false: the engine's own window halves, in Off and DCQCN).
func (q *QP) ccShrink() bool {
	if !q.cc.mode.Windowed() {
		return false
	}
	before := q.cc.win.State().Cuts
	q.cc.win.Loss(&q.req.loss.rtt, q.dev.clk.Now())
	if q.cc.win.State().Cuts != before {
		q.ctr.CCWindowCuts++
	} else {
		q.ctr.CCLossesKept++
	}
	q.ccWindow()
	return true
}

// ccTimeout takes a retransmission timeout.
func (q *QP) ccTimeout(now time.Time) {
	if q.cc.mode.Windowed() {
		q.cc.win.Timeout(now)
		q.ctr.CCWindowCuts++
		q.ccWindow()
	}
}

// ccSample takes an RTT sample d the requester just took at now.
func (q *QP) ccSample(d time.Duration, now time.Time) {
	if q.cc.mode.Windowed() {
		before := q.cc.win.State().Cuts
		q.cc.win.Sample(d, &q.req.loss.rtt, now)
		if q.cc.win.State().Cuts != before {
			q.ctr.CCWindowCuts++
		}
		q.ccWindow()
	}
	if q.cc.mode.Paced() {
		q.cc.rp.Tick(now)
	}
}

// dataTOS returns the TOS byte of the QP's packets but CNPs: its traffic
// class, ECT(0) when the mode uses ECN and the traffic class sets no ECN
// bits itself. ACKs carry it too, as a NIC marks the whole QP's traffic:
// with one TOS, an ACK and the one-packet answer it goes after
// (requester.go's post) stay one GSO datagram, which the peer handles
// ACK first; a CE mark on an ACK draws no CNP (recv.go).
func (q *QP) dataTOS() uint8 {
	t := q.attr.AH.TrafficClass
	if t&ecnMask == 0 && q.cc.mode.ECN() {
		t |= ecnECT0
	}
	return t
}

// The ECN field, the low two bits of the TOS byte (RFC 3168).
const (
	ecnMask = 0x03
	ecnECT0 = 0x02
	ecnCE   = 0x03
)

// SetCongestion gives the QP congestion control settings of its own, in
// place of the device's (Config.Congestion), as a NIC's per-QP rate
// limit does; nil goes back to the device's. They apply from the QP's
// next move to RTR; on a connected QP (RTR, RTS, SQD), from now, its
// machines starting over. Bad settings are an error wrapping verbs.ErrInvalidAttr and
// congestion.ErrInvalid, and change nothing.
func (q *QP) SetCongestion(c *congestion.Config) error {
	if !q.ok() {
		return errNilQP
	}
	var r congestion.Config
	if c != nil {
		var err error
		if r, err = resolveCongestion(c, "SetCongestion"); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("%w: SetCongestion on QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	}
	if c == nil {
		q.cc.cfg = &q.dev.cc
	} else {
		q.cc.own = r
		q.cc.cfg = &q.cc.own
	}
	switch q.state {
	case verbs.StateRTR, verbs.StateRTS, verbs.StateSQD:
		q.ccStart()
	}
	return nil
}

// CongestionInfo is a QP's congestion control as it stands.
type CongestionInfo struct {
	// Mode is the mode the QP runs (Off for UD QPs); it is set as the
	// QP moves to RTR.
	Mode congestion.Mode
	// Window is the PSNs the requester may have in flight.
	Window uint32
	// RTT is the smoothed round-trip time, MinRTT the smallest (0 before
	// a sample).
	RTT, MinRTT time.Duration
	// Rate is DCQCN's reaction point.
	Rate congestion.RateState
}

// Congestion returns the QP's congestion control as it stands.
func (q *QP) Congestion() CongestionInfo {
	if !q.ok() {
		return CongestionInfo{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return CongestionInfo{Mode: q.cc.mode, Window: q.req.cwnd, RTT: q.req.loss.rtt.Smoothed(),
		MinRTT: q.req.loss.rtt.Min(), Rate: q.cc.rp.State(q.dev.clk.Now())}
}
