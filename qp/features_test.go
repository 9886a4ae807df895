package qp

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

func TestSRQ(t *testing.T) {
	p := newPair(t, pairOpts{srq: true})
	srq := p.b.qp.srq
	if err := p.b.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrHasSRQ) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v", err)
	}
	dst := p.b.reg(t, 4*1024)
	for i := range 4 {
		must(t, srq.PostRecv([]verbs.RecvWR{{ID: uint64(10 + i), SGL: []verbs.SGE{sge(dst, i*1024, 1024)}}}))
	}
	must(t, srq.Modify(2)) // event when fewer than 2 are left
	src := p.a.reg(t, 100)
	for i := range 3 {
		fill(src.Bytes(), i)
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(src, 0, 100)}}}))
		wc := p.poll(&p.b, 1)[0]
		if wc.Status != verbs.Success || wc.ID != uint64(10+i) || !bytes.Equal(dst.Bytes()[i*1024:i*1024+100], src.Bytes()) {
			t.Fatalf("receive %d: %v", i, &wc)
		}
	}
	select {
	case e := <-p.b.dev.Events():
		if e.Type != verbs.EventSRQLimitReached {
			t.Fatalf("event %v", e.Type)
		}
	default:
		t.Fatal("no SRQ limit event")
	}
	if srq.Len() != 1 {
		t.Fatalf("SRQ holds %d", srq.Len())
	}
	if err := srq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroying an SRQ in use: %v", err)
	}
}

func TestInlineUnsignaledSolicited(t *testing.T) {
	p := newPair(t, pairOpts{})
	dst := p.b.reg(t, 4096)
	must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge(dst, 0, 4096)}}, {ID: 2, SGL: []verbs.SGE{sge(dst, 2048, 2048)}}}))
	p.b.cq.ReqNotify(true) // solicited only
	// An unsignaled inline SEND (no completion for it), then a signaled
	// solicited one.
	msg := []byte("inline payload, copied at post time")
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: bytes.Clone(msg)},
		{ID: 2, Opcode: verbs.OpSendImm, Flags: verbs.Inline | verbs.Signaled | verbs.Solicited, InlineData: msg, Imm: 5},
	}
	must(t, p.a.qp.PostSend(wrs))
	clear(msg) // inline data is the post's own copy
	wa := p.poll(&p.a, 1)
	if len(wa) != 1 || wa[0].ID != 2 {
		t.Fatalf("completions %v", wa)
	}
	wb := p.poll(&p.b, 2)
	if !bytes.Equal(dst.Bytes()[:len(wrs[0].InlineData)], wrs[0].InlineData) {
		t.Fatal("inline data differs")
	}
	if wb[1].Imm != 5 {
		t.Fatalf("WC %v", &wb[1])
	}
	select {
	case <-p.b.cq.C():
	default:
		t.Fatal("no notification for the solicited completion")
	}
	if err := p.a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: make([]byte, 1000)}}); !errors.Is(err, verbs.ErrInlineTooLong) {
		t.Fatalf("oversized inline: %v", err)
	}
}

func TestFenceOrdersAfterRead(t *testing.T) {
	// A WRITE with a fence does not start before the READ ahead of it
	// has completed: it overwrites what the READ fetched only after.
	p := newPair(t, pairOpts{})
	local := p.a.reg(t, 8192)
	remote := p.b.reg(t, 4096)
	fill(remote.Bytes(), 1)
	before := bytes.Clone(remote.Bytes())
	fill(local.Bytes()[4096:], 2)
	must(t, p.a.qp.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 4096)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled | verbs.Fence, SGL: []verbs.SGE{sge(local, 4096, 4096)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
	}))
	p.poll(&p.a, 2)
	if !bytes.Equal(local.Bytes()[:4096], before) {
		t.Fatal("the READ saw the fenced WRITE")
	}
}

