package rcopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// rcopy's messages (librdmacm/examples/rcopy.c), in the host byte order
// of the x86 machines it runs on: little-endian. Each starts with a
// 16-byte header:
//
//	0 version (0)   1 command   2 length of the whole message (le16)
//	4 data (le32)   8 id (le64, echoed in the response)
//
// OPEN's data is the source file's st_mode and the message goes on with
// the destination path, NUL-terminated and padded with NULs to a multiple
// of 8 bytes; WRITE's 8 more bytes are the file size (le64), and the
// file's bytes follow the message; CLOSE has nothing more. Each command
// is answered with a bare header: the command with 0x80 set, length 16,
// the status (0 or an errno value) as its data, the id echoed. The
// client sends OPEN and waits for its answer, sends WRITE and the data
// and waits, then sends CLOSE and waits.
const (
	hdrLen   = 16
	writeLen = hdrLen + 8

	cmdOpen  = 1
	cmdClose = 2
	cmdWrite = 3
	cmdResp  = 0x80

	// maxPath bounds an OPEN's path: its length is 16 bits with the
	// header's.
	maxPath = 1<<16 - 1 - hdrLen
)

// Status values the server answers with: Linux's errno numbers, which
// the peers on the wire use whatever this host's are.
const (
	statusOK     = 0
	statusENOENT = 2
	statusEIO    = 5
	statusENOMEM = 12
	statusEACCES = 13
	statusEBUSY  = 16
	statusEINVAL = 22
)

// hdr is struct msg_hdr.
type hdr struct {
	version, command uint8
	length           uint16
	data             uint32
	id               uint64
}

func (h *hdr) put(b []byte) {
	b[0], b[1] = h.version, h.command
	binary.LittleEndian.PutUint16(b[2:], h.length)
	binary.LittleEndian.PutUint32(b[4:], h.data)
	binary.LittleEndian.PutUint64(b[8:], h.id)
}

func getHdr(b []byte) hdr {
	return hdr{version: b[0], command: b[1], length: binary.LittleEndian.Uint16(b[2:]),
		data: binary.LittleEndian.Uint32(b[4:]), id: binary.LittleEndian.Uint64(b[8:])}
}

// errBadHeader says a peer's header is not rcopy's.
var errBadHeader = errors.New("not an rcopy message")

// readHdr reads a header and checks it as rcopy does: version 0 and a
// length that holds the header.
func readHdr(r io.Reader) (hdr, error) {
	var b [hdrLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return hdr{}, err
	}
	h := getHdr(b[:])
	if h.version != 0 || h.length < hdrLen {
		return h, fmt.Errorf("%w: invalid version %d or length %d", errBadHeader, h.version, h.length)
	}
	return h, nil
}

// openMsg is an OPEN of path with mode: the header, then the path with
// its NUL, padded with NULs to a multiple of 8.
func openMsg(path string, mode uint32) ([]byte, error) {
	padded := (len(path) + 8) &^ 7
	if hdrLen+padded > 1<<16-1 {
		return nil, fmt.Errorf("the destination path is %d bytes; rcopy takes at most %d", len(path), maxPath-8)
	}
	b := make([]byte, hdrLen+padded)
	h := hdr{command: cmdOpen, length: uint16(len(b)), data: mode}
	h.put(b)
	copy(b[hdrLen:], path)
	return b, nil
}

// writeMsg is a WRITE of size bytes.
func writeMsg(size uint64) []byte {
	b := make([]byte, writeLen)
	h := hdr{command: cmdWrite, length: writeLen}
	h.put(b)
	binary.LittleEndian.PutUint64(b[hdrLen:], size)
	return b
}

// closeMsg is a CLOSE.
func closeMsg() []byte {
	b := make([]byte, hdrLen)
	h := hdr{command: cmdClose, length: hdrLen}
	h.put(b)
	return b
}

// respMsg is the answer to h with status.
func respMsg(h hdr, status uint32) []byte {
	b := make([]byte, hdrLen)
	r := hdr{command: h.command | cmdResp, length: hdrLen, data: status, id: h.id}
	r.put(b)
	return b
}

// errStatus is a server's answer other than 0: an errno value, which the
// client exits with as rcopy does.
type errStatus uint32

func (e errStatus) Error() string {
	return fmt.Sprintf("the server answered with status %d", uint32(e))
}

// readResp reads the answer to cmd and returns its status, as rcopy's
// msg_get_resp: a header of length 16 with cmd|0x80.
func readResp(r io.Reader, cmd uint8) error {
	h, err := readHdr(r)
	if err != nil {
		return err
	}
	if h.length != hdrLen || h.command != cmd|cmdResp {
		return fmt.Errorf("%w: invalid length %d or bad command response %x:%x", errBadHeader, h.length, h.command, cmd|cmdResp)
	}
	if h.data != statusOK {
		return errStatus(h.data)
	}
	return nil
}
