package afpacket

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
)

// Defaults for a zero Config field.
const (
	DefaultBatchSize = 64
	// DefaultMaxPacket bounds the RoCE packet (BTH through ICRC) when the
	// interface MTU allows more: a 4096-byte path MTU, headers and ICRC.
	DefaultMaxPacket = 4096 + 128
	// DefaultResolveTimeout bounds the wait for the kernel to resolve a
	// next hop's link-layer address.
	DefaultResolveTimeout = 3 * time.Second
	// DefaultNeighborTTL is how long a resolved MAC address is used
	// before the neighbour table is read again.
	DefaultNeighborTTL = 30 * time.Second
	// DefaultSendTimeout bounds how long Send waits for room in the
	// socket's send buffer.
	DefaultSendTimeout = time.Second
)

// Config configures a Transport. Interface is required.
type Config struct {
	// Interface is the name of the Ethernet (or loopback) interface.
	Interface string
	// Addr is the local IP address: the address behind the RoCEv2 GID.
	// The zero Addr means the interface's first IPv4 address, else its
	// first global IPv6 address. The family decides IPv4 or IPv6.
	Addr netip.Addr
	// Port is the local UDP port; PeerPort the one packets are sent to.
	// 0 means 4791 for both.
	Port, PeerPort uint16
	// TOS is DSCP << 2 | ECN: its DSCP goes on packets whose own TOS has
	// none, its ECN bits on packets whose own has none (the engine's data
	// packets carry ECT(0) when congestion control uses ECN).
	TOS uint8
	// TTL is the IPv4 TTL or IPv6 hop limit; 0 means 64.
	TTL uint8
	// BatchSize is the most packets per sendmmsg, recvmmsg and handler
	// call; 0 means DefaultBatchSize.
	BatchSize int
	// MaxPacket is the largest RoCE packet (BTH through ICRC); 0 means
	// the smaller of DefaultMaxPacket and what the interface MTU allows.
	MaxPacket int
	// ResolveTimeout, NeighborTTL and SendTimeout: 0 means the defaults.
	ResolveTimeout, NeighborTTL, SendTimeout time.Duration
	// Logger receives state changes (Debug) and resolution failures
	// (Warn); nil discards them. Nothing is logged per packet.
	Logger *slog.Logger
}

// Errors. They are wrapped with detail; check them with errors.Is.
var (
	// ErrUnsupported: AF_PACKET sockets exist only on Linux.
	ErrUnsupported = errors.New("afpacket: not supported")
	// ErrBadConfig means a Config field is missing or out of range.
	ErrBadConfig = errors.New("afpacket: bad config")
	// ErrBadPacket means a packet given to Send was too short, too long,
	// or addressed to the wrong family; it was counted in TxErrors.
	ErrBadPacket = errors.New("afpacket: bad packet")
	// ErrNoNeighbor means the next hop's link-layer address could not be
	// resolved (no route through the interface, or no ARP/NDP answer
	// within ResolveTimeout).
	ErrNoNeighbor = errors.New("afpacket: next hop not resolved")
	// ErrStarted means Start was called twice.
	ErrStarted = errors.New("afpacket: already started")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

func (c *Config) withDefaults() (Config, error) {
	var r Config
	if c != nil {
		r = *c
	}
	if r.Interface == "" {
		return r, errorf(ErrBadConfig, "no interface: set Config.Interface to the one to send on (ip link lists them)")
	}
	if r.Addr.Is4In6() {
		r.Addr = r.Addr.Unmap()
	}
	if r.Port == 0 {
		r.Port = bth.UDPPort
	}
	if r.PeerPort == 0 {
		r.PeerPort = bth.UDPPort
	}
	if r.BatchSize == 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.BatchSize < 1 || r.BatchSize > 1024 {
		return r, errorf(ErrBadConfig, "batch size %d not in 1..1024", r.BatchSize)
	}
	if r.MaxPacket < 0 || r.MaxPacket > 65535-40-8 {
		return r, errorf(ErrBadConfig, "max packet %d not in 0 (the interface's MTU)..%d", r.MaxPacket, 65535-40-8)
	}
	if r.ResolveTimeout < 0 || r.NeighborTTL < 0 || r.SendTimeout < 0 {
		return r, errorf(ErrBadConfig, "negative timeout (resolve %v, neighbor TTL %v, send %v): 0 means the default",
			r.ResolveTimeout, r.NeighborTTL, r.SendTimeout)
	}
	if r.ResolveTimeout == 0 {
		r.ResolveTimeout = DefaultResolveTimeout
	}
	if r.NeighborTTL == 0 {
		r.NeighborTTL = DefaultNeighborTTL
	}
	if r.SendTimeout == 0 {
		r.SendTimeout = DefaultSendTimeout
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r, nil
}
