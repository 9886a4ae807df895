package qp

import (
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// TestLossProbes scripts the loss probes (probe.go) packet by packet: a
// requester that hears nothing sends its oldest unacknowledged packet
// again, alone, a probe timeout after its last progress, and again after
// twice as long; the answer lets it go on from where the peer stands;
// probes count no retry, and the local ACK timeout still fails the
// request after retry_cnt retries.
func TestLossProbes(t *testing.T) {
	w := func(psn int) string { return "RDMA_WRITE_ONLY @" + strconv.Itoa(psn) + " 8B" }
	ack := bth.ACKSyndrome(bth.NoCredits)
	since := func(a *adversary, start time.Time, want time.Duration) {
		a.t.Helper()
		if got := a.clk.Now().Sub(start); got != want {
			a.t.Errorf("fired %v after the post, want %v", got, want)
		}
	}
	runAdvCases(t, []advCase{
		{name: "tail loss: the probe, alone, then the rest", opts: advOpts{probes: true}, run: func(a *adversary) {
			start := a.clk.Now()
			a.post(a.write(1, 0, 8), a.write(2, 0, 8))
			a.sent()
			a.fire()
			since(a, start, firstProbeTimeout) // no RTT sample yet
			if got := a.sent(); len(got) != 1 || got[0] != w(0) {
				a.t.Fatalf("probe: sent %q, want the oldest packet alone", got)
			}
			a.inject(a.ackAt(0, ack)) // the peer had lost it: it has only this one now
			if got := a.sent(); len(got) != 1 || got[0] != w(1) {
				a.t.Fatalf("after the answer: sent %q, want the next packet", got)
			}
			a.inject(a.ackAt(1, ack))
		}, want: check{wcs: []string{"1 SUCCESS", "2 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"loss_probes": 1, "completer_retry_err": 0, "retransmitted_pkts": 2}}},
		{name: "a probe answered with an ACK of everything", opts: advOpts{probes: true}, run: func(a *adversary) {
			a.post(a.write(1, 0, 8), a.write(2, 0, 8), a.write(3, 0, 8))
			a.sent()
			a.fire()
			if got := a.sent(); len(got) != 1 {
				a.t.Fatalf("probe: sent %q", got)
			}
			a.inject(a.ackAt(2, ack)) // only the ACK was lost
		}, want: check{wcs: []string{"1 SUCCESS", "2 SUCCESS", "3 SUCCESS"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"loss_probes": 1, "retransmitted_pkts": 1}}},
		{name: "probes back off, and the timeout still counts", opts: advOpts{probes: true, retry: u8(0)},
			run: func(a *adversary) {
				start := a.clk.Now()
				a.post(a.write(1, 0, 8))
				a.fire()
				since(a, start, firstProbeTimeout)
				a.fire()
				since(a, start, 3*firstProbeTimeout) // twice the wait after the first
				a.fire()                             // 70 ms would pass the timeout: it comes first
				since(a, start, bth.ACKTimeout(14))
			}, want: check{sent: []string{w(0), w(0), w(0)}, wcs: []string{"1 RETRY_EXC_ERR"}, state: verbs.StateErr,
				ctrs: map[string]uint64{"loss_probes": 2, "retry_exceeded_err": 1, "local_ack_timeout_err": 1}}},
		{name: "the probe timeout follows the RTT", opts: advOpts{probes: true}, run: func(a *adversary) {
			a.post(a.write(1, 0, 8))
			a.clk.Advance(4 * time.Millisecond)
			a.inject(a.ackAt(0, ack)) // one sample of 4 ms: SRTT 4, RTTVAR 2
			a.sent()
			a.polled()
			start := a.clk.Now()
			a.post(a.write(2, 0, 8))
			a.fire() // the timer set for the first probe timeout, which finds the probe due later
			if got := a.sent(); len(got) != 1 {
				a.t.Fatalf("sent %q before the probe timeout", got)
			}
			a.fire()
			since(a, start, 12*time.Millisecond)
			if got := a.sent(); len(got) != 1 || got[0] != w(1) {
				a.t.Fatalf("sent %q, want the probe", got)
			}
			a.inject(a.ackAt(1, ack))
		}, want: check{wcs: []string{"2 SUCCESS"}, state: verbs.StateRTS, ctrs: map[string]uint64{"loss_probes": 1}}},
		{name: "no probe of a READ", opts: advOpts{probes: true}, run: func(a *adversary) {
			start := a.clk.Now()
			a.post(a.read(1, 0, 8))
			a.fire()
			since(a, start, bth.ACKTimeout(14))
		}, want: check{sent: []string{"RDMA_READ_REQUEST @0", "RDMA_READ_REQUEST @0"}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"loss_probes": 0, "local_ack_timeout_err": 1, "completer_retry_err": 1}}},
		{name: "no probes with LossProbe negative", run: func(a *adversary) {
			start := a.clk.Now()
			a.post(a.write(1, 0, 8))
			a.fire()
			since(a, start, bth.ACKTimeout(14))
		}, want: check{sent: []string{w(0), w(0)}, state: verbs.StateRTS,
			ctrs: map[string]uint64{"loss_probes": 0, "local_ack_timeout_err": 1, "completer_retry_err": 1}}},
	})
}
