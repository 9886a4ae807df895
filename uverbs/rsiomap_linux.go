package uverbs

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/uverbs/abi"
	"golang.org/x/sys/unix"
)

// rsockets' iomap extension on the device (riomap, riounmap, riowrite).
// A mapping is the program's own memory, shared with the device as a
// memory region is: the peer's RDMA WRITEs land in it as they would in
// librdmacm's. A riowrite's bytes come from a buffer of the library's,
// shared likewise. Both act on the connection in the order the program
// wrote: once the bytes it wrote before the call have gone to the peer
// (RSMapReq.Sent, rsConn.relayed).

// rsConn is a stream rsocket's connection as the iomap calls see it.
type rsConn struct {
	c    *rsocket.Conn
	mu   sync.Mutex
	cond sync.Cond
	sent uint64 // the program's bytes written to c so far
	done bool   // the relay from the program has ended
	maps []rsMapping
}

// rsMapping is a buffer of the program's that the peer writes into.
type rsMapping struct {
	addr, n uint64
	offset  int64
	view    []byte // the device's mapping of its pages
}

func newRSConn(c *rsocket.Conn) *rsConn {
	rc := &rsConn{c: c}
	rc.cond.L = &rc.mu
	return rc
}

// relayed counts n more of the program's bytes written to the peer.
func (rc *rsConn) relayed(n int) {
	rc.mu.Lock()
	rc.sent += uint64(n)
	rc.cond.Broadcast()
	rc.mu.Unlock()
}

// ended says the program's bytes stop here.
func (rc *rsConn) ended() {
	rc.mu.Lock()
	rc.done = true
	rc.cond.Broadcast()
	rc.mu.Unlock()
}

// after waits until the first n bytes the program wrote have gone to the
// peer; false if the relay ended first.
func (rc *rsConn) after(n uint64) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for rc.sent < n && !rc.done {
		rc.cond.Wait()
	}
	return rc.sent >= n
}

// What sentBy finds of the program's first n bytes.
const (
	rsSent    = iota // they have gone to the peer
	rsPending        // the relay has yet to carry some of them
	rsGone           // the relay ended before it carried them all
)

// sentBy is after without the wait.
func (rc *rsConn) sentBy(n uint64) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case rc.sent >= n:
		return rsSent
	case rc.done:
		return rsGone
	}
	return rsPending
}

// unmapAll ends every mapping: the connection is closing.
func (rc *rsConn) unmapAll() {
	rc.mu.Lock()
	ms := rc.maps
	rc.maps = nil
	rc.mu.Unlock()
	for _, m := range ms {
		rc.c.Unmap(m.offset)
		unix.Munmap(m.view)
	}
}

// rsConnOf returns connection h of the session, or nil.
func (s *session) rsConnOf(h uint32) *rsConn {
	s.rs.mu.Lock()
	defer s.rs.mu.Unlock()
	return s.rs.byHandle[h]
}

// rsIOErrno is the errno riomap and riowrite give for err.
func rsIOErrno(err error) uint32 {
	switch {
	case errors.Is(err, rsocket.ErrIOMapFull):
		return abi.ENOMEM
	case errors.Is(err, rsocket.ErrNotMapped):
		return abi.EINVAL
	case errors.Is(err, os.ErrDeadlineExceeded):
		return uint32(syscall.EAGAIN)
	case errors.Is(err, net.ErrClosed):
		return uint32(syscall.EPIPE)
	}
	return uint32(syscall.ECONNRESET)
}

// rsMap maps the program's buffer for the peer (riomap, PROT_WRITE).
func (s *session) rsMap(body []byte) (any, uint32) {
	var req abi.RSMapReq
	if !decode(body, &req) || req.Offset < -1 {
		return nil, abi.EINVAL
	}
	rc := s.rsConnOf(req.Handle)
	if rc == nil {
		return nil, abi.EINVAL
	}
	view, buf, e := s.mapRegion(req.Addr, req.Length)
	if e != 0 {
		return nil, e
	}
	if !rc.after(req.Sent) {
		unix.Munmap(view)
		return nil, uint32(syscall.ECONNRESET)
	}
	off := req.Offset
	if off == -1 {
		off = int64(req.Addr) // as riomap: the buffer's address
	}
	got, err := rc.c.Map(buf, off)
	if err != nil {
		unix.Munmap(view)
		return nil, rsIOErrno(err)
	}
	rc.mu.Lock()
	rc.maps = append(rc.maps, rsMapping{addr: req.Addr, n: req.Length, offset: got, view: view})
	rc.mu.Unlock()
	return &abi.RSMapReply{Offset: got}, 0
}

// rsUnmap ends a mapping (riounmap): EINVAL when none has that address
// and length.
func (s *session) rsUnmap(body []byte) uint32 {
	var req abi.RSUnmapReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	rc := s.rsConnOf(req.Handle)
	if rc == nil {
		return abi.EINVAL
	}
	rc.mu.Lock()
	var m *rsMapping
	for i := range rc.maps {
		if rc.maps[i].addr == req.Addr && rc.maps[i].n == req.Length {
			mm := rc.maps[i]
			m = &mm
			rc.maps = append(rc.maps[:i], rc.maps[i+1:]...)
			break
		}
	}
	rc.mu.Unlock()
	if m == nil {
		return abi.EINVAL
	}
	rc.c.Unmap(m.offset)
	unix.Munmap(m.view)
	return 0
}

// rsIOWrite writes the library's buffer into the peer's mappings
// (riowrite).
func (s *session) rsIOWrite(body []byte) (any, uint32) {
	var req abi.RSWriteReq
	if !decode(body, &req) || req.Offset < 0 {
		return nil, abi.EINVAL
	}
	rc := s.rsConnOf(req.Handle)
	if rc == nil {
		return nil, abi.EINVAL
	}
	view, buf, e := s.mapRegion(req.Addr, req.Length)
	if e != 0 {
		return nil, e
	}
	defer unix.Munmap(view)
	write := rc.c.IOWrite
	if req.Flags&unix.MSG_DONTWAIT != 0 {
		// A non-blocking riowrite: EAGAIN rather than a wait for the
		// bytes written before it to go, or for room.
		switch rc.sentBy(req.Sent) {
		case rsGone:
			return nil, uint32(syscall.ECONNRESET)
		case rsPending:
			return nil, uint32(syscall.EAGAIN)
		}
		write = rc.c.IOWriteNow
	} else if !rc.after(req.Sent) {
		return nil, uint32(syscall.ECONNRESET)
	}
	n, err := write(buf, req.Offset)
	if n == 0 && err != nil {
		return nil, rsIOErrno(err)
	}
	return &abi.RSWriteReply{N: uint64(n)}, 0
}
