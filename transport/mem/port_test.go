package mem

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// arrival is a packet as a port test's receiver saw it.
type arrival struct {
	psn bth.PSN
	at  time.Time
	tos uint8
}

// portPair returns a network with two started endpoints, a and b, and the
// arrivals at b.
func portPair(t *testing.T, cfg *Config) (*Network, *Endpoint, *[]arrival) {
	t.Helper()
	n := NewNetwork(cfg)
	a, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Endpoint(addrB)
	if err != nil {
		t.Fatal(err)
	}
	var got []arrival
	must(t, a.Start(func([]transport.Packet) {}))
	must(t, b.Start(func(p []transport.Packet) {
		for i := range p {
			got = append(got, arrival{p[i].Parsed.BTH.PSN(), n.Clock().Now(), p[i].TOS})
		}
	}))
	return n, a, &got
}

// burst sends count SEND_ONLY packets of size payload bytes from a to b at
// once, PSNs from 0, with TOS tos.
func burst(t *testing.T, a *Endpoint, count, size int, tos uint8) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	pkts := make([]transport.Packet, count)
	for i := range pkts {
		pkts[i] = transport.Packet{Data: transporttest.BuildPacket(rng, bth.RCSendOnly, size, bth.PSN(i)), Src: addrA, Dst: addrB, TOS: tos}
	}
	must(t, a.Send(pkts))
}

// TestPortRate checks that a port serializes packets at its rate, one
// after the other, and adds its delay and the network's latency: a burst
// arrives at exactly the times the wire sizes give.
func TestPortRate(t *testing.T) {
	n, a, got := portPair(t, &Config{Latency: 3 * time.Microsecond})
	// 1 Gbit/s: a byte takes 8 ns.
	must(t, n.SetPort(addrB, &Port{Rate: 1e9, Delay: 10 * time.Microsecond}))
	start := n.Clock().Now()
	const payload = 1024
	burst(t, a, 4, payload, 0)
	must(t, n.Run(func() bool { return len(*got) == 4 }, time.Second))
	wire := bth.BTHLen + payload + bth.ICRCLen + ipv4Overhead // a SEND_ONLY has no header but the BTH
	for i, g := range *got {
		want := start.Add(time.Duration((i+1)*wire*8) + 13*time.Microsecond)
		if g.psn != bth.PSN(i) || !g.at.Equal(want) {
			t.Errorf("packet %d: PSN %d at +%v, want PSN %d at +%v", i, g.psn, g.at.Sub(start), i, want.Sub(start))
		}
	}
	s := n.PortStats(addrB)
	if s.Packets != 4 || s.Bytes != uint64(4*wire) || s.Dropped != 0 || s.Queue != 0 || s.MaxQueue != 4*wire {
		t.Errorf("stats %+v: want 4 packets of %d bytes, the queue empty, at most all four in it", s, wire)
	}
}

// TestPortTailDrop checks that a packet that finds the buffer full is
// dropped, and only those: a buffer of two and a half packets takes the
// first two of a burst, then one each time one has left.
func TestPortTailDrop(t *testing.T) {
	n, a, got := portPair(t, nil)
	const payload = 1000
	wire := bth.BTHLen + payload + bth.ICRCLen + ipv4Overhead
	must(t, n.SetPort(addrB, &Port{Rate: 1e9, Buffer: wire * 5 / 2}))
	burst(t, a, 5, payload, 0)
	if s := n.PortStats(addrB); s.Packets != 2 || s.Dropped != 3 || s.Queue != 2*wire {
		t.Fatalf("after a burst of 5: %+v, want 2 queued (%d bytes), 3 dropped", s, 2*wire)
	}
	// Half a packet's time later a third fits, and only one.
	n.sim.Advance(time.Duration(wire*8) / 2)
	burst(t, a, 2, payload, 0)
	must(t, n.Run(func() bool { return len(*got) == 3 }, time.Second))
	if s := n.PortStats(addrB); s.Packets != 3 || s.Dropped != 4 {
		t.Errorf("after 2 more: %+v, want 3 queued in all, 4 dropped", s)
	}
	if ns := n.Stats(); ns.Dropped != 4 || ns.Delivered != 3 {
		t.Errorf("network stats %+v: want the port's 4 drops among its own", ns)
	}
}

// TestPortMarking checks the marking thresholds: with PMax 0 every
// ECN-capable packet that finds more than KMin bytes queued is marked CE,
// and none below; not-ECT packets are never marked; a packet already CE
// stays CE without counting.
func TestPortMarking(t *testing.T) {
	const payload = 1000
	wire := bth.BTHLen + payload + bth.ICRCLen + ipv4Overhead
	for _, c := range []struct {
		name      string
		tos       uint8
		wantTOS   func(i int) uint8
		wantCount uint64
	}{
		// Packets 0 and 1 find 0 and wire bytes queued (not more than
		// KMin = wire); packets 2 to 5 find more.
		{"ECT(0)", 0x02, func(i int) uint8 { return map[bool]uint8{true: 0x03, false: 0x02}[i >= 2] }, 4},
		{"ECT(1) with DSCP", 0xB9, func(i int) uint8 { return map[bool]uint8{true: 0xBB, false: 0xB9}[i >= 2] }, 4},
		{"not-ECT", 0xB8, func(int) uint8 { return 0xB8 }, 0},
		{"CE", 0x03, func(int) uint8 { return 0x03 }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, a, got := portPair(t, nil)
			must(t, n.SetPort(addrB, &Port{Rate: 1e9, KMin: wire, KMax: 3 * wire}))
			burst(t, a, 6, payload, c.tos)
			must(t, n.Run(func() bool { return len(*got) == 6 }, time.Second))
			for i, g := range *got {
				if w := c.wantTOS(i); g.tos != w {
					t.Errorf("packet %d: TOS %#x, want %#x", i, g.tos, w)
				}
			}
			if s := n.PortStats(addrB); s.Marked != c.wantCount {
				t.Errorf("marked %d, want %d", s.Marked, c.wantCount)
			}
		})
	}
}

