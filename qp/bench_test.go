package qp

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// benchStream keeps depth requests of size bytes in flight from A to B over
// the simulated link and reports throughput and cost per packet.
func benchStream(b *testing.B, op verbs.WROpcode, size int, mtu bth.MTU) {
	const depth = 16
	p := newPair(b, pairOpts{mtu: mtu, cap: verbs.QPCap{MaxSendWR: depth * 2, MaxRecvWR: depth * 2,
		MaxSendSGE: 1, MaxRecvSGE: 1}})
	local := p.a.reg(b, depth*size)
	remote := p.b.reg(b, depth*size)
	wr := make([]verbs.SendWR, 1)
	rwr := make([]verbs.RecvWR, 1)
	wcs := make([]verbs.WC, 64)
	posted, done := 0, 0
	post := func() {
		s := posted % depth * size
		if op == verbs.OpSend {
			rwr[0] = verbs.RecvWR{ID: uint64(posted), SGL: rwr[0].SGL[:0]}
			rwr[0].SGL = append(rwr[0].SGL, sge(remote, s, size))
			if err := p.b.qp.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
		}
		wr[0] = verbs.SendWR{ID: uint64(posted), Opcode: op, Flags: verbs.Signaled, SGL: wr[0].SGL[:0],
			RemoteAddr: remote.Addr() + uint64(s), RKey: remote.RKey()}
		wr[0].SGL = append(wr[0].SGL, sge(local, s, size))
		if err := p.a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		posted++
	}
	rwr[0].SGL = make([]verbs.SGE, 0, 1)
	wr[0].SGL = make([]verbs.SGE, 0, 1)
	pkts := (size + mtu.Bytes() - 1) / mtu.Bytes()
	run := func(n int) {
		for posted < done+depth && posted < n {
			post()
		}
		err := p.net.Run(func() bool {
			p.b.cq.Poll(wcs) // receive completions, for SEND
			for k := p.a.cq.Poll(wcs); k > 0; k = p.a.cq.Poll(wcs) {
				for i := range wcs[:k] {
					if wcs[i].Status != verbs.Success {
						b.Fatalf("WC %v", &wcs[i])
					}
				}
				done += k
				for posted < done+depth && posted < n {
					post()
				}
			}
			return done >= n
		}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
	}
	run(depth * 4) // warm up: queues, pools, batches
	posted, done = 0, 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pkts), "ns/pkt")
}

// BenchmarkStream measures the engine's throughput over the simulated
// link: both devices, the link's copy and ICRC seal and check, in one
// goroutine.
func BenchmarkStream(b *testing.B) {
	for _, c := range []struct {
		op   verbs.WROpcode
		size int
		mtu  bth.MTU
	}{
		{verbs.OpWrite, 64 << 10, bth.MTU4096},
		{verbs.OpRead, 64 << 10, bth.MTU4096},
		{verbs.OpSend, 64 << 10, bth.MTU4096},
		{verbs.OpWrite, 64 << 10, bth.MTU1024},
		{verbs.OpWrite, 2, bth.MTU4096},
	} {
		b.Run(fmt.Sprintf("%v/%d/mtu%v", c.op, c.size, c.mtu), func(b *testing.B) {
			benchStream(b, c.op, c.size, c.mtu)
		})
	}
}

// TestSteadyStateAllocs checks that moving data allocates nothing once
// queues and pools are warm: not in the engine, not in the link.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy under -short runs with other tests")
	}
	for _, op := range []verbs.WROpcode{verbs.OpWrite, verbs.OpRead, verbs.OpSend} {
		p := newPair(t, pairOpts{mtu: bth.MTU4096})
		local := p.a.reg(t, 64<<10)
		remote := p.b.reg(t, 64<<10)
		wr := []verbs.SendWR{{Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 64<<10)},
			RemoteAddr: remote.Addr(), RKey: remote.RKey()}}
		rwr := []verbs.RecvWR{{SGL: []verbs.SGE{sge(remote, 0, 64<<10)}}}
		wcs := make([]verbs.WC, 4)
		done := func() bool { return p.a.cq.Poll(wcs) > 0 }
		one := func() {
			if op == verbs.OpSend {
				if err := p.b.qp.PostRecv(rwr); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			if err := p.net.Run(done, time.Minute); err != nil {
				t.Fatal(err)
			}
			p.b.cq.Poll(wcs)
		}
		for range 10 {
			one()
		}
		if n := testing.AllocsPerRun(50, one); n != 0 {
			t.Errorf("%v of 64 KiB (16 packets and their ACK): %v allocations", op, n)
		}
	}
}

