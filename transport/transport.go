// Package transport defines how the goroce engine reaches the network: a
// Transport moves batches of RoCE packets (BTH through ICRC) between the
// engine and a link, and owns everything below the BTH: the IP and UDP
// headers, and with them the ICRC, which covers those headers.
//
// Implementations live in sub-packages: mem (an in-memory link with seeded
// fault injection, for tests), udp (UDP sockets, the default, no
// privileges) and afpacket (raw Ethernet frames, CAP_NET_RAW).
package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
)

// ErrNil means a required argument (a transport, a handler), or the
// object a method was called on, is nil.
var ErrNil = errors.New("transport: nil argument")

// nilError reports a nil argument or receiver: what names it.
func nilError(what string) error { return fmt.Errorf("%w: %s", ErrNil, what) }

// Packet is one RoCE packet crossing a Transport.
type Packet struct {
	// Data is the RoCE packet from its BTH through its ICRC. On Send the
	// transport writes the ICRC into the last four bytes, since only it
	// knows the IP header it covers.
	Data []byte
	// Payload, when not nil on Send, is the packet's payload, kept apart
	// so that it goes from the sender's memory to the link with no copy
	// on the way: the packet is then Data but its last four bytes (the
	// headers), Payload, and Data's last four bytes (the ICRC). Only
	// transports that implement PayloadSender get such packets. Received
	// packets come whole in Data, with Payload nil.
	Payload []byte
	// Src and Dst are the IP addresses of the sender and the receiver.
	// On Send, Src is the local address (the QP's source GID) and Dst the
	// peer's.
	Src, Dst netip.Addr
	// SrcPort is the UDP source port. On Send it is a hint that raw
	// transports follow (rxe uses 0xC000 + a hash of the QPN so that
	// each QP is one flow for ECMP); socket transports send from their
	// socket's port. The destination port is the transport's (4791).
	SrcPort uint16
	// TOS is the IPv4 TOS byte or IPv6 traffic class (DSCP << 2 | ECN):
	// what to send, and on receive what arrived, when the transport can
	// see it.
	TOS uint8
	// IPID is the IPv4 identification the packet was sent or received
	// with; set by the transport, for captures.
	IPID uint16
	// Parsed, on a received packet, is Data split into its headers
	// (bth.Packet.Parse), as the transport parsed it to check the packet:
	// a handler uses it instead of parsing Data again. Its views alias
	// Data and are valid as long as Data is. The transports of goroce
	// set it on every packet they deliver; a handler still parses Data
	// itself when Parsed is nil (a transport from elsewhere). Send
	// ignores it.
	Parsed *bth.Packet
	// RXEFlushICRC marks a FLUSH with the ICRC Linux's rxe gives FLUSH
	// (bth.FlushICRCRXE): on Send the transport seals the packet so; a
	// FLUSH received so has it set, and by then its Data carries the
	// IBTA's ICRC in its place (bth.UnfoldFlushICRC).
	RXEFlushICRC bool
}

// Len returns the packet's length, BTH through ICRC (0 for a nil p).
func (p *Packet) Len() int {
	if p == nil {
		return 0
	}
	return len(p.Data) + len(p.Payload)
}

// AppendTo appends the whole packet, BTH through ICRC, to b (nothing for
// a nil p).
func (p *Packet) AppendTo(b []byte) []byte {
	switch {
	case p == nil:
		return b
	case p.Payload == nil:
		return append(b, p.Data...)
	}
	n := max(len(p.Data)-bth.ICRCLen, 0)
	return append(append(append(b, p.Data[:n]...), p.Payload...), p.Data[n:]...)
}

// Seal writes the packet's ICRC for the IP and UDP headers f describes.
// It fails as bth.Flow.Seal does: f's addresses missing or of two IP
// versions, or a packet too short for a BTH and an ICRC.
func (p *Packet) Seal(f *bth.Flow) error {
	switch {
	case p == nil:
		return nilError("Seal of a nil *Packet")
	case p.Payload == nil:
		if err := f.Seal(p.Data); err != nil || !p.RXEFlushICRC {
			return err
		}
		n := len(p.Data) - bth.ICRCLen
		binary.LittleEndian.PutUint32(p.Data[n:], bth.FlushICRCRXE(binary.LittleEndian.Uint32(p.Data[n:]), p.Data))
		return nil
	}
	return f.SealSplit(p.Data, p.Payload)
}

// VerifyFlushRXE reports whether data, a packet whose ICRC failed the
// IBTA's check (verify), is a FLUSH that carries rxe's ICRC: it unfolds
// the ICRC of a FLUSH (bth.UnfoldFlushICRC) and checks it again. On true,
// data carries the IBTA's ICRC.
func VerifyFlushRXE(data []byte, verify func([]byte) bool) bool {
	if !bth.IsFlush(data) {
		return false
	}
	n := len(data) - bth.ICRCLen
	was := binary.LittleEndian.Uint32(data[n:])
	bth.UnfoldFlushICRC(data)
	if verify(data) {
		return true
	}
	binary.LittleEndian.PutUint32(data[n:], was)
	return false
}

// PayloadSender is implemented by transports whose Send takes packets
// with their payload apart (Packet.Payload) when SendsPayload reports
// true; the engine gives other transports whole packets.
type PayloadSender interface {
	SendsPayload() bool
}

// SendsPayload reports whether t takes packets with their payload apart.
func SendsPayload(t Transport) bool {
	ps, ok := t.(PayloadSender)
	return ok && ps.SendsPayload()
}

// Handler receives a batch of packets from a Transport. The packets and
// their Data are valid only until the handler returns; it must copy what it
// keeps. A Transport calls its handler from one goroutine per receive path,
// never for the same packet twice.
type Handler func(pkts []Packet)

