package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
)

// Offload says whether the transport uses a kernel offload (UDP GSO or GRO).
type Offload int8

// Offload modes.
const (
	// OffloadAuto uses the offload where the kernel supports it and falls
	// back to one datagram per packet where it does not.
	OffloadAuto Offload = iota
	// OffloadOff never uses the offload.
	OffloadOff
	// OffloadOn requires the offload: New fails without it.
	OffloadOn
)

// String returns the mode's name.
func (o Offload) String() string {
	switch o {
	case OffloadAuto:
		return "auto"
	case OffloadOff:
		return "off"
	case OffloadOn:
		return "on"
	}
	return "invalid"
}

// Defaults for a zero Config field.
const (
	// DefaultBatchSize is the most packets moved by one sendmmsg or one
	// handler call.
	DefaultBatchSize = 64
	// DefaultMaxPacket bounds the RoCE packet (BTH through ICRC) when the
	// link allows more: a 4096-byte path MTU plus the longest header set
	// and the ICRC fits, with room to spare.
	DefaultMaxPacket = 4096 + 128
	// DefaultStreamSpin is Config.StreamSpin's default: about two GRO
	// trains at loopback speed.
	DefaultStreamSpin = 50 * time.Microsecond
	// StreamBytes is the smallest batch after which the receive loop
	// spins for StreamSpin: half a GRO train, far more than a batch of
	// acknowledgements or of small messages carries.
	StreamBytes = 32 << 10
	// DefaultSocketBuffer is the SO_RCVBUF and SO_SNDBUF asked for.
	DefaultSocketBuffer = 4 << 20
	// DefaultSendTimeout bounds how long Send waits for room in the
	// socket's send buffer.
	DefaultSendTimeout = time.Second
	// DefaultMulticastTTL is Config.MulticastTTL's default: 1, the
	// kernel's for multicast, so that a group's packets stay on the link.
	DefaultMulticastTTL = 1
)

// Config configures a Transport. A nil *Config means all defaults.
type Config struct {
	// Addr is the local address and UDP port. The IP is the address
	// behind the RoCEv2 GID; the unspecified address (0.0.0.0 or ::)
	// binds to all addresses, and then each sent packet's Src must be
	// set (it goes out with IP_PKTINFO) and each received packet's Dst
	// comes from IP_PKTINFO. The zero AddrPort means 0.0.0.0; port 0
	// means 4791. The address family decides IPv4 or IPv6 (an
	// IPv4-mapped IPv6 address means IPv4).
	Addr netip.AddrPort
	// PeerPort is the UDP port packets are sent to; 0 means 4791. Only
	// tests that run two transports on one address need another.
	PeerPort uint16
	// BatchSize is the most packets per sendmmsg, recvmmsg and handler
	// call; 0 means DefaultBatchSize.
	BatchSize int
	// MaxPacket is the largest RoCE packet (BTH through ICRC) sent or
	// received. 0 means the smaller of DefaultMaxPacket and what the MTU
	// of the interface holding Addr allows.
	MaxPacket int
	// GSO controls UDP generic segmentation offload on send, GRO UDP
	// generic receive offload.
	GSO, GRO Offload
	// BusyPoll, when positive, makes the receive loop spin on
	// non-blocking reads for up to this long after the last datagram
	// before it sleeps in the poller: lower latency for a core's worth of
	// CPU.
	BusyPoll time.Duration
	// StreamSpin is how long the receive loop looks again, yielding to
	// other goroutines between looks, before it sleeps in the poller
	// after a batch that carried at least StreamBytes: while a stream
	// flows, the next train is usually microseconds away, and a sleep
	// and wakeup per train costs both ends more than the wait. 0 means
	// DefaultStreamSpin; negative, never.
	StreamSpin time.Duration
	// ReadBuffer and WriteBuffer are the socket buffer sizes asked for; 0
	// means DefaultSocketBuffer. The kernel caps them at
	// net.core.rmem_max and wmem_max unless the process has
	// CAP_NET_ADMIN, in which case they are forced.
	ReadBuffer, WriteBuffer int
	// SendTimeout bounds how long Send waits for room in the socket's
	// send buffer; 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// Paths is how many receive and send paths the transport runs, for
	// machines with cores to spare: 0 or 1 means one. Each path is a
	// receiving socket on Addr (the paths' sockets share it with
	// SO_REUSEPORT), a sending socket of its own and a receive goroutine.
	// Packets leave on the path their destination QP number picks, from
	// that path's port, chosen so that the port modulo Paths is the path's
	// index; a received packet takes the path its UDP source port modulo
	// Paths picks (a BPF program on the sockets). A QP's packets therefore
	// always take one path each way, in order, and between two transports
	// with the same Paths a QP is handled on the same path at both ends.
	// Peers that set the source port per QP, as rxe and RNICs do, spread
	// their QPs over the paths too. Poll and Wait receive on the first
	// path; the others are served by their goroutines. At most MaxPaths.
	Paths int
	// MulticastTTL is the IPv4 TTL or IPv6 hop limit of packets sent to
	// multicast groups; 0 means DefaultMulticastTTL (1: the group's
	// packets stay on the link). rxe sends them with the address handle's
	// hop limit, 64 in the ones rdma_cm's IPv4 joins give.
	MulticastTTL uint8
	// Logger receives state changes (Debug) and fallbacks (Warn); nil
	// discards them. Nothing is logged per packet.
	Logger *slog.Logger
}

