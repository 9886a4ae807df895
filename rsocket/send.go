package rsocket

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// sendData sends the start of p as one data message into the current
// target SGL entry (rsocket.c's rsend and rs_write_data) and returns how
// many bytes it took. The caller checked canSend. A write up to the
// inline threshold is copied by the device at post time; a larger one is
// copied into the send buffer, which the device sends from.
func (s *stream) sendData(p []byte) (int, error) {
	t := &s.tgt[s.tgtIdx]
	n := min(len(p), s.maxMsg, s.sbufAvail, int(t.length))
	addr, rkey := t.addr, t.key
	t.addr += uint64(n)
	t.length -= uint32(n)
	if t.length == 0 {
		s.tgtIdx = (s.tgtIdx + 1) % sglEntries
	}
	s.sseqNo++
	s.sqeAvail--
	s.sbufAvail -= n
	m := msg(opData, uint32(n))
	s.swr[0] = verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWriteImm, Imm: m, RemoteAddr: addr, RKey: rkey}
	if err := s.post(p[:n], "write"); err != nil {
		return 0, err
	}
	s.stats.MessagesSent++
	s.stats.BytesSent += uint64(n)
	return n, nil
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
		wr.SGL = s.copyToSendBuffer(p)
	}
	err := s.ep.qp.PostSend(s.swr[:])
	wr.InlineData, wr.SGL = nil, nil
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a %d-byte %s: %w", ErrConnLost, len(p), what, err))
		return s.err
	}
	return nil
}

// copyToSendBuffer copies p to the send buffer's ring where the last copy
// ended, and returns the one or two SGEs that hold it. The caller checked
// that the room is free: sbufAvail counts the bytes of every message in
// flight, and completions come in order.
func (s *stream) copyToSendBuffer(p []byte) []verbs.SGE {
	base, lkey := s.ep.smr.Addr(), s.ep.smr.LKey()
	head := s.sbufHead
	first := min(len(p), s.sbufSize-head)
	copy(s.ep.sbuf[head:], p[:first])
	s.ssge[0] = verbs.SGE{Addr: base + uint64(head), Length: uint32(first), LKey: lkey}
	s.sbufHead = head + first
	if s.sbufHead == s.sbufSize {
		s.sbufHead = 0
	}
	if first == len(p) {
		return s.ssge[:1]
	}
	rest := copy(s.ep.sbuf, p[first:])
	s.ssge[1] = verbs.SGE{Addr: base, Length: uint32(rest), LKey: lkey}
	s.sbufHead = rest
	return s.ssge[:2]
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
	err := s.ep.qp.PostSend(s.swr[:])
	s.swr[0].InlineData, s.swr[0].SGL = nil, nil
	if err != nil {
		s.fail(fmt.Errorf("%w: posting a control message: %w", ErrConnLost, err))
	}
}
