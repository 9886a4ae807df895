//go:build linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/mmsg"
	cpuyield "github.com/goroce/goroce/internal/yield"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/stats"
)

// Transport carries RoCEv2 packets over a UDP socket. It is safe for
// concurrent use: Send may be called from many goroutines (sends are
// serialized on one set of buffers per path), and received packets are
// delivered from one goroutine per path (Config.Paths) the Transport
// owns, started by Start and stopped by Close.
type Transport struct {
	cfg       resolved
	conn      *net.UDPConn
	rc        syscall.RawConn
	local     netip.AddrPort // the bound address, with its port
	maxPacket int
	gso       atomic.Bool // cleared if the kernel refuses a GSO send
	gro       bool
	log       *slog.Logger
	stats     stats.Counters

	// Sends go out on a second socket, blocking and unknown to Go's
	// netpoller, bound to the same address and an ephemeral port (RoCEv2
	// peers look only at the destination port). On the receiving socket,
	// every sent datagram freed would wake the netpoller (EPOLLOUT) for
	// nothing, a context switch per send. A Send takes one of tx, the
	// send states (sendmmsg's buffers): a short one the first that is
	// free, so that an ACK or a small message does not wait behind
	// another's sendmmsg of a long GSO train, as a NIC's transmit
	// scheduler serves its queues in turn (lockTx); a QP's packets keep
	// their order because its sends are made under its lock (package
	// qp). txFD is guarded by every state's mu: Close takes them all.
	tx     [txStates]txState
	txFD   int
	txPort uint16

	mu      sync.Mutex // guards started and the start of closing
	started bool

	// rxMu makes receiving a batch and handing it over one step, taken
	// by the receive goroutine and by pollers (Poll) in turn, so packets
	// reach the handler in the order they came.
	rxMu  sync.Mutex
	rx    *rxState
	rcv   *receiver
	rxFD  int
	rxRun atomic.Bool // the receive state exists
	// polls counts Poll and Wait calls: while pollers and waiters drive
	// receiving, the receive goroutine stays out of their way.
	polls   atomic.Uint64
	closing atomic.Bool
	wg      sync.WaitGroup

	// Waits (wait_linux.go). waitMu lets one goroutine wait at a time;
	// waiting is set while one does. ownMu is held by whoever may wait
	// in the netpoller on the socket and set its read deadline: the
	// receive goroutine or a waiter. inRead is set while the receive
	// goroutine holds it, where a waiter's kick (a read deadline in the
	// past) reaches it; deadlineSet says a deadline may be left for it
	// to clear. exitWanted asks a Wait to say on waitExit that it ended.
	waitMu      sync.Mutex
	ownMu       sync.Mutex
	waiting     atomic.Bool
	wanting     atomic.Int32 // Waits on their way to ownMu
	inRead      atomic.Bool
	deadlineSet atomic.Bool
	exitWanted  atomic.Bool
	waitExit    chan struct{}
	parked      atomic.Bool // the waiter is about to block, or blocked, in the netpoller
	waitN       int         // packets the wait's read took; under waitMu
	waitReady   func() bool // the wait's ready; under waitMu
	waitFn      func(uintptr) bool

	icmp icmpState // the send socket's ICMP errors (icmp_linux.go)

	// Paths (paths_linux.go). more are the other paths of a transport
	// with Config.Paths > 1, each a Transport of its own; path is this
	// one's index.
	more []*Transport
	path int

	mc mcastState // multicast groups joined (mcast_linux.go)
}

var _ transport.Transport = (*Transport)(nil)

// ok reports whether t was made by New.
func (t *Transport) ok() bool { return t != nil && t.conn != nil }

// errNilTransport is what the methods of a nil Transport return.
var errNilTransport = fmt.Errorf("%w: udp: nil *Transport: use one from udp.New", transport.ErrNil)

// New opens a UDP socket as cfg says (nil means defaults) and returns a
// Transport on it. Call Start to receive and Close to release it.
func New(cfg *Config) (*Transport, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if r.Paths > 1 {
		return openPaths(r)
	}
	return open(r, 0)
}

// open opens path k of a transport as r says: the only one, or one of
// r.Paths that share r.Addr with SO_REUSEPORT.
func open(r resolved, k int) (*Transport, error) {
	network := "udp6"
	if r.ipv4 {
		network = "udp4"
	}
	var lc net.ListenConfig
	if r.Paths > 1 {
		lc.Control = reusePort
	}
	pc, err := lc.ListenPacket(context.Background(), network, r.Addr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: listen on %v: %w", r.Addr, err)
	}
	conn := pc.(*net.UDPConn)
	t := &Transport{cfg: r, conn: conn, log: r.Logger, waitExit: make(chan struct{}, 1), path: k}
	t.waitFn = t.waitRead
	if err := t.setup(); err != nil {
		conn.Close()
		return nil, err
	}
	return t, nil
}

