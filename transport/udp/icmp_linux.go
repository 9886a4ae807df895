//go:build linux

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/unreach"
)

// icmpState is the reader of the send socket's error queue: the ICMP
// errors that packets sent from it drew (IP_RECVERR, IPV6_RECVERR). It
// starts with the first watcher and runs until Close, in a goroutine that
// sleeps in poll(2) on the socket's error condition alone, so that the
// data path pays nothing for it.
type icmpState struct {
	list    unreach.List
	started bool        // under Transport.mu
	on      atomic.Bool // IP_RECVERR is set: sends may fail with earlier packets' errors
	evfd    int         // wakes the reader at Close
	wg      sync.WaitGroup
}

// ICMP message types and codes the notices are made of.
const (
	icmpDestUnreach  = 3 // ICMPv4 destination unreachable
	icmpFragNeeded   = 4 // its "fragmentation needed" code: a path MTU matter, not reachability
	icmp6DestUnreach = 1 // ICMPv6 destination unreachable
	icmpQuoteLen     = 512
	icmpDrainPerWake = 256 // bounds one wakeup's work; the rest wakes it again
	// maxICMPRetries bounds the sends of one message that fail with
	// other packets' ICMP errors: each error fails one send, and
	// reading the error queue re-arms the next queued one.
	maxICMPRetries    = 16
	sizeofExtendedErr = int(unsafe.Sizeof(unix.SockExtendedErr{}))
)

// NotifyUnreachable calls f with a notice for each ICMP "destination
// unreachable" that a packet sent from now on draws (port unreachable
// when nothing receives RoCEv2 at the destination, host or network
// unreachable from a router or the local host), from a goroutine of the
// transport's, until stop is called or the transport closes. The first
// watcher turns IP_RECVERR (IPV6_RECVERR) on for the send socket; the
// kernel then also fails the next send once with the error, which Send
// hides by sending that packet again.
func (t *Transport) NotifyUnreachable(f func(transport.Unreachable)) (stop func()) {
	if !t.ok() {
		return func() {} // a nil Transport sends nothing, and learns nothing
	}
	stop, _ = t.icmp.list.Add(f)
	if f != nil {
		if err := t.startICMP(); err != nil {
			t.log.Warn("udp: no ICMP errors", "addr", t.local, "err", err)
		}
	}
	if len(t.more) == 0 {
		return stop
	}
	stops := []func(){stop} // each path sends from a socket of its own
	for _, p := range t.more {
		stops = append(stops, p.NotifyUnreachable(f))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// startICMP turns the send socket's error queue on and starts its reader,
// once.
func (t *Transport) startICMP() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.icmp
	if s.started || t.closing.Load() {
		return nil
	}
	level, opt := unix.IPPROTO_IPV6, unix.IPV6_RECVERR
	if t.cfg.ipv4 {
		level, opt = unix.IPPROTO_IP, unix.IP_RECVERR
	}
	if err := unix.SetsockoptInt(t.txFD, level, opt, 1); err != nil {
		return fmt.Errorf("udp: %w", os.NewSyscallError("setsockopt", err))
	}
	s.on.Store(true)
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("udp: %w", os.NewSyscallError("eventfd", err))
	}
	s.started, s.evfd = true, ev
	s.wg.Add(1)
	go t.readICMP(t.txFD, ev)
	return nil
}

// stopICMP wakes the error queue's reader and waits for it; Close calls
// it before closing the send socket.
func (t *Transport) stopICMP() {
	t.mu.Lock()
	s := &t.icmp
	started := s.started
	t.mu.Unlock()
	if !started {
		return
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(s.evfd, one[:])
	s.wg.Wait()
	unix.Close(s.evfd)
}

// readICMP waits for errors on the send socket fd and turns them into
// notices, until ev is written.
func (t *Transport) readICMP(fd, ev int) {
	defer t.icmp.wg.Done()
	buf := make([]byte, icmpQuoteLen)
	oob := make([]byte, unix.CmsgSpace(sizeofExtendedErr+unix.SizeofSockaddrInet6))
	for {
		// No events asked for the socket: poll wakes for its error
		// condition only, not for every send that frees buffer space.
		fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(ev), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			t.log.Warn("udp: ICMP error reader stopped", "addr", t.local, "err", err)
			return
		}
		if fds[1].Revents != 0 || fds[0].Revents&unix.POLLNVAL != 0 {
			return
		}
		if fds[0].Revents&unix.POLLERR != 0 {
			t.drainICMP(fd, buf, oob)
		}
	}
}

// drainICMP reads the socket's error queue and notifies the watchers of
// each destination unreachable.
func (t *Transport) drainICMP(fd int, buf, oob []byte) {
	for range icmpDrainPerWake {
		n, oobn, _, from, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err != nil {
			return // EAGAIN: drained
		}
		if u, ok := parseICMPError(oob[:oobn], from); ok && t.icmp.list.Watched() {
			u.Packet = buf[:n]
			t.icmp.list.Notify(u)
		}
	}
}

// parseICMPError reads the IP_RECVERR (IPV6_RECVERR) control message of an
// error queue entry: a sock_extended_err and the sockaddr of who sent the
// ICMP message. from is the refused packet's destination. It reports false
// for what is not an ICMP destination unreachable.
func parseICMPError(oob []byte, from unix.Sockaddr) (transport.Unreachable, bool) {
	var u transport.Unreachable
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return u, false
	}
	for _, m := range msgs {
		v4 := m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR
		v6 := m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR
		if !v4 && !v6 || len(m.Data) < sizeofExtendedErr {
			continue
		}
		var ee unix.SockExtendedErr
		ee.Errno = binary.NativeEndian.Uint32(m.Data)
		ee.Origin, ee.Type, ee.Code = m.Data[4], m.Data[5], m.Data[6]
		switch {
		case ee.Origin == unix.SO_EE_ORIGIN_ICMP && ee.Type == icmpDestUnreach && ee.Code != icmpFragNeeded:
		case ee.Origin == unix.SO_EE_ORIGIN_ICMP6 && ee.Type == icmp6DestUnreach:
		default:
			continue
		}
		u.Err = syscall.Errno(ee.Errno)
		u.From = offender(m.Data[sizeofExtendedErr:])
		u.Dst = sockaddrIP(from)
		return u, u.Dst.IsValid()
	}
	return u, false
}

// offender returns the address of the sockaddr that follows a
// sock_extended_err (SO_EE_OFFENDER), or the zero Addr.
func offender(b []byte) netip.Addr {
	if len(b) < 2 {
		return netip.Addr{}
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) >= unix.SizeofSockaddrInet4 {
			return netip.AddrFrom4([4]byte(b[4:8]))
		}
	case unix.AF_INET6:
		if len(b) >= unix.SizeofSockaddrInet6 {
			return netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		}
	}
	return netip.Addr{}
}

// sockaddrIP returns the address of sa, unmapped, or the zero Addr.
func sockaddrIP(sa unix.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap()
	}
	return netip.Addr{}
}

// pendingICMPError reports whether a failed send may have failed for an
// earlier packet's ICMP error, which the kernel reports on the next send
// of a socket with IP_RECVERR: the errors ICMP destination unreachable,
// time exceeded and parameter problem map to.
func (t *Transport) pendingICMPError(e unix.Errno) bool {
	if !t.icmp.on.Load() {
		return false
	}
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENONET,
		unix.ENOPROTOOPT, unix.EOPNOTSUPP, unix.EMSGSIZE, unix.EPROTO:
		return true
	}
	return false
}

var _ transport.UnreachableNotifier = (*Transport)(nil)
