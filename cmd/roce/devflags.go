package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
)

// devFlags are the flags every command that opens an RDMA device shares.
type devFlags struct {
	transport string
	bind      string
	dev       string
	port      uint
	pcap      string
	trace     bool
	busyPoll  time.Duration
	noOffload bool
	// memNet is the network of --transport mem; set only by programs
	// (and tests) that run both ends in one process.
	memNet *mem.Network
}

func (d *devFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.transport, "transport", "udp", "how RoCEv2 packets travel: udp (no privileges), afpacket (raw frames, CAP_NET_RAW) or mem (in-process)")
	fs.StringVar(&d.bind, "bind", "", "local IP `address`: the source of every packet and the GID")
	fs.StringVar(&d.dev, "dev", "", "network `interface` of the afpacket transport")
	fs.UintVar(&d.port, "roce-port", 4791, "local and peer UDP `port` for RoCEv2")
	fs.StringVar(&d.pcap, "pcap", "", "write every packet sent and received to this pcap `file`")
	fs.BoolVar(&d.trace, "v", false, "print each step: verbs, work requests, completions (same as --trace)")
	fs.BoolVar(&d.trace, "trace", false, "print each step: verbs, work requests, completions")
	fs.DurationVar(&d.busyPoll, "busy-poll", 0, "spin this long on an empty socket before sleeping (lower latency)")
	fs.BoolVar(&d.noOffload, "no-offload", false, "do not use UDP GSO/GRO")
}

// config turns the flags into a roce.Config for a device at addr (the
// --bind address, or def when unset).
func (d *devFlags) config(def string) (*roce.Config, error) {
	switch d.transport {
	case "udp", "afpacket", "mem":
	default:
		return nil, usageErr("--transport must be udp, afpacket or mem, not %q", d.transport)
	}
	if d.port == 0 || d.port > 65535 {
		return nil, usageErr("--roce-port must be 1-65535")
	}
	c := &roce.Config{Transport: d.transport, Interface: d.dev, Port: uint16(d.port), PeerPort: uint16(d.port),
		Pcap: d.pcap, BusyPoll: d.busyPoll, NoOffload: d.noOffload, Network: d.memNet}
	if d.transport == "mem" && d.memNet == nil {
		return nil, usageErr("--transport mem joins ends in one process only (roce demo); between processes use udp or afpacket")
	}
	addr := d.bind
	if addr == "" {
		addr = def
	}
	if addr != "" {
		a, err := resolveAddr(addr)
		if err != nil {
			return nil, usageErr("--bind: %v", err)
		}
		c.Addr = a
	}
	return c, nil
}

// resolveAddr parses an IP address or looks a host name up.
func resolveAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address or a known host name", s)
	}
	return ips[0].Unmap(), nil
}

// routeSource returns the local address the kernel would send from to
// reach dst (connecting a UDP socket picks a route and sends nothing).
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// openClientAt opens a client's device with open(addr). Processes on one
// host need an address each: a udp client without --bind whose address
// would be an IPv4 loopback one (the server's, or 127.0.0.1) takes the
// first free one of 127.0.0.2 to 127.0.0.63 other than addr instead (the
// whole of 127.0.0.0/8 is loopback), leaving 127.0.0.1 to servers.
func openClientAt[T any](transport, bind string, addr netip.Addr, open func(netip.Addr) (T, error)) (T, error) {
	if transport != "udp" || bind != "" || !addr.Is4() || !addr.IsLoopback() {
		return open(addr)
	}
	var v T
	var err error
	for a := netip.MustParseAddr("127.0.0.2"); a.As4()[3] < 64; a = a.Next() {
		if a == addr {
			continue
		}
		if v, err = open(a); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return v, err
}

// open opens a device as cfg says, traced to log when --trace is on.
func (d *devFlags) open(cfg *roce.Config, log *slog.Logger) (roce.Device, error) {
	dev, err := roce.Open(cfg)
	if err != nil {
		return nil, explainOpen(cfg, err)
	}
	if d.trace {
		return roce.Trace(dev, log), nil
	}
	return dev, nil
}

// explainOpen adds what to do to the errors users meet opening a device.
func explainOpen(cfg *roce.Config, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w (another RoCE stack or goroce holds UDP port %d on %v; try --roce-port or another --bind address)",
			err, cfg.Port, cfg.Addr)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%w (%v is not an address of this host; see --bind)", err, cfg.Addr)
	}
	return err
}

// usageError is a bad flag or argument: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCode reports err on stderr with the command's name and returns the
// exit code for it.
func exitCode(stderr io.Writer, cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "roce %s: %v\nRun 'roce help %s' for usage.\n", cmd, err, cmd)
		return exitUsage
	}
	fmt.Fprintf(stderr, "roce %s: %v\n", cmd, err)
	return exitFailure
}

// parseFlags parses args into fs, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	return nil
}

// printDefaults writes the flags of fs to w.
func printDefaults(fs *flag.FlagSet, w io.Writer) {
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// stepHandler is a slog.Handler that prints records as the minimal RDMA
// sample's logs look: [time #step who] KIND  message, numbering every
// record it prints. Control-path steps are SLOW, data-path steps DATA,
// details INFO.
type stepHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	step  *atomic.Uint64
	attrs []slog.Attr
}

func newStepLogger(w io.Writer) *slog.Logger {
	return slog.New(&stepHandler{mu: new(sync.Mutex), w: w, step: new(atomic.Uint64)})
}

func (h *stepHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *stepHandler) Handle(_ context.Context, r slog.Record) error {
	kind, who := "INFO", ""
	var extra []string
	each := func(a slog.Attr) bool {
		switch a.Key {
		case "kind":
			kind = a.Value.String()
		case "step":
		case "who":
			who = " " + a.Value.String()
		default:
			extra = append(extra, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		each(a)
	}
	r.Attrs(each)
	msg := r.Message
	if len(extra) > 0 {
		msg += " " + strings.Join(extra, " ")
	}
	n := h.step.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintf(h.w, "[%s #%04d%s] %-5s %s\n", r.Time.Format("15:04:05.000"), n, who, kind, msg)
	return err
}

func (h *stepHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *stepHandler) WithGroup(string) slog.Handler { return h }

// step logs one of a command's own steps through log.
func step(log *slog.Logger, kind, format string, args ...any) {
	if log != nil {
		log.Info(fmt.Sprintf(format, args...), "kind", kind)
	}
}

// newFlagSet returns a flag set that reports errors to its caller.
func newFlagSet(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }
