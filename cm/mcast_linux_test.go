//go:build linux

package cm

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/roce"
)

// TestMulticastNetns: two goroce devices in network namespaces joined by
// a veth pair exchange UD multicast through JoinMulticast, over IPv4
// (239.255.43.1) and IPv6 (ff15::43:1), udp to udp and afpacket to udp:
// each message reaches both devices' QPs, the sender's through the
// loopback, and none reaches a device that left.
func TestMulticastNetns(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, linkA := range []string{"udp", "afpacket"} {
			fam := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
			t.Run(fmt.Sprintf("%s/%s-udp", fam, linkA), func(t *testing.T) {
				nsA, nsB := netnstest.Veth(t, 43)
				addr := func(h string) netip.Addr { return netip.MustParseAddr("198.18.43." + h) }
				group := netip.MustParseAddr("239.255.43.1")
				if v6 {
					addr = func(h string) netip.Addr { return netip.MustParseAddr("2001:db8:43::" + h) }
					group = netip.MustParseAddr("ff15::43:1")
					netnstest.WaitMulticastRoute(t, nsA, "vA")
					netnstest.WaitMulticastRoute(t, nsB, "vB")
				}
				open := func(ns string, l roce.Link) *roce.Device {
					var d *roce.Device
					netnstest.In(t, ns, func() {
						var err error
						if d, err = roce.Open(&roce.Config{Link: l}); err != nil {
							t.Fatal(err)
						}
					})
					t.Cleanup(func() { d.Close() })
					return d
				}
				var la roce.Link = &roce.UDP{Addr: addr("1")}
				if linkA == "afpacket" {
					la = &roce.AFPacket{Interface: "vA", Addr: addr("1")}
				}
				da, db := open(nsA, la), open(nsB, &roce.UDP{Addr: addr("2")})
				exchangeMulticast(t, newMcHost(t, da, 0), newMcHost(t, db, 0), group)
			})
		}
	}
}
