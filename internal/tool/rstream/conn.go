package rstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/rsocket"
)

// runner is one run of roce rstream: its device (none with -T s), its
// listener when it serves, and the state of the verify pattern, which
// runs over every connection of the run as rstream's does. It is used by
// one goroutine.
type runner struct {
	o      *options
	env    *cli.Env
	server netip.AddrPort // the client's server; the server's listening address
	dev    *roce.Device
	ln     net.Listener
	buf    []byte
	sent   byte // the next byte of the verify pattern to send
	recvd  byte // the next byte of the verify pattern expected
	// verified counts the bytes received and checked, over the run.
	verified int64
	// countOf, when set, replaces sizeToCount in the series (tests).
	countOf func(size int) int
}

// optimization is what rstream tunes a connection for: its series' latency
// tests (inline writes up to -i), its bandwidth tests (no inline writes),
// or nothing in particular (a custom test: the rsocket default).
type optimization int

const (
	optNone optimization = iota
	optLatency
	optBandwidth
)

// newRunner resolves the addresses, opens the device (unless -T s) and,
// for the server, listens.
func newRunner(o *options, env *cli.Env) (*runner, error) {
	r := &runner{o: o, env: env}
	if err := r.addresses(); err != nil {
		return nil, err
	}
	if !o.tests.sockets {
		if err := r.openDevice(); err != nil {
			return nil, err
		}
	}
	size := o.sizeCustom
	if !o.custom {
		size = seriesSizes[len(seriesSizes)-1].size
	}
	r.buf = make([]byte, max(size, syncSize))
	if o.server == "" {
		if err := r.listen(); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// addresses resolves -s (the client's server) and -b.
func (r *runner) addresses() error {
	o := r.o
	port := uint16(o.port)
	if o.server == "" {
		a := netip.IPv4Unspecified()
		if o.bind != "" {
			var err error
			if a, err = r.resolve(o.bind); err != nil {
				return fmt.Errorf("-b: %w", err)
			}
		} else if !o.tests.sockets && o.dev.Transport != "afpacket" {
			// A software device has one address; afpacket takes the
			// interface's.
			return cli.Usagef("the server needs the address to serve on: -b ADDR")
		}
		r.server = netip.AddrPortFrom(a, port)
		return nil
	}
	a, err := r.resolve(o.server)
	if err != nil {
		return fmt.Errorf("-s: %w", err)
	}
	r.server = netip.AddrPortFrom(a, port)
	return nil
}

// resolve parses an address, or looks a name up unless -f ip says the
// address is numeric.
func (r *runner) resolve(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	if len(r.o.format) >= 2 && (r.o.format[:2] == "ip" || r.o.format[:2] == "IP") {
		return netip.Addr{}, fmt.Errorf("%q is not a numeric address (-f %s)", s, r.o.format)
	}
	return cli.ResolveAddr(s)
}

// openDevice opens the RoCE device at -b, or for a client at the address
// that routes to the server.
func (r *runner) openDevice() error {
	var err error
	r.dev, err = openDevice(&r.o.dev, r.o.bind, r.o.server != "", r.server.Addr(), r.o.busyPoll, r.env)
	return err
}

// openDevice opens the RoCE device of a tool's flags at bind; without
// it, a server's is at its address (unless unspecified) and a client's
// at the address that routes to server.
func openDevice(td *cli.ToolDevice, bind string, client bool, server netip.Addr, busyPoll time.Duration, env *cli.Env) (*roce.Device, error) {
	def := ""
	switch {
	case bind != "":
	case !client:
		if !server.IsUnspecified() {
			def = server.String()
		}
	default:
		if a, err := cli.RouteSource(server); err == nil {
			def = a.String()
		}
	}
	dev := td.Flags(bind)
	dev.BusyPoll, dev.Net = busyPoll, env.MemNet
	cfg, err := dev.Config(def)
	if err != nil {
		return nil, err
	}
	d, err := dev.Open(cfg, client, nil)
	if err != nil {
		return nil, fmt.Errorf("open the RoCE device: %w", err)
	}
	return d, nil
}

// rsocketOptions are the options of a connection tuned for opt, as
// rstream and riostream set them: -B doubled (as setsockopt doubles
// SO_SNDBUF and SO_RCVBUF), the inline size of the optimization,
// keepalives only with -k, and for riostream an iomap table of one.
func (r *runner) rsocketOptions(opt optimization) rsocket.Options {
	o := r.o
	buf := 2 * defaultSockBuf
	if o.bufSize > 0 {
		buf = max(2*o.bufSize, 4096)
	}
	ro := rsocket.Options{SendBuffer: buf, RecvBuffer: buf, KeepAlive: -1, Spin: o.spin}
	if o.io {
		ro.IOMapSize = 1 // riostream's RDMA_IOMAPSIZE: the peer maps one buffer
	}
	switch opt {
	case optLatency:
		ro.Inline = o.inline
		if o.inline == 0 {
			ro.Inline = -1
		}
	case optBandwidth:
		ro.Inline = -1
	}
	if o.keepalive > 0 {
		ro.KeepAlive = time.Duration(o.keepalive) * time.Second
	}
	ro.PathMTU, _ = bth.MTUFromBytes(o.dev.MTU)
	return ro
}

// listen listens on the server's address: rdma_cm's TCP port space on
// the device, or with -T s a TCP port. The listener's options are those
// of the latency series (a connection of the bandwidth series differs
// only in using no inline writes, which its peer cannot see).
func (r *runner) listen() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.o.timeout)
	defer cancel()
	var err error
	if r.o.tests.sockets {
		r.ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", r.server.String())
	} else {
		opt := optLatency
		if r.o.custom {
			opt = optNone
		}
		lc := &rsocket.ListenConfig{Options: r.rsocketOptions(opt), Backlog: 1}
		r.ln, err = lc.Listen(ctx, r.dev, r.server)
	}
	if err != nil {
		return fmt.Errorf("rlisten: %w", err)
	}
	return nil
}

