package rsocket

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// PacketConn is a datagram rsocket (librdmacm's SOCK_DGRAM rsockets): a
// net.PacketConn whose datagrams travel as UD SENDs on goroce's device,
// wire-compatible with rsendto and rrecvfrom. It is safe for concurrent
// use: several goroutines may read and write at once, and Close makes
// them all return.
//
// As with UDP, delivery is not reliable: a datagram arrives whole, once
// (the link may lose it, and a receiver whose queue is full drops it) or
// not at all, and datagrams to one destination are not acknowledged. A
// datagram is at most MaxDatagram bytes.
type PacketConn struct {
	udp   *net.UDPConn
	local netip.AddrPort // this side's address, as its headers carry it
	max   int            // MaxDatagram
	ep    dgramEndpoint
	// in holds the datagrams received and not yet read; free, the
	// buffers they are copied into (as many as in holds).
	in   chan datagram
	free chan []byte
	// slots are the free send buffers, by index; sendMu serializes
	// posting and the UDP scratch buffer.
	slots  chan int
	sendMu sync.Mutex
	udpBuf []byte

	mu    sync.Mutex // guards dests
	dests map[netip.AddrPort]*dest

	rdl, wdl *deadline
	closed   chan struct{}
	once     sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stats    packetCounters
	log      *slog.Logger
}

var _ net.PacketConn = (*PacketConn)(nil)

// datagram is a received datagram waiting for ReadFrom.
type datagram struct {
	from netip.AddrPort
	b    []byte
}

// dest is a destination whose QP number this side has learned, and the
// address handle it sends to it with (rsocket.c's struct ds_dest).
type dest struct {
	ah  verbs.AH
	qpn uint32
}

// maxDests bounds the destinations remembered: past it one is forgotten
// (a datagram to it then goes by UDP again, and teaches its QPN anew).
const maxDests = 4096

// errInvalidPacket is what the methods of a nil or zero PacketConn
// return.
var errInvalidPacket = fmt.Errorf("rsocket: a nil or zero PacketConn (make one with ListenPacket): %w", syscall.EINVAL)

// ErrMessageSize means a datagram is larger than a datagram rsocket
// carries (PacketConn.MaxDatagram). It matches syscall.EMSGSIZE.
var ErrMessageSize = fmt.Errorf("rsocket: datagram too large: %w", syscall.EMSGSIZE)

// ListenPacket opens a datagram rsocket on dev at addr, with the default
// Options: addr is the device's address or an unspecified one (which
// means the device's), and a UDP port (0 picks a free one).
func ListenPacket(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*PacketConn, error) {
	var lc *ListenConfig
	return lc.ListenPacket(ctx, dev, addr)
}

// ListenPacket opens a datagram rsocket on dev at addr, as rsocket,
// rbind and the first rsendto do: a UDP socket on addr (the rsocket's
// address, where datagrams to destinations not known yet travel), a UD
// QP on dev with librdmacm's Q_Key and its receives posted. Of the
// Options it uses the buffer sizes and queue depths (a datagram takes
// 2048 bytes of a buffer, so the queues are at most a buffer's size over
// 2048: 64 by default, as in librdmacm), Inline and Logger; ctx bounds
// the call only.
func (lc *ListenConfig) ListenPacket(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*PacketConn, error) {
	var o *Options
	if lc != nil {
		o = &lc.Options
	}
	c, err := listenPacket(ctx, dev, addr, o)
	if err != nil {
		return nil, opError("listen", nil, net.UDPAddrFromAddrPort(addr), err)
	}
	return c, nil
}

