package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// Errors of the iomap extension (Map, Unmap, IOWrite), as the Err of the
// *net.OpError those return, wrapped with what was asked.
var (
	// ErrNotMapped means IOWrite reached bytes no buffer the peer mapped
	// covers (or this side offers the peer no iomap table:
	// Options.IOMapSize is 0), or Unmap named an offset this side has
	// not mapped. It matches syscall.EINVAL.
	ErrNotMapped error = &errnoError{"rsocket: not mapped", syscall.EINVAL}
	// ErrIOMapFull means Map found no free entry in the peer's iomap
	// table: the peer offers none (its RDMA_IOMAPSIZE, or IOMapSize, is
	// 0: librdmacm's default) or every entry holds a mapping of this
	// side's. It matches syscall.ENOMEM, what riomap returns then.
	ErrIOMapFull error = &errnoError{"rsocket: no free entry in the peer's iomap table", syscall.ENOMEM}
)

// errnoError is a sentinel error that matches an errno without saying
// it, so that the details wrapped after it read well.
type errnoError struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoError) Error() string { return e.msg }

// Is reports whether target is e's errno.
func (e *errnoError) Is(target error) bool { return target == e.errno }

// argError is an error about a call's arguments; it matches
// syscall.EINVAL.
func argError(format string, args ...any) error {
	return fmt.Errorf("rsocket: "+format+": %w", append(args, syscall.EINVAL)...)
}

// mapping is a buffer this side mapped for the peer: its registration,
// the offset the peer writes it at, and the entry of the peer's iomap
// table that publishes it.
type mapping struct {
	mr     verbs.MR
	offset int64
	length int64
	index  int
}

// Map lets the peer write into buf with IOWrite, at offsets from offset
// to offset+len(buf)-1, as librdmacm's riomap(PROT_WRITE) does: it
// registers buf for remote writes and publishes it in a free entry of
// the peer's iomap table (an RDMA WRITE with immediate, which takes one
// of the peer's credits, so it may wait as Write does, for the write
// deadline). An offset of -1 lets Map choose one (the buffer's address,
// as riomap does); Map returns the offset. The peer sees the mapping
// before anything this side writes after Map returns.
//
// buf belongs to the connection until Unmap or Close: the peer's writes
// land in it at any time, and this side reads them once it knows they
// have come (a message the peer wrote after them was Read, or, for a
// program that watches the buffer itself, after SyncMapped). Mapped
// ranges must not overlap. Map fails with ErrIOMapFull when the peer
// offers no iomap table (librdmacm's default) or its entries are all in
// use, and returns -1 with every error.
func (c *Conn) Map(buf []byte, offset int64) (int64, error) {
	if !c.ok() {
		return -1, errInvalid
	}
	if err := checkMap(len(buf), offset); err != nil {
		return -1, c.opError("map", err)
	}
	if err := c.enter(c.wsem, c.wdl); err != nil {
		return -1, c.opError("map", err)
	}
	defer func() { <-c.wsem }()
	c.mu.Lock()
	defer c.mu.Unlock()
	off, err := c.doMap(buf, offset)
	if err != nil {
		return -1, c.opError("map", err)
	}
	return off, nil
}

// checkMap checks Map's arguments: a buffer an iomap entry can describe,
// at an offset whose range fits below the largest offset.
func checkMap(n int, offset int64) error {
	switch {
	case n == 0:
		return argError("Map of an empty buffer")
	case uint64(n) > math.MaxUint32:
		return argError("Map of %d bytes: an iomap entry holds at most %d (map it in pieces)", n, uint32(math.MaxUint32))
	case offset < -1:
		return argError("Map at offset %d: want 0 or more, or -1 to let Map choose", offset)
	case offset > math.MaxInt64-int64(n):
		return argError("Map of %d bytes at offset %d: the range passes the largest offset, 1<<63 - 1", n, offset)
	}
	return nil
}

// doMap is Map once the write turn is taken; the caller holds c.mu.
func (c *Conn) doMap(buf []byte, offset int64) (int64, error) {
	s := &c.s
	if err := s.writeErr(); err != nil {
		return -1, err
	}
	idx, err := s.reserveIomap()
	if err != nil {
		return -1, err
	}
	m, err := s.register(buf, offset, idx)
	if err != nil {
		s.peerUsed[idx] = false
		return -1, err
	}
	for err == nil {
		if !s.canPublish() {
			err = c.await(dirWrite, wantIomap, c.wdl, c.closing)
		}
		if err == nil {
			err = s.writeErr()
		}
		if err == nil && s.canPublish() {
			err = s.publish(m)
			break
		}
	}
	c.notify(dirWrite)
	if err != nil {
		m.mr.Dereg()
		s.peerUsed[idx] = false
		return -1, err
	}
	s.ep.maps = append(s.ep.maps, m)
	return m.offset, nil
}

