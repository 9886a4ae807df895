package roce_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/transport/mem"
)

// TestMultiLink runs every operation between a device of two addresses
// (an IPv4 and an IPv6 one) and peers of either family: its GID table
// holds both, in order, and it sends to each peer from the address of the
// peer's family (the peer's QP accepts only packets from the address it
// was given).
func TestMultiLink(t *testing.T) {
	a4, a6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("2001:db8::1")
	for _, tc := range []struct {
		name  string
		links roce.Multi
		peer  netip.Addr
		gids  []netip.Addr
		index int // of the device's GID of the peer's family
	}{
		{"v6 peer", roce.Multi{&roce.Mem{Addr: a4}, &roce.Mem{Addr: a6}}, netip.MustParseAddr("2001:db8::2"), []netip.Addr{a4, a6}, 1},
		{"v4 peer", roce.Multi{&roce.Mem{Addr: a6}, &roce.Mem{Addr: a4}}, netip.MustParseAddr("198.18.0.2"), []netip.Addr{a6, a4}, 1},
		{"v6 first", roce.Multi{&roce.Mem{Addr: a6}, &roce.Mem{Addr: a4}}, netip.MustParseAddr("2001:db8::2"), []netip.Addr{a6, a4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := mem.NewNetwork(&mem.Config{Live: true})
			defer n.Close()
			for _, l := range tc.links {
				l.(*roce.Mem).Network = n
			}
			a, err := roce.Open(&roce.Config{Link: tc.links})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if got := a.GIDs(); !slices.Equal(got, tc.gids) {
				t.Fatalf("GIDs() = %v, want %v", got, tc.gids)
			}
			for i, want := range tc.gids {
				if g, err := a.GID(i); err != nil || netip.AddrFrom16(g).Unmap() != want {
					t.Fatalf("GID(%d) = %v, %v; want %v", i, netip.AddrFrom16(g), err, want)
				}
			}
			if _, err := a.GID(len(tc.gids)); err == nil {
				t.Fatalf("GID(%d) of a table of %d: no error", len(tc.gids), len(tc.gids))
			}
			b, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: tc.peer}})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rocetest.EveryOperationGID(t, a, b, tc.index, 0)
		})
	}
}

// TestMultiLinkRefuses checks what a Multi link takes.
func TestMultiLinkRefuses(t *testing.T) {
	for name, l := range map[string]roce.Multi{"empty": {}, "nil link": {nil}} {
		if d, err := roce.Open(&roce.Config{Link: l}); err == nil {
			d.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
}
