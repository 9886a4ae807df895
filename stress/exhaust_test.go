//go:build linux

package stress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// TestREADsBeyondResources: a peer with a connection of its own sends
// READ requests one after another without waiting for their responses,
// far more than the two responder resources the connection negotiated.
// The responder answers each in order from a ring of two slots (as rxe
// does; the IBTA leaves a requester that exceeds the limit to the
// responder), its memory stays flat, and the connection stays up.
func TestREADsBeyondResources(t *testing.T) {
	ips := loopbacks(2)
	port := freePort(t, ips...)
	v := newSide(t, openDev(t, ips[0], port, nil), 64)
	src := v.reg(t, 64<<10, verbs.RemoteRead)
	q := v.qp(t, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	psn := bth.PSN(0x123456)
	if err := roce.Connect(q, &roce.Remote{QPN: 0x999, PSN: uint32(psn), GID: verbs.GIDFromAddr(ips[1])},
		&roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 2, MaxDestRDAtomic: 2}); err != nil {
		t.Fatal(err)
	}
	answers, err := net.ListenPacket("udp4", netip.AddrPortFrom(ips[1], port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer answers.Close()
	answers.(*net.UDPConn).SetReadBuffer(32 << 20)
	got := make(chan int)
	go func() {
		n, buf := 0, make([]byte, 8192)
		for {
			answers.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := answers.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	h := newHostile(t, netip.AddrPortFrom(ips[1], 0), netip.AddrPortFrom(ips[0], port))
	n := 5000
	if long() {
		n = 50000
	}
	h0 := heap()
	for i := range n {
		h.send(h.build(pkt{op: bth.RCReadRequest, qpn: q.QPN(), psn: psn.Add(uint32(i)), ackReq: true,
			reth: &bth.RETHFields{VA: src.Addr() + uint64(i%16)*4096, RKey: src.RKey(), DMALen: 4096}}))
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // the size of the peer's socket buffer, not the engine, sets the pace
		}
	}
	answered := <-got
	grew := int64(heap()) - int64(h0)
	c := q.(*qp.QP).Counters()
	if st := state(t, q); st != verbs.StateRTS {
		t.Errorf("the responder's QP is in %v", st)
	}
	// Each READ of one MTU is one response; the peer's socket may lose
	// some, the responder's counters may not.
	if c.RcvdPkts != uint64(n) || c.SentPkts != uint64(n) || grew > 1<<20 {
		t.Errorf("%d READs: the responder counts %v; the heap grew %d B", n, c.String(), grew)
	}
	summary(t, "%d READs in a row on a connection with 2 responder resources: %d answered (%d reached the peer's "+
		"socket), QP still RTS, heap %+d B", n, c.SentPkts, answered, grew)
}

// TestSilentPeerREADs: a requester with many READs outstanding (16 at a
// time, 256 posted) whose peer dies: the QP gives up after its retries,
// in the time they take, every work request completes exactly once (the
// first RETRY_EXC_ERR, the rest WR_FLUSH_ERR), and nothing is left
// behind.
func TestSilentPeerREADs(t *testing.T) {
	ips := loopbacks(2)
	port := freePort(t, ips...)
	a := newSide(t, openDev(t, ips[0], port, nil), 1024)
	bdev := openDev(t, ips[1], port, nil)
	b := newSide(t, bdev, 64)
	dst := a.reg(t, 256*4096, verbs.LocalWrite)
	src := b.reg(t, 256*4096, verbs.RemoteRead)
	qa := a.qp(t, verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	qb := b.qp(t, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	// ACK timeout 10: 4.2 ms, 7 retries: the QP gives up about 34 ms
	// after the peer's last answer.
	connect(t, a, b, qa, qb, roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 16, MaxDestRDAtomic: 16, Timeout: 10})
	g0 := runtime.NumGoroutine()
	bdev.Close() // the peer dies
	var wrs []verbs.SendWR
	for i := range 256 {
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRead, Flags: verbs.Signaled,
			SGL:        []verbs.SGE{{Addr: dst.Addr() + uint64(i)*4096, Length: 4096, LKey: dst.LKey()}},
			RemoteAddr: src.Addr() + uint64(i)*4096, RKey: src.RKey()})
	}
	t0 := time.Now()
	if err := qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]verbs.Status{}
	for len(seen) < len(wrs) {
		wc, ok := waitWC(t, a.cq, 10*time.Second)
		if !ok {
			t.Fatalf("%d of %d READs completed; the QP is in %v", len(seen), len(wrs), state(t, qa))
		}
		if _, dup := seen[wc.ID]; dup {
			t.Fatalf("READ %d completed twice", wc.ID)
		}
		seen[wc.ID] = wc.Status
	}
	el := time.Since(t0)
	if seen[0] != verbs.RetryExcErr {
		t.Errorf("the first READ completed %v, want RETRY_EXC_ERR", seen[0])
	}
	for id, st := range seen {
		if id > 0 && st != verbs.WRFlushErr {
			t.Errorf("READ %d completed %v, want WR_FLUSH_ERR", id, st)
		}
	}
	if wc, ok := waitWC(t, a.cq, 100*time.Millisecond); ok {
		t.Errorf("a completion more: %v", &wc)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Errorf("goroutines: %d before, %d after", g0, g)
	}
	ctr := qa.(*qp.QP).Counters()
	summary(t, "256 READs posted, 16 outstanding, peer dead: all completed once in %v (the first RETRY_EXC_ERR "+
		"after %d retries, 255 WR_FLUSH_ERR); QP in %v", el.Round(time.Millisecond), ctr.CompleterRetryErr, state(t, qa))
}

// TestDroppedConnections: a peer opens connections through rdma_cm and
// goes away without a word (its device closes: no DREQ). The server's
// agent tracks them until the server closes them; past Config.MaxConns
// new requests are refused, counted, and the table stays at the bound.
func TestDroppedConnections(t *testing.T) {
	n := 1000
	if long() {
		n = 10000
	}
	r := newCMRig(t, &cm.Config{MaxConns: n})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h0 := heap()
	t0 := time.Now()
	for i := range n {
		if _, err := cm.Dial(ctx, r.client, netip.AddrPortFrom(r.ips[0], r.service), nil); err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
	}
	el := time.Since(t0)
	for r.accepted.Load() < int64(n) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	held := heap()
	r.client.Close() // gone, without a DREQ
	_, err := cm.Dial(ctx, openDev(t, r.ips[2], r.port, nil), netip.AddrPortFrom(r.ips[0], r.service), nil)
	var rej *cm.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("a dial past MaxConns: %v", err)
	}
	s := r.agent.Stats()
	if s.Conns != n || s.Refused != 1 {
		t.Errorf("the agent tracks %d connections and refused %d; want %d and 1", s.Conns, s.Refused, n)
	}
	perConn := float64(held-h0) / float64(n)
	summary(t, "%d connections opened through rdma_cm in %v (%.0f a second), then dropped by the peer: the server "+
		"holds %d (%.0f B of heap each, QP and CQ included) and refuses more (%v)", n, el.Round(time.Millisecond),
		float64(n)/el.Seconds(), s.Conns, perConn, rej.Reason)
}

