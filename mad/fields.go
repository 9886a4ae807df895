package mad

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// FieldError reports a value that does not fit the bits of its field. It
// matches ErrRange with errors.Is. It is not modified after it is returned,
// so it is safe for concurrent reads.
type FieldError struct {
	Msg   string // the message or attribute, e.g. "REQ"
	Field string // the field, e.g. "LocalQPN"
	Value uint64 // the value given
	Bits  int    // the width of the field
}

// Error implements error.
func (e *FieldError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return "mad: " + e.Msg + "." + e.Field + " = " + strconv.FormatUint(e.Value, 10) +
		" does not fit in " + strconv.Itoa(e.Bits) + " bits (at most " + strconv.FormatUint(1<<e.Bits-1, 10) + ")"
}

// Unwrap returns ErrRange.
func (e *FieldError) Unwrap() error {
	if e == nil {
		return nil
	}
	return ErrRange
}

// checker collects the first out-of-range field of a message being
// marshaled. The zero value is ready; it allocates only on failure.
type checker struct {
	msg string
	err error
}

// bits records an error if v does not fit in n bits.
func (c *checker) bits(field string, v uint64, n int) {
	if c.err == nil && v>>n != 0 {
		c.err = &FieldError{Msg: c.msg, Field: field, Value: v, Bits: n}
	}
}

func get16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func get32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func get64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func put16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// get24 reads the 24-bit big-endian value in b[0:3].
func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// put24 writes the low 24 bits of v to b[0:3].
func put24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

// bit returns mask if v, else 0.
func bit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}

// data checks that the message msg is not nil and that b holds at least a
// MAD's class data area, and returns that area.
func data(b []byte, isNil bool, msg string) ([]byte, error) {
	if isNil {
		return nil, nilError("a nil *" + msg)
	}
	if len(b) < DataLen {
		return nil, shortError(msg+" class data", len(b), DataLen)
	}
	return b[:DataLen:DataLen], nil
}

// nilError reports a nil argument or receiver.
func nilError(what string) error { return fmt.Errorf("%w: %s", ErrNil, what) }

// shortError reports a buffer of have bytes where what takes need.
func shortError(what string, have, need int) error {
	return fmt.Errorf("%w: %d bytes, and the %s takes %d", ErrShort, have, what, need)
}

// hex4 formats v as 0x and four hex digits.
func hex4(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{'0', 'x', digits[v>>12], digits[v>>8&0xF], digits[v>>4&0xF], digits[v&0xF]})
}
