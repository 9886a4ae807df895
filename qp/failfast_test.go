package qp

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// Fail-fast tests through the verbs API: when the peer dies, goes silent
// or misbehaves, every work request still completes exactly once, and the
// program learns it within a bounded (simulated) time. The dead peer is
// in deadpeer_test.go.

// tapLink passes a link's traffic through, and lets a test see, rewrite
// or drop each packet received (rx) or sent (tx) on the way. Received
// packets reach the device one at a time, so that rx may act on the
// engine between two packets of a batch.
type tapLink struct {
	transport.Transport
	mu sync.Mutex
	rx func(p *transport.Packet) bool // false drops the packet
	tx func(p *transport.Packet) bool
}

func (l *tapLink) Start(h transport.Handler) error {
	return l.Transport.Start(func(pkts []transport.Packet) {
		for i := range pkts {
			l.mu.Lock()
			rx := l.rx
			l.mu.Unlock()
			if rx == nil || rx(&pkts[i]) {
				h(pkts[i : i+1])
			}
		}
	})
}

func (l *tapLink) Send(pkts []transport.Packet) error {
	l.mu.Lock()
	tx := l.tx
	l.mu.Unlock()
	if tx == nil {
		return l.Transport.Send(pkts)
	}
	out := make([]transport.Packet, 0, len(pkts))
	for _, p := range pkts {
		p.Data, p.Payload = p.AppendTo(nil), nil
		if tx(&p) {
			out = append(out, p)
		}
	}
	return l.Transport.Send(out)
}

func (l *tapLink) setRx(f func(p *transport.Packet) bool) { l.mu.Lock(); l.rx = f; l.mu.Unlock() }

// tapPair returns a pair whose B side's link is a tapLink.
func tapPair(t *testing.T, o pairOpts) (*pair, *tapLink) {
	var tap *tapLink
	o.wrapB = func(tr transport.Transport) transport.Transport {
		tap = &tapLink{Transport: tr}
		return tap
	}
	return newPair(t, o), tap
}

// recvIDs checks that the completions hold each of the receives ids
// exactly once, and returns their statuses by ID.
func recvIDs(t *testing.T, wcs []verbs.WC, ids ...uint64) map[uint64]verbs.Status {
	t.Helper()
	got := map[uint64]verbs.Status{}
	for _, wc := range wcs {
		if _, dup := got[wc.ID]; dup || !slices.Contains(ids, wc.ID) {
			t.Fatalf("receive %v completed twice or was never posted", &wc)
		}
		got[wc.ID] = wc.Status
	}
	if len(got) != len(ids) {
		t.Fatalf("%d of the %d receives completed: %v", len(got), len(ids), got)
	}
	return got
}

// TestFailFastSendMidMessage: a SEND that fails part way, at the
// responder or because its QP goes to ERR, leaves no receive behind: the
// one the SEND took completes with the error (or WR_FLUSH_ERR), the
// others are flushed, each exactly once, and the requester learns it at
// once from the NAK, or within its retry count when the responder went
// silent.
func TestFailFastSendMidMessage(t *testing.T) {
	const timeout = 14 // 67 ms
	cases := []struct {
		name     string
		recvLen  int           // the first receive's length
		toErr    bool          // B goes to ERR after the SEND's first packet
		wantRecv verbs.Status  // the first receive's status
		wantSend verbs.Status  // the SEND's
		within   time.Duration // the SEND fails within
	}{
		{name: "receive too short", recvLen: 300, wantRecv: verbs.LocLenErr, wantSend: verbs.RemInvReqErr,
			within: bth.ACKTimeout(timeout)},
		{name: "responder modified to ERR", recvLen: 4096, toErr: true, wantRecv: verbs.WRFlushErr,
			wantSend: verbs.RetryExcErr, within: 9 * bth.ACKTimeout(timeout)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, tap := tapPair(t, pairOpts{mtu: bth.MTU256, timeout: timeout})
			src, dst := p.a.reg(t, 1024), p.b.reg(t, 3*4096)
			must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge(dst, 0, c.recvLen)}},
				{ID: 2, SGL: []verbs.SGE{sge(dst, 4096, 4096)}}, {ID: 3, SGL: []verbs.SGE{sge(dst, 8192, 4096)}}}))
			n := 0
			tap.setRx(func(pk *transport.Packet) bool {
				n++
				if n == 2 && c.toErr {
					must(t, p.b.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
				}
				return true
			})
			start := p.net.Clock().Now()
			must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SGL: []verbs.SGE{sge(src, 0, 700)}}}))
			wa := p.poll(&p.a, 1)
			if took := p.net.Clock().Now().Sub(start); wa[0].Status != c.wantSend || took > c.within {
				t.Fatalf("SEND %v after %v, want %v within %v", &wa[0], took, c.wantSend, c.within)
			}
			if st := p.b.qp.State(); st != verbs.StateErr {
				t.Fatalf("responder state %v", st)
			}
			got := recvIDs(t, p.settle(&p.b), 1, 2, 3)
			if got[1] != c.wantRecv || got[2] != verbs.WRFlushErr || got[3] != verbs.WRFlushErr {
				t.Fatalf("receives %v, want 1: %v, 2 and 3: WR_FLUSH_ERR", got, c.wantRecv)
			}
		})
	}
}

