package qp

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// Fair turns for READ responses: a READ of up to 2^31 bytes is answered
// by up to half a million packets. Sent in one loop on the receive path,
// holding the QP's lock, they stalled every other QP whose packets came
// through that path until the last went. So the responder sends at most
// respTurn of them per turn, paced like any data packet (pace.go), and the
// QP's pacing timer, set to fire at once (or when the pacer lets the next
// packet go), carries the rest on later turns: the receive path goes back
// to the other QPs' packets meanwhile, as a NIC's transmit scheduler
// interleaves QPs and gVisor's TCP bounds the segments it handles per
// wake-up (maxSegmentsPerWake).
//
// Responses leave in PSN order, which the requester relies on: while a
// READ's responses are under way, what the responder owes after it (an
// atomic ACK, another READ's responses, the ACK or NAK of a later
// request) waits in the QP's response queue behind it. ACKs are
// cumulative, so one ACK or sequence NAK waits after each queued
// response, the last overwriting the one before. A NAK for an error goes
// at once: the QP then goes to ERR and the queue is dropped.

// respTurn bounds the READ responses one turn sends.
const respTurn = 64

// maxRespQueue bounds the responses the queue holds: READs and atomics
// take the responder resources (max_dest_rd_atomic, at most MaxRDAtomic),
// and a requester that asks for more than it may is answered at once, in
// one loop, as before.
const maxRespQueue = 2 * MaxRDAtomic

// respEntry is a response the responder owes: a READ's responses from its
// next packet on, or an atomic ACK; then, if after, an ACK or NAK.
type respEntry struct {
	read     bool
	f        bth.RETHFields
	psn      bth.PSN // the READ's or atomic's first PSN
	npsn     uint32
	next     uint32 // the READ's next response, 0 to npsn
	orig     uint64 // the atomic's value
	after    bool
	syn      bth.Syndrome
	afterPSN bth.PSN
}

// respQueue is a ring of respEntry, grown on first use.
type respQueue struct {
	e        []respEntry
	head, n  int
	draining bool // sendResponses is sending: nothing it sends queues
	// used counts the READ responses sent this turn: a turn is one
	// receive batch's hold of the QP (releaseQPs starts the next) or one
	// firing of its pacing timer.
	used int
}

func (r *respQueue) at(i int) *respEntry { return &r.e[(r.head+i)%len(r.e)] }

// push appends e; false when the queue is full.
func (r *respQueue) push(e respEntry) bool {
	if r.n == len(r.e) {
		if len(r.e) == maxRespQueue {
			return false
		}
		grown := make([]respEntry, min(max(8, 2*len(r.e)), maxRespQueue))
		for i := range r.n {
			grown[i] = *r.at(i)
		}
		r.e, r.head = grown, 0
	}
	*r.at(r.n) = e
	r.n++
	return true
}

func (r *respQueue) pop() {
	r.head = (r.head + 1) % len(r.e)
	r.n--
}

// clear drops every entry.
func (r *respQueue) clear() { r.head, r.n = 0, 0 }

// queueRead owes the responses of a READ of f from psn, and sends what a
// turn allows; dup is a READ asked again. The caller holds q.mu.
func (q *QP) queueRead(b *txBatch, psn bth.PSN, f *bth.RETHFields, dup bool) {
	rq := &q.resp.rq
	if dup && !q.dropRequeued(psn) {
		return // its responses from psn on have not gone yet: they are coming
	}
	e := respEntry{read: true, f: *f, psn: psn, npsn: q.packets(uint64(f.DMALen))}
	if !rq.push(e) {
		// More READs than responder resources: answer this one at once.
		q.sendResponses(b, &e)
		return
	}
	q.sendResponses(b, nil)
}

// dropRequeued makes room for a READ asked again from psn: the requester
// went back there, and will ask again for everything after it, so the
// queued responses from psn on go. It reports false when the READ in the
// queue that holds psn has not sent it yet: then nothing needs sending
// again.
func (q *QP) dropRequeued(psn bth.PSN) bool {
	rq := &q.resp.rq
	for i := range rq.n {
		e := rq.at(i)
		switch {
		case e.read && psn.InWindow(e.psn, e.npsn) && uint32(psn.Diff(e.psn)) >= e.next:
			return false
		case !e.psn.LessThan(psn) || e.read && psn.InWindow(e.psn, e.npsn):
			rq.n = i
			return true
		}
	}
	return true
}

// queueAtomicAck owes an atomic ACK behind the responses queued, and
// reports false when none are (the caller sends it at once).
func (q *QP) queueAtomicAck(b *txBatch, psn bth.PSN, orig uint64) bool {
	rq := &q.resp.rq
	if rq.n == 0 || rq.draining {
		return false
	}
	q.sendPendingAck(b) // after what is queued, before the atomic's ACK
	return rq.push(respEntry{psn: psn, npsn: 1, orig: orig})
}

