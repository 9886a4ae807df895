// Package diagram draws a RoCEv2 capture as a sequence diagram: one
// participant per host and queue pair, one arrow per packet, and notes for
// what a reader of the exchange wants pointed out — the IB CM handshake on
// QP 1 and the connection it sets up, NAKs, retransmitted requests, RNR
// waits and packets whose ICRC is wrong.
//
// The input is a slice of decoded packets (Record), which the decode tool
// builds from its own decoding or FromCapture builds from a pcap or pcapng
// file. New turns them into a Diagram, whose WriteText prints it in the
// text dialect of sequencediagram.org and PlantUML that the project's seed
// diagrams use (title, autonumber, participant, A->B, A-->B, note over),
// with the packets of one message that follow each other coalesced into one
// arrow, and whose WriteHTML writes one self-contained page with an SVG
// ladder: time runs down, participants across, one arrow per packet, and
// the decoded fields of each packet on hover.
//
// The BTH names only the destination QP of a packet. The sending QP is
// taken from the DETH (UD), from the CM REQ and REP that connected the two
// QPs, or from the reverse flow of the same connection: the flow back that
// uses the same UDP source port (the kernel's rdma_get_udp_sport, which rxe
// uses, derives it from the product of both QP numbers, so both directions
// of a connection share it), or else the only flow back between the two
// hosts, when that flow has no other candidate either. Where none of these
// tells, the participant is the host with "QP ?".
package diagram
