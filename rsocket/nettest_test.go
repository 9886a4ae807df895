package rsocket

import (
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/net/nettest"
)

// TestNetConn runs x/net/nettest's conformance suite for net.Conn over
// each backend.
func TestNetConn(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			h := be.open(t, transportNoFaults)
			var port atomic.Uint32
			port.Store(7000)
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				c, s, ln, err := h.connect(uint16(port.Add(1)), nil, nil)
				if err != nil {
					return nil, nil, nil, err
				}
				stop = func() {
					c.Close()
					s.Close()
					ln.Close()
				}
				return c, s, stop, nil
			})
		})
	}
}
