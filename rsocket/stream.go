package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// stream is the rsocket protocol state of one connection, as rsocket.c
// keeps it, guarded by Conn.mu. The names follow rsocket.c's where there
// is one.
type stream struct {
	ep   *endpoint
	half int // half the receive buffer: what one credit message publishes

	// Connection state (rs_connected, rs_readable, rs_writable).
	connected, readable, writable bool
	wshut                         bool  // CloseWrite was called
	err                           error // the connection failed; see readErr, writeErr
	qpErr                         bool  // a request was flushed: the QP is in ERR
	sendErr                       error // the first send that failed, until judged
	// peerEnded is when the peer's DISCONNECT came, zero before;
	// endSent, that this side sent a DISCONNECT. Close holds the QP for
	// a peer that ended first and got none (Conn.timeWait).
	peerEnded time.Time
	endSent   bool

	// Sender: credits, send queue and send buffer, target SGL.
	sseqNo, sseqComp uint16
	sqeAvail         int
	sqSize           int
	ctrlSeq, ctrlMax uint32
	sbufAvail        int
	sbufHead         int
	sbufSize         int
	tgt              [sglEntries]sge // this side's target SGL, as consumed
	tgtIdx, tgtFill  int             // entry being used; entry the peer fills next
	remoteSGL        sge             // the peer's target SGL (length: entries)
	remoteSGE        uint32          // the entry of it written next
	peerOrder        binary.ByteOrder
	inline           int
	maxMsg           int
	// gsoMTU is the path MTU on goroce's engine, whose UDP transport
	// sends a message's packets in GSO runs (tailSplit); 0 on a device
	// that segments messages itself.
	gsoMTU int
	// spin: the connection spins (Options.Spin), so polling an empty CQ
	// is how a busy-polled device receives: poll it even when empty.
	spin bool

	// Receiver: queued data messages, receive buffer, credits given.
	rmsg             []uint32 // bytes left of each data message not read
	rmsgHead         int
	rmsgTail         int
	rbufOffset       int // where the next byte to read is
	rbufAvail        int // bytes read and not yet published again
	rbufFree         int // start of the next half to publish
	rbufPub          int // bytes published to the peer and not yet filled
	rseqNo, rseqComp uint16
	rqSize           int
	reposts          int

	// The iomap extension. iomap is this side's iomap table as the peer
	// filled it, each entry checked when its iomap SGL message came (a
	// zero entry is free); IOWrite writes where it says. peerIomap is the
	// peer's table (length: its entries, 0 when it offers none),
	// peerUsed the entries of it this side's mappings hold, and peerNext
	// the entry Map tries first.
	iomap     []iomapEntry
	peerIomap sge
	peerUsed  []bool
	peerNext  int

	// Reused work requests and completions: no allocation per message.
	wcs      [32]verbs.WC
	swr      [2]verbs.SendWR
	ssge     [4]verbs.SGE
	rwrs     []verbs.RecvWR
	ctrlBuf  [sgeLen]byte
	iomapBuf [iomapEntryLen]byte

	// Counters, for Conn.Stats.
	stats Stats

	// What changed in the last progress, for the calls that wait.
	ev [2]bool // dirRead, dirWrite
	// active says a completion was handled since the last keepalive.
	active bool
}

// Directions of the calls that wait.
const (
	dirRead  = 0
	dirWrite = 1
	noDir    = -1
)

// init sets the state of a new connection from the two sides' connection
// data (rsocket.c's rs_init_bufs and rs_save_conn_data).
func (s *stream) init(ep *endpoint, o *Options, peer *connData) {
	s.ep = ep
	s.half = len(ep.rbuf) / 2
	s.connected, s.readable, s.writable = true, true, true
	s.sqSize, s.rqSize = o.SendQueue, o.RecvQueue
	s.ctrlMax = ctrlSlots
	s.sqeAvail = s.sqSize - ctrlSlots
	s.sbufSize, s.sbufAvail = o.SendBuffer, o.SendBuffer
	s.inline, s.maxMsg, s.spin = o.Inline, o.MaxMessage, o.Spin > 0
	if ep.cq.wait != nil { // goroce's engine (qp.CQ)
		if a, err := ep.qp.Query(); err == nil {
			s.gsoMTU = a.PathMTU.Bytes()
		}
	}
	s.sseqComp = peer.credits
	s.tgt[0] = peer.dataBuf
	s.tgtFill = 1
	s.remoteSGL = peer.targetSGL
	s.remoteSGE = 1 % peer.targetSGL.length
	s.peerOrder = order(peer.flags)
	s.rmsg = make([]uint32, s.rqSize+1)
	s.rbufFree, s.rbufAvail, s.rbufPub = s.half, s.half, s.half
	s.rseqComp = uint16(s.rqSize / 2)
	s.rwrs = make([]verbs.RecvWR, ep.recv)
	for i := range s.rwrs {
		s.rwrs[i].ID = recvFlag
	}
	s.iomap = make([]iomapEntry, len(ep.tiomap)/iomapEntryLen)
	if peer.flags&flagIomap != 0 {
		t := peer.targetSGL
		s.peerIomap = sge{addr: t.addr + uint64(t.length)*sgeLen, key: t.key, length: uint32(iomapEntries(peer.iomapSize))}
	}
}

