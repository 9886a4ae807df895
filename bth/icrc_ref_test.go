package bth

// referenceICRC is the slow, obviously correct ICRC of Annex A17: copy the
// IP packet, set the variant fields to ones, put 8 bytes of ones in front,
// and run a bitwise CRC-32 (reflected polynomial 0xEDB88320) over all but
// the last four bytes. It shares no code with the fast path.
func referenceICRC(ip []byte) uint32 {
	m := append(make([]byte, 0, 8+len(ip)), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF)
	m = append(m, ip...)
	h := m[8:]
	var udp int
	if h[0]>>4 == 4 {
		h[1] = 0xFF               // TOS
		h[8] = 0xFF               // TTL
		h[10], h[11] = 0xFF, 0xFF // header checksum
		udp = int(h[0]&0x0F) * 4
	} else {
		h[0] |= 0x0F                        // traffic class, high nibble
		h[1], h[2], h[3] = 0xFF, 0xFF, 0xFF // traffic class, flow label
		h[7] = 0xFF                         // hop limit
		udp = 40
	}
	h[udp+6], h[udp+7] = 0xFF, 0xFF // UDP checksum
	h[udp+8+4] = 0xFF               // BTH byte 4
	m = m[:len(m)-4]
	crc := uint32(0xFFFFFFFF)
	for _, c := range m {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xEDB88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}
