package rsocket

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestNilAndZero calls every exported function and method with nil, zero
// and out-of-range arguments: each returns an error, none panics.
func TestNilAndZero(t *testing.T) {
	ctx := context.Background()
	addr := netip.MustParseAddrPort("198.18.0.2:7471")
	var c *Conn
	var zc Conn
	for _, conn := range []*Conn{c, &zc} {
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Read: %v", err)
		}
		if _, err := conn.Write([]byte{1}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Write: %v", err)
		}
		for _, err := range []error{conn.Close(), conn.CloseWrite(), conn.SetDeadline(time.Now()),
			conn.SetReadDeadline(time.Now()), conn.SetWriteDeadline(time.Now())} {
			if !errors.Is(err, syscall.EINVAL) {
				t.Errorf("a nil Conn: %v", err)
			}
		}
		if conn.LocalAddr() != nil || conn.RemoteAddr() != nil {
			t.Error("addresses of a nil Conn")
		}
	}
	var l *Listener
	if _, err := l.Accept(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Accept: %v", err)
	}
	if err := l.Close(); !errors.Is(err, syscall.EINVAL) || l.Addr() != nil {
		t.Errorf("Close: %v", err)
	}
	var a *Addr
	if a.String() != "<nil>" || a.Network() != "rsocket" {
		t.Error("nil Addr")
	}
	if _, err := Dial(ctx, nil, addr); err == nil {
		t.Error("Dial without a device")
	}
	if _, err := Listen(ctx, nil, addr); err == nil {
		t.Error("Listen without a device")
	}
	var d *Dialer
	if _, err := d.DialContext(ctx, "tcp", "198.18.0.2:7471"); err == nil {
		t.Error("DialContext without a device")
	}
	if _, err := (&Dialer{}).DialContext(ctx, "udp", "198.18.0.2:7471"); err == nil {
		t.Error("DialContext on udp")
	}
	h := memHosts(t, transportNoFaults)
	for _, o := range []Options{{SendBuffer: 100}, {RecvBuffer: -1}, {SendQueue: 1 << 20}, {RecvQueue: 3},
		{Inline: 4096}, {MaxMessage: 1 << 29}, {ACKTimeout: 32}, {PathMTU: 6}} {
		if _, err := (&Dialer{Options: o}).Dial(ctx, h.a, addr); !errors.Is(err, ErrOption) {
			t.Errorf("Dial with %+v: %v", o, err)
		}
		if _, err := (&ListenConfig{Options: o}).Listen(ctx, h.b, addr); !errors.Is(err, ErrOption) {
			t.Errorf("Listen with %+v: %v", o, err)
		}
	}
}
