package rdmacm

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// Sizes of the private data rdma_cm carries (IBTA Vol. 1 chapter 12,
// less rdma_cm's 36-byte header in a REQ).
const (
	// MaxREQData is what a Dial may send: the REQ's 92 bytes less
	// rdma_cm's header.
	MaxREQData = 56
	// MaxREPData is what an Accept may send in the REP.
	MaxREPData = 196
	// MaxREJData is what a refusal may send in the REJ.
	MaxREJData = 148
)

// maxCount is the largest retry and RNR retry count (3 bits).
const maxCount = 7

// Params are what one side brings to a connection: its QP (or how the
// connection makes one), the RDMA READ/atomic depths it offers, the retry
// counts and its private data, as cm.Params are for goroce's software
// device. The zero value is rping's choice: one outstanding READ each
// way, 7 retries, 7 RNR retries (without end), a QP the connection
// creates. Values out of range make Dial and Accept fail with
// cm.ErrInvalid rather than be replaced. It is plain data, read by Dial
// and Accept.
type Params struct {
	// QP is the caller's RC QP of the device, in RESET or INIT, whose
	// receives can be posted before the connection exists (as rping
	// and perftest do). The connection moves it through INIT, RTR and
	// RTS with the attributes the kernel's rdma_cm gives
	// (rdma_init_qp_attr), and to ERR when it ends. nil makes the
	// connection create one in PD with the CQs and Cap below; its
	// Close destroys what it created.
	QP verbs.QP
	// PD, SendCQ and RecvCQ are used for a QP the connection creates;
	// nil ones are created on the device too.
	PD             verbs.PD
	SendCQ, RecvCQ verbs.CQ
	// Cap sizes a QP the connection creates; zero means 16 work
	// requests and one SGE each way.
	Cap verbs.QPCap
	// ResponderResources is how many RDMA READ and atomic requests this
	// side serves at once, InitiatorDepth how many it issues at once;
	// each is negotiated down to the peer's matching value (0 means 1).
	ResponderResources, InitiatorDepth uint8
	// RetryCount is how many times the QPs send again what the peer did
	// not acknowledge in time (at most 7; 0 means 7). The dialler's
	// goes in the REQ and sets both QPs; a listener's is not used.
	RetryCount uint8
	// RNRRetryCount is how many times the *peer's* QP sends again a
	// message this side had no receive posted for (at most 7, 7 meaning
	// without end; 0 means 7): it travels in the REQ or the REP.
	RNRRetryCount uint8
	// MinRNRTimer is this side's minimum RNR NAK timer code (at most
	// 31); 0 keeps rdma_cm's (0: 655 ms).
	MinRNRTimer uint8
	// ACKTimeout is this side's local ACK timeout exponent (4.096 µs ×
	// 2^ACKTimeout, at most 31), as RDMA_OPTION_ID_ACK_TIMEOUT sets it;
	// 0 keeps the one rdma_cm derives from the path.
	ACKTimeout uint8
	// PrivateData goes to the peer: at most MaxREQData bytes in a REQ,
	// MaxREPData in a REP.
	PrivateData []byte
	// Logger receives the connection's state changes at Debug level;
	// nil discards them.
	Logger *slog.Logger
}

// check reports the first value of p that is out of range.
func (p *Params) check() error {
	switch {
	case isNil(p.QP), isNil(p.PD), isNil(p.SendCQ), isNil(p.RecvCQ):
		return invalid("Params holds a nil pointer in QP, PD, SendCQ or RecvCQ: leave the field nil to have one made")
	case p.ACKTimeout > 31:
		return invalid("Params.ACKTimeout %d is over 31, the largest ACK timeout exponent (0: the path's)", p.ACKTimeout)
	case p.RetryCount > maxCount:
		return invalid("Params.RetryCount %d is over 7, the largest retry count (0 means 7)", p.RetryCount)
	case p.RNRRetryCount > maxCount:
		return invalid("Params.RNRRetryCount %d is over 7, the largest RNR retry count (7 retries without end; 0 means 7)",
			p.RNRRetryCount)
	case p.MinRNRTimer > 31:
		return invalid("Params.MinRNRTimer %d is over 31, the largest RNR timer code (0: rdma_cm's)", p.MinRNRTimer)
	}
	return nil
}

// isNil reports whether v is an interface holding a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return false
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// invalid returns an error wrapping cm.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("rdmacm: %w: "+format, append([]any{cm.ErrInvalid}, args...)...)
}

// depth is a negotiable depth: 0 means 1.
func depth(v uint8) uint8 { return max(v, 1) }

// count is a retry count: 0 means 7.
func count(v uint8) uint8 {
	if v == 0 {
		return maxCount
	}
	return v
}

