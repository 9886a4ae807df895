package uverbs

import (
	"context"
	"errors"
	"net"
	"os"
	"unsafe"

	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/uverbs/abi"
	"golang.org/x/sys/unix"
)

// Datagram rsockets: the library's rsocket is one end of a UNIX
// sequenced-packet socket pair, and the device carries datagrams between
// it and a datagram rsocket of its own (rsocket.PacketConn, librdmacm's
// UD protocol on the wire). Each message on the pair is an
// abi.RSDgramHeader and one datagram.

const rsDgramHdr = int(unsafe.Sizeof(abi.RSDgramHeader{}))

// rsPacketFile takes a descriptor the program sent as the device's end
// of a UNIX sequenced-packet socket; nil if it is not one.
func rsPacketFile(fd int) *os.File {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_SEQPACKET {
		unix.Close(fd)
		return nil
	}
	if d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || d != unix.AF_UNIX {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), "rsocket")
}

// rsBind binds a datagram rsocket at Addr (rbind, or the first rsendto
// or rconnect of an unbound one) and carries its datagrams on the
// descriptor until the program closes its end.
func (s *session) rsBind(body []byte, fds []int) (any, uint32) {
	var req abi.RSBindReq
	if !decode(body, &req) {
		closeFDs(fds)
		return nil, abi.EINVAL
	}
	addr, ok := sockaddr(req.Addr)
	f := rsPacketFile(fds[0])
	switch {
	case f == nil:
		return nil, abi.EINVAL
	case !ok || !addr.IsValid():
		f.Close()
		return nil, abi.EINVAL
	case !addr.Addr().IsUnspecified() && !s.local(addr.Addr()):
		f.Close()
		return nil, abi.EADDRNOTAVAIL
	}
	c, err := rsocket.ListenPacket(context.Background(), s.srv.dev, addr)
	if err != nil {
		f.Close()
		return nil, rsErrno(err)
	}
	h, ok := s.handle32()
	if !ok || !s.rs.addPacket(c) {
		f.Close()
		c.Close()
		return nil, abi.ENOMEM
	}
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	go s.rsDgramRelay(f, c)
	return &abi.RSBindReply{Handle: h, Max: uint32(c.MaxDatagram()), Addr: sockaddrOf(local)}, 0
}

// rsDgramRelay carries datagrams between the program's end f and c
// until the program closes its end (or dies), then closes c. A datagram
// the device cannot send is lost, as a datagram may be; so is one that
// arrives while the program's end is full.
func (s *session) rsDgramRelay(f *os.File, c *rsocket.PacketConn) {
	defer s.rs.dropPacket(c)
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		c.Close()
		return
	}
	u := fc.(*net.UnixConn)
	fromPeers := make(chan struct{})
	go func() {
		defer close(fromPeers)
		b := make([]byte, rsDgramHdr+c.MaxDatagram())
		for {
			n, from, err := c.ReadFromUDPAddrPort(b[rsDgramHdr:])
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			a := sockaddrOf(from)
			copy(b, a[:])
			clear(b[len(a):rsDgramHdr])
			if _, err := u.Write(b[:rsDgramHdr+n]); err != nil {
				return // the program's end is closed
			}
		}
	}()
	b := make([]byte, rsDgramHdr+64<<10)
	for {
		n, err := u.Read(b)
		if err != nil {
			break // the program closed its end
		}
		if n < rsDgramHdr {
			continue
		}
		to, ok := sockaddr([abi.SockaddrSize]byte(b[:abi.SockaddrSize]))
		if !ok || !to.IsValid() {
			continue
		}
		if _, err := c.WriteToUDPAddrPort(b[rsDgramHdr:n], to); err != nil {
			if errors.Is(err, net.ErrClosed) {
				break
			}
			s.log.Debug("rsendto: datagram lost", "to", to, "err", err)
		}
	}
	c.Close()
	u.Close()
	<-fromPeers
}

// addPacket keeps c, to close when the session ends; false if it has
// ended.
func (r *rsState) addPacket(c *rsocket.PacketConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.packets == nil {
		r.packets = map[*rsocket.PacketConn]struct{}{}
	}
	r.packets[c] = struct{}{}
	return true
}

func (r *rsState) dropPacket(c *rsocket.PacketConn) {
	r.mu.Lock()
	delete(r.packets, c)
	r.mu.Unlock()
}