// rebuild returns the RoCE packet data with opcode op and the payload
// edit makes of its own, every other field kept (an AETH the new opcode
// needs is an ACK; one it has not is dropped).
func rebuild(data []byte, op bth.Opcode, edit func([]byte) []byte) []byte {
	var p bth.Packet
	if p.Parse(data) != nil {
		return data
	}
	payload := edit(append([]byte(nil), p.Payload...))
	f := p.BTH.Fields()
	f.Opcode = op
	out := make([]byte, bth.Len(op, len(payload)))
	var q bth.Packet
	q.Build(out, &f, len(payload))
	copy(q.Payload, payload)
	if q.AETH != nil {
		a := bth.AETHFields{Syndrome: bth.ACKSyndrome(bth.NoCredits)}
		if p.AETH != nil {
			a = p.AETH.Fields()
		}
		q.AETH.Encode(&a)
	}
	return out
}

// TestFailFastReadResponseAbuse: a responder whose READ responses come in
// the wrong opcode sequence or with the wrong length fails the READ at
// once (no retry, no timeout), with the status of the fault; the
// requester's QP goes to ERR, what follows is flushed, and the READ's
// buffer holds nothing of the bad response.
func TestFailFastReadResponseAbuse(t *testing.T) {
	const mtu = 256
	same := func(b []byte) []byte { return b }
	cases := []struct {
		name string
		nth  int // the response (0-2) the responder rewrites
		op   bth.Opcode
		edit func([]byte) []byte
		want verbs.Status
	}{
		{"a second FIRST", 1, bth.RCReadResponseFirst, same, verbs.BadRespErr},
		{"MIDDLE without FIRST", 0, bth.RCReadResponseMiddle, same, verbs.BadRespErr},
		{"LAST too short", 2, bth.RCReadResponseLast, func(b []byte) []byte { return b[:len(b)-4] }, verbs.LocLenErr},
		{"LAST too long", 2, bth.RCReadResponseLast, func(b []byte) []byte { return append(b, 1, 2, 3, 4) }, verbs.LocProtErr},
		{"ends early", 1, bth.RCReadResponseLast, same, verbs.LocLenErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, tap := tapPair(t, pairOpts{mtu: bth.MTU256})
			local, remote := p.a.reg(t, 4*mtu), p.b.reg(t, 4*mtu)
			fill(remote.Bytes(), 5)
			before := slices.Clone(local.Bytes())
			n := 0
			tap.mu.Lock()
			tap.tx = func(pk *transport.Packet) bool {
				if bth.Opcode(pk.Data[0]).Info().Operation == bth.OpReadResponse {
					if n == c.nth {
						pk.Data = rebuild(pk.Data, c.op, c.edit)
					}
					n++
				}
				return true
			}
			tap.mu.Unlock()
			start := p.net.Clock().Now()
			must(t, p.a.qp.PostSend([]verbs.SendWR{
				{ID: 1, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 3*mtu)},
					RemoteAddr: remote.Addr(), RKey: remote.RKey()},
				{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled | verbs.Fence, SGL: []verbs.SGE{sge(local, 0, 8)},
					RemoteAddr: remote.Addr(), RKey: remote.RKey()},
			}))
			wcs := p.poll(&p.a, 2)
			took := p.net.Clock().Now().Sub(start)
			if wcs[0].ID != 1 || wcs[0].Status != c.want || wcs[1].ID != 2 || wcs[1].Status != verbs.WRFlushErr {
				t.Fatalf("completions %v, %v: want the READ %v, the WRITE flushed", &wcs[0], &wcs[1], c.want)
			}
			if d := bth.ACKTimeout(14); took >= d {
				t.Fatalf("the READ failed after %v, a retransmission timeout (%v) or more", took, d)
			}
			if st := p.a.qp.State(); st != verbs.StateErr {
				t.Fatalf("requester state %v, want ERR", st)
			}
			good := c.nth * mtu // what came before the bad response
			if !slices.Equal(local.Bytes()[:good], remote.Bytes()[:good]) || !slices.Equal(local.Bytes()[good:], before[good:]) {
				t.Fatal("the READ's buffer holds something other than the good responses")
			}
		})
	}
}

