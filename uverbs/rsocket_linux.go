package uverbs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/uverbs/abi"
	"golang.org/x/sys/unix"
)

// rsockets: the library's rsocket is one end of a UNIX socket pair, and
// the device carries its bytes to and from an rsocket connection of its
// own (package rsocket, librdmacm's protocol on the wire); abi/rsocket.go
// has the protocol. A connection lives as long as both ends do: the
// program closing its end (or dying) ends it, and so does the peer.

// rsDialTimeout bounds rconnect's handshake, as rdma_cm's retries bound
// librdmacm's.
const rsDialTimeout = 30 * time.Second

// rsListener is a listening rsocket: the device's listener, the
// program's end of it (a byte per waiting connection), and the
// connections waiting for raccept.
type rsListener struct {
	l     *rsocket.Listener
	sig   *os.File
	mu    sync.Mutex
	ready []*rsocket.Conn
}

// rsState is a session's rsockets.
type rsState struct {
	mu        sync.Mutex
	listeners map[uint32]*rsListener
	conns     map[*rsocket.Conn]struct{}
	packets   map[*rsocket.PacketConn]struct{} // datagram rsockets (rsdgram_linux.go)
	byHandle  map[uint32]*rsConn               // connections by handle, for the iomap calls (rsiomap_linux.go)
	closed    bool
	gone      chan struct{}       // closed when the session ends
	resets    map[uint32]struct{} // connections the peer reset, until the program asks (RSStatusReq)
}

// reset notes that the peer of connection h reset it or went.
func (r *rsState) reset(h uint32) {
	r.mu.Lock()
	if r.resets == nil {
		r.resets = map[uint32]struct{}{}
	}
	r.resets[h] = struct{}{}
	r.mu.Unlock()
}

// init makes r ready; the session calls it as it starts.
func (r *rsState) init() { r.gone = make(chan struct{}) }

// add keeps connection h, to close when the session ends; false if it
// has ended.
func (r *rsState) add(h uint32, rc *rsConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.conns == nil {
		r.conns = map[*rsocket.Conn]struct{}{}
		r.byHandle = map[uint32]*rsConn{}
	}
	r.conns[rc.c] = struct{}{}
	r.byHandle[h] = rc
	return true
}

// ended reports whether the session has ended.
func (r *rsState) ended() bool {
	select {
	case <-r.gone:
		return true
	default:
		return false
	}
}

func (r *rsState) drop(h uint32, rc *rsConn) {
	r.mu.Lock()
	delete(r.conns, rc.c)
	delete(r.byHandle, h)
	r.mu.Unlock()
}

// close ends the session's rsockets, as the kernel ends a dead
// process's: its listeners stop, and each connection closes once what
// the program wrote has gone (rsRelay), the peer seeing it end.
func (r *rsState) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	ls, ps := r.listeners, r.packets
	r.listeners, r.packets = nil, nil
	r.mu.Unlock()
	close(r.gone)
	for _, l := range ls {
		l.close()
	}
	for c := range ps {
		c.Close()
	}
}

// listening returns the addresses the session's rsockets listen on.
func (r *rsState) listening() []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	var a []netip.AddrPort
	for _, l := range r.listeners {
		if ra, ok := l.l.Addr().(*rsocket.Addr); ok {
			a = append(a, ra.AddrPort)
		}
	}
	return a
}

func (l *rsListener) close() {
	l.l.Close()
	l.sig.Close()
	l.mu.Lock()
	for _, c := range l.ready {
		c.Close()
	}
	l.ready = nil
	l.mu.Unlock()
}

// rsErrno returns the errno rconnect and rlisten give for err.
func rsErrno(err error) uint32 {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cm.ErrConnRefused), errors.Is(err, cm.ErrRejected):
		return uint32(syscall.ECONNREFUSED)
	case errors.Is(err, cm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return uint32(syscall.ETIMEDOUT)
	case errors.Is(err, cm.ErrUnreachable):
		return uint32(syscall.EHOSTUNREACH)
	case errors.Is(err, cm.ErrAddr):
		return uint32(syscall.EADDRNOTAVAIL)
	case errors.As(err, &en):
		return uint32(en)
	}
	return errno(err)
}

// rsFile takes a descriptor the program sent as the device's end of a
// UNIX stream socket; nil if it is not one.
func rsFile(fd int) *os.File {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		unix.Close(fd)
		return nil
	}
	if d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || d != unix.AF_UNIX {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), "rsocket")
}