// queueAck owes an ACK or NAK with syndrome syn for psn behind the
// responses queued, and reports false when none are, or when it is an
// error NAK, which goes at once (the caller sends it).
func (q *QP) queueAck(syn bth.Syndrome, psn bth.PSN) bool {
	rq := &q.resp.rq
	if rq.n == 0 || rq.draining {
		return false
	}
	if syn.Kind() == bth.KindNAK && syn.NAKCode() != bth.NAKPSNSequenceError {
		rq.clear() // the QP goes to ERR: what was owed is dropped
		return false
	}
	e := rq.at(rq.n - 1)
	if !e.after || !covers(syn, psn).LessThan(covers(e.syn, e.afterPSN)) {
		e.after, e.syn, e.afterPSN = true, syn, psn // it says as much or more
	}
	return true
}

// covers returns the last PSN an ACK or NAK acknowledges: an ACK its PSN,
// a NAK (sequence or RNR) the one before its PSN.
func covers(syn bth.Syndrome, psn bth.PSN) bth.PSN {
	if syn.Kind() == bth.KindACK {
		return psn
	}
	return psn.Add(bth.PSNMask)
}

// sendResponses sends the queued responses, in order, up to respTurn READ
// responses a turn and as far as the pacer lets it, then arms the pacing
// timer for the rest; one, when set, is a READ to answer alone, unqueued
// and whole. The caller holds q.mu.
func (q *QP) sendResponses(b *txBatch, one *respEntry) {
	rq := &q.resp.rq
	rq.draining = true
	q.drainResponses(b, one)
	rq.draining = false
}

func (q *QP) drainResponses(b *txBatch, one *respEntry) {
	rq := &q.resp.rq
	for one != nil || rq.n > 0 {
		e := one
		if e == nil {
			e = rq.at(0)
		}
		if e.read {
			for e.next < e.npsn {
				if one == nil && (rq.used >= respTurn || q.paceHeld()) {
					q.armPace(q.respResume(), q.dev.clk.Now())
					return
				}
				if !q.readResponse(b, e) {
					return // the QP went to ERR
				}
				rq.used++
			}
		} else {
			q.sendAtomicAck(b, e.psn, e.orig)
		}
		if e.after {
			q.sendAck(b, e.syn, e.afterPSN)
		}
		if one != nil {
			return
		}
		rq.pop()
	}
}

// respResume returns when the responses held back may go on: when the
// pacer lets the next packet go, or now.
func (q *QP) respResume() time.Time {
	now := q.dev.clk.Now()
	if n := q.cc.pace.Next(); q.cc.rp.Active() && n.After(now) {
		return n
	}
	return now
}

// readResponse sends e's next READ response, and reports false when the
// region went meanwhile (a NAK went, and the QP to ERR). A READ asked
// again from the middle is answered as a new message, from a FIRST (or
// ONLY): rxe's responder goes on with the old one's MIDDLE and LAST
// there; goroce's requester takes either.
func (q *QP) readResponse(b *txBatch, e *respEntry) bool {
	i, npsn, f := e.next, e.npsn, &e.f
	mtu := uint64(q.mtu)
	off := uint64(i) * mtu
	n := min(mtu, uint64(f.DMALen)-off)
	if f.DMALen == 0 {
		n = 0
	}
	op := bth.RCReadResponseMiddle
	switch {
	case npsn == 1:
		op = bth.RCReadResponseOnly
	case i == 0:
		op = bth.RCReadResponseFirst
	case i == npsn-1:
		op = bth.RCReadResponseLast
	}
	buf := b.buf()
	var r bth.Packet
	size := r.Build(buf, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: q.attr.DestQPN,
		PSN: e.psn.Add(i)}, int(n))
	if r.AETH != nil {
		r.AETH.Encode(&bth.AETHFields{Syndrome: bth.ACKSyndrome(bth.NoCredits), MSN: q.resp.msn & bth.PSNMask})
	}
	var m *mr.MR
	var mem []byte
	if n > 0 {
		var err error
		m, mem, err = q.dev.mrs.LookupRemote(q.pd, q.id, f.RKey, f.VA+off, uint32(n), verbs.RemoteRead)
		if err != nil {
			// Deregistered while we answered: what went out stays out;
			// NAK the rest.
			q.resp.rq.clear()
			q.respError(b, bth.NAKRemoteAccessError, e.psn.Add(i), verbs.RemAccessErr, err.Error())
			return false
		}
		if !q.dev.inPlace || n < minRefPayload || n%4 != 0 {
			copy(r.Payload, mem)
			mem = nil
		} else {
			m.Pin(q.id) // Dereg waits until the batch is sent
		}
		m.Release(q.id)
	}
	if mem != nil {
		// Large payloads go from the region in place (see payloadRef).
		b.addRef(size-int(n)-bth.ICRCLen, mem, pin{m, q.id}, q.dest, q.sport, q.dataTOS())
	} else {
		b.add(size, q.dest, q.sport, q.dataTOS())
	}
	q.ctr.SentPkts++
	q.paceSent(size)
	e.next++
	return true
}

// respondMore sends what the response queue holds, for a turn: the
// pacing timer's work for the responder. The caller holds q.mu.
func (q *QP) respondMore(b *txBatch) {
	if q.resp.rq.n == 0 {
		return
	}
	q.resp.rq.used = 0 // a turn of its own
	switch q.state {
	case verbs.StateRTR, verbs.StateRTS, verbs.StateSQD, verbs.StateSQE:
		q.sendResponses(b, nil)
	default:
		q.resp.rq.clear()
	}
}
