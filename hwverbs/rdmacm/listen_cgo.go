//go:build hwverbs && cgo && linux

package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
)

// Listener accepts connections to one address and rdma_cm TCP port
// through librdmacm (rdma_listen), with its own event channel. Its
// methods are safe for concurrent use.
type Listener struct {
	dev     *hwverbs.Device
	log     *slog.Logger
	id      cmID
	ch      *channel
	addr    netip.AddrPort
	cfg     ListenConfig
	pending chan *Conn
	done    chan struct{}

	mu     sync.Mutex
	closed bool
	err    error // why done was closed
}

// Listen starts accepting connection requests for addr on dev, as
// rdma_bind_addr and rdma_listen do: addr is one of the device's
// addresses, or an unspecified one (0.0.0.0, ::; the zero AddrPort means
// 0.0.0.0) for any, and an rdma_cm TCP port; port 0 has rdma_cm pick a
// free one (Addr tells which). Requests that arrive on another RDMA
// device are rejected. ctx only bounds the call; the listener lives until
// Close.
func Listen(ctx context.Context, dev *hwverbs.Device, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	if err := checkDevice(dev); err != nil {
		return nil, err
	}
	a, err := listenAddr(addr)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &Listener{dev: dev, done: make(chan struct{})}
	if cfg != nil {
		l.cfg = *cfg
	}
	if l.cfg.Backlog <= 0 {
		l.cfg.Backlog = 16
	}
	l.log = l.cfg.Logger
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.pending = make(chan *Conn, l.cfg.Backlog)
	if err := l.listen(a); err != nil {
		return nil, err
	}
	l.log.Debug("rdmacm: listen", "addr", l.addr, "device", dev.Name())
	return l, nil
}

// Dial connects to a listener at addr (the peer's IP address and rdma_cm
// TCP port) from dev, as rdma_resolve_addr, rdma_resolve_route and
// rdma_connect do, and returns the connection once the REP has come, the
// QP is in RTS and the RTU is sent (rdma_establish). The route to addr
// must leave through dev (the source address is dev's when it is of the
// same IP version). It fails with a *cm.RejectError when the peer
// rejects (matching cm.ErrConnRefused when nobody listens on the port),
// with cm.ErrUnreachable when rdma_cm finds no route or the address does
// not answer, with cm.ErrTimeout when nothing answers the REQ through
// rdma_cm's retries, or with ctx's error as soon as ctx ends. A failed
// Dial leaves a caller's QP in ERR, its posted work requests flushed.
func Dial(ctx context.Context, dev *hwverbs.Device, addr netip.AddrPort, p *Params) (*Conn, error) {
	if err := checkDevice(dev); err != nil {
		return nil, err
	}
	var pp Params
	if p != nil {
		pp = *p
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := checkDial(addr, &pp); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := newConn(dev, true, pp.Logger)
	c.remote = addr
	if err := c.dial(ctx, &pp); err != nil {
		c.teardown()
		return nil, fmt.Errorf("rdmacm: dial %v: %w", addr, err)
	}
	return c, nil
}

// Addr returns the listener's address and port.
func (l *Listener) Addr() netip.AddrPort {
	if l == nil {
		return netip.AddrPort{}
	}
	return l.addr
}

// ok returns the error of a method called on a Listener Listen did not
// make.
func (l *Listener) ok() error {
	if l == nil || l.done == nil {
		return invalid("nil Listener: make one with Listen")
	}
	return nil
}

// Accept waits for a connection request, has ListenConfig.OnRequest
// decide it, and for an accepted one moves the QP to RTS, sends the REP
// (rdma_accept) and waits for the RTU (RDMA_CM_EVENT_ESTABLISHED). It
// returns the connection, or an error: cm.ErrClosed once the listener is
// closed, ErrDeviceRemoved when its device went away, ctx's error, a
// *cm.RejectError when the peer rejected the REP, cm.ErrTimeout when the
// peer never answered it, or OnRequest's own error. Requests whose peer
// gave up before Accept took them are skipped.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if err := l.ok(); err != nil {
		return nil, err
	}
	for {
		select {
		case c := <-l.pending:
			conn, err := l.accept(ctx, c)
			if conn == nil && err == nil {
				continue
			}
			return conn, err
		case <-l.done:
			l.mu.Lock()
			defer l.mu.Unlock()
			return nil, l.err
		case <-ctx.Done():
			return nil, fmt.Errorf("rdmacm: accept on %v: %w", l.addr, ctx.Err())
		}
	}
}

// accept completes one request. It returns nil, nil when the request
// went away or OnRequest refused it with cm.Reject.
func (l *Listener) accept(ctx context.Context, c *Conn) (*Conn, error) {
	if err := c.pendingErr(); err != nil {
		l.log.Debug("rdmacm: request gone before Accept", "from", c.remote, "err", err)
		c.teardown()
		return nil, nil
	}
	r := c.req
	r.PrivateData = append([]byte(nil), r.PrivateData...)
	var p *Params
	var err error
	if l.cfg.OnRequest != nil {
		p, err = l.cfg.OnRequest(ctx, &r)
	}
	if p == nil && err == nil {
		p = &Params{}
	}
	if err == nil {
		err = checkAccept(p)
	}
	if err != nil {
		return l.refuse(c, err)
	}
	if p.Logger != nil {
		// The request's goroutine may log (under c.mu) meanwhile.
		c.mu.Lock()
		c.log = p.Logger
		c.mu.Unlock()
	}
	if err := c.acceptReq(ctx, p); err != nil {
		c.teardown()
		return nil, fmt.Errorf("rdmacm: accept from %v: %w", c.remote, err)
	}
	return c, nil
}

// refuse rejects a request OnRequest refused, or that could not be
// served. It returns nil, nil for a refusal made by cm.Reject (Accept
// goes on to the next request), and the error otherwise.
func (l *Listener) refuse(c *Conn, err error) (*Conn, error) {
	var rej *cm.RejectError
	isRej := errors.As(err, &rej)
	var data []byte
	if isRej && len(rej.PrivateData) <= MaxREJData {
		data = rej.PrivateData
	}
	c.reject(data)
	c.teardown()
	if isRej && len(rej.PrivateData) > MaxREJData {
		return nil, fmt.Errorf("rdmacm: %w: %d bytes in a REJ (at most %d); rejected without them",
			cm.ErrPrivateData, len(rej.PrivateData), MaxREJData)
	}
	if isRej {
		l.log.Debug("rdmacm: request rejected", "from", c.remote, "private_data", len(data))
		return nil, nil
	}
	return nil, err
}

// Close stops the listener: its rdma_cm id and event goroutine go,
// requests not yet accepted are rejected (REJ "consumer defined") and
// Accept returns cm.ErrClosed. Connections accepted before are not
// affected. Closing twice is harmless.
func (l *Listener) Close() error {
	if err := l.ok(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.failLocked(cm.ErrClosed)
	l.mu.Unlock()
	l.teardown()
	for {
		select {
		case c := <-l.pending:
			c.reject(nil)
			c.teardown()
		default:
			l.log.Debug("rdmacm: listener closed", "addr", l.addr)
			return nil
		}
	}
}

// failLocked ends the listener with err; the caller holds l.mu.
func (l *Listener) failLocked(err error) {
	if l.err == nil {
		l.err = err
		close(l.done)
	}
}
