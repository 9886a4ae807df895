//go:build !hwverbs || !cgo || !linux

package rdmacm

import (
	"context"
	"net/netip"

	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// Listen returns hwverbs.ErrNotBuilt: this build has no librdmacm (it
// lacks the hwverbs build tag, cgo, or Linux).
func Listen(ctx context.Context, dev *hwverbs.Device, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	return nil, checkDevice(dev)
}

// Dial returns hwverbs.ErrNotBuilt: this build has no librdmacm.
func Dial(ctx context.Context, dev *hwverbs.Device, addr netip.AddrPort, p *Params) (*Conn, error) {
	return nil, checkDevice(dev)
}

// Listener accepts connections through librdmacm; this build has none,
// so its methods only report errors. It is safe for concurrent use.
type Listener struct{}

// Addr returns the zero address.
func (l *Listener) Addr() netip.AddrPort { return netip.AddrPort{} }

// Accept returns hwverbs.ErrNotBuilt.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) { return nil, checkDevice(nil) }

// Close returns hwverbs.ErrNotBuilt.
func (l *Listener) Close() error { return checkDevice(nil) }

// Conn is a connection made through librdmacm; this build has none, so
// its methods only report errors or zero values. It is safe for
// concurrent use.
type Conn struct{}

// QP returns nil.
func (c *Conn) QP() verbs.QP { return nil }

// PD returns nil.
func (c *Conn) PD() verbs.PD { return nil }

// CQs return nil.
func (c *Conn) CQs() (send, recv verbs.CQ) { return nil, nil }

// LocalAddr returns the zero address.
func (c *Conn) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// RemoteAddr returns the zero address.
func (c *Conn) RemoteAddr() netip.AddrPort { return netip.AddrPort{} }

// PrivateData returns nil.
func (c *Conn) PrivateData() []byte { return nil }

// Info returns the zero ConnInfo.
func (c *Conn) Info() ConnInfo { return ConnInfo{} }

// Done returns a closed channel: there is no connection.
func (c *Conn) Done() <-chan struct{} { return closedChan }

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Err returns hwverbs.ErrNotBuilt.
func (c *Conn) Err() error { return checkDevice(nil) }

// Close returns hwverbs.ErrNotBuilt.
func (c *Conn) Close() error { return checkDevice(nil) }

// CloseContext returns hwverbs.ErrNotBuilt.
func (c *Conn) CloseContext(ctx context.Context) error { return checkDevice(nil) }
