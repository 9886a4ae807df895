package qp

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestSharedWindow streams WRITEs on four QPs of one device at once and
// checks the device's shared window: the PSNs in flight over the device
// stay within SharedUnackedPSNs (plus the one message a QP may always
// send), a QP past its share only drains while others are active, the
// QPs take turns (two at once: 128 PSNs / turnPSNs) and progress
// together, every byte arrives, and the counts of active QPs, PSNs in
// flight and turns return to zero.
func TestSharedWindow(t *testing.T) {
	const nqp, msgs, size = 4, 24, 16 << 10
	o := pairOpts{maxUnack: 64}
	p := newPair(t, o)
	shared := p.a.dev.sharedUnacked
	if shared != 2*64 {
		t.Fatalf("shared window %d, want twice MaxUnackedPSNs", shared)
	}
	as, bs := morePairs(t, p, o, nqp)
	src, dst := streamAll(t, p, as, msgs, size)
	maxActive, maxTotal := int32(0), uint32(0)
	prev := map[*QP]uint32{}
	done := map[uint32]int{} // completions per QP
	fair := false
	var got int
	buf := make([]verbs.WC, 64)
	err := p.net.Run(func() bool {
		act := p.a.dev.activeRC.Load()
		maxActive = max(maxActive, act)
		var total uint32
		for _, e := range as {
			q := e.qp
			q.mu.Lock()
			out := uint32(q.req.psn.Diff(q.comp.psn))
			share := max(minWindow, shared/uint32(max(act, 1)))
			// A QP past its share (it sent before the others joined)
			// only drains; a message of 16 PSNs may straddle the share.
			if last, seen := prev[q]; seen && act > 1 && out > share+16 && out > last {
				t.Errorf("QP %d: %d PSNs in flight, up from %d, with %d QPs active, share %d", q.qpn, out, last, act, share)
			}
			prev[q] = out
			total += out
			q.mu.Unlock()
		}
		maxTotal = max(maxTotal, total)
		n := p.a.cq.Poll(buf)
		for _, wc := range buf[:n] {
			if wc.Status != verbs.Success {
				t.Fatalf("completion %+v", wc)
			}
			done[wc.QPN]++
			if done[wc.QPN] == msgs && !fair {
				// The QPs share fairly: when the first is done, every
				// other is at least half way.
				fair = true
				for qpn, k := range done {
					if k < msgs/2 {
						t.Errorf("QP %d finished while QP %d had %d of %d", wc.QPN, qpn, k, msgs)
					}
				}
				if len(done) < nqp {
					t.Errorf("QP %d finished while only %d QPs had completions", wc.QPN, len(done))
				}
			}
		}
		got += n
		return got == nqp*msgs
	}, 60e9)
	if err != nil {
		t.Fatalf("%d of %d completions: %v", got, nqp*msgs, err)
	}
	if want := int32(shared / turnPSNs); maxActive != want {
		t.Errorf("at most %d QPs were active at once, want %d (turns)", maxActive, want)
	}
	if maxTotal > shared+nqp*16 {
		t.Errorf("%d PSNs in flight over the device, shared window %d", maxTotal, shared)
	}
	if !bytes.Equal(dst, src) {
		t.Error("the data differs")
	}
	p.drain()
	if n, f := p.a.dev.activeRC.Load(), p.a.dev.inflight.Load(); n != 0 || f != 0 {
		t.Errorf("%d QPs still counted active, %d PSNs in flight", n, f)
	}
	for _, e := range bs {
		must(t, e.qp.Destroy())
	}
	for _, e := range as {
		must(t, e.qp.Destroy())
	}
	if n, f := p.a.dev.activeRC.Load(), p.a.dev.inflight.Load(); n != 0 || f != 0 {
		t.Errorf("%d QPs counted active after Destroy, %d PSNs in flight", n, f)
	}
	a := &p.a.dev.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turns != 0 || a.queue.n != 0 || a.kicks.n != 0 {
		t.Errorf("%d turns, %d QPs in line, %d to start after the QPs went", a.turns, a.queue.n, a.kicks.n)
	}
}
