package qp

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// The notification point and the CNPs (RoCEv2, IBTA Annex A17): a
// connected QP that receives a CE-marked packet from its peer, in a mode
// that uses ECN, answers with a Congestion Notification Packet to the
// peer's QP, at most one per DCQCNConfig.MinTimeBetweenCNPs, as a NIC's
// notification point does; a CNP that comes to a QP goes to its DCQCN
// reaction point, whose rate the QP then paces its data packets at
// (pace.go).
//
// A CNP is a BTH with opcode 0x81, the P_Key, the destination QP and the
// BECN bit, PSN 0, then 16 reserved bytes and the ICRC; it goes with
// DSCP cnp_dscp (48) and not ECN-capable, as ConnectX sends it. Kernel
// rxe neither sends nor honours CNPs: it drops a packet whose opcode is
// not of the QP's transport before it looks at anything else
// (rxe_recv.c's check_type_state), and it sends its packets not
// ECN-capable unless its traffic class says so, so goroce's receivers
// have no CE marks of its to answer.

// markedCE takes a CE-marked packet of the QP's peer, which passed the
// header checks. The caller holds q.mu.
func (q *QP) markedCE(b *txBatch) {
	q.ctr.NPECNMarked++
	if !q.cc.mode.ECN() {
		return
	}
	now := q.dev.clk.Now()
	if !q.cc.lastCNP.IsZero() && now.Sub(q.cc.lastCNP) < q.cc.cfg.DCQCN.MinTimeBetweenCNPs {
		return
	}
	q.cc.lastCNP = now
	q.sendCNP(b)
}

// sendCNP sends a CNP to the peer's QP.
func (q *QP) sendCNP(b *txBatch) {
	buf := b.buf()
	var p bth.Packet
	size := p.Build(buf, &bth.BTHFields{Opcode: bth.CNP, PKey: bth.DefaultPKey, BECN: true, DestQP: q.attr.DestQPN}, 0)
	var tos uint8
	if d := q.cc.cfg.DCQCN.CNPDSCP; d > 0 {
		tos = uint8(d) << 2
	}
	b.add(size, q.dest, q.sport, tos)
	q.ctr.SentPkts++
	q.ctr.NPCNPSent++
}

// receiveCNP takes a CNP from the QP's peer, which passed the header
// checks. The caller holds q.mu.
func (q *QP) receiveCNP() {
	if !q.cc.mode.Paced() {
		q.ctr.RPCNPIgnored++
		return
	}
	q.ctr.RPCNPHandled++
	q.cc.rp.CNP(q.dev.clk.Now())
}

// isCE reports whether tp came CE-marked.
func isCE(tp *transport.Packet) bool { return tp.TOS&ecnMask == ecnCE }
