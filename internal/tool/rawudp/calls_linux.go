package rawudp

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/mmsg"
)

// callsBatch is how many datagrams --calls' recvmmsg takes at most, as
// goroce's transport takes a batch (8 GRO slots).
const callsBatch = 8

// callsCmsgSpace is room for the control messages --calls asks for: the
// destination (IP_PKTINFO), the TOS and the GRO segment size.
var callsCmsgSpace = unix.CmsgSpace(unix.SizeofInet6Pktinfo) + 2*unix.CmsgSpace(4) + 32

// calls is --calls' state: the system calls goroce's UDP transport takes
// where the plain ping-pong reads and writes a connected socket. Datagrams
// come in by recvmmsg with the transport's control messages, and go out
// by sendmmsg from a second, unconnected socket to the peer's receiving
// socket (as goroce's go to port 4791 whatever port they leave from).
type calls struct {
	tx    int
	rx    []mmsg.Msg
	bufs  [][]byte
	names []mmsg.Sockaddr
	ctrl  []byte
	out   [1]mmsg.Msg
	iov   unix.Iovec
	to    mmsg.Sockaddr
	tolen uint32
}

// setCalls makes s take goroce's transport's system calls: the receiving
// socket reports each datagram's destination and TOS and takes GRO runs;
// sends leave from a socket of their own on local's address, to peer.
func (s *socket) setCalls(local netip.Addr, peer netip.AddrPort) error {
	lvl, pkt, tos := unix.IPPROTO_IP, unix.IP_PKTINFO, unix.IP_RECVTOS
	if local.Is6() {
		lvl, pkt, tos = unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, unix.IPV6_RECVTCLASS
	}
	for _, o := range [][2]int{{lvl, pkt}, {lvl, tos}, {unix.IPPROTO_UDP, unix.UDP_GRO}} {
		if err := unix.SetsockoptInt(s.fd, o[0], o[1], 1); err != nil {
			return fmt.Errorf("--calls: setsockopt: %w", err)
		}
	}
	tx, err := openSocket(netip.AddrPortFrom(local, 0), 0)
	if err != nil {
		return err
	}
	c := &calls{tx: tx.fd, rx: make([]mmsg.Msg, callsBatch), names: make([]mmsg.Sockaddr, callsBatch),
		ctrl: make([]byte, callsBatch*callsCmsgSpace)}
	c.bufs = mmsg.Buffers(c.rx, 65536)
	for i := range c.rx {
		c.rx[i].Hdr.Name = (*byte)(unsafe.Pointer(&c.names[i]))
		c.rx[i].Hdr.Control = &c.ctrl[i*callsCmsgSpace]
	}
	c.tolen = c.to.Set(peer, peer.Addr().Is4())
	h := &c.out[0].Hdr
	h.Name = (*byte)(unsafe.Pointer(&c.to))
	h.Iov = &c.iov
	h.SetIovlen(1)
	s.calls = c
	return nil
}

// recv is one recvmmsg of up to callsBatch datagrams, as the transport's:
// it waits for the first only on a blocking socket. It returns the first
// datagram, which the next recv overwrites.
func (c *calls) recv(fd int) ([]byte, error) {
	for i := range c.rx {
		h := &c.rx[i].Hdr
		h.Namelen = uint32(unsafe.Sizeof(mmsg.Sockaddr{}))
		h.SetControllen(callsCmsgSpace)
		h.Flags = 0
	}
	n, e := mmsg.Recv(uintptr(fd), c.rx, unix.MSG_WAITFORONE)
	if e != 0 {
		return nil, e
	}
	if n == 0 {
		return nil, unix.EAGAIN
	}
	return c.bufs[0][:c.rx[0].Len], nil
}

// send is one sendmmsg of b, with the control message oob (nil for none).
func (c *calls) send(b, oob []byte) error {
	h := &c.out[0].Hdr
	h.Namelen = c.tolen
	c.iov.Base = &b[0]
	c.iov.SetLen(len(b))
	h.Control, h.Controllen = nil, 0
	if len(oob) > 0 {
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
	if _, e := mmsg.Send(uintptr(c.tx), c.out[:], 0); e != 0 {
		return e
	}
	return nil
}

func (c *calls) close() error { return unix.Close(c.tx) }

// localAddr is the address s is bound to.
func (s *socket) localAddr() (netip.AddrPort, error) {
	sa, err := unix.Getsockname(s.fd)
	if err != nil {
		return netip.AddrPort{}, err
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("getsockname: %T", sa)
}
