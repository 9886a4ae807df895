package cm

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
)

// watchUnreachable has the device's notices that a destination is
// unreachable handed to the agent's goroutine; a notice that finds the
// agent's queue full is dropped (the retries still decide). It returns
// the function that stops them.
func (a *Agent) watchUnreachable(dev *roce.Device) func() {
	return dev.NotifyUnreachable(func(u transport.Unreachable) {
		select {
		case a.unreach <- u:
		default:
		}
	})
}

// unreachable ends the exchanges with a destination the network reports
// unreachable: a Dial or ResolveDatagram waiting for an answer fails with
// ErrUnreachable, an Accept waiting for the RTU too, and a DREQ is not
// sent again. Established connections are left to their QPs' retries. A
// notice about a packet that was not a MAD (quoted with its BTH) is
// ignored.
func (a *Agent) unreachable(u transport.Unreachable) {
	if len(u.Packet) >= bth.BTHLen && bth.BTH(u.Packet).DestQP() != bth.GSIQPN {
		return
	}
	dst := u.Dst.Unmap()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, c := range a.conns {
		if c.peer != dst {
			continue
		}
		switch c.state {
		case stREQSent, stMRAReqRcvd, stREPSent, stMRARepRcvd:
			what := "connect to"
			if !c.active {
				what = "accept from"
			}
			a.log.Debug("cm: peer unreachable", "local_id", c.info.LocalCommID, "state", c.state, "err", u.Err)
			a.toErr(c)
			c.fail(unreachableError(what, c.remote, u))
			a.forget(c)
		case stDREQSent:
			c.closeDone(unreachableError("disconnect from", c.remote, u))
			a.timeWait(c)
		}
	}
	for _, q := range a.sidr {
		if q.dst.Addr() == dst {
			q.finish(nil, unreachableError("resolve", q.dst, u))
			a.dropSIDR(q)
		}
	}
}

// unreachableError says that to is unreachable, why, and what to check.
func unreachableError(what string, to netip.AddrPort, u transport.Unreachable) error {
	hint := "check the address, and the route to it"
	switch {
	case u.From.IsValid() && u.From == u.Dst.Unmap():
		// The host itself answered: it is up, but nothing receives
		// RoCEv2 on the port.
		hint = fmt.Sprintf("nothing receives RoCEv2 at %v; check the address, and that the peer runs goroce or has an "+
			"RDMA device (soft-RoCE: rdma link add rxe0 type rxe netdev IFACE) on the same UDP port", u.From)
	case u.From.IsValid():
		hint = fmt.Sprintf("reported by %v; check the address, and the route to it", u.From)
	}
	return fmt.Errorf("cm: %s %v: %w: %w; %s", what, to, inner{ErrUnreachable}, u.Err, hint)
}
