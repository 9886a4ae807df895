package qp

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// JoinGroup records the join, as a link's would join the group on its
// interface, or fails with joinErr.
func (f *fakeLink) JoinGroup(g netip.Addr) error {
	if err := transport.CheckGroup(g, f.addr); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.joinErr != nil {
		return f.joinErr
	}
	if f.joined(g) {
		return fmt.Errorf("fakeLink: %v joined twice", g)
	}
	f.joins = append(f.joins, g)
	return nil
}

// LeaveGroup records the leave.
func (f *fakeLink) LeaveGroup(g netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.joined(g) {
		return fmt.Errorf("fakeLink: %v left, not joined", g)
	}
	f.leaves = append(f.leaves, g)
	return nil
}

// joined reports whether g is joined now; the caller holds f.mu.
func (f *fakeLink) joined(g netip.Addr) bool {
	n := 0
	for _, j := range f.joins {
		if j == g {
			n++
		}
	}
	for _, l := range f.leaves {
		if l == g {
			n--
		}
	}
	return n > 0
}

var (
	mcGroup   = netip.MustParseAddr("239.255.0.1")
	mcGroup2  = netip.MustParseAddr("239.255.0.2")
	mcGID     = verbs.MulticastGID(mcGroup)
	mcGID2    = verbs.MulticastGID(mcGroup2)
	mcQKey    = uint32(verbs.DefaultQKey)
	mcRecvLen = 512
)

// mcastDev is a device on a fakeLink, with UD QPs made to order, each
// with receives of its own in one region.
type mcastDev struct {
	t    *testing.T
	link *fakeLink
	dev  *Device
	pd   *PD
	cq   *CQ
	buf  *mr.MR
	qps  []*QP
}

func newMcastDev(t *testing.T, link transport.Transport) *mcastDev {
	t.Helper()
	m := &mcastDev{t: t}
	if link == nil {
		m.link = &fakeLink{addr: advLocal}
		link = m.link
	}
	dev, err := New(link, &Config{Clock: clock.NewManual(time.Unix(1e9, 0)), Logger: testLogger(t)})
	must(t, err)
	t.Cleanup(func() { dev.Close() })
	m.dev = dev
	pdi, _ := dev.AllocPD()
	m.pd = pdi.(*PD)
	cqi, err := dev.CreateCQ(1024)
	must(t, err)
	m.cq = cqi.(*CQ)
	m.buf, err = m.pd.pd.Register(make([]byte, 16*8*mcRecvLen), verbs.LocalWrite)
	must(t, err)
	return m
}

// ud returns a new UD QP with Q_Key qkey, moved to st (INIT, RTR or RTS),
// with 8 receives posted.
func (m *mcastDev) ud(qkey uint32, st verbs.QPState) *QP {
	m.t.Helper()
	q, err := m.dev.createQP(m.pd, &verbs.QPInitAttr{Type: verbs.UD, SendCQ: m.cq, RecvCQ: m.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(m.t, err)
	i := len(m.qps)
	m.qps = append(m.qps, q)
	must(m.t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: qkey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	for j := range 8 {
		must(m.t, q.PostRecv([]verbs.RecvWR{{ID: uint64(i*100 + j), SGL: []verbs.SGE{sge(m.buf, (i*8+j)*mcRecvLen, mcRecvLen)}}}))
	}
	if st == verbs.StateInit {
		return q
	}
	must(m.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState))
	if st == verbs.StateRTR {
		return q
	}
	must(m.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1}, verbs.AttrState|verbs.AttrSQPSN))
	return q
}

// mcSend returns a UD SEND from the adversary's QP to the multicast QPN
// with n bytes of payload and Q_Key qkey.
func mcSend(n int, qkey uint32) *wire {
	w := &wire{f: bth.BTHFields{Opcode: bth.UDSendOnly, PKey: bth.DefaultPKey, DestQP: verbs.MulticastQPN, PSN: 7},
		pad: -1, payload: make([]byte, n), qkey: qkey}
	fill(w.payload, 11)
	return w
}

