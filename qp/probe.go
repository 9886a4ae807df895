package qp

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
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
	// sample: the PSN whose acknowledgement ends an RTT sample, and when
	// it was sent; none when !sampling.
	sampling  bool
	samplePSN bth.PSN
	sampleAt  time.Time
	// probing: a probe is out; the window is one packet until an answer.
	probing   bool
	backoff   uint8     // probes sent since the last progress
	lastProbe time.Time // when the last one went
}

// sentSample starts an RTT sample on the packet with PSN psn, which asks
// for an ACK and was never sent before, if none is running.
func (q *QP) sentSample(psn bth.PSN) {
	if q.req.loss.sampling {
		return
	}
	q.req.loss.sampling, q.req.loss.samplePSN, q.req.loss.sampleAt = true, psn, q.dev.clk.Now()
}

// progressSample ends the RTT sample running if the completer's progress
// passed its packet, and notes that the peer answered: probing stops.
// The caller holds q.mu.
func (q *QP) progressSample() {
	q.req.loss.probing, q.req.loss.backoff = false, 0
	if q.req.loss.sampling && q.req.loss.samplePSN.LessThan(q.comp.psn) {
		q.req.loss.sampling = false
		now := q.dev.clk.Now()
		d := now.Sub(q.req.loss.sampleAt)
		q.req.loss.rtt.Sample(d, now)
		q.ccSample(d, now)
	}
}

// rewoundSample drops the RTT sample running: after going back, an ACK
// may answer the packet sent again (Karn's rule).
func (q *QP) rewoundSample() { q.req.loss.sampling = false }

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