// setup sets the socket options and buffers.
func (t *Transport) setup() error {
	r := &t.cfg
	rc, err := t.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	t.rc = rc
	t.local = t.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	t.local = netip.AddrPortFrom(t.local.Addr().Unmap(), t.local.Port())

	var gsoErr, groErr error
	var optErr error
	cerr := rc.Control(func(fd uintptr) {
		s := int(fd)
		set := func(level, opt, v int, name string) {
			if optErr == nil {
				if err := unix.SetsockoptInt(s, level, opt, v); err != nil {
					optErr = fmt.Errorf("udp: setsockopt %s: %w", name, os.NewSyscallError("setsockopt", err))
				}
			}
		}
		if r.ipv4 {
			set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER")
			set(unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO")
			set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS")
		} else {
			set(unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")
			// rxe sends RoCEv2 over IPv6 with UDP checksum 0 (the ICRC
			// covers the datagram); the kernel drops those without this.
			set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX")
		}
		// The socket's drop count on each datagram, once it is not 0
		// (Stats.RxDropped).
		set(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1, "SO_RXQ_OVFL")
		setBuffer(s, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, r.ReadBuffer)
		setBuffer(s, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, r.WriteBuffer)
		if r.GSO != OffloadOff {
			// Kernels with UDP GSO answer this getsockopt (4.18+).
			_, gsoErr = unix.GetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		}
		if r.GRO != OffloadOff {
			groErr = unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		}
	})
	if cerr != nil {
		return fmt.Errorf("udp: %w", cerr)
	}
	if optErr != nil {
		return optErr
	}
	if r.GSO == OffloadOn && gsoErr != nil {
		return fmt.Errorf("%w: UDP GSO (UDP_SEGMENT): %w", ErrUnsupported, gsoErr)
	}
	if r.GRO == OffloadOn && groErr != nil {
		return fmt.Errorf("%w: UDP GRO (UDP_GRO): %w", ErrUnsupported, groErr)
	}
	t.gso.Store(r.GSO != OffloadOff && gsoErr == nil)
	t.gro = r.GRO != OffloadOff && groErr == nil

	t.maxPacket = r.MaxPacket
	if t.maxPacket == 0 {
		t.maxPacket = min(DefaultMaxPacket, linkMaxPacket(t.local.Addr(), r.ipv4))
	}
	if t.maxPacket < bth.BTHLen+bth.ICRCLen {
		return errorf(ErrBadConfig, "max packet %d is too small", t.maxPacket)
	}
	if err := t.openPathSender(); err != nil {
		return err
	}
	if err := t.setMulticastSend(); err != nil { // mcast_linux.go
		t.log.Warn("udp: sends to multicast groups keep the kernel's defaults", "addr", t.local, "err", err)
	}
	for i := range t.tx {
		t.tx[i].init(t)
	}
	t.log.Debug("udp transport open", "addr", t.local, "send_port", t.txPort, "peer_port", r.PeerPort,
		"gso", t.gso.Load(), "gro", t.gro, "batch", r.BatchSize, "max_packet", t.maxPacket,
		"busy_poll", r.BusyPoll)
	return nil
}

// openSender opens the sending socket: the receiving socket's address
// with port (0: an ephemeral one), IPv4's DF, the send buffer and, as the bound on
// a send waiting for buffer space, SendTimeout.
func (t *Transport) openSender(port uint16) error {
	r := &t.cfg
	fam := unix.AF_INET6
	if r.ipv4 {
		fam = unix.AF_INET
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("udp: send socket: %w", os.NewSyscallError("socket", err))
	}
	fail := func(call string, err error) error {
		unix.Close(fd)
		return fmt.Errorf("udp: send socket: %w", os.NewSyscallError(call, err))
	}
	tv := unix.NsecToTimeval(r.SendTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return fail("setsockopt", err)
	}
	var sa unix.Sockaddr
	if r.ipv4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fail("setsockopt", err)
		}
		sa = &unix.SockaddrInet4{Addr: t.local.Addr().As4(), Port: int(port)}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fail("setsockopt", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("setsockopt", err)
		}
		// Flow label 0, as rxe sends, rather than a hash of the socket's
		// flow (net.ipv6.auto_flowlabels). A kernel without the option
		// may label; the ICRC does not cover the label.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_AUTOFLOWLABEL, 0)
		sa = &unix.SockaddrInet6{Addr: t.local.Addr().As16(), Port: int(port)}
	}
	setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, r.WriteBuffer)
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		t.txPort = uint16(a.Port)
	case *unix.SockaddrInet6:
		t.txPort = uint16(a.Port)
	}
	t.txFD = fd
	return nil
}

// setBuffer asks for a socket buffer of n bytes, forced past the sysctl
// limit where the process may (CAP_NET_ADMIN). Failure leaves the kernel's
// default, which only costs throughput.
func setBuffer(fd, force, opt, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, n)
	}
}

