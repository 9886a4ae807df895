package qp

import (
	"net/netip"
	"slices"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// receive is the transport's handler: it validates each packet the way
// rxe_recv.c does and hands it to its queue pair. It takes each packet's
// headers as the transport parsed them (transport.Packet.Parsed), and
// parses only a packet that comes without. It keeps the lock of
// each QP it handles until the end of the batch, so that what all of
// them answer (ACKs, READ responses, requests an ACK let go) leaves in one
// send; a QP's packets still leave in order, as no one else can send for
// it meanwhile. It never waits for a lock while holding one: a QP held
// elsewhere first sends what the held ones queued.
func (d *Device) receive(pkts []transport.Packet) {
	r := batchRun{d: d, polling: d.polling.Load() > 0}
	// Responses first. A responder sends its ACK with the one-packet
	// request it posts in answer (post), after it, so that the two go in
	// one GSO send; handled here in the batch's order, the answer would
	// complete before the request it answers. An ACK handled ahead of requests that came with it is one
	// that travelled a little faster: the requester and the responder of
	// a QP are independent.
	requests := 0
	for i := range pkts {
		if isResponse(pkts[i].Data) {
			r.handle(&pkts[i])
		} else {
			requests++
		}
	}
	if requests > 0 {
		for i := range pkts {
			if !isResponse(pkts[i].Data) {
				r.handle(&pkts[i])
			}
		}
	}
	r.end()
	d.kickTurns()
}

// isResponse reports whether data is a response (an ACK or NAK, a READ
// response, an atomic ACK), by its opcode.
func isResponse(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch bth.Opcode(data[0]).Info().Operation {
	case bth.OpAcknowledge, bth.OpReadResponse, bth.OpAtomicAcknowledge:
		return true
	}
	return false
}

// batchRun is the handling of one batch (Device.receive): the QPs whose
// locks it holds and the batch their answers go out in.
type batchRun struct {
	d       *Device
	polling bool
	cur     *QP
	held    []*QP
	b       *txBatch
	own     bth.Packet // the parse of a packet the transport left unparsed
}

// handle hands one packet to its QP, taking the QP's lock if the run does
// not hold it yet.
func (r *batchRun) handle(tp *transport.Packet) {
	d := r.d
	pkt := tp.Parsed
	if pkt == nil {
		if r.own.Parse(tp.Data) != nil {
			d.ctr.drop(dropMalformed)
			return
		}
		pkt = &r.own
	}
	if pkt.BTH.TVer() != 0 {
		d.ctr.drop(dropTVer)
		return
	}
	if pkt.BTH.DestQP() == verbs.MulticastQPN {
		r.multicast(pkt, tp) // mcast.go
		return
	}
	q := d.qps.get(pkt.BTH.DestQP())
	if q == nil {
		d.ctr.drop(dropNoQP)
		return
	}
	r.hold(q)
	q.recv(pkt, tp, r.b)
}

// hold makes q the run's current QP, taking its lock if the run does not
// hold it yet.
func (r *batchRun) hold(q *QP) {
	if q == r.cur {
		return
	}
	d := r.d
	if r.b == nil {
		r.b = d.getBatch()
		r.held = r.b.held[:0]
	}
	r.cur = q
	if !slices.Contains(r.held, q) {
		if len(r.held) == cap(r.held) || len(r.held) > 0 && !q.mu.TryLock() {
			d.releaseQPs(r.held, r.b, r.polling)
			r.held = r.held[:0]
			q.mu.Lock()
		} else if len(r.held) == 0 {
			q.mu.Lock()
		}
		r.held = append(r.held, q)
	}
}

// end sends what the run's QPs answered and lets them go.
func (r *batchRun) end() {
	if r.b != nil {
		r.d.releaseQPs(r.held, r.b, r.polling)
		r.b.held = r.held[:0]
		r.d.putBatch(r.b)
	}
}

// releaseQPs ends the handling of a batch of packets for the QPs held,
// whose locks the caller holds: what they answered goes out in one send,
// then they are released. A coalesced ACK may instead wait for the
// polling thread's next post (polling: the packets came through a poll).
func (d *Device) releaseQPs(held []*QP, b *txBatch, polling bool) {
	for _, q := range held {
		if polling && q.resp.ackPending {
			d.deferAck(q)
		} else {
			q.sendPendingAck(b)
		}
	}
	b.flush()
	for _, q := range held {
		q.updateActive()
		q.resp.rq.used, q.cc.turnUsed = 0, 0 // the next batch is its next turn (respq.go, pace.go)
		q.mu.Unlock()
	}
}

// recv hands a validated packet to the responder or the completer. The
// caller holds q.mu.
func (q *QP) recv(p *bth.Packet, tp *transport.Packet, b *txBatch) {
	q.ctr.RcvdPkts++
	if q.destroyed {
		return
	}
	// The header checks of rxe_recv.c, in its order: the QP's type and
	// state, the addresses of a connected QP, the P_Key, the Q_Key of a
	// datagram QP.
	cnp := p.Info.Operation == bth.OpCNP && (q.typ == verbs.RC || q.typ == verbs.UC) // cnp.go
	if p.Info.Transport != transportOf(q.typ) && !cnp {
		q.ctr.DropBadTransport++
		return
	}
	switch q.state {
	case verbs.StateRTR, verbs.StateRTS, verbs.StateSQD, verbs.StateSQE:
	default:
		q.ctr.DropBadState++
		return
	}
	ud := q.typ == verbs.UD || q.typ == verbs.GSI
	if !ud && (tp.Src != q.dest || !q.dev.isLocal(tp.Dst)) {
		q.ctr.DropBadAddr++
		return
	}
	if p.BTH.PKey()&0x7FFF != bth.DefaultPKey&0x7FFF {
		q.ctr.DropBadPKey++
		return
	}
	if tp.RXEFlushICRC {
		q.req.flushRXE = true // the peer is rxe, or speaks as it does: so do the FLUSHes this QP sends it
	}
	switch {
	case cnp:
		q.receiveCNP()
		return
	case !ud && isCE(tp) && p.Info.Operation != bth.OpAcknowledge:
		q.markedCE(b) // an ACK's mark says nothing of the data this QP sends
	}
	if ud {
		if p.DETH.QKey() != q.attr.QKey {
			q.ctr.DropBadQKey++
			return
		}
		q.respondUD(p, tp, b)
		return
	}
	switch p.Info.Operation {
	case bth.OpAcknowledge, bth.OpReadResponse, bth.OpAtomicAcknowledge:
		q.complete(p, b)
	default:
		q.respond(p, b)
	}
}

// isLocal reports whether a packet sent to dst is for this device: dst
// is its address, or either is unknown (a transport bound to every
// address of the host).
func (d *Device) isLocal(dst netip.Addr) bool {
	if !dst.IsValid() || !d.gid.IsValid() || d.gid.IsUnspecified() || dst.Unmap() == d.gid.Unmap() {
		return true
	}
	for _, a := range d.gids[1:] {
		if dst.Unmap() == a.Unmap() {
			return true
		}
	}
	return false
}

// transportOf returns the BTH transport class of a QP type.
func transportOf(t verbs.QPType) bth.Transport {
	switch t {
	case verbs.RC:
		return bth.TransportRC
	case verbs.UC:
		return bth.TransportUC
	}
	return bth.TransportUD
}
