package cm

import (
	"math/bits"
	"net/netip"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/verbs"
)

// Values rdma_cm and the kernel's IB CM put in their messages, as the
// captures of kernel rxe show them (testdata/captures/rxe_*_rdmacm.pcap;
// drivers/infiniband/core/cm.c and cma.c).
const (
	// DefaultResponseTimeout is the CM response timeout exponent rdma_cm
	// announces (4.096 µs × 2^20, about 4.3 s).
	DefaultResponseTimeout = 20
	// DefaultMaxRetries is rdma_cm's max CM retries.
	DefaultMaxRetries = 15
	// DefaultPacketLifeTime is the packet life time exponent rdma_cm
	// uses for RoCE paths; with the CA ACK delay it gives the local ACK
	// timeout of 19 seen in the captures.
	DefaultPacketLifeTime = 18
	// DefaultConnectTimeout bounds the wait of Dial and ResolveDatagram
	// for a peer that never answers (Config.ConnectTimeout): four REQs,
	// 6.4 s apart, with rdma_cm's timeouts, where the retries the REQ
	// announces would take 103 s.
	DefaultConnectTimeout = 25 * time.Second
	// DefaultCloseWait is how long Conn.Close waits for the peer's DREP
	// (Config.CloseWait): a peer that is up answers in a round trip; one
	// that is not gets the DREQ again in the background.
	DefaultCloseWait = time.Second
	// DefaultMaxConns is Config.MaxConns's default: as many connections
	// as a device has QPs by default (qp.DefaultMaxQPs).
	DefaultMaxConns = 1 << 16
	// DefaultMaxHalfOpen is Config.MaxHalfOpen's default. A handshake
	// takes a round trip; to push a peer's out before its RTU comes, a
	// flood would need this many REQs a round trip (256,000 a second at
	// 1 ms), far more than the agent takes.
	DefaultMaxHalfOpen = 256
	// caACKDelay is the CA ACK delay the agent announces as the REP's
	// target ACK delay (rxe's value).
	caACKDelay = 15
	// lidPermissive is the LID of both ends of a RoCE path.
	lidPermissive = 0xFFFF
	// defaultPKey is the only P_Key of RoCE.
	defaultPKey = 0xFFFF
	// hopLimit is the hop limit rdma_cm puts in RoCE paths.
	hopLimit = 64
	// maxCount is the largest retry and RNR retry count (3 bits).
	maxCount = 7
	// recvLen is a GSI receive: the 40-byte GRH area and a MAD.
	recvLen = grhLen + mad.Len
	grhLen  = 40
	// ephemeralLow and ephemeralHigh bound the source ports of active
	// connections (Linux's default ip_local_port_range).
	ephemeralLow, ephemeralHigh = 32768, 60999
)

// formTID makes the transaction ID of the messages a connection
// originates, as the kernel's cm_form_tid does: the agent's number in the
// high 32 bits and the local communication ID in the low 32, in the byte
// order a little-endian host gives it (the captures show REQ comm ID
// 0x792718f2 with TID 0x2f2182779).
func formTID(agent uint32, localID uint32) uint64 {
	return uint64(agent)<<32 | uint64(bits.ReverseBytes32(localID))
}

// flowLabel is the flow label rdma_cm gives a RoCEv2 path: a hash of the
// source and destination ports (cma.c; 50069 → 7174 gives 0x7cb11 in the
// capture).
func flowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF
}

// ackTimeout is the local ACK timeout the IB CM derives from the CA ACK
// delay and the packet life time: one more than the life time, raised to
// cover the ACK delay.
func ackTimeout(caDelay, lifeTime uint8) uint8 {
	t := int(lifeTime) + 1
	d := int(caDelay)
	switch {
	case t >= d:
		if d >= t-1 {
			t++
		}
	default:
		if t >= d-1 {
			t = d + 1
		} else {
			t = d
		}
	}
	return uint8(min(t, 31))
}

// guidFromAddr makes a CA GUID for a device that has no hardware one: the
// EUI-64 of a locally administered MAC built from the address, the way
// rxe derives its GUID from its MAC.
func guidFromAddr(a netip.Addr) uint64 {
	b := a.As16()
	var mac [6]byte
	mac[0] = 0x02
	copy(mac[1:], b[11:16])
	return uint64(mac[0]^0x02)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xFF<<32 | 0xFE<<24 |
		uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

// cmTimeout is the duration of a 5-bit IBTA timeout exponent.
func cmTimeout(t uint8) time.Duration { return mad.Timeout(t) }

// gidAddr returns the IP address behind a RoCEv2 GID, unmapped; it is
// invalid for the zero GID.
func gidAddr(g [16]byte) netip.Addr {
	a := verbs.AddrFromGID(g)
	if a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

// srcFromGRH returns the source address of a UD receive from its 40-byte
// GRH area: an IPv4 header in bytes 20-39, or an IPv6 header.
func srcFromGRH(g []byte) netip.Addr {
	if len(g) < grhLen {
		return netip.Addr{}
	}
	if g[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(g[32:36]))
	}
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[8:24]))
	}
	return netip.Addr{}
}