func listenPacket(ctx context.Context, dev verbs.Device, addr netip.AddrPort, o *Options) (*PacketConn, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if dev == nil {
		return nil, errNoDevice
	}
	if ctx == nil {
		return nil, fmt.Errorf("rsocket: a nil context: %w", syscall.EINVAL)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ip, err := deviceAddr(dev, addr.Addr())
	if err != nil {
		return nil, err
	}
	network := "udp4"
	if ip.Is6() {
		network = "udp6"
	}
	u, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, addr.Port())))
	if err != nil {
		return nil, err
	}
	rq, sq := min(opts.RecvQueue, opts.RecvBuffer/dsSlot), min(opts.SendQueue, opts.SendBuffer/dsSlot)
	ep, err := newDgramEndpoint(dev, rq, sq, opts.Inline)
	if err != nil {
		u.Close()
		return nil, err
	}
	c := newPacketConn(u, ep, ip, rq, sq, opts.Logger)
	mtu := dev.ActiveMTU().Bytes()
	if mtu == 0 { // not known: the buffer bounds it
		mtu = dsSlot
	}
	c.max = min(dsSlot, mtu) - dsHdrLen(ip)
	c.max = min(c.max, dsSlot-dsUDPHdrLen(ip)) // what a receiver reads from its UDP socket
	var ctx2 context.Context
	ctx2, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.pollLoop(ctx2)
	go c.udpLoop()
	return c, nil
}

// deviceAddr returns the address a datagram rsocket of dev has: want,
// unless it is unspecified (then the device's), if dev has it.
func deviceAddr(dev verbs.Device, want netip.Addr) (netip.Addr, error) {
	gid, err := dev.GID(0)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("rsocket: the device's address: %w", err)
	}
	have := verbs.AddrFromGID(gid)
	want = want.Unmap()
	if want.IsValid() && !want.IsUnspecified() && want != have {
		return netip.Addr{}, fmt.Errorf("rsocket: %v is not the device's address (%v): %w", want, have, syscall.EADDRNOTAVAIL)
	}
	return have, nil
}

func newPacketConn(u *net.UDPConn, ep dgramEndpoint, ip netip.Addr, rq, sq int, log *slog.Logger) *PacketConn {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &PacketConn{
		udp: u, ep: ep, local: netip.AddrPortFrom(ip, u.LocalAddr().(*net.UDPAddr).AddrPort().Port()),
		in: make(chan datagram, rq), free: make(chan []byte, rq), slots: make(chan int, sq),
		udpBuf: make([]byte, dsUDPHdrLen6+dsSlot), dests: make(map[netip.AddrPort]*dest),
		rdl: newDeadline(), wdl: newDeadline(), closed: make(chan struct{}), log: log,
	}
	for range rq {
		c.free <- make([]byte, dsSlot)
	}
	for i := range sq {
		c.slots <- i
	}
	return c
}

// MaxDatagram returns the largest datagram c sends: 2048 bytes (the
// buffer a librdmacm receiver gives a datagram, RS_SNDLOWAT) or the
// device's MTU, whichever is smaller, less the rsocket header (8 bytes,
// 24 on IPv6) and no larger than a receiver reads from its UDP socket
// (2048 less 16 bytes, 28 on IPv6): 2032 bytes on IPv4 with a 4096-byte
// MTU, 1016 with 1024.
func (c *PacketConn) MaxDatagram() int {
	if c == nil {
		return 0
	}
	return c.max
}

// LocalAddr returns the address of c's UDP socket (its port is the
// rsocket's), as a *net.UDPAddr.
func (c *PacketConn) LocalAddr() net.Addr {
	if c == nil || c.udp == nil {
		return nil
	}
	return net.UDPAddrFromAddrPort(c.local)
}

// ReadFrom reads the next datagram into p and returns its length and
// sender (a *net.UDPAddr). A datagram longer than p is cut to p's length,
// the rest of it lost, as rrecvfrom and package net's UDP do.
func (c *PacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, err := c.ReadFromUDPAddrPort(p)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

// ReadFromUDPAddrPort is ReadFrom with the sender as a netip.AddrPort.
func (c *PacketConn) ReadFromUDPAddrPort(p []byte) (int, netip.AddrPort, error) {
	if c == nil || c.in == nil {
		return 0, netip.AddrPort{}, opError("read", nil, nil, errInvalidPacket)
	}
	if err := c.ready(c.rdl); err != nil {
		return 0, netip.AddrPort{}, c.opErr("read", netip.AddrPort{}, err)
	}
	var d datagram
	select {
	case d = <-c.in:
	default:
		select {
		case d = <-c.in:
		case <-c.closed:
			return 0, netip.AddrPort{}, c.opErr("read", netip.AddrPort{}, net.ErrClosed)
		case <-c.rdl.done():
			return 0, netip.AddrPort{}, c.opErr("read", netip.AddrPort{}, os.ErrDeadlineExceeded)
		}
	}
	n := copy(p, d.b)
	c.free <- d.b[:dsSlot]
	return n, d.from, nil
}

// ready returns net.ErrClosed once c is closed, and
// os.ErrDeadlineExceeded once dl passed.
func (c *PacketConn) ready(dl *deadline) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	select {
	case <-dl.done():
		return os.ErrDeadlineExceeded
	default:
	}
	return nil
}

