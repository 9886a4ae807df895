package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/goroce/goroce/verbs"
)

// RemoteBuffer describes memory a peer may reach with RDMA READ and
// WRITE: its address, rkey and length. Programs announce one in the
// connection's private data (BufferData) and read the peer's back
// (Conn.PeerBuffer, Request.PeerBuffer), instead of packing the bytes by
// hand. It is plain data.
//
// On the wire it is 16 bytes, big-endian:
//
//	0: address (be64)   8: rkey (be32)   12: length (be32)
//
// the layout of rping's struct rping_rdma_info and of rsockets' struct
// rs_sge in its connection data (rdma-core, librdmacm). The minimal
// rdma_cm samples send the first 12 bytes only; with the zero padding CM
// messages carry, that parses as a buffer of length 0.
type RemoteBuffer struct {
	Addr uint64
	RKey uint32
	Len  uint32
}

// RemoteBufferLen is the size of a RemoteBuffer on the wire.
const RemoteBufferLen = 16

// ErrNoBuffer means the peer's private data holds no buffer description:
// it is shorter than RemoteBufferLen, or all zero.
var ErrNoBuffer = errors.New("cm: the peer's private data holds no buffer (address, rkey, length)")

// BufferOf describes mr for a peer: its address, its rkey and its length
// (at most 4 GiB - 1, what the 32-bit field holds). A nil mr gives the
// zero RemoteBuffer.
func BufferOf(mr verbs.MR) RemoteBuffer {
	if mr == nil {
		return RemoteBuffer{}
	}
	return RemoteBuffer{Addr: mr.Addr(), RKey: mr.RKey(), Len: uint32(min(uint64(mr.Len()), math.MaxUint32))}
}

// BufferData returns the private data that announces mr to the peer (16
// bytes, see RemoteBuffer), for Params.PrivateData; append more after it
// if the protocol says so.
func BufferData(mr verbs.MR) []byte { return BufferOf(mr).Append(nil) }

// Append appends the 16-byte wire form of b to dst.
func (b RemoteBuffer) Append(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint32(dst, b.RKey)
	return binary.BigEndian.AppendUint32(dst, b.Len)
}

// ParseRemoteBuffer reads a RemoteBuffer from the first 16 bytes of data.
// It fails with ErrNoBuffer when data is shorter or those bytes are all
// zero.
func ParseRemoteBuffer(data []byte) (RemoteBuffer, error) {
	if len(data) < RemoteBufferLen {
		return RemoteBuffer{}, fmt.Errorf("%w: %d bytes of private data, want %d", ErrNoBuffer, len(data), RemoteBufferLen)
	}
	b := RemoteBuffer{Addr: binary.BigEndian.Uint64(data), RKey: binary.BigEndian.Uint32(data[8:]),
		Len: binary.BigEndian.Uint32(data[12:])}
	if b == (RemoteBuffer{}) {
		return b, fmt.Errorf("%w: the first %d bytes are zero", ErrNoBuffer, RemoteBufferLen)
	}
	return b, nil
}

// PeerBuffer returns the buffer the peer announced at the start of its
// private data (the REP's for the active side, the REQ's for the passive
// side), as BufferData writes it.
func (c *Conn) PeerBuffer() (RemoteBuffer, error) {
	if c == nil {
		return RemoteBuffer{}, fmt.Errorf("%w: nil *cm.Conn", ErrNoBuffer)
	}
	return ParseRemoteBuffer(c.peerData)
}

// PeerBuffer returns the buffer the requester announced at the start of
// its private data, as BufferData writes it.
func (r *Request) PeerBuffer() (RemoteBuffer, error) {
	if r == nil {
		return RemoteBuffer{}, fmt.Errorf("%w: nil *cm.Request", ErrNoBuffer)
	}
	return ParseRemoteBuffer(r.PrivateData)
}
