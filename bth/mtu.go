package bth

import "strconv"

// MTU is a path MTU as the IBTA enumerates it (Vol. 1 §9.6.5 and the
// PathMTU of a CM REQ, §12.6.5), and as libibverbs' enum ibv_mtu and
// perftest's handshake number it: 1 is 256 bytes, up to 5 for 4096. It
// bounds the payload of every packet of a message but the last. An MTU is
// a plain value.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of MTU256 to MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes, or 0 when m is not valid.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// String returns the MTU in bytes ("1024"), or "MTU(n)" when m is not
// valid.
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the MTU of exactly n bytes, and false unless n is
// 256, 512, 1024, 2048 or 4096: for a value a peer or a user gave.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// MTUAtMost returns the largest MTU not above n bytes, and false when n
// is below 256: the path MTU a link that carries n bytes of payload
// allows.
func MTUAtMost(n int) (MTU, bool) {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m, true
		}
	}
	return 0, false
}
