package qp

import (
	"bytes"
	"github.com/goroce/goroce/verbs"
	"testing"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport/mem"
)

// TestErrors checks each error kind: the status the requester (and,
// where one is involved, the responder's receive) completes with, that the
// responder's memory is untouched, and that what was posted after the
// failing request is flushed.
func TestErrors(t *testing.T) {
	type setup struct {
		p      *pair
		local  *mr.MR
		remote *mr.MR
		wr     verbs.SendWR
	}
	cases := []struct {
		name     string
		opts     pairOpts
		prep     func(s *setup)
		want     verbs.Status
		wantRecv verbs.Status  // responder's receive completion, if any
		state    verbs.QPState // responder's state after
		fills    bool          // the SEND fills the posted receive before failing
	}{
		{name: "write bad rkey", prep: func(s *setup) { s.wr.RKey ^= 0xFF },
			want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write out of bounds", prep: func(s *setup) { s.wr.RemoteAddr += 4000 },
			want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write before region", prep: func(s *setup) { s.wr.RemoteAddr = s.remote.Addr() - 1 },
			want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write no remote write right", prep: func(s *setup) {
			m, err := s.p.b.pd.pd.Register(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteRead)
			must(s.p.t, err)
			s.remote, s.wr.RemoteAddr, s.wr.RKey = m, m.Addr(), m.RKey()
		}, want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write rkey of another PD", prep: func(s *setup) {
			m, err := newPD(s.p.b.dev).Register(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteAccess)
			must(s.p.t, err)
			s.remote, s.wr.RemoteAddr, s.wr.RKey = m, m.Addr(), m.RKey()
		}, want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write deregistered region", prep: func(s *setup) { must(s.p.t, s.remote.Dereg()) },
			want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "write QP without remote write", opts: pairOpts{access: verbs.LocalWrite | verbs.RemoteRead},
			want: verbs.RemInvReqErr, state: verbs.StateErr},
		{name: "read no remote read right", prep: func(s *setup) {
			m, err := s.p.b.pd.pd.Register(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteWrite)
			must(s.p.t, err)
			s.remote, s.wr.RemoteAddr, s.wr.RKey, s.wr.Opcode = m, m.Addr(), m.RKey(), verbs.OpRead
		}, want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "read into read-only local memory", prep: func(s *setup) {
			m, err := s.p.a.pd.pd.Register(make([]byte, 4096), 0)
			must(s.p.t, err)
			s.wr.Opcode, s.wr.SGL, s.wr.RemoteAddr = verbs.OpRead, []verbs.SGE{sge(m, 0, 4096)}, s.remote.Addr()
		}, want: verbs.LocProtErr, state: verbs.StateRTS},
		{name: "send bad lkey", prep: func(s *setup) {
			s.wr.Opcode = verbs.OpSend
			s.wr.SGL[0].LKey ^= 0xFF
		}, want: verbs.LocProtErr, state: verbs.StateRTS},
		{name: "send longer than the receive", prep: func(s *setup) {
			s.wr.Opcode = verbs.OpSend
			must(s.p.t, s.p.b.qp.PostRecv([]verbs.RecvWR{{ID: 500, SGL: []verbs.SGE{sge(s.remote, 0, 100)}}}))
		}, want: verbs.RemInvReqErr, wantRecv: verbs.LocLenErr, state: verbs.StateErr},
		{name: "atomic misaligned", prep: func(s *setup) {
			s.wr.Opcode, s.wr.RemoteAddr, s.wr.SGL = verbs.OpAtomicFetchAdd, s.remote.Addr()+4, []verbs.SGE{sge(s.local, 0, 8)}
		}, want: verbs.RemInvReqErr, state: verbs.StateErr},
		{name: "atomic no atomic right", prep: func(s *setup) {
			m, err := s.p.b.pd.pd.Register(make([]byte, 64), verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
			must(s.p.t, err)
			s.wr.Opcode, s.wr.RemoteAddr, s.wr.RKey, s.wr.SGL = verbs.OpAtomicCmpSwp, m.Addr(), m.RKey(), []verbs.SGE{sge(s.local, 0, 8)}
		}, want: verbs.RemAccessErr, state: verbs.StateErr},
		{name: "send with invalidate of unknown key", prep: func(s *setup) {
			s.wr.Opcode, s.wr.InvRKey = verbs.OpSendInv, 0xFFFFFF00
			must(s.p.t, s.p.b.qp.PostRecv([]verbs.RecvWR{{ID: 500, SGL: []verbs.SGE{sge(s.remote, 0, 4096)}}}))
		}, want: verbs.RemInvReqErr, wantRecv: verbs.RemInvReqErr, state: verbs.StateErr, fills: true},
		{name: "rnr retries exhausted", opts: pairOpts{rnrRetry: 2, minRNR: 1}, prep: func(s *setup) {
			s.wr.Opcode = verbs.OpSend
		}, want: verbs.RNRRetryExcErr, state: verbs.StateRTS},
		{name: "transport retries exhausted", opts: pairOpts{retry: 3, timeout: 8, faults: mem.Faults{Drop: 1}},
			want: verbs.RetryExcErr, state: verbs.StateRTS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, c.opts)
			s := &setup{p: p, local: p.a.reg(t, 4096), remote: p.b.reg(t, 4096)}
			fill(s.local.Bytes(), 1)
			fill(s.remote.Bytes(), 2)
			s.wr = verbs.SendWR{ID: 1, Opcode: verbs.OpWrite, SGL: []verbs.SGE{sge(s.local, 0, 200)}, RemoteAddr: s.remote.Addr() + 100,
				RKey: s.remote.RKey()}
			if c.prep != nil {
				c.prep(s)
			}
			before := bytes.Clone(s.remote.Bytes())
			// A request that fails, then two that must be flushed.
			s.wr.Flags |= verbs.Signaled
			// The fence keeps them from running before a READ or atomic
			// ahead of them has completed.
			follow := verbs.SendWR{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Fence, SGL: []verbs.SGE{sge(s.local, 0, 8)}, RemoteAddr: s.remote.Addr(), RKey: s.remote.RKey()}
			follow2 := follow
			follow2.ID = 3
			must(t, p.a.qp.PostSend([]verbs.SendWR{s.wr, follow, follow2}))
			wcs := p.poll(&p.a, 3)
			if wcs[0].ID != 1 || wcs[0].Status != c.want {
				t.Fatalf("first WC %v, want status %v\n%s", &wcs[0], c.want, p.debug())
			}
			for i, wc := range wcs[1:] {
				if wc.ID != uint64(i+2) || wc.Status != verbs.WRFlushErr {
					t.Fatalf("WC %v, want ID %d flushed", &wc, i+2)
				}
			}
			if st := p.a.qp.State(); st != verbs.StateErr {
				t.Fatalf("requester state %v, want ERR", st)
			}
			// Posting to a QP in ERR is accepted and flushed.
			must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(s.local, 0, 1)}}}))
			if wc := p.poll(&p.a, 1)[0]; wc.ID != 9 || wc.Status != verbs.WRFlushErr {
				t.Fatalf("post in ERR: %v", &wc)
			}
			if c.wantRecv != verbs.Success {
				wb := p.poll(&p.b, 1)[0]
				if wb.ID != 500 || wb.Status != c.wantRecv {
					t.Fatalf("responder WC %v, want %v", &wb, c.wantRecv)
				}
			}
			p.drain()
			if !c.fills && !bytes.Equal(s.remote.Bytes(), before) {
				t.Fatal("the responder's memory changed")
			}
			if st := p.b.qp.State(); st != c.state {
				t.Fatalf("responder state %v, want %v", st, c.state)
			}
			if c.state == verbs.StateErr {
				// The responder's receive queue is flushed too.
				must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 600}}))
				if wb := p.poll(&p.b, 1)[0]; wb.ID != 600 || wb.Status != verbs.WRFlushErr {
					t.Fatalf("responder flush: %v", &wb)
				}
			}
		})
	}
}

