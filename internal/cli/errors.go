package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Exit statuses of every command.
const (
	ExitOK      = 0 // done
	ExitFailure = 1 // the command failed: what it was asked could not be done
	ExitUsage   = 2 // a bad flag, argument or combination of them
)

// UsageError is a command line the command cannot run: a flag that does
// not parse, a value out of range, flags that exclude each other. The
// command exits 2 and points at its help. It is not modified once made,
// so it is safe for concurrent use.
type UsageError struct{ Err error }

// Error returns what is wrong with the command line.
func (e *UsageError) Error() string {
	if e == nil || e.Err == nil {
		return "bad command line"
	}
	return e.Err.Error()
}

// Unwrap returns the error behind the usage error, if any.
func (e *UsageError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Usagef returns a *UsageError with a message formatted as fmt.Errorf
// does (%w wraps).
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitError ends a command with a status of its own, for tools whose
// scripts know other statuses than 1 (rping exits 255 on failure, 130
// when interrupted). Err, when set, is reported as any error is. It is
// not modified once made, so it is safe for concurrent use.
type ExitError struct {
	Code int
	Err  error
}

// Error returns the message of Err, or the status.
func (e *ExitError) Error() string {
	if e == nil {
		return "exit status 0"
	}
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *ExitError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Report writes err to stderr as command name's message and returns the
// exit status for it: 0 for nil; 2 for a *UsageError, with a hint to the
// command's help; the code of an *ExitError; 1 for any other error.
func Report(stderr io.Writer, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "roce %s: %v\nRun 'roce help %s' for usage.\n", name, err, name)
		return ExitUsage
	}
	code := ExitFailure
	var xe *ExitError
	if errors.As(err, &xe) {
		code = xe.Code
		if xe.Err == nil {
			return code
		}
	}
	fmt.Fprintf(stderr, "roce %s: %v\n", name, err)
	return code
}

// DialError is the error of a client whose TCP connection to its server
// (the exchange of the perftest, pingpong and rdma-lib tools) failed, with
// what to try: start the server (server, the command that does) when
// nothing listens there, check the address and the firewall when nothing
// answers.
func DialError(addr, server string, err error) error {
	var hint string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = "nothing listens there: start the server first (" + server + "), or check the address and the port (-p)"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		hint = "no route to that host: check the address"
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		hint = "nothing answered: check the address, and that no firewall drops TCP port " + portOf(addr)
	default:
		return fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	return fmt.Errorf("couldn't connect to %s: %s (%w)", addr, hint, rootCause(err))
}

// rootCause is the system's error in err's chain ("connection
// refused"), without the layers around it that repeat the address; err
// itself when it holds none.
func rootCause(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// portOf returns the port of host:port, or addr.
func portOf(addr string) string {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		return p
	}
	return addr
}
