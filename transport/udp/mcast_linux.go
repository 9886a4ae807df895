//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/transport"
)

// Multicast. The receiving socket is bound to the transport's unicast
// address, where no multicast datagram arrives, so each group joined has a
// socket of its own: bound to the group's address and the transport's
// port (SO_REUSEADDR, so that every device of the host on the port
// receives the group), tied to the interface that holds the transport's
// address (SO_BINDTODEVICE), member of the group there (IP_ADD_MEMBERSHIP
// or IPV6_JOIN_GROUP, which makes the kernel send the IGMP or MLD report
// and accept the group's MAC address), with a goroutine that hands what
// it receives to the handler. The sending sockets send to a group from
// the transport's interface (IP_MULTICAST_IF, IPV6_MULTICAST_IF) with
// Config.MulticastTTL, and loop their datagrams back to the host's own
// members (IP_MULTICAST_LOOP, on by default): the transport's group socket
// among them, as transport.Multicaster asks.
//
// Sockets are made in the network namespace of the transport's own socket,
// whatever the namespace of the thread that calls JoinGroup (a test's
// transport made in a namespace of its own, joined from any goroutine).

var _ transport.Multicaster = (*Transport)(nil)

// mcastState is a transport's groups.
type mcastState struct {
	mu     sync.Mutex
	groups map[netip.Addr]*groupConn // under mu
	wg     sync.WaitGroup            // the groups' receive goroutines
}

// groupConn is the socket of one group and its receiver.
type groupConn struct {
	addr netip.Addr
	conn *net.UDPConn
	rcv  *receiver
	done chan struct{} // closed when the receive goroutine ends
}

// JoinGroup makes the transport receive what is sent to the multicast
// address group on its port, on the interface that holds its address
// (transport.Multicaster). The transport must be bound to one address (a
// wildcard one has no interface to join on) and started.
func (t *Transport) JoinGroup(group netip.Addr) error {
	if !t.ok() {
		return errNilTransport
	}
	if err := transport.CheckGroup(group, t.local.Addr()); err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	if t.cfg.wildcard {
		return errorf(ErrUnsupported, "JoinGroup %v: the transport is bound to %v, which names no interface to join "+
			"the group on: bind it to the address of one", group, t.local.Addr())
	}
	g := group.Unmap()
	t.mu.Lock()
	started, closing := t.started, t.closing.Load()
	h := t.rcv
	t.mu.Unlock()
	switch {
	case closing:
		return fmt.Errorf("udp: JoinGroup: %w", net.ErrClosed)
	case !started:
		return fmt.Errorf("%w: JoinGroup %v before Start: start the transport first (qp.New does)", ErrNotStarted, g)
	}
	m := &t.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups[g] != nil {
		return fmt.Errorf("udp: JoinGroup: %v joined already", g)
	}
	var gc *groupConn
	err := t.inNetns(func() error {
		var err error
		gc, err = t.openGroup(g)
		return err
	})
	if err != nil {
		return err
	}
	gc.rcv = newReceiver(h.h, t.cfg.BatchSize, t.local.Port(), &t.stats)
	gc.rcv.maxPacket = t.maxPacket
	if m.groups == nil {
		m.groups = make(map[netip.Addr]*groupConn)
	}
	m.groups[g] = gc
	m.wg.Add(1)
	go t.receiveGroup(gc)
	t.log.Debug("udp joined multicast group", "addr", t.local, "group", g)
	return nil
}

// LeaveGroup stops receiving what is sent to group: its socket is closed,
// which leaves the group, and its goroutine has ended when LeaveGroup
// returns.
func (t *Transport) LeaveGroup(group netip.Addr) error {
	if !t.ok() {
		return errNilTransport
	}
	g := group.Unmap()
	m := &t.mc
	m.mu.Lock()
	gc := m.groups[g]
	delete(m.groups, g)
	m.mu.Unlock()
	if gc == nil {
		return fmt.Errorf("udp: LeaveGroup: %v is not joined", group)
	}
	err := gc.conn.Close()
	<-gc.done
	t.log.Debug("udp left multicast group", "addr", t.local, "group", g)
	return err
}

