package roce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/afpacket"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/transport/udp"
	"github.com/goroce/goroce/verbs"
)

// Config says how Open builds a software device. A nil *Config means a
// UDP transport on 127.0.0.1:4791. Open reads it, never writes it.
type Config struct {
	// Transport is "udp" (the default), "afpacket" or "mem".
	Transport string
	// Addr is the local IP address: the source of every packet and the
	// device's GID. Default 127.0.0.1 (udp), or the interface's first
	// address (afpacket).
	Addr netip.Addr
	// Port is the local UDP port, and PeerPort the one peers listen on
	// (both default 4791, the RoCEv2 port).
	Port, PeerPort uint16
	// Interface is the network interface of the afpacket transport;
	// default, the one that holds Addr.
	Interface string
	// Network is the in-memory network of the mem transport.
	Network *mem.Network
	// Link, when set, is used as the transport and the fields above are
	// ignored.
	Link transport.Transport
	// Pcap names a file to record every packet sent and received in.
	Pcap string
	// BusyPoll, when positive, puts the device in busy-poll mode: a
	// CQ.Poll that finds the CQ empty receives from the link on the
	// caller's goroutine first, so a program that spins on its CQ drives
	// the receive path itself (the lowest latency, for a core); while no
	// program polls, the udp transport's receive loop spins this long on
	// an empty socket before it sleeps.
	BusyPoll time.Duration
	// NoOffload turns UDP GSO and GRO off.
	NoOffload bool
	// TOS is the DSCP/ECN byte of afpacket frames.
	TOS uint8
	// Faults, when set, are applied to what the device sends (seeded by
	// FaultSeed), to test reliability over a real link.
	Faults    transport.Faults
	FaultSeed uint64
	// Logger receives the engine's debug records; nil discards.
	Logger *slog.Logger
	// Clock runs the engine's timers; nil is the system clock.
	Clock clock.Clock
	// MaxUnackedPSNs bounds the packets in flight per QP (0: the engine's
	// default).
	MaxUnackedPSNs int
}

// SoftDevice is goroce's software RDMA device, as Open returns it. It
// implements Device and is safe for concurrent use.
//
// Its own methods (Close, TransportStats, FaultStats) on a nil
// *SoftDevice return ErrNil or zero values; those it promotes from
// *qp.Device need the SoftDevice itself, as Go's embedding does (on a
// SoftDevice Open did not make, they return ErrNil).
type SoftDevice struct {
	*qp.Device
	link   transport.Transport // the transport under the wrappers
	pcap   *os.File
	pw     *pcapfile.Writer
	sniff  *transport.Sniffer
	faulty *transport.Faulty
}

var _ verbs.Device = (*SoftDevice)(nil)

// ErrUnknownTransport means Config.Transport named no transport.
var ErrUnknownTransport = errors.New("roce: unknown transport (want udp, afpacket or mem)")

// Open returns a software RDMA device as cfg describes. Until a program
// makes QP 1 (cm.NewAgent, cm.Listen, cm.Dial), the device answers
// connection requests itself, as the kernel's CM does where nothing
// listens: a REQ with a REJ "invalid service ID" at once (the peer's
// rdma_connect fails with ECONNREFUSED, its cm.Dial with
// cm.ErrConnRefused), a DREQ with a DREP, a SIDR_REQ with "service ID not
// supported".
func Open(cfg *Config) (*SoftDevice, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	t := c.Link
	if t == nil {
		var err error
		if t, err = c.transport(); err != nil {
			return nil, err
		}
	}
	sd := &SoftDevice{link: t}
	if c.Faults.Any() {
		sd.faulty = transport.NewFaulty(t, c.Faults, c.FaultSeed)
		t = sd.faulty
	}
	if c.Pcap != "" {
		f, err := os.Create(c.Pcap)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("roce: pcap: %w", err)
		}
		w, err := pcapfile.NewWriter(f, pcapfile.LinkTypeRaw)
		if err != nil {
			f.Close()
			t.Close()
			return nil, fmt.Errorf("roce: pcap: %w", err)
		}
		sd.pcap, sd.pw = f, w
		sd.sniff = transport.Sniff(t, w)
		t = sd.sniff
	}
	t, rej := rejectNoAgent(t, c.Logger)
	d, err := qp.New(t, &qp.Config{Clock: c.Clock, Logger: c.Logger, MaxUnackedPSNs: c.MaxUnackedPSNs,
		BusyPoll: c.BusyPoll > 0})
	if err != nil {
		t.Close()
		sd.closePcap()
		return nil, err
	}
	rej.serve(d)
	sd.Device = d
	return sd, nil
}

