package mem

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/transport"
)

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics, and each error names what is
// wrong and what to do.
func TestNilArgs(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.1")
	newEP := func(t *testing.T) (*Network, *Endpoint) {
		n := NewNetwork(nil)
		e, err := n.Endpoint(a)
		if err != nil {
			t.Fatal(err)
		}
		return n, e
	}
	apitest.Run(t, ".", apitest.Table{
		"NewNetwork": func(t *testing.T) {
			n := NewNetwork(&Config{MaxPacket: -1, BatchSize: -1, Latency: -time.Second, ReorderDelay: -1})
			e, err := n.Endpoint(a)
			if err != nil || e.MaxPacket() != 4096+64 || e.BatchSize() != 64 {
				t.Errorf("negative sizes: %v, max packet %d, batch %d", err, e.MaxPacket(), e.BatchSize())
			}
		},
		"Network.Clock": func(t *testing.T) {
			if _, ok := (*Network)(nil).Clock().(clock.Real); !ok {
				t.Error("a nil Network's clock is not the system clock")
			}
		},
		"Network.Stats":     func(t *testing.T) { want(t, (&Network{}).Stats(), Stats{}) },
		"Network.SetFaults": func(t *testing.T) { (*Network)(nil).SetFaults(Faults{}) },
		"Network.Close":     func(t *testing.T) { (*Network)(nil).Close() },
		"Network.SetPort": func(t *testing.T) {
			apitest.Err(t, (*Network)(nil).SetPort(a, &Port{Rate: 1}), transport.ErrNil, "nil *Network", "NewNetwork")
			apitest.Err(t, NewNetwork(nil).SetPort(a, &Port{}), ErrBadPort, "positive line rate")
		},
		"Network.PortStats": func(t *testing.T) {
			want(t, (*Network)(nil).PortStats(a), PortStats{})
			want(t, NewNetwork(nil).PortStats(a), PortStats{})
		},
		"Network.Endpoint": func(t *testing.T) {
			_, err := (*Network)(nil).Endpoint(a)
			apitest.Err(t, err, transport.ErrNil, "nil *Network", "NewNetwork")
			n := NewNetwork(nil)
			_, err = n.Endpoint(netip.Addr{})
			apitest.Err(t, err, nil, "needs an IP address")
			n.Endpoint(a)
			_, err = n.Endpoint(a)
			apitest.Err(t, err, nil, "in use", "close its endpoint first")
		},
		"Network.Run": func(t *testing.T) {
			apitest.Err(t, NewNetwork(nil).Run(nil, time.Second), transport.ErrNil, "done function")
			live := NewNetwork(&Config{Live: true})
			defer live.Close()
			apitest.Err(t, live.Run(func() bool { return false }, time.Second), nil, "simulation mode", "without Live")
			if err := NewNetwork(nil).Run(func() bool { return false }, time.Second); !errors.Is(err, ErrIdle) {
				t.Errorf("an empty network ran: %v", err)
			}
		},
		"Network.Step": func(t *testing.T) { want(t, (*Network)(nil).Step(), false) },
		"Endpoint.Start": func(t *testing.T) {
			_, e := newEP(t)
			apitest.Err(t, e.Start(nil), transport.ErrNil, "Handler")
			apitest.Err(t, (&Endpoint{}).Start(func([]transport.Packet) {}), transport.ErrNil, "nil *Endpoint")
		},
		"Endpoint.LocalAddr": func(t *testing.T) { want(t, (*Endpoint)(nil).LocalAddr(), netip.Addr{}) },
		"Endpoint.JoinGroup": func(t *testing.T) {
			apitest.Err(t, (*Endpoint)(nil).JoinGroup(netip.Addr{}), transport.ErrNil, "nil *Endpoint")
			_, e := newEP(t)
			apitest.Err(t, e.JoinGroup(netip.Addr{}), nil, "not a multicast address")
			apitest.Err(t, e.JoinGroup(a), nil, "not a multicast address")
			g := netip.MustParseAddr("239.255.0.1")
			must(t, e.JoinGroup(g))
			apitest.Err(t, e.JoinGroup(g), nil, "joined 239.255.0.1 already")
			must(t, e.Close())
			apitest.Err(t, e.JoinGroup(netip.MustParseAddr("239.255.0.2")), nil, "after Close")
		},
		"Endpoint.LeaveGroup": func(t *testing.T) {
			apitest.Err(t, (*Endpoint)(nil).LeaveGroup(netip.Addr{}), transport.ErrNil, "nil *Endpoint")
			_, e := newEP(t)
			apitest.Err(t, e.LeaveGroup(netip.Addr{}), nil, "has not joined")
		},
		"Endpoint.BatchSize": func(t *testing.T) { want(t, (*Endpoint)(nil).BatchSize(), 0) },
		"Endpoint.MaxPacket": func(t *testing.T) { want(t, (*Endpoint)(nil).MaxPacket(), 0) },
		"Endpoint.Stats":     func(t *testing.T) { want(t, (*Endpoint)(nil).Stats(), transport.Stats{}) },
		"Endpoint.Close":     func(t *testing.T) { apitest.Err(t, (*Endpoint)(nil).Close(), transport.ErrNil) },
		"Endpoint.NotifyUnreachable": func(t *testing.T) {
			(*Endpoint)(nil).NotifyUnreachable(func(transport.Unreachable) { t.Error("a nil endpoint spoke") })()
		},
		"Endpoint.SendsPayload": func(t *testing.T) {
			want(t, (*Endpoint)(nil).SendsPayload(), false)
		},
		"Endpoint.Send": func(t *testing.T) {
			n, e := newEP(t)
			// A packet too short to seal, to its own address: delivered,
			// and dropped as malformed.
			var got int
			must(t, e.Start(func(p []transport.Packet) { got += len(p) }))
			must(t, e.Send([]transport.Packet{{Data: []byte{1}, Payload: []byte{2}, Src: a, Dst: a}, {}}))
			n.Run(func() bool { return false }, time.Millisecond)
			if got != 0 || e.Stats().RxMalformed != 1 || n.Stats().Unroutable != 1 {
				t.Errorf("delivered %d, stats %+v, network %+v", got, e.Stats(), n.Stats())
			}
			must(t, e.Close())
			if err := e.Send(nil); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Send after Close: %v", err)
			}
		},
	})
	apitest.NilReceivers(t, ".", (*Network)(nil), (*Endpoint)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
