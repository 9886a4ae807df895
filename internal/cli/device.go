package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/transport/udp"
	"github.com/goroce/goroce/verbs"
)

// DeviceFlags are the flags of every command that opens a RoCE device, and
// the one way those commands open it (Open, or OpenHW for libibverbs).
// They are not safe for concurrent use.
type DeviceFlags struct {
	Transport string        // --transport: udp, afpacket or mem
	Bind      string        // --bind: the local address, the source of every packet and the GID
	Dev       string        // --dev: the afpacket transport's interface
	Port      uint          // --roce-port: the UDP port of RoCEv2, local and peer
	Pcap      string        // --pcap: a file that records every packet
	Trace     bool          // -v, --trace: narrate each verb, work request and completion
	BusyPoll  time.Duration // --busy-poll
	NoOffload bool          // --no-offload: no UDP GSO/GRO
	Paths     int           // --paths: the udp link's receive and send paths
	CC        string        // --cc: the congestion control mode (package congestion)
	LineRate  string        // --line-rate: the link's rate, for --cc's pacing
	CCTarget  time.Duration // --cc-target: the delay window's target

	// Net is the network of --transport mem, set by programs (and
	// tests) that run both ends in one process.
	Net *mem.Network
	// Logger, when set, receives the engine's own log (rping -d).
	Logger *slog.Logger
}

// Register declares the flags on fs, with their defaults.
func (d *DeviceFlags) Register(fs *FlagSet) {
	fs.String(&d.Transport, "udp", "how RoCEv2 packets travel: udp (no privileges), afpacket (raw frames, CAP_NET_RAW) or mem (in-process)", "transport")
	fs.String(&d.Bind, "", "local IP `address`: the source of every packet and the GID", "bind")
	fs.String(&d.Dev, "", "network `interface` of the afpacket transport", "dev")
	fs.Uint(&d.Port, bth.UDPPort, "local and peer UDP `port` for RoCEv2", "roce-port")
	fs.String(&d.Pcap, "", "write every packet sent and received to this pcap `file`", "pcap")
	fs.Bool(&d.Trace, false, "print each step: verbs, work requests, completions", "v", "trace")
	fs.Duration(&d.BusyPoll, 0, "spin this long on an empty socket before sleeping (lower latency)", "busy-poll")
	fs.Bool(&d.NoOffload, false, "do not use UDP GSO/GRO", "no-offload")
	fs.String(&d.CC, "dcqcn", "congestion `mode`: dcqcn (ECN, CNPs and DCQCN's rate where the path marks), auto (dcqcn and a "+
		"delay-based window, for shared paths where nothing marks), delay, or off", "cc")
	fs.Duration(&d.CCTarget, 0, "the delay window's queueing target (default 100µs; raise it past the RTT's noise on a loaded host)", "cc-target")
	fs.String(&d.LineRate, "", "the link's `rate` (1g, 10g, 100m: bits per second), which paced QPs never pass (default unknown)", "line-rate")
	fs.Int(&d.Paths, 1, "receive and send `paths` of the udp transport (a socket pair and goroutine each; each QP keeps to one), for machines with cores to spare", "paths")
}

// Config turns the flags into the configuration of a device at --bind, or
// at def when --bind is not set (def may be empty: no address yet, which
// the link's defaults fill). Bad values are *UsageError.
func (d *DeviceFlags) Config(def string) (*roce.Config, error) {
	switch d.Transport {
	case "udp", "afpacket", "mem":
	default:
		return nil, Usagef("--transport must be udp, afpacket or mem, not %q", d.Transport)
	}
	if d.Port == 0 || d.Port > 65535 {
		return nil, Usagef("--roce-port must be 1-65535")
	}
	if d.Paths < 0 || d.Paths > udp.MaxPaths { // 0: as 1, for callers that leave it unset
		return nil, Usagef("--paths must be 1-%d", udp.MaxPaths)
	}
	if d.Paths > 1 && d.Transport != "udp" {
		return nil, Usagef("--paths is for --transport udp; %s has one receive path", d.Transport)
	}
	if d.Transport == "mem" && d.Net == nil {
		return nil, Usagef("--transport mem joins ends in one process only (roce demo); between processes use udp or afpacket")
	}
	cc, err := d.congestion()
	if err != nil {
		return nil, err
	}
	addr := d.Bind
	if addr == "" {
		addr = def
	}
	var a netip.Addr
	if addr != "" {
		var err error
		if a, err = ResolveAddr(addr); err != nil {
			return nil, Usagef("--bind: %w", err)
		}
	}
	return &roce.Config{Link: d.Link(a), Pcap: d.Pcap, BusyPoll: d.BusyPoll, Logger: d.Logger, Congestion: cc}, nil
}

