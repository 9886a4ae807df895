package rawudp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/mmsg"
)

// socket is a blocking UDP socket with big buffers, the baseline's own:
// it takes the calls goroce's UDP transport makes (sendmmsg with a
// UDP_SEGMENT run, recvmmsg with GRO) and none of its work. It is used by
// one goroutine at a time.
type socket struct {
	fd int
	// With --ack, oob is the UDP_SEGMENT control message that sends each
	// ping-pong datagram and its ackLen-byte ACK as one GSO run.
	oob    []byte
	ackLen int
	calls  *calls // --calls
}

// openSocket opens the socket on addr; rcvTimeo bounds each receive, so
// that a receiver sees when it should stop.
func openSocket(addr netip.AddrPort, rcvTimeo time.Duration) (*socket, error) {
	fam := unix.AF_INET
	if addr.Addr().Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, 16 << 20}, {unix.SO_SNDBUFFORCE, 16 << 20}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], o[1]) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0]-32, o[1]) // SO_RCVBUF, SO_SNDBUF: capped by rmem_max
		}
	}
	s := &socket{fd: fd}
	if rcvTimeo > 0 {
		s.setRecvTimeout(rcvTimeo)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %v: %w", addr, err)
	}
	return s, nil
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()}
}

func (s *socket) close() error {
	if s.calls != nil {
		s.calls.close()
	}
	return unix.Close(s.fd)
}

func (s *socket) connect(to netip.AddrPort) error { return unix.Connect(s.fd, sockaddr(to)) }

func (s *socket) enableGRO() error { return unix.SetsockoptInt(s.fd, unix.SOL_UDP, unix.UDP_GRO, 1) }

func (s *socket) setNonblock() error { return unix.SetNonblock(s.fd, true) }

// setAck makes the ping-pong's sends carry an ackSize-byte datagram
// after each size-byte one, in one GSO send, and its receives take the
// two as one (GRO), as goroce's transport sends a WRITE's answer and the
// ACK before it.
func (s *socket) setAck(size int) error {
	if err := s.enableGRO(); err != nil {
		return fmt.Errorf("UDP_GRO: %w", err)
	}
	s.oob, s.ackLen = segmentCmsg(size), ackSize
	return nil
}

