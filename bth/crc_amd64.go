package bth

import (
	"encoding/binary"
	"hash/crc32"
)

// haveFold reports whether fold256 can run: AVX-512 with carry-less
// multiplication on 512-bit registers, and an OS that saves them.
var haveFold = func() bool {
	_, _, c1, _ := cpuid(1, 0)
	const pclmul, osxsave, avx = 1 << 1, 1 << 27, 1 << 28
	if c1&(pclmul|osxsave|avx) != pclmul|osxsave|avx {
		return false
	}
	// XCR0: SSE and AVX state (bits 1, 2), opmask and ZMM state (5-7).
	if xcr0, _ := xgetbv(); xcr0&0xE6 != 0xE6 {
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const avx512f, vpclmulqdq = 1 << 16, 1 << 10
	return b7&avx512f != 0 && c7&vpclmulqdq != 0
}()

// foldK are the constants that move a 128-bit lane of the reflected IEEE
// CRC-32 D bytes on, for D = 256, 64, 48, 32 and 16: for its low and high
// quadwords, x^(8D+32) and x^(8D-32) modulo the polynomial, bit-reflected
// and shifted left one (Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ"). fold256 reads them; TestFoldConstants
// derives them again.
var foldK = [5][2]uint64{
	{0x11542778a, 0x1322d1430},
	{0x154442bd4, 0x1c6e41596},
	{0x3db1ecdc, 0x174359406},
	{0xf1da05aa, 0x15a546366},
	{0x1751997d0, 0xccaa009e},
}

// foldMin is the shortest input crcUpdate folds; shorter ones go to
// hash/crc32 whole.
const foldMin = 512

// crcUpdate is crc32.Update with the IEEE table. On AVX-512 machines it
// folds the bulk of p 256 bytes at a time in four independent 512-bit
// lanes (hash/crc32 folds one lane, so each step waits for the last
// multiplication), then finishes the 16-byte remainder of the fold and
// the tail the usual way: folding keeps the residue modulo the CRC
// polynomial, so those 16 bytes have the CRC the folded bytes had.
func crcUpdate(crc uint32, p []byte) uint32 {
	if !haveFold || len(p) < foldMin {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	n := len(p) &^ 255
	lo, hi := fold256(nil, ^crc, p[:n])
	return foldEnd(lo, hi, p[n:])
}

// crcJoined returns the CRC-32 of head followed by p, crc32.Update(0,
// head||p), without joining them: head (at most 128 bytes) goes into the
// fold as a block of its own, right-aligned after zeros, which leave the
// CRC alone once the initial register is XORed into head's first bytes.
func crcJoined(head, p []byte) uint32 {
	if !haveFold || len(p) < foldMin || len(head) < 4 || len(head) > 128 {
		return crcUpdate(crcShort(0, head), p)
	}
	var h [128]byte
	o := len(h) - len(head)
	copy(h[o:], head)
	binary.LittleEndian.PutUint32(h[o:], ^binary.LittleEndian.Uint32(h[o:]))
	n := len(p) &^ 255
	lo, hi := fold256(&h, 0, p[:n])
	return foldEnd(lo, hi, p[n:])
}

// foldEnd finishes a CRC from fold256's 16 bytes and the bytes after the
// folded ones.
func foldEnd(lo, hi uint64, tail []byte) uint32 {
	var v [16]byte
	binary.LittleEndian.PutUint64(v[:], lo)
	binary.LittleEndian.PutUint64(v[8:], hi)
	// A register of zero, that is ^0 in crc32.Update's terms, since the
	// initial value went into the first bytes folded.
	crc := crcShort(^uint32(0), v[:])
	if len(tail) == 0 {
		return crc
	}
	return crc32.Update(crc, crc32.IEEETable, tail)
}

// fold256 folds p, whose length is a non-zero multiple of 256, with the
// CRC register init XORed into its first four bytes and, if h is not nil,
// the 128 bytes of h before it, into 16 bytes (little-endian lo, hi) with
// the same residue.
//
//go:noescape
func fold256(h *[128]byte, init uint32, p []byte) (lo, hi uint64)

func cpuid(eax, ecx uint32) (a, b, c, d uint32)

func xgetbv() (eax, edx uint32)
