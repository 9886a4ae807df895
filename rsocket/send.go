package rsocket

import (
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// sendData sends the start of p into the current target SGL entry as one
// data message (rsocket.c's rsend and rs_write_data), or as two when
// tailSplit says so, and returns how many bytes it took. The caller
// checked canSend. A write up to the inline threshold is copied by the
// device at post time; a larger one is copied into the send buffer,
// which the device sends from.
func (s *stream) sendData(p []byte) (int, error) {
	t := &s.tgt[s.tgtIdx]
	n := min(len(p), s.maxMsg, s.sbufAvail, int(t.length))
	tail := s.tailSplit(n)
	addr, rkey := t.addr, t.key
	t.addr += uint64(n)
	t.length -= uint32(n)
	if t.length == 0 {
		s.tgtIdx = (s.tgtIdx + 1) % sglEntries
	}
	s.sbufAvail -= n
	k := 1
	if tail > 0 {
		// Both from the send buffer, in the order they take it.
		head := n - tail
		k = 2
		s.swr[0] = dataWR(head, addr, rkey)
		s.swr[0].SGL = s.copyToSendBuffer(p[:head], s.ssge[0:2])
		s.swr[1] = dataWR(tail, addr+uint64(head), rkey)
		s.swr[1].SGL = s.copyToSendBuffer(p[head:n], s.ssge[2:4])
	} else {
		s.swr[0] = dataWR(n, addr, rkey)
		s.stage(p[:n])
	}
	s.sseqNo += uint16(k)
	s.sqeAvail -= k
	if err := s.postN(k, n, "write"); err != nil {
		return 0, err
	}
	s.stats.MessagesSent += uint64(k)
	s.stats.BytesSent += uint64(n)
	return n, nil
}

// dataWR is the work request of a data message of size bytes into the
// peer's buffer at addr; the caller gives it its data.
func dataWR(size int, addr uint64, rkey uint32) verbs.SendWR {
	m := msg(opData, uint32(size))
	return verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWriteImm, Imm: m, RemoteAddr: addr, RKey: rkey}
}

// tailSplit returns how many bytes at the end of an n-byte data message
// to send as a second message, or 0 for one message.
//
// goroce's engine sends a message's packets in GSO runs, datagrams of one
// size that the kernels carry as one (a run's last may be shorter). The
// last packet of a WRITE with immediate carries the 4-byte immediate, so
// when the message ends within 4 bytes of a packet boundary (a 64 KiB
// write does) that packet is longer than a middle one and goes as a
// datagram of its own. Ended 4 bytes earlier, the message's last packet
// is a full one and joins the run, and a message of the 1 to 4 bytes
// left, a packet of a few dozen bytes, ends it: one datagram fewer for
// both kernels to carry, for one completion more at each end (about a
// tenth less CPU per 64 KiB on loopback: BENCHMARKS.md). Both are plain
// data messages of the rsocket protocol, into consecutive bytes of the
// peer's buffer. It takes a second send queue entry and sequence credit,
// when free.
func (s *stream) tailSplit(n int) int {
	mtu := s.gsoMTU
	if mtu == 0 || n <= mtu || s.sqeAvail < 2 || s.sseqNo+1 == s.sseqComp {
		return 0
	}
	last := n % mtu
	if last == 0 {
		last = mtu
	}
	return max(0, last-(mtu-bth.ImmDtLen))
}

// post posts s.swr[0], a write whose data is p: inline when p fits the
// inline threshold (the device copies it at post time), else from the
// send buffer, into which it is copied. A failure to post breaks the
// connection; what names the write in its error.
func (s *stream) post(p []byte, what string) error {
	s.stage(p)
	return s.postN(1, len(p), what)
}

// stage gives s.swr[0] its data p: inline up to the inline threshold,
// else copied into the send buffer.
func (s *stream) stage(p []byte) {
	if wr := &s.swr[0]; len(p) <= s.inline {
		wr.Flags, wr.InlineData = verbs.Inline, p
	} else {
		wr.SGL = s.copyToSendBuffer(p, s.ssge[0:2])
	}
}

// postN posts the first k work requests of s.swr, size bytes in all. A
// failure to post breaks the connection; what names the write in its
// error.
func (s *stream) postN(k, size int, what string) error {
	err := s.ep.qp.PostSend(s.swr[:k])
	for i := range k {
		s.swr[i].InlineData, s.swr[i].SGL = nil, nil
	}
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a %d-byte %s: %w", ErrConnLost, size, what, err))
		return s.err
	}
	return nil
}

