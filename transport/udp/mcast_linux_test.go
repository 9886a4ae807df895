//go:build linux

package udp

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// maddrs returns the multicast addresses `ip maddr` lists for dev in
// namespace ns ("" for the test's own).
func maddrs(t *testing.T, ns, dev string) string {
	t.Helper()
	args := []string{"maddr", "show"}
	if dev != "" {
		args = append(args, "dev", dev)
	}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestMulticastNetns joins groups on a veth pair between two namespaces,
// IPv4 (239.255.41.1) and IPv6 (ff15::41:1): the join shows on the
// namespace's interface and nowhere on the host's, what one end sends to
// the group reaches every transport that joined, its own included
// (loopback), two transports on one interface each once, and none that
// did not join or left.
func TestMulticastNetns(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name, group := "IPv4", netip.MustParseAddr("239.255.41.1")
		if v6 {
			name, group = "IPv6", netip.MustParseAddr("ff15::41:1")
		}
		t.Run(name, func(t *testing.T) {
			nsA, nsB := netnstest.Veth(t, 41)
			addr := func(host string) netip.Addr {
				if v6 {
					return netip.MustParseAddr("2001:db8:41::" + host)
				}
				return netip.MustParseAddr("198.18.41." + host)
			}
			if v6 {
				netnstest.Run(t, "ip", "-n", nsA, "addr", "add", addr("3").String()+"/64", "dev", "vA", "nodad")
				netnstest.WaitMulticastRoute(t, nsA, "vA")
				netnstest.WaitMulticastRoute(t, nsB, "vB")
			} else {
				netnstest.Run(t, "ip", "-n", nsA, "addr", "add", addr("3").String()+"/24", "dev", "vA")
			}
			open := func(ns string, a netip.Addr) (*Transport, *transporttest.Collector) {
				var tr *Transport
				netnstest.In(t, ns, func() { tr = mustNew(t, &Config{Addr: netip.AddrPortFrom(a, 0)}) })
				c := transporttest.NewCollector(t)
				if err := tr.Start(c.Handle); err != nil {
					t.Fatal(err)
				}
				return tr, c
			}
			a, ca := open(nsA, addr("1"))
			a2, ca2 := open(nsA, addr("3")) // a second device on vA
			b, cb := open(nsB, addr("2"))
			host := maddrs(t, "", "")

			// Joined from this goroutine, in the host's namespace: the
			// sockets go to the transports' own.
			for _, tr := range []*Transport{a, b} {
				if err := tr.JoinGroup(group); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.JoinGroup(group); err == nil || !strings.Contains(err.Error(), "joined already") {
				t.Errorf("second join: %v", err)
			}
			for ns, dev := range map[string]string{nsA: "vA", nsB: "vB"} {
				if m := maddrs(t, ns, dev); !strings.Contains(m, group.String()) {
					t.Errorf("%s of %s does not list %v:\n%s", dev, ns, group, m)
				}
			}
			if now := maddrs(t, "", ""); strings.Contains(now, group.String()) || now != host {
				t.Errorf("the host's interfaces changed:\n%s\nwas\n%s", now, host)
			}

			rng := rand.New(rand.NewPCG(41, 1))
			send := func(from *Transport, n int) [][]byte {
				t.Helper()
				var sent [][]byte
				for i := range n {
					data := transporttest.BuildPacket(rng, bth.UDSendOnly, 64+i, bth.PSN(i))
					sent = append(sent, data)
					if err := from.Send([]transport.Packet{{Data: append([]byte(nil), data...), Dst: group}}); err != nil {
						t.Fatal(err)
					}
				}
				return sent
			}
			check := func(c *transporttest.Collector, who string, from *Transport, sent [][]byte) {
				t.Helper()
				got := c.Wait(len(sent), 5*time.Second)
				if len(got) != len(sent) {
					t.Fatalf("%s got %d of %d packets", who, len(got), len(sent))
				}
				for i, p := range got {
					n := len(sent[i]) - bth.ICRCLen // the ICRC is the transport's to write
					if p.Dst != group || p.Src != from.LocalAddr() || len(p.Data) != len(sent[i]) ||
						string(p.Data[:n]) != string(sent[i][:n]) {
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

			sent := send(b, 3)
			check(ca, "A", b, sent)
			check(cb, "B (its own, looped back)", b, sent)
			none(ca2, "A2, not joined")

			if err := a2.JoinGroup(group); err != nil {
				t.Fatal(err)
			}
			sent = send(a, 2)
			check(ca, "A (its own)", a, sent)
			check(ca2, "A2", a, sent)
			check(cb, "B", a, sent)

			if err := a.LeaveGroup(group); err != nil {
				t.Fatal(err)
			}
			if err := a.LeaveGroup(group); err == nil || !strings.Contains(err.Error(), "not joined") {
				t.Errorf("second leave: %v", err)
			}
			sent = send(b, 1)
			check(ca2, "A2", b, sent)
			check(cb, "B", b, sent)
			none(ca, "A, after it left")

			if err := a2.LeaveGroup(group); err != nil {
				t.Fatal(err)
			}
			if m := maddrs(t, nsA, "vA"); strings.Contains(m, group.String()) {
				t.Errorf("vA still lists %v after its transports left:\n%s", group, m)
			}
			if len(a2.Groups()) != 0 || len(b.Groups()) != 1 {
				t.Errorf("groups: A2 %v, B %v", a2.Groups(), b.Groups())
			}
			// Close leaves what is still joined.
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if m := maddrs(t, nsB, "vB"); strings.Contains(m, group.String()) {
				t.Errorf("vB still lists %v after Close:\n%s", group, m)
			}
		})
	}
}

// TestJoinGroupRefuses: what a transport cannot join.
func TestJoinGroupRefuses(t *testing.T) {
	ip := netip.MustParseAddr("127.0.0.1")
	lo := mustNew(t, &Config{Addr: netip.AddrPortFrom(ip, freePort(t, ip))})
	g := netip.MustParseAddr("239.255.41.2")
	if err := lo.JoinGroup(g); !errors.Is(err, ErrNotStarted) {
		t.Errorf("before Start: %v", err)
	}
	if err := lo.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"127.0.0.2", "ff15::1", "0.0.0.0"} {
		if err := lo.JoinGroup(netip.MustParseAddr(bad)); err == nil {
			t.Errorf("joined %s", bad)
		}
	}
	wild := mustNew(t, &Config{Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), freePort(t, netip.IPv4Unspecified()))})
	if err := wild.JoinGroup(g); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "bind it to the address") {
		t.Errorf("wildcard: %v", err)
	}
	lo.Close()
	if err := lo.JoinGroup(g); err == nil {
		t.Error("joined after Close")
	}
}
