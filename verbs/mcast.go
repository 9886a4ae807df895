package verbs

import "net/netip"

// MulticastQPN is the destination QP number in the BTH of a datagram
// sent to a multicast group (the IBTA's 0xFFFFFF, IB_MULTICAST_QPN in the
// kernel): the remote QPN of a UD send to a group, as rdma_cm's multicast
// join gives it. No QP has this number.
const MulticastQPN = 0xFFFFFF

// IsMulticastGID reports whether gid is a multicast GID as the kernel's
// rdma_is_multicast_addr says it: an IPv6 multicast address (ff00::/8),
// or an IPv4-mapped IPv4 multicast address (::ffff:224.0.0.0/100).
func IsMulticastGID(gid [16]byte) bool {
	return AddrFromGID(gid).IsMulticast()
}

// MulticastGID returns the GID of the multicast group at IP address
// group, as RoCEv2 maps it (the kernel's cma_iboe_set_mgid for a RoCEv2
// GID): an IPv4 group as the IPv4-mapped address ::ffff:a.b.c.d, an IPv6
// group as is. It does not check that group is a multicast address.
func MulticastGID(group netip.Addr) [16]byte { return GIDFromAddr(group.Unmap()) }
