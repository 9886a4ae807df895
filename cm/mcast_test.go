package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// mcHost is a device with a UD QP and registered memory: the first 16
// slots of 1 KiB receive, the last one sends.
type mcHost struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

const mcSlots, mcSlot = 16, 1024

func newMcHost(t testing.TB, dev verbs.Device, qkey uint32) *mcHost {
	t.Helper()
	h := &mcHost{dev: dev}
	var err error
	if h.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	h.qp, err = h.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: mcSlots, MaxRecvWR: mcSlots, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p := &roce.ConnParams{QKey: qkey}
	for _, step := range []error{roce.ModifyToInit(h.qp, p), roce.ModifyToRTR(h.qp, nil, p), roce.ModifyToRTS(h.qp, p)} {
		if step != nil {
			t.Fatal(step)
		}
	}
	if h.mr, err = h.pd.RegMR(make([]byte, (mcSlots+1)*mcSlot), verbs.LocalWrite); err != nil {
		t.Fatal(err)
	}
	var wrs []verbs.RecvWR
	for i := range mcSlots {
		wrs = append(wrs, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: h.mr.Addr() + uint64(i*mcSlot), Length: mcSlot, LKey: h.mr.LKey()}}})
	}
	if err := h.qp.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
	return h
}

// send sends msg to the group m describes, with the address vector,
// QPN and Q_Key the join gave.
func (h *mcHost) send(t testing.TB, m *Multicast, msg string) {
	t.Helper()
	ah, err := h.pd.CreateAH(m.AH)
	if err != nil {
		t.Fatal(err)
	}
	off := mcSlots * mcSlot
	copy(h.mr.Bytes()[off:], msg)
	if err := h.qp.PostSend([]verbs.SendWR{{ID: 99, Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: ah,
		RemoteQPN: m.QPN, RemoteQKey: m.QKey,
		SGL: []verbs.SGE{{Addr: h.mr.Addr() + uint64(off), Length: uint32(len(msg)), LKey: h.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// received waits up to wait for n receive completions (and takes the send
// completions that come too), and returns the messages, after the GRH.
func (h *mcHost) received(t testing.TB, n int, wait time.Duration) []string {
	t.Helper()
	var got []string
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(wait)
	for len(got) < n && time.Now().Before(deadline) {
		k := h.cq.Poll(wcs)
		if k == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.Success {
				t.Errorf("completion %+v", wc)
				continue
			}
			if wc.Opcode == verbs.WCRecv {
				b := h.mr.Bytes()[wc.ID*mcSlot:]
				got = append(got, string(b[40:wc.ByteLen]))
				if err := h.qp.PostRecv([]verbs.RecvWR{{ID: wc.ID, SGL: []verbs.SGE{{Addr: h.mr.Addr() + wc.ID*mcSlot,
					Length: mcSlot, LKey: h.mr.LKey()}}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return got
}

// exchangeMulticast joins a and b to group, each with its QP, and checks
// that what each sends reaches both (the sender's own QP through the
// device's loopback), once, then that a leaves: b's next message reaches
// b only.
func exchangeMulticast(t *testing.T, a, b *mcHost, group netip.Addr) {
	t.Helper()
	ma, err := JoinMulticast(a.dev, group, &MulticastConfig{QP: a.qp})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := JoinMulticast(b.dev, group, &MulticastConfig{QP: b.qp})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := fmt.Sprintf("from b %d", i)
		b.send(t, mb, msg)
		for who, h := range map[string]*mcHost{"a": a, "b": b} {
			if got := h.received(t, 1, 5*time.Second); len(got) != 1 || got[0] != msg {
				t.Fatalf("%s received %q, want %q", who, got, msg)
			}
		}
	}
	a.send(t, ma, "from a")
	for who, h := range map[string]*mcHost{"a": a, "b": b} {
		if got := h.received(t, 1, 5*time.Second); len(got) != 1 || got[0] != "from a" {
			t.Fatalf("%s received %q", who, got)
		}
	}
	if err := ma.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := ma.Leave(); !errors.Is(err, ErrAddr) || !strings.Contains(err.Error(), "left already") {
		t.Errorf("second Leave: %v", err)
	}
	b.send(t, mb, "after a left")
	if got := b.received(t, 1, 5*time.Second); len(got) != 1 {
		t.Fatalf("b received %q", got)
	}
	if got := a.received(t, 1, 300*time.Millisecond); len(got) != 0 {
		t.Errorf("a received %q after it left", got)
	}
	if err := mb.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Destroy(); err != nil {
		t.Errorf("Destroy after Leave: %v", err)
	}
}

func memMcPair(t *testing.T) (a, b *mcHost, da, db *roce.Device) {
	t.Helper()
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	open := func(addr string) *roce.Device {
		ep, err := n.Endpoint(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		d, err := roce.Open(&roce.Config{Transport: ep})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	da, db = open("198.18.0.1"), open("198.18.0.2")
	return newMcHost(t, da, 0), newMcHost(t, db, 0), da, db
}

// TestJoinMulticast: the UD parameters a join gives, as the kernel's
// rdma_cm gives them for a RoCEv2 group, and what it refuses.
func TestJoinMulticast(t *testing.T) {
	a, _, da, _ := memMcPair(t)
	group := netip.MustParseAddr("239.255.0.7")
	m, err := JoinMulticast(da, group, &MulticastConfig{QP: a.qp})
	if err != nil {
		t.Fatal(err)
	}
	want := verbs.AHAttr{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 239, 13: 255, 15: 7}, HopLimit: 64, Port: 1}
	if m.AH != want || m.QPN != 0xFFFFFF || m.QKey != 0x01234567 || m.Group != group {
		t.Errorf("join gave %+v, QPN %#x, Q_Key %#x; want %+v, 0xFFFFFF, RDMA_UDP_QKEY", m.AH, m.QPN, m.QKey, want)
	}
	if err := a.qp.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("Destroy of the joined QP: %v, want ErrBusy", err)
	}
	if err := m.Leave(); err != nil {
		t.Fatal(err)
	}
	// Send-only: no attachment, so the QP goes.
	so, err := JoinMulticast(da, group, &MulticastConfig{QP: a.qp, SendOnly: true})
	if err != nil || so.AH != want {
		t.Fatalf("send-only join: %+v, %v", so, err)
	}
	rc, err := a.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: a.cq, RecvCQ: a.cq})
	if err != nil {
		t.Fatal(err)
	}
	other := newMcHost(t, da, 0x11111111)
	for _, c := range []struct {
		name  string
		dev   verbs.Device
		group string
		cfg   *MulticastConfig
		is    error
		words []string
	}{
		{"nil device", nil, "239.255.0.7", nil, nil, []string{"nil device"}},
		{"hardware device", hwDevice{}, "239.255.0.7", nil, ErrNotSoftware, nil},
		{"unicast", da, "198.18.0.9", nil, ErrAddr, []string{"not a multicast address"}},
		{"zero", da, "", nil, ErrAddr, []string{"not a multicast address"}},
		{"IPv6 on an IPv4 device", da, "ff15::7", nil, ErrAddr, []string{"no address of multicast group ff15::7's IP version"}},
		{"RC QP", da, "239.255.0.7", &MulticastConfig{QP: rc}, verbs.ErrInvalidAttr, []string{"UD QP"}},
		{"another Q_Key", da, "239.255.0.7", &MulticastConfig{QP: other.qp}, verbs.ErrInvalidAttr,
			[]string{"Q_Key 0x11111111", "0x1234567"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g netip.Addr
			if c.group != "" {
				g = netip.MustParseAddr(c.group)
			}
			_, err := JoinMulticast(c.dev, g, c.cfg)
			if err == nil || c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("%v, want %v", err, c.is)
			}
			for _, w := range c.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
	// The Q_Key the program chose, for a QP of that Q_Key.
	if m, err := JoinMulticast(da, group, &MulticastConfig{QP: other.qp, QKey: 0x11111111}); err != nil || m.QKey != 0x11111111 {
		t.Errorf("join with Q_Key 0x11111111: %+v, %v", m, err)
	} else if err := m.Leave(); err != nil {
		t.Error(err)
	}
	if err := (*Multicast)(nil).Leave(); !errors.Is(err, verbs.ErrNil) {
		t.Errorf("nil Leave: %v", err)
	}
}

// TestMulticastMem: two devices on the in-memory network exchange UD
// multicast through JoinMulticast's parameters.
func TestMulticastMem(t *testing.T) {
	a, b, _, _ := memMcPair(t)
	exchangeMulticast(t, a, b, netip.MustParseAddr("239.255.0.8"))
}