// copyToSendBuffer copies p to the send buffer's ring where the last copy
// ended, and returns the one or two SGEs that hold it, written to sg (of
// length 2). The caller checked that the room is free: sbufAvail counts
// the bytes of every message in flight, and completions come in order.
func (s *stream) copyToSendBuffer(p []byte, sg []verbs.SGE) []verbs.SGE {
	base, lkey := s.ep.smr.Addr(), s.ep.smr.LKey()
	head := s.sbufHead
	first := min(len(p), s.sbufSize-head)
	copy(s.ep.sbuf[head:], p[:first])
	sg[0] = verbs.SGE{Addr: base + uint64(head), Length: uint32(first), LKey: lkey}
	s.sbufHead = head + first
	if s.sbufHead == s.sbufSize {
		s.sbufHead = 0
	}
	if first == len(p) {
		return sg[:1]
	}
	rest := copy(s.ep.sbuf, p[first:])
	sg[1] = verbs.SGE{Addr: base, Length: uint32(rest), LKey: lkey}
	s.sbufHead = rest
	return sg[:2]
}

// updateCredits gives the peer credits when half the receive buffer is
// free or half the credits are used (rs_give_credits), and a control
// slot is free.
func (s *stream) updateCredits() {
	if s.creditsDue() && s.ctrlSeq != s.ctrlMax {
		s.sendCredits()
	}
}

// creditsDue reports whether the peer should get credits now.
func (s *stream) creditsDue() bool {
	return s.connected && (s.rbufAvail >= s.half || int16(s.rseqNo-s.rseqComp) >= 0)
}

// sendCredits sends the peer its new sequence limit and, when half the
// receive buffer is free, writes that half into the peer's target SGL
// with the same message (rs_send_credits).
func (s *stream) sendCredits() {
	s.ctrlSeq++
	s.stats.CreditsSent++
	s.rseqComp = s.rseqNo + uint16(s.rqSize/2)
	m := msg(opSGL, uint32(s.rseqNo)+uint32(s.rqSize))
	wr := &s.swr[0]
	*wr = verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWriteImm, Imm: m}
	if s.rbufAvail >= s.half {
		e := sge{addr: s.ep.rmr.Addr() + uint64(s.rbufFree), key: s.ep.rmr.RKey(), length: uint32(s.half)}
		wr.RemoteAddr = s.remoteSGL.addr + uint64(s.remoteSGE)*sgeLen
		wr.RKey = s.remoteSGL.key
		if s.inline >= sgeLen {
			e.put(s.ctrlBuf[:], s.peerOrder)
			wr.Flags, wr.InlineData = verbs.Inline, s.ctrlBuf[:]
		} else {
			// A slot of the control area after the send buffer; the
			// message that used it last (ctrlSlots ago) has completed.
			off := s.sbufSize + int(s.ctrlSeq%ctrlSlots)*sgeLen
			e.put(s.ep.sbuf[off:off+sgeLen], s.peerOrder)
			s.ssge[0] = verbs.SGE{Addr: s.ep.smr.Addr() + uint64(off), Length: sgeLen, LKey: s.ep.smr.LKey()}
			wr.SGL = s.ssge[:1]
		}
		s.rbufAvail -= s.half
		s.rbufPub += s.half
		s.rbufFree += s.half
		if s.rbufFree >= len(s.ep.rbuf) {
			s.rbufFree = 0
		}
		s.remoteSGE = (s.remoteSGE + 1) % s.remoteSGL.length
	}
	s.postCtrl()
}

// sendCtrl sends a control message: DISCONNECT, SHUTDOWN or KEEPALIVE.
// The caller checked that a control slot is free. A keepalive is a
// zero-length RDMA WRITE without immediate: the peer's device answers it
// and its program never sees it.
func (s *stream) sendCtrl(code uint32) {
	s.ctrlSeq++
	m := msg(opCtrl, code)
	wr := &s.swr[0]
	*wr = verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWriteImm, Imm: m}
	switch code {
	case ctrlKeepalive:
		wr.Opcode, wr.Imm = verbs.OpWrite, 0
	case ctrlDisconnect:
		s.endSent = true
	}
	s.postCtrl()
}

// postCtrl posts the control message in swr.
func (s *stream) postCtrl() {
	err := s.ep.qp.PostSend(s.swr[:1])
	s.swr[0].InlineData, s.swr[0].SGL = nil, nil
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a control message: %w", ErrConnLost, err))
	}
}