// rsConnect dials Dst and carries the connection on the descriptor
// (rconnect); the handshake runs apart from the session, and its result
// is the RSHeader written on the descriptor.
func (s *session) rsConnect(body []byte, fds []int) uint32 {
	var req abi.RSConnectReq
	if !decode(body, &req) {
		closeFDs(fds)
		return abi.EINVAL
	}
	dst, ok := sockaddr(req.Dst)
	f := rsFile(fds[0])
	switch {
	case f == nil:
		return abi.EINVAL
	case !ok || !dst.IsValid() || dst.Port() == 0 || dst.Addr().IsUnspecified():
		f.Close()
		return abi.EINVAL
	}
	h, ok := s.handle32()
	if !ok {
		f.Close()
		return abi.ENOMEM
	}
	dev := s.srv.dev
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), rsDialTimeout)
		d := &rsocket.Dialer{Options: rsocket.Options{IOMapSize: int(req.IOMapSize)}}
		c, err := d.Dial(ctx, dev, dst)
		cancel()
		hdr := abi.RSHeader{Handle: h}
		var rc *rsConn
		switch {
		case err != nil:
			hdr.Errno = rsErrno(err)
			s.log.Debug("rconnect failed", "dst", dst, "err", err)
		default:
			// Kept before the program hears of it: its riomap may come
			// right after.
			if rc = s.rsKeep(h, c); rc == nil {
				hdr.Errno = abi.ENODEV
				break
			}
			hdr.Local, hdr.Peer = rsAddr(c.LocalAddr()), rsAddr(c.RemoteAddr())
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr))
		if _, werr := f.Write(b); werr != nil || rc == nil {
			f.Close()
			if rc != nil {
				s.rs.drop(h, rc)
				c.Close()
			}
			return
		}
		s.rsRelay(h, f, rc)
	}()
	return 0
}

// rsAddr is a as the library's sockaddr.
func rsAddr(a net.Addr) [abi.SockaddrSize]byte {
	if r, ok := a.(*rsocket.Addr); ok {
		return sockaddrOf(r.AddrPort)
	}
	return [abi.SockaddrSize]byte{}
}

// rsRelay carries bytes between the program's end f and c. The
// program's bytes all go, and then its end of stream as a half close
// (rshutdown); the peer's end of stream goes to the program likewise.
// Once the program has closed its end and its bytes have gone, the
// connection closes as rclose closes one (what was written reaches the
// peer first) when the program has gone too, or when the peer has ended
// its side; the session's end is the program's (rsState.close).
func (s *session) rsRelay(h uint32, f *os.File, rc *rsConn) {
	c := rc.c
	defer s.rs.drop(h, rc)
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		c.Close()
		return
	}
	u := fc.(*net.UnixConn)
	fromPeer := make(chan struct{})
	go func() {
		defer close(fromPeer)
		_, err := io.Copy(u, c)
		switch {
		case err == nil:
			u.CloseWrite() // the peer's end of stream
		case !errors.Is(err, net.ErrClosed) || !s.rs.ended():
			// The peer reset the connection or went: the program's
			// read of the end fails with ECONNRESET (RSStatusReq).
			s.rs.reset(h)
			u.CloseWrite()
		}
	}()
	if rsCopy(rc, u) == nil {
		c.CloseWrite()
	}
	rc.ended()
	select {
	case <-fromPeer:
	case <-s.rs.gone:
	}
	rc.unmapAll()
	c.Close()
	<-fromPeer
	u.Close()
}

// rsKeep keeps connection c of the session as h, or closes it and
// returns nil when the session has ended.
func (s *session) rsKeep(h uint32, c *rsocket.Conn) *rsConn {
	rc := newRSConn(c)
	if !s.rs.add(h, rc) {
		c.Close()
		return nil
	}
	return rc
}

