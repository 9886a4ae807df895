package roce

import (
	"net/netip"

	"github.com/goroce/goroce/transport"
)

// JoinGroup joins group on the transport underneath
// (transport.Multicaster): the device's QPs attach to multicast groups
// through it.
func (r *cmRejecter) JoinGroup(group netip.Addr) error {
	return transport.JoinGroup(r.Transport, group)
}

// LeaveGroup leaves group on the transport underneath.
func (r *cmRejecter) LeaveGroup(group netip.Addr) error {
	return transport.LeaveGroup(r.Transport, group)
}

var (
	_ transport.Multicaster = (*cmRejecter)(nil)
	_ transport.Multicaster = pollingRejecter{}
	_ transport.Multicaster = waitingRejecter{}
)