// inject hands the packets to the device as one batch, each to dst.
func (m *mcastDev) inject(dst netip.Addr, ws ...*wire) {
	pkts := make([]transport.Packet, len(ws))
	for i, w := range ws {
		pkts[i] = transport.Packet{Data: w.bytes(), Src: advPeer, Dst: dst}
	}
	m.link.h(pkts)
}

// received returns the receive completions since the last call, as
// "QP-index:status:bytes".
func (m *mcastDev) received() []string {
	var out []string
	wcs := make([]verbs.WC, 64)
	for n := m.cq.Poll(wcs); n > 0; n = m.cq.Poll(wcs) {
		for _, wc := range wcs[:n] {
			i := slices.IndexFunc(m.qps, func(q *QP) bool { return q.QPN() == wc.QPN })
			out = append(out, fmt.Sprintf("%d:%v:%d", i, wc.Status, wc.ByteLen))
		}
	}
	slices.Sort(out)
	return out
}

func (m *mcastDev) counter(q *QP, name string) uint64 {
	c := q.Counters()
	var v uint64
	c.Each(func(n string, x uint64) {
		if n == name {
			v = x
		}
	})
	return v
}

// noMcastLink is a link that cannot join groups: a Transport and nothing
// more.
type noMcastLink struct{ transport.Transport }

