package rsocket

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
)

// Options are a connection's buffer sizes, queue depths and inline
// threshold: the knobs librdmacm's rsockets take as socket options
// (SO_SNDBUF, SO_RCVBUF, RDMA_SQSIZE, RDMA_RQSIZE, RDMA_INLINE) or from
// /etc/rdma/rsocket/*_default. Zero fields mean librdmacm's defaults. Each
// side chooses its own; the protocol tells the peer what it needs to
// know. Options are plain data, read when a connection is made.
type Options struct {
	// SendBuffer is the registered buffer Write copies into and the
	// device sends from (SO_SNDBUF); 0 means 128 KiB.
	SendBuffer int
	// RecvBuffer is the registered buffer the peer writes into
	// (SO_RCVBUF), published to it half at a time; 0 means 128 KiB.
	// With the peer's SendBuffer, it bounds the bytes in flight.
	RecvBuffer int
	// SendQueue is the QP's send queue depth (RDMA_SQSIZE): messages in
	// flight; 0 means 384.
	SendQueue int
	// RecvQueue is the QP's receive queue depth (RDMA_RQSIZE), the
	// credits the peer gets: data messages it may send before this side
	// reads them; 0 means 384.
	RecvQueue int
	// Inline is the largest write sent inline, copied by the device at
	// post time instead of from SendBuffer (RDMA_INLINE); 0 means 64,
	// negative means none.
	Inline int
	// MaxMessage bounds the bytes one data message carries; 0 means 64
	// KiB (librdmacm's RS_MAX_TRANSFER).
	MaxMessage int
	// Spin is how long a Read or Write that must wait polls the
	// completion queue before it sleeps (librdmacm's polling_time, 10
	// µs there); 0, the default here, sleeps at once. Spinning pays on a
	// device in busy-poll mode (roce.Config.BusyPoll) with a core to
	// spare: the waiting call then receives from the link itself, and a
	// round trip costs no goroutine wake-up (see BenchmarkRequestResponse),
	// provided the spin outlasts the gaps between messages: after a poll
	// the UDP transport leaves receiving to pollers for about a
	// millisecond, so a spin that ends in a sleep may wait that long.
	// Elsewhere, and on few cores, it mostly burns CPU the device's own
	// goroutines need.
	Spin time.Duration
	// KeepAlive is how often an idle connection probes its peer with a
	// zero-length RDMA WRITE (librdmacm's keepalive, RS_CTRL_KEEPALIVE),
	// so that a peer that vanished surfaces as an error once the QP's
	// retries run out instead of leaving a Read waiting forever; 0 means
	// 15 s (net.Dialer's default), negative turns it off.
	KeepAlive time.Duration
	// ACKTimeout is the QP's local ACK timeout exponent (4.096 µs ×
	// 2^ACKTimeout), as librdmacm's RDMA_OPTION_ID_ACK_TIMEOUT sets it; 0
	// means the one rdma_cm derives from the path (2 to 4 s on RoCE).
	// With the QP's 7 retries it bounds how long a peer that vanished
	// takes to be noticed: about 8 times the timeout.
	ACKTimeout uint8
	// PathMTU bounds the path MTU the connection asks for (bth.MTU256
	// to bth.MTU4096); 0 means the device's active MTU. rsockets take
	// the MTU from the route; on goroce's device it is what a link of
	// a smaller MTU than the device's (a peer's 1500-byte Ethernet: 1024)
	// needs. A listener follows the dialler's REQ, as the IB CM does, and
	// refuses a REQ above its own bound.
	PathMTU bth.MTU
	// Linger bounds how long Close waits for the data already written to
	// be acknowledged by the peer's device; 0 means for as long as the
	// QP's retransmissions take (as rshutdown waits): until every message
	// is acknowledged, or the QP's retries run out when the peer is gone
	// (about eight ACK timeouts), and 2 minutes at most. A bound shorter
	// than a retransmission loses the data still unacknowledged when it
	// passes. Close then waits up to 2 s more for the peer to answer the
	// disconnect (DREQ/DREP).
	Linger time.Duration
	// IOMapSize is the number of entries of this side's iomap table
	// (librdmacm's RDMA_IOMAPSIZE): how many buffers the peer may have
	// mapped (Conn.Map) at once for this side to write into with
	// Conn.IOWrite. 0, the default (as librdmacm's), offers none: IOWrite
	// fails and the peer's Map is refused. The size travels in a byte:
	// above 128 it is rounded down to a multiple of 256, as rsockets
	// round it, and it is at most 32512.
	IOMapSize int
	// Agent is the connection manager to connect through; nil means the
	// device's agent, as cm.Dial and cm.Listen find it (the program's own,
	// from cm.NewAgent, or one they start).
	Agent *cm.Agent
	// Logger receives connection state changes at Debug level; nil
	// discards them.
	Logger *slog.Logger
}

