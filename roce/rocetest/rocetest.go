// Package rocetest holds end-to-end test bodies that run against any
// roce backend: the pure-Go engine over each transport, and hwverbs over
// libibverbs inside the interop VMs. Each takes two devices that can
// reach each other.
package rocetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Side is one end of a connection made through the public API. It is
// used by one test goroutine at a time.
type Side struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	buf verbs.MR
}

// NewSide makes a PD, a 256-entry CQ, a QP of type typ (64 work requests
// and 2 SGEs each way) and a 1 MiB region with every right on d, and
// fails t if one cannot be made.
func NewSide(t testing.TB, d verbs.Device, typ verbs.QPType) *Side {
	t.Helper()
	if d == nil {
		t.Fatal("rocetest: NewSide needs a device (roce.Open, hwverbs.Open)")
	}
	s := &Side{dev: d}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}}); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = s.pd.RegMR(make([]byte, 1<<20), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		t.Fatal(err)
	}
	return s
}

// Remote returns what the peer of s needs to connect to it: its QPN, the
// given starting PSN and its GID.
func (s *Side) Remote(t testing.TB, psn uint32) *roce.Remote {
	t.Helper()
	return s.RemoteGID(t, psn, 0)
}

// RemoteGID is Remote with the GID of the given index of the side's
// device.
func (s *Side) RemoteGID(t testing.TB, psn uint32, index int) *roce.Remote {
	t.Helper()
	if s == nil {
		t.Fatal("rocetest: Remote of a nil *Side: use one from NewSide")
	}
	gid, err := s.dev.GID(index)
	if err != nil {
		t.Fatal(err)
	}
	return &roce.Remote{QPN: s.qp.QPN(), PSN: psn, GID: gid}
}