// Transport carries RoCE packets. Implementations are safe for concurrent
// use by multiple goroutines.
type Transport interface {
	// Start begins delivering received packets to h, from goroutines the
	// transport owns, until Close. Packets whose ICRC is wrong, that are
	// not RoCE, or that are malformed (bth.Packet.Parse fails) are
	// counted and dropped before h; those delivered carry their parse in
	// Packet.Parsed.
	Start(h Handler) error
	// Send transmits pkts, in order, sealing each one's ICRC. It returns
	// when the transport no longer needs the packets' memory, having
	// written into each packet the IPID and SrcPort it went out with (and
	// Src, when it was unset). An error means some packets may not have
	// been sent; RoCE's reliability recovers from that as from loss.
	Send(pkts []Packet) error
	// LocalAddr returns the IP address the transport sends from and
	// receives on: the address behind the device's RoCEv2 GID.
	LocalAddr() netip.Addr
	// BatchSize is the most packets Send and the handler take at once to
	// good effect.
	BatchSize() int
	// MaxPacket is the largest RoCE packet (BTH through ICRC) the link
	// carries; it bounds the path MTU.
	MaxPacket() int
	// Stats returns the transport's counters.
	Stats() Stats
	// Close stops delivery, waits for the transport's goroutines to end
	// and releases its resources.
	Close() error
}

// Poller is implemented by transports that can receive on the caller's
// goroutine. Poll takes what is waiting, without blocking, hands it to the
// handler before it returns, and reports how many packets (or datagrams)
// it took; 0 also when the transport's own goroutine was receiving. A
// device in busy-poll mode calls it from an empty CQ.Poll, so that the
// thread spinning on completions drives the receive path itself, with no
// hand-off between threads. Receiving stays in order: the transport's
// goroutine and pollers take turns.
type Poller interface {
	Poll() int
}

// Waiter is implemented by transports that let a goroutine wait for
// packets itself, blocked in the kernel, and receive them on its own
// stack, as a Poller's Poll does without blocking: a device's CQ.Wait
// then takes the completion it waits for with no hand-off between
// goroutines, one wake-up per packet that comes. One goroutine waits at a
// time; while waits and polls follow each other, the transport's own
// receive goroutine leaves the link to them, and it takes receiving back
// once they stop.
type Waiter interface {
	Poller
	// Wait receives, on the caller's goroutine, the next batch that
	// comes and hands it to the handler before it returns, with the
	// number of packets (or datagrams) it took. Before it blocks it
	// calls ready (nil: never ready), and returns 0 when ready reports
	// true. It blocks until a batch comes, deadline passes (the zero
	// Time: none) or Wake is called, and returns 0 in the last two
	// cases; it may also return 0 early for no reason its caller sees,
	// and callers look again. It fails with ErrWaiting while another
	// goroutine waits, and with net.ErrClosed once the transport is
	// closed.
	Wait(deadline time.Time, ready func() bool) (int, error)
	// Wake ends the Wait in progress if it is blocked. One that is not
	// calls ready before it blocks: a Wake whose cause ready observes
	// (one made true before Wake is called) is never lost. Wake does not
	// block, and costs little while the Wait is not blocked (a waiter's
	// own handler waking it).
	Wake()
}

// ErrWaiting means another goroutine is waiting in the transport's Wait.
var ErrWaiting = errors.New("transport: another goroutine waits for packets")

// Unreachable is a notice that a packet could not reach its destination:
// the network answered it with an ICMP "destination unreachable" (or, on
// the in-memory network, found no endpoint at its address). It is plain
// data.
type Unreachable struct {
	// Dst is the destination of the packet that was refused.
	Dst netip.Addr
	// From is who said so: the destination's host itself (no socket on
	// the RoCEv2 port), a router, or the local host; invalid when not
	// known.
	From netip.Addr
	// Err is why, as the system says it: syscall.ECONNREFUSED (ICMP
	// port unreachable: nothing receives RoCEv2 there), EHOSTUNREACH,
	// ENETUNREACH, ... over sockets; the in-memory network's own error.
	Err error
	// Packet is the start of the refused packet from its BTH on, as much
	// of it as the ICMP message quoted (often all of it; nothing when a
	// router quoted only the UDP header). It is the receiver's to keep.
	Packet []byte
}

// UnreachableNotifier is implemented by transports that learn when a
// destination is unreachable (the udp transport from the socket's ICMP
// errors, the in-memory network from an address without an endpoint).
type UnreachableNotifier interface {
	// NotifyUnreachable calls f with every notice from now on, from a
	// goroutine of the transport's, until stop is called or the
	// transport closes. f must return quickly and not call back into the
	// transport; notices are not queued for a slow f. A nil f is never
	// called.
	NotifyUnreachable(f func(Unreachable)) (stop func())
}

// Stats counts a transport's traffic. Fields are cumulative.
type Stats struct {
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// TxErrors counts packets Send could not hand to the kernel.
	TxErrors uint64
	// RxICRCErrors counts packets dropped for a wrong ICRC.
	RxICRCErrors uint64
	// RxMalformed counts packets dropped because they were not RoCE or
	// did not parse (too short, bad lengths, unknown opcode).
	RxMalformed uint64
	// RxDropped counts datagrams the kernel dropped at the link's socket
	// before the transport read them, for want of room in its receive
	// buffer: the receive path did not keep up (on a busy host, or with
	// more senders than it has cores for). A peer's go-back-N sends
	// every packet after each one again. Raise net.core.rmem_max, or
	// give the device a core. Counted when the next datagram arrives
	// (UDP's SO_RXQ_OVFL); 0 on links that cannot tell.
	RxDropped uint64
}
