//go:build linux

package stress

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/udp"
	"github.com/goroce/goroce/verbs"
)

// floodRig is the scene of the flood: a victim device V serving a
// legitimate peer L (one connection streaming WRITEs, one idle bystander)
// and an attacker at address H, which has connections of its own to V
// (it knows their QPNs and PSNs) and can pose as L (it knows the QPNs of
// L's connections, not their PSNs).
type floodRig struct {
	t       *testing.T
	ips     []netip.Addr // V, L, H
	port    uint16
	v, l    *side
	stream  *stream
	streamV verbs.QP // V's end of the stream's connection
	idleV   verbs.QP // V's end of the idle bystander connection
	idleL   verbs.QP
	idlePSN uint32 // the PSN V expects on the idle connection
	psnL    uint32 // the PSN the stream started from

	// V's memory the attacker goes after, and what it must hold.
	target                       verbs.MR // the stream's destination
	readonly, writeonly, atomics verbs.MR
	private                      verbs.MR
	want                         map[verbs.MR][]byte

	naks net.PacketConn // the attacker's socket on H:port: what V answers it
	dead []verbs.QP     // V's ends of the attacker's own connections, killed
}

// protectedMRs are the regions whose bytes the attacker must not change.
func (r *floodRig) protectedMRs() []verbs.MR {
	return []verbs.MR{r.readonly, r.writeonly, r.atomics, r.private}
}

func newFloodRig(t *testing.T, v func(*roce.Config)) *floodRig {
	r := &floodRig{t: t, ips: loopbacks(3), want: map[verbs.MR][]byte{}}
	r.port = freePort(t, r.ips...)
	r.v = newSide(t, openDev(t, r.ips[0], r.port, v), 4096)
	r.l = newSide(t, openDev(t, r.ips[1], r.port, nil), 4096)
	var err error
	if r.naks, err = net.ListenPacket("udp4", netip.AddrPortFrom(r.ips[2], r.port).String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.naks.Close() })
	full := verbs.LocalWrite | verbs.RemoteAccess
	r.target = r.v.reg(t, 4<<20, verbs.LocalWrite|verbs.RemoteWrite)
	r.readonly = r.v.reg(t, 64<<10, verbs.RemoteRead)
	r.writeonly = r.v.reg(t, 64<<10, verbs.LocalWrite|verbs.RemoteWrite)
	r.atomics = r.v.reg(t, 4096, verbs.LocalWrite|verbs.RemoteAtomic)
	r.private = r.v.reg(t, 64<<10, verbs.LocalWrite)
	for i, m := range r.protectedMRs() {
		b := m.Bytes()
		for j := range b {
			b[j] = byte(j*31 + i*7 + 1)
		}
		r.want[m] = bytes.Clone(b)
		syncMR(m)
	}
	// ACK timeout 18 (1.07 s): a flood that fills V's socket buffer
	// drops most of the stream's packets too, and eight tries of the
	// default 67 ms (0.54 s) ran out under a one-second flood once
	// (RETRY_EXC_ERR, as on an RNIC whose link is flooded that long).
	// The timer only recovers tail losses; sequence NAKs recover the rest.
	p := roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 16, MaxDestRDAtomic: 16, Access: full, Timeout: 18}
	c := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	ql := r.l.qp(t, c)
	r.streamV = r.v.qp(t, c)
	r.psnL, _ = connect(t, r.l, r.v, ql, r.streamV, p)
	r.stream = newStream(t, r.l, ql, r.target, 64<<10, 16, p.MTU)
	r.idleL, r.idleV = r.l.qp(t, c), r.v.qp(t, c)
	r.idlePSN, _ = connect(t, r.l, r.v, r.idleL, r.idleV, p)
	return r
}

// attackerQP makes a QP on V connected to the attacker at H, which
// starts sending with the PSN returned.
func (r *floodRig) attackerQP() (verbs.QP, bth.PSN) {
	q := r.v.qp(r.t, verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	psn := rand.Uint32() & 0xFFFFFF
	p := &roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 4, MaxDestRDAtomic: 4, PSN: rand.Uint32() & 0xFFFFFF}
	if err := roce.Connect(q, &roce.Remote{QPN: 0x4242, PSN: psn, GID: verbs.GIDFromAddr(r.ips[2])}, p); err != nil {
		r.t.Fatal(err)
	}
	return q, bth.PSN(psn)
}

