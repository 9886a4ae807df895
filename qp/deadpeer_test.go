package qp

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// TestDeadPeerRetryCount checks that a peer that never answers is noticed
// with the defaults of rdma-core's tools: retry_cnt 7 is the first try
// and seven retries, then the request completes RETRY_EXC_ERR and the
// rest are flushed, whatever the message's size and operation. (rxe
// retries for ever at 7; the IBTA and real RNICs do not.)
func TestDeadPeerRetryCount(t *testing.T) {
	const timeout = 14 // 67 ms
	cases := []struct {
		name string
		op   verbs.WROpcode
		size int
	}{
		{"write small", verbs.OpWrite, 64},
		{"write multi-packet", verbs.OpWrite, 5000},
		{"send", verbs.OpSend, 3000},
		{"read", verbs.OpRead, 5000},
		{"atomic", verbs.OpAtomicFetchAdd, 8},
		// 1,024 packets, twice the window: after a rewind the request
		// stays at the send point, partly sent, when its retries run out.
		{"write larger than the window", verbs.OpWrite, 1 << 20},
		{"send larger than the window", verbs.OpSend, 1 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{retry: 7, timeout: timeout})
			local, remote := p.a.reg(t, max(8192, c.size)), p.b.reg(t, max(8192, c.size))
			p.net.SetFaults(mem.Faults{Drop: 1}) // the peer is gone
			start := p.net.Clock().Now()
			wr := verbs.SendWR{ID: 1, Opcode: c.op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, c.size)},
				RemoteAddr: remote.Addr(), RKey: remote.RKey(), CompareAdd: 1}
			next := verbs.SendWR{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 8)},
				RemoteAddr: remote.Addr(), RKey: remote.RKey()}
			must(t, p.a.qp.PostSend([]verbs.SendWR{wr, next}))
			wcs := p.poll(&p.a, 2)
			took := p.net.Clock().Now().Sub(start)
			if wcs[0].ID != 1 || wcs[0].Status != verbs.RetryExcErr || wcs[1].ID != 2 || wcs[1].Status != verbs.WRFlushErr {
				t.Fatalf("completions %v, %v: want RETRY_EXC_ERR, then WR_FLUSH_ERR", &wcs[0], &wcs[1])
			}
			ctr := p.a.qp.Counters()
			if ctr.CompleterRetryErr != 8 || ctr.RetryExceededErr != 1 {
				t.Fatalf("%d timeouts and %d retries exceeded, want 8 and 1", ctr.CompleterRetryErr, ctr.RetryExceededErr)
			}
			// Eight timeouts, one per try.
			d := bth.ACKTimeout(timeout)
			if took < 8*d || took > 9*d {
				t.Fatalf("failed after %v, want 8 timeouts of %v", took, d)
			}
			if st := p.a.qp.State(); st != verbs.StateErr {
				t.Fatalf("state %v, want ERR", st)
			}
		})
	}
}
