//go:build linux

package afpacket

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Multicast. Joining a group makes the packet socket take the frames to
// it: the group's multicast MAC address on the interface
// (PACKET_ADD_MEMBERSHIP, PACKET_MR_MULTICAST) and the group's address in
// the BPF filter, beside the transport's own. The guard socket joins the
// group's IP address too (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP), so that the
// host sends the IGMP or MLD reports a snooping switch forwards the group
// by. Frames to a group go to its MAC address (RFC 1112's 01:00:5e and the
// low 23 bits, RFC 2464's 33:33 and the low 32), no neighbour resolved,
// with Config.TTL. A raw socket does not see the frames it sends, so the
// transport loops its sends to a group it joined back itself: a copy of
// each goes to the handler from a goroutine of its own
// (transport.Multicaster).

var _ transport.Multicaster = (*Transport)(nil)

// mcastState is a transport's groups.
type mcastState struct {
	mu     sync.Mutex
	groups []netip.Addr                 // under mu, in the order they were joined
	rx     atomic.Pointer[[]netip.Addr] // groups, for the receive and send paths
	loop   chan transport.Packet        // copies of the sends to a joined group
	done   chan struct{}                // closed by Close: the loopback goroutine ends
	lost   atomic.Uint64                // copies the loop had no room for
}

// loopDepth is how many sent packets wait at most for their loopback
// copy; more are lost, as a receive buffer overflows.
const loopDepth = 256

// JoinGroup makes the transport receive what is sent to the multicast
// address group on its port, on its interface (transport.Multicaster).
func (t *Transport) JoinGroup(group netip.Addr) error {
	if !t.ok() {
		return errNilTransport
	}
	if err := transport.CheckGroup(group, t.local); err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	if t.closing.Load() {
		return fmt.Errorf("afpacket: JoinGroup: %w", net.ErrClosed)
	}
	g := group.Unmap()
	m := &t.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.groups, g) {
		return fmt.Errorf("afpacket: JoinGroup: %v joined already", g)
	}
	groups := append(slices.Clip(m.groups), g)
	prog, err := filterFor(append([]netip.Addr{t.local}, groups...), t.cfg.Port)
	if err != nil {
		return fmt.Errorf("afpacket: JoinGroup %v: %w: leave a group first", g, err)
	}
	mac := multicastMAC(g)
	if !t.loopbackIf() {
		if err := t.conn.JoinGroup(mac[:]); err != nil {
			return fmt.Errorf("afpacket: JoinGroup %v: the MAC address %v on %s: %w", g, net.HardwareAddr(mac[:]), t.ifi.Name, err)
		}
	}
	if err := t.guardMembership(g, true); err != nil {
		t.dropMAC(mac)
		return err
	}
	// The receive path takes the group before the filter lets its frames
	// through.
	m.groups = groups
	m.rx.Store(&groups)
	if err := t.conn.SetBPF(prog); err != nil {
		m.groups = m.groups[:len(m.groups)-1]
		rest := slices.Clone(m.groups)
		m.rx.Store(&rest)
		t.guardMembership(g, false)
		t.dropMAC(mac)
		return fmt.Errorf("afpacket: JoinGroup %v: filter: %w", g, err)
	}
	t.log.Debug("afpacket joined multicast group", "interface", t.ifi.Name, "group", g, "mac", net.HardwareAddr(mac[:]))
	return nil
}

// LeaveGroup stops receiving what is sent to group.
func (t *Transport) LeaveGroup(group netip.Addr) error {
	if !t.ok() {
		return errNilTransport
	}
	g := group.Unmap()
	m := &t.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.Index(m.groups, g)
	if i < 0 {
		return fmt.Errorf("afpacket: LeaveGroup: %v is not joined", group)
	}
	groups := slices.Delete(slices.Clone(m.groups), i, i+1)
	var errs []error
	if prog, err := filterFor(append([]netip.Addr{t.local}, groups...), t.cfg.Port); err != nil {
		errs = append(errs, err)
	} else if err := t.conn.SetBPF(prog); err != nil && !t.closing.Load() {
		errs = append(errs, fmt.Errorf("filter: %w", err))
	}
	m.groups = groups
	m.rx.Store(&groups)
	if err := t.guardMembership(g, false); err != nil && !t.closing.Load() {
		errs = append(errs, err)
	}
	if err := t.dropMAC(multicastMAC(g)); err != nil && !t.closing.Load() {
		errs = append(errs, err)
	}
	t.log.Debug("afpacket left multicast group", "interface", t.ifi.Name, "group", g)
	if len(errs) > 0 {
		return fmt.Errorf("afpacket: LeaveGroup %v: %v", g, errs)
	}
	return nil
}