// floodClass is one kind of hostile packet in the flood.
type floodClass struct {
	name string
	from *hostile
	pkts [][]byte
	sent []int // per packet of pkts
	// aim, when set, builds pkts afresh before each window (packets
	// aimed at the stream's PSNs, which move); earlier counts the
	// packets of earlier windows.
	aim     func() [][]byte
	earlier int
}

// total returns how many packets of the class went.
func (c *floodClass) total() int {
	n := c.earlier
	for _, k := range c.sent {
		n += k
	}
	return n
}

// reaim builds the class's packets for the next window.
func (c *floodClass) reaim() {
	if c.aim == nil {
		return
	}
	c.earlier = c.total()
	c.pkts = c.aim()
	c.sent = nil
}

// fate says what the transport does with b arriving over flow f: drop it
// as malformed, drop it for its ICRC, or pass it to the engine. It makes
// the transport's own checks, in their order; on a socket the IPv4 ID is
// not known, so the transport accepts the ICRC of any ID (1 in 65,536
// random packets).
func fate(f *bth.Flow, b []byte, maxPacket int, qpns map[uint32]bool) string {
	var p bth.Packet
	if len(b) < bth.BTHLen+bth.ICRCLen || len(b) > maxPacket || p.Parse(b) != nil {
		return "malformed"
	}
	var s bth.IDSolver
	if _, ok := s.Recover(f, b); !ok {
		return "icrc"
	}
	switch {
	case p.BTH.TVer() != 0:
		return "tver"
	case !qpns[p.BTH.DestQP()]:
		return "noqp"
	}
	return "qp"
}

// counts are the counters of V the flood moves.
type counts struct {
	tr         transport.Stats
	dev        qp.Stats
	stream     qp.Counters // V's end of the stream
	idle       qp.Counters // V's end of the idle connection
	attacker   qp.Counters // V's ends of the attacker's own connections
	socketDrop int64
}

func (r *floodRig) counts() counts {
	st := r.v.dev.Stats()
	c := counts{tr: st.Link, dev: st.Engine,
		stream: r.streamV.(*qp.QP).Counters(), idle: r.idleV.(*qp.QP).Counters(),
		socketDrop: socketDrops(netip.AddrPortFrom(r.ips[0], r.port))}
	for _, a := range r.dead {
		x := a.(*qp.QP).Counters()
		c.attacker.Add(&x)
	}
	return c
}

// attack is one request the attacker makes on a connection of its own,
// and the NAK code V must answer it with before the QP goes to ERR.
type attack struct {
	name string
	pkt  func(r *floodRig) pkt
	nak  bth.NAKCode
}

var attacks = []attack{
	{"WRITE with a guessed rkey", func(r *floodRig) pkt {
		return pkt{op: bth.RCWriteOnly, payload: 64, reth: &bth.RETHFields{VA: r.target.Addr(),
			RKey: r.target.RKey() ^ (1 + rand.Uint32N(1<<31)), DMALen: 64}}
	}, bth.NAKRemoteAccessError},
	{"READ past the end of a readable region", func(r *floodRig) pkt {
		return pkt{op: bth.RCReadRequest, reth: &bth.RETHFields{VA: r.readonly.Addr() + uint64(r.readonly.Len()) - 16,
			RKey: r.readonly.RKey(), DMALen: 64}}
	}, bth.NAKRemoteAccessError},
	{"READ of a region without remote read", func(r *floodRig) pkt {
		return pkt{op: bth.RCReadRequest, reth: &bth.RETHFields{VA: r.writeonly.Addr(), RKey: r.writeonly.RKey(), DMALen: 64}}
	}, bth.NAKRemoteAccessError},
	{"WRITE into a read-only region", func(r *floodRig) pkt {
		return pkt{op: bth.RCWriteOnly, payload: 64, reth: &bth.RETHFields{VA: r.readonly.Addr(), RKey: r.readonly.RKey(), DMALen: 64}}
	}, bth.NAKRemoteAccessError},
	{"WRITE into a region with no remote rights", func(r *floodRig) pkt {
		return pkt{op: bth.RCWriteOnly, payload: 64, reth: &bth.RETHFields{VA: r.private.Addr(), RKey: r.private.RKey(), DMALen: 64}}
	}, bth.NAKRemoteAccessError},
	{"FETCH_ADD at an unaligned address", func(r *floodRig) pkt {
		return pkt{op: bth.RCFetchAdd, atomic: &bth.AtomicETHFields{VA: r.atomics.Addr() + 4, RKey: r.atomics.RKey(), SwapAdd: 1}}
	}, bth.NAKInvalidRequest},
	{"CMP_SWAP on a region without remote atomics", func(r *floodRig) pkt {
		return pkt{op: bth.RCCompareSwap, atomic: &bth.AtomicETHFields{VA: r.writeonly.Addr(), RKey: r.writeonly.RKey(), SwapAdd: 1}}
	}, bth.NAKRemoteAccessError},
}