func TestCQOverflow(t *testing.T) {
	p := newPair(t, pairOpts{cqe: 2, signalAll: true})
	src := p.a.reg(t, 8)
	remote := p.b.reg(t, 8)
	for range 3 {
		must(t, p.a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWrite, SGL: []verbs.SGE{sge(src, 0, 8)},
			RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
	}
	p.drain()
	if n := p.a.cq.Len(); n != 2 {
		t.Fatalf("CQ holds %d", n)
	}
	select {
	case e := <-p.a.dev.Events():
		if e.Type != verbs.EventCQErr {
			t.Fatalf("event %v", e.Type)
		}
	default:
		t.Fatal("no CQ_ERR event")
	}
}

func TestSQDrain(t *testing.T) {
	p := newPair(t, pairOpts{})
	src := p.a.reg(t, 1<<16)
	remote := p.b.reg(t, 1<<16)
	must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL: []verbs.SGE{sge(src, 0, 1<<16)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
	must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateSQD, SQDrainNotify: true}, verbs.AttrState|verbs.AttrEnSQDAsyncNotfy))
	// Posted while draining: held until the QP is back in RTS.
	must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL: []verbs.SGE{sge(src, 0, 8)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
	if wc := p.poll(&p.a, 1)[0]; wc.ID != 1 {
		t.Fatalf("WC %v", &wc)
	}
	if got := p.settle(&p.a); len(got) != 0 {
		t.Fatalf("a request ran in SQD: %v", got)
	}
	select {
	case e := <-p.a.dev.Events():
		if e.Type != verbs.EventSQDrained {
			t.Fatalf("event %v", e.Type)
		}
	default:
		t.Fatal("no SQ_DRAINED event")
	}
	must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState))
	if wc := p.poll(&p.a, 1)[0]; wc.ID != 2 || wc.Status != verbs.Success {
		t.Fatalf("WC %v", &wc)
	}
}

// TestUCLoss: UC has no retransmission; a lost packet loses its message
// (the receive is reused for the next one) and later messages arrive.
func TestUCLoss(t *testing.T) {
	p := newPair(t, pairOpts{typ: verbs.UC, faults: mem.Faults{Drop: 0.05}, seed: 3})
	src := p.a.reg(t, 8192)
	dst := p.b.reg(t, 8192)
	const n = 200
	for i := range n {
		must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{sge(dst, 0, 8192)}}}))
	}
	for i := range n {
		fill(src.Bytes(), i)
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpSendImm, Imm: uint32(i),
			Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, 4000)}}}))
		p.drain()
	}
	if wa := p.settle(&p.a); len(wa) != n {
		t.Fatalf("%d send completions, want %d", len(wa), n)
	}
	wb := p.settle(&p.b)
	if len(wb) == 0 || len(wb) >= n {
		t.Fatalf("%d of %d messages delivered over a 5%% lossy UC link", len(wb), n)
	}
	last := -1
	for _, wc := range wb {
		if wc.Status != verbs.Success || wc.ByteLen != 4000 || int(wc.Imm) <= last {
			t.Fatalf("WC %v after %d", &wc, last)
		}
		last = int(wc.Imm)
	}
	c := p.b.qp.Counters()
	if c.DropUCMessage == 0 {
		t.Fatal("no UC message drops counted")
	}
	t.Logf("%d of %d delivered; %s", len(wb), n, &c)
}

// TestIdleQPMemory creates 10,000 QPs that are never used and checks the
// memory each takes.
func TestIdleQPMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	n := mem.NewNetwork(nil)
	ep, _ := n.Endpoint(addrA)
	d, err := New(ep, nil)
	must(t, err)
	defer d.Close()
	pdi, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	const count = 10000
	qps := make([]*QP, 0, count)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range count {
		q, err := d.createQP(pdi.(*PD), &verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2}})
		must(t, err)
		qps = append(qps, q)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (after.HeapAlloc - before.HeapAlloc) / count
	t.Logf("%d idle QPs: %d bytes each", count, per)
	if per > 8<<10 {
		t.Errorf("an idle QP takes %d bytes, more than 8 KiB", per)
	}
	runtime.KeepAlive(qps)
}

func TestCQWait(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.a.cq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v", err)
	}
}
