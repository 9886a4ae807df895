//go:build linux

package stress

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// TestManyQPs connects 10,000 RC QPs on one device A to as many on B,
// reports the memory an idle QP takes and the time to connect them, runs
// a WRITE and a SEND, every byte checked, over a random subset of the
// connections, and destroys them; it does all that twice and checks that
// the second time leaves the heap where the first did.
func TestManyQPs(t *testing.T) {
	const n = 10000
	subset := 100
	if long() {
		subset = 1000
	}
	ips := loopbacks(2)
	port := freePort(t, ips...)
	a := newSide(t, openDev(t, ips[0], port, nil), 4096)
	b := newSide(t, openDev(t, ips[1], port, nil), 4096)
	src := a.reg(t, 64<<10, verbs.LocalWrite)
	dst := b.reg(t, subset*4096, verbs.LocalWrite|verbs.RemoteWrite)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 3)
	}
	syncMR(src)
	g0 := runtime.NumGoroutine()
	var after [2]uint64
	var line string
	for round := range after {
		h0 := heap()
		m := manyQPs(t, a, b, n, subset, src, dst)
		if g := runtime.NumGoroutine(); g > g0+10 {
			t.Errorf("the QPs left goroutines behind: %d before, %d after", g0, g)
		}
		after[round] = heap()
		line = fmt.Sprintf("%d connected QP pairs: %.0f B of heap per idle QP, created in %v and connected in %v "+
			"(%.1f us a pair), %d random pairs each moved a WRITE and a SEND in %v, all destroyed in %v",
			n, float64(m.peak-h0)/(2*n), m.created.Round(time.Millisecond), m.connected.Round(time.Millisecond),
			float64(m.connected.Microseconds())/n, subset, m.traffic.Round(time.Millisecond),
			m.destroyed.Round(time.Millisecond))
		t.Logf("round %d: %s; heap %d B after", round, line, after[round])
	}
	grew := int64(after[1]) - int64(after[0])
	if grew > 512<<10 {
		t.Errorf("the heap grew by %d B from the first round to the second", grew)
	}
	summary(t, "%s; the second round left the heap %+d B from the first", line, grew)
}

// manyFigures are what one round of TestManyQPs measured.
type manyFigures struct {
	created, connected, traffic, destroyed time.Duration
	peak                                   uint64 // heap with every QP connected
}

// manyQPs creates and connects n QP pairs between a and b, checks traffic
// over subset of them, and destroys them.
func manyQPs(t *testing.T, a, b *side, n, subset int, src, dst verbs.MR) manyFigures {
	var m manyFigures
	c := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	p := roce.ConnParams{MTU: bth.MTU4096, Timeout: 14}
	t0 := time.Now()
	qa, qb := make([]verbs.QP, n), make([]verbs.QP, n)
	for i := range n {
		qa[i], qb[i] = a.qp(t, c), b.qp(t, c)
	}
	m.created = time.Since(t0)
	for i := range n {
		connect(t, a, b, qa[i], qb[i], p)
	}
	m.connected = time.Since(t0)
	m.peak = heap()
	t1 := time.Now()
	for k, i := range rand.Perm(n)[:subset] {
		checkPair(t, a, b, qa[i], qb[i], src, dst, k)
	}
	m.traffic = time.Since(t1)
	for i := range n {
		if st := state(t, qa[i]); st != verbs.StateRTS {
			t.Fatalf("QP %d of A is in %v", i, st)
		}
	}
	t2 := time.Now()
	for i := range n {
		qa[i].Destroy()
		qb[i].Destroy()
	}
	m.destroyed = time.Since(t2)
	return m
}

// checkPair sends a 4 KiB WRITE and a 2 KiB SEND from qa to qb into slot k
// of dst and checks both.
func checkPair(t *testing.T, a, b *side, qa, qb verbs.QP, src, dst verbs.MR, k int) {
	t.Helper()
	off := uint64(k * 4096)
	if err := qb.PostRecv([]verbs.RecvWR{{ID: uint64(k), SGL: []verbs.SGE{{Addr: dst.Addr() + off + 2048, Length: 2048,
		LKey: dst.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	s := uint64(k%15) * 4096
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.OpWrite, SGL: []verbs.SGE{{Addr: src.Addr() + s, Length: 2048, LKey: src.LKey()}},
			RemoteAddr: dst.Addr() + off, RKey: dst.RKey()},
		{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled,
			SGL: []verbs.SGE{{Addr: src.Addr() + s + 2048, Length: 2048, LKey: src.LKey()}}},
	}
	if err := qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for _, cq := range []verbs.CQ{a.cq, b.cq} {
		wc, ok := waitWC(t, cq, 10*time.Second)
		if !ok || wc.Status != verbs.Success {
			t.Fatalf("pair %d: %v (completion %v)", k, ok, &wc)
		}
	}
	syncMR(dst)
	if got, want := dst.Bytes()[off:off+4096], src.Bytes()[s:s+4096]; !bytes.Equal(got, want) {
		t.Fatalf("pair %d: %s", k, fmt.Sprintf("the WRITE and SEND left other bytes (%d differ)", differ(got, want)))
	}
}

// differ counts the bytes in which a and b differ.
func differ(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