// progress polls the CQ dry and handles every completion, posts the
// receives consumed again and gives the peer credits when due. It
// returns how many completions it handled. A failed send is judged after
// the poll: a QP that fails completes its failed send before it flushes
// its receives, and the peer's DISCONNECT may have come before it.
func (s *stream) progress() int {
	total := s.poll(&s.ep.cq)
	if s.sendErr != nil {
		if s.connected {
			s.fail(fmt.Errorf("%w: %w", ErrConnLost, s.sendErr))
		}
		s.sendErr = nil
	}
	if s.reposts > 0 && s.connected {
		if err := s.ep.qp.PostRecv(s.rwrs[:s.reposts]); err != nil {
			s.fail(fmt.Errorf("%w: posting receives: %w", ErrConnLost, err))
		}
		s.reposts = 0
	}
	s.updateCredits()
	return total
}

// poll handles what cq holds; an empty CQ is not polled unless the
// connection spins (a busy-polled device receives in the poll).
func (s *stream) poll(cq *cqOf) int {
	total := 0
	for s.spin || !cq.empty() {
		n := cq.Poll(s.wcs[:])
		for i := range n {
			s.handle(&s.wcs[i])
		}
		total += n
		if n < len(s.wcs) {
			break
		}
	}
	return total
}

// handle updates the state for one completion (rsocket.c's rs_poll_cq).
func (s *stream) handle(wc *verbs.WC) {
	if wc.ID&recvFlag != 0 {
		s.reposts++
		switch {
		case wc.Status != verbs.Success:
			// Flushed: the QP is in ERR. Why is found after the poll.
			s.qpErr = true
		case wc.Flags&verbs.WithImm == 0:
			s.fail(fmt.Errorf("%w: a %v without immediate data", ErrProtocol, wc.Opcode))
		default:
			s.active = true
			s.receive(wc.Imm, wc.ByteLen)
		}
		return
	}
	m := uint32(wc.ID)
	if m != msg(opCtrl, ctrlKeepalive) {
		s.active = true
	}
	switch msgOp(m) {
	case opSGL, opCtrl:
		s.ctrlMax++
	case opIomapSGL:
		s.sqeAvail++
		s.sbufAvail += iomapEntryLen
	default: // data, and IOWrite's plain RDMA WRITEs (opWrite)
		s.sqeAvail++
		s.sbufAvail += int(msgData(m))
	}
	s.ev[dirWrite] = true
	// A failed send is judged once the CQ is polled dry: the peer's
	// DISCONNECT may have come before it.
	switch {
	case wc.Status == verbs.WRFlushErr:
		// The QP is in ERR: why is found then too.
		s.qpErr = true
	case wc.Status != verbs.Success && s.sendErr == nil:
		s.sendErr = wc.Err()
	}
}

// receive handles a message from the peer.
func (s *stream) receive(imm, n uint32) {
	switch msgOp(imm) {
	case opSGL:
		s.sseqComp = uint16(msgData(imm))
		switch n {
		case 0: // credits only
		case sgeLen:
			s.takeSGLEntry()
		default:
			s.fail(fmt.Errorf("%w: an SGL message of %d bytes, want 0 or %d", ErrProtocol, n, sgeLen))
			return
		}
		s.ev[dirWrite] = true
		s.stats.CreditsReceived++
	case opIomapSGL:
		s.takeIomapEntry(msgData(imm))
	case opWrite:
	case opCtrl:
		switch msgData(imm) {
		case ctrlDisconnect:
			s.connected, s.readable, s.writable = false, false, false
			s.peerEnded = time.Now()
			s.ev = [2]bool{true, true}
		case ctrlShutdown:
			if s.writable {
				s.readable = false
			} else {
				// Not peerEnded: this side's SHUTDOWN, which crossed
				// it, ends the peer's wait too.
				s.connected, s.readable = false, false
			}
			s.ev = [2]bool{true, true}
		}
	default:
		s.queueData(msgData(imm), n)
	}
}