// congestion returns the congestion control of --cc and --line-rate.
func (d *DeviceFlags) congestion() (*congestion.Config, error) {
	var c congestion.Config
	if d.CC != "" {
		m, err := congestion.ParseMode(d.CC)
		if err != nil {
			return nil, Usagef("--cc must be auto, dcqcn, delay or off, not %q", d.CC)
		}
		c.Mode = m
	}
	if d.CCTarget < 0 {
		return nil, Usagef("--cc-target must be positive, not %v", d.CCTarget)
	}
	c.Delay.Target = d.CCTarget
	if d.LineRate != "" {
		r, err := ParseRate(d.LineRate)
		if err != nil {
			return nil, Usagef("--line-rate: %w", err)
		}
		c.LineRate = r
	}
	return &c, nil
}

// ParseRate reads a rate in bits per second: a number with an optional k,
// m, g or t suffix (10g, 1.5G, 100m, 1e9).
func ParseRate(s string) (float64, error) {
	if s == "" {
		return 0, fmt.Errorf("an empty rate: want a positive number of bits per second with an optional k, m, g or t (10g)")
	}
	mult := 1.0
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1e3
	case 'm', 'M':
		mult = 1e6
	case 'g', 'G':
		mult = 1e9
	case 't', 'T':
		mult = 1e12
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v*mult > 1e13 {
		return 0, fmt.Errorf("%q is not a rate: want a positive number of bits per second with an optional k, m, g or t (10g)", s)
	}
	return v * mult, nil
}

// Link returns the link of --transport with the local address a (the
// zero Addr: the link's default), --roce-port on both sides, and --dev or
// --no-offload where they apply. It expects a valid --transport (Config
// checks it); any other is the udp link.
func (d *DeviceFlags) Link(a netip.Addr) roce.Link {
	p := uint16(d.Port)
	switch d.Transport {
	case "afpacket":
		return &roce.AFPacket{Interface: d.Dev, Addr: a, Port: p, PeerPort: p}
	case "mem":
		return &roce.Mem{Network: d.Net, Addr: a}
	}
	return &roce.UDP{Addr: a, Port: p, PeerPort: p, NoOffload: d.NoOffload, Paths: d.Paths}
}

// Open opens the software RoCE device cfg describes (from Config), traced
// to log when --trace is on. Processes on one host need an address each:
// a client's udp device (client true) without --bind whose address would
// be an IPv4 loopback one takes the first free one of 127.0.0.2 to
// 127.0.0.63 instead (the whole of 127.0.0.0/8 is loopback), leaving
// 127.0.0.1 to servers; the device's Addr says which it took. Errors say
// what to do about a port in use or an address not of this host.
func (d *DeviceFlags) Open(cfg *roce.Config, client bool, log *slog.Logger) (*roce.Device, error) {
	if cfg == nil {
		return nil, errors.New("no device configuration (DeviceFlags.Config makes one)")
	}
	c := *cfg
	if d.Trace {
		c.Trace = log
	}
	var dev *roce.Device
	var err error
	if u, ok := c.Link.(*roce.UDP); ok && u != nil && client && d.Bind == "" && u.Addr.Is4() && u.Addr.IsLoopback() {
		dev, err = openLoopbackClient(&c, *u)
	} else {
		dev, err = roce.Open(&c)
	}
	if err != nil {
		return nil, explainOpen(&c, err)
	}
	return dev, nil
}

// openLoopbackClient opens cfg's device with the link u at the first free
// address of 127.0.0.2 to 127.0.0.63 other than u.Addr (the server's).
func openLoopbackClient(cfg *roce.Config, u roce.UDP) (*roce.Device, error) {
	taken := u.Addr
	var err error
	for a := netip.MustParseAddr("127.0.0.2"); a.As4()[3] < 64; a = a.Next() {
		if a == taken {
			continue
		}
		u.Addr = a
		cfg.Link = &u
		var dev *roce.Device
		if dev, err = roce.Open(cfg); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return dev, err
		}
	}
	return nil, err
}

// OpenHW opens the libibverbs device name (the first when empty), with the
// GID of addr or the table index gidIndex (above 0), traced to log when
// --trace is on. A build without -tags hwverbs says how to get one.
func (d *DeviceFlags) OpenHW(name string, gidIndex int, addr netip.Addr, log *slog.Logger) (verbs.Device, *hwverbs.Device, error) {
	if !hwverbs.Built {
		return nil, nil, fmt.Errorf("--backend hw: %w", hwverbs.ErrNotBuilt)
	}
	cfg := &hwverbs.Config{GIDAddr: addr}
	if gidIndex > 0 {
		cfg.GIDIndex = gidIndex
	}
	hw, err := hwverbs.Open(name, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--backend hw: %w", err)
	}
	if d.Trace {
		return roce.Trace(hw, log), hw, nil
	}
	return hw, hw, nil
}

