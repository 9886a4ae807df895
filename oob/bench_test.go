package oob

import (
	"context"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

var (
	benchDest = Dest{LID: 0x12, QPN: 0x2d, PSN: 0x8e97c0, GID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.12"))}
	benchPD   = PerftestDest{OutReads: 1, QPN: 0x2d, PSN: 0x8e97c0, RKey: 0x1f73, VAddr: 0x557572c0e000,
		GID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.12"))}
)

// The codecs allocate nothing on the success path.
func TestCodecAllocs(t *testing.T) {
	var b [PerftestDestLen]byte
	var r [72]byte
	c := CompatFor(PerftestVersion)
	rep := BWReport{Size: 4096, Iters: 20, BWPeak: 1}
	for name, f := range map[string]func(){
		"Dest.Encode": func() { _ = benchDest.Encode(b[:]) },
		"ParseDest": func() {
			if _, err := ParseDest(b[:DestLen]); err != nil {
				panic(err)
			}
		},
		"PerftestDest.Encode": func() { _ = benchPD.Encode(b[:]) },
		"ParsePerftestDest": func() {
			if _, err := ParsePerftestDest(b[:]); err != nil {
				panic(err)
			}
		},
		"BWReport": func() {
			n, _ := rep.Encode(r[:], c, true)
			if _, err := ParseBWReport(r[:n], c, true); err != nil {
				panic(err)
			}
		},
	} {
		if name == "ParseDest" {
			_ = benchDest.Encode(b[:])
		}
		if name == "ParsePerftestDest" {
			_ = benchPD.Encode(b[:])
		}
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}
}

func BenchmarkDest(b *testing.B) {
	var buf [DestLen]byte
	b.Run("Encode", func(b *testing.B) {
		b.SetBytes(DestLen)
		b.ReportAllocs()
		for b.Loop() {
			_ = benchDest.Encode(buf[:])
		}
	})
	_ = benchDest.Encode(buf[:])
	b.Run("Parse", func(b *testing.B) {
		b.SetBytes(DestLen)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseDest(buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPerftestDest(b *testing.B) {
	var buf [PerftestDestLen]byte
	b.Run("Encode", func(b *testing.B) {
		b.SetBytes(PerftestDestLen)
		b.ReportAllocs()
		for b.Loop() {
			_ = benchPD.Encode(buf[:])
		}
	})
	_ = benchPD.Encode(buf[:])
	b.Run("Parse", func(b *testing.B) {
		b.SetBytes(PerftestDestLen)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParsePerftestDest(buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPerftestSession is a whole ib_write_bw exchange (one QP) over
// loopback TCP, both sides in this process: what the control plane costs.
func BenchmarkPerftestSession(b *testing.B) {
	plan := perftestPlans["rxe_write_bw"]
	in := decoded{sys: DefaultSysData, mtu: bth.MTU1024, dests: []PerftestDest{benchPD}}
	b.ReportAllocs()
	for b.Loop() {
		c, s := connPair(b)
		ctx := context.Background()
		errc := make(chan error, 1)
		go func() {
			_, err := runPlan(ctx, NewPerftest(s, Server, nil), plan, in)
			errc <- err
		}()
		if _, err := runPlan(ctx, NewPerftest(c, Client, nil), plan, in); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
