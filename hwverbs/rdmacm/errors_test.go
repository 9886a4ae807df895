package rdmacm

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
)

// The errors each rdma_cm event means, as the package documentation
// lists them.
func TestEventError(t *testing.T) {
	remote := netip.MustParseAddrPort("198.18.0.12:7174")
	etimedout := -int32(syscall.ETIMEDOUT)
	tests := []struct {
		name   string
		typ    eventType
		status int32
		active bool
		is     []error
		isNot  []error
		text   string
	}{
		{"refused", evRejected, 8, true, []error{cm.ErrRejected, cm.ErrConnRefused}, nil, "nobody listens"},
		{"consumer reject", evRejected, 28, true, []error{cm.ErrRejected}, []error{cm.ErrConnRefused}, "consumer defined"},
		{"REQ timeout", evUnreachable, etimedout, true, []error{cm.ErrTimeout}, []error{cm.ErrUnreachable},
			"RDMA_CM_EVENT_UNREACHABLE, status -110"},
		{"unreachable", evUnreachable, -int32(syscall.ENETUNREACH), true,
			[]error{cm.ErrUnreachable, syscall.ENETUNREACH}, []error{cm.ErrTimeout}, "RDMA_CM_EVENT_UNREACHABLE"},
		{"no ARP answer", evAddrError, etimedout, true, []error{cm.ErrUnreachable, syscall.ETIMEDOUT},
			[]error{cm.ErrTimeout}, "198.18.0.12"},
		{"no route", evRouteError, -int32(syscall.EHOSTUNREACH), true,
			[]error{cm.ErrUnreachable, syscall.EHOSTUNREACH}, nil, "RDMA_CM_EVENT_ROUTE_ERROR"},
		{"connect error", evConnectError, -int32(syscall.EINVAL), true, []error{ErrConnect, syscall.EINVAL}, nil,
			"RDMA_CM_EVENT_CONNECT_ERROR"},
		{"disconnected", evDisconnected, 0, false, []error{cm.ErrDisconnected, io.EOF}, nil, "DISCONNECTED"},
		{"timewait", evTimewaitExit, 0, false, []error{cm.ErrDisconnected}, nil, "TIMEWAIT_EXIT"},
		{"device removal", evDeviceRemoval, 0, true, []error{ErrDeviceRemoved}, []error{cm.ErrDisconnected},
			"close the connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := eventError(tt.typ, tt.status, nil, remote, tt.active)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tt.is {
				if !errors.Is(err, want) {
					t.Errorf("%v is not %v", err, want)
				}
			}
			for _, not := range tt.isNot {
				if errors.Is(err, not) {
					t.Errorf("%v is %v", err, not)
				}
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("%q does not say %q", err, tt.text)
			}
		})
	}
	for _, typ := range []eventType{evAddrResolved, evRouteResolved, evConnectRequest, evConnectResponse,
		evEstablished, evAddrChange} {
		if err := eventError(typ, 0, nil, remote, true); err != nil {
			t.Errorf("%v: %v, want no error", typ, err)
		}
	}
}

// A REJ's reason and private data reach the dialler in a *cm.RejectError,
// as a copy; the accepting side's REJ rejected its REP.
func TestEventErrorReject(t *testing.T) {
	remote := netip.MustParseAddrPort("198.18.0.12:7174")
	data := bytes.Repeat([]byte{0xab}, MaxREJData)
	err := eventError(evRejected, int32(mad.RejConsumerDefined), data, remote, true)
	var rej *cm.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("%v is no *cm.RejectError", err)
	}
	if rej.Reason != mad.RejConsumerDefined || rej.Remote != remote || rej.Msg != mad.RejectedREQ ||
		!bytes.Equal(rej.PrivateData, data) {
		t.Errorf("got %+v", rej)
	}
	data[0] = 0
	if rej.PrivateData[0] != 0xab {
		t.Error("the error shares the event's private data")
	}
	if err := eventError(evRejected, 28, nil, remote, false); !errors.As(err, &rej) || rej.Msg != mad.RejectedREP {
		t.Errorf("accepting side: %v (%+v), want a REJ of the REP", err, rej)
	}
}

func TestEventTypeString(t *testing.T) {
	for typ, want := range map[eventType]string{evAddrResolved: "RDMA_CM_EVENT_ADDR_RESOLVED",
		evRejected: "RDMA_CM_EVENT_REJECTED", evTimewaitExit: "RDMA_CM_EVENT_TIMEWAIT_EXIT",
		16: "RDMA_CM_EVENT(16)", -1: "RDMA_CM_EVENT(-1)"} {
		if got := typ.String(); got != want {
			t.Errorf("%d: %q, want %q", int(typ), got, want)
		}
	}
	err := unexpected(evRejected, 28, "resolving the address")
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "RDMA_CM_EVENT_REJECTED, status 28 while resolving") {
		t.Errorf("unexpected: %v", err)
	}
}
