package mr

import (
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
)

// keyGen makes the keys of one table: key n is a keyed pseudo-random
// permutation of n, so keys are unique until 2^32 of them have been made
// and cannot be told from random numbers by anyone without the table's
// secret. It is not safe for concurrent use; the table's mutex covers it.
//
// The permutation is a balanced Feistel network over 32 bits (two 16-bit
// halves) with feistelRounds rounds, each round's function the first two
// bytes of AES-128 under a key from crypto/rand, applied to the round
// number and the half. With AES as a pseudo-random function, ten rounds
// are the construction of NIST's FF1 format-preserving encryption for
// domains this size. It runs once per registration, never per packet.
type keyGen struct {
	block   cipher.Block
	n       uint32 // the next number to permute
	in, out [aes.BlockSize]byte
}

// feistelRounds is the number of rounds of the key permutation.
const feistelRounds = 10

// newKeyGen returns a generator with a fresh secret.
func newKeyGen() keyGen {
	var k [16]byte
	crand.Read(k[:]) // never fails (crypto/rand crashes the program instead)
	b, err := aes.NewCipher(k[:])
	if err != nil {
		panic("mr: AES-128 refused a 16-byte key: " + err.Error()) // cannot happen
	}
	return keyGen{block: b}
}

// next returns the next key.
func (g *keyGen) next() uint32 {
	k := g.permute(g.n)
	g.n++
	return k
}

// permute is the keyed permutation of the 32-bit numbers.
func (g *keyGen) permute(x uint32) uint32 {
	l, r := uint16(x>>16), uint16(x)
	for i := range feistelRounds {
		l, r = r, l^g.round(uint8(i), r)
	}
	return uint32(l)<<16 | uint32(r)
}

// round is the Feistel round function: 16 pseudo-random bits of the round
// number and the half.
func (g *keyGen) round(i uint8, half uint16) uint16 {
	g.in[0], g.in[1], g.in[2] = i, byte(half>>8), byte(half)
	g.block.Encrypt(g.out[:], g.in[:])
	return uint16(g.out[0])<<8 | uint16(g.out[1])
}
