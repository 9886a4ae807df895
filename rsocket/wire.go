package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The rsocket stream protocol on the wire, from rdma-core's
// librdmacm/docs/rsocket and librdmacm/rsocket.c.
//
// Every message is an RDMA WRITE with immediate data. The immediate (a
// 32-bit number, big-endian on the wire) holds an operation in bits
// 31:29 and its argument in bits 28:0:
//
//	000 data      bytes written into the next receive buffer
//	100 SGL       credits: the receiver's new sequence limit; the write
//	              may carry (16 bytes) a new entry of the target SGL
//	110 iomap SGL index of the entry of the receiver's iomap table the
//	              write (24 bytes) updated: a buffer the sender mapped
//	111 control   0 DISCONNECT, 1 KEEPALIVE, 2 SHUTDOWN
//
// librdmacm treats the reserved operations 001, 011 and 101 as data too
// (its receive path stores every operation it does not know as a data
// message); so does this package, so that the byte stream stays in step.
const (
	opData     = 0
	opSGL      = 4
	opIomapSGL = 6
	opCtrl     = 7

	// opWrite is librdmacm's marker for a plain RDMA WRITE's send
	// completion; it never goes on the wire as an immediate.
	opWrite = 2

	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2

	msgDataMask = 1<<29 - 1
)

// msg is an immediate: an operation and its argument.
func msg(op, data uint32) uint32 { return op<<29 | data&msgDataMask }

func msgOp(m uint32) uint32   { return m >> 29 }
func msgData(m uint32) uint32 { return m & msgDataMask }

// connData is struct rs_conn_data, the private data of the REQ and the
// REP (40 bytes, multi-byte fields big-endian):
//
//	0  version (1)          1  flags: 1 big-endian host, 2 iomap support
//	2  credits (be16)       4  reserved (3 bytes)  7  target iomap size
//	8  target SGL: addr (be64), rkey (be32), entries (be32)
//	24 data buffer: addr (be64), rkey (be32), bytes (be32)
//
// Credits are the receive queue's depth: how many data messages the peer
// may send before it hears from this side. The target SGL is where the
// peer writes the receive buffers it publishes later; the data buffer is
// the first one, where the peer's first bytes go.
type connData struct {
	version   uint8
	flags     uint8
	credits   uint16
	iomapSize uint8 // entries of the iomap table, scaled (iomapEntries)
	targetSGL sge   // length: number of entries
	dataBuf   sge
}

const (
	connDataLen = 40
	connVersion = 1

	// flagNet says the sender's target SGL entries are big-endian (the
	// host's byte order, in librdmacm): the peer writes entries into it
	// in that order.
	flagNet = 1
	// flagIomap says the sender has the iomap extension: its iomap
	// table (iomapSize entries, librdmacm's default being 0) follows its
	// target SGL in the same registered region.
	flagIomap = 2
)

// errConnData says the peer's private data is not rsocket's.
var errConnData = errors.New("rsocket: the peer's connection data is not rsocket version 1")

func (d *connData) marshal() []byte {
	b := make([]byte, connDataLen)
	b[0], b[1] = d.version, d.flags
	binary.BigEndian.PutUint16(b[2:], d.credits)
	b[7] = d.iomapSize
	d.targetSGL.put(b[8:], binary.BigEndian)
	d.dataBuf.put(b[24:], binary.BigEndian)
	return b
}

// parseConnData reads the peer's rs_conn_data and checks what this side
// depends on: version 1, credits, a target SGL with entries, a first
// receive buffer.
func parseConnData(b []byte) (connData, error) {
	var d connData
	if len(b) < connDataLen {
		return d, fmt.Errorf("%w: %d bytes of private data, want %d", errConnData, len(b), connDataLen)
	}
	d.version, d.flags, d.credits, d.iomapSize = b[0], b[1], binary.BigEndian.Uint16(b[2:]), b[7]
	d.targetSGL = getSGE(b[8:], binary.BigEndian)
	d.dataBuf = getSGE(b[24:], binary.BigEndian)
	switch {
	case d.version != connVersion:
		return d, fmt.Errorf("%w: version %d", errConnData, d.version)
	case d.credits == 0:
		return d, fmt.Errorf("%w: no receive credits", errConnData)
	case d.targetSGL.length == 0 || d.targetSGL.length > maxSGLEntries:
		return d, fmt.Errorf("%w: a target SGL of %d entries", errConnData, d.targetSGL.length)
	case d.dataBuf.length == 0:
		return d, fmt.Errorf("%w: a first receive buffer of %d bytes", errConnData, d.dataBuf.length)
	}
	return d, nil
}

// maxSGLEntries bounds the peer's target SGL (librdmacm's has 2).
const maxSGLEntries = 1 << 16

// sge is struct rs_sge: a buffer's address, rkey and length.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

const sgeLen = 16

func (s sge) put(b []byte, o binary.ByteOrder) {
	o.PutUint64(b, s.addr)
	o.PutUint32(b[8:], s.key)
	o.PutUint32(b[12:], s.length)
}

func getSGE(b []byte, o binary.ByteOrder) sge {
	return sge{addr: o.Uint64(b), key: o.Uint32(b[8:]), length: o.Uint32(b[12:])}
}

// order returns the byte order of target SGL entries a side announced
// with flags.
func order(flags uint8) binary.ByteOrder {
	if flags&flagNet != 0 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// The iomap extension: a side announces an iomap table of entries in
// rs_conn_data (target_iomap_size, scaled to fit a byte), right after its
// target SGL in the region of the target SGL's rkey. A peer maps a
// buffer (riomap) by writing an entry (struct rs_iomap, 24 bytes, in the
// byte order of the table's owner, as target SGL entries) into a free
// slot with an iomap SGL message whose argument is the slot's index; the
// owner then writes into that buffer with plain RDMA WRITEs (riowrite),
// at the offsets the entries give:
//
//	0  offset (64)   8  buffer: addr (64), rkey (32), bytes (32)
const (
	iomapEntryLen = 8 + sgeLen
	// maxIomapEntries is the largest table the scaled size can announce.
	maxIomapEntries = 0x7f << 8
)

// iomapEntry is struct rs_iomap: a mapped buffer and the offset it is
// mapped at.
type iomapEntry struct {
	offset uint64
	buf    sge
}

func (e iomapEntry) put(b []byte, o binary.ByteOrder) {
	o.PutUint64(b, e.offset)
	e.buf.put(b[8:], o)
}

func getIomapEntry(b []byte, o binary.ByteOrder) iomapEntry {
	return iomapEntry{offset: o.Uint64(b), buf: getSGE(b[8:], o)}
}

// iomapScale is how rs_conn_data carries a table size n in a byte
// (rsocket.c's rs_value_to_scale with 8 bits): up to 128 as it is, above
// that as 0x80 | n/256, so that sizes above 128 are rounded down to a
// multiple of 256 (and 129 to 255 to 128). n is at most maxIomapEntries.
func iomapScale(n int) uint8 {
	if n <= 0x80 {
		return uint8(n)
	}
	return uint8(0x80 | n>>8)
}

// iomapEntries is the table size a scaled byte announces
// (rs_scale_to_value).
func iomapEntries(v uint8) int {
	if v <= 0x80 {
		return int(v)
	}
	return int(v&0x7f) << 8
}