// reserveIomap takes a free entry of the peer's iomap table.
func (s *stream) reserveIomap() (int, error) {
	n := int(s.peerIomap.length)
	if n == 0 {
		return -1, fmt.Errorf("%w: the peer offers no iomap table (its RDMA_IOMAPSIZE or Options.IOMapSize is 0)", ErrIOMapFull)
	}
	if s.peerUsed == nil {
		s.peerUsed = make([]bool, n)
	}
	// The entry after the one taken last, first: an entry published
	// again soon after its last publication may still be being read by
	// the peer (see loadEntry).
	for k := range n {
		i := (s.peerNext + k) % n
		if !s.peerUsed[i] {
			s.peerUsed[i] = true
			s.peerNext = (i + 1) % n
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: its %d entries hold this side's mappings (Unmap one)", ErrIOMapFull, n)
}

// register registers buf for the peer's writes at offset (-1: its
// address), unless that range overlaps a mapping.
func (s *stream) register(buf []byte, offset int64, idx int) (*mapping, error) {
	mr, err := s.ep.pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		return nil, fmt.Errorf("rsocket: registering the %d-byte buffer to map: %w", len(buf), err)
	}
	n := int64(len(buf))
	if offset == -1 {
		if a := mr.Addr(); a <= math.MaxInt64-uint64(n) {
			offset = int64(a)
		} else {
			mr.Dereg()
			return nil, argError("Map at offset -1: the buffer's address %#x is past the largest offset (give one)", a)
		}
	}
	for _, o := range s.ep.maps {
		if offset < o.offset+o.length && o.offset < offset+n {
			mr.Dereg()
			return nil, argError("Map of [%d, %d) overlaps the mapping of [%d, %d) (Unmap it first)",
				offset, offset+n, o.offset, o.offset+o.length)
		}
	}
	return &mapping{mr: mr, offset: offset, length: n, index: idx}, nil
}

// canPublish reports whether an iomap entry may go now: a send queue
// entry, room in the send buffer and a credit (it takes a receive of the
// peer's, as in rsocket.c).
func (s *stream) canPublish() bool {
	return s.sqeAvail > 0 && s.sbufAvail >= lowWater && s.sseqNo != s.sseqComp
}

// publish writes m's entry into the peer's iomap table, in the peer's
// byte order, with an iomap SGL message naming the entry (rsocket.c's
// rs_send_iomaps). The caller checked canPublish.
func (s *stream) publish(m *mapping) error {
	e := iomapEntry{offset: uint64(m.offset), buf: sge{addr: m.mr.Addr(), key: m.mr.RKey(), length: uint32(m.length)}}
	e.put(s.iomapBuf[:], s.peerOrder)
	s.sseqNo++
	s.sqeAvail--
	s.sbufAvail -= iomapEntryLen
	imm := msg(opIomapSGL, uint32(m.index))
	s.swr[0] = verbs.SendWR{ID: uint64(imm), Opcode: verbs.OpWriteImm, Imm: imm,
		RemoteAddr: s.peerIomap.addr + uint64(m.index)*iomapEntryLen, RKey: s.peerIomap.key}
	if err := s.post(s.iomapBuf[:], "iomap entry"); err != nil {
		return err
	}
	s.stats.IOMapsSent++
	return nil
}

// Unmap ends the mapping Map made at offset (librdmacm's riounmap): the
// buffer is deregistered and is the caller's again, and its entry of the
// peer's iomap table is free for the next Map. As with riounmap, the
// peer is not told: it must have stopped writing there (its writes into
// an unmapped buffer fail at this side's device, which breaks the
// connection). It fails with ErrNotMapped when nothing is mapped at
// offset, and with net.ErrClosed after Close (which unmaps everything).
func (c *Conn) Unmap(offset int64) error {
	if !c.ok() {
		return errInvalid
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || isClosed(c.closing) {
		return c.opError("unmap", net.ErrClosed)
	}
	ep := c.s.ep
	for i, m := range ep.maps {
		if m.offset != offset {
			continue
		}
		ep.maps = slices.Delete(ep.maps, i, i+1)
		c.s.peerUsed[m.index] = false
		if err := m.mr.Dereg(); err != nil {
			return c.opError("unmap", fmt.Errorf("rsocket: deregistering the buffer mapped at %d: %w", offset, err))
		}
		return nil
	}
	return c.opError("unmap", fmt.Errorf("%w: this side has no mapping at offset %d", ErrNotMapped, offset))
}

// SyncMapped orders the calling goroutine's next accesses to the buffers
// this side mapped after every write the device has made into them so
// far, and its earlier accesses before the device's next writes. A
// program that learns of the peer's IOWrites from a message it Reads
// does not need it; one that watches a mapped buffer itself, as
// riostream polls the buffer's last byte, calls it once it has seen the
// change, and after it changed the buffer itself and before it lets the
// peer write there again: the path from the peer's writes to this
// program's reads may run through the kernel's sockets, where Go's
// memory model cannot see it (mr.MR.Sync).
func (c *Conn) SyncMapped() {
	if !c.ok() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.s.ep.maps {
		if s, ok := m.mr.(interface{ Sync() }); ok {
			s.Sync()
		}
	}
}

// IOWrite writes p into the peer's buffers at offset, as librdmacm's
// riowrite does: straight into the buffers the peer mapped (Map), by
// RDMA WRITEs that take no credit and that the peer's program is not
// told of. The bytes reach the peer before anything written after them
// on the connection (Write, IOWrite), so a message sent after them tells
// the peer they are there. Every byte from offset to offset+len(p)-1
// must be mapped by the peer, in one buffer or in adjacent ones; IOWrite
// checks that before it sends anything and fails with ErrNotMapped
// otherwise (or when this side offers no iomap table: Options.IOMapSize).
// It waits for room in the send queue and buffer as Write does, and
// returns early, with the count written, on an error or when the write
// deadline passes. IOWrite and Write are served one at a time.
func (c *Conn) IOWrite(p []byte, offset int64) (int, error) {
	return c.ioWriteCall(p, offset, true)
}

// IOWriteNow is IOWrite that does not wait, as riowrite on a
// non-blocking rsocket: it writes what the send queue and buffer have
// room for now and returns the count. When that is nothing, or another
// Write or IOWrite has the connection's turn, it fails with an error that
// is os.ErrDeadlineExceeded, as a write whose deadline has passed does
// (and as IOWriteNow does then too).
func (c *Conn) IOWriteNow(p []byte, offset int64) (int, error) {
	return c.ioWriteCall(p, offset, false)
}

// ioWriteCall is IOWrite, or without wait IOWriteNow.
func (c *Conn) ioWriteCall(p []byte, offset int64, wait bool) (int, error) {
	if !c.ok() {
		return 0, errInvalid
	}
	if offset < 0 || offset > math.MaxInt64-int64(len(p)) {
		return 0, c.opError("iowrite", argError("IOWrite of %d bytes at offset %d: want a range from 0 to 1<<63 - 1", len(p), offset))
	}
	enter := c.enter
	if !wait {
		enter = c.tryEnter
	}
	if err := enter(c.wsem, c.wdl); err != nil {
		return 0, c.opError("iowrite", err)
	}
	defer func() { <-c.wsem }()
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.ioWrite(p, offset, wait)
	if err != nil {
		return n, c.opError("iowrite", err)
	}
	return n, nil
}

// ioWrite is ioWriteCall once the write turn is taken; the caller holds
// c.mu.
func (c *Conn) ioWrite(p []byte, offset int64, wait bool) (int, error) {
	s := &c.s
	c.progress() // the entries the peer published last
	c.notify(dirWrite)
	if err := s.writeErr(); err != nil {
		return 0, err
	}
	if err := s.mapped(uint64(offset), uint64(len(p))); err != nil {
		return 0, err
	}
	n := 0
	for n < len(p) {
		if !s.canWriteDirect() {
			if !wait {
				if c.progress(); !s.canWriteDirect() {
					if n > 0 {
						return n, nil
					}
					return 0, os.ErrDeadlineExceeded
				}
			} else if err := c.await(dirWrite, wantDirect, c.wdl, c.closing); err != nil {
				return n, err
			}
		}
		if err := s.writeErr(); err != nil {
			c.notify(dirWrite)
			return n, err
		}
		if !s.canWriteDirect() {
			continue
		}
		k, err := s.writeDirect(p[n:], uint64(offset)+uint64(n))
		if err != nil {
			c.notify(dirWrite)
			return n, err
		}
		n += k
	}
	return n, nil
}

// mapped checks that entries of this side's iomap table cover every byte
// of [off, off+n), n > 0. Each entry found ends past the byte it was
// looked up for, so the loop ends.
func (s *stream) mapped(off, n uint64) error {
	if len(s.iomap) == 0 {
		return fmt.Errorf("%w: this side offers the peer no iomap table to map into (Options.IOMapSize is 0)", ErrNotMapped)
	}
	for at, end := off, off+n; at < end; {
		e := s.findIomap(at)
		if e == nil {
			return fmt.Errorf("%w: the peer has mapped no buffer at offset %d (of the %d bytes at %d)", ErrNotMapped, at, n, off)
		}
		at = e.offset + uint64(e.buf.length)
	}
	return nil
}

// findIomap returns the entry of this side's iomap table that covers
// offset off, or nil (rs_find_iomap).
func (s *stream) findIomap(off uint64) *iomapEntry {
	for i := range s.iomap {
		e := &s.iomap[i]
		if e.buf.length != 0 && off >= e.offset && off-e.offset < uint64(e.buf.length) {
			return e
		}
	}
	return nil
}

// canWriteDirect reports whether an IOWrite's RDMA WRITE may go now: a
// send queue entry and room in the send buffer. It takes no credit: the
// peer's program does not see it.
func (s *stream) canWriteDirect() bool {
	return s.sqeAvail > 0 && s.sbufAvail >= lowWater
}

// writeDirect sends the start of p as one RDMA WRITE to offset off of
// the peer's mapped buffers (rs_write_direct) and returns how many bytes
// it took: up to the end of the buffer off is in. The caller checked
// canWriteDirect.
func (s *stream) writeDirect(p []byte, off uint64) (int, error) {
	e := s.findIomap(off)
	if e == nil {
		return 0, fmt.Errorf("%w: the peer's buffer at offset %d was mapped anew elsewhere during the write", ErrNotMapped, off)
	}
	rel := off - e.offset
	n := min(len(p), s.maxMsg, s.sbufAvail, int(uint64(e.buf.length)-rel))
	s.sqeAvail--
	s.sbufAvail -= n
	m := msg(opWrite, uint32(n))
	s.swr[0] = verbs.SendWR{ID: uint64(m), Opcode: verbs.OpWrite, RemoteAddr: e.buf.addr + rel, RKey: e.buf.key}
	if err := s.post(p[:n], "RDMA WRITE"); err != nil {
		return 0, err
	}
	s.stats.IOWrites++
	s.stats.IOBytesSent += uint64(n)
	return n, nil
}

// takeIomapEntry takes entry i of this side's iomap table, which the
// peer's iomap SGL message says it wrote, once it is copied out and
// checked: an index
// outside the table, an entry of no bytes, or one whose offsets or
// addresses run past the largest is the peer breaking the protocol. The
// message took a credit of the peer's and its receive is posted again:
// the credit is given back (rsocket.c does not count it, which only
// makes its peers' credits fewer).
func (s *stream) takeIomapEntry(i uint32) {
	if uint64(i) >= uint64(len(s.iomap)) {
		s.fail(fmt.Errorf("%w: an iomap entry at index %d of a table of %d", ErrProtocol, i, len(s.iomap)))
		return
	}
	var b [iomapEntryLen]byte
	loadEntry(&b, s.ep.tiomap[int(i)*iomapEntryLen:])
	e := getIomapEntry(b[:], binary.LittleEndian)
	var err error
	switch {
	case e.buf.length == 0:
		err = errors.New("maps no bytes")
	case e.offset > math.MaxInt64-uint64(e.buf.length):
		err = fmt.Errorf("maps %d bytes at offset %d, past the largest offset", e.buf.length, e.offset)
	case e.buf.addr > math.MaxUint64-uint64(e.buf.length):
		err = fmt.Errorf("maps %d bytes at address %#x, past the largest address", e.buf.length, e.buf.addr)
	}
	if err != nil {
		s.fail(fmt.Errorf("%w: iomap entry %d %w", ErrProtocol, i, err))
		return
	}
	s.iomap[i] = e
	s.rseqNo++
	s.stats.IOMapsReceived++
}

// loadEntry copies an entry out of the iomap table, which the peer's
// device writes into whenever the peer publishes an entry: a peer that
// publishes the same entry again (a Map after an Unmap, with a table of
// one) may be writing it while this side takes the first publication,
// as with librdmacm, whose riowrite reads the table in place. The copy
// is then a mix of the two, which takeIomapEntry checks as any other
// (IOWrite cannot reach past what the peer registered: its device checks
// every write against the rkey's region) and which the second message
// replaces. So the read is kept out of the race detector's view, as a
// program's poll of memory a peer's RDMA WRITE fills is: the write is
// the peer's, ordered by the protocol, not by Go synchronisation.
//
//go:norace
func loadEntry(dst *[iomapEntryLen]byte, src []byte) {
	for i := range dst {
		dst[i] = src[i]
	}
}
