package oob

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors. Every error this package returns wraps one of them, or
// the context's error when a context ended a step.
var (
	// ErrFormat means the peer sent bytes that are not the message the
	// protocol expects at that point (wrong characters, wrong layout).
	ErrFormat = errors.New("oob: malformed message")
	// ErrClosed means the connection ended (EOF, reset, closed) before a
	// whole message was read or written, at either end. When this side
	// closed it, the error also matches net.ErrClosed, as the closed
	// errors of verbs and cm do; a peer's end does not.
	ErrClosed = errors.New("oob: connection closed")
	// ErrTimeout means a step did not finish before its deadline: the
	// context's, or Config.Timeout when the context has none.
	ErrTimeout = errors.New("oob: timed out")
	// ErrVersion means the peer announced a perftest version this side
	// cannot talk to (perftest v4.5 refuses peers older than 5.70).
	ErrVersion = errors.New("oob: incompatible perftest version")
	// ErrIO means any other network failure: a refused connection, an
	// unreachable address, an unexpected error from the socket.
	ErrIO = errors.New("oob: network error")
	// ErrInvalid means the caller passed a value that cannot be encoded
	// (a QPN or PSN wider than 24 bits, too many entries, an unknown MTU)
	// or called the steps out of order.
	ErrInvalid = errors.New("oob: invalid argument")
)

// Error describes a failed step. It unwraps to a sentinel error (Err) and
// to the underlying cause, if any (a net.Error, context.DeadlineExceeded,
// ...). An Error is not modified once returned; it is safe to read from
// several goroutines.
type Error struct {
	Step     string // what was being done, e.g. "perftest check_mtu: read"
	Expected string // what the protocol calls for
	Got      string // what came instead, or what went wrong
	Err      error  // one of the sentinel errors, or a context error
	Cause    error  // the lower-level error, or nil
}

// Error says which step failed, what it expected and what came instead.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString("oob: ")
	b.WriteString(e.Step)
	if e.Expected != "" {
		b.WriteString(": expected ")
		b.WriteString(e.Expected)
	}
	if e.Got != "" {
		if e.Expected != "" {
			b.WriteString(", got ")
		} else {
			b.WriteString(": ")
		}
		b.WriteString(e.Got)
	}
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "oob: "))
		b.WriteString(")")
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e == nil {
		return nil
	}
	var errs []error
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// maxQuote is how many bytes of a bad message an error shows.
const maxQuote = 64

// quote renders b for an error message: in double quotes, printable ASCII
// as is, every other byte as a Go escape (\x00, \n, \xff), cut after
// maxQuote bytes with the full length noted.
func quote(b []byte) string {
	more := ""
	if len(b) > maxQuote {
		more = "... (" + strconv.Itoa(len(b)) + " bytes)"
		b = b[:maxQuote]
	}
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			s.WriteByte('\\')
			s.WriteByte(c)
		case c >= 0x20 && c <= 0x7E:
			s.WriteByte(c)
		case c == '\n':
			s.WriteString(`\n`)
		case c == '\r':
			s.WriteString(`\r`)
		case c == '\t':
			s.WriteString(`\t`)
		default:
			s.WriteString(`\x`)
			s.WriteByte(hexDigits[c>>4])
			s.WriteByte(hexDigits[c&0xF])
		}
	}
	s.WriteByte('"')
	s.WriteString(more)
	return s.String()
}

// formatError reports that msg does not have the expected layout.
func formatError(step, expected string, msg []byte, detail string) *Error {
	got := quote(msg)
	if detail != "" {
		got += ": " + detail
	}
	return &Error{Step: step, Expected: expected, Got: got, Err: ErrFormat}
}

// restep names the step of err, an *Error from a lower layer, after the
// step that called it.
func restep(err error, step string) error {
	var e *Error
	if errors.As(err, &e) {
		e.Step = step
	}
	return err
}

func invalid(step, detail string) *Error {
	return &Error{Step: step, Got: detail, Err: ErrInvalid}
}