func (s *socket) setRecvTimeout(d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	return unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// receive counts what arrives until stop, timing from the first datagram
// to the last. GRO hands over runs of size-byte segments, and the
// first-byte datagrams that precede them alone. With work, each datagram
// goes through a placer.
func (s *socket) receive(size, first int, work bool, stop *atomic.Bool) result {
	msgs := make([]mmsg.Msg, 16)
	bufs := mmsg.Buffers(msgs, 65536)
	var pl *placer
	if work {
		pl = &placer{}
	}
	var res result
	var start, last time.Time
	for !stop.Load() {
		n, e := mmsg.Recv(uintptr(s.fd), msgs, 0)
		if e != 0 {
			continue // EAGAIN from the receive timeout
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		last = now
		for i := range n {
			if pl != nil {
				pl.place(bufs[i][:msgs[i].Len], size, first)
			}
			b := uint64(msgs[i].Len)
			res.Bytes += b
			if first > 0 && b == uint64(first) {
				res.Datagrams++
				continue
			}
			res.Datagrams += (b + uint64(size) - 1) / uint64(size)
		}
	}
	if !start.IsZero() {
		res.Seconds = last.Sub(start).Seconds()
	}
	if pl != nil {
		res.ICRCErrors = pl.bad
	}
	return res
}

// send sends for c.duration: GSO runs of c.gso datagrams (each after a
// c.first-byte one, with --first), or sendmmsg batches of 64 single
// datagrams. It returns the datagrams sent.
func (s *socket) send(ctx context.Context, c *config) (uint64, error) {
	const batch = 64
	payload := make([]byte, batch*c.size)
	for i := range payload {
		payload[i] = byte(i)
	}
	end := time.Now().Add(c.duration)
	switch {
	case c.gso > 0 && c.first > 0:
		return s.sendFirst(ctx, c, payload, end)
	case c.gso > 0:
		return s.sendRuns(ctx, c, payload, end)
	}
	return s.sendBatches(ctx, c, payload, end)
}

// retryable reports whether a send that failed with e is tried again: a
// full device queue, an ICMP error of an earlier datagram, a signal.
func retryable(e error) bool {
	return errors.Is(e, unix.ENOBUFS) || errors.Is(e, unix.ECONNREFUSED) || errors.Is(e, unix.EINTR)
}

// sendRuns sends GSO runs of c.gso datagrams, one sendmsg each.
func (s *socket) sendRuns(ctx context.Context, c *config, payload []byte, end time.Time) (uint64, error) {
	oob := segmentCmsg(c.size)
	run := payload[:c.gso*c.size]
	var sent uint64
	for i := 0; ; i++ {
		if i%64 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			return sent, nil
		}
		if c.work {
			seal(run, c.size)
		}
		if _, err := unix.SendmsgN(s.fd, run, oob, nil, 0); err != nil {
			if retryable(err) {
				continue
			}
			return sent, fmt.Errorf("sendmsg: %w (try --gso 0 where the kernel lacks UDP GSO)", err)
		}
		sent += uint64(c.gso)
	}
}

// segmentCmsg is the UDP_SEGMENT control message for size-byte segments.
func segmentCmsg(size int) []byte {
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
	return oob
}

// sendFirst sends, in each sendmmsg, a c.first-byte datagram and a GSO
// run of c.gso: the framing of an RDMA WRITE of (c.gso+1) packets.
func (s *socket) sendFirst(ctx context.Context, c *config, payload []byte, end time.Time) (uint64, error) {
	oob := segmentCmsg(c.size)
	head := make([]byte, c.first)
	iovs := []unix.Iovec{{Base: &head[0]}, {Base: &payload[0]}}
	iovs[0].SetLen(len(head))
	iovs[1].SetLen(c.gso * c.size)
	msgs := make([]mmsg.Msg, 2)
	for i := range msgs {
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	msgs[1].Hdr.Control = &oob[0]
	msgs[1].Hdr.SetControllen(len(oob))
	var sent uint64
	for i := 0; ; i++ {
		if i%64 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			return sent, nil
		}
		if c.work {
			seal(head, c.first)
			seal(payload[:c.gso*c.size], c.size)
		}
		n, e := mmsg.Send(uintptr(s.fd), msgs, 0)
		if e != 0 {
			if retryable(e) {
				continue
			}
			return sent, fmt.Errorf("sendmmsg: %w", e)
		}
		if n == 2 {
			sent += uint64(c.gso) + 1
		} else {
			sent++
		}
	}
}

// sendBatches sends sendmmsg batches of 64 single datagrams.
func (s *socket) sendBatches(ctx context.Context, c *config, payload []byte, end time.Time) (uint64, error) {
	const batch = 64
	iovs := make([]unix.Iovec, batch)
	msgs := make([]mmsg.Msg, batch)
	for i := range msgs {
		iovs[i].Base = &payload[i*c.size]
		iovs[i].SetLen(c.size)
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	var sent uint64
	for i := 0; ; i++ {
		if i%16 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			return sent, nil
		}
		n, e := mmsg.Send(uintptr(s.fd), msgs, 0)
		if e != 0 {
			if retryable(e) {
				continue
			}
			return sent, fmt.Errorf("sendmmsg: %w", e)
		}
		sent += uint64(n)
	}
}

// echo sends every datagram back until stop and returns how many it
// echoed. The first datagram's source becomes the socket's peer, so the
// rest take plain reads and writes. A blocking socket wakes up from its
// receive timeout to look at stop; a non-blocking one spins.
func (s *socket) echo(stop *atomic.Bool) uint64 {
	buf := make([]byte, 65536)
	var n uint64
	if s.calls != nil {
		for !stop.Load() {
			if d, err := s.calls.recv(s.fd); err == nil && s.calls.send(d, s.oob) == nil {
				n++
			}
		}
		return n
	}
	connected := false
	for !stop.Load() {
		if !connected {
			m, from, err := unix.Recvfrom(s.fd, buf, 0)
			if err != nil || from == nil {
				continue
			}
			if _, err := unix.SendmsgN(s.fd, buf[:m], s.oob, from, 0); err == nil {
				n++
			}
			connected = unix.Connect(s.fd, from) == nil
			continue
		}
		m, err := unix.Read(s.fd, buf)
		if err != nil {
			continue // EAGAIN: the receive timeout, or nothing yet when spinning
		}
		if s.write(buf[:m]) == nil {
			n++
		}
	}
	return n
}

// write sends b to the connected peer: with --ack, as a GSO run whose
// second segment is the ACK; with --calls, by sendmmsg from the second
// socket.
func (s *socket) write(b []byte) error {
	if s.calls != nil {
		return s.calls.send(b, s.oob)
	}
	if s.oob != nil {
		_, err := unix.SendmsgN(s.fd, b, s.oob, nil, 0)
		return err
	}
	_, err := unix.Write(s.fd, b)
	return err
}

// await waits for the echo of round seq: false after 200 ms without it
// (the datagram or its echo was lost). A blocking socket's receive
// timeout is those 200 ms.
func (s *socket) await(in []byte, seq uint32, busy bool) (bool, error) {
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		d, err := s.read(in)
		switch {
		case err == nil && len(d) >= 4 && binary.LittleEndian.Uint32(d) == seq:
			return true, nil
		case err == nil || err == unix.EINTR:
			// a late echo of an earlier round
		case err != unix.EAGAIN:
			return false, fmt.Errorf("receive: %w", err)
		case !busy || time.Now().After(deadline):
			return false, nil
		}
	}
}

// read receives one datagram: into in from the connected socket, or with
// --calls from recvmmsg's first buffer.
func (s *socket) read(in []byte) ([]byte, error) {
	if s.calls != nil {
		return s.calls.recv(s.fd)
	}
	m, err := unix.Read(s.fd, in)
	if err != nil {
		return nil, err
	}
	return in[:m], nil
}
