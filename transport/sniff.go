package transport

import (
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
)

// PortReporter is implemented by transports whose UDP ports are not both
// 4791 (tests that run two transports on one address). Sniff uses it to
// write the ports that were on the wire.
type PortReporter interface {
	// LocalPort is the UDP port the transport receives on.
	LocalPort() uint16
	// PeerPort is the UDP port it sends to.
	PeerPort() uint16
}

// Sniffer is a Transport that passes everything through to another and
// records every packet sent and received in a pcap file. It is safe for
// concurrent use.
type Sniffer struct {
	t         Transport
	w         *pcapfile.Writer
	local     netip.Addr
	localPort uint16
	peerPort  uint16

	mu  sync.Mutex // guards buf and err
	buf []byte
	err error
}

var _ Transport = (*Sniffer)(nil)

// Sniff wraps t so that every packet it sends and receives is also written
// to w, which must have been made with pcapfile.LinkTypeRaw. Each record is
// an IPv4 or IPv6 packet whose IP and UDP headers are synthesized with
// bth.EncodeFrame from the packet's addresses, ports, TOS and IPv4 ID (as
// the transport filled them in), with DF set, so that the ICRC in the file
// verifies (bth.FrameICRC, Wireshark) when the transport predicted its
// headers right. Sent packets are recorded after t.Send returns, with the
// ICRC t sealed; received ones before the handler sees them. Ports are
// 4791 unless t implements PortReporter.
//
// Given a nil t, the Sniffer's methods report ErrNil; given a nil w, Err
// and Close report it.
func Sniff(t Transport, w *pcapfile.Writer) *Sniffer {
	if t == nil {
		return &Sniffer{}
	}
	s := &Sniffer{t: t, w: w, local: t.LocalAddr(), localPort: bth.UDPPort, peerPort: bth.UDPPort}
	if pr, ok := t.(PortReporter); ok {
		s.localPort, s.peerPort = pr.LocalPort(), pr.PeerPort()
	}
	return s
}

// Err returns the first error writing the capture; recording stops there.
func (s *Sniffer) Err() error {
	if !s.ok() {
		return errNoSnifferTransport
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Start starts t with a handler that records each received packet and then
// calls h.
func (s *Sniffer) Start(h Handler) error {
	switch {
	case !s.ok():
		return errNoSnifferTransport
	case h == nil:
		return nilError("Start needs a Handler")
	}
	return s.t.Start(func(pkts []Packet) {
		s.record(pkts, false)
		h(pkts)
	})
}

// Send sends pkts through t and records them, error or not: the record is
// of what was handed to the transport.
func (s *Sniffer) Send(pkts []Packet) error {
	if !s.ok() {
		return errNoSnifferTransport
	}
	err := s.t.Send(pkts)
	s.record(pkts, true)
	return err
}

// ok reports whether s wraps a transport.
func (s *Sniffer) ok() bool { return s != nil && s.t != nil }

// errNoSnifferTransport is what the methods of a Sniffer without a
// transport return.
var errNoSnifferTransport = nilError("a nil *Sniffer, or one without a transport: use Sniff with one")

// LocalAddr returns t's.
func (s *Sniffer) LocalAddr() netip.Addr {
	if !s.ok() {
		return netip.Addr{}
	}
	return s.t.LocalAddr()
}

// SendsPayload reports whether t takes packets with their payload apart.
func (s *Sniffer) SendsPayload() bool { return s.ok() && SendsPayload(s.t) }

// BatchSize returns t's.
func (s *Sniffer) BatchSize() int {
	if !s.ok() {
		return 0
	}
	return s.t.BatchSize()
}

// MaxPacket returns t's.
func (s *Sniffer) MaxPacket() int {
	if !s.ok() {
		return 0
	}
	return s.t.MaxPacket()
}

// Stats returns t's.
func (s *Sniffer) Stats() Stats {
	if !s.ok() {
		return Stats{}
	}
	return s.t.Stats()
}

// Close closes t and flushes the capture; it does not close the file
// underneath the Writer.
func (s *Sniffer) Close() error {
	if !s.ok() {
		return errNoSnifferTransport
	}
	err := s.t.Close()
	if ferr := s.w.Flush(); err == nil {
		s.mu.Lock()
		if s.err != nil {
			ferr = s.err
		}
		s.mu.Unlock()
		err = ferr
	}
	return err
}

// record writes pkts, sent or received.
func (s *Sniffer) record(pkts []Packet, sent bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range pkts {
		if s.err != nil {
			return
		}
		p := &pkts[i]
		if len(p.Data) < bth.BTHLen+bth.ICRCLen || p.Len() > 65535-bth.IPv6Len-bth.UDPLen {
			continue
		}
		f := bth.FrameFields{TOS: p.TOS, Flow: bth.Flow{
			Src: p.Src, Dst: p.Dst, SrcPort: p.SrcPort, ID: p.IPID, DF: true,
		}}
		if sent {
			f.Flow.DstPort = s.peerPort
			if !f.Flow.Src.IsValid() {
				f.Flow.Src = s.local
			}
		} else {
			f.Flow.DstPort = s.localPort
		}
		src, dst := f.Flow.Src, f.Flow.Dst
		if src.Unmap().Is4() && dst.Unmap().Is4() {
			f.Flow.Src, f.Flow.Dst = src.Unmap(), dst.Unmap()
		} else if !src.Is6() || !dst.Is6() {
			continue // no addresses to write
		}
		hl := f.HeaderLen()
		n := hl + p.Len()
		if cap(s.buf) < n {
			s.buf = make([]byte, max(n, 9000))
		}
		b := p.AppendTo(s.buf[:hl])
		if _, err := bth.EncodeFrame(b, &f); err != nil {
			continue // no frame to write for these addresses
		}
		s.err = s.w.WritePacket(now, b)
	}
}
