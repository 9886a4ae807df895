package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// Dialer connects to rsocket listeners with its Options; the zero value,
// and a nil *Dialer, use the defaults. It is plain data, read by each
// Dial, and may be used by several goroutines at once.
type Dialer struct {
	Options
	// Device is the device DialContext connects from (Dial takes its
	// device as an argument).
	Device verbs.Device
}

// Dial connects to an rsocket listener at addr (an IP address and an
// rdma_cm TCP port, as rconnect's sockaddr_in) from dev, the software
// device package cm connects through, with the default Options.
func Dial(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*Conn, error) {
	var d *Dialer
	return d.Dial(ctx, dev, addr)
}

// Dial connects to an rsocket listener at addr from dev, as rconnect
// does: it makes the QP and buffers, sends its rs_conn_data in the
// connection request and reads the listener's from the reply. ctx bounds
// the connection handshake only.
func (d *Dialer) Dial(ctx context.Context, dev verbs.Device, addr netip.AddrPort) (*Conn, error) {
	var o *Options
	if d != nil {
		o = &d.Options
	}
	c, err := dial(ctx, dev, addr, o)
	if err != nil {
		return nil, opError("dial", nil, &Addr{AddrPort: addr}, err)
	}
	return c, nil
}

var errNoDevice = errors.New("rsocket: no device (pass the roce device to connect from)")

func dial(ctx context.Context, dev verbs.Device, addr netip.AddrPort, o *Options) (*Conn, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if dev == nil {
		return nil, errNoDevice
	}
	ep, err := newEndpoint(dev, &opts)
	if err != nil {
		return nil, err
	}
	p := &cm.Params{QP: ep.qp, PrivateData: ep.connData(opts.RecvQueue).marshal(), MinRNRTimer: minRNRTimer,
		ACKTimeout: opts.ACKTimeout, PathMTU: opts.PathMTU}
	var cc *cm.Conn
	if opts.Agent != nil {
		cc, err = opts.Agent.Dial(ctx, addr, p)
	} else {
		cc, err = cm.Dial(ctx, dev, addr, p)
	}
	if err != nil {
		ep.close()
		return nil, err
	}
	peer, err := parseConnData(cc.PrivateData())
	if err != nil {
		closeCM(cc, min(opts.Linger, disconnectWait))
		ep.close()
		return nil, err
	}
	return newConn(ep, cc, &opts, &peer), nil
}

// closeCM disconnects a connection that will not be used, waiting for the
// peer's answer for at most d.
func closeCM(cc *cm.Conn, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	cc.CloseContext(ctx)
	cancel()
}

// DialContext connects to address from d.Device, so that a Dialer can
// stand in for net.Dialer (http.Transport.DialContext, and the like).
// network is "rsocket", or "tcp", "tcp4" or "tcp6" (rsockets live in
// rdma_cm's TCP port space); address is "host:port", where a host name is
// looked up with net.DefaultResolver and its first address of the
// device's IP version taken.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var dev verbs.Device
	if d != nil {
		dev = d.Device
	}
	addr, err := resolve(ctx, dev, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	c, err := d.Dial(ctx, dev, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// resolve turns a "host:port" address into an IP address and port of
// dev's IP version.
func resolve(ctx context.Context, dev verbs.Device, network, address string) (netip.AddrPort, error) {
	switch network {
	case "rsocket", "tcp", "tcp4", "tcp6":
	default:
		return netip.AddrPort{}, fmt.Errorf("rsocket: network %q: use \"rsocket\" or \"tcp\"", network)
	}
	if ap, err := netip.ParseAddrPort(address); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if dev == nil {
		return netip.AddrPort{}, errNoDevice
	}
	gid, err := dev.GID(0)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rsocket: the device's GID: %w", err)
	}
	want4 := verbs.AddrFromGID(gid).Is4()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.Is4() == want4 {
			return netip.AddrPortFrom(ip, uint16(pn)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("rsocket: %s has no address of the device's IP version", host)
}