// TestCongestedAllocs is TestSteadyStateAllocs under congestion: a switch
// port that marks every packet CE, so that the receiver sends CNPs, the
// sender's DCQCN paces each packet and its pacing timer fires, and the
// delay window takes RTT samples; the steady state still allocates
// nothing.
func TestCongestedAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy under -short runs with other tests")
	}
	for _, m := range []congestion.Mode{congestion.Auto, congestion.DCQCN} {
		p := newPair(t, pairOpts{mtu: bth.MTU4096, cc: &congestion.Config{Mode: m, DCQCN: congestion.DCQCNConfig{RateOnFirstCNP: 2e9}}})
		must(t, p.net.SetPort(addrB, &mem.Port{Rate: 10e9, KMax: 1}))
		local, remote := p.a.reg(t, 64<<10), p.b.reg(t, 64<<10)
		wr := []verbs.SendWR{{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 64<<10)},
			RemoteAddr: remote.Addr(), RKey: remote.RKey()}}
		wcs := make([]verbs.WC, 4)
		done := func() bool { return p.a.cq.Poll(wcs) > 0 }
		one := func() {
			must(t, p.a.qp.PostSend(wr))
			must(t, p.net.Run(done, time.Minute))
		}
		for range 20 {
			one()
		}
		if n := testing.AllocsPerRun(50, one); n != 0 {
			t.Errorf("%v: a WRITE of 64 KiB through a marking port: %v allocations", m, n)
		}
		if c := p.a.qp.Counters(); c.RPCNPHandled == 0 || c.CCPaced == 0 || p.b.qp.Counters().NPCNPSent == 0 {
			t.Errorf("%v: the case did not congest: sender %s, receiver %s", m, &c, ptr(p.b.qp.Counters()))
		}
	}
}

// discardLink is a transport that sends nowhere; the receive benchmark
// hands packets to the engine's handler itself.
type discardLink struct {
	addr netip.Addr
	h    transport.Handler
}

func (l *discardLink) Start(h transport.Handler) error { l.h = h; return nil }
func (l *discardLink) Send([]transport.Packet) error   { return nil }
func (l *discardLink) LocalAddr() netip.Addr           { return l.addr }
func (l *discardLink) BatchSize() int                  { return 64 }
func (l *discardLink) MaxPacket() int                  { return 4096 + 64 }
func (l *discardLink) Stats() transport.Stats          { return transport.Stats{} }
func (l *discardLink) Close() error                    { return nil }

// benchResponder returns a device on a discardLink with an RC QP in RTS,
// connected to peer QP 0x99 at addrA from PSN 0, and a region of size
// bytes it may write.
func benchResponder(b *testing.B, size int) (*discardLink, *QP, *mr.MR) {
	link, qps, m := benchResponders(b, size, 1)
	return link, qps[0], m
}

