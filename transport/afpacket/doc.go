// Package afpacket is a goroce transport that sends and receives whole
// Ethernet frames on one interface through an AF_PACKET socket
// (github.com/mdlayher/packet), so it writes the IP and UDP headers itself
// and sees the real headers of what it receives. It needs CAP_NET_RAW.
//
// Compared with the udp transport it follows each packet's UDP source port
// (rxe's per-QP 0xC000 + hash), sends an incrementing IPv4 ID with DF set
// like rxe, and verifies received ICRCs against the real IP header, with
// no ID to guess.
//
// Frames go out with bth.EncodeFrame: Ethernet II to the next hop's MAC
// (from the kernel's routing and neighbour tables over netlink, resolved by
// the kernel on demand and cached), IPv4 or IPv6, UDP to port 4791 with
// checksum 0 over IPv4. A classic BPF filter lets only UDP to the
// transport's address and port up, outgoing frames are ignored
// (PACKET_IGNORE_OUTGOING, and the packet type is checked again), and a UDP
// socket bound to the same address and port, which discards what it gets,
// keeps the kernel from answering with ICMP port unreachable.
//
// It does not pass on ICMP errors (it is no transport.UnreachableNotifier):
// the kernel gives raw frames' ICMP answers to no socket. A connection
// manager on it learns of an unreachable peer from its retries alone.
//
// The package works on Linux only; elsewhere New returns ErrUnsupported.
package afpacket
