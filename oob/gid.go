package oob

import "net/netip"

// GIDFromAddr returns the RoCEv2 GID of an IP address: an IPv6 address as
// is, an IPv4 address as the IPv4-mapped IPv6 address ::ffff:a.b.c.d (the
// form rxe and every RoCEv2 device use). A zone is dropped; the zero Addr
// gives the zero GID.
func GIDFromAddr(a netip.Addr) [16]byte {
	return a.As16()
}

// AddrFromGID returns the IP address of a RoCEv2 GID: an IPv4-mapped GID
// (::ffff:a.b.c.d) as the IPv4 address a.b.c.d, any other as an IPv6
// address.
func AddrFromGID(gid [16]byte) netip.Addr {
	return netip.AddrFrom16(gid).Unmap()
}

const hexDigits = "0123456789abcdef"

// putHex writes v as len(b) lowercase hex digits, most significant first.
// The caller has checked that v fits.
func putHex(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[v&0xF]
		v >>= 4
	}
}

// unhex returns the value of one hex digit (either case) and whether c is
// one.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// getHex parses b, at most 16 hex digits. On a bad digit it returns its
// index in b.
func getHex(b []byte) (v uint64, bad int, ok bool) {
	for i, c := range b {
		d, ok := unhex(c)
		if !ok {
			return 0, i, false
		}
		v = v<<4 | uint64(d)
	}
	return v, 0, true
}
