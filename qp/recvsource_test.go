package qp

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// fakeSource holds receives as a program's ring does until the engine
// pulls them; busy makes it return at once, as uverbs's does while its
// worker drains the ring.
type fakeSource struct {
	wrs   []verbs.RecvWR
	busy  bool
	pulls int
}

func (f *fakeSource) Pull(post func(*verbs.RecvWR) error) {
	f.pulls++
	if f.busy {
		return
	}
	for len(f.wrs) > 0 && post(&f.wrs[0]) == nil {
		f.wrs = f.wrs[1:]
	}
}

// TestRecvSource sends to QPs whose receive queue is empty while their
// source holds receives: the responder takes them from the source, in
// order, instead of dropping the UD or UC message or answering the RC one
// with an RNR NAK; a source that cannot give any (busy) leaves the QP as
// an empty queue does. An SRQ pulls from its own source. A receive the
// source holds that the queue refuses (too many SGEs) stays with it.
func TestRecvSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    pairOpts
	}{
		{"UD", pairOpts{typ: verbs.UD}},
		{"UC", pairOpts{typ: verbs.UC}},
		{"RC", pairOpts{typ: verbs.RC, rnrRetry: 1}},
		{"RC SRQ", pairOpts{typ: verbs.RC, srq: true, rnrRetry: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.o)
			var ah verbs.AH
			if tc.o.typ == verbs.UD {
				var err error
				ah, err = p.a.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(p.b.dev.Addr())})
				must(t, err)
			}
			src, dst := p.a.reg(t, 64), p.b.reg(t, 4096)
			fill(src.Bytes(), 7)
			send := func(id uint64) {
				must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled,
					SGL: []verbs.SGE{sge(src, 0, 64)}, AH: ah, RemoteQPN: p.b.qp.QPN(), RemoteQKey: 0x11111111}}))
			}
			off := 0
			if tc.o.typ == verbs.UD {
				off = GRHLen
			}
			fs := &fakeSource{wrs: []verbs.RecvWR{
				{ID: 1, SGL: []verbs.SGE{sge(dst, 0, off+64)}},
				{ID: 2, SGL: []verbs.SGE{sge(dst, 1024, off+64)}},
				// More SGEs than the queue takes: refused, kept.
				{ID: 3, SGL: make([]verbs.SGE, 5)},
			}}
			if tc.o.srq {
				p.b.qp.srq.SetRecvSource(fs)
			} else {
				p.b.qp.SetRecvSource(fs)
			}
			send(10)
			send(11)
			wcs := p.poll(&p.b, 2)
			for i, wc := range wcs {
				if wc.Status != verbs.Success || wc.ID != uint64(i+1) || wc.Opcode != verbs.WCRecv {
					t.Fatalf("receive %d: %v", i, &wc)
				}
			}
			if got := dst.Bytes()[off : off+64]; string(got) != string(src.Bytes()) {
				t.Fatalf("the first receive holds % x", got[:8])
			}
			if len(fs.wrs) != 1 || fs.wrs[0].ID != 3 || fs.pulls == 0 {
				t.Fatalf("the source holds %d receives after %d pulls, want the refused one", len(fs.wrs), fs.pulls)
			}
			p.poll(&p.a, 2)
			c := p.b.qp.Counters()
			if c.DropNoRecv != 0 || c.SendRNRErr != 0 {
				t.Fatalf("drops %d, RNR NAKs %d with receives in the source", c.DropNoRecv, c.SendRNRErr)
			}

			// A busy source gives nothing: the message finds no receive.
			fs.busy, fs.wrs = true, []verbs.RecvWR{{ID: 4, SGL: []verbs.SGE{sge(dst, 2048, off+64)}}}
			pulls := fs.pulls
			send(12)
			p.settle(&p.b)
			c = p.b.qp.Counters()
			if fs.pulls == pulls || len(fs.wrs) != 1 {
				t.Fatalf("a busy source: %d pulls, %d receives left", fs.pulls-pulls, len(fs.wrs))
			}
			switch tc.o.typ {
			case verbs.RC:
				if c.SendRNRErr == 0 {
					t.Fatalf("no RNR NAK for a SEND that found no receive: %+v", c)
				}
			default:
				if c.DropNoRecv != 1 {
					t.Fatalf("DropNoRecv %d, want 1", c.DropNoRecv)
				}
			}
		})
	}
}