// linkMaxPacket is the largest UDP payload the interface holding ip
// carries unfragmented; for a wildcard address, the smallest over the
// interfaces that are up. It errs on the side of 1500-byte Ethernet.
func linkMaxPacket(ip netip.Addr, ipv4 bool) int {
	hdr := bth.IPv6Len + bth.UDPLen
	if ipv4 {
		hdr = bth.IPv4MinLen + bth.UDPLen
	}
	mtu, best := 0, -1
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500 - hdr
	}
	for i := range ifs {
		ifi := &ifs[i]
		if ifi.Flags&net.FlagUp == 0 || ifi.MTU <= 0 {
			continue
		}
		if ip.IsUnspecified() {
			if mtu == 0 || ifi.MTU < mtu {
				mtu = ifi.MTU
			}
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			// The interface whose prefix holds ip: 127.0.0.2 is on lo
			// by way of 127.0.0.1/8.
			if n, ok := a.(*net.IPNet); ok && n.Contains(net.IP(ip.AsSlice())) {
				if ones, _ := n.Mask.Size(); mtu == 0 || ones > best {
					mtu, best = ifi.MTU, ones
				}
			}
		}
	}
	if mtu == 0 {
		mtu = 1500
	}
	return min(mtu-hdr, maxDatagram(ipv4))
}

// LocalAddr returns the IP address the transport is bound to; the
// unspecified address when bound to all.
func (t *Transport) LocalAddr() netip.Addr {
	if !t.ok() {
		return netip.Addr{}
	}
	return t.local.Addr()
}

// LocalAddrPort returns the bound address and UDP port.
func (t *Transport) LocalAddrPort() netip.AddrPort {
	if !t.ok() {
		return netip.AddrPort{}
	}
	return t.local
}

// LocalPort returns the UDP port the transport receives on.
func (t *Transport) LocalPort() uint16 {
	if !t.ok() {
		return 0
	}
	return t.local.Port()
}

// SendPort returns the UDP port the transport sends from.
func (t *Transport) SendPort() uint16 {
	if !t.ok() {
		return 0
	}
	return t.txPort
}

// PeerPort returns the UDP port the transport sends to.
func (t *Transport) PeerPort() uint16 {
	if !t.ok() {
		return 0
	}
	return t.cfg.PeerPort
}

// BatchSize returns the configured batch size.
func (t *Transport) BatchSize() int {
	if !t.ok() {
		return 0
	}
	return t.cfg.BatchSize
}

// MaxPacket returns the largest RoCE packet the transport sends or accepts.
func (t *Transport) MaxPacket() int {
	if !t.ok() {
		return 0
	}
	return t.maxPacket
}

// GSO reports whether sends use UDP GSO; it turns false if the kernel
// refuses a GSO send.
func (t *Transport) GSO() bool {
	if !t.ok() {
		return false
	}
	return t.gso.Load()
}

// GRO reports whether the socket receives with UDP GRO.
func (t *Transport) GRO() bool {
	if !t.ok() {
		return false
	}
	return t.gro
}

// Stats returns the transport's counters.
func (t *Transport) Stats() transport.Stats {
	if !t.ok() {
		return transport.Stats{}
	}
	s := t.stats.Snapshot()
	for _, p := range t.more {
		s = addStats(s, p.stats.Snapshot())
	}
	return s
}