// benchResponders is benchResponder with n QPs, each on a CQ of its own,
// on a device told that n receive paths feed it (Config.Paths), and a
// region of n times size bytes.
func benchResponders(b *testing.B, size, n int) (*discardLink, []*QP, *mr.MR) {
	link := &discardLink{addr: addrB}
	d, err := New(link, &Config{Clock: clock.NewManual(time.Unix(1e9, 0)), Paths: n})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	m, err := pd.(*PD).pd.Register(make([]byte, n*size), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	qps := make([]*QP, n)
	for i := range qps {
		cq, _ := d.CreateCQ(64)
		q, err := d.createQP(pd.(*PD), &verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			b.Fatal(err)
		}
		benchConnect(b, q)
		qps[i] = q
	}
	return link, qps, m
}

// benchConnect brings q to RTS, connected to peer QP 0x99 at addrA from
// PSN 0.
func benchConnect(b *testing.B, q *QP) {
	for _, step := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.RemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: bth.MTU4096, DestQPN: 0x99, MaxDestRDAtomic: 1, MinRNRTimer: 1,
			AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(addrA)}}, verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU |
			verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRDAtomic},
	} {
		if err := q.Modify(&step.a, step.mask); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceive measures the receive path alone (Device.receive, the
// responder, one coalesced ACK a batch) on batches of 64 in-sequence RC
// WRITE ONLY packets asking for an ACK: with the parse the transport made
// handed over (transport.Packet.Parsed, as goroce's transports deliver
// packets), and without, when the engine parses each packet itself.
func BenchmarkReceive(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		for _, parsed := range []bool{true, false} {
			b.Run(fmt.Sprintf("%d/parsed=%v", size, parsed), func(b *testing.B) {
				benchReceive(b, size, parsed)
			})
		}
	}
}

func benchReceive(b *testing.B, size int, parsed bool) {
	link, q, m := benchResponder(b, size)
	pkts := writeOnlies(q, m, 0, size, parsed)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	feed(link.h, pkts, b.N)
	b.StopTimer()
	if c := q.Counters(); c.RcvdPkts != uint64(b.N) || c.DuplicateRequest+c.OutOfSeqRequest != 0 || q.State() != verbs.StateRTS {
		b.Fatalf("%d packets handed over: %v, QP in %v", b.N, &c, q.State())
	}
}

// writeOnlies returns a batch of 64 RC WRITE ONLY packets of size bytes
// into m at offset off for q, asking for an ACK, with their parses
// (parsed) or without.
func writeOnlies(q *QP, m *mr.MR, off uint64, size int, parsed bool) []transport.Packet {
	pkts := make([]transport.Packet, 64)
	views := make([]bth.Packet, len(pkts))
	for i := range pkts {
		data := make([]byte, bth.Len(bth.RCWriteOnly, size))
		p := &views[i]
		p.Build(data, &bth.BTHFields{Opcode: bth.RCWriteOnly, PKey: bth.DefaultPKey, DestQP: q.QPN(), AckReq: true}, size)
		p.RETH.Encode(&bth.RETHFields{VA: m.Addr() + off, RKey: m.RKey(), DMALen: uint32(size)})
		pkts[i] = transport.Packet{Data: data, Src: addrA, Dst: addrB}
		if parsed {
			pkts[i].Parsed = p
		}
	}
	return pkts
}

// feed hands h n packets, batches of pkts numbered from PSN 0 on.
func feed(h transport.Handler, pkts []transport.Packet, n int) {
	psn := bth.PSN(0)
	for done := 0; done < n; done += len(pkts) {
		k := min(len(pkts), n-done)
		for i := range pkts[:k] {
			bth.BTH(pkts[i].Data).SetPSN(psn)
			psn = psn.Next()
		}
		h(pkts[:k])
	}
}

// BenchmarkReceivePaths measures the receive path fed from several
// goroutines at once, as a transport of several receive paths
// (udp.Config.Paths) feeds it: each goroutine hands over batches of 64
// 1 KiB WRITE ONLY packets for a QP of its own, into a region of the QP's
// own (mr=own) or a part of its own of one region for all (mr=shared, as
// perftest registers one buffer for all its QPs). ns/op is the wall time
// per packet of all the goroutines together: with a core for each, it
// falls in proportion to the paths as long as nothing the packets touch
// is shared.
func BenchmarkReceivePaths(b *testing.B) {
	const size = 1024
	for _, shared := range []bool{false, true} {
		for _, paths := range []int{1, 2} {
			b.Run(fmt.Sprintf("mr=%s/paths=%d", map[bool]string{false: "own", true: "shared"}[shared], paths), func(b *testing.B) {
				benchReceivePaths(b, size, paths, shared)
			})
		}
	}
}

func benchReceivePaths(b *testing.B, size, paths int, shared bool) {
	link, qps, m := benchResponders(b, size, paths)
	batches := make([][]transport.Packet, paths)
	for k, q := range qps {
		into, off := m, uint64(k*size) // a part of the region each
		if !shared {
			var err error
			if into, err = q.pd.Register(make([]byte, size), verbs.LocalWrite|verbs.RemoteWrite); err != nil {
				b.Fatal(err)
			}
			off = 0
		}
		batches[k] = writeOnlies(q, into, off, size, true)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for k := range qps {
		wg.Go(func() { feed(link.h, batches[k], share(b.N, paths, k)) })
	}
	wg.Wait()
	b.StopTimer()
	for k, q := range qps {
		if c := q.Counters(); c.RcvdPkts != uint64(share(b.N, paths, k)) || c.DuplicateRequest+c.OutOfSeqRequest != 0 {
			b.Fatalf("QP %d: %v", k, &c)
		}
	}
}

// share is goroutine k's share of n packets fed by paths of them.
func share(n, paths, k int) int {
	s := n / paths
	if k == 0 {
		s += n % paths
	}
	return s
}