// TestMcastAttachRules: what ibv_attach_mcast and ibv_detach_mcast refuse
// on rxe and the kernel's ib_core, refused here alike, and what the link
// is asked to join and leave.
func TestMcastAttachRules(t *testing.T) {
	t.Run("not UD", func(t *testing.T) {
		m := newMcastDev(t, nil)
		for _, typ := range []verbs.QPType{verbs.RC, verbs.UC} {
			q, err := m.dev.createQP(m.pd, &verbs.QPInitAttr{Type: typ, SendCQ: m.cq, RecvCQ: m.cq})
			must(t, err)
			for _, err := range []error{q.AttachMcast(mcGID), q.DetachMcast(mcGID)} {
				if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "only UD QPs") {
					t.Errorf("%v QP: %v, want ErrInvalidAttr saying only UD QPs join", typ, err)
				}
			}
		}
		if len(m.link.joins) != 0 {
			t.Errorf("joins %v", m.link.joins)
		}
	})
	t.Run("not a multicast GID", func(t *testing.T) {
		m := newMcastDev(t, nil)
		q := m.ud(mcQKey, verbs.StateRTS)
		for _, a := range []string{"198.18.0.1", "::", "2001:db8::1", "0.0.0.0", "255.255.255.255"} {
			gid := verbs.GIDFromAddr(netip.MustParseAddr(a))
			for _, err := range []error{q.AttachMcast(gid), q.DetachMcast(gid)} {
				if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "not a multicast GID") {
					t.Errorf("%s: %v, want ErrInvalidAttr", a, err)
				}
			}
		}
		if len(m.link.joins) != 0 {
			t.Errorf("joins %v", m.link.joins)
		}
	})
	t.Run("twice, detach, again", func(t *testing.T) {
		m := newMcastDev(t, nil)
		a, b := m.ud(mcQKey, verbs.StateRTS), m.ud(mcQKey, verbs.StateRTS)
		must(t, a.AttachMcast(mcGID))
		must(t, a.AttachMcast(mcGID)) // the kernel's answer: 0, and one attachment
		must(t, b.AttachMcast(mcGID))
		if !slices.Equal(m.link.joins, []netip.Addr{mcGroup}) {
			t.Fatalf("joins %v, want one of %v", m.link.joins, mcGroup)
		}
		if got := m.dev.mcast.total; got != 2 {
			t.Errorf("%d attachments, want 2", got)
		}
		must(t, a.DetachMcast(mcGID))
		if err := a.DetachMcast(mcGID); !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "not attached") {
			t.Errorf("second detach: %v, want ErrInvalidAttr, not attached", err)
		}
		if len(m.link.leaves) != 0 {
			t.Errorf("left %v while b is attached", m.link.leaves)
		}
		must(t, b.DetachMcast(mcGID))
		if !slices.Equal(m.link.leaves, []netip.Addr{mcGroup}) {
			t.Errorf("leaves %v, want %v once the last QP went", m.link.leaves, mcGroup)
		}
		must(t, a.AttachMcast(mcGID))
		if len(m.link.joins) != 2 {
			t.Errorf("joins %v, want the group joined again", m.link.joins)
		}
		if err := b.DetachMcast(mcGID2); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("detach of a group nobody joined: %v", err)
		}
	})
	t.Run("destroy while attached", func(t *testing.T) {
		m := newMcastDev(t, nil)
		q := m.ud(mcQKey, verbs.StateRTS)
		must(t, q.AttachMcast(mcGID))
		must(t, q.AttachMcast(mcGID2))
		err := q.Destroy()
		if !errors.Is(err, verbs.ErrBusy) || !strings.Contains(err.Error(), "2 multicast group") {
			t.Fatalf("Destroy: %v, want ErrBusy naming 2 groups (ibv_destroy_qp's EBUSY)", err)
		}
		if q.State() != verbs.StateRTS {
			t.Errorf("state %v after a refused Destroy", q.State())
		}
		must(t, q.DetachMcast(mcGID))
		must(t, q.DetachMcast(mcGID2))
		must(t, q.Destroy())
		if err := q.AttachMcast(mcGID); !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("attach after Destroy: %v", err)
		}
		if len(m.link.leaves) != 2 {
			t.Errorf("leaves %v", m.link.leaves)
		}
	})
	t.Run("the device's Close leaves every group", func(t *testing.T) {
		m := newMcastDev(t, nil)
		a, b := m.ud(mcQKey, verbs.StateRTS), m.ud(mcQKey, verbs.StateInit)
		must(t, a.AttachMcast(mcGID))
		must(t, b.AttachMcast(mcGID))
		must(t, b.AttachMcast(mcGID2))
		must(t, m.dev.Close())
		got := slices.Clone(m.link.leaves)
		slices.SortFunc(got, netip.Addr.Compare)
		if !slices.Equal(got, []netip.Addr{mcGroup, mcGroup2}) {
			t.Errorf("leaves %v", got)
		}
		if err := a.AttachMcast(mcGID); err == nil {
			t.Error("attach after Close")
		}
	})
	t.Run("the link refuses", func(t *testing.T) {
		m := newMcastDev(t, nil)
		q := m.ud(mcQKey, verbs.StateRTS)
		boom := errors.New("no such interface")
		m.link.joinErr = boom
		if err := q.AttachMcast(mcGID); !errors.Is(err, boom) || !strings.Contains(err.Error(), "joining the group on the link") {
			t.Errorf("attach: %v, want the link's error", err)
		}
		if g := m.dev.mcast.groupsOf(q); len(g) != 0 {
			t.Errorf("attached to %v after the join failed", g)
		}
		m.link.joinErr = nil
		must(t, q.AttachMcast(mcGID))
		// An IPv6 group on an IPv4 link.
		if err := q.AttachMcast(verbs.MulticastGID(netip.MustParseAddr("ff15::1"))); err == nil ||
			!strings.Contains(err.Error(), "IP version") {
			t.Errorf("IPv6 group on an IPv4 link: %v", err)
		}
	})
	t.Run("a link without multicast", func(t *testing.T) {
		m := newMcastDev(t, noMcastLink{&fakeLink{addr: advLocal}})
		q := m.ud(mcQKey, verbs.StateRTS)
		err := q.AttachMcast(mcGID)
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, transport.ErrNoMulticast) {
			t.Errorf("attach: %v, want ErrUnsupported", err)
		}
	})
	t.Run("limits", func(t *testing.T) {
		m := newMcastDev(t, nil)
		m.dev.mcast.maxGroups, m.dev.mcast.maxQPs, m.dev.mcast.maxTotal = 2, 2, 3
		a, b, c := m.ud(mcQKey, verbs.StateRTS), m.ud(mcQKey, verbs.StateRTS), m.ud(mcQKey, verbs.StateRTS)
		must(t, a.AttachMcast(mcGID))
		must(t, b.AttachMcast(mcGID))
		full := func(err error, what string) {
			t.Helper()
			if !errors.Is(err, verbs.ErrMcastFull) || !strings.Contains(err.Error(), what) {
				t.Errorf("%v, want ErrMcastFull naming %s", err, what)
			}
		}
		full(c.AttachMcast(mcGID), "max_mcast_qp_attach")
		must(t, c.AttachMcast(mcGID2))
		full(a.AttachMcast(mcGID2), "max_total_mcast_qp_attach")
		must(t, c.DetachMcast(mcGID2))
		must(t, c.AttachMcast(verbs.MulticastGID(netip.MustParseAddr("239.255.0.3"))))
		full(a.AttachMcast(mcGID2), "max_mcast_grp")
		if got := m.dev.mcast.total; got != 3 {
			t.Errorf("%d attachments, want 3", got)
		}
	})
	t.Run("no QP numbered 0xFFFFFF", func(t *testing.T) {
		m := newMcastDev(t, nil)
		m.dev.qpMu.Lock()
		m.dev.nextQPN = verbs.MulticastQPN - 1
		m.dev.qpMu.Unlock()
		a, b := m.ud(mcQKey, verbs.StateInit), m.ud(mcQKey, verbs.StateInit)
		if a.QPN() != verbs.MulticastQPN-1 || b.QPN() != firstQPN {
			t.Errorf("QPNs %#x and %#x, want %#x then %#x (0xFFFFFF is the multicast QPN)", a.QPN(), b.QPN(),
				verbs.MulticastQPN-1, firstQPN)
		}
	})
}

