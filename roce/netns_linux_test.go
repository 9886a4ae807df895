//go:build linux

package roce_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
)

// TestNetnsLoss runs goroce against goroce between two network namespaces
// joined by a veth pair, over each real transport, with 3 % of the RoCE
// datagrams leaving each end dropped by nftables: every operation, then
// 16 MiB written and read back with every byte checked. It needs root.
func TestNetnsLoss(t *testing.T) {
	for i, tr := range []string{"udp", "afpacket"} {
		t.Run(tr, func(t *testing.T) {
			nsA, nsB := netnstest.Veth(t, byte(20+i))
			droppedA := netnstest.Loss(t, nsA, "vA", 3)
			droppedB := netnstest.Loss(t, nsB, "vB", 3)
			open := func(ns, dev, addr string) *roce.Device {
				var d *roce.Device
				netnstest.In(t, ns, func() {
					var err error
					var l roce.Link = &roce.UDP{Addr: netip.MustParseAddr(addr)}
					if tr == "afpacket" {
						l = &roce.AFPacket{Interface: dev, Addr: netip.MustParseAddr(addr)}
					}
					d, err = roce.Open(&roce.Config{Link: l})
					if err != nil {
						t.Fatal(err)
					}
				})
				t.Cleanup(func() { d.Close() })
				return d
			}
			prefix := fmt.Sprintf("198.18.%d.", 20+i)
			da, db := open(nsA, "vA", prefix+"1"), open(nsB, "vB", prefix+"2")
			rocetest.EveryOperation(t, da, db)
			rocetest.Transfer(t, da, db, 16)
			dropped := droppedA() + droppedB()
			sa, sb := da.Stats(), db.Stats()
			t.Logf("%s: nftables dropped %d datagrams; A retransmitted %d packets, B sent %d sequence NAKs",
				tr, dropped, sa.Engine.Retransmits, sb.Engine.SendSeqErr)
			if dropped == 0 || sa.Engine.Retransmits == 0 {
				t.Errorf("no loss was recovered from: dropped %d, retransmitted %d", dropped, sa.Engine.Retransmits)
			}
		})
	}
}
