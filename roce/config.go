package roce

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
)

// Config says how Open builds a device: the link its packets travel, the
// engine's settings, and what watches it. A nil *Config, and zero fields,
// mean the defaults: RoCEv2 over UDP on 127.0.0.1, port 4791, nothing
// traced. Open reads it, never writes it; it is plain data.
type Config struct {
	// The link.

	// Link is how the device's packets travel: a *UDP (nil means
	// &UDP{}: UDP sockets on 127.0.0.1:4791, no privileges needed), an
	// *AFPacket (raw Ethernet frames) or a *Mem (an in-memory network,
	// for tests and programs that run both ends).
	Link Link
	// Transport, when set, is the link: one the program made itself (a
	// wrapper that injects faults, a test's). Open starts it and Close
	// closes it. Link must then be nil.
	Transport transport.Transport

	// The engine.

	// BusyPoll, when positive, puts the device in busy-poll mode: a
	// CQ.Poll that finds the CQ empty receives from the link on the
	// caller's goroutine first, so a program that spins on its CQ drives
	// the receive path itself (the lowest latency, for a core); while no
	// program polls, the UDP link's receive loop spins this long on an
	// empty socket before it sleeps.
	BusyPoll time.Duration
	// MaxUnackedPSNs bounds the packets in flight per QP (0: the engine's
	// default, 512).
	MaxUnackedPSNs int
	// SeqNAKWindow, when positive, drops RC requests further ahead of
	// the expected PSN than this without the PSN sequence error NAK the
	// IBTA asks for (0, the default): a defence against spoofed requests
	// that would make the peer's requester resend what was not lost. See
	// qp.Config.SeqNAKWindow.
	SeqNAKWindow int
	// MaxQPs and MaxMRs bound the queue pairs, and the memory regions
	// and windows together, the device has at once (0: qp.DefaultMaxQPs,
	// 65,536, and mr.DefaultMaxRegions, 262,144); CreateQP, RegMR and
	// AllocMW beyond them fail.
	MaxQPs, MaxMRs int
	// Congestion is the congestion control of the device's QPs (package
	// congestion): nil means the defaults, Mode DCQCN (ECT(0) on data
	// packets, CNPs for CE marks, DCQCN's rate from the CNPs that come);
	// Mode Auto adds the delay window, for shared paths where nothing
	// marks. SetCongestion changes one QP's. See the README's "On a
	// shared network".
	Congestion *congestion.Config
	// LossProbe is the shortest wait without an acknowledgement after
	// which a requester sends its oldest packet again, alone, to learn
	// what the peer has (0: qp.DefaultLossProbe, 1 ms; negative: none).
	// See qp.Config.LossProbe.
	LossProbe time.Duration
	// Clock runs the engine's timers; nil is the system clock. Tests use
	// a clock.Manual to be deterministic.
	Clock clock.Clock
	// Logger receives the engine's and the link's debug records (state
	// changes, with qpn and psn attributes); nil discards.
	Logger *slog.Logger

	// Watching and testing.

	// Trace, when set, narrates every step the program takes on the
	// device (each verb, work request and completion), as Trace does:
	// Open returns the traced device.
	Trace *slog.Logger
	// Pcap names a file to record every packet sent and received in, with
	// IP and UDP headers, for roce decode or tshark.
	Pcap string
	// Faults, when set, are applied to what the device sends (seeded by
	// FaultSeed), to test reliability over a real link; Device.Stats
	// counts what they did.
	Faults    transport.Faults
	FaultSeed uint64
}

// Link says how a device's packets travel: one of *UDP, *AFPacket and
// *Mem, whose fields say where. A nil pointer of one of them means its
// defaults. (A transport a program made itself goes in Config.Transport.)
type Link interface {
	// open makes the link's transport; c is the whole configuration,
	// with a logger that is never nil.
	open(c *Config) (transport.Transport, error)
}

// UDP is the link of RoCEv2 over UDP sockets, as rxe and RNICs send it:
// no privileges needed, with UDP GSO and GRO where the kernel has them.
// It is plain data.
type UDP struct {
	// Addr is the local IP address: the source of every packet and the
	// device's GID. Default 127.0.0.1.
	Addr netip.Addr
	// Port is the local UDP port, and PeerPort the one peers listen on;
	// both default to bth.UDPPort (4791), the port every RoCEv2 device
	// uses. Two devices on one address need two ports.
	Port, PeerPort uint16
	// NoOffload turns UDP GSO and GRO off.
	NoOffload bool
	// Paths is how many receive and send paths (a socket pair and a
	// receive goroutine each) the link runs, for machines with more
	// cores than the engine keeps busy on one: 0 or 1 means one. Each
	// QP's packets keep to one path; see udp.Config.Paths.
	Paths int
}

// AFPacket is the link of raw Ethernet frames (AF_PACKET): goroce builds
// the IP and UDP headers itself, with the UDP source port per QP that rxe
// uses. It needs CAP_NET_RAW, and Linux. It is plain data.
type AFPacket struct {
	// Interface is the network interface; default, the one that holds
	// Addr.
	Interface string
	// Addr is the local IP address: the source of every packet and the
	// device's GID. Default, the interface's first address.
	Addr netip.Addr
	// Port is the local UDP port, and PeerPort the one peers listen on;
	// both default to bth.UDPPort (4791).
	Port, PeerPort uint16
	// TOS is the DSCP/ECN byte of the frames.
	TOS uint8
}

// Multi is the link of a device with several addresses in its GID table:
// one link per address (each a *UDP, an *AFPacket or a *Mem), IPv4 and
// IPv6. The
// device receives on all of them and sends each packet from the first
// address of its destination's family (transport.Multi). It is plain
// data.
type Multi []Link

// Mem is the link of an in-memory network (transport/mem): devices of one
// process, with fault injection, for tests and for programs that run both
// ends. It is plain data.
type Mem struct {
	// Network is the network the device joins; required. The devices
	// that talk share one (mem.NewNetwork).
	Network *mem.Network
	// Addr is the device's address on the network; required.
	Addr netip.Addr
}
