package bth

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

func TestFoldConstants(t *testing.T) {
	// xn returns x^n modulo the CRC-32 polynomial, in normal bit order.
	xn := func(n int) uint32 {
		r := uint32(1)
		for range n {
			top := r & 0x80000000
			r <<= 1
			if top != 0 {
				r ^= 0x04C11DB7
			}
		}
		return r
	}
	k := func(n int) uint64 { return uint64(bits.Reverse32(xn(n))) << 1 }
	for i, d := range []int{256, 64, 48, 32, 16} {
		if want := [2]uint64{k(8*d + 32), k(8*d - 32)}; foldK[i] != want {
			t.Errorf("foldK[%d] (D=%d) = %#x, want %#x", i, d, foldK[i], want)
		}
	}
}

// TestCRCUpdate compares crcUpdate with hash/crc32 on every length up to
// a few KiB, at every alignment, from random registers, and in pieces.
func TestCRCUpdate(t *testing.T) { bothPaths(t, testCRCUpdate) }

// bothPaths runs test with the fold, where this machine has it, and with
// hash/crc32.
func bothPaths(t *testing.T, test func(*testing.T)) {
	if !haveFold {
		t.Log("no AVX-512 VPCLMULQDQ here: only hash/crc32's path runs")
	}
	for _, fold := range []bool{haveFold, false} {
		t.Run(map[bool]string{true: "fold", false: "hash/crc32"}[fold], func(t *testing.T) {
			defer func(h bool) { haveFold = h }(haveFold)
			haveFold = fold
			test(t)
		})
	}
}

func testCRCUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	buf := make([]byte, 10000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 9000; n += 1 + n/64 {
		off := rng.IntN(64)
		p := buf[off : off+n]
		init := rng.Uint32()
		if got, want := crcUpdate(init, p), crc32.Update(init, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d offset %d init %#x: %#x, want %#x", n, off, init, got, want)
		}
		cut := rng.IntN(n + 1)
		if got, want := crcUpdate(crcUpdate(init, p[:cut]), p[cut:]), crc32.Update(init, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d cut at %d: %#x, want %#x", n, cut, got, want)
		}
	}
}

// TestCRCJoined compares crcJoined(head, p) with hash/crc32 over head and
// p joined, for heads of every length up to 128 bytes and longer.
func TestCRCJoined(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 5))
		buf := make([]byte, 10000)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		for hn := 0; hn <= 140; hn++ {
			head := buf[:hn]
			n := []int{0, 1, 255, 256, 511, 512, 777, 4096, 4112, 4096 + 16 + 2}[hn%10]
			p := buf[200+rng.IntN(64):][:n]
			joined := append(append([]byte(nil), head...), p...)
			if got, want := crcJoined(head, p), crc32.ChecksumIEEE(joined); got != want {
				t.Fatalf("head %d bytes, p %d: %#x, want %#x", hn, n, got, want)
			}
		}
	})
}

func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 4096))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 777))
	f.Fuzz(func(t *testing.T, init uint32, p []byte) {
		if got, want := crcUpdate(init, p), crc32.Update(init, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d init %#x: %#x, want %#x", len(p), init, got, want)
		}
		if len(p) > 0 {
			cut := int(init % uint32(min(len(p), 160)))
			if got, want := crcJoined(p[:cut], p[cut:]), crc32.ChecksumIEEE(p); got != want {
				t.Fatalf("len %d joined at %d: %#x, want %#x", len(p), cut, got, want)
			}
		}
	})
}

func BenchmarkCRCUpdate(b *testing.B) {
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		crcUpdate(0, p)
	}
}
