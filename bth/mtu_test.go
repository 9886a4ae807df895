package bth

import (
	"strconv"
	"testing"
)

func TestMTU(t *testing.T) {
	for _, c := range []struct {
		m MTU
		n int
	}{{MTU256, 256}, {MTU512, 512}, {MTU1024, 1024}, {MTU2048, 2048}, {MTU4096, 4096}} {
		if !c.m.Valid() || c.m.Bytes() != c.n || c.m.String() != strconv.Itoa(c.n) {
			t.Errorf("%d: Valid %v Bytes %d String %q", c.m, c.m.Valid(), c.m.Bytes(), c.m.String())
		}
		if m, ok := MTUFromBytes(c.n); !ok || m != c.m {
			t.Errorf("MTUFromBytes(%d) = %d %v", c.n, m, ok)
		}
		if m, ok := MTUAtMost(c.n); !ok || m != c.m {
			t.Errorf("MTUAtMost(%d) = %d %v", c.n, m, ok)
		}
	}
	for _, m := range []MTU{0, 6, 15} {
		if m.Valid() || m.Bytes() != 0 || m.String() != "MTU("+strconv.Itoa(int(m))+")" {
			t.Errorf("MTU(%d): Valid %v Bytes %d String %q", m, m.Valid(), m.Bytes(), m.String())
		}
	}
	for _, n := range []int{0, 255, 1500, 8192} {
		if m, ok := MTUFromBytes(n); ok {
			t.Errorf("MTUFromBytes(%d) = %d", n, m)
		}
	}
	for _, c := range []struct {
		n  int
		m  MTU
		ok bool
	}{{-1, 0, false}, {255, 0, false}, {257, MTU256, true}, {1500, MTU1024, true}, {9000, MTU4096, true}} {
		if m, ok := MTUAtMost(c.n); m != c.m || ok != c.ok {
			t.Errorf("MTUAtMost(%d) = %v %v, want %v %v", c.n, m, ok, c.m, c.ok)
		}
	}
}