// connect makes the next connection: the client dials, the server
// accepts, within --timeout. It prints the keepalive lines rstream
// prints when -k sets keepalives: once per connection on the client,
// twice on the server (for the listening and the accepted socket).
func (r *runner) connect(ctx context.Context, opt optimization) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.timeout)
	defer cancel()
	var c net.Conn
	var err error
	if r.o.server == "" {
		c, err = r.accept(ctx)
	} else {
		c, err = r.dial(ctx, opt)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (no connection within --timeout %v)", err, r.o.timeout)
		}
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		buf := defaultSockBuf
		if r.o.bufSize > 0 {
			buf = r.o.bufSize
		}
		tc.SetReadBuffer(buf)
		tc.SetWriteBuffer(buf)
		if r.o.keepalive > 0 {
			tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: time.Duration(r.o.keepalive) * time.Second})
		}
	}
	if r.o.keepalive > 0 {
		times := 1
		if r.o.server == "" {
			times = 2
		}
		for range times {
			fmt.Fprintf(r.env.Stdout, "Keepalive: ON\n  time: %d\n", r.o.keepalive)
		}
	}
	return c, nil
}

func (r *runner) accept(ctx context.Context) (net.Conn, error) {
	if l, ok := r.ln.(*rsocket.Listener); ok {
		c, err := l.AcceptContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("raccept: %w", err)
		}
		return c, nil
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := r.ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, fmt.Errorf("accept: %w", a.err)
		}
		return a.c, nil
	case <-ctx.Done():
		r.ln.Close() // the accept returns; the run ends
		if a := <-ch; a.c != nil {
			a.c.Close()
		}
		return nil, fmt.Errorf("accept: %w", ctx.Err())
	}
}

func (r *runner) dial(ctx context.Context, opt optimization) (net.Conn, error) {
	if r.o.tests.sockets {
		var d net.Dialer
		if r.o.bind != "" {
			a, err := r.resolve(r.o.bind)
			if err != nil {
				return nil, fmt.Errorf("-b: %w", err)
			}
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
		}
		c, err := d.DialContext(ctx, "tcp", r.server.String())
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		return c, nil
	}
	d := &rsocket.Dialer{Options: r.rsocketOptions(opt)}
	c, err := d.Dial(ctx, r.dev, r.server)
	if err != nil {
		return nil, fmt.Errorf("rconnect: %w", err)
	}
	return c, nil
}

// close ends what newRunner opened.
func (r *runner) close() {
	if r.ln != nil {
		r.ln.Close()
	}
	if r.dev != nil {
		r.dev.Close()
	}
}
