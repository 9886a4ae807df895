//go:build linux

package afpacket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/mmsg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/stats"
)

// Transport carries RoCEv2 in raw Ethernet frames on one interface. It is
// safe for concurrent use: Send may be called from many goroutines (sends
// are serialized on one set of buffers), and received packets are
// delivered from one goroutine the Transport owns, started by Start and
// stopped by Close.
type Transport struct {
	cfg       Config
	ifi       *net.Interface
	conn      *packet.Conn
	rc        syscall.RawConn
	guard     *net.UDPConn
	neigh     *neighbors
	local     netip.Addr
	ipv4      bool
	mac       [6]byte
	maxPacket int
	ipid      atomic.Uint32
	log       *slog.Logger
	stats     stats.Counters

	sendMu sync.Mutex
	tx     txState

	mu      sync.Mutex
	started bool
	closing atomic.Bool
	wg      sync.WaitGroup

	mc mcastState // multicast groups joined (mcast_linux.go)
}

var _ transport.Transport = (*Transport)(nil)

// ok reports whether t was made by New.
func (t *Transport) ok() bool { return t != nil && t.conn != nil }

// errNilTransport is what the methods of a nil Transport return.
var errNilTransport = fmt.Errorf("%w: afpacket: nil *Transport: use one from afpacket.New", transport.ErrNil)

// New opens an AF_PACKET socket on cfg.Interface and returns a Transport
// on it. Without CAP_NET_RAW it returns an error that wraps
// os.ErrPermission (and the *net.OpError from the socket) and says what to
// do.
func New(cfg *Config) (*Transport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return nil, fmt.Errorf("afpacket: interface %q: %w", c.Interface, err)
	}
	loopback := ifi.Flags&net.FlagLoopback != 0
	if !loopback && len(ifi.HardwareAddr) != 6 {
		return nil, errorf(ErrBadConfig, "interface %s is not Ethernet", ifi.Name)
	}
	local := c.Addr
	if !local.IsValid() {
		if local, err = interfaceAddr(ifi); err != nil {
			return nil, err
		}
	}
	t := &Transport{cfg: c, ifi: ifi, local: local, ipv4: local.Is4(), log: c.Logger}
	copy(t.mac[:], ifi.HardwareAddr)
	t.ipid.Store(rand.Uint32())
	hdr := bth.IPv6Len + bth.UDPLen
	if t.ipv4 {
		hdr = bth.IPv4MinLen + bth.UDPLen
	}
	t.maxPacket = c.MaxPacket
	if t.maxPacket == 0 {
		t.maxPacket = min(DefaultMaxPacket, ifi.MTU-hdr)
	}
	if t.maxPacket < bth.BTHLen+bth.ICRCLen || t.maxPacket > ifi.MTU-hdr {
		return nil, errorf(ErrBadConfig, "max packet %d does not fit interface %s (MTU %d)", t.maxPacket, ifi.Name, ifi.MTU)
	}
	if err := t.open(); err != nil {
		t.release()
		return nil, err
	}
	t.log.Debug("afpacket transport open", "interface", ifi.Name, "addr", local, "port", c.Port,
		"peer_port", c.PeerPort, "max_packet", t.maxPacket)
	return t, nil
}

