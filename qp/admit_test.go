package qp

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// TestTurnsFewAcks streams on 32 QPs sharing a window of 128 PSNs, with
// turns (two QPs at a time, 64 PSNs each) and without (every QP sending
// at once, four PSNs each): every byte arrives both ways, and with turns
// the responder sends an ACK for fewer than one data packet in ten, and
// for fewer than half as many as without.
func TestTurnsFewAcks(t *testing.T) {
	const nqp, msgs, size = 32, 8, 16 << 10
	ratio := func(turns bool) float64 {
		o := pairOpts{maxUnack: 64}
		p := newPair(t, o)
		if !turns {
			p.a.dev.adm.max = 1 << 20
		}
		as, bs := morePairs(t, p, o, nqp)
		src, dst := streamAll(t, p, as, msgs, size)
		for _, wc := range p.poll(&p.a, nqp*msgs) {
			if wc.Status != verbs.Success {
				t.Fatalf("turns %v: completion %v", turns, &wc)
			}
		}
		if !bytes.Equal(src, dst) {
			t.Fatalf("turns %v: the data differs", turns)
		}
		var acks, data uint64
		for i := range as {
			data += as[i].qp.Counters().SentPkts
			acks += bs[i].qp.Counters().AcksSent
		}
		r := float64(acks) / float64(data)
		t.Logf("turns %v: %d ACKs for %d data packets (%.3f)", turns, acks, data, r)
		return r
	}
	with, without := ratio(true), ratio(false)
	if with >= 0.1 || with >= without/2 {
		t.Errorf("ACKs per data packet: %.3f with turns, %.3f without; want under 0.1 and under half", with, without)
	}
}

// TestTurnsStalledPeer: the one turn of a device (a window of 64 PSNs)
// is held by a QP whose peer hears nothing; the device's other QPs are
// started all the same (admitWait) and complete while it still retries,
// and it fails with RETRY_EXC_ERR in the end, its turn freed.
func TestTurnsStalledPeer(t *testing.T) {
	const nqp, msgs, size = 8, 4, 16 << 10
	var tap *tapLink
	o := pairOpts{maxUnack: 32, retry: 3, wrapB: func(tr transport.Transport) transport.Transport {
		tap = &tapLink{Transport: tr}
		return tap
	}}
	p := newPair(t, o)
	if p.a.dev.adm.max != 1 {
		t.Fatalf("%d turns at once, want 1", p.a.dev.adm.max)
	}
	as, bs := morePairs(t, p, o, nqp)
	deaf := bs[0].qp.QPN()
	tap.setRx(func(pk *transport.Packet) bool { return bth.BTH(pk.Data).DestQP() != deaf })
	start := p.net.Clock().Now()
	src, dst := streamAll(t, p, as, msgs, size)
	var ok, failed int
	var last time.Duration
	buf := make([]verbs.WC, 64)
	err := p.net.Run(func() bool {
		n := p.a.cq.Poll(buf)
		for _, wc := range buf[:n] {
			switch {
			case wc.QPN == as[0].qp.QPN():
				if wc.Status != verbs.RetryExcErr && wc.Status != verbs.WRFlushErr {
					t.Errorf("the stalled QP's request completed %v", &wc)
				}
				failed++
			case wc.Status != verbs.Success:
				t.Fatalf("completion %v", &wc)
			default:
				ok++
				if ok == (nqp-1)*msgs {
					last = p.net.Clock().Now().Sub(start)
				}
			}
		}
		return ok+failed == nqp*msgs
	}, time.Minute)
	if err != nil {
		t.Fatalf("%d WRITEs succeeded, %d failed: %v", ok, failed, err)
	}
	if ok != (nqp-1)*msgs {
		t.Fatalf("%d of the other QPs' %d WRITEs succeeded", ok, (nqp-1)*msgs)
	}
	timeout := bth.ACKTimeout(14)
	if last >= timeout {
		t.Errorf("the other QPs took %v, behind a stalled turn: want less than one ACK timeout (%v)", last, timeout)
	}
	if !bytes.Equal(src[size:], dst[size:]) {
		t.Error("the other QPs' data differs")
	}
	if n, q := p.a.dev.adm.turns, p.a.dev.adm.queue.n; n != 0 || q != 0 {
		t.Errorf("%d turns and %d QPs in line after the stream", n, q)
	}
}
