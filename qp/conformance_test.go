package qp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// fakeLink is a transport that records what the engine sends and lets a
// test hand it packets.
type fakeLink struct {
	mu   sync.Mutex
	addr netip.Addr
	h    transport.Handler
	sent []transport.Packet
	refd int // packets sent with their payload in registered memory (Packet.Payload)
	// onSend, when set, sees each batch before it is taken.
	onSend func(pkts []transport.Packet)
	// The multicast groups joined and left (JoinGroup, mcast_test.go),
	// and what a join fails with.
	joins, leaves []netip.Addr
	joinErr       error
}

func (f *fakeLink) Start(h transport.Handler) error { f.h = h; return nil }

// SendsPayload: the engine's in-place payloads go through the replays too.
func (f *fakeLink) SendsPayload() bool { return true }
func (f *fakeLink) Send(pkts []transport.Packet) error {
	if f.onSend != nil {
		f.onSend(pkts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range pkts {
		if p.Payload != nil {
			f.refd++
		}
		p.Data, p.Payload = p.AppendTo(nil), nil
		f.sent = append(f.sent, p)
	}
	return nil
}
func (f *fakeLink) LocalAddr() netip.Addr  { return f.addr }
func (f *fakeLink) BatchSize() int         { return 64 }
func (f *fakeLink) MaxPacket() int         { return 4096 + 64 }
func (f *fakeLink) Stats() transport.Stats { return transport.Stats{} }
func (f *fakeLink) Close() error           { return nil }
func (f *fakeLink) take() []transport.Packet {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sent
	f.sent = nil
	return s
}

// capPacket is one RoCE packet of a capture.
type capPacket struct {
	frame    int
	src, dst netip.Addr
	pkt      bth.Packet
	data     []byte // BTH through ICRC, payload zero-filled where the capture cut it
}

func readCapture(t *testing.T, name string) []capPacket {
	t.Helper()
	f, err := os.Open(filepath.Join("../testdata/captures", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []capPacket
	for i := 1; ; i++ {
		data, ci, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var fr bth.Frame
		if bth.ParseFrame(&fr, data, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		roce := fr.Payload
		if fr.Truncated {
			// Zero-fill what the snap length cut off, up to the wire length.
			full := make([]byte, len(roce)+ci.Length-len(data))
			copy(full, roce)
			roce = full
		}
		c := capPacket{frame: i, src: fr.Flow.Src, dst: fr.Flow.Dst, data: roce}
		if err := c.pkt.Parse(roce); err != nil {
			t.Fatalf("%s frame %d: %v", name, i, err)
		}
		out = append(out, c)
	}
}

func isRequest(o bth.Operation) bool {
	switch o {
	case bth.OpSend, bth.OpWrite, bth.OpReadRequest, bth.OpCompareSwap, bth.OpFetchAdd, bth.OpFlush, bth.OpAtomicWrite:
		return true
	}
	return false
}

// respKey is what conformance compares of a response.
type respKey struct {
	op      bth.Opcode
	psn     bth.PSN
	destQP  uint32
	syn     bth.Syndrome
	msn     uint32
	payload int
	orig    uint64
}

func (k respKey) String() string {
	s := fmt.Sprintf("%v psn=%d qp=%#x", k.op, k.psn, k.destQP)
	if k.op.Info().Has(bth.HdrAETH) {
		s += fmt.Sprintf(" %v msn=%d", k.syn, k.msn)
	}
	if k.payload > 0 {
		s += fmt.Sprintf(" payload=%d", k.payload)
	}
	if k.op == bth.RCAtomicAcknowledge {
		s += fmt.Sprintf(" orig=%d", k.orig)
	}
	return s
}

func keyOf(p *bth.Packet) respKey {
	k := respKey{op: p.BTH.Opcode(), psn: p.BTH.PSN(), destQP: p.BTH.DestQP(), payload: len(p.Payload)}
	if p.AETH != nil {
		k.syn, k.msn = p.AETH.Syndrome(), p.AETH.MSN()
	}
	if p.AtomicAckETH != nil {
		k.orig = p.AtomicAckETH.Orig()
	}
	return k
}

// TestResponderConformance replays the requests the rxe client sent in each
// capture into goroce's responder and checks that it answers with the
// opcodes, PSNs, MSNs, AETH syndromes, READ response sizes and atomic
// values rxe answered with. Receives are posted when rxe had one: before
// each SEND that rxe accepted, none before one it answered with an RNR NAK.
func TestResponderConformance(t *testing.T) {
	for _, name := range []string{
		"rxe_rc_pingpong_send.pcap", "rxe_srq_pingpong.pcap", "rxe_write_bw.pcap", "rxe_read_bw.pcap",
		"rxe_send_bw.pcap", "rxe_atomic.pcap", "rxe_atomic_cas.pcap", "rxe_write_lat.pcap",
		"rxe_send_lat.pcap", "rxe_read_lat.pcap", "rxe_imm_rnr.pcap", "rxe_rnr_send_bw.pcap",
		"rxe_write_bw_64k_mtu4096.pcap", "rxe_host_rc_pingpong.pcap",
	} {
		t.Run(name, func(t *testing.T) { replayResponder(t, name) })
	}
}

func replayResponder(t *testing.T, name string) {
	caps := readCapture(t, name)
	server := netip.MustParseAddr("198.18.0.11")
	// Follow one connection: the first QP the client sends requests to,
	// and the client QP its first answer goes to.
	var serverQPN, clientQPN uint32
	var first bth.PSN
	for _, c := range caps {
		if c.pkt.Info.Transport == bth.TransportRC && c.dst == server && isRequest(c.pkt.Info.Operation) {
			serverQPN, first = c.pkt.BTH.DestQP(), c.pkt.BTH.PSN()
			break
		}
	}
	for _, c := range caps {
		if c.src == server && !isRequest(c.pkt.Info.Operation) && c.pkt.BTH.PSN().InWindow(first, 1<<16) {
			clientQPN = c.pkt.BTH.DestQP()
			break
		}
	}
	var reqs, resps []capPacket
	for _, c := range caps {
		if c.pkt.Info.Transport != bth.TransportRC {
			continue
		}
		if c.dst == server && isRequest(c.pkt.Info.Operation) && c.pkt.BTH.DestQP() == serverQPN {
			reqs = append(reqs, c)
		}
		if c.src == server && !isRequest(c.pkt.Info.Operation) && c.pkt.BTH.DestQP() == clientQPN {
			resps = append(resps, c)
		}
	}
	if len(reqs) == 0 || len(resps) == 0 {
		t.Fatalf("no requests or responses")
	}
	client := reqs[0].src
	// The memory the requests name, and the path MTU and RNR timer rxe used.
	var lo, hi uint64 = ^uint64(0), 0
	mtu, rnrTimer := 1024, uint8(12)
	for _, c := range append(slices.Clone(reqs), resps...) {
		p := &c.pkt
		if p.RETH != nil {
			lo, hi = min(lo, p.RETH.VA()), max(hi, p.RETH.VA()+uint64(p.RETH.DMALen()))
		}
		if p.AtomicETH != nil {
			lo, hi = min(lo, p.AtomicETH.VA()), max(hi, p.AtomicETH.VA()+8)
		}
		if len(p.Payload) > 1024 {
			mtu = 4096
		}
		if p.AETH != nil && p.AETH.Syndrome().Kind() == bth.KindRNRNAK {
			rnrTimer = p.AETH.Syndrome().Value()
		}
	}
	link := &fakeLink{addr: server}
	dev, err := New(link, nil)
	must(t, err)
	defer dev.Close()
	pdi, _ := dev.AllocPD()
	pd := pdi.(*PD)
	cqi, _ := dev.CreateCQ(4096)
	cq := cqi.(*CQ)
	q, err := dev.createQP(pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1024, MaxRecvSGE: 1}})
	must(t, err)
	size := 64 << 10
	if hi > lo {
		size = int(hi - lo)
	}
	m, err := pd.pd.Register(make([]byte, size), verbs.LocalWrite|verbs.RemoteAccess)
	must(t, err)
	recvBuf, err := pd.pd.Register(make([]byte, 1<<17), verbs.LocalWrite)
	must(t, err)
	mtuEnum, _ := bth.MTUAtMost(mtu)
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.LocalWrite | verbs.RemoteAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: mtuEnum, DestQPN: clientQPN,
		RQPSN: reqs[0].pkt.BTH.PSN(), MaxDestRDAtomic: 16, MinRNRTimer: rnrTimer,
		AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(client)}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRDAtomic|verbs.AttrMinRNRTimer))

	posted := 0 // receives posted and not yet consumed
	wcs := make([]verbs.WC, 64)
	var got []respKey
	seenAtomic := map[uint64]bool{}
	for i, c := range reqs {
		p := &c.pkt
		info := p.Info
		start := info.Position == bth.PosFirst || info.Position == bth.PosOnly
		end := info.Position == bth.PosLast || info.Position == bth.PosOnly
		if info.Operation == bth.OpSend && start || info.Operation == bth.OpWrite && info.Imm && end {
			if rxeAccepted(c, resps) && posted == 0 {
				must(t, q.PostRecv([]verbs.RecvWR{{ID: uint64(i),
					SGL: []verbs.SGE{{Addr: recvBuf.Addr(), Length: uint32(recvBuf.Len()), LKey: recvBuf.LKey()}}}}))
				posted++
			}
		}
		data := slices.Clone(c.data)
		var r bth.Packet
		must(t, r.Parse(data))
		r.BTH.SetDestQP(q.QPN())
		if r.RETH != nil {
			f := r.RETH.Fields()
			f.VA, f.RKey = m.Addr()+(f.VA-lo), m.RKey()
			r.RETH.Encode(&f)
		}
		if r.AtomicETH != nil {
			f := r.AtomicETH.Fields()
			if !seenAtomic[f.VA] {
				// Start the word where rxe's was: the value its first
				// answer for this address reports.
				seenAtomic[f.VA] = true
				if orig, ok := atomicOrig(c, resps); ok {
					binary.NativeEndian.PutUint64(m.Bytes()[f.VA-lo:], orig)
				}
			}
			f.VA, f.RKey = m.Addr()+(f.VA-lo), m.RKey()
			r.AtomicETH.Encode(&f)
		}
		link.h([]transport.Packet{{Data: data, Src: client, Dst: server}})
		for _, s := range link.take() {
			var sp bth.Packet
			must(t, sp.Parse(s.Data))
			got = append(got, keyOf(&sp))
		}
		for n := cq.Poll(wcs); n > 0; n = cq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.Success {
					t.Fatalf("frame %d: completion %v", c.frame, &wc)
				}
				posted--
			}
		}
	}
	var want []respKey
	for _, c := range resps {
		want = append(want, keyOf(&c.pkt))
	}
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i].String()
		}
		if i < len(want) {
			w = want[i].String()
		}
		if g != w {
			t.Fatalf("response %d (rxe's frame %d): goroce sent %q, rxe sent %q", i, frameOf(resps, i), g, w)
		}
	}
	t.Logf("%d requests, %d responses, all as rxe answered", len(reqs), len(got))
}

func frameOf(c []capPacket, i int) int {
	if i < len(c) {
		return c[i].frame
	}
	return -1
}

// rxeAccepted reports whether rxe had a receive for request c: its first
// answer that covers c's PSN is not an RNR NAK for that PSN.
func rxeAccepted(c capPacket, resps []capPacket) bool {
	psn := c.pkt.BTH.PSN()
	for _, r := range resps {
		if r.frame < c.frame || r.pkt.BTH.PSN().LessThan(psn) {
			continue
		}
		if r.pkt.AETH != nil && r.pkt.AETH.Syndrome().Kind() == bth.KindRNRNAK {
			return r.pkt.BTH.PSN() != psn
		}
		return true
	}
	return true
}

// atomicOrig returns the original value rxe reported for atomic request c.
func atomicOrig(c capPacket, resps []capPacket) (uint64, bool) {
	for _, r := range resps {
		if r.frame > c.frame && r.pkt.AtomicAckETH != nil && r.pkt.BTH.PSN() == c.pkt.BTH.PSN() {
			return r.pkt.AtomicAckETH.Orig(), true
		}
	}
	return 0, false
}
