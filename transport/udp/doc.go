// Package udp is the default goroce transport: RoCEv2 over an ordinary UDP
// socket on port 4791, which needs no privileges.
//
// A UDP socket lets the kernel write the IP and UDP headers, but the RoCEv2
// ICRC covers them, so the transport makes the kernel's headers predictable
// and computes the ICRC for what it predicts:
//
//   - IPv4 is sent with DF set (IP_MTU_DISCOVER = IP_PMTUDISC_DO) from an
//     unconnected socket, for which Linux writes IP ID 0; the segments of a
//     UDP GSO send get IDs 0, 1, 2, ... The TOS byte, TTL and checksum are
//     masked out of the ICRC, so TOS can be set per packet.
//   - IPv6 has no field the kernel chooses that the ICRC covers (traffic
//     class, flow label and hop limit are masked). The flow label is 0, as
//     rxe sends it (IPV6_AUTOFLOWLABEL off), and datagrams with UDP
//     checksum 0, which rxe sends over IPv6, are taken (UDP_NO_CHECK6_RX).
//
// On receive, a UDP socket does not see the sender's IPv4 ID, which the
// ICRC covers and which rxe increments per packet. The transport checks each
// IPv4 packet with bth.IDSolver, which finds the one ID (if any) that makes
// the ICRC right with a single CRC pass: when that ID is the expected one (0,
// or the next in a GRO train) the check is the full 32-bit check; otherwise
// the packet is accepted with a check of 16 bits' strength and the ID is
// reported in transport.Packet.IPID. The don't-fragment bit is assumed set,
// as rxe and both goroce transports send it.
//
// Packets are received on the bound port (4791) and sent from a second
// socket on the same address with an ephemeral port: RoCEv2 receivers look
// only at the destination port, and a socket that only sends, blocking and
// outside Go's netpoller, spares the receive path a wakeup for every
// datagram sent.
//
// Batches move with sendmmsg and recvmmsg. Where the kernel supports them,
// consecutive packets to the same peer of the same size go out in one UDP
// GSO send (UDP_SEGMENT), and received trains are coalesced with UDP_GRO;
// both fall back cleanly to one datagram per packet. IP_PKTINFO (and
// IPV6_RECVPKTINFO) give the destination address when the socket is bound to
// a wildcard address, and IP_RECVTOS (IPV6_RECVTCLASS) the received TOS.
//
// NotifyUnreachable passes on the ICMP "destination unreachable" errors
// that packets draw (port unreachable from a host where nothing receives
// RoCEv2, host or network unreachable from a router), so that a
// connection manager can give up at once on a peer that is not there. The
// first watcher turns IP_RECVERR (IPV6_RECVERR) on for the send socket and
// starts a goroutine that sleeps in poll(2) on the socket's error
// condition and reads its error queue (MSG_ERRQUEUE): nothing on the data
// path. The kernel also fails the send that follows an ICMP error with
// it, once; Send sends that packet again.
//
// Config.Paths runs several receive and send paths, for machines with
// cores to spare: a receiving socket each, all bound to the address with
// SO_REUSEPORT (after a plain bind has found it free, so that no other
// socket shares it), a sending socket each on a port whose remainder
// modulo the number of paths is the path's index, and a receive goroutine
// each. A packet leaves on the path of its destination QP number; the
// kernel hands a received datagram to the path its UDP source port picks
// (a classic BPF program, SO_ATTACH_REUSEPORT_CBPF), so that each QP's
// packets keep to one path and their order, GRO trains included.
//
// The socket code is Linux-only; on other systems New returns an error.
package udp
