//go:build linux

// Package mmsg is the sendmmsg(2) and recvmmsg(2) plumbing the socket
// transports and the raw-UDP baseline (roce rawudp) share: the message
// array both calls take, receive buffers behind it, and one call each that
// retries EINTR and reports EAGAIN.
package mmsg

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Msg is struct mmsghdr of sendmmsg(2) and recvmmsg(2): a message header
// and the bytes the kernel moved for it. Go pads it to the alignment of
// Msghdr, as C does. The kernel writes it during a call: it is not safe
// for concurrent use.
type Msg struct {
	Hdr unix.Msghdr
	Len uint32
}

// retries bounds how often a call a signal interrupted is made again.
const retries = 100

// Send is one sendmmsg(2) of msgs (not empty) on fd, retrying EINTR. It
// returns the number of messages sent, or 0 and the error: EAGAIN when
// there is no room in the socket buffer (at once on a non-blocking socket,
// after SO_SNDTIMEO on a blocking one), EINTR when every retry was
// interrupted.
func Send(fd uintptr, msgs []Msg, flags int) (int, unix.Errno) {
	return call(unix.SYS_SENDMMSG, fd, msgs, flags)
}

// Recv is one recvmmsg(2) into msgs (not empty) on fd, retrying EINTR. It
// returns the number of messages filled, or 0 and the error: EAGAIN when
// nothing is waiting on a non-blocking socket (or with MSG_DONTWAIT),
// EINTR when every retry was interrupted. The kernel writes each filled
// message's Len, Hdr.Namelen, Hdr.Controllen and Hdr.Flags; reset them
// before the next call.
func Recv(fd uintptr, msgs []Msg, flags int) (int, unix.Errno) {
	return call(unix.SYS_RECVMMSG, fd, msgs, flags)
}

// call is sendmmsg or recvmmsg (trap), with no timeout.
func call(trap, fd uintptr, msgs []Msg, flags int) (int, unix.Errno) {
	for range retries {
		n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)),
			uintptr(flags), 0, 0)
		switch e {
		case 0:
			return int(n), 0
		case unix.EINTR:
			continue
		default:
			return 0, e
		}
	}
	return 0, unix.EINTR
}

// Buffers gives each of msgs one iovec over a receive buffer of size bytes
// of its own, all carved from one allocation, and returns the buffers. The
// names and control buffers are the caller's to set.
func Buffers(msgs []Msg, size int) [][]byte {
	iovs := make([]unix.Iovec, len(msgs)) // kept alive by msgs' Iov pointers
	bufs := make([][]byte, len(msgs))
	backing := make([]byte, len(msgs)*size)
	for i := range msgs {
		bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(size)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	return bufs
}

// Sockaddr is room for either raw socket address, as a message header
// names it.
type Sockaddr struct {
	unix.RawSockaddrInet6
}

// Set writes ap as a sockaddr_in (ipv4) or sockaddr_in6 and returns its
// length.
func (s *Sockaddr) Set(ap netip.AddrPort, ipv4 bool) uint32 {
	port := ap.Port()
	if ipv4 {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.RawSockaddrInet6))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().Unmap().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		return unix.SizeofSockaddrInet4
	}
	s.RawSockaddrInet6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&s.Port))[:], port)
	return unix.SizeofSockaddrInet6
}

// Get reads the address the kernel wrote; ok is false for another family.
func (s *Sockaddr) Get() (netip.AddrPort, bool) {
	switch s.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.RawSockaddrInet6))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), true
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&s.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr), port), true
	}
	return netip.AddrPort{}, false
}
