package qp

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// UD multicast, as rxe_mcast.c and rxe_recv.c's rxe_rcv_mcast_pkt run it.
//
// A UD QP attaches to the group of a multicast GID (AttachMcast); the
// first QP of the device to attach to a group joins the group's IP
// address on the link (transport.Multicaster), the last to detach leaves
// it. A datagram whose BTH names the multicast QPN (0xFFFFFF) and whose
// IP destination is a group goes to each QP attached to that group, each
// one checked as a datagram to it would be (its type and state, the
// P_Key, its Q_Key) and getting its own copy; one to a group nobody
// attached to is dropped and counted (DropNoMcastGroup). A UD send to a
// group is a send like any other: the requester sends the work request's
// remote QPN (MulticastQPN, as rdma_cm gives it) to the group's address,
// as rxe does.
//
// The link delivers the device's own sends to a group it joined back to
// it (transport.Multicaster), so each attached QP of the device, the
// sender's included, receives one copy, as on rxe, whose sends to a group
// come back through the host's IP multicast loopback.

// Multicast limits of the software device, rxe's (rxe_param.h): groups
// (max_mcast_grp), QPs attached to one group (max_mcast_qp_attach), and
// attachments in all (max_total_mcast_qp_attach).
const (
	MaxMcastGroups        = 8192
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = 0x70000
)

// mcastTable is a device's multicast groups. Attaches and detaches take
// mu, for as long as the link takes to join or leave a group; they change
// groups under rw too, which the receive path takes for reading. A
// group's qps slice is never written once made: a change makes a new one,
// so the receive path walks the one it found with no lock. No QP's lock
// is taken while rw is held; mu is taken before a QP's.
type mcastTable struct {
	mu     sync.Mutex
	rw     sync.RWMutex
	groups map[[16]byte]*mcastGroup // under mu and rw
	byQP   map[*QP]int              // how many groups each QP is attached to, under mu
	total  int                      // attachments, under mu
	any    atomic.Bool              // groups is not empty: receivers skip rw when it is
	// The limits, MaxMcastGroups and the others unless a test sets less.
	maxGroups, maxQPs, maxTotal int
}

// mcastGroup is one group the device has joined on its link.
type mcastGroup struct {
	addr netip.Addr
	qps  []*QP // in the order they attached; replaced, never written
}

// limits returns the table's limits.
func (t *mcastTable) limits() (groups, qps, total int) {
	groups, qps, total = MaxMcastGroups, MaxMcastQPAttach, MaxTotalMcastQPAttach
	if t.maxGroups > 0 {
		groups = t.maxGroups
	}
	if t.maxQPs > 0 {
		qps = t.maxQPs
	}
	if t.maxTotal > 0 {
		total = t.maxTotal
	}
	return groups, qps, total
}

// AttachMcast attaches the QP to the multicast group of gid
// (ibv_attach_mcast), with the checks of the kernel's ib_attach_mcast and
// rxe_attach_mcast: a UD QP, a multicast GID (verbs.IsMulticastGID), room
// for the group and the attachment (MaxMcastGroups, MaxMcastQPAttach,
// MaxTotalMcastQPAttach: verbs.ErrMcastFull). The first QP of the device
// to attach to a group makes its link join the group's IP address: a
// link that cannot (not a transport.Multicaster) refuses with an error
// matching errors.ErrUnsupported, and a join the link refuses fails the
// attach. A QP attached to the group already stays so, and nil is
// returned. The QP may be in any state; it receives in RTR and RTS.
func (q *QP) AttachMcast(gid [16]byte) error {
	if !q.ok() {
		return errNilQP
	}
	if err := q.checkMcast(gid, "AttachMcast"); err != nil {
		return err
	}
	d := q.dev
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	q.mu.Lock()
	destroyed := q.destroyed
	q.mu.Unlock()
	switch {
	case destroyed:
		return fmt.Errorf("%w: AttachMcast of QP %d after Destroy", verbs.ErrDestroyed, q.qpn)
	case d.closed.Load():
		return fmt.Errorf("%w: AttachMcast after the device's Close", verbs.ErrClosed)
	}
	g := t.groups[gid]
	if g != nil && slices.Contains(g.qps, q) {
		return nil
	}
	maxGroups, maxQPs, maxTotal := t.limits()
	switch {
	case g == nil && len(t.groups) >= maxGroups:
		return fmt.Errorf("%w: the device has joined %d multicast groups, its max_mcast_grp: detach QPs from "+
			"others first", verbs.ErrMcastFull, len(t.groups))
	case t.total >= maxTotal:
		return fmt.Errorf("%w: %d attachments of QPs to groups, the device's max_total_mcast_qp_attach",
			verbs.ErrMcastFull, t.total)
	case g != nil && len(g.qps) >= maxQPs:
		return fmt.Errorf("%w: %d QPs are attached to group %v, the device's max_mcast_qp_attach",
			verbs.ErrMcastFull, len(g.qps), g.addr)
	}
	nq := &mcastGroup{qps: []*QP{q}}
	if g == nil {
		nq.addr = verbs.AddrFromGID(gid)
		if err := transport.JoinGroup(d.t, nq.addr); err != nil {
			return fmt.Errorf("qp: AttachMcast of QP %d to %v: joining the group on the link: %w", q.qpn, nq.addr, err)
		}
		d.log.Debug("join multicast group", "group", nq.addr)
	} else {
		nq.addr, nq.qps = g.addr, append(slices.Clip(g.qps), q)
	}
	t.rw.Lock()
	if t.groups == nil {
		t.groups, t.byQP = make(map[[16]byte]*mcastGroup), make(map[*QP]int)
	}
	t.groups[gid] = nq
	t.any.Store(true)
	t.rw.Unlock()
	t.byQP[q]++
	t.total++
	d.log.Debug("attach QP to multicast group", "qpn", q.qpn, "group", nq.addr)
	return nil
}

