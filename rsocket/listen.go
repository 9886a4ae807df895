package rsocket

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// ListenConfig makes rsocket listeners with its Options for the
// connections they accept; the zero value, and a nil *ListenConfig, use
// the defaults. It is plain data, read by Listen.
type ListenConfig struct {
	Options
	// Backlog bounds the connection requests waiting for Accept
	// (rlisten's backlog); 0 means 16.
	Backlog int
}

// Listener accepts rsocket connections on one address and rdma_cm TCP
// port. It is a net.Listener, safe for concurrent use: several
// goroutines may Accept at once, and Close makes them all return.
type Listener struct {
	cl   *cm.Listener
	dev  verbs.Device
	addr *Addr
	opts Options
	log  *slog.Logger
	once sync.Once
	// iomap is the IOMapSize of connections accepted from now on
	// (SetIOMapSize): opts.IOMapSize until it is set.
	iomap atomic.Int32
}

var _ net.Listener = (*Listener)(nil)

// Listen listens for rsocket connections on addr on dev, with the
// default Options: addr is the device's address or an unspecified one,
// and a port (0 picks a free one).
func Listen(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*Listener, error) {
	var lc *ListenConfig
	return lc.Listen(ctx, dev, addr)
}

// Listen listens for rsocket connections on addr on dev. ctx bounds the
// call only.
func (lc *ListenConfig) Listen(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*Listener, error) {
	var cfg ListenConfig
	if lc != nil {
		cfg = *lc
	}
	l, err := listen(ctx, dev, addr, &cfg)
	if err != nil {
		return nil, opError("listen", nil, &Addr{AddrPort: addr}, err)
	}
	return l, nil
}

func listen(ctx context.Context, dev verbs.Device, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	opts, err := cfg.Options.withDefaults()
	if err != nil {
		return nil, err
	}
	if dev == nil {
		return nil, errNoDevice
	}
	l := &Listener{dev: dev, opts: opts, log: opts.Logger}
	l.iomap.Store(int32(opts.IOMapSize))
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	lcfg := &cm.ListenConfig{Backlog: cfg.Backlog, OnRequest: l.onRequest}
	if opts.Agent != nil {
		l.cl, err = opts.Agent.Listen(ctx, addr, lcfg)
	} else {
		l.cl, err = cm.Listen(ctx, dev, addr, lcfg)
	}
	if err != nil {
		return nil, err
	}
	l.addr = &Addr{AddrPort: l.cl.Addr()}
	return l, nil
}

// ok reports whether l is a Listener that Listen made.
func (l *Listener) ok() bool { return l != nil && l.cl != nil }

// SetIOMapSize sets the entries of the iomap table (Options.IOMapSize)
// that the connections l accepts from now on offer their peers, as
// rsetsockopt(RDMA_IOMAPSIZE) on a listening rsocket sets it for the
// connections raccept takes after it. It fails with ErrOption outside 0
// to 32512 (0x7f00) entries; sizes round as Options.IOMapSize does.
func (l *Listener) SetIOMapSize(n int) error {
	if l == nil || l.cl == nil {
		return errInvalid
	}
	if n < 0 || n > maxIomapEntries {
		return fmt.Errorf("%w: IOMapSize is %d; use 0 to %d", ErrOption, n, maxIomapEntries)
	}
	l.iomap.Store(int32(iomapEntries(iomapScale(n))))
	return nil
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr {
	if !l.ok() {
		return nil
	}
	return l.addr
}

// Close stops listening: requests not accepted yet are refused, and
// Accept calls return net.ErrClosed. Accepted connections go on.
func (l *Listener) Close() error {
	if !l.ok() {
		return errInvalid
	}
	err := error(opError("close", nil, l.addr, net.ErrClosed))
	l.once.Do(func() {
		l.cl.Close()
		err = nil
	})
	return err
}

// Accept waits for the next connection (net.Listener's Accept).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptContext(context.Background())
	if err != nil {
		return nil, err
	}
	return c, nil
}

// acceptKey is the context key of the slot where onRequest leaves the
// endpoint it made for the request Accept is completing.
type acceptKey struct{}

type acceptSlot struct {
	ep   *endpoint
	peer connData
}

// release frees an endpoint left in the slot by a request that did not
// become a connection.
func (s *acceptSlot) release() {
	if s.ep != nil {
		s.ep.close()
		s.ep = nil
	}
}

// AcceptContext waits for the next connection, or for ctx to end, and
// returns it as a *Conn. A request whose handshake fails (the peer gave
// up, or is not an rsocket) is dropped and the next one awaited, as
// raccept does; errors are the listener's: net.ErrClosed once it is
// closed, ctx's, or a failure to make a connection's resources.
func (l *Listener) AcceptContext(ctx context.Context) (*Conn, error) {
	if !l.ok() {
		return nil, errInvalid
	}
	for {
		slot := &acceptSlot{}
		cc, err := l.cl.Accept(context.WithValue(ctx, acceptKey{}, slot))
		if err != nil {
			slot.release()
			switch {
			case errors.Is(err, cm.ErrClosed):
				return nil, opError("accept", nil, l.addr, net.ErrClosed)
			case ctx.Err() != nil:
				return nil, opError("accept", nil, l.addr, ctx.Err())
			case errors.Is(err, errSetup):
				return nil, opError("accept", nil, l.addr, err)
			}
			l.log.Debug("rsocket: handshake failed", "addr", l.addr, "err", err)
			continue
		}
		if slot.ep == nil || cc.QP() != slot.ep.qp {
			// Not a connection onRequest set up; cannot happen.
			closeCM(cc, min(l.opts.Linger, disconnectWait))
			slot.release()
			continue
		}
		c := newConn(slot.ep, cc, &l.opts, &slot.peer)
		return c, nil
	}
}

// errSetup marks a failure to make a connection's resources.
var errSetup = errors.New("rsocket: accepting a connection")

// onRequest decides a connection request as rs_accept does: a peer whose
// private data is not rs_conn_data version 1 is refused (a REJ), and for
// the others the endpoint is made, its receives posted, and the reply
// carries this side's rs_conn_data.
func (l *Listener) onRequest(ctx context.Context, r *cm.Request) (*cm.Params, error) {
	slot, _ := ctx.Value(acceptKey{}).(*acceptSlot)
	if slot == nil {
		return nil, fmt.Errorf("%w: a request outside Accept", errSetup)
	}
	slot.release()
	peer, err := parseConnData(r.PrivateData)
	if err != nil {
		l.log.Debug("rsocket: refused", "from", r.Remote, "err", err)
		return nil, cm.Reject(nil)
	}
	o := l.opts
	o.IOMapSize = int(l.iomap.Load())
	ep, err := newEndpoint(l.dev, &o)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSetup, err)
	}
	slot.ep, slot.peer = ep, peer
	return &cm.Params{QP: ep.qp, PrivateData: ep.connData(l.opts.RecvQueue).marshal(), MinRNRTimer: minRNRTimer,
		ACKTimeout: l.opts.ACKTimeout, PathMTU: l.opts.PathMTU}, nil
}