// TestRNRRecovers shows an RNR NAK followed by success once a receive is
// posted, as in the imm_rnr capture.
func TestRNRRecovers(t *testing.T) {
	p := newPair(t, pairOpts{minRNR: 19}) // 5.12 ms
	src := p.a.reg(t, 64)
	dst := p.b.reg(t, 64)
	fill(src.Bytes(), 3)
	must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, 64)}}}))
	// Let the first RNR NAK happen, then post the receive 12 ms later.
	start := p.net.Clock().Now()
	must(t, p.net.Run(func() bool { return p.net.Clock().Now().Sub(start) > 12e6 }, 20e6))
	must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 2, SGL: []verbs.SGE{sge(dst, 0, 64)}}}))
	if wc := p.poll(&p.a, 1)[0]; wc.Status != verbs.Success {
		t.Fatalf("send WC %v", &wc)
	}
	if wc := p.poll(&p.b, 1)[0]; wc.Status != verbs.Success || !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatalf("recv WC %v", &wc)
	}
	ca, cb := p.a.qp.Counters(), p.b.qp.Counters()
	if ca.RcvdRNRErr < 2 || cb.SendRNRErr != ca.RcvdRNRErr {
		t.Fatalf("RNR NAKs: received %d, sent %d", ca.RcvdRNRErr, cb.SendRNRErr)
	}
}
