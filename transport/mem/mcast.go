package mem

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/goroce/goroce/transport"
)

var _ transport.Multicaster = (*Endpoint)(nil)

// JoinGroup makes the endpoint receive what is sent to the multicast
// address group from now on, its own sends included (IP multicast
// loopback, transport.Multicaster). Each member gets its own copy, with
// the network's faults applied to each copy apart.
func (e *Endpoint) JoinGroup(group netip.Addr) error {
	if !e.ok() {
		return errNilEndpoint
	}
	if err := transport.CheckGroup(group, e.addr); err != nil {
		return fmt.Errorf("mem: %w", err)
	}
	g := group.Unmap()
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed.Load() {
		return fmt.Errorf("mem: JoinGroup on endpoint %v after Close", e.addr)
	}
	if slices.Contains(n.groups[g], e) {
		return fmt.Errorf("mem: endpoint %v has joined %v already", e.addr, g)
	}
	if n.groups == nil {
		n.groups = make(map[netip.Addr][]*Endpoint)
	}
	n.groups[g] = append(n.groups[g], e)
	return nil
}

// LeaveGroup stops the endpoint receiving what is sent to group.
func (e *Endpoint) LeaveGroup(group netip.Addr) error {
	if !e.ok() {
		return errNilEndpoint
	}
	g := group.Unmap()
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !slices.Contains(n.groups[g], e) {
		return fmt.Errorf("mem: endpoint %v has not joined %v", e.addr, group)
	}
	n.leave(g, e)
	return nil
}

// leave removes e from group g; the caller holds n.mu.
func (n *Network) leave(g netip.Addr, e *Endpoint) {
	m := slices.DeleteFunc(n.groups[g], func(o *Endpoint) bool { return o == e })
	if len(m) == 0 {
		delete(n.groups, g)
		return
	}
	n.groups[g] = m
}

// leaveAll removes e from every group, as its Close does; the caller
// holds n.mu.
func (n *Network) leaveAll(e *Endpoint) {
	for g, m := range n.groups {
		if slices.Contains(m, e) {
			n.leave(g, e)
		}
	}
}

// multicast queues a copy of p for each member of its destination group,
// its sender's endpoint included if it joined; the caller holds n.mu. A
// group nobody joined takes the packet in silence, as a link does.
func (n *Network) multicast(p *transport.Packet, now time.Time) {
	for _, to := range n.groups[p.Dst.Unmap()] {
		n.transmit(to, p, now)
	}
}
