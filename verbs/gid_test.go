package verbs

import (
	"net/netip"
	"testing"
)

func TestGID(t *testing.T) {
	for _, tc := range []struct {
		addr string
		gid  [16]byte
		back string // AddrFromGID(gid), if not addr
	}{
		{"198.18.0.11", [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 11}, ""},
		{"::ffff:198.18.0.12", [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 12}, "198.18.0.12"},
		{"2001:db8::11", [16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 15: 0x11}, ""},
		{"fe80::5054:ff:fe18:b%eth0", [16]byte{0: 0xfe, 1: 0x80, 8: 0x50, 9: 0x54, 11: 0xff, 12: 0xfe, 13: 0x18, 15: 0x0b}, "fe80::5054:ff:fe18:b"},
		{"::", [16]byte{}, ""},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			if g := GIDFromAddr(a); g != tc.gid {
				t.Errorf("GIDFromAddr(%v) = % x, want % x", a, g, tc.gid)
			}
			want := tc.addr
			if tc.back != "" {
				want = tc.back
			}
			if got := AddrFromGID(tc.gid); got != netip.MustParseAddr(want) {
				t.Errorf("AddrFromGID(% x) = %v, want %v", tc.gid, got, want)
			}
		})
	}
	if g := GIDFromAddr(netip.Addr{}); g != ([16]byte{}) {
		t.Errorf("zero Addr: % x", g)
	}
}