// explainOpen adds what to do to the errors users meet opening a device.
func explainOpen(cfg *roce.Config, err error) error {
	var addr netip.Addr
	port := uint16(bth.UDPPort)
	switch l := cfg.Link.(type) {
	case *roce.UDP:
		if l != nil {
			addr, port = l.Addr, cmp.Or(l.Port, port)
		}
	case *roce.AFPacket:
		if l != nil {
			addr, port = l.Addr, cmp.Or(l.Port, port)
		}
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w (another RoCE stack or goroce holds UDP port %d on %v; try --roce-port or another --bind address)",
			err, port, addr)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%w (%v is not an address of this host; see --bind)", err, addr)
	}
	return err
}

// Linger keeps a software device answering after a run that ends without
// a closing exchange (the ping-pongs, ib_write_lat): the peer may still
// wait for the ACK of its last request and send it again. It returns once
// the link has been quiet for four of the tools' transport timeouts
// (timeout 14: 67 ms), and after eight such periods when traffic goes on.
// A libibverbs device (soft nil) closes at once, as the real tools do.
func Linger(ctx context.Context, soft *roce.Device) {
	if soft == nil || ctx == nil {
		return
	}
	const quiet = 4 * 4096 * time.Nanosecond << 14
	ctx, cancel := context.WithTimeout(ctx, 8*quiet)
	defer cancel()
	soft.Linger(ctx, quiet)
}

// ResolveAddr parses an IP address or looks a host name up.
func ResolveAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address or a known host name", s)
	}
	return ips[0].Unmap(), nil
}

// RouteSource returns the local address the kernel would send from to
// reach dst (connecting a UDP socket picks a route and sends nothing).
func RouteSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// RouteSourceOf is RouteSource for a host name or address.
func RouteSourceOf(host string) (netip.Addr, error) {
	a, err := ResolveAddr(host)
	if err != nil {
		return netip.Addr{}, err
	}
	return RouteSource(a)
}

// ListenTCP listens for a tool's out-of-band TCP connection on every
// address, as the C tools do (getaddrinfo with AI_PASSIVE).
func ListenTCP(port int) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	return ln.(*net.TCPListener), nil
}

// LocalAddr returns the local IP address of a connection: the address the
// peer reached this host at (the zero Addr for a connection that is not
// TCP).
func LocalAddr(c net.Conn) netip.Addr {
	if c == nil {
		return netip.Addr{}
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// SyncMR orders the engine's writes into mr before the calling goroutine
// reads it, and the caller's writes before the engine's reads: the
// completion that says the data is there came through the kernel's
// sockets, which Go's memory model does not see. A region of another
// backend (a NIC writes by DMA) needs nothing.
func SyncMR(mr verbs.MR) {
	if s, ok := mr.(interface{ Sync() }); ok {
		s.Sync()
	}
}

// ToolDevice is how the tools that mirror librdmacm's programs (rping,
// rstream, rcopy) open their device: goroce's flags next to the
// program's own, in its flag table, and the path MTU to ask for. It is
// not safe for concurrent use.
type ToolDevice struct {
	Transport string // --transport: udp or afpacket (mem where a test joins both ends)
	Dev       string // --dev: the afpacket transport's interface
	Pcap      string // --pcap
	Port      int    // --roce-port
	MTU       int    // --mtu: the largest path MTU to ask for; 0 is the device's
}

// Register declares --transport, --dev, --pcap, --roce-port and --mtu on
// fs, with their defaults.
func (t *ToolDevice) Register(fs *FlagSet) {
	fs.String(&t.Transport, "udp", "udp (default; no privileges) or afpacket (raw frames, CAP_NET_RAW)", "transport").Arg("T")
	fs.String(&t.Dev, "", "network interface of the afpacket transport", "dev").Arg("IFACE")
	fs.String(&t.Pcap, "", "record every RoCE packet sent and received", "pcap").Arg("FILE")
	fs.Int(&t.Port, bth.UDPPort, "UDP port of RoCEv2 on both sides (default 4791)", "roce-port").Arg("N")
	fs.Int(&t.MTU, 0, "largest path MTU to ask for (default: the device's)", "mtu").Arg("BYTES")
}

// Check reports a bad value of the flags as a *UsageError.
func (t *ToolDevice) Check() error {
	switch {
	case t.Transport != "udp" && t.Transport != "afpacket" && t.Transport != "mem":
		return Usagef("--transport %q: want udp or afpacket", t.Transport)
	case t.Port < 1 || t.Port > 65535:
		return Usagef("--roce-port %d: want 1 to 65535", t.Port)
	case t.MTU != 0:
		if _, ok := bth.MTUFromBytes(t.MTU); !ok {
			return Usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", t.MTU)
		}
	}
	return nil
}

// Flags returns the DeviceFlags that open the device, at bind.
func (t *ToolDevice) Flags(bind string) DeviceFlags {
	return DeviceFlags{Transport: t.Transport, Bind: bind, Dev: t.Dev, Port: uint(t.Port), Pcap: t.Pcap}
}