// Groups returns the multicast groups the transport has joined, for tests
// and diagnostics.
func (t *Transport) Groups() []netip.Addr {
	if !t.ok() {
		return nil
	}
	t.mc.mu.Lock()
	defer t.mc.mu.Unlock()
	return slices.Clone(t.mc.groups)
}

// loopbackIf reports whether the transport's interface is the loopback
// one, which has no MAC addresses to filter.
func (t *Transport) loopbackIf() bool { return t.ifi.Flags&net.FlagLoopback != 0 }

// dropMAC leaves the group's MAC address on the interface.
func (t *Transport) dropMAC(mac [6]byte) error {
	if t.loopbackIf() {
		return nil
	}
	return t.conn.LeaveGroup(mac[:])
}

// guardMembership joins or leaves group on the guard socket.
func (t *Transport) guardMembership(g netip.Addr, join bool) error {
	rc, err := t.guard.SyscallConn()
	if err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if t.ipv4 {
			opt := unix.IP_ADD_MEMBERSHIP
			if !join {
				opt = unix.IP_DROP_MEMBERSHIP
			}
			serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, opt,
				&unix.IPMreqn{Multiaddr: g.As4(), Address: t.local.As4(), Ifindex: int32(t.ifi.Index)})
			return
		}
		opt := unix.IPV6_JOIN_GROUP
		if !join {
			opt = unix.IPV6_LEAVE_GROUP
		}
		serr = unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, opt,
			&unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(t.ifi.Index)})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		verb := "joining"
		if !join {
			verb = "leaving"
		}
		return fmt.Errorf("afpacket: %s %v on %s: %w", verb, g, t.ifi.Name, os.NewSyscallError("setsockopt", err))
	}
	return nil
}

// isGroup reports whether dst is a group the transport joined.
func (t *Transport) isGroup(dst netip.Addr) bool {
	p := t.mc.rx.Load()
	return p != nil && slices.Contains(*p, dst)
}

// multicastMAC returns the Ethernet address of IP multicast address g.
func multicastMAC(g netip.Addr) [6]byte {
	if g.Is4() {
		a := g.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	a := g.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// loopBack queues a copy of a packet sent to a group the transport
// joined, roce (BTH through ICRC, sealed) as it went out; the caller holds
// sendMu.
func (t *Transport) loopBack(roce []byte, ff *bth.FrameFields) {
	p := transport.Packet{Data: append([]byte(nil), roce...), Src: ff.Flow.Src, Dst: ff.Flow.Dst,
		SrcPort: ff.Flow.SrcPort, TOS: ff.TOS, IPID: ff.Flow.ID}
	select {
	case t.mc.loop <- p:
	default:
		if t.mc.lost.Add(1)%1000 == 1 {
			t.log.Debug("afpacket multicast loopback full: copies lost", "count", t.mc.lost.Load())
		}
	}
}

// startLoop starts the goroutine that delivers the copies loopBack
// queues (Start).
func (t *Transport) startLoop(h transport.Handler) {
	t.mc.loop = make(chan transport.Packet, loopDepth)
	t.mc.done = make(chan struct{})
	t.wg.Add(1)
	go t.deliverLoop(h)
}

// stopLoop ends the loopback goroutine (Close); Close waits for it.
func (t *Transport) stopLoop() {
	if t.mc.done != nil {
		close(t.mc.done)
	}
}

// deliverLoop hands the looped-back copies to h, in batches, until Close.
func (t *Transport) deliverLoop(h transport.Handler) {
	defer t.wg.Done()
	batch := make([]transport.Packet, 0, t.cfg.BatchSize)
	parsed := make([]bth.Packet, t.cfg.BatchSize)
	for {
		select {
		case <-t.mc.done:
			return
		case p := <-t.mc.loop:
			batch = batch[:0]
			for more := true; more; { // bounded by the batch's capacity
				if parsed[len(batch)].Parse(p.Data) == nil {
					p.Parsed = &parsed[len(batch)]
					batch = append(batch, p)
				}
				more = false
				if len(batch) < cap(batch) {
					select {
					case p = <-t.mc.loop:
						more = true
					default:
					}
				}
			}
			if len(batch) > 0 {
				var bytes uint64
				for _, q := range batch {
					bytes += uint64(len(q.Data))
				}
				t.stats.AddRx(uint64(len(batch)), bytes, 0, 0)
				h(batch)
				clear(batch)
			}
		}
	}
}
