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
	if tail > 0 {
		return n, s.postSplit(p[:n], tail, addr, rkey)
	}
	s.sseqNo++
	s.sqeAvail--
	m := msg(opData, uint32(n))
	s.swr[0] = verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWriteImm, Imm: m, RemoteAddr: addr, RKey: rkey}
	if err := s.post(p[:n], "write"); err != nil {
		return 0, err
	}
	s.stats.MessagesSent++
	s.stats.BytesSent += uint64(n)
	return n, nil
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

// postSplit posts the data message p as two (tailSplit): all but its
// last tail bytes, then those, in one post. A failure to post breaks the
// connection.
func (s *stream) postSplit(p []byte, tail int, addr uint64, rkey uint32) error {
	head := len(p) - tail
	s.sseqNo += 2
	s.sqeAvail -= 2
	m0, m1 := msg(opData, uint32(head)), msg(opData, uint32(tail))
	s.swr[0] = verbs.SendWR{ID: uint64(m0), Opcode: verbs.OpWriteImm, Imm: m0, RemoteAddr: addr, RKey: rkey,
		SGL: s.copyToSendBuffer(p[:head], s.ssge[0:2])}
	s.swr[1] = verbs.SendWR{ID: uint64(m1), Opcode: verbs.OpWriteImm, Imm: m1, RemoteAddr: addr + uint64(head), RKey: rkey,
		SGL: s.copyToSendBuffer(p[head:], s.ssge[2:4])}
	err := s.ep.qp.PostSend(s.swr[:2])
	s.swr[0].SGL, s.swr[1].SGL = nil, nil
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a %d-byte write: %w", ErrConnLost, len(p), err))
		return s.err
	}
	s.stats.MessagesSent += 2
	s.stats.BytesSent += uint64(len(p))
	return nil
}

// post posts s.swr[0], a write whose data is p: inline when p fits the
// inline threshold (the device copies it at post time), else from the
// send buffer, into which it is copied. A failure to post breaks the
// connection; what names the write in its error.
func (s *stream) post(p []byte, what string) error {
	wr := &s.swr[0]
	if len(p) <= s.inline {
		wr.Flags, wr.InlineData = verbs.Inline, p
	} else {
		wr.SGL = s.copyToSendBuffer(p, s.ssge[0:2])
	}
	err := s.ep.qp.PostSend(s.swr[:1])
	wr.InlineData, wr.SGL = nil, nil
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a %d-byte %s: %w", ErrConnLost, len(p), what, err))
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
	if code == ctrlKeepalive {
		wr.Opcode, wr.Imm = verbs.OpWrite, 0
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
