package qp

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/verbs"
)

// Loss probes: go-back-N recovers from a lost packet when a later one
// reaches the responder, which answers it with a PSN sequence error NAK.
// Nothing answers when the packets lost are the last ones sent (the end
// of a burst a full queue dropped), when the NAK is lost, or when the
// first packet sent again is lost too (the responder, having NAKed, waits
// for it in silence): then only the local ACK timeout (67 ms at the
// usual 14) moves the requester, and at 1 % loss that was most of the
// time a stream lost (a third of it on a 1 Gbit/s link).
//
// So the requester keeps an estimate of the path's round-trip time, from
// one packet that asks for an ACK per round trip (congestion.RTT), and
// when nothing of what is outstanding has been acknowledged for a probe
// timeout (RFC 6298's SRTT + 4·RTTVAR, at least Config.LossProbe) it sends
// the oldest unacknowledged packet again, alone, asking for an ACK: the
// responder answers a duplicate with an ACK of all it has, or carries the
// lost packet out; either way the requester learns where to go on from,
// and goes back there as after a NAK. It does that again after twice
// the wait, and so on, until the local ACK timeout, which still counts
// retries and fails the request after retry_cnt of them as before. A
// probe is a retransmission of a packet already sent, as a timeout's is:
// the IBTA's responder rules answer it, rxe's as goroce's.
//
// The timeout and the probes share the QP's one retransmission timer: it
// fires at the earlier of the two deadlines.

// DefaultLossProbe is the default of Config.LossProbe, the shortest probe
// timeout: a round trip through software on a loaded host can take a
// millisecond, and a probe sent for nothing resends what is in flight.
const DefaultLossProbe = time.Millisecond

// firstProbeTimeout is the probe timeout before any RTT sample.
const firstProbeTimeout = 10 * time.Millisecond

// lossState is the requester's loss probing and RTT sampling.
type lossState struct {
	rtt congestion.RTT
	// samples are the RTT samples running, oldest first: packets that
	// ask for an ACK, sent for the first time, with when they went. A
	// few at once, so that one that a loss before it voids (Karn's rule)
	// leaves others: at 5 % loss a single sample seldom lived to its ACK.
	samples  [maxSamples]rttSample
	nSamples int
	// probing: a probe is out; the window is one packet until an answer.
	probing   bool
	backoff   uint8     // probes sent since the last progress
	lastProbe time.Time // when the last one went
}

// rttSample is an RTT sample running: a packet's PSN and when it went.
type rttSample struct {
	psn bth.PSN
	at  time.Time
}

// maxSamples bounds the RTT samples running at once.
const maxSamples = 4

// sentSample starts an RTT sample on the packet with PSN psn, which asks
// for an ACK and was never sent before, if fewer than maxSamples run.
func (q *QP) sentSample(psn bth.PSN) {
	l := &q.req.loss
	if l.nSamples == maxSamples {
		return
	}
	l.samples[l.nSamples] = rttSample{psn, q.dev.clk.Now()}
	l.nSamples++
}

// progressSample ends the RTT samples the completer's progress passed,
// taking the latest of them for the RTT, and notes that the peer
// answered: probing stops. The caller holds q.mu.
func (q *QP) progressSample() {
	l := &q.req.loss
	l.probing, l.backoff = false, 0
	done := 0
	for done < l.nSamples && l.samples[done].psn.LessThan(q.comp.psn) {
		done++
	}
	if done == 0 {
		return
	}
	at := l.samples[done-1].at
	l.nSamples = copy(l.samples[:], l.samples[done:l.nSamples])
	now := q.dev.clk.Now()
	d := now.Sub(at)
	l.rtt.Sample(d, now)
	q.ccSample(d, now)
}

// rewoundSample drops the RTT samples whose packets are sent again from
// psn on: an ACK may then answer either (Karn's rule). Samples of packets
// before psn stand.
func (q *QP) rewoundSample(psn bth.PSN) {
	l := &q.req.loss
	for l.nSamples > 0 && !l.samples[l.nSamples-1].psn.LessThan(psn) {
		l.nSamples--
	}
}

// probeTimeout returns how long the requester waits for progress before
// it probes, after backoff probes.
func (q *QP) probeTimeout() time.Duration {
	return q.req.loss.rtt.Timeout(q.dev.lossProbe, firstProbeTimeout) << q.req.loss.backoff
}

// probeAt returns when the next probe is due: a probe timeout after the
// last progress (deadline is the local ACK timeout after it), or after
// the last probe; ok is false when it would not come before deadline.
func (q *QP) probeAt(timeout time.Duration) (at time.Time, ok bool) {
	if q.dev.lossProbe == 0 {
		return time.Time{}, false
	}
	if w := q.headPending(); w != nil && w.wr.Opcode == verbs.OpRead {
		// The oldest packet is a READ request, which the responder
		// answers again in full (rxe 6.1 from the READ's start): on a
		// responder slow to send its responses, which is the usual
		// reason none came, a probe adds a READ's worth of its work each
		// time. The local ACK timeout moves such a QP, as before probes.
		return time.Time{}, false
	}
	base := q.comp.deadline.Add(-timeout)
	if q.req.loss.backoff > 0 {
		base = q.req.loss.lastProbe
	}
	at = base.Add(q.probeTimeout())
	return at, at.Before(q.comp.deadline)
}

// probe sends the oldest unacknowledged packet again, alone (see above).
// The caller holds q.mu.
func (q *QP) probe(b *txBatch, now time.Time) {
	q.dev.log.Debug("loss probe", "qpn", q.qpn, "psn", uint32(q.comp.psn), "backoff", q.req.loss.backoff)
	q.ctr.LossProbes++
	q.req.loss.probing = true
	q.req.loss.lastProbe = now
	if q.req.loss.backoff < 16 {
		q.req.loss.backoff++
	}
	q.comp.retrying = true
	q.rewind(q.comp.psn)
	q.request(b)
}
