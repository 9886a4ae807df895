package oob

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
