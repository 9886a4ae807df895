package roce

import (
	"net/netip"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// The software device's multicast limits, rxe's: groups (max_mcast_grp),
// QPs attached to one group (max_mcast_qp_attach) and attachments in all
// (max_total_mcast_qp_attach).
const (
	MaxMcastGroups        = qp.MaxMcastGroups
	MaxMcastQPAttach      = qp.MaxMcastQPAttach
	MaxTotalMcastQPAttach = qp.MaxTotalMcastQPAttach
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