// TestAdversaryMulticast: datagrams to the multicast QPN go to each QP
// attached to their destination group, each checked as its own: one copy
// to each, none to a QP not attached, a Q_Key, P_Key, state or opcode
// check failing for one QP only, nothing for a group nobody joined or a
// destination that is not a group.
func TestAdversaryMulticast(t *testing.T) {
	m := newMcastDev(t, nil)
	a := m.ud(mcQKey, verbs.StateRTS)     // 0: attached
	b := m.ud(mcQKey, verbs.StateRTR)     // 1: attached, receives in RTR
	c := m.ud(mcQKey, verbs.StateRTS)     // 2: not attached
	d := m.ud(mcQKey+1, verbs.StateRTS)   // 3: attached, another Q_Key
	e := m.ud(mcQKey, verbs.StateInit)    // 4: attached, not yet receiving
	other := m.ud(mcQKey, verbs.StateRTS) // 5: attached to the second group only
	for _, q := range []*QP{a, b, d, e} {
		must(t, q.AttachMcast(mcGID))
	}
	must(t, other.AttachMcast(mcGID2))
	want := func(step string, w []string) {
		t.Helper()
		if got := m.received(); !slices.Equal(got, w) {
			t.Errorf("%s: received %q, want %q", step, got, w)
		}
	}
	drops := func() uint64 { return m.dev.Stats().DropNoMcastGroup }

	m.inject(mcGroup, mcSend(100, mcQKey))
	want("one datagram", []string{"0:SUCCESS:140", "1:SUCCESS:140"})
	for q, ctr := range map[*QP]string{d: "drop_bad_qkey", e: "drop_bad_state"} {
		if got := m.counter(q, ctr); got != 1 {
			t.Errorf("%s of the QP it does not fit: %d, want 1", ctr, got)
		}
	}
	if got := m.counter(c, "rcvd_pkts"); got != 0 {
		t.Errorf("the QP not attached saw %d packets", got)
	}
	// What the receive holds: the GRH area with the group as destination,
	// then the payload.
	g := m.buf.Bytes()[:mcRecvLen]
	if dst := netip.AddrFrom4([4]byte(g[20+16 : 20+20])); dst != mcGroup {
		t.Errorf("GRH destination %v, want %v", dst, mcGroup)
	}
	if !bytes.Equal(g[GRHLen:GRHLen+100], mcSend(100, mcQKey).payload) {
		t.Error("payload not in the receive")
	}

	m.inject(mcGroup2, mcSend(8, mcQKey), mcSend(8, mcQKey+1))
	want("the second group", []string{"5:SUCCESS:48"})

	n := drops()
	m.inject(netip.MustParseAddr("239.255.0.9"), mcSend(8, mcQKey))
	m.inject(advLocal, mcSend(8, mcQKey)) // the multicast QPN to a unicast address: no group
	want("no group", nil)
	if got := drops() - n; got != 2 {
		t.Errorf("DropNoMcastGroup +%d, want 2", got)
	}

	rc := mcSend(8, mcQKey)
	rc.f.Opcode = bth.RCSendOnly
	m.inject(mcGroup, rc, mcSend(8, mcQKey).withPKey(0x1234))
	want("RC opcode, bad P_Key", nil)
	if m.counter(a, "drop_bad_transport") != 1 || m.counter(b, "drop_bad_transport") != 1 ||
		m.counter(a, "drop_bad_pkey") != 1 || m.counter(b, "drop_bad_pkey") != 1 {
		c := a.Counters()
		t.Errorf("each attached QP checks the opcode and the P_Key: %s", &c)
	}

	// A datagram to a QP's own number reaches it, whatever its IP
	// destination: rxe checks the addresses of RC and UC QPs only.
	m.inject(mcGroup, mcSend(8, mcQKey).withDestQP(c.QPN()))
	want("unicast QPN to the group's address", []string{"2:SUCCESS:48"})

	must(t, b.DetachMcast(mcGID))
	m.inject(mcGroup, mcSend(8, mcQKey))
	want("after b's detach", []string{"0:SUCCESS:48"})

	for _, q := range []*QP{a, d, e} {
		must(t, q.DetachMcast(mcGID))
	}
	n = drops()
	m.inject(mcGroup, mcSend(8, mcQKey))
	want("after the last detach", nil)
	if drops()-n != 1 {
		t.Error("a datagram to a group left was not counted")
	}
}