// DetachMcast detaches the QP from the multicast group of gid
// (ibv_detach_mcast); the last QP of the device to leave a group makes
// its link leave the group's address. A QP that is not UD or a GID that
// is not multicast is refused with verbs.ErrInvalidAttr, as in the
// kernel's ib_detach_mcast, and so is a group the QP is not attached to
// (rxe's EINVAL).
func (q *QP) DetachMcast(gid [16]byte) error {
	if !q.ok() {
		return errNilQP
	}
	if err := q.checkMcast(gid, "DetachMcast"); err != nil {
		return err
	}
	t := &q.dev.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[gid]
	if g == nil || !slices.Contains(g.qps, q) {
		return fmt.Errorf("%w: DetachMcast: QP %d is not attached to group %v", verbs.ErrInvalidAttr, q.qpn,
			verbs.AddrFromGID(gid))
	}
	return t.detach(q, gid, g)
}

// checkMcast checks a QP and a GID for AttachMcast and DetachMcast.
func (q *QP) checkMcast(gid [16]byte, verb string) error {
	if q.typ != verbs.UD {
		return fmt.Errorf("%w: %s: QP %d is %v: only UD QPs join multicast groups", verbs.ErrInvalidAttr, verb, q.qpn, q.typ)
	}
	if !verbs.IsMulticastGID(gid) {
		return fmt.Errorf("%w: %s: %v is not a multicast GID: give an IPv4 group as verbs.MulticastGID makes it "+
			"(::ffff:239.255.0.1), or an IPv6 one (ff15::1)", verbs.ErrInvalidAttr, verb, netip.AddrFrom16(gid))
	}
	return nil
}

// detach removes q from g, the group of gid, leaving the group on the
// link when q was its last QP; the caller holds t.mu. A leave the link
// refuses is returned, the group gone all the same.
func (t *mcastTable) detach(q *QP, gid [16]byte, g *mcastGroup) error {
	d := q.dev
	rest := slices.DeleteFunc(slices.Clone(g.qps), func(o *QP) bool { return o == q })
	t.rw.Lock()
	if len(rest) == 0 {
		delete(t.groups, gid)
		t.any.Store(len(t.groups) > 0)
	} else {
		t.groups[gid] = &mcastGroup{addr: g.addr, qps: rest}
	}
	t.rw.Unlock()
	if t.byQP[q]--; t.byQP[q] == 0 {
		delete(t.byQP, q)
	}
	t.total--
	d.log.Debug("detach QP from multicast group", "qpn", q.qpn, "group", g.addr)
	if len(rest) > 0 {
		return nil
	}
	err := transport.LeaveGroup(d.t, g.addr)
	if err != nil {
		err = fmt.Errorf("qp: leaving multicast group %v on the link: %w", g.addr, err)
	}
	d.log.Debug("leave multicast group", "group", g.addr, "err", err)
	return err
}

// busy reports the error of destroying q while it is attached to
// groups: the kernel's ib_destroy_qp refuses a QP multicast attachments
// hold (EBUSY).
func (t *mcastTable) busy(q *QP) error {
	t.mu.Lock()
	n := t.byQP[q]
	t.mu.Unlock()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: QP %d is attached to %d multicast group(s): detach it (DetachMcast) before Destroy",
		verbs.ErrBusy, q.qpn, n)
}

// dropQP detaches q from every group it is attached to, as the kernel
// does for the QPs of a process that ends and rxe for a QP it cleans up:
// the device's Close, and a QP that an attach reached while Destroy ran.
func (t *mcastTable) dropQP(q *QP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byQP[q] == 0 {
		return
	}
	for gid, g := range t.groups {
		if slices.Contains(g.qps, q) {
			_ = t.detach(q, gid, g) // the QP goes; a link that fails to leave keeps the group until it closes
		}
	}
}

// members returns the QPs attached to the group at IP address dst (nil
// when there are none), in a slice no one writes.
func (t *mcastTable) members(dst netip.Addr) []*QP {
	if !t.any.Load() || !dst.IsMulticast() {
		return nil
	}
	t.rw.RLock()
	g := t.groups[verbs.MulticastGID(dst)]
	t.rw.RUnlock()
	if g == nil {
		return nil
	}
	return g.qps
}

// groupsOf returns the addresses of the groups q is attached to, for
// tests.
func (t *mcastTable) groupsOf(q *QP) []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	var a []netip.Addr
	for _, g := range t.groups {
		if slices.Contains(g.qps, q) {
			a = append(a, g.addr)
		}
	}
	slices.SortFunc(a, netip.Addr.Compare)
	return a
}

// multicast hands a datagram to the multicast QPN to each QP attached to
// its destination group, holding each one's lock as handle does, as
// rxe_rcv_mcast_pkt hands a clone of it to each: each QP checks it as
// its own (q.recv: type, state, P_Key, Q_Key) and takes a receive for
// it.
func (r *batchRun) multicast(pkt *bth.Packet, tp *transport.Packet) {
	qs := r.d.mcast.members(tp.Dst.Unmap())
	if len(qs) == 0 {
		r.d.ctr.drop(dropNoMcastGroup)
		return
	}
	for _, q := range qs {
		r.hold(q)
		q.recv(pkt, tp, r.b)
	}
}