// Wait polls cq until a completion arrives, for up to 10 s.
func Wait(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	if cq == nil {
		t.Fatal("rocetest: Wait needs a CQ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// EveryOperation connects an RC QP on a to one on b and runs SEND, SEND
// with immediate, RDMA WRITE, WRITE with immediate, READ and both atomics
// from a to b, checking data and completions on both sides, across the
// 24-bit PSN wrap.
func EveryOperation(t testing.TB, da, db verbs.Device) {
	t.Helper()
	EveryOperationGID(t, da, db, 0, 0)
}

// EveryOperationGID is EveryOperation with the GIDs of index ga of da and
// gb of db as the two ends' addresses.
func EveryOperationGID(t testing.TB, da, db verbs.Device, ga, gb int) {
	t.Helper()
	a, b := NewSide(t, da, verbs.RC), NewSide(t, db, verbs.RC)
	p := &roce.ConnParams{MTU: bth.MTU1024, MaxRDAtomic: 4, MaxDestRDAtomic: 4, PSN: 0xFFFFFE}
	if err := roce.Connect(a.qp, b.RemoteGID(t, 0xFFFFFE, gb), p); err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(b.qp, a.RemoteGID(t, 0xFFFFFE, ga), p); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	src := a.buf.Bytes()[:n]
	for i := range src {
		src[i] = byte(i * 31)
	}
	rb := b.buf
	sgl := []verbs.SGE{{Addr: a.buf.Addr(), Length: n, LKey: a.buf.LKey()}}
	ops := []verbs.SendWR{
		{Opcode: verbs.OpSend},
		{Opcode: verbs.OpSendImm, Imm: 0xC0FFEE},
		{Opcode: verbs.OpWrite, RemoteAddr: rb.Addr() + 100000, RKey: rb.RKey()},
		{Opcode: verbs.OpWriteImm, RemoteAddr: rb.Addr() + 200000, RKey: rb.RKey(), Imm: 7},
	}
	for i, wr := range ops {
		wr.ID, wr.Flags, wr.SGL = uint64(i), verbs.Signaled, sgl
		recv := wr.Opcode != verbs.OpWrite
		if recv {
			if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 100 + uint64(i),
				SGL: []verbs.SGE{{Addr: rb.Addr() + uint64(i)*8192, Length: 8192, LKey: rb.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := Wait(t, a.cq); wc.Status != verbs.Success || wc.ID != uint64(i) {
			t.Fatalf("%v: %v", wr.Opcode, &wc)
		}
		off := wr.RemoteAddr - rb.Addr()
		if recv {
			wc := Wait(t, b.cq)
			if wc.Status != verbs.Success || wc.ByteLen != n || wc.ID != 100+uint64(i) {
				t.Fatalf("%v: receive %v", wr.Opcode, &wc)
			}
			if wr.Imm != 0 && (wc.Flags&verbs.WithImm == 0 || wc.Imm != wr.Imm) {
				t.Fatalf("%v: immediate %v", wr.Opcode, &wc)
			}
			if wr.Opcode != verbs.OpWriteImm {
				off = uint64(i) * 8192
			}
		}
		Sync(rb)
		if !bytes.Equal(rb.Bytes()[off:off+n], src) {
			t.Fatalf("%v: data differs", wr.Opcode)
		}
	}
	// READ back what the WRITE put there.
	dst := a.buf.Bytes()[n : 2*n]
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpRead, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: a.buf.Addr() + n, Length: n, LKey: a.buf.LKey()}},
		RemoteAddr: rb.Addr() + 100000, RKey: rb.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := Wait(t, a.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCRead || !bytes.Equal(dst, src) {
		t.Fatalf("READ: %v", &wc)
	}
	atomics(t, a, rb)
}

// atomics runs FETCH_AND_ADD and CMP_AND_SWP from a on an 8-byte counter
// in rb, and checks the values fetched and left.
func atomics(t testing.TB, a *Side, rb verbs.MR) {
	t.Helper()
	binary.NativeEndian.PutUint64(rb.Bytes()[512000:], 40)
	Sync(rb)
	res := []verbs.SGE{{Addr: a.buf.Addr() + 600000, Length: 8, LKey: a.buf.LKey()}}
	for _, wr := range []verbs.SendWR{
		{Opcode: verbs.OpAtomicFetchAdd, CompareAdd: 2},
		{Opcode: verbs.OpAtomicCmpSwp, CompareAdd: 42, Swap: 99},
	} {
		wr.Flags, wr.SGL, wr.RemoteAddr, wr.RKey = verbs.Signaled, res, rb.Addr()+512000, rb.RKey()
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := Wait(t, a.cq); wc.Status != verbs.Success {
			t.Fatalf("%v: %v", wr.Opcode, &wc)
		}
	}
	if got := binary.NativeEndian.Uint64(a.buf.Bytes()[600000:]); got != 42 {
		t.Fatalf("compare-and-swap found %d", got)
	}
	Sync(rb)
	if got := binary.NativeEndian.Uint64(rb.Bytes()[512000:]); got != 99 {
		t.Fatalf("counter is %d", got)
	}
}

// Stream connects an RC QP on da to one on db, then keeps depth requests
// of op and size in flight from da to db for b.N requests, and reports
// throughput (b.SetBytes) and allocations. Every completion is checked;
// data is not, to measure the stack rather than the test.
func Stream(b *testing.B, da, db verbs.Device, op verbs.WROpcode, size, depth int) {
	b.Helper()
	if size < 1 || depth < 1 {
		b.Fatalf("rocetest: Stream of %d requests of %d bytes: want at least one of one byte", depth, size)
	}
	a, z := NewSide(b, da, verbs.RC), NewSide(b, db, verbs.RC)
	p := &roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 16, MaxDestRDAtomic: 16}
	if err := roce.Connect(a.qp, z.Remote(b, 0), p); err != nil {
		b.Fatal(err)
	}
	if err := roce.Connect(z.qp, a.Remote(b, 0), p); err != nil {
		b.Fatal(err)
	}
	if size*depth > a.buf.Len() {
		b.Fatalf("%d x %d bytes do not fit the %d-byte buffers", depth, size, a.buf.Len())
	}
	wr := []verbs.SendWR{{Opcode: op, Flags: verbs.Signaled, SGL: make([]verbs.SGE, 1)}}
	rwr := []verbs.RecvWR{{SGL: make([]verbs.SGE, 1)}}
	wcs := make([]verbs.WC, 64)
	posted, done := 0, 0
	post := func() {
		off := uint64(posted%depth) * uint64(size)
		if op == verbs.OpSend {
			rwr[0].SGL[0] = verbs.SGE{Addr: z.buf.Addr() + off, Length: uint32(size), LKey: z.buf.LKey()}
			if err := z.qp.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
		}
		wr[0].ID = uint64(posted)
		wr[0].SGL[0] = verbs.SGE{Addr: a.buf.Addr() + off, Length: uint32(size), LKey: a.buf.LKey()}
		wr[0].RemoteAddr, wr[0].RKey = z.buf.Addr()+off, z.buf.RKey()
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		posted++
	}
	run := func(n int) {
		for done < n {
			for posted < n && posted < done+depth {
				post()
			}
			if op == verbs.OpSend {
				z.cq.Poll(wcs)
			}
			k := a.cq.Poll(wcs)
			for i := range wcs[:k] {
				if wcs[i].Status != verbs.Success {
					b.Fatalf("completion %v", &wcs[i])
				}
			}
			done += k
		}
	}
	run(4 * depth)
	posted, done = 0, 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// Transfer connects an RC QP on da to one on db and moves rounds of data
// both ways through the 1 MiB buffers, rounds times: da WRITEs 64 KiB
// messages of fresh bytes into db's buffer, then READs them back into the
// other half of its own, with 16 requests in flight, and every byte and
// every completion (in order) is checked. It is the body of the loss
// tests over real links.
func Transfer(t testing.TB, da, db verbs.Device, rounds int) {
	t.Helper()
	a, z := NewSide(t, da, verbs.RC), NewSide(t, db, verbs.RC)
	p := &roce.ConnParams{MTU: bth.MTU1024, MaxRDAtomic: 16, MaxDestRDAtomic: 16, PSN: 0xFFF000}
	if err := roce.Connect(a.qp, z.Remote(t, 0xFFF000), p); err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(z.qp, a.Remote(t, 0xFFF000), p); err != nil {
		t.Fatal(err)
	}
	const msg, half, depth = 64 << 10, 512 << 10, 16
	src, back := a.buf.Bytes()[:half], a.buf.Bytes()[half:]
	wr := []verbs.SendWR{{Flags: verbs.Signaled, SGL: make([]verbs.SGE, 1)}}
	wcs := make([]verbs.WC, 16)
	run := func(op verbs.WROpcode, from uint64) {
		next, done := 0, 0
		for done < half/msg {
			for next < half/msg && next < done+depth {
				off := uint64(next * msg)
				wr[0].ID, wr[0].Opcode = uint64(next), op
				wr[0].SGL[0] = verbs.SGE{Addr: a.buf.Addr() + from + off, Length: msg, LKey: a.buf.LKey()}
				wr[0].RemoteAddr, wr[0].RKey = z.buf.Addr()+off, z.buf.RKey()
				if err := a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				next++
			}
			wc := Wait(t, a.cq)
			if wc.Status != verbs.Success || wc.ID != uint64(done) {
				t.Fatalf("%v %d of %d: %v", op, done, half/msg, &wc)
			}
			done++
			for k := a.cq.Poll(wcs); k > 0; k = a.cq.Poll(wcs) {
				for i := range wcs[:k] {
					if wcs[i].Status != verbs.Success || wcs[i].ID != uint64(done) {
						t.Fatalf("%v %d of %d: %v", op, done, half/msg, &wcs[i])
					}
					done++
				}
			}
		}
	}
	for r := range rounds {
		for i := range src {
			src[i] = byte(i*7 + r*13 + i>>9)
		}
		clear(back)
		// The test read z's buffer last round and the peer writes it
		// now: the WRITEs cross the kernel, which orders nothing for Go.
		Sync(a.buf)
		Sync(z.buf)
		run(verbs.OpWrite, 0)
		Sync(z.buf)
		if !bytes.Equal(z.buf.Bytes()[:half], src) {
			t.Fatalf("round %d: the WRITEs left other bytes", r)
		}
		run(verbs.OpRead, half)
		Sync(a.buf)
		if !bytes.Equal(back, src) {
			t.Fatalf("round %d: the READs brought other bytes back", r)
		}
	}
}

// Sync orders the engine's accesses to mr and the test's, when the
// backend offers it (see mr.MR.Sync): a test that reads the memory a peer
// device wrote, or writes memory a peer device will read, runs both
// devices in one process, and the packets between them cross the kernel.
func Sync(mr verbs.MR) {
	if s, ok := mr.(interface{ Sync() }); ok {
		s.Sync()
	}
}

// PingPong connects an RC QP on da to one on db and, b.N times, SENDs size
// bytes from a to b, which SENDs them back; it reports the round trip
// (ns/op) and allocations. The peer runs on its own goroutine, each side
// spinning on its CQ.
func PingPong(b *testing.B, da, db verbs.Device, size int) {
	b.Helper()
	if size < 0 || size > 4096 {
		b.Fatalf("rocetest: PingPong of %d bytes: want 0 to 4096", size)
	}
	a, z := NewSide(b, da, verbs.RC), NewSide(b, db, verbs.RC)
	p := &roce.ConnParams{MTU: bth.MTU4096}
	if err := roce.Connect(a.qp, z.Remote(b, 0), p); err != nil {
		b.Fatal(err)
	}
	if err := roce.Connect(z.qp, a.Remote(b, 0), p); err != nil {
		b.Fatal(err)
	}
	sge := func(s *Side) []verbs.SGE {
		return []verbs.SGE{{Addr: s.buf.Addr(), Length: uint32(size), LKey: s.buf.LKey()}}
	}
	recv := func(s *Side) []verbs.RecvWR {
		return []verbs.RecvWR{{SGL: []verbs.SGE{{Addr: s.buf.Addr() + 4096, Length: 4096, LKey: s.buf.LKey()}}}}
	}
	// Sends are unsignaled: only the receive completion matters, as in
	// perftest's send_lat.
	send := func(s *Side) []verbs.SendWR { return []verbs.SendWR{{Opcode: verbs.OpSend, SGL: sge(s)}} }
	spin := func(s *Side, wcs []verbs.WC) {
		for {
			if n := s.cq.Poll(wcs); n > 0 {
				if wcs[0].Status != verbs.Success {
					b.Errorf("completion %v", &wcs[0])
				}
				return
			}
		}
	}
	ra, rz, sa, sz := recv(a), recv(z), send(a), send(z)
	n := b.N + 10
	done := make(chan struct{})
	go func() {
		defer close(done)
		wcs := make([]verbs.WC, 1)
		for range n {
			if err := z.qp.PostRecv(rz); err != nil {
				b.Error(err)
				return
			}
			spin(z, wcs)
			if err := z.qp.PostSend(sz); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	wcs := make([]verbs.WC, 1)
	round := func() {
		if err := a.qp.PostRecv(ra); err != nil {
			b.Fatal(err)
		}
		if err := a.qp.PostSend(sa); err != nil {
			b.Fatal(err)
		}
		spin(a, wcs)
	}
	for range 10 {
		round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	<-done
}
