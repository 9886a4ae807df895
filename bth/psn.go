package bth

// PSN is a 24-bit packet sequence number. PSNs wrap from 0xFFFFFF to 0; two
// PSNs are ordered by their distance in a window of 2^23 either way (IBTA
// Vol. 1 §9.7.1), in the way of gVisor's seqnum for TCP.
type PSN uint32

// PSNMask keeps the low 24 bits of a PSN.
const PSNMask = 1<<24 - 1

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

// Add returns p advanced by n, wrapped to 24 bits.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Next returns p + 1, wrapped.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p - q in the 24-bit space, in
// [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32((p-q)<<8) >> 8 }

// LessThan reports whether p comes before q.
func (p PSN) LessThan(q PSN) bool { return p.Diff(q) < 0 }

// LessThanEq reports whether p comes before q or equals it.
func (p PSN) LessThanEq(q PSN) bool { return p.Diff(q) <= 0 }

// InWindow reports whether p lies in [first, first+size).
func (p PSN) InWindow(first PSN, size uint32) bool {
	return uint32((p-first)&PSNMask) < size
}

// InRange reports whether p lies in [first, end).
func (p PSN) InRange(first, end PSN) bool {
	return p.InWindow(first, uint32((end-first)&PSNMask))
}

// PadCount returns the number of pad bytes that bring a payload of n bytes
// to a multiple of 4.
func PadCount(n int) int { return -n & 3 }
