//go:build linux

package stress

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// cmRig is a server device with a CM agent and a listener whose Accept
// loop runs as a server's does (one goroutine, no deadline), a client
// device, and an attacker's address.
type cmRig struct {
	t        *testing.T
	ips      []netip.Addr // server, client, attacker
	port     uint16
	server   *roce.Device
	client   *roce.Device
	agent    *cm.Agent
	lis      *cm.Listener
	service  uint16 // the listener's rdma_cm port
	accepted atomic.Int64
	failed   atomic.Int64 // handshakes Accept reported failed
	done     chan struct{}
}

func newCMRig(t *testing.T, cfg *cm.Config) *cmRig {
	r := &cmRig{t: t, ips: loopbacks(3), service: 7471, done: make(chan struct{})}
	r.port = freePort(t, r.ips...)
	r.server = openDev(t, r.ips[0], r.port, nil)
	r.client = openDev(t, r.ips[1], r.port, nil)
	var err error
	if r.agent, err = cm.NewAgent(r.server, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.agent.Close() })
	if r.lis, err = r.agent.Listen(context.Background(), netip.AddrPortFrom(r.ips[0], r.service), nil); err != nil {
		t.Fatal(err)
	}
	var conns []*cm.Conn
	go func() {
		defer close(r.done)
		for {
			c, err := r.lis.Accept(context.Background())
			if errors.Is(err, cm.ErrClosed) {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			if err != nil {
				// A peer's handshake failed: go on, as a server does.
				r.failed.Add(1)
				if r.failed.Load() <= 3 {
					t.Logf("accept: %v", err)
				}
				continue
			}
			r.accepted.Add(1)
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		r.lis.Close()
		<-r.done
	})
	return r
}

// req returns a REQ for the listener from the attacker, as rdma_cm sends
// one but asking the server to wait as long as a REQ can say: a CM
// response timeout of 31 (2.4 hours) and 15 retries.
func (r *cmRig) req(id uint32) []byte {
	m := &mad.REQ{LocalCommID: id, ServiceID: mad.ServiceID(mad.PortSpaceTCP, r.service), LocalCAGUID: 0xBAD0000 + uint64(id),
		LocalQPN: id & 0xFFFFFF, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 31,
		TransportServiceType: mad.TransportRC, StartingPSN: id & 0xFFFFFF, LocalCMResponseTimeout: 31, RetryCount: 7,
		PKey: 0xFFFF, PathMTU: bth.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: verbs.GIDFromAddr(r.ips[2]),
			RemoteGID: verbs.GIDFromAddr(r.ips[0]), HopLimit: 64, LocalACKTimeout: 31}}
	h := mad.CMAHeader{SrcPort: uint16(id), Src: r.ips[2], Dst: r.ips[0]}
	if err := h.Marshal(m.PrivateData[:]); err != nil {
		r.t.Fatal(err)
	}
	b := make([]byte, mad.Len)
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, uint64(id)), m, b); err != nil {
		r.t.Fatal(err)
	}
	return b
}

// TestREQFlood: a peer sends rdma_cm REQs that it never completes (no
// RTU, whatever REP comes), each asking the server to wait as long as a
// REQ can; the agent's tables must stay within their bounds, and a
// legitimate Dial must still be accepted within 2 s, again and again.
func TestREQFlood(t *testing.T) {
	r := newCMRig(t, nil)
	h := newHostile(t, netip.AddrPortFrom(r.ips[2], 0), netip.AddrPortFrom(r.ips[0], r.port))
	// The attacker takes the REPs in (and never answers), so that no ICMP
	// error ends its handshakes early.
	newHostile(t, netip.AddrPortFrom(r.ips[2], r.port), netip.AddrPortFrom(r.ips[0], r.port))
	n, d := 2000, 2*time.Second
	if long() {
		n, d = 20000, 20*time.Second
	}
	var flood sync.WaitGroup
	flood.Add(1)
	base := rand.Uint32()
	go func() {
		defer flood.Done()
		for i := range n {
			h.send(h.build(pkt{op: bth.UDSendOnly, qpn: bth.GSIQPN, psn: bth.PSN(i), data: r.req(base + uint32(i)),
				payload: mad.Len, deth: &bth.DETHFields{QKey: bth.GSIQKey, SrcQP: bth.GSIQPN}}))
			time.Sleep(d / time.Duration(n))
		}
	}()
	var worst time.Duration
	dials := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); dials++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t0 := time.Now()
		c, err := cm.Dial(ctx, r.client, netip.AddrPortFrom(r.ips[0], r.service), nil)
		el := time.Since(t0)
		cancel()
		if err != nil {
			t.Fatalf("dial %d during the flood failed after %v: %v (stats %+v)", dials, el, err, r.agent.Stats())
		}
		worst = max(worst, el)
		c.Close()
		time.Sleep(100 * time.Millisecond)
	}
	flood.Wait()
	s := r.agent.Stats()
	if s.Conns > 256+16+dials+8 {
		t.Errorf("the agent tracks %d connections after %d bogus REQs (at most 256 half-open and a backlog of 16 "+
			"may wait)", s.Conns, n)
	}
	summary(t, "%d REQs that never finish in %v; %d dials each accepted within %v; the agent tracks %d connections, "+
		"gave %d handshakes up for newer ones, dropped %d REQs on a full backlog, refused %d", n, d, dials,
		worst.Round(time.Microsecond), s.Conns, s.Evicted, s.BacklogFull, s.Refused)
}