// TestPortMarkingProbability checks that between KMin and KMax a packet is
// marked with probability PMax·(q-KMin)/(KMax-KMin): over many packets that
// all find the queue at the same place, the fraction marked is near it, and
// a run with the same seed marks the same packets.
func TestPortMarkingProbability(t *testing.T) {
	const payload = 64
	wire := bth.BTHLen + payload + bth.ICRCLen + ipv4Overhead
	run := func() (marked uint64, pattern []bool) {
		n, a, got := portPair(t, &Config{Seed: 7})
		// A queue of KMin + (KMax-KMin)/2 held there: each packet is sent
		// when the one before it has left.
		kmin, kmax := 10*wire, 30*wire
		must(t, n.SetPort(addrB, &Port{Rate: 1e9, KMin: kmin, KMax: kmax, PMax: 0.2}))
		burst(t, a, 20, payload, 0x02) // 20 wire packets: the queue's level
		must(t, n.Run(func() bool { return n.PortStats(addrB).Packets == 20 }, time.Second))
		before := n.PortStats(addrB).Marked
		for range 4000 {
			burst(t, a, 1, payload, 0x02)
			n.sim.Advance(time.Duration(wire * 8))
			n.Step()
		}
		must(t, n.Run(func() bool { return len(*got) == 4020 }, time.Second))
		for _, g := range (*got)[20:] {
			pattern = append(pattern, g.tos == 0x03)
		}
		return n.PortStats(addrB).Marked - before, pattern
	}
	m1, p1 := run()
	// Each packet finds 20 packets queued, 10 past KMin of the 20 between
	// the thresholds: a probability of 0.2·10/20 = 0.1 (the 4000 draws
	// land within 0.085 and 0.115 but once in a thousand seeds).
	if f := float64(m1) / 4000; f < 0.085 || f > 0.115 {
		t.Errorf("marked %d of 4000 (%.3f), want about 0.1", m1, f)
	}
	_, p2 := run()
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatalf("packet %d marked differently in two runs with one seed", i)
		}
	}
}

// TestPortIPv6 checks that an IPv6 packet counts its 40-byte header.
func TestPortIPv6(t *testing.T) {
	a6, b6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	n := NewNetwork(nil)
	a, _ := n.Endpoint(a6)
	b, _ := n.Endpoint(b6)
	must(t, a.Start(func([]transport.Packet) {}))
	must(t, b.Start(func([]transport.Packet) {}))
	must(t, n.SetPort(b6, &Port{Rate: 1e9}))
	rng := rand.New(rand.NewPCG(1, 2))
	must(t, a.Send([]transport.Packet{{Data: transporttest.BuildPacket(rng, bth.RCSendOnly, 100, 0), Src: a6, Dst: b6}}))
	if s := n.PortStats(b6); s.Bytes != uint64(bth.BTHLen+100+bth.ICRCLen+ipv6Overhead) {
		t.Errorf("an IPv6 packet of %d RoCE bytes took %d wire bytes, want %d", bth.BTHLen+100+bth.ICRCLen, s.Bytes,
			bth.BTHLen+100+bth.ICRCLen+ipv6Overhead)
	}
}

// TestSetPort checks SetPort's errors, and that a nil port removes it.
func TestSetPort(t *testing.T) {
	n := NewNetwork(nil)
	for _, c := range []struct {
		p    Port
		want string
	}{
		{Port{}, "positive line rate"},
		{Port{Rate: 1e9, Buffer: -1}, "Buffer"},
		{Port{Rate: 1e9, KMin: 10, KMax: 5}, "KMin <= KMax"},
		{Port{Rate: 1e9, PMax: 1.5}, "probability"},
		{Port{Rate: 1e9, Delay: -time.Second}, "Delay"},
	} {
		err := n.SetPort(addrB, &c.p)
		if !errors.Is(err, ErrBadPort) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetPort(%+v): %v, want ErrBadPort saying %q", c.p, err, c.want)
		}
	}
	if err := n.SetPort(netip.Addr{}, &Port{Rate: 1}); !errors.Is(err, ErrBadPort) {
		t.Errorf("SetPort without an address: %v", err)
	}
	must(t, n.SetPort(addrB, &Port{Rate: 1e9}))
	must(t, n.SetPort(addrB, nil))
	if n.ports[addrB] != nil {
		t.Error("a nil port did not remove the port")
	}
}