// Start begins delivering received packets to h from a goroutine per
// path the Transport owns, until Close.
func (t *Transport) Start(h transport.Handler) error {
	if !t.ok() {
		return errNilTransport
	}
	if h == nil {
		return errorf(ErrBadConfig, "nil handler")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing.Load() {
		return fmt.Errorf("udp: start: %w", net.ErrClosed)
	}
	if t.started {
		return ErrStarted
	}
	t.started = true
	rx := newRxState(t)
	rcv := newReceiver(h, t.cfg.BatchSize, t.local.Port(), &t.stats)
	rcv.maxPacket = t.maxPacket
	t.rx, t.rcv = rx, rcv
	if err := t.rc.Control(func(fd uintptr) { t.rxFD = int(fd) }); err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	t.rxRun.Store(true)
	t.wg.Add(1)
	go t.receive(rx, rcv)
	for _, p := range t.more {
		if err := p.Start(h); err != nil {
			return err
		}
	}
	return nil
}

// Poll receives what is waiting on the socket, without blocking, on the
// caller's goroutine, and hands it to the handler before returning. It
// returns the number of datagrams taken, 0 when there were none or the
// receive goroutine was at it. A device calls it from a busy-polled CQ, so
// that the thread that spins on its completions also drives receiving,
// with no hand-off between threads (transport.Poller).
func (t *Transport) Poll() int {
	if !t.ok() {
		return 0
	}
	if !t.rxRun.Load() || t.closing.Load() {
		return 0
	}
	t.polls.Add(1)
	if !t.rxMu.TryLock() {
		return 0
	}
	defer t.rxMu.Unlock()
	rx := t.rx
	rx.reset()
	n, e := mmsg.Recv(uintptr(t.rxFD), rx.msgs, unix.MSG_DONTWAIT)
	if e != 0 || n == 0 {
		return 0
	}
	rx.n = n
	t.deliver(rx, t.rcv)
	return n
}

// Close stops delivery, closes the socket and waits for the receive
// goroutine to end. Calls after the first return net.ErrClosed.
func (t *Transport) Close() error {
	if !t.ok() {
		return errNilTransport
	}
	t.mu.Lock()
	if t.closing.Swap(true) {
		t.mu.Unlock()
		return fmt.Errorf("udp: close: %w", net.ErrClosed)
	}
	t.mu.Unlock()
	for _, p := range t.more {
		p.Close()
	}
	err := t.conn.Close()
	select { // a receive goroutine standing by for a Wait's end
	case t.waitExit <- struct{}{}:
	default:
	}
	t.stopICMP()
	t.closeGroups() // mcast_linux.go
	// A Send in progress ends within SendTimeout.
	for i := range t.tx {
		t.tx[i].mu.Lock()
	}
	unix.Close(t.txFD)
	t.txFD = -1
	for i := range t.tx {
		t.tx[i].mu.Unlock()
	}
	t.wg.Wait()
	t.log.Debug("udp transport closed", "addr", t.local)
	return err
}

// rxState is the receive goroutine's recvmmsg state.
type rxState struct {
	t      *Transport
	msgs   []mmsg.Msg
	names  []sockaddr
	bufs   [][]byte
	ctrl   []byte
	busy   time.Duration
	spin   time.Duration // Config.StreamSpin
	stream bool          // a batch carried StreamBytes, and no spin since ran dry
	// adapt is how long to look again on an empty socket before
	// sleeping when no stream runs: learned from how long the receive
	// goroutine slept (plus looked) before each wake (learn); parked is
	// when it last went to sleep, spun how long it looked before.
	adapt  time.Duration
	parked time.Time
	spun   time.Duration
	// sleeps counts the sleeps without a spin: once in probeEvery the
	// goroutine spins adaptMax all the same, and a datagram caught by
	// that probe starts the spin again (learn's gaps count the wake-up,
	// which on a busy machine may outlast adaptMax for good).
	sleeps uint32
	probe  bool       // the spin under way is a probe
	polls  uint64     // Transport.polls when the receive goroutine last looked
	n      int        // datagrams the last recvmmsg returned
	errno  unix.Errno // its error, if any
	drops  uint32     // the socket's drop count, as the last datagram gave it
	readFn func(uintptr) bool
}

func newRxState(t *Transport) *rxState {
	slots, size := t.cfg.BatchSize, t.maxPacket
	if t.gro {
		// A GRO datagram holds up to 64 KiB of segments.
		slots, size = max(4, slots/8), 65535
	}
	rx := &rxState{
		t:     t,
		msgs:  make([]mmsg.Msg, slots),
		names: make([]sockaddr, slots),
		ctrl:  make([]byte, slots*rxCmsgSpace),
		busy:  t.cfg.BusyPoll,
		spin:  t.cfg.StreamSpin,
	}
	rx.bufs = mmsg.Buffers(rx.msgs, size)
	for i := range rx.msgs {
		h := &rx.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&rx.names[i]))
		h.Control = &rx.ctrl[i*rxCmsgSpace]
	}
	rx.readFn = rx.read
	return rx
}

// reset readies the message headers for a recvmmsg.
func (rx *rxState) reset() {
	for i := range rx.msgs {
		h := &rx.msgs[i].Hdr
		h.Namelen = uint32(unsafe.Sizeof(sockaddr{}))
		h.SetControllen(rxCmsgSpace)
		h.Flags = 0
	}
}