// opErr wraps err in a *net.OpError from c's address to dst.
func (c *PacketConn) opErr(op string, dst netip.AddrPort, err error) error {
	var a net.Addr
	if dst.IsValid() {
		a = net.UDPAddrFromAddrPort(dst)
	}
	return opError(op, c.LocalAddr(), a, err)
}

// WriteTo sends p as one datagram to addr (a *net.UDPAddr or an *Addr:
// the IP address and UDP port of a datagram rsocket). It does not wait
// for the datagram to arrive: it returns once the datagram is handed to
// the device, having waited for a free send buffer if need be.
func (c *PacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	var to netip.AddrPort
	switch a := addr.(type) {
	case *net.UDPAddr:
		if a != nil {
			to = a.AddrPort()
		}
	case *Addr:
		if a != nil {
			to = a.AddrPort
		}
	}
	if !to.IsValid() {
		if c == nil || c.in == nil {
			return 0, opError("write", nil, addr, errInvalidPacket)
		}
		return 0, opError("write", c.LocalAddr(), addr,
			fmt.Errorf("rsocket: the destination must be a *net.UDPAddr or an *rsocket.Addr with an address and port, not %T: %w", addr, syscall.EINVAL))
	}
	return c.WriteToUDPAddrPort(p, to)
}

// WriteToUDPAddrPort is WriteTo with the destination as a netip.AddrPort.
func (c *PacketConn) WriteToUDPAddrPort(p []byte, to netip.AddrPort) (int, error) {
	if c == nil || c.in == nil {
		return 0, opError("write", nil, nil, errInvalidPacket)
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	if err := c.checkWrite(p, to); err != nil {
		return 0, c.opErr("write", to, err)
	}
	if err := c.ready(c.wdl); err != nil {
		return 0, c.opErr("write", to, err)
	}
	if err := c.send(p, to); err != nil {
		return 0, c.opErr("write", to, err)
	}
	c.stats.sent.Add(1)
	return len(p), nil
}

// checkWrite checks a datagram and its destination.
func (c *PacketConn) checkWrite(p []byte, to netip.AddrPort) error {
	switch {
	case !to.Addr().IsValid() || to.Port() == 0 || to.Addr().IsUnspecified():
		return fmt.Errorf("rsocket: %v is not a destination (want an address and a port): %w", to, syscall.EINVAL)
	case to.Addr().Is4() != c.local.Addr().Is4():
		return fmt.Errorf("rsocket: %v is not of the family of %v: %w", to, c.local, syscall.EAFNOSUPPORT)
	case len(p) > c.max:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrMessageSize, len(p), c.max)
	}
	return nil
}

// send sends p to to: on the UD QP when its QPN is known, else on the
// UDP socket with a ds_udp_header, as dsend does.
func (c *PacketConn) send(p []byte, to netip.AddrPort) error {
	if _, ok := c.dest(to); !ok {
		return c.sendUDP(opData, p, to)
	}
	var slot int
	select {
	case slot = <-c.slots:
	case <-c.closed:
		return net.ErrClosed
	case <-c.wdl.done():
		return os.ErrDeadlineExceeded
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.ready(c.wdl) == net.ErrClosed {
		return net.ErrClosed
	}
	// Address handles are destroyed only under sendMu (learn, Close):
	// the one looked up now stays valid through the post.
	d, ok := c.dest(to)
	if !ok { // forgotten meanwhile: by UDP, as a destination not known
		c.slots <- slot
		return c.sendUDPLocked(opData, p, to)
	}
	b := c.ep.sbuf[slot*dsSlot : (slot+1)*dsSlot]
	n := putDSHeader(b, c.local)
	n += copy(b[n:], p)
	if err := c.ep.post(slot, b[:n], d); err != nil {
		c.slots <- slot
		return err
	}
	return nil
}

// dest returns what c knows of the destination to, if anything.
func (c *PacketConn) dest(to netip.AddrPort) (dest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.dests[to]; d != nil {
		return *d, true
	}
	return dest{}, false
}

// sendUDP sends a ds_udp_header of op, and p, to to's UDP socket; the
// header carries this side's QPN.
func (c *PacketConn) sendUDP(op uint8, p []byte, to netip.AddrPort) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.sendUDPLocked(op, p, to)
}

