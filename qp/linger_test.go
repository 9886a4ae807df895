package qp

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// dropFirstAck is a link that loses the first ACK sent over it.
type dropFirstAck struct {
	transport.Transport
	dropped atomic.Bool
}

func (d *dropFirstAck) Send(pkts []transport.Packet) error {
	var p bth.Packet
	for i := range pkts {
		if p.Parse(pkts[i].Data) == nil && p.BTH.Opcode() == bth.RCAcknowledge && !d.dropped.Swap(true) {
			return d.Transport.Send(append(pkts[:i:i], pkts[i+1:]...))
		}
	}
	return d.Transport.Send(pkts)
}

// TestLinger loses the ACK of the last SEND of a run: the responder that
// lingers answers the SEND sent again, and its requester completes; the
// one that closes at once leaves its requester retrying until it gives up.
// Loss probes are off: one could reach the responder before it closes.
func TestLinger(t *testing.T) {
	for _, linger := range []bool{true, false} {
		var link *dropFirstAck
		p := newPair(t, pairOpts{live: true, timeout: 14, retry: 2, noProbes: true, wrapB: func(tr transport.Transport) transport.Transport {
			link = &dropFirstAck{Transport: tr}
			return link
		}})
		src, dst := p.a.reg(t, 64), p.b.reg(t, 64)
		must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge(dst, 0, 64)}}}))
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, 64)}}}))
		if wc := waitWC(t, p.b.cq); wc.Status != verbs.Success || wc.ID != 1 {
			t.Fatalf("receive: %v", &wc)
		}
		if linger {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := p.b.dev.Linger(ctx, 300*time.Millisecond)
			cancel()
			if err != nil {
				t.Fatalf("Linger: %v", err)
			}
		}
		p.b.dev.Close()
		wc := waitWC(t, p.a.cq)
		if !link.dropped.Load() {
			t.Fatal("no ACK was dropped")
		}
		c := p.a.qp.Counters()
		if c.Retransmits == 0 {
			t.Errorf("linger %v: the SEND was not sent again: %s", linger, &c)
		}
		want := verbs.Success
		if !linger {
			want = verbs.RetryExcErr
		}
		if wc.Status != want || wc.ID != 2 {
			t.Errorf("linger %v: send completed %v, want %v", linger, &wc, want)
		}
	}
}

// waitWC waits up to 10 s for one completion on cq.
func waitWC(t *testing.T, cq *CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
	}
	t.Fatal("no completion in 10 s")
	return verbs.WC{}
}
