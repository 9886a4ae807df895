//go:build !linux

package udp

import (
	"net/netip"
	"runtime"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Transport is the UDP transport. On this system it cannot be created: New
// returns ErrUnsupported. It is safe for concurrent use.
type Transport struct{}

var (
	_ transport.Transport           = (*Transport)(nil)
	_ transport.UnreachableNotifier = (*Transport)(nil)
)

// New returns ErrUnsupported: the UDP transport needs Linux's sendmmsg,
// recvmmsg and the IPv4 ID behaviour it predicts.
func New(cfg *Config) (*Transport, error) {
	if _, err := cfg.resolve(); err != nil {
		return nil, err
	}
	return nil, errorf(ErrUnsupported, "the udp transport is not implemented on %s", runtime.GOOS)
}

// Start fails: see New.
func (t *Transport) Start(transport.Handler) error { return errorf(ErrUnsupported, runtime.GOOS) }

// Send fails: see New.
func (t *Transport) Send([]transport.Packet) error { return errorf(ErrUnsupported, runtime.GOOS) }

// LocalAddr returns the zero Addr.
func (t *Transport) LocalAddr() netip.Addr { return netip.Addr{} }

// BatchSize returns DefaultBatchSize.
func (t *Transport) BatchSize() int { return DefaultBatchSize }

// MaxPacket returns DefaultMaxPacket.
func (t *Transport) MaxPacket() int { return DefaultMaxPacket }

// Stats returns zero counters.
func (t *Transport) Stats() transport.Stats { return transport.Stats{} }

// Close does nothing.
func (t *Transport) Close() error { return nil }

// LocalAddrPort returns the zero AddrPort.
func (t *Transport) LocalAddrPort() netip.AddrPort { return netip.AddrPort{} }

// LocalPort returns 4791.
func (t *Transport) LocalPort() uint16 { return bth.UDPPort }

// SendPort returns 0: nothing is sent on this system.
func (t *Transport) SendPort() uint16 { return 0 }

// PeerPort returns 4791.
func (t *Transport) PeerPort() uint16 { return bth.UDPPort }

// GSO reports false.
func (t *Transport) GSO() bool { return false }

// NotifyUnreachable never calls f: nothing is sent on this system.
func (t *Transport) NotifyUnreachable(f func(transport.Unreachable)) (stop func()) { return func() {} }

// GRO reports false.
func (t *Transport) GRO() bool { return false }

// JoinGroup fails: see New.
func (t *Transport) JoinGroup(netip.Addr) error { return errorf(ErrUnsupported, runtime.GOOS) }

// LeaveGroup fails: see New.
func (t *Transport) LeaveGroup(netip.Addr) error { return errorf(ErrUnsupported, runtime.GOOS) }

// Groups returns nil.
func (t *Transport) Groups() []netip.Addr { return nil }