// MaxPaths bounds Config.Paths.
const MaxPaths = 64

// Errors returned by New and Send. They are wrapped with detail; check them
// with errors.Is.
var (
	// ErrUnsupported means the running system cannot provide what the
	// Config asks for: the socket code is Linux-only, and OffloadOn needs
	// a kernel with UDP GSO (4.18) or GRO (5.0).
	ErrUnsupported = errors.New("udp: not supported")
	// ErrBadConfig means a Config field is out of range.
	ErrBadConfig = errors.New("udp: bad config")
	// ErrBadPacket means a packet given to Send was too short to hold a
	// BTH and an ICRC, longer than MaxPacket, or had addresses of the
	// wrong family; it was counted in TxErrors and skipped.
	ErrBadPacket = errors.New("udp: bad packet")
	// ErrStarted means Start was called twice.
	ErrStarted = errors.New("udp: already started")
	// ErrNotStarted means Wait was called before Start.
	ErrNotStarted = errors.New("udp: not started")
)

// resolved is a Config with the defaults filled in and checked.
type resolved struct {
	Config
	ipv4     bool
	wildcard bool
}

func (c *Config) resolve() (resolved, error) {
	var r resolved
	if c != nil {
		r.Config = *c
	}
	if !r.Addr.IsValid() {
		r.Addr = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	ip := r.Addr.Addr()
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if ip.Zone() != "" {
		return r, errorf(ErrBadConfig, "address %v has a zone; use a global or loopback address", ip)
	}
	port := r.Addr.Port()
	if port == 0 {
		port = bth.UDPPort
	}
	r.Addr = netip.AddrPortFrom(ip, port)
	r.ipv4 = ip.Is4()
	r.wildcard = ip.IsUnspecified()
	if r.PeerPort == 0 {
		r.PeerPort = bth.UDPPort
	}
	if r.BatchSize == 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.BatchSize < 1 || r.BatchSize > 1024 {
		return r, errorf(ErrBadConfig, "batch size %d not in 1..1024", r.BatchSize)
	}
	if r.MaxPacket < 0 || r.MaxPacket > maxDatagram(r.ipv4) {
		return r, errorf(ErrBadConfig, "max packet %d not in 0..%d", r.MaxPacket, maxDatagram(r.ipv4))
	}
	for _, o := range []Offload{r.GSO, r.GRO} {
		if o < OffloadAuto || o > OffloadOn {
			return r, errorf(ErrBadConfig, "offload mode %d", o)
		}
	}
	if r.Paths < 0 || r.Paths > MaxPaths {
		return r, errorf(ErrBadConfig, "paths %d not in 0..%d", r.Paths, MaxPaths)
	}
	r.Paths = max(r.Paths, 1)
	if r.BusyPoll < 0 || r.ReadBuffer < 0 || r.WriteBuffer < 0 || r.SendTimeout < 0 {
		return r, errorf(ErrBadConfig, "negative busy poll, buffer size or timeout")
	}
	if r.StreamSpin == 0 {
		r.StreamSpin = DefaultStreamSpin
	}
	if r.ReadBuffer == 0 {
		r.ReadBuffer = DefaultSocketBuffer
	}
	if r.WriteBuffer == 0 {
		r.WriteBuffer = DefaultSocketBuffer
	}
	if r.SendTimeout == 0 {
		r.SendTimeout = DefaultSendTimeout
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// maxDatagram is the largest UDP payload an IP packet carries.
func maxDatagram(ipv4 bool) int {
	if ipv4 {
		return 65535 - 20 - 8
	}
	return 65535 - 8
}

// errorf wraps sentinel with a formatted detail.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