// read is the RawConn.Read callback: one recvmmsg, repeated while busy
// polling or, after a stream's batch, for StreamSpin. It returns false to
// wait in the poller, having released Transport.rxMu; it returns true
// holding it, with a batch in rx.
func (rx *rxState) read(fd uintptr) bool {
	rx.t.rxMu.Lock()
	rx.reset()
	if !rx.parked.IsZero() {
		rx.learn(time.Since(rx.parked) + rx.spun)
		rx.parked = time.Time{}
	}
	spin, yield := rx.busy, false
	rx.probe = false
	if spin <= 0 && rx.spin > 0 {
		// Look again while the stream may go on, or for as long as the
		// next datagram took to come lately (or to probe), letting the
		// process's other goroutines run between looks: with one Go
		// processor they would wait otherwise.
		switch {
		case rx.stream:
			spin, yield = rx.spin, true
		case rx.adapt > 0:
			spin, yield = rx.adapt, true
		default:
			if rx.sleeps++; rx.sleeps%probeEvery == 0 {
				spin, yield, rx.probe = min(rx.spin, adaptMax), true, true
			}
		}
	}
	var spinStart, spinUntil time.Time
	for try := 0; ; try++ { // bounded by the spin time and Close
		n, e := mmsg.Recv(fd, rx.msgs, 0)
		switch e {
		case 0:
			rx.n, rx.errno = n, 0
			if rx.probe && try > 0 {
				rx.adapt = min(rx.spin, adaptMax, max(2*time.Since(spinStart), time.Microsecond))
			}
			return true
		case unix.EAGAIN:
			if rx.t.closing.Load() || rx.t.polls.Load() != rx.polls {
				rx.stream = false
				rx.t.rxMu.Unlock()
				return false
			}
			if spin <= 0 {
				rx.park(spinStart)
				return false
			}
			if try == 0 {
				spinStart = time.Now()
				spinUntil = spinStart.Add(spin)
			} else if (yield || try%64 == 0) && time.Now().After(spinUntil) {
				rx.park(spinStart)
				return false
			}
			switch {
			case try%8 == 7:
				// Let the threads that wait for this core run now and
				// then: a spin that only yields to goroutines keeps
				// the kernel's other threads (the peer's, on a small
				// machine) waiting for the end of its time slice. A
				// 2-byte READ round trip by default took 18-55 us
				// with the passive side's spin yielding to goroutines
				// alone, 10-12 with this.
				cpuyield.CPU()
			case yield:
				runtime.Gosched()
			}
		case unix.EINTR: // interrupted at every retry
			rx.t.rxMu.Unlock()
			return false
		default:
			rx.n, rx.errno = 0, e
			return true
		}
	}
}

// adaptMax bounds the receive goroutine's spin when no stream runs: a
// few wake-ups' worth. probeEvery is how often a goroutine that no
// longer spins spins all the same.
const (
	adaptMax   = 50 * time.Microsecond
	probeEvery = 16
)

// park notes that the receive goroutine goes to sleep in the poller,
// having looked since spinStart (zero: not at all), and releases rxMu.
func (rx *rxState) park(spinStart time.Time) {
	rx.stream = false
	rx.parked, rx.spun = time.Now(), 0
	if !spinStart.IsZero() {
		rx.spun = rx.parked.Sub(spinStart)
	}
	rx.t.rxMu.Unlock()
}

// learn adapts the spin to gap, how long the socket stayed empty before
// the last wake (Linux's haltpoll rule): a gap within adaptMax (and
// StreamSpin) makes the next spin outlast it, so that the next datagram
// is taken without the wake-up of a sleeping goroutine (15-25 us of CPU
// on the waking thread on loopback); a longer one halves it, down to
// none.
func (rx *rxState) learn(gap time.Duration) {
	if limit := min(rx.spin, adaptMax); gap <= limit {
		rx.adapt = min(limit, max(2*rx.adapt, gap+gap/2))
		return
	}
	rx.adapt /= 2
	if rx.adapt < time.Microsecond {
		rx.adapt = 0
	}
}

