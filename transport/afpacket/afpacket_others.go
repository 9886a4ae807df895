//go:build !linux

package afpacket

import (
	"net/netip"
	"runtime"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Transport is the AF_PACKET transport. On this system it cannot be
// created: New returns ErrUnsupported. It is safe for concurrent use.
type Transport struct{}

var _ transport.Transport = (*Transport)(nil)

// New returns ErrUnsupported: AF_PACKET sockets are Linux-only. Use the udp
// transport.
func New(cfg *Config) (*Transport, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errorf(ErrUnsupported, "AF_PACKET is not available on %s; use the udp transport", runtime.GOOS)
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

// LocalPort returns 4791.
func (t *Transport) LocalPort() uint16 { return bth.UDPPort }

// PeerPort returns 4791.
func (t *Transport) PeerPort() uint16 { return bth.UDPPort }

// JoinGroup fails: see New.
func (t *Transport) JoinGroup(netip.Addr) error { return errorf(ErrUnsupported, runtime.GOOS) }

// LeaveGroup fails: see New.
func (t *Transport) LeaveGroup(netip.Addr) error { return errorf(ErrUnsupported, runtime.GOOS) }

// Groups returns nil.
func (t *Transport) Groups() []netip.Addr { return nil }