// events returns the asynchronous events waiting on d.
func events(d *Device) []verbs.EventType {
	var out []verbs.EventType
	for {
		select {
		case e := <-d.Events():
			out = append(out, e.Type)
		default:
			return out
		}
	}
}

// TestFailFastCQOverflow: a CQ too small for what completes loses the
// completions that do not fit, as hardware does, and says so: EventCQErr,
// and for each QP that lost one EventQPFatal and ERR, so that nothing
// stops completing in silence. Once polled, the CQ takes completions
// again: what is posted after completes WR_FLUSH_ERR, at once.
func TestFailFastCQOverflow(t *testing.T) {
	t.Run("send completions", func(t *testing.T) {
		p := newPair(t, pairOpts{cqe: 4})
		local, remote := p.a.reg(t, 64), p.b.reg(t, 64)
		write := func(id uint64) verbs.SendWR {
			return verbs.SendWR{ID: id, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 8)},
				RemoteAddr: remote.Addr(), RKey: remote.RKey()}
		}
		var wrs []verbs.SendWR
		for i := range 16 {
			wrs = append(wrs, write(uint64(i)))
		}
		must(t, p.a.qp.PostSend(wrs))
		p.drain()
		if got := events(p.a.dev); !slices.Equal(got, []verbs.EventType{verbs.EventCQErr, verbs.EventQPFatal}) {
			t.Fatalf("events %v, want CQ_ERR, QP_FATAL", got)
		}
		if st := p.a.qp.State(); st != verbs.StateErr {
			t.Fatalf("state %v, want ERR", st)
		}
		if c := p.a.qp.Counters(); c.LostCompletions != 12 {
			t.Fatalf("%d completions lost, want 12", c.LostCompletions)
		}
		for i, wc := range p.settle(&p.a) {
			if wc.ID != uint64(i) || wc.Status != verbs.Success {
				t.Fatalf("completion %v", &wc)
			}
		}
		start := p.net.Clock().Now()
		must(t, p.a.qp.PostSend([]verbs.SendWR{write(99)}))
		if wc := p.poll(&p.a, 1)[0]; wc.ID != 99 || wc.Status != verbs.WRFlushErr || p.net.Clock().Now() != start {
			t.Fatalf("after the overrun: %v", &wc)
		}
	})
	t.Run("receive completions", func(t *testing.T) {
		const timeout = 14
		p := newPair(t, pairOpts{cqe: 2, timeout: timeout})
		local, dst := p.a.reg(t, 64), p.b.reg(t, 4*64)
		for i := range 4 {
			must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(10 + i), SGL: []verbs.SGE{sge(dst, 64*i, 64)}}}))
		}
		start := p.net.Clock().Now()
		for i := range 4 {
			must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SGL: []verbs.SGE{sge(local, 0, 8)}}}))
		}
		// The requester learns it from its retry count: the responder
		// went to ERR without acknowledging the SEND whose completion
		// it lost (rxe does the same).
		wa := p.poll(&p.a, 4)
		want := []verbs.Status{verbs.Success, verbs.Success, verbs.RetryExcErr, verbs.WRFlushErr}
		for i, wc := range wa {
			if wc.Status != want[i] {
				t.Fatalf("send completion %d: %v, want %v", i, &wc, want[i])
			}
		}
		if took := p.net.Clock().Now().Sub(start); took > 9*bth.ACKTimeout(timeout) {
			t.Fatalf("the requester learned it after %v", took)
		}
		if got := events(p.b.dev); !slices.Equal(got, []verbs.EventType{verbs.EventCQErr, verbs.EventQPFatal}) {
			t.Fatalf("responder events %v, want CQ_ERR, QP_FATAL", got)
		}
		if st := p.b.qp.State(); st != verbs.StateErr {
			t.Fatalf("responder state %v", st)
		}
		got := recvIDs(t, p.settle(&p.b), 10, 11)
		if got[10] != verbs.Success || got[11] != verbs.Success {
			t.Fatalf("receives %v", got)
		}
		must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 20}}))
		if wc := p.poll(&p.b, 1)[0]; wc.ID != 20 || wc.Status != verbs.WRFlushErr {
			t.Fatalf("receive posted after the overrun: %v", &wc)
		}
	})
}