// receive is the receive goroutine.
func (t *Transport) receive(rx *rxState, rcv *receiver) {
	defer t.wg.Done()
	failures := 0
	for !t.closing.Load() {
		if p := t.polls.Load(); p != rx.polls {
			// Pollers or waiters take the socket: what the receive
			// goroutine learned of the gaps between datagrams is theirs
			// to use, and its spin would only take their datagrams.
			rx.polls = p
			rx.adapt, rx.parked = 0, time.Time{}
			t.standBy()
			continue
		}
		got, err := t.readOwned(rx)
		if err != nil {
			if !t.closing.Load() {
				t.log.Warn("udp receive stopped", "addr", t.local, "err", err)
			}
			return
		}
		if !got {
			continue
		}
		// rx.read returned holding rxMu.
		if rx.errno != 0 {
			t.rxMu.Unlock()
			// Transient socket errors (ENOMEM, ICMP errors) must not
			// spin the loop.
			failures++
			if failures%1000 == 1 {
				t.log.Debug("udp receive error", "addr", t.local, "err", rx.errno, "count", failures)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		t.deliver(rx, rcv)
		t.rxMu.Unlock()
	}
}

// readOwned waits in the netpoller for a batch, as the socket's owner
// (Transport.ownMu), unless a poller or waiter came since the receive
// goroutine last looked. It reports whether it returned holding rxMu
// with a batch (or an error) in rx; a waiter's kick, or a late Wake,
// returns false with no error.
func (t *Transport) readOwned(rx *rxState) (bool, error) {
	t.ownMu.Lock()
	defer t.ownMu.Unlock()
	if t.deadlineSet.Swap(false) {
		t.conn.SetReadDeadline(time.Time{}) // a wait's, a kick's or a Wake's
	}
	t.inRead.Store(true)
	defer t.inRead.Store(false)
	if t.polls.Load() != rx.polls || t.wanting.Load() > 0 { // a waiter came, and may not have seen inRead
		return false, nil
	}
	err := t.rc.Read(rx.readFn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.deadlineSet.Store(true)
		return false, nil
	}
	return err == nil, err
}

// deliver checks the datagrams of the last recvmmsg and hands the packets
// to the handler. The caller holds rxMu.
func (t *Transport) deliver(rx *rxState, rcv *receiver) {
	var meta rxMeta
	bytes := 0
	for i := range rx.n {
		m := &rx.msgs[i]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			rcv.malformed++
			continue
		}
		src, ok := rx.names[i].Get()
		if !ok {
			rcv.malformed++
			continue
		}
		parseCmsgs(rx.ctrl[i*rxCmsgSpace:i*rxCmsgSpace+int(m.Hdr.Controllen)], &meta)
		rcv.countDrops(&meta, &rx.drops)
		dst := meta.dst
		if !dst.IsValid() {
			dst = t.local.Addr()
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		rcv.datagram(rx.bufs[i][:m.Len], src, dst.Unmap(), meta.tos, meta.gsoLen)
		bytes += int(m.Len)
	}
	if bytes >= StreamBytes {
		rx.stream = true // until a spin finds the socket empty
	}
	rcv.flush()
}

// txStates is how many sends may be in the kernel at once.
const txStates = 2

// txState holds one Send's sendmmsg buffers, and for a transport of
// several paths its choice of packets (sel, and where each came from,
// selAt); mu guards it.
type txState struct {
	mu    sync.Mutex
	sel   []transport.Packet
	selAt []int
	msgs  []mmsg.Msg
	iovs  []unix.Iovec
	names []sockaddr
	ctrl  []byte
	first []int // each message's first packet
	count []int // and its number of packets
	nmsg  int

	start int        // first message of the next sendmmsg
	sent  int        // messages it sent
	errno unix.Errno // its error, when it sent none
}

func (tx *txState) init(t *Transport) {
	b := t.cfg.BatchSize
	tx.msgs = make([]mmsg.Msg, b)
	tx.iovs = make([]unix.Iovec, 3*b) // a packet with a Payload takes three
	tx.names = make([]sockaddr, b)
	tx.ctrl = make([]byte, b*txCmsgSpace)
	tx.first = make([]int, b)
	tx.count = make([]int, b)
}

// write is one sendmmsg from message start on the blocking send socket.
// It reports false when the send timed out waiting for buffer space.
func (tx *txState) write(fd int) bool {
	tx.sent, tx.errno = mmsg.Send(uintptr(fd), tx.msgs[tx.start:tx.nmsg], 0)
	return tx.errno != unix.EAGAIN
}

// Send seals and transmits pkts in order. It writes into each packet's
// last four bytes (the ICRC), and into its IPID and SrcPort fields the IPv4
// ID and UDP source port it goes out with (and into Src the local address,
// if Src was unset). Consecutive packets to the same peer with the same
// TOS and size (the last of a run may be shorter) go in one GSO send when
// GSO is on. Packets that cannot be sent are counted in TxErrors and the
// first error is returned after the rest have been tried.
func (t *Transport) Send(pkts []transport.Packet) error {
	if !t.ok() {
		return errNilTransport
	}
	if t.closing.Load() {
		return fmt.Errorf("udp: send: %w", net.ErrClosed)
	}
	if len(t.more) > 0 {
		return t.sendPaths(pkts)
	}
	tx := t.lockTx(pkts)
	defer tx.mu.Unlock()
	return t.send(tx, pkts)
}

// smallSend is the most bytes a Send may send beside another: ACKs, a
// short message, a READ request. Longer sends take turns, as they did
// with one send state: sendmmsg calls of long trains side by side only
// take each other's cores.
const smallSend = 1024

// lockTx takes a send state for a Send of pkts: the first, waiting for
// it, or for a small send the first that is free.
func (t *Transport) lockTx(pkts []transport.Packet) *txState {
	n := 0
	for i := range pkts {
		if n += pkts[i].Len(); n > smallSend {
			break
		}
	}
	if n <= smallSend {
		for i := range t.tx {
			if t.tx[i].mu.TryLock() {
				return &t.tx[i]
			}
		}
	}
	t.tx[0].mu.Lock()
	return &t.tx[0]
}

// send is Send on this path's socket with send state tx, which the
// caller holds.
func (t *Transport) send(tx *txState, pkts []transport.Packet) error {
	if t.txFD < 0 {
		t.stats.AddTx(0, 0, uint64(len(pkts)))
		return fmt.Errorf("udp: send: %w", net.ErrClosed)
	}
	var firstErr error
	var packets, bytes, errs uint64
	checked := 0                     // packets before this were counted if bad
	for pos := 0; pos < len(pkts); { // each round consumes a packet or turns GSO off
		next, bad := t.build(tx, pkts, pos, checked)
		checked = max(checked, next)
		if bad > 0 {
			errs += uint64(bad)
			if firstErr == nil {
				firstErr = errorf(ErrBadPacket, "packet too short, too long, or of the wrong address family")
			}
		}
		tx.start = 0
		retries := 0 // of the message at tx.start, for ICMP errors
		for tx.start < tx.nmsg {
			if !tx.write(t.txFD) {
				// Timed out: nothing from here on is sent.
				for m := tx.start; m < tx.nmsg; m++ {
					errs += uint64(tx.count[m])
				}
				errs += uint64(len(pkts) - next)
				t.stats.AddTx(packets, bytes, errs)
				return fmt.Errorf("udp: send: no room in the socket buffer for %v: %w", t.cfg.SendTimeout, os.ErrDeadlineExceeded)
			}
			if tx.errno == 0 {
				for m := tx.start; m < tx.start+tx.sent; m++ {
					for _, p := range pkts[tx.first[m] : tx.first[m]+tx.count[m]] {
						packets++
						bytes += uint64(p.Len())
					}
				}
				tx.start += tx.sent
				retries = 0
				continue
			}
			m := tx.start
			if t.pendingICMPError(tx.errno) && retries < maxICMPRetries {
				// Maybe earlier packets' ICMP errors (IP_RECVERR),
				// which the kernel reports on the next sends, one
				// each: try again.
				retries++
				continue
			}
			if tx.errno == unix.EIO && tx.count[m] > 1 && t.gso.Swap(false) {
				// The device cannot take UDP GSO; send the rest one
				// datagram per packet, resealed with ID 0.
				t.log.Warn("udp GSO send refused; sending without GSO", "addr", t.local, "err", tx.errno)
				next = tx.first[m]
				break
			}
			errs += uint64(tx.count[m])
			if firstErr == nil {
				firstErr = fmt.Errorf("udp: send to %v: %w", pkts[tx.first[m]].Dst, os.NewSyscallError("sendmmsg", tx.errno))
			}
			tx.start++
			retries = 0
		}
		pos = next
	}
	t.stats.AddTx(packets, bytes, errs)
	return firstErr
}

// addrs returns the source and destination a packet goes out with.
func (t *Transport) addrs(p *transport.Packet) (src, dst netip.Addr, ok bool) {
	dst = p.Dst
	if t.cfg.ipv4 {
		dst = dst.Unmap()
		if !dst.Is4() {
			return src, dst, false
		}
	} else if !dst.Is6() || dst.Is4In6() {
		return src, dst, false
	}
	if !t.cfg.wildcard {
		return t.local.Addr(), dst, true
	}
	src = p.Src
	if t.cfg.ipv4 {
		src = src.Unmap()
		return src, dst, src.Is4() && !src.IsUnspecified()
	}
	return src, dst, src.Is6() && !src.Is4In6() && !src.IsUnspecified()
}

// build lays out messages for packets from pos on, at most a batch of
// packets, sealing each. It returns the index after the last packet it
// took and how many it skipped as bad (counting only those at or after
// checked).
func (t *Transport) build(tx *txState, pkts []transport.Packet, pos, checked int) (next, bad int) {
	tx.nmsg = 0
	gso := t.gso.Load()
	niov := 0
	for pos < len(pkts) && niov+iovsOf(&pkts[pos]) <= len(tx.iovs) {
		p := &pkts[pos]
		src, dst, ok := t.addrs(p)
		size := p.Len()
		if !ok || len(p.Data) < bth.BTHLen+bth.ICRCLen || size > t.maxPacket {
			if pos >= checked {
				bad++
			}
			pos++
			continue
		}
		t.seal(p, src, dst, 0)
		cnt, nv := 1, iovsOf(p)
		if gso {
			cnt, nv = t.gsoRun(tx, pkts, pos, niov, src, dst)
		}
		m := tx.nmsg
		v := niov
		for k := range cnt {
			v = setIovs(tx.iovs, v, &pkts[pos+k])
		}
		h := &tx.msgs[m].Hdr
		h.Name = (*byte)(unsafe.Pointer(&tx.names[m]))
		h.Namelen = tx.names[m].Set(netip.AddrPortFrom(dst, t.cfg.PeerPort), t.cfg.ipv4)
		h.Iov = &tx.iovs[niov]
		h.SetIovlen(nv)
		t.setControl(tx, m, p, cnt, src)
		tx.first[m], tx.count[m] = pos, cnt
		tx.nmsg++
		niov += nv
		pos += cnt
	}
	return pos, bad
}

// gsoRun returns how many packets from pkts[pos] (sealed, from src to dst)
// go out in one GSO send, and the iovecs they take after the niov already
// used: the packets after it that are as long (the last may be shorter),
// between the same addresses with the same TOS, while the datagram, the
// segment count and the iovecs allow. It seals them.
func (t *Transport) gsoRun(tx *txState, pkts []transport.Packet, pos, niov int, src, dst netip.Addr) (cnt, nv int) {
	p := &pkts[pos]
	size := p.Len()
	limit := maxDatagram(t.cfg.ipv4)
	cnt, total, nv := 1, size, iovsOf(p)
	for pos+cnt < len(pkts) && cnt < maxGSOSegments {
		q := &pkts[pos+cnt]
		n := q.Len()
		if n > size || len(q.Data) < bth.BTHLen+bth.ICRCLen || total+n > limit || q.TOS != p.TOS ||
			niov+nv+iovsOf(q) > len(tx.iovs) {
			break
		}
		qs, qd, ok := t.addrs(q)
		if !ok || qs != src || qd != dst {
			break
		}
		t.seal(q, src, dst, uint16(cnt))
		cnt++
		total += n
		nv += iovsOf(q)
		if n < size { // a shorter segment ends the run
			break
		}
	}
	return cnt, nv
}

// setControl writes the control messages of message m, whose first packet
// is p and which carries cnt packets from src: the TOS when p has one, the
// GSO segment size of a run, and the source address on a wildcard socket.
func (t *Transport) setControl(tx *txState, m int, p *transport.Packet, cnt int, src netip.Addr) {
	ipv4 := t.cfg.ipv4
	h := &tx.msgs[m].Hdr
	c := tx.ctrl[m*txCmsgSpace : (m+1)*txCmsgSpace]
	used := 0
	if p.TOS != 0 {
		level, typ := int32(unix.IPPROTO_IPV6), int32(unix.IPV6_TCLASS)
		if ipv4 {
			level, typ = unix.IPPROTO_IP, unix.IP_TOS
		}
		d, n := putCmsg(c[used:], level, typ, 4)
		*(*int32)(unsafe.Pointer(&d[0])) = int32(p.TOS)
		used += n
	}
	if cnt > 1 {
		d, n := putCmsg(c[used:], unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2)
		*(*uint16)(unsafe.Pointer(&d[0])) = uint16(p.Len())
		used += n
	}
	if t.cfg.wildcard {
		if ipv4 {
			d, n := putCmsg(c[used:], unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
			*(*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0])) = unix.Inet4Pktinfo{Spec_dst: src.As4()}
			used += n
		} else {
			d, n := putCmsg(c[used:], unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
			*(*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0])) = unix.Inet6Pktinfo{Addr: src.As16()}
			used += n
		}
	}
	if used > 0 {
		h.Control = &c[0]
	} else {
		h.Control = nil
	}
	h.SetControllen(used)
}