// closeGroups closes every group's socket and waits for their goroutines
// (Close).
func (t *Transport) closeGroups() {
	m := &t.mc
	m.mu.Lock()
	for g, gc := range m.groups {
		gc.conn.Close()
		delete(m.groups, g)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// Groups returns the multicast groups the transport has joined, for tests
// and diagnostics.
func (t *Transport) Groups() []netip.Addr {
	if !t.ok() {
		return nil
	}
	t.mc.mu.Lock()
	defer t.mc.mu.Unlock()
	var a []netip.Addr
	for g := range t.mc.groups {
		a = append(a, g)
	}
	return a
}

// openGroup opens the socket of group g, joined on the interface of the
// transport's address. It runs in the transport's namespace.
func (t *Transport) openGroup(g netip.Addr) (*groupConn, error) {
	ifi, err := interfaceOf(t.local.Addr())
	if err != nil {
		return nil, err
	}
	// A socket of its own making: package net binds a UDP socket asked
	// for a multicast address to the wildcard address instead, which the
	// transport's own socket on the port excludes.
	fam := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: g.As16(), Port: int(t.local.Port())}
	if t.cfg.ipv4 {
		fam, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: g.As4(), Port: int(t.local.Port())}
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udp: multicast group %v: %w", g, os.NewSyscallError("socket", err))
	}
	var serr error
	set := func(level, opt, v int, name string) {
		if serr == nil {
			if err := unix.SetsockoptInt(fd, level, opt, v); err != nil {
				serr = os.NewSyscallError("setsockopt "+name, err)
			}
		}
	}
	set(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, "SO_REUSEADDR")
	set(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1, "SO_RXQ_OVFL")
	if t.cfg.ipv4 {
		set(unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO")
		set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS")
		set(unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL")
	} else {
		set(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1, "IPV6_V6ONLY")
		set(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO")
		set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")
		set(unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0, "IPV6_MULTICAST_ALL")
		set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX") // rxe's IPv6 checksum 0
	}
	if serr == nil {
		setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, t.cfg.ReadBuffer)
		// Kernels before 5.7 allow it with CAP_NET_RAW only; without it
		// the socket also takes the group from other interfaces.
		if err := unix.BindToDevice(fd, ifi.Name); err != nil {
			t.log.Debug("udp: SO_BINDTODEVICE refused; the group's socket is not tied to its interface",
				"interface", ifi.Name, "err", err)
		}
		if err := unix.Bind(fd, sa); err != nil {
			serr = os.NewSyscallError("bind", err)
		}
	}
	if serr != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("udp: multicast group %v on port %d: %w", g, t.local.Port(), serr)
	}
	f := os.NewFile(uintptr(fd), "udp multicast "+g.String())
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("udp: multicast group %v: %w", g, err)
	}
	conn := pc.(*net.UDPConn)
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: %w", err)
	}
	var jerr error
	err = rc.Control(func(fd uintptr) {
		if t.cfg.ipv4 {
			mr := &unix.IPMreqn{Multiaddr: g.As4(), Address: t.local.Addr().As4(), Ifindex: int32(ifi.Index)}
			jerr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mr)
			return
		}
		mr := &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifi.Index)}
		jerr = unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mr)
	})
	if err == nil {
		err = jerr
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: joining multicast group %v on %s: %w", g, ifi.Name, os.NewSyscallError("setsockopt", err))
	}
	return &groupConn{addr: g, conn: conn, done: make(chan struct{})}, nil
}