// runAttacks makes each attack on a connection of the attacker's own,
// with the PSN V expects: V must NAK it (the attacker reads the NAK on
// its socket) and move the QP to ERR, touching no memory. It returns the
// dead QPs (in r.dead) and, for each, a packet the flood sends it
// again.
func (r *floodRig) runAttacks(h *hostile) [][]byte {
	t := r.t
	var again [][]byte
	buf := make([]byte, 256)
	for _, a := range attacks {
		q, psn := r.attackerQP()
		p := a.pkt(r)
		p.qpn, p.psn, p.ackReq = q.QPN(), psn, true
		h.send(h.build(p))
		r.naks.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := r.naks.ReadFrom(buf)
		if err != nil {
			t.Fatalf("%s: no answer from V: %v", a.name, err)
		}
		var ans bth.Packet
		if err := ans.Parse(buf[:n]); err != nil || ans.AETH == nil {
			t.Fatalf("%s: V answered % x", a.name, buf[:n])
		}
		syn := ans.AETH.Syndrome()
		if syn.Kind() != bth.KindNAK || syn.NAKCode() != a.nak || ans.BTH.PSN() != psn {
			t.Errorf("%s: V answered %v for PSN %#x, want NAK %v for %#x", a.name, syn, ans.BTH.PSN(), a.nak, psn)
		}
		if st := state(t, q); st != verbs.StateErr {
			t.Errorf("%s: V's QP is in %v after the NAK, want ERR", a.name, st)
		}
		t.Logf("attacker's own connection, %s: NAK %v, QP in ERR", a.name, syn)
		r.dead = append(r.dead, q)
		p.psn = psn.Next()
		again = append(again, h.build(p))
	}
	return again
}

// floodMix builds the flood's packet classes. spoof poses as L; asH
// sends from the attacker's own address; dead are packets for the
// attacker's own connections, which its attacks killed.
func (r *floodRig) floodMix(spoof, asH *hostile, dead [][]byte) []*floodClass {
	rnd := rand.New(rand.NewPCG(rand.Uint64(), 1))
	write := func(qpn uint32, psn bth.PSN) pkt {
		return pkt{op: bth.RCWriteOnly, qpn: qpn, psn: psn, ackReq: true, payload: 256,
			reth: &bth.RETHFields{VA: r.target.Addr(), RKey: rnd.Uint32(), DMALen: 256}}
	}
	many := func(h *hostile, f func(i int) pkt) [][]byte {
		out := make([][]byte, 64)
		for i := range out {
			out[i] = h.build(f(i))
		}
		return out
	}
	// PSNs far from the one expected, but never near it: within 2^20 of
	// 2^21 ahead or behind (the stream moves less than 2^20 PSNs in a
	// window).
	off := func() uint32 { return 1<<21 + rnd.Uint32N(1<<20) }
	stream, idle := r.streamV.QPN(), r.idleV.QPN()
	psnL, idlePSN := bth.PSN(r.psnL), bth.PSN(r.idlePSN)
	cur := func() bth.PSN { return psnL.Add(uint32(r.stream.posted.Load()) * r.stream.pkts) }
	full := spoof.build(write(stream, psnL))
	classes := []*floodClass{
		{name: "no such QP", from: spoof, pkts: many(spoof, func(i int) pkt { return write(0xF00000|uint32(i), bth.PSN(i)) })},
		{name: "not the peer's address", from: asH, pkts: many(asH, func(i int) pkt { return write(stream, psnL.Add(uint32(i))) })},
		{name: "bad ICRC", from: spoof, pkts: many(spoof, func(i int) pkt { return write(stream, psnL.Add(uint32(i))) })},
		{name: "truncated", from: spoof, pkts: [][]byte{full[:bth.BTHLen], full[:bth.BTHLen+8], full[:bth.BTHLen+bth.RETHLen+2]}},
		{name: "oversized", from: spoof, pkts: [][]byte{spoof.build(pkt{op: bth.RCWriteOnly, qpn: stream, payload: 8192,
			reth: &bth.RETHFields{VA: r.target.Addr(), RKey: r.target.RKey(), DMALen: 8192}})}},
		{name: "random bytes", from: spoof},
		{name: "PSN far ahead, idle connection", from: spoof, pkts: many(spoof, func(int) pkt { return write(idle, idlePSN.Add(off())) })},
		{name: "PSN far behind, idle connection", from: spoof, pkts: many(spoof, func(int) pkt { return write(idle, idlePSN.Add(-off())) })},
		{name: "PSN far ahead, streaming connection", from: spoof, aim: func() [][]byte {
			now := cur()
			return many(spoof, func(int) pkt { return write(stream, now.Add(off())) })
		}},
		{name: "PSN far behind, streaming connection", from: spoof, aim: func() [][]byte {
			now := cur()
			return many(spoof, func(int) pkt { return write(stream, now.Add(-off())) })
		}},
		{name: "the attacker's dead connections", from: asH, pkts: dead},
	}
	for _, p := range classes[2].pkts {
		p[len(p)-1] ^= 0x5A
	}
	for range 256 {
		classes[5].pkts = append(classes[5].pkts, garbage(rnd, 16+rnd.IntN(1500)))
	}
	return classes
}