// Defaults, as librdmacm's rsocket.c has them.
const (
	defaultBuffer    = 128 << 10
	defaultQueue     = 384
	defaultInline    = 64
	defaultMessage   = 64 << 10
	defaultKeepAlive = 15 * time.Second
	defaultLinger    = 2 * time.Minute
	// disconnectWait bounds how long Close waits for the peer's DREP.
	disconnectWait = 2 * time.Second

	minBuffer = 4 << 10
	maxBuffer = 1 << 29 // a half of it must fit the 29 bits of a data message
	minQueue  = 16      // RS_QP_MIN_SIZE
	maxQueue  = 0xFFFE  // RS_QP_MAX_SIZE: credits are 16 bits
	maxInline = 256

	// ctrlSlots is how many control messages (credits, SHUTDOWN,
	// DISCONNECT, keepalives) may be in flight (RS_QP_CTRL_SIZE).
	ctrlSlots = 4
	// extraRecvs are receives posted beyond the credits given, for the
	// peer's control messages (which take no credit) so that they do
	// not meet an RNR NAK while this side is not polling.
	extraRecvs = 2 * ctrlSlots
	// lowWater is the free send buffer below which Write waits for
	// completions rather than send small pieces (RS_SNDLOWAT).
	lowWater = 2048
	// sglEntries is the size of this side's target SGL (RS_SGL_SIZE).
	sglEntries = 2
	// minRNRTimer is the RNR NAK timer code this side's QP announces
	// (12: 0.64 ms); rdma_cm's 0 would be 655 ms per RNR NAK.
	minRNRTimer = 12
)

// ErrOption means an Options field is out of range; the message names
// it and its limits.
var ErrOption = errors.New("rsocket: option out of range")

// withDefaults returns o with zero fields set to their defaults, or an
// error naming the first field out of range.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.SendBuffer, defaultBuffer)
	def(&c.RecvBuffer, defaultBuffer)
	def(&c.SendQueue, defaultQueue)
	def(&c.RecvQueue, defaultQueue)
	def(&c.Inline, defaultInline)
	def(&c.MaxMessage, defaultMessage)
	if c.Inline < 0 {
		c.Inline = 0
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = defaultKeepAlive
	}
	if c.Linger <= 0 {
		c.Linger = defaultLinger
	}
	c.RecvBuffer += c.RecvBuffer & 1 // two equal halves
	if c.PathMTU != 0 && c.PathMTU.Bytes() == 0 {
		return c, fmt.Errorf("%w: PathMTU %d is not a path MTU; use 0 for the device's, or bth.MTU256 to bth.MTU4096", ErrOption, c.PathMTU)
	}
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"SendBuffer", c.SendBuffer, minBuffer, maxBuffer},
		{"RecvBuffer", c.RecvBuffer, minBuffer, maxBuffer},
		{"SendQueue", c.SendQueue, minQueue, maxQueue},
		{"RecvQueue", c.RecvQueue, minQueue, maxQueue},
		{"Inline", c.Inline, 0, maxInline},
		{"MaxMessage", c.MaxMessage, 1, msgDataMask},
		{"ACKTimeout", int(c.ACKTimeout), 0, 31},
		{"IOMapSize", c.IOMapSize, 0, maxIomapEntries},
	} {
		if f.v < f.lo || f.v > f.hi {
			return c, fmt.Errorf("%w: %s is %d; use 0 for the default, or %d to %d", ErrOption, f.name, f.v, f.lo, f.hi)
		}
	}
	c.IOMapSize = iomapEntries(iomapScale(c.IOMapSize))
	return c, nil
}
