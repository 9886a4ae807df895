//go:build linux

package udp

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"github.com/goroce/goroce/internal/mmsg"
	"golang.org/x/sys/unix"
)

// Kernel limits for UDP GSO (include/linux/udp.h): at most 64 segments
// (newer kernels allow 128) in one send.
const maxGSOSegments = 64

// Control message sizes.
var (
	cmsgHdrLen  = unix.CmsgLen(0)
	txCmsgSpace = unix.CmsgSpace(4) /* TOS or TCLASS */ + unix.CmsgSpace(2) /* UDP_SEGMENT */ +
		unix.CmsgSpace(unix.SizeofInet6Pktinfo) /* source address */
	rxCmsgSpace = unix.CmsgSpace(4) /* TOS or TCLASS */ + unix.CmsgSpace(4) /* UDP_GRO */ +
		unix.CmsgSpace(unix.SizeofInet6Pktinfo) + unix.CmsgSpace(4) /* SO_RXQ_OVFL */ + 32 /* headroom */
)

// putCmsg writes a control message header for level and typ with n data
// bytes at the start of b and returns the data slice and the space used.
func putCmsg(b []byte, level, typ int32, n int) (data []byte, used int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(n))
	used = unix.CmsgSpace(n)
	data = b[cmsgHdrLen : cmsgHdrLen+n]
	clear(b[cmsgHdrLen+n : used])
	return data, used
}

// rxMeta is what the control messages of one received datagram say.
type rxMeta struct {
	dst    netip.Addr // from IP_PKTINFO / IPV6_PKTINFO; invalid if absent
	tos    uint8
	gsoLen int // from UDP_GRO; 0 if absent
	// drops is the socket's count of datagrams dropped before this one
	// was queued (SO_RXQ_OVFL), when hasDrops: the kernel sends it once
	// the count is not 0.
	drops    uint32
	hasDrops bool
}

// parseCmsgs reads the control messages the receive path asks for.
// Messages it does not know are skipped; a malformed one ends the walk.
func parseCmsgs(b []byte, m *rxMeta) {
	*m = rxMeta{}
	for range 16 { // bounded: a datagram carries a few messages
		if len(b) < cmsgHdrLen {
			return
		}
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(b) {
			return
		}
		data := b[cmsgHdrLen:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			m.dst = netip.AddrFrom4([4]byte(data[8:12])) // ipi_addr: the header's destination
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			m.dst = netip.AddrFrom16([16]byte(data[:16]))
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			m.tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			m.tos = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			m.gsoLen = int(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			m.drops, m.hasDrops = binary.NativeEndian.Uint32(data), true
		}
		sp := unix.CmsgSpace(l - cmsgHdrLen)
		if sp >= len(b) {
			return
		}
		b = b[sp:]
	}
}

// countDrops counts the datagrams the socket dropped since *last, its drop
// count as an earlier datagram gave it, if m gives the count.
func (r *receiver) countDrops(m *rxMeta, last *uint32) {
	if m.hasDrops && m.drops != *last {
		r.stats.AddRxDropped(uint64(m.drops - *last)) // the count wraps at 2^32
		*last = m.drops
	}
}

// sockaddr is room for either raw socket address (mmsg.Sockaddr).
type sockaddr = mmsg.Sockaddr