// mcastNet is devices on one simulated network, each with a UD QP or
// more, and a region for each QP's receives and sends.
type mcastNet struct {
	t   *testing.T
	net *mem.Network
}

type mcastHost struct {
	dev *Device
	pd  *PD
	cq  *CQ
	buf *mr.MR
	qps []*QP
}

func (n *mcastNet) host(addr netip.Addr, qps int, qkeys ...uint32) *mcastHost {
	n.t.Helper()
	ep, err := n.net.Endpoint(addr)
	must(n.t, err)
	d, err := New(ep, &Config{Clock: n.net.Clock(), Logger: testLogger(n.t)})
	must(n.t, err)
	n.t.Cleanup(func() { d.Close() })
	h := &mcastHost{dev: d}
	pdi, _ := d.AllocPD()
	h.pd = pdi.(*PD)
	cqi, err := d.CreateCQ(256)
	must(n.t, err)
	h.cq = cqi.(*CQ)
	h.buf, err = h.pd.pd.Register(make([]byte, qps*9*mcRecvLen), verbs.LocalWrite)
	must(n.t, err)
	for i := range qps {
		q, err := d.createQP(h.pd, &verbs.QPInitAttr{Type: verbs.UD, SendCQ: h.cq, RecvCQ: h.cq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(n.t, err)
		qkey := mcQKey
		if i < len(qkeys) {
			qkey = qkeys[i]
		}
		must(n.t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: qkey},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
		must(n.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState))
		must(n.t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1}, verbs.AttrState|verbs.AttrSQPSN))
		for j := range 8 {
			must(n.t, q.PostRecv([]verbs.RecvWR{{ID: uint64(i*100 + j),
				SGL: []verbs.SGE{sge(h.buf, (i*9+j)*mcRecvLen, mcRecvLen)}}}))
		}
		h.qps = append(h.qps, q)
	}
	return h
}

// send posts a signaled SEND of n bytes from QP i to the group.
func (h *mcastHost) send(t *testing.T, i int, group netip.Addr, n int) {
	t.Helper()
	ah, err := h.pd.CreateAH(verbs.AHAttr{DGID: verbs.MulticastGID(group), HopLimit: 64})
	must(t, err)
	src := (i*9 + 8) * mcRecvLen
	fill(h.buf.Bytes()[src:src+n], 3)
	must(t, h.qps[i].PostSend([]verbs.SendWR{{ID: 9000, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{sge(h.buf, src, n)}, AH: ah, RemoteQPN: verbs.MulticastQPN, RemoteQKey: mcQKey}}))
}