// receiveGroup is a group's receive goroutine: it hands each datagram to
// the handler, until the group's socket is closed.
func (t *Transport) receiveGroup(gc *groupConn) {
	defer t.mc.wg.Done()
	defer close(gc.done)
	buf := make([]byte, t.maxPacket+1) // a byte more: what fills it is too long
	oob := make([]byte, rxCmsgSpace)
	var meta rxMeta
	var drops uint32 // the socket's drop count, as the last datagram gave it
	failures := 0
	for {
		n, oobn, flags, src, err := gc.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.closing.Load() {
				return
			}
			if failures++; failures%1000 == 1 {
				t.log.Debug("udp multicast receive error", "group", gc.addr, "err", err, "count", failures)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if flags&unix.MSG_TRUNC != 0 || n > t.maxPacket {
			gc.rcv.malformed++
			gc.rcv.commit()
			continue
		}
		parseCmsgs(oob[:oobn], &meta)
		gc.rcv.countDrops(&meta, &drops)
		dst := meta.dst.Unmap()
		if !dst.IsValid() {
			dst = gc.addr
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		gc.rcv.datagram(buf[:n], src, dst, meta.tos, 0)
		gc.rcv.flush()
	}
}

// setMulticastSend sets the sending socket's options for sends to a
// group: the interface of the transport's address, and the TTL or hop
// limit. The caller owns t.txFD (setup). A wildcard transport leaves the
// interface to the routing table.
func (t *Transport) setMulticastSend() error {
	ttl := int(t.cfg.MulticastTTL)
	if ttl == 0 {
		ttl = DefaultMulticastTTL
	}
	var ifindex int
	if !t.cfg.wildcard {
		if ifi, err := interfaceOf(t.local.Addr()); err == nil {
			ifindex = ifi.Index
		} else {
			t.log.Debug("udp: no interface for multicast sends; the routing table picks it", "addr", t.local, "err", err)
		}
	}
	fd := t.txFD
	var err error
	if t.cfg.ipv4 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, ttl)
		if err == nil && ifindex > 0 {
			err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF,
				&unix.IPMreqn{Address: t.local.Addr().As4(), Ifindex: int32(ifindex)})
		}
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, ttl)
		if err == nil && ifindex > 0 {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex)
		}
	}
	if err != nil {
		return fmt.Errorf("udp: send socket: multicast options: %w", os.NewSyscallError("setsockopt", err))
	}
	return nil
}

// interfaceOf returns the interface that holds address a: the one a is
// an address of, or for a loopback address the loopback interface (the
// whole of 127.0.0.0/8 is local there, but only 127.0.0.1 is listed).
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("udp: interfaces: %w", err)
	}
	a = a.Unmap()
	var lo *net.Interface
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 && lo == nil {
			lo = &ifs[i]
		}
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return &ifs[i], nil
				}
			}
		}
	}
	if a.IsLoopback() && lo != nil {
		return lo, nil
	}
	return nil, fmt.Errorf("udp: no interface holds %v", a)
}

// inNetns runs f on a thread in the network namespace of the transport's
// receiving socket, where the sockets f makes stay. A process that may
// not look the socket's namespace up (SIOCGSKNS needs CAP_NET_ADMIN) runs
// f where it is: its threads share the namespace its sockets were made in
// unless it moved one itself.
func (t *Transport) inNetns(f func() error) error {
	nsfd := -1
	if err := t.rc.Control(func(fd uintptr) {
		if n, err := unix.IoctlRetInt(int(fd), unix.SIOCGSKNS); err == nil {
			nsfd = n
		}
	}); err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	if nsfd < 0 {
		return f()
	}
	defer unix.Close(nsfd)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var want, here unix.Stat_t
		if unix.Fstat(nsfd, &want) == nil && unix.Stat("/proc/thread-self/ns/net", &here) == nil &&
			want.Dev == here.Dev && want.Ino == here.Ino {
			runtime.UnlockOSThread()
			done <- f()
			return
		}
		// The thread stays locked: it ends with the goroutine, and no
		// other goroutine runs in the namespace it moved to.
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("udp: entering the transport's network namespace: %w", os.NewSyscallError("setns", err))
			return
		}
		done <- f()
	}()
	return <-done
}
