package cm

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// Multicast joins, as rdma_join_multicast and rdma_leave_multicast make
// them over RoCE: there is no subnet administrator to ask, so a join asks
// nothing of the network; it attaches the QP to the group (the device
// joins the group's IP address on its link, which sends the IGMP or MLD
// report) and gives what RDMA_CM_EVENT_MULTICAST_JOIN gives: the group's
// address vector, the multicast QPN and rdma_cm's Q_Key. The kernel's
// rdma_cm refuses IPv6 groups on RoCEv2 (ENOTSUPP); goroce joins them as
// it joins IPv4 groups, the group's GID being its IPv6 address.

// MulticastHopLimit is the hop limit of a group's address vector: the
// kernel's rdma_cm gives IPV6_DEFAULT_HOPLIMIT for RoCEv2 groups.
const MulticastHopLimit = 64

// MulticastConfig configures JoinMulticast. It is plain data, copied by
// JoinMulticast.
type MulticastConfig struct {
	// QP is the UD QP to attach to the group, as librdmacm attaches the
	// cm_id's QP when the join completes; nil joins with none (attach one
	// with AttachMcast(verbs.MulticastGID(group)) to receive). Its Q_Key
	// must be the group's.
	QP verbs.QP
	// QKey is the group's Q_Key; 0 means verbs.DefaultQKey, rdma_cm's
	// RDMA_UDP_QKEY, which every rdma_cm UD QP has.
	QKey uint32
	// SendOnly joins as a send-only full member
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER): the QP is not attached and
	// the device does not join the group's address; the program only
	// sends to the group.
	SendOnly bool
}

// Multicast is a group joined (RDMA_CM_EVENT_MULTICAST_JOIN): how to send
// UD messages to the group. Its fields are set by JoinMulticast and not
// changed after; its methods are safe for concurrent use.
type Multicast struct {
	// Group is the group's IP address.
	Group netip.Addr
	// AH is the group's address vector, as the join event's ah_attr has
	// it: the group's GID (verbs.MulticastGID) as DGID, the device's GID
	// index of the group's IP version as SGIDIndex, MulticastHopLimit,
	// traffic class, flow label and SL 0, port 1. PD.CreateAH takes it.
	AH verbs.AHAttr
	// QPN is the remote QPN of sends to the group (verbs.MulticastQPN),
	// QKey their remote Q_Key (MulticastConfig.QKey).
	QPN, QKey uint32

	mu   sync.Mutex
	qp   verbs.QP // the QP attached, nil when none
	left bool
}

// JoinMulticast joins the multicast group at address group on dev, a
// goroce software device (roce.Open), as rdma_join_multicast does: it
// attaches cfg.QP to the group, unless the join is send-only, and returns
// the group's address vector, QPN and Q_Key. It fails with ErrAddr for a
// group that is not a multicast address or not of an IP version the
// device has, with verbs.ErrInvalidAttr for a QP that is not UD or whose
// Q_Key is not the group's, and with the errors of QP.AttachMcast.
func JoinMulticast(dev verbs.Device, group netip.Addr, cfg *MulticastConfig) (*Multicast, error) {
	sd, err := checkDevice(dev)
	if err != nil {
		return nil, err
	}
	var c MulticastConfig
	if cfg != nil {
		c = *cfg
	}
	g := group.Unmap()
	if !g.IsValid() || !g.IsMulticast() {
		return nil, fmt.Errorf("%w: %v is not a multicast address (224.0.0.0/4 or ff00::/8); goroce's tests use "+
			"239.255.0.0/16 and ff15::/16", ErrAddr, group)
	}
	sgid := -1
	for i, a := range sd.GIDs() {
		if a.Unmap().Is4() == g.Is4() {
			sgid = i
			break
		}
	}
	if sgid < 0 {
		return nil, fmt.Errorf("%w: the device has no address of multicast group %v's IP version (its GIDs: %v)",
			ErrAddr, g, sd.GIDs())
	}
	if c.QKey == 0 {
		c.QKey = verbs.DefaultQKey
	}
	if isNil(c.QP) {
		c.QP = nil
	}
	if c.QP != nil {
		if t := c.QP.Type(); t != verbs.UD {
			return nil, fmt.Errorf("cm: %w: JoinMulticast needs a UD QP, not %v", verbs.ErrInvalidAttr, t)
		}
		a, err := c.QP.Query()
		if err != nil {
			return nil, fmt.Errorf("cm: JoinMulticast: %w", err)
		}
		if a.State != verbs.StateReset && a.QKey != c.QKey {
			return nil, fmt.Errorf("cm: %w: QP %d has Q_Key %#x, the group's is %#x: the QP would drop every "+
				"message to the group (give it the group's at INIT, as rdma_cm does)", verbs.ErrInvalidAttr,
				c.QP.QPN(), a.QKey, c.QKey)
		}
	}
	gid := verbs.MulticastGID(g)
	m := &Multicast{Group: g, QPN: verbs.MulticastQPN, QKey: c.QKey,
		AH: verbs.AHAttr{DGID: gid, SGIDIndex: uint8(sgid), HopLimit: MulticastHopLimit, Port: 1}}
	if c.QP != nil && !c.SendOnly {
		if err := c.QP.AttachMcast(gid); err != nil {
			return nil, fmt.Errorf("cm: JoinMulticast %v: %w", g, err)
		}
		m.qp = c.QP
	}
	return m, nil
}

// Leave leaves the group, as rdma_leave_multicast does: it detaches the
// QP the join attached (the device leaves the group's address when no QP
// of it is attached any more). A second Leave fails with ErrAddr
// (librdmacm's EADDRNOTAVAIL).
func (m *Multicast) Leave() error {
	if m == nil {
		return fmt.Errorf("%w: Leave of a nil *Multicast: use one from JoinMulticast", verbs.ErrNil)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return fmt.Errorf("%w: multicast group %v was left already", ErrAddr, m.Group)
	}
	m.left = true
	if m.qp == nil {
		return nil
	}
	q := m.qp
	m.qp = nil
	if err := q.DetachMcast(m.AH.DGID); err != nil {
		return fmt.Errorf("cm: leave %v: %w", m.Group, err)
	}
	return nil
}