// interfaceAddr picks the interface's first IPv4 address, else its first
// global IPv6 address.
func interfaceAddr(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("afpacket: addresses of %s: %w", ifi.Name, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() {
			return ip, nil
		}
		if !v6.IsValid() && !ip.IsLinkLocalUnicast() {
			v6 = ip
		}
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, errorf(ErrBadConfig, "interface %s has no usable address", ifi.Name)
}

func (t *Transport) open() error {
	c := &t.cfg
	prog, err := filter(t.local, c.Port)
	if err != nil {
		return fmt.Errorf("afpacket: filter: %w", err)
	}
	t.conn, err = packet.Listen(t.ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: prog})
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("afpacket: a raw socket on %s needs CAP_NET_RAW: run as root, "+
				"grant it with `setcap cap_net_raw+ep <binary>`, or use the udp transport: %w", t.ifi.Name, err)
		}
		return fmt.Errorf("afpacket: %w", err)
	}
	if t.rc, err = t.conn.SyscallConn(); err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	var optErr error
	if err := t.rc.Control(func(fd uintptr) {
		s := int(fd)
		// With a virtio-net header in front of each frame, a UDP GSO
		// train that a local sender put through a veth arrives whole
		// with its segment size, and is split here.
		if e := unix.SetsockoptInt(s, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); e != nil {
			optErr = os.NewSyscallError("setsockopt PACKET_VNET_HDR", e)
		}
		if e := unix.SetsockoptInt(s, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); e != nil {
			t.log.Debug("PACKET_IGNORE_OUTGOING unavailable; checking the packet type only", "err", e)
		}
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(s, unix.SOL_SOCKET, o[0], 4<<20) != nil {
				_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, o[1], 4<<20)
			}
		}
	}); err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	if optErr != nil {
		return fmt.Errorf("afpacket: %w", optErr)
	}
	// The guard socket holds the port so that the kernel does not answer
	// our peers with ICMP port unreachable; its filter drops everything,
	// so nothing queues on it. It also sends the datagrams that make the
	// kernel resolve a neighbour.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
				&unix.SockFprog{Len: 1, Filter: &drop[0]})
		}); err != nil {
			return err
		}
		return serr
	}}
	network := "udp6"
	if t.ipv4 {
		network = "udp4"
	}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(t.local, c.Port).String())
	if err != nil {
		return fmt.Errorf("afpacket: holding UDP port %d on %v: %w", c.Port, t.local, err)
	}
	t.guard = pc.(*net.UDPConn)
	if t.neigh, err = newNeighbors(t.ifi, t.guard, c.NeighborTTL, c.ResolveTimeout); err != nil {
		return err
	}
	t.tx.init(t)
	return nil
}

// release closes what open made.
func (t *Transport) release() error {
	var err error
	if t.conn != nil {
		err = t.conn.Close()
	}
	if t.guard != nil {
		t.guard.Close()
	}
	if t.neigh != nil {
		t.neigh.close()
	}
	return err
}

// LocalAddr returns the local IP address.
func (t *Transport) LocalAddr() netip.Addr {
	if !t.ok() {
		return netip.Addr{}
	}
	return t.local
}

// LocalPort returns the UDP port the transport receives on.
func (t *Transport) LocalPort() uint16 {
	if !t.ok() {
		return 0
	}
	return t.cfg.Port
}

// PeerPort returns the UDP port it sends to.
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

// MaxPacket returns the largest RoCE packet sent or accepted.
func (t *Transport) MaxPacket() int {
	if !t.ok() {
		return 0
	}
	return t.maxPacket
}

// Stats returns the transport's counters.
func (t *Transport) Stats() transport.Stats {
	if !t.ok() {
		return transport.Stats{}
	}
	return t.stats.Snapshot()
}

// Start begins delivering received packets to h from a goroutine the
// Transport owns, until Close.
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
		return fmt.Errorf("afpacket: start: %w", net.ErrClosed)
	}
	if t.started {
		return ErrStarted
	}
	t.started = true
	rx := newRxState(t, h)
	t.startLoop(h) // mcast_linux.go
	t.wg.Add(1)
	go t.receive(rx)
	return nil
}

// Close stops delivery, closes the sockets and waits for the receive
// goroutine. Calls after the first return net.ErrClosed.
func (t *Transport) Close() error {
	if !t.ok() {
		return errNilTransport
	}
	t.mu.Lock()
	if t.closing.Swap(true) {
		t.mu.Unlock()
		return fmt.Errorf("afpacket: close: %w", net.ErrClosed)
	}
	t.mu.Unlock()
	err := t.release()
	t.stopLoop() // mcast_linux.go
	t.wg.Wait()
	t.log.Debug("afpacket transport closed", "interface", t.ifi.Name, "addr", t.local)
	return err
}

// rxState is the receive goroutine's state.
type rxState struct {
	t      *Transport
	h      transport.Handler
	msgs   []mmsg.Msg
	names  []unix.RawSockaddrLinklayer
	bufs   [][]byte
	batch  []transport.Packet
	fr     bth.Frame
	parsed []bth.Packet // batch[i].Parsed is &parsed[i]; as long as batch's cap
	n      int
	errno  unix.Errno
	readFn func(uintptr) bool

	packets, bytes, icrcErrors, malformed uint64
}

