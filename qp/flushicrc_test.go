package qp

import (
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// rxeFlushLink treats FLUSH as Linux's rxe does (bth.FlushICRCRXE): the
// FLUSHes sent through it carry rxe's ICRC, and a received FLUSH that
// carries the IBTA's is dropped, as rxe drops it for a bad ICRC.
type rxeFlushLink struct {
	transport.Transport
	dropped atomic.Int32
}

func (l *rxeFlushLink) Start(h transport.Handler) error {
	return l.Transport.Start(func(pkts []transport.Packet) {
		kept := pkts[:0]
		for _, p := range pkts {
			if bth.IsFlush(p.Data) && !p.RXEFlushICRC {
				l.dropped.Add(1)
				continue
			}
			kept = append(kept, p)
		}
		h(kept)
	})
}

func (l *rxeFlushLink) Send(pkts []transport.Packet) error {
	for i := range pkts {
		if bth.IsFlush(pkts[i].Data) {
			pkts[i].RXEFlushICRC = true
		}
	}
	return l.Transport.Send(pkts)
}

// TestFlushICRCOfRXE: a FLUSH to a peer that takes only rxe's ICRC of a
// FLUSH completes, the first one at its second try (with the IBTA's ICRC
// first, then rxe's) and the next at its first, the QP keeping the style
// that worked; a FLUSH from such a peer is taken (no ICRC error), and the
// QP that got it sends its own FLUSHes in that style from then on.
func TestFlushICRCOfRXE(t *testing.T) {
	flush := func(p *pair, from, to *end, m interface{ RKey() uint32 }) verbs.WC {
		t.Helper()
		must(t, from.qp.PostSend([]verbs.SendWR{{ID: 7, Opcode: verbs.OpFlush, Flags: verbs.Signaled, RKey: m.RKey(),
			Flush: verbs.FlushWR{Type: verbs.PlaceGlobal, Level: verbs.FlushMR}}}))
		return p.poll(from, 1)[0]
	}
	t.Run("goroce first", func(t *testing.T) {
		var link *rxeFlushLink
		p := newPair(t, pairOpts{access: flushQPAccess, timeout: 10, wrapB: func(tr transport.Transport) transport.Transport {
			link = &rxeFlushLink{Transport: tr}
			return link
		}})
		mb := p.b.regFlush(t, 4096)
		if wc := flush(p, &p.a, &p.b, mb); wc.Status != verbs.Success {
			t.Fatalf("the first FLUSH: %v", &wc)
		}
		if n := link.dropped.Load(); n != 1 {
			t.Errorf("the first FLUSH: the peer dropped %d tries, want 1 (the IBTA's ICRC)", n)
		}
		for i := range 3 {
			if wc := flush(p, &p.a, &p.b, mb); wc.Status != verbs.Success {
				t.Fatalf("FLUSH %d: %v", i+2, &wc)
			}
		}
		if n := link.dropped.Load(); n != 1 {
			t.Errorf("the later FLUSHes: the peer dropped %d tries in all, want still 1", n)
		}
	})
	t.Run("rxe first", func(t *testing.T) {
		var link *rxeFlushLink
		p := newPair(t, pairOpts{access: flushQPAccess, timeout: 10, wrapB: func(tr transport.Transport) transport.Transport {
			link = &rxeFlushLink{Transport: tr}
			return link
		}})
		ma, mb := p.a.regFlush(t, 4096), p.b.regFlush(t, 4096)
		if wc := flush(p, &p.b, &p.a, ma); wc.Status != verbs.Success {
			t.Fatalf("the peer's FLUSH: %v", &wc)
		}
		if n := p.a.dev.t.Stats().RxICRCErrors; n != 0 {
			t.Errorf("the peer's FLUSH with rxe's ICRC: %d ICRC errors", n)
		}
		if wc := flush(p, &p.a, &p.b, mb); wc.Status != verbs.Success {
			t.Fatalf("the FLUSH back: %v", &wc)
		}
		if n := link.dropped.Load(); n != 0 {
			t.Errorf("the FLUSH back: the peer dropped %d tries, want 0 (the QP learnt rxe's ICRC)", n)
		}
	})
}