// completions drains the network and returns each QP's completions, as
// "QP-index:opcode:status".
func (n *mcastNet) completions(h *mcastHost) []string {
	n.t.Helper()
	if err := n.net.Run(func() bool { return false }, time.Second); err != mem.ErrIdle {
		n.t.Fatalf("drain: %v", err)
	}
	var out []string
	wcs := make([]verbs.WC, 64)
	for k := h.cq.Poll(wcs); k > 0; k = h.cq.Poll(wcs) {
		for _, wc := range wcs[:k] {
			i := slices.IndexFunc(h.qps, func(q *QP) bool { return q.QPN() == wc.QPN })
			out = append(out, fmt.Sprintf("%d:%v:%v", i, wc.Opcode, wc.Status))
		}
	}
	slices.Sort(out)
	return out
}

// TestMcastLoopback: a UD send to a group reaches every QP attached to it
// on every device of the network, once each, the sender's own QP
// included when it is attached, as rxe's sends come back through the
// host's IP multicast loopback; QPs not attached, and attached with
// another Q_Key, get nothing.
func TestMcastLoopback(t *testing.T) {
	n := &mcastNet{t: t, net: mem.NewNetwork(nil)}
	t.Cleanup(n.net.Close)
	a := n.host(addrA, 3)
	b := n.host(addrB, 2, mcQKey, mcQKey+1)
	must(t, a.qps[0].AttachMcast(mcGID)) // the sender
	must(t, a.qps[1].AttachMcast(mcGID))
	// a.qps[2] is not attached
	must(t, b.qps[0].AttachMcast(mcGID))
	must(t, b.qps[1].AttachMcast(mcGID)) // another Q_Key

	a.send(t, 0, mcGroup, 64)
	if got, want := n.completions(a), []string{"0:RECV:SUCCESS", "0:SEND:SUCCESS", "1:RECV:SUCCESS"}; !slices.Equal(got, want) {
		t.Errorf("sender's device: %q, want %q", got, want)
	}
	if got, want := n.completions(b), []string{"0:RECV:SUCCESS"}; !slices.Equal(got, want) {
		t.Errorf("receiver's device: %q, want %q", got, want)
	}
	if got := b.qps[1].Counters().DropBadQKey; got != 1 {
		t.Errorf("drop_bad_qkey of the QP of another Q_Key: %d", got)
	}
	// The copy the sender's own QP received holds what it sent.
	if got, want := a.buf.Bytes()[GRHLen:GRHLen+64], a.buf.Bytes()[8*mcRecvLen:8*mcRecvLen+64]; !bytes.Equal(got, want) {
		t.Error("the sender's copy differs from what it sent")
	}

	// From a QP that is not attached: the attached ones receive, it does not.
	a.send(t, 2, mcGroup, 32)
	if got, want := n.completions(a), []string{"0:RECV:SUCCESS", "1:RECV:SUCCESS", "2:SEND:SUCCESS"}; !slices.Equal(got, want) {
		t.Errorf("sender's device, unattached sender: %q, want %q", got, want)
	}
	if got, want := n.completions(b), []string{"0:RECV:SUCCESS"}; !slices.Equal(got, want) {
		t.Errorf("receiver's device, unattached sender: %q, want %q", got, want)
	}

	// Once B's QPs leave, B's device leaves the group: nothing reaches it.
	must(t, b.qps[0].DetachMcast(mcGID))
	must(t, b.qps[1].DetachMcast(mcGID))
	before := b.dev.t.Stats().RxPackets
	a.send(t, 1, mcGroup, 16)
	if got, want := n.completions(a), []string{"0:RECV:SUCCESS", "1:RECV:SUCCESS", "1:SEND:SUCCESS"}; !slices.Equal(got, want) {
		t.Errorf("after B left: %q, want %q", got, want)
	}
	if got := n.completions(b); len(got) != 0 || b.dev.t.Stats().RxPackets != before {
		t.Errorf("B received %q (%d packets) after leaving", got, b.dev.t.Stats().RxPackets-before)
	}
}