func newRxState(t *Transport, h transport.Handler) *rxState {
	// Room for a whole GSO train (64 KiB of IP) behind the virtio-net
	// header; fewer slots than the batch, as a slot may hold many packets.
	b := max(4, t.cfg.BatchSize/4)
	size := vnetHdrLen + bth.EthernetLen + 2*bth.VLANTagLen + max(65535, t.ifi.MTU)
	rx := &rxState{
		t: t, h: h,
		msgs:   make([]mmsg.Msg, b),
		names:  make([]unix.RawSockaddrLinklayer, b),
		batch:  make([]transport.Packet, 0, t.cfg.BatchSize),
		parsed: make([]bth.Packet, t.cfg.BatchSize),
	}
	rx.bufs = mmsg.Buffers(rx.msgs, size)
	for i := range rx.msgs {
		rx.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&rx.names[i]))
	}
	rx.readFn = rx.read
	return rx
}

// read is the RawConn.Read callback: one recvmmsg into rx. It returns
// false to wait in the poller: nothing waiting, or interrupted at every
// retry.
func (rx *rxState) read(fd uintptr) bool {
	for i := range rx.msgs {
		rx.msgs[i].Hdr.Namelen = unix.SizeofSockaddrLinklayer
		rx.msgs[i].Hdr.Flags = 0
	}
	rx.n, rx.errno = mmsg.Recv(fd, rx.msgs, 0)
	return rx.errno != unix.EAGAIN && rx.errno != unix.EINTR
}