// rsCopy carries the program's bytes from u to the peer, counting them
// (rsConn.after), until the program's end of stream (nil) or an error.
func rsCopy(rc *rsConn, u *net.UnixConn) error {
	b := make([]byte, 256<<10)
	for {
		n, err := u.Read(b)
		if n > 0 {
			if _, werr := rc.c.Write(b[:n]); werr != nil {
				return werr
			}
			rc.relayed(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// rsListen listens at Addr (rlisten) and tells the program of each
// connection it accepts with a byte on the listener's descriptor.
func (s *session) rsListen(body []byte, fds []int) (any, uint32) {
	var req abi.RSListenReq
	if !decode(body, &req) {
		closeFDs(fds)
		return nil, abi.EINVAL
	}
	addr, ok := sockaddr(req.Addr)
	f := rsFile(fds[0])
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
	backlog := int(min(max(req.Backlog, 1), 1024))
	cfg := &rsocket.ListenConfig{Backlog: backlog, Options: rsocket.Options{IOMapSize: int(req.IOMapSize)}}
	l, err := cfg.Listen(context.Background(), s.srv.dev, addr)
	if err != nil {
		f.Close()
		return nil, rsErrno(err)
	}
	h, ok := s.handle32()
	if !ok {
		l.Close()
		f.Close()
		return nil, abi.ENOMEM
	}
	rl := &rsListener{l: l, sig: f}
	s.rs.mu.Lock()
	if s.rs.closed {
		s.rs.mu.Unlock()
		rl.close()
		return nil, abi.ENODEV
	}
	if s.rs.listeners == nil {
		s.rs.listeners = map[uint32]*rsListener{}
	}
	s.rs.listeners[h] = rl
	s.rs.mu.Unlock()
	go s.rsAcceptLoop(h, rl)
	go s.rsWatch(h, rl)
	return &abi.RSListenReply{Handle: h, Addr: rsAddr(l.Addr())}, 0
}

// rsAcceptLoop accepts connections for the program, each waiting for
// its raccept.
func (s *session) rsAcceptLoop(h uint32, rl *rsListener) {
	for {
		c, err := rl.l.AcceptContext(context.Background())
		if err != nil {
			return // closed
		}
		rl.mu.Lock()
		rl.ready = append(rl.ready, c)
		rl.mu.Unlock()
		if _, err := rl.sig.Write([]byte{1}); err != nil {
			s.rsStop(h)
			return
		}
	}
}

// rsWatch stops listener h once the program has closed its end.
func (s *session) rsWatch(h uint32, rl *rsListener) {
	var b [64]byte
	for {
		if _, err := rl.sig.Read(b[:]); err != nil {
			s.rsStop(h)
			return
		}
	}
}

func (s *session) rsStop(h uint32) {
	s.rs.mu.Lock()
	rl := s.rs.listeners[h]
	delete(s.rs.listeners, h)
	s.rs.mu.Unlock()
	if rl != nil {
		rl.close()
	}
}

// rsAccept hands the first waiting connection of a listener to the
// program (raccept).
func (s *session) rsAccept(body []byte, fds []int) (any, uint32) {
	var req abi.RSAcceptReq
	if !decode(body, &req) {
		closeFDs(fds)
		return nil, abi.EINVAL
	}
	f := rsFile(fds[0])
	if f == nil {
		return nil, abi.EINVAL
	}
	s.rs.mu.Lock()
	rl := s.rs.listeners[req.Handle]
	s.rs.mu.Unlock()
	if rl == nil {
		f.Close()
		return nil, abi.EINVAL
	}
	rl.mu.Lock()
	var c *rsocket.Conn
	if len(rl.ready) > 0 {
		c = rl.ready[0]
		rl.ready = rl.ready[1:]
	}
	rl.mu.Unlock()
	if c == nil {
		f.Close()
		return nil, abi.EAGAIN
	}
	h, ok := s.handle32()
	if !ok {
		f.Close()
		c.Close()
		return nil, abi.ENOMEM
	}
	r := &abi.RSAcceptReply{Handle: h, Local: rsAddr(c.LocalAddr()), Peer: rsAddr(c.RemoteAddr())}
	rc := s.rsKeep(h, c) // before the reply: the program's riomap may come right after
	if rc == nil {
		f.Close()
		return nil, abi.ENODEV
	}
	go s.rsRelay(h, f, rc)
	return r, 0
}

// rsOption sets a listener's RDMA_IOMAPSIZE for the connections it
// accepts from now on.
func (s *session) rsOption(body []byte) uint32 {
	var req abi.RSOptionReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	s.rs.mu.Lock()
	rl := s.rs.listeners[req.Handle]
	s.rs.mu.Unlock()
	if rl == nil {
		return abi.EINVAL
	}
	if err := rl.l.SetIOMapSize(int(min(req.IOMapSize, 0x7f00))); err != nil {
		return abi.EINVAL
	}
	return 0
}

// rsStatus tells the program whether connection h's peer reset it
// (ECONNRESET) once it has read the end of the peer's bytes; it asks once.
func (s *session) rsStatus(body []byte) uint32 {
	var req abi.RSStatusReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	s.rs.mu.Lock()
	defer s.rs.mu.Unlock()
	if _, ok := s.rs.resets[req.Handle]; ok {
		delete(s.rs.resets, req.Handle)
		return uint32(syscall.ECONNRESET)
	}
	return 0
}