// sendUDPLocked is sendUDP with sendMu held.
func (c *PacketConn) sendUDPLocked(op uint8, p []byte, to netip.AddrPort) error {
	if op == opData {
		c.stats.viaUDP.Add(1)
	}
	h := udpHeader{op: op, qpn: c.ep.qp.QPN(), addr: c.local.Addr()}
	n := h.put(c.udpBuf)
	n += copy(c.udpBuf[n:], p)
	_, err := c.udp.WriteToUDPAddrPort(c.udpBuf[:n], to)
	return err
}

// SetDeadline sets the read and write deadlines.
func (c *PacketConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline of ReadFrom, pending calls included:
// past it they return an error matching os.ErrDeadlineExceeded. The zero
// Time means none.
func (c *PacketConn) SetReadDeadline(t time.Time) error {
	if c == nil || c.rdl == nil {
		return opError("set", nil, nil, errInvalidPacket)
	}
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline of WriteTo (which waits only when
// every send buffer is in flight), pending calls included.
func (c *PacketConn) SetWriteDeadline(t time.Time) error {
	if c == nil || c.wdl == nil {
		return opError("set", nil, nil, errInvalidPacket)
	}
	c.wdl.set(t)
	return nil
}

// Close closes c: pending and later calls return an error matching
// net.ErrClosed, and the datagrams not read are lost. Close waits for
// c's goroutines and frees its QP and buffers.
func (c *PacketConn) Close() error {
	if c == nil || c.closed == nil {
		return opError("close", nil, nil, errInvalidPacket)
	}
	err := error(net.ErrClosed)
	c.once.Do(func() {
		err = nil
		close(c.closed)
		c.udp.Close()
		c.cancel()
		c.wg.Wait()
		c.rdl.stop()
		c.wdl.stop()
		c.sendMu.Lock()
		defer c.sendMu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range c.dests {
			d.ah.Destroy()
		}
		clear(c.dests)
		c.ep.close()
	})
	if err != nil {
		return c.opErr("close", netip.AddrPort{}, err)
	}
	return nil
}

// PacketStats are a PacketConn's counters since it was opened.
type PacketStats struct {
	// Received and Sent count the datagrams read from the device or the
	// UDP socket and queued for ReadFrom, and those WriteTo sent.
	Received, Sent uint64
	// ViaUDP counts the datagrams sent on the UDP socket, to
	// destinations whose QPN was not known yet.
	ViaUDP uint64
	// BadHeader counts datagrams dropped for a malformed header: too
	// short, a wrong tag, version or length, or too long for a buffer.
	BadHeader uint64
	// UnknownSender counts datagrams dropped for their sender: on the UD
	// QP, a header naming another address than the packet's source, or
	// an address whose QPN this side learned and another QPN; on the UDP
	// socket, a reserved QPN (0 or 1).
	UnknownSender uint64
	// Overflow counts datagrams dropped because ReadFrom had not taken
	// the ones before them and the receive queue was full.
	Overflow uint64
	// Failed counts sends and receives the device completed in error.
	Failed uint64
}

type packetCounters struct {
	received, sent, viaUDP, badHeader, unknown, overflow, failed atomic.Uint64
}

// Stats returns c's counters.
func (c *PacketConn) Stats() PacketStats {
	if c == nil {
		return PacketStats{}
	}
	s := &c.stats
	return PacketStats{Received: s.received.Load(), Sent: s.sent.Load(), ViaUDP: s.viaUDP.Load(),
		BadHeader: s.badHeader.Load(), UnknownSender: s.unknown.Load(), Overflow: s.overflow.Load(), Failed: s.failed.Load()}
}

// dgramEndpoint is a datagram rsocket's verbs resources: a PD, one CQ for
// sends and receives, a UD QP with librdmacm's Q_Key, a send buffer of
// sq 2048-byte slots and a receive buffer of rq slots of a GRH and 2048
// bytes each.
type dgramEndpoint struct {
	pd         verbs.PD
	cq         verbs.CQ
	qp         verbs.QP
	smr, rmr   verbs.MR
	sbuf, rbuf []byte
	inline     int
	// swr and rwr are each slot's work request and SGE, made once: a
	// slot's are not used again before its completion.
	swr []slotWR
	rwr []slotRecv
}

type slotWR struct {
	wr  [1]verbs.SendWR
	sge [1]verbs.SGE
}

type slotRecv struct {
	wr  [1]verbs.RecvWR
	sge [1]verbs.SGE
}

// rslot is the size of a receive slot.
const rslot = grhLen + dsSlot

func newDgramEndpoint(dev verbs.Device, rq, sq, inline int) (e dgramEndpoint, err error) {
	e.inline = inline
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return e, fmt.Errorf("rsocket: protection domain: %w", err)
	}
	if e.cq, err = dev.CreateCQ(rq + sq); err != nil {
		return e, fmt.Errorf("rsocket: completion queue of %d: %w", rq+sq, err)
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: e.cq, RecvCQ: e.cq, SignalAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(sq), MaxRecvWR: uint32(rq), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: uint32(inline)}})
	if err != nil {
		return e, fmt.Errorf("rsocket: UD queue pair (send queue %d, receive queue %d): %w", sq, rq, err)
	}
	e.sbuf, e.rbuf = make([]byte, sq*dsSlot), make([]byte, rq*rslot)
	e.swr, e.rwr = make([]slotWR, sq), make([]slotRecv, rq)
	if e.smr, err = e.pd.RegMR(e.sbuf, 0); err != nil {
		return e, fmt.Errorf("rsocket: send buffer: %w", err)
	}
	if e.rmr, err = e.pd.RegMR(e.rbuf, verbs.LocalWrite); err != nil {
		return e, fmt.Errorf("rsocket: receive buffer: %w", err)
	}
	if err = roce.Connect(e.qp, nil, &roce.ConnParams{QKey: verbs.DefaultQKey}); err != nil {
		return e, fmt.Errorf("rsocket: %w", err)
	}
	for i := range rq {
		if err = e.postRecv(i); err != nil {
			return e, err
		}
	}
	return e, nil
}