// TestSilentPeerWRITE: a WRITE larger than the requester's window to a
// peer that died must complete RETRY_EXC_ERR once the retries are spent,
// as a one-packet request does (TestSilentPeerREADs). (It completed
// WR_FLUSH_ERR until 5f654ae: the request whose retries ran out was
// looked for among those sent, and one the window cut short after a
// rewind was not.)
func TestSilentPeerWRITE(t *testing.T) {
	ips := loopbacks(2)
	port := freePort(t, ips...)
	a := newSide(t, openDev(t, ips[0], port, nil), 16)
	bdev := openDev(t, ips[1], port, nil)
	b := newSide(t, bdev, 16)
	src := a.reg(t, 1<<20, verbs.LocalWrite)
	dst := b.reg(t, 1<<20, verbs.LocalWrite|verbs.RemoteWrite)
	c := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, qb := a.qp(t, c), b.qp(t, c)
	connect(t, a, b, qa, qb, roce.ConnParams{MTU: bth.MTU4096, Timeout: 10})
	bdev.Close()
	if err := qa.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: src.Addr(), Length: 1 << 20, LKey: src.LKey()}},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc, ok := waitWC(t, a.cq, 10*time.Second)
	if !ok || wc.ID != 1 || wc.Status != verbs.RetryExcErr {
		ctr := qa.(*qp.QP).Counters()
		t.Fatalf("a 1 MiB WRITE to a dead peer completed %v (%v), want RETRY_EXC_ERR; counters %v", &wc, ok, ctr.String())
	}
}
