package rsocket

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Errors of a connection, as the Err of the *net.OpError a call returns
// (or wrapped in it). A timeout is os.ErrDeadlineExceeded, a call on a
// closed Conn or Listener net.ErrClosed, and a read past the peer's
// orderly end io.EOF (returned bare, as package net does).
var (
	// ErrReset means the peer ended the connection while this side was
	// still using it: it closed (a DISCONNECT message) while this side
	// wrote, or its connection manager disconnected (a DREQ) without
	// the rsocket's orderly DISCONNECT, as when its process ends. It
	// matches syscall.ECONNRESET, what librdmacm returns.
	ErrReset = fmt.Errorf("rsocket: connection reset by peer: %w", syscall.ECONNRESET)
	// ErrShutdown means Write was called after CloseWrite. It matches
	// syscall.EPIPE.
	ErrShutdown = fmt.Errorf("rsocket: write after CloseWrite: %w", syscall.EPIPE)
	// ErrConnLost means the queue pair failed: the peer stopped
	// acknowledging (its device or process is gone: RETRY_EXC_ERR once
	// the QP's retries ran out), or the QP went to the error state. The
	// error wraps the failed completion (a *verbs.WCError, so errors.Is
	// with its status works) or the connection manager's reason.
	ErrConnLost = errors.New("rsocket: connection lost")
	// ErrProtocol means the peer broke the rsocket protocol: more data
	// than the buffers it was given, more messages than its credits, a
	// message without immediate data. The connection is unusable.
	ErrProtocol = errors.New("rsocket: the peer broke the rsocket protocol")
)

// errInvalid is what the methods of a nil or zero Conn or Listener
// return, as package net's do.
var errInvalid = fmt.Errorf("rsocket: a nil or zero Conn or Listener (make them with Dial, Listen and Accept): %w", syscall.EINVAL)

// Addr is the address of an rsocket: an IP address and a port of rdma_cm's
// TCP port space, where rsockets listen and connect. It is plain data.
type Addr struct {
	AddrPort netip.AddrPort
}

// Network returns "rsocket".
func (a *Addr) Network() string { return "rsocket" }

// String returns the address and port, as netip.AddrPort writes them.
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	return a.AddrPort.String()
}

// opError wraps err as package net does: a *net.OpError naming the
// operation and the two ends. io.EOF is returned as it is.
func opError(op string, src, dst net.Addr, err error) error {
	return &net.OpError{Op: op, Net: "rsocket", Source: src, Addr: dst, Err: err}
}
