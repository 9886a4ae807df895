package transport

import (
	"errors"
	"fmt"
	"net/netip"
)

// Multi is one transport made of several, one per local address, as a
// device with an IPv4 and an IPv6 address in its GID table needs: it
// receives what each receives, and sends each packet through the first
// transport whose address is of the destination's family (IPv4 or IPv6),
// which sends it from that address. It is safe for concurrent use if its
// parts are.
type Multi struct {
	parts []Transport
}

var (
	_ Transport                              = (*Multi)(nil)
	_ UnreachableNotifier                    = (*Multi)(nil)
	_ interface{ LocalAddrs() []netip.Addr } = (*Multi)(nil)
)

// NewMulti returns the transport made of parts, not started; Start starts
// them, Close closes them. It refuses none or a nil part.
func NewMulti(parts ...Transport) (*Multi, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: NewMulti needs at least one transport", ErrNil)
	}
	for i, p := range parts {
		if p == nil {
			return nil, nilError(fmt.Sprintf("NewMulti's transport %d", i))
		}
	}
	return &Multi{parts: append([]Transport(nil), parts...)}, nil
}

func (m *Multi) ok() bool { return m != nil && len(m.parts) > 0 }

var errNilMulti = nilError("a nil *Multi: make one with NewMulti")

// Start starts every part with h.
func (m *Multi) Start(h Handler) error {
	if !m.ok() {
		return errNilMulti
	}
	for i, p := range m.parts {
		if err := p.Start(h); err != nil {
			for _, q := range m.parts[:i] {
				q.Close()
			}
			return err
		}
	}
	return nil
}

// Send sends each packet through the part of its destination's family;
// consecutive packets of one part go in one call. A packet whose family no
// part has is an error, after the others are sent.
func (m *Multi) Send(pkts []Packet) error {
	if !m.ok() {
		return errNilMulti
	}
	if len(m.parts) == 1 {
		return m.parts[0].Send(pkts)
	}
	var errs []error
	for len(pkts) > 0 {
		p := m.partFor(pkts[0].Dst)
		n := 1
		for n < len(pkts) && m.partFor(pkts[n].Dst) == p {
			n++
		}
		if p == nil {
			errs = append(errs, fmt.Errorf("transport: no local address of %v's family to send from", pkts[0].Dst))
		} else if err := p.Send(pkts[:n]); err != nil {
			errs = append(errs, err)
		}
		pkts = pkts[n:]
	}
	return errors.Join(errs...)
}

// partFor returns the part that sends to dst, or nil.
func (m *Multi) partFor(dst netip.Addr) Transport {
	v4 := dst.Unmap().Is4()
	for _, p := range m.parts {
		if p.LocalAddr().Unmap().Is4() == v4 {
			return p
		}
	}
	return nil
}

// LocalAddr returns the first part's address.
func (m *Multi) LocalAddr() netip.Addr {
	if !m.ok() {
		return netip.Addr{}
	}
	return m.parts[0].LocalAddr()
}

// LocalAddrs returns every part's address, in order.
func (m *Multi) LocalAddrs() []netip.Addr {
	if !m.ok() {
		return nil
	}
	a := make([]netip.Addr, len(m.parts))
	for i, p := range m.parts {
		a[i] = p.LocalAddr()
	}
	return a
}

// BatchSize returns the least of the parts'.
func (m *Multi) BatchSize() int {
	if !m.ok() {
		return 0
	}
	n := m.parts[0].BatchSize()
	for _, p := range m.parts[1:] {
		n = min(n, p.BatchSize())
	}
	return n
}

// MaxPacket returns the least of the parts'.
func (m *Multi) MaxPacket() int {
	if !m.ok() {
		return 0
	}
	n := m.parts[0].MaxPacket()
	for _, p := range m.parts[1:] {
		n = min(n, p.MaxPacket())
	}
	return n
}

// SendsPayload reports whether every part sends payloads in place.
func (m *Multi) SendsPayload() bool {
	if !m.ok() {
		return false
	}
	for _, p := range m.parts {
		if !SendsPayload(p) {
			return false
		}
	}
	return true
}

// Stats returns the parts' counters, summed.
func (m *Multi) Stats() Stats {
	var s Stats
	if !m.ok() {
		return s
	}
	for _, p := range m.parts {
		t := p.Stats()
		s.TxPackets += t.TxPackets
		s.TxBytes += t.TxBytes
		s.RxPackets += t.RxPackets
		s.RxBytes += t.RxBytes
		s.TxErrors += t.TxErrors
		s.RxICRCErrors += t.RxICRCErrors
		s.RxMalformed += t.RxMalformed
		s.RxDropped += t.RxDropped
	}
	return s
}

// NotifyUnreachable calls f with the notices of every part that gives
// them.
func (m *Multi) NotifyUnreachable(f func(Unreachable)) (stop func()) {
	if !m.ok() || f == nil {
		return func() {}
	}
	var stops []func()
	for _, p := range m.parts {
		if n, ok := p.(UnreachableNotifier); ok {
			stops = append(stops, n.NotifyUnreachable(f))
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// Close closes every part and returns the first error.
func (m *Multi) Close() error {
	if !m.ok() {
		return errNilMulti
	}
	var first error
	for _, p := range m.parts {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
