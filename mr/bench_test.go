package mr

import (
	"fmt"
	"testing"
)

// BenchmarkLookup measures the key check every request packet makes: a
// hit (a live key, as the data path sees it) and a miss (a key no region
// has, as a guesser's packets see it), in tables of a few and of many
// regions.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{16, 100000} {
		tab := NewTable()
		pd := tab.AllocPD()
		keys := make([]uint32, n)
		var m *MR
		for i := range keys {
			var err error
			if m, err = pd.Register(make([]byte, 64), LocalWrite|RemoteWrite); err != nil {
				b.Fatal(err)
			}
			keys[i] = m.RKey()
		}
		b.Run(fmt.Sprintf("hit/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r, _, err := tab.Lookup(pd, 0, keys[i%n], m.Addr(), 0, 0)
				if err == nil {
					r.Release(0)
				}
			}
		})
		b.Run(fmt.Sprintf("miss/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, _, err := tab.Lookup(pd, 0, uint32(i)*0x9E3779B9, 0, 1, RemoteWrite); err == nil {
					b.Fatal("a guessed key was accepted")
				}
			}
		})
	}
}

// BenchmarkRegister measures a registration and its deregistration.
func BenchmarkRegister(b *testing.B) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		m, err := pd.Register(buf, LocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		m.Dereg()
	}
}
