package afpacket

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/transport"
)

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics, and each error names what is
// wrong and what to do. A nil or zero Transport answers zero values, or
// ErrNil.
func TestNilArgs(t *testing.T) {
	var zero Transport
	apitest.Run(t, ".", apitest.Table{
		"New": func(t *testing.T) {
			_, err := New(nil)
			apitest.Err(t, err, ErrBadConfig, "no interface", "set Config.Interface")
			_, err = New(&Config{Interface: "lo", SendTimeout: -1})
			apitest.Err(t, err, ErrBadConfig, "negative timeout", "0 means the default")
			if _, err := New(&Config{Interface: "lo", MaxPacket: -1}); !errors.Is(err, ErrBadConfig) {
				t.Errorf("New with a negative max packet: %v", err)
			}
		},
		"Transport.LocalAddr": func(t *testing.T) { want(t, (*Transport)(nil).LocalAddr(), netip.Addr{}) },
		"Transport.LocalPort": func(t *testing.T) { want(t, zero.LocalPort(), uint16(0)) },
		"Transport.PeerPort":  func(t *testing.T) { want(t, zero.PeerPort(), uint16(0)) },
		"Transport.BatchSize": func(t *testing.T) { want(t, zero.BatchSize(), 0) },
		"Transport.MaxPacket": func(t *testing.T) { want(t, (*Transport)(nil).MaxPacket(), 0) },
		"Transport.Stats":     func(t *testing.T) { want(t, zero.Stats(), transport.Stats{}) },
		"Transport.Start": func(t *testing.T) {
			apitest.Err(t, zero.Start(func([]transport.Packet) {}), transport.ErrNil, "nil *Transport", "afpacket.New")
		},
		"Transport.Close":        func(t *testing.T) { apitest.Err(t, zero.Close(), transport.ErrNil) },
		"Transport.Send":         func(t *testing.T) { apitest.Err(t, (*Transport)(nil).Send(nil), transport.ErrNil) },
		"Transport.SendsPayload": func(t *testing.T) { want(t, zero.SendsPayload(), false) },
		"Transport.JoinGroup": func(t *testing.T) {
			apitest.Err(t, zero.JoinGroup(netip.Addr{}), transport.ErrNil, "nil *Transport")
		},
		"Transport.LeaveGroup": func(t *testing.T) {
			apitest.Err(t, (*Transport)(nil).LeaveGroup(netip.Addr{}), transport.ErrNil, "nil *Transport")
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
