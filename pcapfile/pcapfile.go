// Package pcapfile reads and writes the classic libpcap file format with
// nothing but the standard library, so that transports can record what they
// send and receive (--pcap) and tests can read captures. Tools that need
// pcapng or the Linux cooked link types use gopacket's pcapgo instead.
package pcapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Link types (https://www.tcpdump.org/linktypes.html).
const (
	LinkTypeEthernet = 1
	LinkTypeRaw      = 101 // raw IPv4 or IPv6, no link header
	LinkTypeLinuxSLL = 113
	LinkTypeIPv4     = 228
	LinkTypeIPv6     = 229
	LinkTypeSLL2     = 276
)

const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d
	// DefaultSnapLen is the snap length written in a new file's header.
	DefaultSnapLen = 262144
)

// ErrNil means a required argument, or the Writer or Reader a method was
// called on, is nil.
var ErrNil = errors.New("pcapfile: nil argument")

// MaxRecord is the largest record ReadPacket reads whatever the file's
// snap length says, so that a damaged or hostile file cannot make it
// allocate gigabytes.
const MaxRecord = 64 << 20

// ErrNotPcap means the input does not start with a pcap file header.
var ErrNotPcap = errors.New("pcapfile: not a pcap file")

// Writer writes packets to a pcap file with nanosecond timestamps. It is
// safe for concurrent use; each packet is written whole.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
	hdr [16]byte
}

// NewWriter writes a pcap file header for linkType to w and returns a
// Writer that appends packets to it. Call Flush before closing w.
func NewWriter(w io.Writer, linkType uint32) (*Writer, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: NewWriter needs an io.Writer (an *os.File, say)", ErrNil)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], magicNano)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], DefaultSnapLen)
	binary.LittleEndian.PutUint32(h[20:], linkType)
	if _, err := bw.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: bw}, nil
}

// WritePacket appends one packet captured at t. The data may be given in
// pieces (headers and payload, say), which are written as one record.
func (w *Writer) WritePacket(t time.Time, data ...[]byte) error {
	if w == nil || w.w == nil {
		return errNilWriter
	}
	n := 0
	for _, d := range data {
		n += len(d)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	ns := t.UnixNano()
	binary.LittleEndian.PutUint32(w.hdr[0:], uint32(ns/1e9))
	binary.LittleEndian.PutUint32(w.hdr[4:], uint32(ns%1e9))
	binary.LittleEndian.PutUint32(w.hdr[8:], uint32(n))
	binary.LittleEndian.PutUint32(w.hdr[12:], uint32(n))
	_, w.err = w.w.Write(w.hdr[:])
	for _, d := range data {
		if w.err == nil {
			_, w.err = w.w.Write(d)
		}
	}
	return w.err
}

// Flush writes buffered packets to the underlying writer.
func (w *Writer) Flush() error {
	if w == nil || w.w == nil {
		return errNilWriter
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	return w.err
}

// Reader reads packets from a classic pcap file, either byte order, with
// microsecond or nanosecond timestamps. It is not safe for concurrent use.
type Reader struct {
	r        *bufio.Reader
	order    binary.ByteOrder
	nano     bool
	linkType uint32
	snapLen  uint32
	hdr      [16]byte
}

// CaptureInfo describes one packet record.
type CaptureInfo struct {
	Time          time.Time
	CaptureLength int // bytes in the file
	Length        int // bytes on the wire
}

// NewReader reads the file header from r.
func NewReader(r io.Reader) (*Reader, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: NewReader needs an io.Reader (an *os.File, say)", ErrNil)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var h [24]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrNotPcap
		}
		return nil, err
	}
	pr := &Reader{r: br}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == magicMicro:
		pr.order = binary.LittleEndian
	case binary.LittleEndian.Uint32(h[:]) == magicNano:
		pr.order, pr.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == magicMicro:
		pr.order = binary.BigEndian
	case binary.BigEndian.Uint32(h[:]) == magicNano:
		pr.order, pr.nano = binary.BigEndian, true
	default:
		return nil, ErrNotPcap
	}
	pr.snapLen = pr.order.Uint32(h[16:])
	pr.linkType = pr.order.Uint32(h[20:]) & 0x0FFFFFFF
	return pr, nil
}

// LinkType returns the link type of the file.
func (r *Reader) LinkType() uint32 {
	if r == nil {
		return 0
	}
	return r.linkType
}

var (
	errNilWriter = fmt.Errorf("%w: nil *Writer: use one from NewWriter", ErrNil)
	errNilReader = fmt.Errorf("%w: nil *Reader: use one from NewReader", ErrNil)
)

// ReadPacket returns the next packet, in a new slice. It returns io.EOF at
// the end and io.ErrUnexpectedEOF for a record cut short.
func (r *Reader) ReadPacket() ([]byte, CaptureInfo, error) {
	if r == nil || r.r == nil {
		return nil, CaptureInfo{}, errNilReader
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, CaptureInfo{}, fmt.Errorf("pcapfile: record header: %w", err)
		}
		return nil, CaptureInfo{}, err
	}
	sec, frac := r.order.Uint32(r.hdr[0:]), r.order.Uint32(r.hdr[4:])
	capLen, origLen := r.order.Uint32(r.hdr[8:]), r.order.Uint32(r.hdr[12:])
	if capLen > DefaultSnapLen && capLen > r.snapLen || capLen > MaxRecord {
		return nil, CaptureInfo{}, fmt.Errorf("pcapfile: record of %d bytes exceeds the snap length (%d) or %d bytes: "+
			"the file is damaged", capLen, r.snapLen, MaxRecord)
	}
	if !r.nano {
		frac *= 1000
	}
	data := make([]byte, capLen)
	if _, err := io.ReadFull(r.r, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, CaptureInfo{}, fmt.Errorf("pcapfile: record data: %w", err)
	}
	ci := CaptureInfo{Time: time.Unix(int64(sec), int64(frac)), CaptureLength: int(capLen), Length: int(origLen)}
	return data, ci, nil
}