// ListenConfig configures a Listener, as cm.ListenConfig does. A nil
// *ListenConfig accepts every request with the zero Params (a QP the
// connection creates). It is plain data, copied by Listen; OnRequest may
// run on several Accept goroutines at once.
type ListenConfig struct {
	// Backlog bounds the requests waiting for Accept (rdma_listen's
	// backlog); 0 means 16. A request that finds it full is rejected
	// (REJ "consumer defined"), as the kernel's rdma_cm does.
	Backlog int
	// OnRequest decides each connection request, on Accept's goroutine:
	// it returns the Params to accept with (its QP, which may have
	// receives posted already, and the REP's private data, such as a
	// buffer's address and rkey), or an error to refuse it. An error made
	// by cm.Reject sends a REJ "consumer defined" with that error's
	// private data (rdma_reject: librdmacm sends no other reason) and
	// Accept goes on to the next request; any other error sends the same
	// REJ without private data and Accept returns the error. nil accepts
	// every request with the zero Params.
	OnRequest func(ctx context.Context, r *Request) (*Params, error)
	// Logger receives the listener's state changes at Debug level; nil
	// discards them.
	Logger *slog.Logger
}

// Request is a connection request as OnRequest sees it (the
// RDMA_CM_EVENT_CONNECT_REQUEST). It is plain data.
type Request struct {
	// Local is the address and port the peer asked for; Remote the
	// peer's address and source port.
	Local, Remote netip.AddrPort
	// PrivateData is the peer's: the MaxREQData bytes that follow
	// rdma_cm's header in the REQ, zero-padded.
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the peer's offer.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the peer's.
	RetryCount, RNRRetryCount uint8
	// PathMTU is the path's MTU (0 when rdma_cm gave no path record).
	PathMTU bth.MTU
	// RemoteQPN is the peer's QP number.
	RemoteQPN uint32
}

// ConnInfo is what a connection negotiated: each value is the one in
// effect on the QP. It is plain data.
type ConnInfo struct {
	LocalQPN, RemoteQPN uint32
	// SendPSN is the first PSN this side sends; RecvPSN the first it
	// expects.
	SendPSN, RecvPSN uint32
	// ResponderResources is the QP's max_dest_rd_atomic, InitiatorDepth
	// its max_rd_atomic.
	ResponderResources, InitiatorDepth uint8
	PathMTU                            bth.MTU
	RetryCount, RNRRetryCount          uint8
	// LocalACKTimeout is the QP's local ACK timeout exponent.
	LocalACKTimeout uint8
	// MinRNRTimer is the QP's minimum RNR NAK timer code.
	MinRNRTimer uint8
}

// checkDial checks what Dial needs of its address and Params, before
// anything is made.
func checkDial(addr netip.AddrPort, p *Params) error {
	ip := addr.Addr()
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return fmt.Errorf("rdmacm: %w: dial %v: give the peer's IP address and rdma_cm port", cm.ErrAddr, addr)
	case addr.Port() == 0:
		return fmt.Errorf("rdmacm: %w: dial %v: port 0 (give the peer's rdma_cm port, such as rping's 7174)", cm.ErrAddr, addr)
	case ip.Zone() != "":
		return fmt.Errorf("rdmacm: %w: dial %v: addresses with a zone are not supported", cm.ErrAddr, addr)
	}
	if err := p.check(); err != nil {
		return err
	}
	if len(p.PrivateData) > MaxREQData {
		return fmt.Errorf("rdmacm: %w: %d bytes in a REQ (at most %d)", cm.ErrPrivateData, len(p.PrivateData), MaxREQData)
	}
	return nil
}

// checkAccept checks the Params OnRequest returned.
func checkAccept(p *Params) error {
	if err := p.check(); err != nil {
		return err
	}
	if len(p.PrivateData) > MaxREPData {
		return fmt.Errorf("rdmacm: %w: %d bytes in a REP (at most %d)", cm.ErrPrivateData, len(p.PrivateData), MaxREPData)
	}
	return nil
}

// listenAddr checks a listener's address and gives the one to bind:
// the zero AddrPort means any IPv4 address and a port rdma_cm picks.
func listenAddr(addr netip.AddrPort) (netip.AddrPort, error) {
	if !addr.Addr().IsValid() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port()), nil
	}
	if addr.Addr().Zone() != "" {
		return addr, fmt.Errorf("rdmacm: %w: listen on %v: addresses with a zone are not supported", cm.ErrAddr, addr)
	}
	return netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()), nil
}

// checkDevice reports a device Listen and Dial cannot use.
func checkDevice(dev *hwverbs.Device) error {
	if !hwverbs.Built {
		return fmt.Errorf("rdmacm: %w (rdma_cm also needs librdmacm-dev: apt-get install librdmacm-dev)", hwverbs.ErrNotBuilt)
	}
	if dev == nil || dev.Name() == "" {
		return invalid("nil or zero *hwverbs.Device: open one with hwverbs.Open")
	}
	return nil
}