func (t *Transport) receive(rx *rxState) {
	defer t.wg.Done()
	failures := 0
	for !t.closing.Load() {
		if err := t.rc.Read(rx.readFn); err != nil {
			if !t.closing.Load() {
				t.log.Warn("afpacket receive stopped", "interface", t.ifi.Name, "err", err)
			}
			return
		}
		if rx.errno != 0 {
			failures++
			if failures%1000 == 1 {
				t.log.Debug("afpacket receive error", "err", rx.errno, "count", failures)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		for i := range rx.n {
			m := &rx.msgs[i]
			if rx.names[i].Pkttype == unix.PACKET_OUTGOING {
				continue // our own frames
			}
			if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
				rx.malformed++
				continue
			}
			rx.frame(rx.bufs[i][:m.Len])
		}
		rx.flush()
	}
}

// The virtio-net header (include/uapi/linux/virtio_net.h) in front of each
// frame with PACKET_VNET_HDR: flags, gso_type, hdr_len, gso_size,
// csum_start, csum_offset, in host byte order.
const (
	vnetHdrLen    = 10
	vnetGSOUDPL4  = 5    // VIRTIO_NET_HDR_GSO_UDP_L4
	vnetGSOECN    = 0x80 // VIRTIO_NET_HDR_GSO_ECN
	maxGSOSegment = 128  // more segments than any kernel makes
)

// frame checks one received frame (virtio-net header first) and queues the
// RoCE packets in it: one, or each segment of a UDP GSO train.
func (rx *rxState) frame(b []byte) {
	t := rx.t
	if len(b) < vnetHdrLen {
		rx.malformed++
		return
	}
	gsoType, gsoSize := b[1]&^vnetGSOECN, int(binary.NativeEndian.Uint16(b[4:]))
	fr := &rx.fr
	if bth.ParseFrame(fr, b[vnetHdrLen:], bth.LinkEthernet) != nil || fr.Truncated {
		rx.malformed++
		return
	}
	if fr.Flow.Dst != t.local && !t.isGroup(fr.Flow.Dst) || fr.Flow.DstPort != t.cfg.Port {
		return // not ours; the filter lets through only what is
	}
	tos := uint8(0)
	if fr.IPv4 != nil {
		tos = fr.IPv4.TOS()
	} else {
		tos = fr.IPv6.TrafficClass()
	}
	if gsoType == 0 {
		p := fr.Payload
		if !rx.valid(p) {
			return
		}
		icrc := fr.ICRC()
		rxeFlush := false
		if icrc != binary.LittleEndian.Uint32(p[len(p)-bth.ICRCLen:]) {
			// Not the IBTA's: perhaps rxe's of a FLUSH (the closure only
			// here, off the path of every packet).
			ok := func(d []byte) bool { return icrc == binary.LittleEndian.Uint32(d[len(d)-bth.ICRCLen:]) }
			if rxeFlush = transport.VerifyFlushRXE(p, ok); !rxeFlush {
				rx.icrcErrors++
				return
			}
		}
		rx.deliver(p, &fr.Flow, tos, rxeFlush)
		return
	}
	if gsoType != vnetGSOUDPL4 || gsoSize <= 0 || (len(fr.Payload)+gsoSize-1)/gsoSize > maxGSOSegment {
		rx.malformed++
		return
	}
	// Segment i would go on the wire with IPv4 ID base+i (the kernel's
	// software segmentation), so it is checked with that header.
	flow := fr.Flow
	for off, i := 0, uint16(0); off < len(fr.Payload); off, i = off+gsoSize, i+1 {
		p := fr.Payload[off:min(off+gsoSize, len(fr.Payload))]
		if !rx.valid(p) {
			continue
		}
		if flow.IsIPv4() {
			flow.ID = fr.Flow.ID + i
		}
		rxeFlush := false
		if !flow.Verify(p) {
			if rxeFlush = transport.VerifyFlushRXE(p, flow.Verify); !rxeFlush {
				rx.icrcErrors++
				continue
			}
		}
		rx.deliver(p, &flow, tos, rxeFlush)
	}
}

// valid reports whether p is a well-formed RoCE packet, counting it if not.
// It parses p into the slot of the batch p takes if deliver queues it.
func (rx *rxState) valid(p []byte) bool {
	if len(p) < bth.BTHLen+bth.ICRCLen || len(p) > rx.t.maxPacket || rx.parsed[len(rx.batch)].Parse(p) != nil {
		rx.malformed++
		return false
	}
	return true
}

// deliver queues a verified packet, handing a full batch to the handler.
func (rx *rxState) deliver(p []byte, f *bth.Flow, tos uint8, rxeFlush bool) {
	rx.packets++
	rx.bytes += uint64(len(p))
	rx.batch = append(rx.batch, transport.Packet{
		Data: p, Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, TOS: tos, IPID: f.ID, Parsed: &rx.parsed[len(rx.batch)],
		RXEFlushICRC: rxeFlush,
	})
	if len(rx.batch) == cap(rx.batch) {
		rx.flush()
	}
}

// flush counts, then hands the batch to the handler.
func (rx *rxState) flush() {
	rx.t.stats.AddRx(rx.packets, rx.bytes, rx.icrcErrors, rx.malformed)
	rx.packets, rx.bytes, rx.icrcErrors, rx.malformed = 0, 0, 0, 0
	if len(rx.batch) == 0 {
		return
	}
	rx.h(rx.batch)
	clear(rx.batch)
	rx.batch = rx.batch[:0]
}

// txState holds Send's sendmmsg buffers; Transport.sendMu guards it.
type txState struct {
	vnet    [vnetHdrLen]byte
	msgs    []mmsg.Msg
	iovs    []unix.Iovec
	bufs    [][]byte
	pkt     []int // each message's packet
	nmsg    int
	start   int
	sent    int
	errno   unix.Errno
	writeFn func(uintptr) bool
}

func (tx *txState) init(t *Transport) {
	b := t.cfg.BatchSize
	size := bth.MaxFrameHeaderLen + t.maxPacket
	tx.msgs = make([]mmsg.Msg, b)
	tx.bufs = make([][]byte, b)
	tx.pkt = make([]int, b)
	tx.iovs = make([]unix.Iovec, 2*b)
	backing := make([]byte, b*size)
	for i := range tx.msgs {
		tx.bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
		// A zero virtio-net header (no offload), then the frame.
		tx.iovs[2*i].Base = &tx.vnet[0]
		tx.iovs[2*i].SetLen(vnetHdrLen)
		h := &tx.msgs[i].Hdr
		h.Iov = &tx.iovs[2*i]
		h.SetIovlen(2) // no name: the socket is bound to the interface
	}
	tx.writeFn = tx.write
}

// write is the RawConn.Write callback: one sendmmsg from message start.
// It returns false to wait in the poller for room in the socket buffer.
func (tx *txState) write(fd uintptr) bool {
	tx.sent, tx.errno = mmsg.Send(fd, tx.msgs[tx.start:tx.nmsg], 0)
	return tx.errno != unix.EAGAIN
}

// Send seals pkts and sends them as Ethernet frames, in order. It writes
// the ICRC into each packet's last four bytes and into IPID and SrcPort the
// IPv4 ID and UDP source port it used (SrcPort 0 becomes the local port),
// and into Src the local address if Src was unset. Packets that cannot be
// sent (bad, or next hop unresolved) are counted in TxErrors; the first
// error is returned after the rest have been tried.
func (t *Transport) Send(pkts []transport.Packet) error {
	if !t.ok() {
		return errNilTransport
	}
	if t.closing.Load() {
		return fmt.Errorf("afpacket: send: %w", net.ErrClosed)
	}
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	now := time.Now()
	tx := &t.tx
	var firstErr error
	var packets, bytes, errs uint64
	for pos := 0; pos < len(pkts); {
		tx.nmsg = 0
		for ; pos < len(pkts) && tx.nmsg < len(tx.msgs); pos++ {
			if err := t.frame(&pkts[pos], now); err != nil {
				errs++
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			tx.pkt[tx.nmsg] = pos
			tx.nmsg++
		}
		// After neighbour resolution, which has its own timeout.
		if err := t.conn.SetWriteDeadline(time.Now().Add(t.cfg.SendTimeout)); err != nil {
			errs += uint64(tx.nmsg) + uint64(len(pkts)-pos)
			t.stats.AddTx(packets, bytes, errs)
			return fmt.Errorf("afpacket: send: %w", err)
		}
		for tx.start = 0; tx.start < tx.nmsg; {
			if err := t.rc.Write(tx.writeFn); err != nil {
				errs += uint64(tx.nmsg-tx.start) + uint64(len(pkts)-pos)
				t.stats.AddTx(packets, bytes, errs)
				return fmt.Errorf("afpacket: send: %w", err)
			}
			if tx.errno == 0 {
				for m := tx.start; m < tx.start+tx.sent; m++ {
					packets++
					bytes += uint64(pkts[tx.pkt[m]].Len())
				}
				tx.start += tx.sent
				continue
			}
			errs++
			if firstErr == nil {
				firstErr = fmt.Errorf("afpacket: send to %v: %w", pkts[tx.pkt[tx.start]].Dst, os.NewSyscallError("sendmmsg", tx.errno))
			}
			tx.start++
		}
	}
	t.stats.AddTx(packets, bytes, errs)
	return firstErr
}

// SendsPayload reports true (false for a nil Transport): Send takes
// packets with their payload apart (it copies them into the frame it builds anyway).
func (t *Transport) SendsPayload() bool { return t.ok() }

// frame seals p and lays its frame out as the next message.
func (t *Transport) frame(p *transport.Packet, now time.Time) error {
	tx := &t.tx
	dst := p.Dst
	if t.ipv4 {
		dst = dst.Unmap()
	}
	if n := p.Len(); len(p.Data) < bth.BTHLen+bth.ICRCLen || n > t.maxPacket || dst.Is4() != t.ipv4 || dst.Is4In6() {
		return errorf(ErrBadPacket, "%d bytes to %v", n, p.Dst)
	}
	var mac [6]byte
	var err error
	if dst.IsMulticast() {
		mac = multicastMAC(dst) // mcast_linux.go
	} else if mac, err = t.neigh.lookup(dst, now); err != nil {
		return err
	}
	ff := bth.FrameFields{
		Ethernet: true, SrcMAC: t.mac, DstMAC: mac, TOS: p.TOS, TTL: t.cfg.TTL,
		Flow: bth.Flow{Src: t.local, Dst: dst, SrcPort: p.SrcPort, DstPort: t.cfg.PeerPort},
	}
	// The configured DSCP where the packet has none, and the configured
	// ECN bits where it has none: a data packet's ECT(0) keeps the
	// link's DSCP.
	if ff.TOS&^0x03 == 0 {
		ff.TOS |= t.cfg.TOS &^ 0x03
	}
	if ff.TOS&0x03 == 0 {
		ff.TOS |= t.cfg.TOS & 0x03
	}
	if ff.Flow.SrcPort == 0 {
		ff.Flow.SrcPort = t.cfg.Port
	}
	if t.ipv4 {
		ff.Flow.ID, ff.Flow.DF = uint16(t.ipid.Add(1)), true
	}
	p.Seal(&ff.Flow)
	p.IPID, p.SrcPort = ff.Flow.ID, ff.Flow.SrcPort
	if !p.Src.IsValid() {
		p.Src = t.local
	}
	hl := ff.HeaderLen()
	b := p.AppendTo(tx.bufs[tx.nmsg][:hl])
	bth.EncodeFrame(b, &ff)
	if t.isGroup(dst) {
		t.loopBack(b[hl:], &ff) // mcast_linux.go
	}
	iov := &tx.iovs[2*tx.nmsg+1]
	iov.Base = &b[0]
	iov.SetLen(len(b))
	return nil
}