// queueData records a data message the peer wrote into the receive
// buffer, after checking that it kept to what it was given.
func (s *stream) queueData(size, n uint32) {
	next := s.rmsgTail + 1
	if next == len(s.rmsg) {
		next = 0
	}
	switch {
	case size != n:
		s.fail(fmt.Errorf("%w: a data message of %d bytes says %d", ErrProtocol, n, size))
	case int(size) > s.rbufPub:
		s.fail(fmt.Errorf("%w: %d bytes of data into %d bytes of buffer", ErrProtocol, size, s.rbufPub))
	case next == s.rmsgHead:
		s.fail(fmt.Errorf("%w: more than %d data messages unread", ErrProtocol, s.rqSize))
	default:
		s.rbufPub -= int(size)
		s.rmsg[s.rmsgTail] = size
		s.rmsgTail = next
		s.ev[dirRead] = true
		s.stats.MessagesReceived++
		s.stats.BytesReceived += uint64(size)
	}
}

// takeSGLEntry takes the entry of the target SGL the peer wrote with the
// SGL message just received (rs_send_credits writes one with each message
// that carries 16 bytes). The slot is read only then: the peer's device
// may write it at any other time, as it does with the next entry, and the
// message's completion is what orders its write before this read.
func (s *stream) takeSGLEntry() {
	e := getSGE(s.ep.tsgl[s.tgtFill*sgeLen:(s.tgtFill+1)*sgeLen], binary.LittleEndian)
	switch {
	case e.length == 0:
		s.fail(fmt.Errorf("%w: target SGL entry %d of no bytes", ErrProtocol, s.tgtFill))
		return
	case s.tgt[s.tgtFill].length != 0:
		s.fail(fmt.Errorf("%w: target SGL entry %d rewritten before use (%d bytes)", ErrProtocol, s.tgtFill, e.length))
		return
	}
	s.tgt[s.tgtFill] = e
	s.tgtFill = (s.tgtFill + 1) % sglEntries
}

// fail ends the connection with err, unless it failed already.
func (s *stream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.connected, s.readable, s.writable = false, false, false
	s.ev = [2]bool{true, true}
}

// qpDown handles a QP found in ERR while connected: the connection
// manager says why (a DREQ from the peer, or another end).
func (s *stream) qpDown(cc *cm.Conn) {
	s.qpErr = false
	if !s.connected {
		return
	}
	err := cc.Err()
	switch {
	case errors.Is(err, cm.ErrDisconnected):
		s.fail(ErrReset)
	case err != nil:
		s.fail(fmt.Errorf("%w: %w", ErrConnLost, err))
	default:
		s.fail(fmt.Errorf("%w: the queue pair went to the error state", ErrConnLost))
	}
}

// canSend reports whether a data message may go now (rs_can_send).
func (s *stream) canSend() bool {
	return s.sqeAvail > 0 && s.sbufAvail >= lowWater && s.sseqNo != s.sseqComp && s.tgt[s.tgtIdx].length != 0
}

// sendsDone reports whether every message sent has completed.
func (s *stream) sendsDone() bool {
	return int(s.ctrlMax-s.ctrlSeq)+s.sqeAvail == s.sqSize
}

// readErr is what a Read that finds no data returns.
func (s *stream) readErr() error {
	if s.err != nil {
		return s.err
	}
	if !s.readable {
		return io.EOF
	}
	return nil
}

// writeErr is what a Write returns when it may not send.
func (s *stream) writeErr() error {
	switch {
	case s.err != nil:
		return s.err
	case s.wshut:
		return ErrShutdown
	case !s.writable:
		return ErrReset
	}
	return nil
}

// consume copies queued data into p, message by message, and returns how
// many bytes it copied (rsocket.c's rrecv). A message read to its end
// counts towards the peer's credits.
func (s *stream) consume(p []byte) int {
	rbuf := s.ep.rbuf
	n := 0
	for n < len(p) && s.rmsgHead != s.rmsgTail {
		m := &s.rmsg[s.rmsgHead]
		k := min(len(p)-n, int(*m))
		if k == int(*m) {
			s.rseqNo++
			if s.rmsgHead++; s.rmsgHead == len(s.rmsg) {
				s.rmsgHead = 0
			}
		} else {
			*m -= uint32(k)
		}
		for k > 0 {
			c := copy(p[n:n+k], rbuf[s.rbufOffset:])
			n, k = n+c, k-c
			s.rbufAvail += c
			if s.rbufOffset += c; s.rbufOffset == len(rbuf) {
				s.rbufOffset = 0
			}
		}
	}
	return n
}
