package roce

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/afpacket"
	"github.com/goroce/goroce/transport/udp"
	"github.com/goroce/goroce/verbs"
)

// Open returns a software RDMA device as cfg describes (nil: the
// defaults), traced when cfg.Trace is set. Until a program makes QP 1
// (cm.NewAgent, cm.Listen, cm.Dial), the device answers connection
// requests itself, as the kernel's CM does where nothing listens: a REQ
// with a REJ "invalid service ID" at once (the peer's rdma_connect fails
// with ECONNREFUSED, its cm.Dial with cm.ErrConnRefused), a DREQ with a
// DREP, a SIDR_REQ with "service ID not supported".
func Open(cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	t, err := c.link()
	if err != nil {
		return nil, err
	}
	var gids []netip.Addr
	if m, ok := t.(*transport.Multi); ok {
		gids = m.LocalAddrs()
	}
	dc := &device{link: t}
	// The capture sits on the link, under the faults: it records what
	// went on the wire (no dropped packet, a duplicate twice, reordered
	// ones in their new order), each with the headers and ICRC the link
	// sent it with.
	if c.Pcap != "" {
		if t, err = dc.capture(t, c.Pcap); err != nil {
			return nil, err
		}
	}
	if c.Faults.Any() {
		dc.faulty = transport.NewFaulty(t, c.Faults, c.FaultSeed)
		t = dc.faulty
	}
	t, rej := rejectNoAgent(t, c.Logger)
	eng, err := qp.New(t, &qp.Config{Clock: c.Clock, Logger: c.Logger, MaxUnackedPSNs: c.MaxUnackedPSNs, SeqNAKWindow: c.SeqNAKWindow,
		MaxQPs: c.MaxQPs, MaxMRs: c.MaxMRs, BusyPoll: c.BusyPoll > 0, Paths: c.paths(), GIDs: gids, Congestion: c.Congestion,
		LossProbe: c.LossProbe})
	if err != nil {
		t.Close()
		dc.closePcap()
		return nil, err
	}
	rej.serve(eng)
	dc.eng = eng
	dc.self = &Device{dev: dc}
	if c.Trace != nil {
		return dc.self.traced(c.Trace), nil
	}
	return dc.self, nil
}

// paths returns the receive paths of c's link: UDP's Paths, else one.
func (c *Config) paths() int {
	if u, ok := c.Link.(*UDP); ok && u != nil {
		return u.Paths
	}
	return 1
}

// link returns the transport c describes.
func (c *Config) link() (transport.Transport, error) {
	switch {
	case c.Transport != nil && c.Link != nil:
		return nil, fmt.Errorf("roce: %w: Config has both a Link (%T) and a Transport (%T): set one of them",
			verbs.ErrInvalidAttr, c.Link, c.Transport)
	case c.Transport != nil:
		return c.Transport, nil
	case c.Link != nil:
		return c.Link.open(c)
	}
	return (*UDP)(nil).open(c)
}

// capture records what passes over t in the pcap file path.
func (dc *device) capture(t transport.Transport, path string) (transport.Transport, error) {
	f, err := os.Create(path)
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
	dc.pcap, dc.pw = f, w
	return transport.Sniff(t, w), nil
}

func (l *UDP) open(c *Config) (transport.Transport, error) {
	var u UDP
	if l != nil {
		u = *l
	}
	if !u.Addr.IsValid() {
		u.Addr = netip.MustParseAddr("127.0.0.1")
	}
	if u.Port == 0 {
		u.Port = bth.UDPPort
	}
	uc := &udp.Config{Addr: netip.AddrPortFrom(u.Addr, u.Port), PeerPort: u.PeerPort, Logger: c.Logger, BusyPoll: c.BusyPoll,
		Paths: u.Paths}
	if u.NoOffload {
		uc.GSO, uc.GRO = udp.OffloadOff, udp.OffloadOff
	}
	return udp.New(uc)
}

func (l *AFPacket) open(c *Config) (transport.Transport, error) {
	var a AFPacket
	if l != nil {
		a = *l
	}
	if a.Interface == "" || !a.Addr.IsValid() {
		var err error
		if a.Interface, a.Addr, err = findInterface(a.Interface, a.Addr); err != nil {
			return nil, err
		}
	}
	return afpacket.New(&afpacket.Config{Interface: a.Interface, Addr: a.Addr, Port: a.Port, PeerPort: a.PeerPort,
		TOS: a.TOS, Logger: c.Logger})
}

func (m Multi) open(c *Config) (transport.Transport, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("roce: %w: a Multi link needs at least one link", verbs.ErrInvalidAttr)
	}
	var parts []transport.Transport
	closeAll := func() {
		for _, p := range parts {
			p.Close()
		}
	}
	for i, l := range m {
		switch l.(type) {
		case *UDP, *AFPacket, *Mem:
		default:
			closeAll()
			return nil, fmt.Errorf("roce: %w: Multi link %d is a %T: want *UDP, *AFPacket or *Mem", verbs.ErrInvalidAttr, i, l)
		}
		t, err := l.open(c)
		if err != nil {
			closeAll()
			return nil, err
		}
		parts = append(parts, t)
	}
	t, err := transport.NewMulti(parts...)
	if err != nil {
		closeAll()
		return nil, err
	}
	return t, nil
}

func (l *Mem) open(*Config) (transport.Transport, error) {
	switch {
	case l == nil || l.Network == nil:
		return nil, fmt.Errorf("roce: %w: the Mem link needs a Network: set it to a mem.NewNetwork that the devices share",
			verbs.ErrNil)
	case !l.Addr.IsValid():
		return nil, fmt.Errorf("roce: %w: the Mem link needs an Addr, the device's address on the network",
			verbs.ErrInvalidAttr)
	}
	return l.Network.Endpoint(l.Addr)
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
		return "", addr, fmt.Errorf("roce: %w: the AFPacket link needs an Interface or an Addr (the command's --dev or --bind)",
			verbs.ErrInvalidAttr)
	case ifname == "":
		return "", addr, fmt.Errorf("roce: %w: no interface holds %v: set AFPacket.Interface, or an Addr of this host",
			verbs.ErrInvalidAttr, addr)
	}
	return "", addr, fmt.Errorf("roce: %w: interface %q has no usable IP address: give it one, or set AFPacket.Addr",
		verbs.ErrInvalidAttr, ifname)
}
