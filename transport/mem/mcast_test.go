package mem

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// TestMulticast: what an endpoint sends to a group reaches each endpoint
// that joined it, itself included, once each and with the group as its
// destination; the others, and those that left, get nothing.
func TestMulticast(t *testing.T) {
	n := NewNetwork(nil)
	group := netip.MustParseAddr("239.255.0.1")
	addrC := netip.MustParseAddr("198.18.0.3")
	got := map[netip.Addr][]transport.Packet{}
	eps := map[netip.Addr]*Endpoint{}
	for _, addr := range []netip.Addr{addrA, addrB, addrC} {
		e, err := n.Endpoint(addr)
		must(t, err)
		must(t, e.Start(func(p []transport.Packet) {
			for _, q := range p {
				q.Data = append([]byte(nil), q.Data...)
				got[addr] = append(got[addr], q)
			}
		}))
		eps[addr] = e
	}
	must(t, eps[addrA].JoinGroup(group))
	must(t, eps[addrB].JoinGroup(netip.MustParseAddr("::ffff:239.255.0.1")))
	pkt := transporttest.BuildPacket(rand.New(rand.NewPCG(1, 2)), bth.UDSendOnly, 16, 5)
	round := func(from netip.Addr, want ...netip.Addr) {
		t.Helper()
		clear(got)
		must(t, eps[from].Send([]transport.Packet{{Data: append([]byte(nil), pkt...), Src: from, Dst: group}}))
		n.Run(func() bool { return false }, time.Second)
		for _, addr := range []netip.Addr{addrA, addrB, addrC} {
			k := len(got[addr])
			wantOne := false
			for _, w := range want {
				wantOne = wantOne || w == addr
			}
			switch {
			case wantOne && k != 1:
				t.Errorf("from %v: %v got %d copies, want 1", from, addr, k)
			case !wantOne && k != 0:
				t.Errorf("from %v: %v got %d copies, want none", from, addr, k)
			case k == 1 && (got[addr][0].Dst != group || got[addr][0].Src != from || got[addr][0].Parsed == nil):
				t.Errorf("from %v: %v got a packet %v -> %v", from, addr, got[addr][0].Src, got[addr][0].Dst)
			}
		}
	}
	round(addrA, addrA, addrB) // the sender's own copy: multicast loopback
	round(addrC, addrA, addrB) // from an endpoint that did not join
	must(t, eps[addrB].LeaveGroup(group))
	round(addrC, addrA)
	n.SetFaults(Faults{Drop: 1})
	round(addrC)
	n.SetFaults(Faults{})
	must(t, eps[addrA].Close())
	round(addrC)
	if len(n.groups) != 0 {
		t.Errorf("groups left behind: %v", n.groups)
	}
}
