package udp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/transport"
)

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics, and each error names what is
// wrong. A nil or zero Transport answers zero values, or ErrNil.
func TestNilArgs(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	var zero Transport
	apitest.Run(t, ".", apitest.Table{
		"Offload.String": func(t *testing.T) { want(t, Offload(-1).String(), "invalid") },
		"New": func(t *testing.T) {
			if _, err := New(&Config{BatchSize: -1}); !errors.Is(err, ErrBadConfig) {
				t.Errorf("New with a negative batch: %v", err)
			}
			tr := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo))})
			apitest.Err(t, tr.Start(nil), ErrBadConfig, "nil handler")
		},
		"Transport.LocalAddr":     func(t *testing.T) { want(t, (*Transport)(nil).LocalAddr(), netip.Addr{}) },
		"Transport.LocalAddrPort": func(t *testing.T) { want(t, zero.LocalAddrPort(), netip.AddrPort{}) },
		"Transport.LocalPort":     func(t *testing.T) { want(t, zero.LocalPort(), uint16(0)) },
		"Transport.SendPort":      func(t *testing.T) { want(t, (*Transport)(nil).SendPort(), uint16(0)) },
		"Transport.PeerPort":      func(t *testing.T) { want(t, zero.PeerPort(), uint16(0)) },
		"Transport.BatchSize":     func(t *testing.T) { want(t, zero.BatchSize(), 0) },
		"Transport.MaxPacket":     func(t *testing.T) { want(t, (*Transport)(nil).MaxPacket(), 0) },
		"Transport.GSO":           func(t *testing.T) { want(t, zero.GSO(), false) },
		"Transport.GRO":           func(t *testing.T) { want(t, (*Transport)(nil).GRO(), false) },
		"Transport.Stats":         func(t *testing.T) { want(t, zero.Stats(), transport.Stats{}) },
		"Transport.Start": func(t *testing.T) {
			apitest.Err(t, zero.Start(func([]transport.Packet) {}), transport.ErrNil, "nil *Transport", "udp.New")
		},
		"Transport.Poll": func(t *testing.T) { want(t, zero.Poll(), 0) },
		"Transport.Wait": func(t *testing.T) {
			_, err := zero.Wait(time.Time{}, nil)
			apitest.Err(t, err, transport.ErrNil, "nil *Transport")
			tr := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo))})
			_, err = tr.Wait(time.Time{}, nil)
			apitest.Err(t, err, ErrNotStarted, "start the transport first")
		},
		"Transport.Wake":         func(t *testing.T) { zero.Wake(); (*Transport)(nil).Wake() },
		"Transport.Close":        func(t *testing.T) { apitest.Err(t, zero.Close(), transport.ErrNil) },
		"Transport.Send":         func(t *testing.T) { apitest.Err(t, (*Transport)(nil).Send(nil), transport.ErrNil) },
		"Transport.SendsPayload": func(t *testing.T) { want(t, zero.SendsPayload(), false) },
		"Transport.NotifyUnreachable": func(t *testing.T) {
			zero.NotifyUnreachable(func(transport.Unreachable) { t.Error("a zero transport spoke") })()
		},
		"Transport.JoinGroup": func(t *testing.T) {
			apitest.Err(t, zero.JoinGroup(netip.Addr{}), transport.ErrNil, "nil *Transport")
			tr := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo))})
			apitest.Err(t, tr.JoinGroup(netip.Addr{}), nil, "not a multicast address")
			apitest.Err(t, tr.JoinGroup(netip.MustParseAddr("239.255.0.1")), ErrNotStarted, "start the transport first")
		},
		"Transport.LeaveGroup": func(t *testing.T) {
			apitest.Err(t, (*Transport)(nil).LeaveGroup(netip.Addr{}), transport.ErrNil, "nil *Transport")
			tr := mustNew(t, &Config{Addr: netip.AddrPortFrom(lo, freePort(t, lo))})
			apitest.Err(t, tr.LeaveGroup(netip.MustParseAddr("239.255.0.1")), nil, "not joined")
		},
		"Transport.Groups": func(t *testing.T) { want(t, len(zero.Groups()), 0) },
	})
	apitest.NilReceivers(t, ".", (*Transport)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
