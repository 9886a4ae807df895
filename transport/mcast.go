package transport

import (
	"errors"
	"fmt"
	"net/netip"
)

// Multicaster is implemented by transports that receive IP multicast. The
// engine joins a group when the first QP of its device attaches to the
// group's GID and leaves it when the last one detaches, as rxe adds and
// removes the group's address on its network device.
//
// A transport that has joined a group delivers the RoCE packets sent to
// the group's address on its RoCEv2 port to its handler as it delivers
// the others, with Dst the group's address. It sends to a group as to
// any address (to the group's multicast MAC on a raw link), joined or
// not. And it delivers the packets it sends itself to a group it has
// joined back to its own handler, once each, as IP multicast loopback
// does on a host (IP_MULTICAST_LOOP): so every QP of the device attached
// to the group, the sender's own included, receives one copy, as on rxe.
type Multicaster interface {
	// JoinGroup starts receiving what is sent to the multicast address
	// group, on the transport's interface. It fails for an address that
	// is not multicast, not of the transport's IP version, or a group
	// joined already.
	JoinGroup(group netip.Addr) error
	// LeaveGroup stops receiving what is sent to group; it fails for a
	// group not joined.
	LeaveGroup(group netip.Addr) error
}

// ErrNoMulticast means a transport cannot join multicast groups: it does
// not implement Multicaster.
var ErrNoMulticast = errors.New("transport: the link cannot join multicast groups")

// JoinGroup joins group on t, if t is a Multicaster; otherwise it fails
// with an error wrapping ErrNoMulticast (and errors.ErrUnsupported).
func JoinGroup(t Transport, group netip.Addr) error {
	m, ok := t.(Multicaster)
	if !ok || t == nil {
		return noMulticast(t)
	}
	return m.JoinGroup(group)
}

// LeaveGroup leaves group on t, as JoinGroup joins it.
func LeaveGroup(t Transport, group netip.Addr) error {
	m, ok := t.(Multicaster)
	if !ok || t == nil {
		return noMulticast(t)
	}
	return m.LeaveGroup(group)
}

func noMulticast(t Transport) error {
	return fmt.Errorf("%w (%w): a %T: use the udp, afpacket or mem transport", ErrNoMulticast, errors.ErrUnsupported, t)
}

// CheckGroup checks a group address for a transport whose local address
// is local: a multicast address of local's IP version. Transports use it
// to refuse what they cannot join.
func CheckGroup(group, local netip.Addr) error {
	g := group.Unmap()
	switch {
	case !g.IsValid() || !g.IsMulticast():
		return fmt.Errorf("transport: %v is not a multicast address (224.0.0.0/4 or ff00::/8)", group)
	case g.Is4() != local.Unmap().Is4():
		return fmt.Errorf("transport: multicast group %v is not of the IP version of the local address %v", group, local)
	}
	return nil
}

// JoinGroup joins group on the part that sends to its family.
func (m *Multi) JoinGroup(group netip.Addr) error {
	if !m.ok() {
		return errNilMulti
	}
	p := m.partFor(group)
	if p == nil {
		return fmt.Errorf("transport: no local address of multicast group %v's family", group)
	}
	return JoinGroup(p, group)
}

// LeaveGroup leaves group on the part that joined it.
func (m *Multi) LeaveGroup(group netip.Addr) error {
	if !m.ok() {
		return errNilMulti
	}
	p := m.partFor(group)
	if p == nil {
		return fmt.Errorf("transport: no local address of multicast group %v's family", group)
	}
	return LeaveGroup(p, group)
}

// JoinGroup joins group on the transport underneath.
func (t *Faulty) JoinGroup(group netip.Addr) error {
	if !t.ok() {
		return nilError("JoinGroup of a nil *Faulty")
	}
	return JoinGroup(t.Transport, group)
}

// LeaveGroup leaves group on the transport underneath.
func (t *Faulty) LeaveGroup(group netip.Addr) error {
	if !t.ok() {
		return nilError("LeaveGroup of a nil *Faulty")
	}
	return LeaveGroup(t.Transport, group)
}

// JoinGroup joins group on the transport underneath.
func (s *Sniffer) JoinGroup(group netip.Addr) error {
	if !s.ok() {
		return nilError("JoinGroup of a nil *Sniffer")
	}
	return JoinGroup(s.t, group)
}

// LeaveGroup leaves group on the transport underneath.
func (s *Sniffer) LeaveGroup(group netip.Addr) error {
	if !s.ok() {
		return nilError("LeaveGroup of a nil *Sniffer")
	}
	return LeaveGroup(s.t, group)
}

var (
	_ Multicaster = (*Multi)(nil)
	_ Multicaster = (*Faulty)(nil)
	_ Multicaster = (*Sniffer)(nil)
)