func (c *Config) transport() (transport.Transport, error) {
	switch c.Transport {
	case "", "udp":
		addr := c.Addr
		if !addr.IsValid() {
			addr = netip.MustParseAddr("127.0.0.1")
		}
		port := c.Port
		if port == 0 {
			port = bth.UDPPort
		}
		uc := &udp.Config{Addr: netip.AddrPortFrom(addr, port), PeerPort: c.PeerPort, Logger: c.Logger, BusyPoll: c.BusyPoll}
		if c.NoOffload {
			uc.GSO, uc.GRO = udp.OffloadOff, udp.OffloadOff
		}
		return udp.New(uc)
	case "afpacket":
		ifname, addr := c.Interface, c.Addr
		if ifname == "" || !addr.IsValid() {
			var err error
			if ifname, addr, err = findInterface(ifname, addr); err != nil {
				return nil, err
			}
		}
		return afpacket.New(&afpacket.Config{Interface: ifname, Addr: addr, Port: c.Port, PeerPort: c.PeerPort,
			TOS: c.TOS, Logger: c.Logger})
	case "mem":
		if c.Network == nil {
			return nil, fmt.Errorf("roce: %w: the mem transport needs Config.Network: set it to a mem.NewNetwork "+
				"that the devices share", verbs.ErrNil)
		}
		addr := c.Addr
		if !addr.IsValid() {
			return nil, fmt.Errorf("roce: %w: the mem transport needs Config.Addr, the device's address on the network",
				verbs.ErrInvalidAttr)
		}
		return c.Network.Endpoint(addr)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTransport, c.Transport)
}

// findInterface completes an (interface, address) pair: the interface
// that holds addr, or the first IP address of the named interface.
func findInterface(ifname string, addr netip.Addr) (string, netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", addr, fmt.Errorf("roce: %w", err)
	}
	for _, ifi := range ifs {
		if ifname != "" && ifi.Name != ifname {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(n.IP)
			ip = ip.Unmap()
			if addr.IsValid() && ip == addr || !addr.IsValid() && !ip.IsLinkLocalUnicast() {
				return ifi.Name, ip, nil
			}
		}
	}
	switch {
	case ifname == "" && !addr.IsValid():
		return "", addr, fmt.Errorf("roce: %w: afpacket needs Config.Interface or Config.Addr (the command's --dev or --bind)",
			verbs.ErrInvalidAttr)
	case ifname == "":
		return "", addr, fmt.Errorf("roce: %w: no interface holds %v: set Config.Interface, or an Addr of this host",
			verbs.ErrInvalidAttr, addr)
	}
	return "", addr, fmt.Errorf("roce: %w: interface %q has no usable IP address: give it one, or set Config.Addr",
		verbs.ErrInvalidAttr, ifname)
}

// errNilSoftDevice is what the methods of a nil SoftDevice return.
var errNilSoftDevice = fmt.Errorf("roce: %w: nil *SoftDevice: use one from Open", verbs.ErrNil)

// Close closes the device, its transport and its capture file.
func (d *SoftDevice) Close() error {
	if d == nil {
		return errNilSoftDevice
	}
	err := d.Device.Close()
	if perr := d.closePcap(); err == nil {
		err = perr
	}
	return err
}

func (d *SoftDevice) closePcap() error {
	if d.pcap == nil {
		return nil
	}
	err := d.pw.Flush()
	if cerr := d.pcap.Close(); err == nil {
		err = cerr
	}
	d.pcap = nil
	return err
}

// TransportStats returns the transport's counters: packets, bytes, ICRC
// errors.
func (d *SoftDevice) TransportStats() transport.Stats {
	if d == nil || d.Device.Transport() == nil {
		return transport.Stats{}
	}
	return d.Device.Transport().Stats()
}

// FaultStats returns what Config.Faults did, when set.
func (d *SoftDevice) FaultStats() transport.FaultStats {
	if d == nil || d.faulty == nil {
		return transport.FaultStats{}
	}
	return d.faulty.FaultStats()
}
