package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
)

// Errors of this package that package cm has no counterpart for. The
// others are cm's own sentinels (cm.ErrTimeout, cm.ErrConnRefused,
// cm.ErrUnreachable, cm.ErrDisconnected, cm.ErrClosed, ...) and
// *cm.RejectError, so that a program checks the errors of both
// connection managers alike; the package documentation maps every
// rdma_cm event to its error.
var (
	// ErrDeviceRemoved means the kernel reported the connection's (or
	// listener's) RDMA device removed (RDMA_CM_EVENT_DEVICE_REMOVAL):
	// close the connection and the device; nothing on it works any more.
	ErrDeviceRemoved = errors.New("rdmacm: the RDMA device was removed")
	// ErrConnect means the kernel could not establish a connection the
	// peer had answered (RDMA_CM_EVENT_CONNECT_ERROR), or this side
	// could not move its QP with the attributes rdma_cm gave; the error
	// says which, and wraps the errno.
	ErrConnect = errors.New("rdmacm: the connection could not be established")
)

// eventType is an rdma_cm event (enum rdma_cm_event_type).
type eventType int32

// The rdma_cm events, numbered as librdmacm numbers them.
const (
	evAddrResolved eventType = iota
	evAddrError
	evRouteResolved
	evRouteError
	evConnectRequest
	evConnectResponse
	evConnectError
	evUnreachable
	evRejected
	evEstablished
	evDisconnected
	evDeviceRemoval
	evMulticastJoin
	evMulticastError
	evAddrChange
	evTimewaitExit
)

var eventNames = [...]string{"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED", "DISCONNECTED",
	"DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT"}

// String returns librdmacm's name of the event, as rdma_event_str does.
func (t eventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return "RDMA_CM_EVENT(" + strconv.Itoa(int(t)) + ")"
}

// errno returns the errno of a negative event status (rdma_cm reports
// -errno), or 0.
func errno(status int32) syscall.Errno {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return 0
}

// what says what an event's status was, for an error's text.
func what(t eventType, status int32) string {
	if e := errno(status); e != 0 {
		return fmt.Sprintf("%v, status %d: %v", t, status, e)
	}
	return fmt.Sprintf("%v, status %d", t, status)
}

// eventError is the error an event means to a connection that is being
// made or is up: the peer at remote, active for the dialling side. A
// REJECTED event's status is the REJ's reason and pdata its private
// data. Events that are no failure give nil.
func eventError(t eventType, status int32, pdata []byte, remote netip.AddrPort, active bool) error {
	e := errno(status)
	switch t {
	case evRejected:
		msg := mad.RejectedREQ
		if !active {
			msg = mad.RejectedREP
		}
		return &cm.RejectError{Remote: remote, Reason: mad.RejectReason(status), Msg: msg,
			PrivateData: append([]byte(nil), pdata...)}
	case evUnreachable:
		if e == syscall.ETIMEDOUT {
			return fmt.Errorf("%w (%s): the peer %v never answered after rdma_cm's retries; check that it is up and "+
				"its RDMA device has the address", cm.ErrTimeout, what(t, status), remote)
		}
		return joinErrno(fmt.Errorf("%w (%s): check the path to %v", cm.ErrUnreachable, what(t, status), remote), e)
	case evAddrError, evRouteError:
		return joinErrno(fmt.Errorf("%w (%s): no RDMA route to %v: check the address, that it answers ARP or "+
			"neighbour discovery, and that a local RDMA device (rdma link) holds an address on that network",
			cm.ErrUnreachable, what(t, status), remote.Addr()), e)
	case evConnectError:
		return joinErrno(fmt.Errorf("%w (%s) with %v", ErrConnect, what(t, status), remote), e)
	case evDisconnected, evTimewaitExit:
		return fmt.Errorf("%w (%v)", cm.ErrDisconnected, t)
	case evDeviceRemoval:
		return fmt.Errorf("%w (%v): close the connection and the device", ErrDeviceRemoved, t)
	}
	return nil
}

// joinErrno adds the errno to err, when there is one, so that errors.Is
// finds it too.
func joinErrno(err error, e syscall.Errno) error {
	if e == 0 {
		return err
	}
	return &errnoError{err: err, errno: e}
}

// errnoError is an error that also matches an errno.
type errnoError struct {
	err   error
	errno syscall.Errno
}

func (e *errnoError) Error() string   { return e.err.Error() }
func (e *errnoError) Unwrap() []error { return []error{e.err, e.errno} }

// unexpected is the error of an event a connection did not expect at
// that step.
func unexpected(t eventType, status int32, step string) error {
	return fmt.Errorf("%w: %s while %s", ErrConnect, what(t, status), step)
}
