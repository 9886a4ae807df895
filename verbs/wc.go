package verbs

import (
	"errors"
	"fmt"
)

// Error returns the status's name. A Status is an error, as syscall.Errno
// is, so that errors.Is(err, RetryExcErr) finds the status a WCError
// carries; Success is not meant to be used as one (WC.Err returns nil
// for it).
func (s Status) Error() string { return s.String() }

// WCError is a work completion that did not succeed, as WC.Err returns
// it: its status, the vendor error, the opcode and the work request and
// QP it belongs to. errors.Is(err, RetryExcErr) and errors.As(err,
// &status) match its Status. It is plain data, safe to share once made.
type WCError struct {
	Status    Status
	VendorErr uint32
	// Opcode is the completion's opcode; ibverbs defines it only for
	// successful completions, so it may say RECV or SEND for a flushed
	// request whatever the request was.
	Opcode WCOpcode
	ID     uint64
	QPN    uint32
}

// Error describes the failed completion.
func (e *WCError) Error() string {
	if e == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("verbs: work request %d on QP %d completed with %v (opcode %v", e.ID, e.QPN, e.Status, e.Opcode)
	if e.VendorErr != 0 {
		s += fmt.Sprintf(", vendor error %#x", e.VendorErr)
	}
	return s + ")"
}

// Unwrap returns the completion's Status.
func (e *WCError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Status
}

// errNilWC is what Err reports for a nil *WC.
var errNilWC = errors.New("verbs: Err called on a nil *WC")

// Err returns nil for a successful completion and a *WCError for any
// other, so that a program checks a completion as it checks a call:
//
//	if err := wc.Err(); err != nil {
//		return fmt.Errorf("write to the peer: %w", err)
//	}
//
// A flushed request (WRFlushErr: the QP went to ERR first) is an error
// too; errors.Is(err, WRFlushErr) tells it apart from the completion that
// caused the ERR state.
func (w *WC) Err() error {
	if w == nil {
		return errNilWC
	}
	if w.Status == Success {
		return nil
	}
	return &WCError{Status: w.Status, VendorErr: w.VendorErr, Opcode: w.Opcode, ID: w.ID, QPN: w.QPN}
}
