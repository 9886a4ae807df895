package cm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/mad"
)

// Errors of the connection manager. Check them with errors.Is; a rejection
// is a *RejectError, which also matches ErrRejected (and ErrConnRefused
// when nobody listened).
var (
	// ErrTimeout means the peer did not answer a REQ, REP, DREQ or
	// SIDR_REQ after the CM's retries (the max CM retries of the
	// exchange, each waiting a CM response timeout), or, for a REQ or
	// SIDR_REQ, within Config.ConnectTimeout.
	ErrTimeout = errors.New("cm: no answer from the peer")
	// ErrLimit means the agent's table of connections is full
	// (Config.MaxConns): Dial fails with it, and a peer's REQ is
	// rejected with "no resources".
	ErrLimit = errors.New("cm: too many connections")
	// ErrRejected matches every *RejectError: the peer sent a REJ (or a
	// SIDR_REP that was not valid).
	ErrRejected = errors.New("cm: connection rejected")
	// ErrConnRefused matches a *RejectError whose reason is "invalid
	// service ID": nobody listens on that port, the RDMA counterpart of
	// ECONNREFUSED.
	ErrConnRefused = errors.New("cm: connection refused")
	// ErrUnreachable means the network reported the peer unreachable
	// while a Dial, Accept or ResolveDatagram waited for it: an ICMP
	// "destination unreachable" over UDP (port unreachable when nothing
	// receives RoCEv2 at the address, host or network unreachable when
	// there is no way there), an address without an endpoint on the
	// in-memory network. The error also wraps the system's error
	// (syscall.ECONNREFUSED, EHOSTUNREACH, ...) and says what to check.
	ErrUnreachable = errors.New("cm: peer unreachable")
	// ErrDisconnected is why a connection ended when the peer sent a
	// DREQ (or a REJ once connected). It matches io.EOF.
	ErrDisconnected = fmt.Errorf("cm: peer disconnected: %w", io.EOF)
	// ErrQPError is why a connection ended when its QP entered the
	// error state: a work request failed (RETRY_EXC_ERR when the peer
	// stopped acknowledging, which with the defaults takes 8 ACK
	// timeouts of 2.1 s; RNR_RETRY_EXC_ERR, a remote error), or the
	// program moved the QP to ERR or destroyed it. The error says which;
	// the QP's completions say more. Close the connection.
	ErrQPError = errors.New("cm: the connection's QP is in the error state")
	// ErrClosed means the connection, listener or agent was closed
	// locally. It matches net.ErrClosed, as package net's connections
	// and listeners do once closed (and verbs.ErrClosed, a closed
	// device): errors.Is(err, net.ErrClosed) is the one check for
	// "closed on this side" across goroce. A peer that hung up is
	// ErrDisconnected instead, which matches io.EOF.
	ErrClosed = fmt.Errorf("cm: closed (%w)", net.ErrClosed)
	// ErrStale means the connection was torn down because the peer
	// connected again from the same QP (a stale connection, IBTA Vol. 1
	// §12.4).
	ErrStale = errors.New("cm: stale connection replaced by a new one from the same peer QP")
	// ErrNotSoftware means NewAgent got a device that is not goroce's
	// software device: hardware and kernel devices own QP 1 themselves,
	// and programs using them connect through librdmacm.
	ErrNotSoftware = errors.New("cm: the agent needs goroce's software device (QP 1 of a hardware or kernel device belongs to its kernel; use librdmacm there)")
	// ErrPrivateData means private data is longer than the message
	// carries: 56 bytes in a REQ (after rdma_cm's header), 196 in a REP,
	// 148 in a REJ, 180 in a SIDR_REQ, 136 in a SIDR_REP.
	ErrPrivateData = errors.New("cm: private data too long")
	// ErrAddr means an address is unusable: of another IP version than
	// the device, not the device's own, or a port already listened on.
	ErrAddr = errors.New("cm: bad address")
	// ErrQPState means a QP handed to Dial or Accept was not in RESET
	// or INIT.
	ErrQPState = errors.New("cm: the QP must be in RESET or INIT")
	// ErrInvalid means an argument is unusable: a nil device or QP, an
	// Agent, Conn or Listener not made by this package, a Params value
	// out of range. The error says which and what to give instead.
	ErrInvalid = errors.New("cm: invalid argument")
)

// invalid returns an error wrapping ErrInvalid with a formatted detail.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// rejectWith is an error that a REJ with the given reason answers (rather
// than "consumer defined"), and that Accept still returns.
type rejectWith struct {
	reason mad.RejectReason
	err    error
}

func (e *rejectWith) Error() string { return e.err.Error() }
func (e *rejectWith) Unwrap() error { return e.err }

// RejectError is a REJ from the peer (or one to give it: see Reject). It
// matches ErrRejected with errors.Is, and ErrConnRefused when the reason
// is "invalid service ID". It is not modified after it is returned and is
// safe for concurrent reads.
type RejectError struct {
	// Remote is the peer that rejected.
	Remote netip.AddrPort
	// Reason is the REJ's reason (IBTA Vol. 1 Table 109).
	Reason mad.RejectReason
	// Msg is the message the peer rejected (REQ, REP or other).
	Msg mad.RejectedMsg
	// ARI is the used part of the additional reject information.
	ARI []byte
	// PrivateData is the REJ's private data, all 148 bytes of it as
	// received (a REJ always carries the whole area; the sender's data
	// is at the start, zero-padded).
	PrivateData []byte
}

// Error describes the rejection.
func (e *RejectError) Error() string {
	if e == nil {
		return "cm: <nil RejectError>"
	}
	to := ""
	if e.Remote.IsValid() {
		to = " to " + e.Remote.String()
	}
	if e.Reason == mad.RejInvalidServiceID {
		return fmt.Sprintf("cm: connection%s refused: nobody listens on that port (REJ reason %d, %v)", to, uint16(e.Reason), e.Reason)
	}
	return fmt.Sprintf("cm: connection%s rejected: %v (REJ reason %d)", to, e.Reason, uint16(e.Reason))
}

// Is reports whether target is ErrRejected, or ErrConnRefused for an
// invalid service ID.
func (e *RejectError) Is(target error) bool {
	if e == nil {
		return false
	}
	return target == ErrRejected || target == ErrConnRefused && e.Reason == mad.RejInvalidServiceID
}

// Reject returns the error a ListenConfig.OnRequest hook returns to
// refuse a connection: the agent answers with a REJ whose reason is
// "consumer defined" (28), as rdma_reject does, carrying privateData (at
// most 148 bytes).
func Reject(privateData []byte) error {
	return &RejectError{Reason: mad.RejConsumerDefined, PrivateData: privateData}
}

// inner is a sentinel wrapped in a message that already says "cm: ": it
// reads without its own prefix ("cm: connect to X: peer unreachable", not
// "... : cm: peer unreachable") and still matches the sentinel.
type inner struct{ err error }

func (e inner) Error() string { return strings.TrimPrefix(e.err.Error(), "cm: ") }
func (e inner) Unwrap() error { return e.err }