// seal writes the ICRC of p for the headers the kernel will write: IPv4
// with DF and ID id (the segment index of a GSO send; 0 for a single
// datagram from an unconnected socket), or IPv6.
func (t *Transport) seal(p *transport.Packet, src, dst netip.Addr, id uint16) {
	f := bth.Flow{Src: src, Dst: dst, SrcPort: t.txPort, DstPort: t.cfg.PeerPort}
	if t.cfg.ipv4 {
		f.ID, f.DF = id, true
	}
	p.Seal(&f)
	p.IPID = f.ID
	p.SrcPort = f.SrcPort
	if !p.Src.IsValid() {
		p.Src = src
	}
}

// SendsPayload reports true (false for a nil Transport): Send takes
// packets with their payload apart and sends it in place, from an iovec of its own.
func (t *Transport) SendsPayload() bool { return t.ok() }

// iovsOf is how many iovecs p takes: its headers, its payload and its
// ICRC when the payload is apart, else one.
func iovsOf(p *transport.Packet) int {
	if p.Payload != nil {
		return 3
	}
	return 1
}

// setIovs points iovs[v:] at p's pieces and returns the next free index.
func setIovs(iovs []unix.Iovec, v int, p *transport.Packet) int {
	if p.Payload == nil {
		iovs[v].Base = &p.Data[0]
		iovs[v].SetLen(len(p.Data))
		return v + 1
	}
	n := len(p.Data) - bth.ICRCLen
	iovs[v].Base = &p.Data[0]
	iovs[v].SetLen(n)
	if len(p.Payload) > 0 {
		iovs[v+1].Base = &p.Payload[0]
	} else {
		iovs[v+1].Base = nil
	}
	iovs[v+1].SetLen(len(p.Payload))
	iovs[v+2].Base = &p.Data[n]
	iovs[v+2].SetLen(bth.ICRCLen)
	return v + 3
}

var (
	_ transport.Poller = (*Transport)(nil)
	_ transport.Waiter = (*Transport)(nil)
)