// postRecv posts receive slot i.
func (e *dgramEndpoint) postRecv(i int) error {
	r := &e.rwr[i]
	r.sge[0] = verbs.SGE{Addr: e.rmr.Addr() + uint64(i*rslot), Length: rslot, LKey: e.rmr.LKey()}
	r.wr[0] = verbs.RecvWR{ID: recvFlag | uint64(i), SGL: r.sge[:]}
	if err := e.qp.PostRecv(r.wr[:]); err != nil {
		return fmt.Errorf("rsocket: posting a receive: %w", err)
	}
	return nil
}

// post sends b, in send slot i, to d with librdmacm's Q_Key.
func (e *dgramEndpoint) post(i int, b []byte, d dest) error {
	s := &e.swr[i]
	s.wr[0] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, AH: d.ah, RemoteQPN: d.qpn, RemoteQKey: verbs.DefaultQKey}
	if len(b) <= e.inline {
		s.wr[0].Flags, s.wr[0].InlineData = verbs.Inline, b
	} else {
		s.sge[0] = verbs.SGE{Addr: e.smr.Addr() + uint64(i*dsSlot), Length: uint32(len(b)), LKey: e.smr.LKey()}
		s.wr[0].SGL = s.sge[:]
	}
	return e.qp.PostSend(s.wr[:])
}

// close frees what newDgramEndpoint made, QP first.
func (e *dgramEndpoint) close() {
	if e.qp != nil {
		e.qp.Destroy()
	}
	for _, m := range []verbs.MR{e.smr, e.rmr} {
		if m != nil {
			m.Dereg()
		}
	}
	if e.cq != nil {
		e.cq.Destroy()
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
}
