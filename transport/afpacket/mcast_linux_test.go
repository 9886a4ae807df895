//go:build linux

package afpacket

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
	"github.com/goroce/goroce/transport/udp"
)

// TestFilterGroups: a filter of the transport's address and its groups
// takes UDP to the port and any of them, and nothing else.
func TestFilterGroups(t *testing.T) {
	frame := func(dst netip.Addr, dport uint16) []byte {
		src := netip.MustParseAddr("198.18.1.1")
		if dst.Is6() {
			src = netip.MustParseAddr("2001:db8:1::1")
		}
		ff := bth.FrameFields{Ethernet: true, Flow: bth.Flow{Src: src, Dst: dst, SrcPort: 0xC000, DstPort: dport, DF: true}}
		b := make([]byte, ff.HeaderLen()+bth.BTHLen+bth.ICRCLen)
		bth.EncodeFrame(b, &ff)
		return b
	}
	run := func(addrs []netip.Addr, b []byte) bool {
		t.Helper()
		raw, err := filterFor(addrs, bth.UDPPort)
		if err != nil {
			t.Fatal(err)
		}
		ins, _ := bpf.Disassemble(raw)
		vm, err := bpf.NewVM(ins)
		if err != nil {
			t.Fatal(err)
		}
		n, err := vm.Run(b)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	p := netip.MustParseAddr
	for _, fam := range [][]netip.Addr{
		{p("198.18.1.2"), p("239.255.0.1"), p("239.255.0.2")},
		{p("2001:db8:1::2"), p("ff15::1"), p("ff15::1:2")},
	} {
		for k := 1; k <= len(fam); k++ {
			addrs := fam[:k]
			for i, a := range fam {
				if got, want := run(addrs, frame(a, bth.UDPPort)), i < k; got != want {
					t.Errorf("filter of %v, frame to %v: accepted %v", addrs, a, got)
				}
				if run(addrs, frame(a, 4792)) {
					t.Errorf("filter of %v took port 4792 to %v", addrs, a)
				}
			}
		}
		// Addresses that share all but their last word.
		near := fam[1].As16()
		near[15] ^= 1
		if run(fam, frame(netip.AddrFrom16(near).Unmap(), bth.UDPPort)) {
			t.Errorf("filter of %v took %v", fam, netip.AddrFrom16(near).Unmap())
		}
	}
	many := make([]netip.Addr, maxFilterAddrs)
	for i := range many {
		many[i] = netip.AddrFrom16([16]byte{0: 0xff, 1: 0x15, 15: byte(i)})
	}
	if !run(many, frame(many[len(many)-1], bth.UDPPort)) || run(many, frame(p("ff15::ff"), bth.UDPPort)) {
		t.Errorf("a filter of %d IPv6 addresses is wrong", len(many))
	}
	if _, err := filterFor(append(many, p("ff15::ff")), bth.UDPPort); err == nil {
		t.Error("a filter of too many addresses")
	}
	if _, err := filterFor([]netip.Addr{p("198.18.1.2"), p("ff15::1")}, bth.UDPPort); err == nil {
		t.Error("a filter of both IP versions")
	}
}

func TestMulticastMAC(t *testing.T) {
	for a, want := range map[string]string{
		"239.255.0.1": "01:00:5e:7f:00:01", "224.128.1.2": "01:00:5e:00:01:02", "ff15::1": "33:33:00:00:00:01",
		"ff15::41:dead:beef": "33:33:de:ad:be:ef",
	} {
		mac := multicastMAC(netip.MustParseAddr(a))
		if got := net.HardwareAddr(mac[:]).String(); got != want {
			t.Errorf("%s: %s, want %s", a, got, want)
		}
	}
}

// TestMulticastVeth: an afpacket transport joins a group on its veth (the
// group's MAC and IP addresses show on the interface, in the test's
// namespace only), receives what a udp transport across the veth sends to
// it, sends to it what the udp transport receives, gets its own sends back
// (loopback), and stops receiving once it left.
func TestMulticastVeth(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name, group, mac := "IPv4", netip.MustParseAddr("239.255.42.1"), "01:00:5e:7f:2a:01"
		aAddr, bAddr := netip.MustParseAddr("198.18.42.1"), netip.MustParseAddr("198.18.42.2")
		if v6 {
			name, group, mac = "IPv6", netip.MustParseAddr("ff15::42:1"), "33:33:00:42:00:01"
			aAddr, bAddr = netip.MustParseAddr("2001:db8:42::1"), netip.MustParseAddr("2001:db8:42::2")
		}
		t.Run(name, func(t *testing.T) {
			nsA, nsB := netnstest.Veth(t, 42)
			if v6 {
				netnstest.WaitMulticastRoute(t, nsB, "vB")
			}
			var a *Transport
			var b *udp.Transport
			netnstest.In(t, nsA, func() { a = mustNew(t, &Config{Interface: "vA", Addr: aAddr}) })
			netnstest.In(t, nsB, func() {
				var err error
				if b, err = udp.New(&udp.Config{Addr: netip.AddrPortFrom(bAddr, bth.UDPPort)}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
			})
			ca, cb := start(t, a), start(t, b)
			host, _ := exec.Command("ip", "maddr").CombinedOutput()
			rng := rand.New(rand.NewPCG(42, 1))
			send := func(from transport.Transport, n int) [][]byte {
				t.Helper()
				var sent [][]byte
				for i := range n {
					p := transport.Packet{Data: transporttest.BuildPacket(rng, bth.UDSendOnly, 32+4*i, bth.PSN(i)), Dst: group}
					if err := from.Send([]transport.Packet{p}); err != nil {
						t.Fatal(err)
					}
					sent = append(sent, p.Data) // sealed by Send
				}
				return sent
			}
			check := func(c *transporttest.Collector, who string, from transport.Transport, sent [][]byte) {
				t.Helper()
				got := c.Wait(len(sent), 5*time.Second)
				if len(got) != len(sent) {
					t.Fatalf("%s got %d of %d packets", who, len(got), len(sent))
				}
				for i, p := range got {
					if p.Dst != group || p.Src != from.LocalAddr() || !bytes.Equal(p.Data, sent[i]) {
						t.Errorf("%s packet %d: %v -> %v, %d bytes", who, i, p.Src, p.Dst, len(p.Data))
					}
				}
			}
			none := func(c *transporttest.Collector, who string) {
				t.Helper()
				if got := c.Wait(1, 300*time.Millisecond); len(got) != 0 {
					t.Errorf("%s got %d packets, want none", who, len(got))
				}
			}
			must(t, b.JoinGroup(group))
			send(b, 2)
			none(ca, "A before it joined")
			cb.Wait(2, 5*time.Second)

			must(t, a.JoinGroup(group))
			if err := a.JoinGroup(group); err == nil || !strings.Contains(err.Error(), "joined already") {
				t.Errorf("second join: %v", err)
			}
			m, err := exec.Command("ip", "-n", nsA, "maddr", "show", "dev", "vA").CombinedOutput()
			if err != nil || !strings.Contains(string(m), mac) || !strings.Contains(string(m), group.String()) {
				t.Errorf("vA lists neither %s nor %v (%v):\n%s", mac, group, err, m)
			}
			if now, _ := exec.Command("ip", "maddr").CombinedOutput(); string(now) != string(host) {
				t.Errorf("the host's interfaces changed:\n%s\nwas\n%s", now, host)
			}

			sent := send(b, 3)
			check(ca, "A", b, sent)
			check(cb, "B (its own)", b, sent)
			sent = send(a, 3)
			check(cb, "B", a, sent)
			check(ca, "A (its own, looped back)", a, sent)
			if s := a.Stats(); s.RxICRCErrors != 0 || s.RxMalformed != 0 {
				t.Errorf("A's drops: %+v", s)
			}

			must(t, a.LeaveGroup(group))
			if err := a.LeaveGroup(group); err == nil {
				t.Error("second leave")
			}
			send(b, 1)
			cb.Wait(1, 5*time.Second)
			none(ca, "A after it left")
			if m, _ := exec.Command("ip", "-n", nsA, "maddr", "show", "dev", "vA").CombinedOutput(); strings.Contains(string(m), mac) {
				t.Errorf("vA still lists %s:\n%s", mac, m)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