// floodFrom has the attacker process send the classes round-robin for
// d; it returns once the process is ready, and wait returns how many
// packets went.
func floodFrom(t testing.TB, classes []*floodClass, d time.Duration, rate int) (wait func() int) {
	job := &floodJob{For: d, To: classes[0].from.dst, Rate: rate}
	var socks []*hostile
	index := map[*hostile]int{}
	type ref struct{ c, k int }
	var refs []ref
	for _, c := range classes {
		c.reaim()
	}
	for k := 0; ; k++ {
		added := false
		for ci, c := range classes {
			if c.sent == nil {
				c.sent = make([]int, len(c.pkts))
			}
			if k >= len(c.pkts) {
				continue
			}
			if _, ok := index[c.from]; !ok {
				index[c.from] = len(socks)
				socks = append(socks, c.from)
			}
			job.Packets = append(job.Packets, c.pkts[k])
			job.From = append(job.From, index[c.from])
			refs = append(refs, ref{ci, k})
			added = true
		}
		if !added {
			break
		}
	}
	w := runAttacker(t, job, socks)
	return func() int {
		res := w()
		n := 0
		for i, k := range res.Sent {
			classes[refs[i].c].sent[refs[i].k] += k
			n += k
		}
		return n
	}
}

// TestFlood floods a responder in the middle of a transfer with hostile
// packets of every kind, at the highest rate one sending thread of
// another process reaches (the long version also at set rates), in
// windows that alternate with quiet ones. The transfer must complete with
// every byte right, the protected memory must not change, every hostile
// packet must be counted under its reason, and no hostile packet without
// the connection's PSN may break a connection; the throughput the
// transfer keeps during the flood is reported (not asserted: it depends
// on the machine). It runs twice: with V as the IBTA has it (a request
// far ahead draws a sequence NAK, which sends L's requester back), and
// with V hardened as a device exposed to spoofing should be
// (roce.Config.SeqNAKWindow).
func TestFlood(t *testing.T) {
	t.Run("IBTA", func(t *testing.T) { testFlood(t, nil) })
	t.Run("SeqNAKWindow", func(t *testing.T) {
		testFlood(t, func(c *roce.Config) { c.SeqNAKWindow = 1 << 16 })
	})
	// The victim's link of three receive paths: the flood's packets,
	// from many source ports, spread over its three goroutines.
	t.Run("Paths", func(t *testing.T) {
		testFlood(t, func(c *roce.Config) { c.Link.(*roce.UDP).Paths = 3 })
	})
}

