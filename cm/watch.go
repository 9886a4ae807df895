package cm

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// qpPollInterval is how often the agent looks at the state of a QP that
// cannot tell it when it enters ERR (roce.OnQPExit's ok is false: a QP of
// another backend).
const qpPollInterval = time.Second

// watchQP ends the connection when its QP enters the error state or is
// destroyed, so that Done fires when the peer stops answering; the caller
// holds a.mu. For a QP of goroce's engine the QP tells (roce.OnQPExit);
// any other QP is queried every qpPollInterval.
func (a *Agent) watchQP(c *Conn) {
	stop, ok := roce.OnQPExit(c.qp, func(e qp.Exit) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.qpExited(c, e)
	})
	if ok {
		c.unwatch = func() { stop() }
		return
	}
	a.pollQP(c)
}

// pollQP queries the state of a QP that cannot tell it, every
// qpPollInterval until the connection ends; the caller holds a.mu.
func (a *Agent) pollQP(c *Conn) {
	t := a.clk.AfterFunc(qpPollInterval, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed || c.flags.done {
			return
		}
		st, err := c.qp.Query()
		switch {
		case errors.Is(err, verbs.ErrDestroyed):
			a.qpExited(c, qp.Exit{Destroyed: true})
		case err == nil && st.State == verbs.StateErr:
			a.qpExited(c, qp.Exit{})
		default:
			a.pollQP(c)
		}
	})
	c.unwatch = func() { t.Stop() }
}

// qpExited ends a connection whose QP left service, with an error that
// says why; the caller holds a.mu.
func (a *Agent) qpExited(c *Conn, e qp.Exit) {
	if a.closed || c.flags.done {
		return
	}
	a.log.Debug("cm: QP left service", "local_id", c.info.LocalCommID, "qpn", c.info.LocalQPN,
		"status", e.Status, "modified", e.Modified, "destroyed", e.Destroyed)
	c.endLocked(qpExitError(c, e))
}

// qpExitError is the error of a connection whose QP left service.
func qpExitError(c *Conn, e qp.Exit) error {
	i := &c.info
	var why string
	switch {
	case e.Destroyed:
		why = fmt.Sprintf("QP %d was destroyed", i.LocalQPN)
	case e.Modified:
		why = fmt.Sprintf("QP %d was moved to ERR by Modify", i.LocalQPN)
	case e.Status == verbs.RetryExcErr:
		why = fmt.Sprintf("a work request completed %v: the peer acknowledged nothing in %d tries of %v (ACK timeout %d); "+
			"it may have died, or the path failed", e.Status, int(i.RetryCount)+1,
			cmTimeout(i.LocalACKTimeout).Round(time.Millisecond), i.LocalACKTimeout)
	case e.Status == verbs.RNRRetryExcErr:
		why = fmt.Sprintf("a work request completed %v: the peer had no receive posted for it after %d RNR retries",
			e.Status, i.RNRRetryCount)
	case e.Status != verbs.Success:
		why = fmt.Sprintf("a work request completed %v", e.Status)
	default:
		why = fmt.Sprintf("QP %d entered the error state", i.LocalQPN)
	}
	return fmt.Errorf("cm: connection to %v ended: %w: %s; close it", c.remote, ErrQPError, why)
}
