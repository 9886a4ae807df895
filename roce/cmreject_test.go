package roce_test

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// gsiPeer is a raw GSI QP that sends CM MADs and waits for answers, as a
// peer's CM would.
type gsiPeer struct {
	t   *testing.T
	qp  verbs.QP
	cq  verbs.CQ
	mr  verbs.MR
	ah  verbs.AH
	buf []byte
}

func newGSIPeer(t *testing.T, d verbs.Device, to netip.Addr) *gsiPeer {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	g := &gsiPeer{t: t}
	if g.cq, err = d.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if g.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.GSI, SendCQ: g.cq, RecvCQ: g.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: mad.Len}}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []verbs.QPAttr{{State: verbs.StateInit, QKey: bth.GSIQKey}, {State: verbs.StateRTR}, {State: verbs.StateRTS}} {
		mask := verbs.AttrState
		if a.State == verbs.StateInit {
			mask |= verbs.AttrPKeyIndex | verbs.AttrQKey
		}
		if a.State == verbs.StateRTS {
			mask |= verbs.AttrSQPSN
		}
		if err := g.qp.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	g.buf = make([]byte, 40+mad.Len)
	if g.mr, err = pd.RegMR(g.buf, verbs.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if g.ah, err = pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(to), HopLimit: 64, Port: 1}); err != nil {
		t.Fatal(err)
	}
	return g
}

// ask sends m and returns the answer that comes within wait, or nil.
func (g *gsiPeer) ask(m mad.Message, wait time.Duration) mad.Message {
	g.t.Helper()
	if err := g.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{{Addr: g.mr.Addr(), Length: uint32(len(g.buf)), LKey: g.mr.LKey()}}}}); err != nil {
		g.t.Fatal(err)
	}
	out := make([]byte, mad.Len)
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, 0x1234), m, out); err != nil {
		g.t.Fatal(err)
	}
	if err := g.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Inline | verbs.Signaled, InlineData: out,
		AH: g.ah, RemoteQPN: bth.GSIQPN, RemoteQKey: bth.GSIQKey}}); err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if g.cq.Poll(wc) == 1 {
			if wc[0].Opcode != verbs.WCRecv {
				continue
			}
			if wc[0].Status != verbs.Success {
				g.t.Fatalf("receive: %v", &wc[0])
			}
			h, a, err := mad.Decode(g.buf[40:])
			if err != nil || h.TID != 0x1234 {
				g.t.Fatalf("answer: %v (TID %#x)", err, h.TID)
			}
			return a
		}
		if g.cq.Wait(ctx) != nil {
			// Flush the receive so that the next ask can post again.
			return nil
		}
	}
}

// TestNoAgentRejects checks that a device with no CM agent answers a
// connection request at once with a REJ "invalid service ID", a DREQ with
// a DREP and a SIDR_REQ with "service ID not supported"; that a GSI QP
// made on it takes QP 1 over; and that the answers come back once it is
// gone.
func TestNoAgentRejects(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	addrA, addrB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	a := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: addrA}})
	b := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: addrB}})
	peer := newGSIPeer(t, b, addrA)
	req := &mad.REQ{LocalCommID: 77, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174), LocalQPN: 0x11,
		TransportServiceType: mad.TransportRC, PathMTU: bth.MTU1024, RetryCount: 7, RNRRetryCount: 7,
		MaxCMRetries: 15, PKey: 0xFFFF}
	start := time.Now()
	rej, ok := peer.ask(req, 5*time.Second).(*mad.REJ)
	if !ok || rej.Reason != mad.RejInvalidServiceID || rej.RemoteCommID != 77 || rej.MessageRejected != mad.RejectedREQ {
		t.Fatalf("answer to a REQ: %+v, want a REJ invalid service ID", rej)
	}
	t.Logf("REJ after %v", time.Since(start))
	if drep, ok := peer.ask(&mad.DREQ{LocalCommID: 5, RemoteCommID: 6}, 5*time.Second).(*mad.DREP); !ok ||
		drep.LocalCommID != 6 || drep.RemoteCommID != 5 {
		t.Fatalf("answer to a DREQ: %+v", drep)
	}
	sidr := &mad.SIDRREQ{RequestID: 9, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 4000), PKey: 0xFFFF}
	if rep, ok := peer.ask(sidr, 5*time.Second).(*mad.SIDRREP); !ok || rep.Status != mad.SIDRServiceUnsupported ||
		rep.RequestID != 9 {
		t.Fatalf("answer to a SIDR_REQ: %+v", rep)
	}

	// A GSI QP of the device's own takes the requests.
	own := newGSIPeer(t, a, addrB)
	if m := peer.ask(req, 200*time.Millisecond); m != nil {
		t.Fatalf("answered while the device has a GSI QP: %+v", m)
	}
	if err := own.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if rej, ok := peer.ask(req, 5*time.Second).(*mad.REJ); !ok || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("answer once the GSI QP is gone: %+v", rej)
	}
}

// TestNotifyUnreachable checks that an ICMP port unreachable the udp link
// gets reaches the device's watcher: a datagram to a loopback address
// where nothing listens.
func TestNotifyUnreachable(t *testing.T) {
	port := freePort(t)
	d := openT(t, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}})
	got := make(chan transport.Unreachable, 8)
	defer d.NotifyUnreachable(func(u transport.Unreachable) {
		select {
		case got <- u:
		default:
		}
	})()
	dead := netip.MustParseAddr("127.0.0.2") // no socket on port there
	g := newGSIPeer(t, d, dead)
	g.ask(&mad.DREQ{LocalCommID: 1}, time.Millisecond)
	select {
	case u := <-got:
		if u.Dst != dead || !errors.Is(u.Err, syscall.ECONNREFUSED) {
			t.Errorf("notice %+v", u)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no notice within 3 s")
	}
	// A link that has no notices (here a Config.Transport that hides them)
	// never calls the watcher, and stopping does nothing.
	n := mem.NewNetwork(nil)
	ep, err := n.Endpoint(netip.MustParseAddr("198.18.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	m := openT(t, &roce.Config{Transport: struct{ transport.Transport }{ep}})
	m.NotifyUnreachable(func(transport.Unreachable) { t.Error("called") })()
}