func testFlood(t *testing.T, v func(*roce.Config)) {
	r := newFloodRig(t, v)
	victim := netip.AddrPortFrom(r.ips[0], r.port)
	spoof := newHostile(t, netip.AddrPortFrom(r.ips[1], 0), victim)
	asH := newHostile(t, netip.AddrPortFrom(r.ips[2], 0), victim)
	classes := r.floodMix(spoof, asH, r.runAttacks(asH))
	before := r.counts()
	sent, perPkt := r.floodAlone(classes)
	r.stream.start()
	time.Sleep(300 * time.Millisecond) // warm up
	rates, runs := []int{0}, 3
	if long() {
		rates, runs = []int{0, 200000, 100000, 50000, 20000}, 10
	}
	flooded := time.Second
	var report []string
	for _, rate := range rates {
		ratios, n, d := r.floodRuns(classes, rate, runs)
		sent, flooded = sent+n, flooded+d
		worst := slices.Min(ratios)
		name := "max"
		if rate > 0 {
			name = fmt.Sprint(rate)
		}
		report = append(report, fmt.Sprintf("%s pps %.2f (runs %.2f)", name, worst, ratios))
	}
	r.stream.finish()
	r.quiesce()
	cl, cv := r.stream.q.(*qp.QP).Counters(), r.streamV.(*qp.QP).Counters()
	t.Logf("the stream's requester at L: %v", cl.String())
	t.Logf("the stream's responder at V: %v", cv.String())
	after := r.counts()
	r.checkCounts(classes, &before, &after)
	if hardened(v) {
		// Hardened: every request far ahead at the idle connection (it
		// has no other traffic) is dropped without a NAK.
		far, ahead := after.idle.DropFarPSN-before.idle.DropFarPSN, after.idle.OutOfSeqRequest-before.idle.OutOfSeqRequest
		naks := after.idle.SendSeqErr - before.idle.SendSeqErr
		if far != ahead || naks != 0 || far == 0 {
			t.Errorf("idle connection: %d requests far ahead, %d dropped as such, %d sequence NAKs sent", ahead, far, naks)
		}
	}
	r.checkMemory()
	for _, q := range []verbs.QP{r.streamV, r.idleV} {
		if st := state(t, q); st != verbs.StateRTS {
			t.Errorf("V's QP %d, which the flood could not name with its PSN, is in %v", q.QPN(), st)
		}
	}
	drops := after.socketDrop - before.socketDrop
	summary(t, "%d hostile packets in %.1f s (%.0f/s sent, %.0f/s taken by V, %d dropped by the kernel at V's socket, "+
		"%v of V's CPU each); the transfer kept, at worst, %s of its throughput; protected memory unchanged",
		sent, flooded.Seconds(), float64(sent)/flooded.Seconds(), float64(sent-int(drops))/flooded.Seconds(), drops,
		perPkt, strings.Join(report, ", "))
	t.Run("the NAK the flood draws leaves the idle requester up", func(t *testing.T) {
		if st := state(t, r.idleL); st != verbs.StateRTS {
			t.Fatalf("L's idle QP is in %v: the sequence NAK V sent it for a hostile packet with a PSN far ahead killed it", st)
		}
	})
}

// hardened reports whether the variant v sets SeqNAKWindow.
func hardened(v func(*roce.Config)) bool {
	c := roce.Config{Link: &roce.UDP{}}
	if v != nil {
		v(&c)
	}
	return c.SeqNAKWindow > 0
}

// floodAlone floods V for a second before the stream starts, and returns
// how many packets went and the CPU time this process (V; the attacker
// is another) spent on each.
func (r *floodRig) floodAlone(classes []*floodClass) (int, time.Duration) {
	wait := floodFrom(r.t, classes, time.Second, 0)
	d0, c0 := r.v.dev.Stats().Link, cpuTime()
	sent := wait()
	r.quiesce()
	d1, c1 := r.v.dev.Stats().Link, cpuTime()
	got := d1.RxPackets + d1.RxICRCErrors + d1.RxMalformed - d0.RxPackets - d0.RxICRCErrors - d0.RxMalformed
	if got == 0 {
		r.t.Fatalf("V took none of the %d hostile packets sent", sent)
	}
	per := (c1 - c0) / time.Duration(got)
	r.t.Logf("before the stream: V took %d of %d hostile packets in 1 s, at %v of CPU each", got, sent, per)
	return sent, per
}

// floodRuns measures the stream's throughput in runs pairs of windows
// of a second, one quiet and one under a flood at rate packets a second
// (0: as fast as the attacker goes); it returns the ratios, the packets
// sent and the time flooded.
func (r *floodRig) floodRuns(classes []*floodClass, rate, runs int) ([]float64, int, time.Duration) {
	var ratios []float64
	sent, flooded := 0, time.Duration(0)
	for i := range runs {
		b0 := r.stream.bytes.Load()
		time.Sleep(time.Second)
		b1 := r.stream.bytes.Load()
		wait := floodFrom(r.t, classes, time.Second, rate)
		t0 := time.Now()
		sent += wait()
		el := time.Since(t0)
		flooded += el
		b2 := r.stream.bytes.Load()
		quiet, loud := float64(b1-b0), float64(b2-b1)/el.Seconds()
		if quiet == 0 {
			r.t.Logf("rate %d, run %d: the stream moved nothing in a quiet second", rate, i)
			continue
		}
		ratios = append(ratios, loud/quiet)
		r.t.Logf("rate %d, run %d: %.0f MB/s quiet, %.0f MB/s under flood (%.2f)", rate, i, quiet/1e6, loud/1e6, loud/quiet)
	}
	if len(ratios) == 0 {
		ratios = append(ratios, 0)
	}
	return ratios, sent, flooded
}

// quiesce waits until V has received nothing for 200 ms.
func (r *floodRig) quiesce() { quiet(r.t, r.v.dev) }

// checkMemory checks the protected regions and the stream's target.
func (r *floodRig) checkMemory() {
	for _, m := range append(r.protectedMRs(), r.target) {
		syncMR(m)
	}
	for i, m := range r.protectedMRs() {
		if !bytes.Equal(m.Bytes(), r.want[m]) {
			r.t.Errorf("protected region %d of %d changed", i, len(r.protectedMRs()))
		}
	}
	if !bytes.Equal(r.target.Bytes(), r.stream.src.Bytes()) {
		r.t.Errorf("the stream's target holds other bytes than the stream wrote")
	}
}

// checkCounts checks that every hostile packet V received is counted
// under its reason. Where the kernel dropped datagrams at V's socket
// (its buffer full) the counts may fall short of what was sent, by at
// most as many.
func (r *floodRig) checkCounts(classes []*floodClass, b, a *counts) {
	t := r.t
	qpns := map[uint32]bool{r.streamV.QPN(): true, r.idleV.QPN(): true}
	for _, q := range r.dead {
		qpns[q.QPN()] = true
	}
	want := map[string]int{}
	for _, c := range classes {
		for i, p := range c.pkts {
			f := fate(&c.from.flow, p, udp.DefaultMaxPacket, qpns)
			if f == "qp" {
				f = c.name
			}
			want[f] += c.sent[i]
		}
		if c.aim != nil {
			want[c.name] += c.earlier
		}
		t.Logf("%-40s %8d sent", c.name, c.total())
	}
	got := map[string]int{
		"malformed":                            int(a.tr.RxMalformed - b.tr.RxMalformed),
		"icrc":                                 int(a.tr.RxICRCErrors - b.tr.RxICRCErrors),
		"tver":                                 int(a.dev.DropTVer - b.dev.DropTVer),
		"noqp":                                 int(a.dev.DropNoQP - b.dev.DropNoQP),
		"not the peer's address":               int(a.stream.DropBadAddr - b.stream.DropBadAddr),
		"PSN far ahead, idle connection":       int(a.idle.OutOfSeqRequest - b.idle.OutOfSeqRequest),
		"PSN far behind, idle connection":      int(a.idle.DuplicateRequest - b.idle.DuplicateRequest),
		"the attacker's dead connections":      int(a.attacker.DropBadState - b.attacker.DropBadState),
		"PSN far ahead, streaming connection":  int(a.stream.OutOfSeqRequest - b.stream.OutOfSeqRequest),
		"PSN far behind, streaming connection": int(a.stream.DuplicateRequest - b.stream.DuplicateRequest),
	}
	drops := int(a.socketDrop - b.socketDrop)
	short := 0
	for k, w := range want {
		g := got[k]
		t.Logf("counted as %-38s %8d of %8d", k, g, w)
		// The stream's own out-of-sequence and duplicate packets count
		// with the hostile ones (after a loss, or a NAK the flood drew).
		switch {
		case g > w && !strings.Contains(k, "streaming"):
			t.Errorf("%s: counted %d, more than the %d sent", k, g, w)
		case g < w:
			short += w - g
		}
	}
	if short > drops {
		t.Errorf("%d hostile packets are not counted, and the kernel dropped only %d datagrams at V's socket", short, drops)
	}
}
