package qp

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// reqKey is what conformance compares of a request packet.
type reqKey struct {
	op      bth.Opcode
	psn     bth.PSN
	ackReq  bool
	se      bool
	payload int
	reth    bth.RETHFields
	atomic  bth.AtomicETHFields
	imm     uint32
}

func reqKeyOf(p *bth.Packet) reqKey {
	k := reqKey{op: p.BTH.Opcode(), psn: p.BTH.PSN(), ackReq: p.BTH.AckReq(), se: p.BTH.SE(), payload: len(p.Payload)}
	if p.RETH != nil {
		k.reth = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		k.atomic = p.AtomicETH.Fields()
	}
	if p.ImmDt != nil {
		k.imm = p.ImmDt.Imm()
	}
	return k
}

func (k reqKey) String() string {
	type plain reqKey
	return fmt.Sprintf("%+v", plain(k))
}

// TestRequesterConformance posts the work requests the rxe client posted
// in each capture, feeds goroce's requester the answers rxe's server gave,
// and checks that goroce sends the request packets rxe sent: opcodes,
// PSNs, AckReq and SE bits, payload sizes, RETH, AtomicETH and immediate
// data, retransmissions after RNR NAKs included.
func TestRequesterConformance(t *testing.T) {
	for _, name := range []string{
		"rxe_write_bw.pcap", "rxe_read_bw.pcap", "rxe_send_bw.pcap", "rxe_atomic.pcap", "rxe_atomic_cas.pcap",
		"rxe_write_bw_64k_mtu4096.pcap", "rxe_imm_rnr.pcap", "rxe_rnr_send_bw.pcap", "rxe_send_lat.pcap",
		"rxe_read_lat.pcap", "rxe_write_lat.pcap",
	} {
		t.Run(name, func(t *testing.T) { replayRequester(t, name) })
	}
}

func replayRequester(t *testing.T, name string) {
	caps := readCapture(t, name)
	client := netip.MustParseAddr("198.18.0.12")
	server := netip.MustParseAddr("198.18.0.11")
	var reqs []capPacket
	var serverQPN uint32
	for _, c := range caps {
		if c.pkt.Info.Transport == bth.TransportRC && c.src == client && isRequest(c.pkt.Info.Operation) {
			if serverQPN == 0 {
				serverQPN = c.pkt.BTH.DestQP()
			}
			if c.pkt.BTH.DestQP() == serverQPN {
				reqs = append(reqs, c)
			}
		}
	}
	// Rebuild the work requests from the first time each message went out.
	mtu := 1024
	for _, c := range reqs {
		if len(c.pkt.Payload) > 1024 {
			mtu = 4096
		}
	}
	type msg struct {
		wr     verbs.SendWR
		length int
	}
	var msgs []msg
	seen := map[bth.PSN]bool{}
	for _, c := range reqs {
		p := &c.pkt
		psn := p.BTH.PSN()
		if seen[psn] {
			continue // a retransmission
		}
		seen[psn] = true
		info := p.Info
		if info.Position == bth.PosFirst || info.Position == bth.PosOnly {
			var wr verbs.SendWR
			switch info.Operation {
			case bth.OpSend:
				wr.Opcode = verbs.OpSend
				if info.Imm {
					wr.Opcode = verbs.OpSendImm
				}
			case bth.OpWrite:
				wr.Opcode = verbs.OpWrite
				if info.Imm {
					wr.Opcode = verbs.OpWriteImm
				}
			case bth.OpReadRequest:
				wr.Opcode = verbs.OpRead
			case bth.OpCompareSwap:
				wr.Opcode = verbs.OpAtomicCmpSwp
			case bth.OpFetchAdd:
				wr.Opcode = verbs.OpAtomicFetchAdd
			}
			if p.RETH != nil {
				wr.RemoteAddr, wr.RKey = p.RETH.VA(), p.RETH.RKey()
			}
			if p.AtomicETH != nil {
				wr.RemoteAddr, wr.RKey = p.AtomicETH.VA(), p.AtomicETH.RKey()
				wr.CompareAdd = p.AtomicETH.SwapAdd()
				if wr.Opcode == verbs.OpAtomicCmpSwp {
					wr.CompareAdd, wr.Swap = p.AtomicETH.Compare(), p.AtomicETH.SwapAdd()
				}
			}
			wr.Flags = verbs.Signaled
			if p.BTH.SE() {
				wr.Flags |= verbs.Solicited
			}
			msgs = append(msgs, msg{wr: wr})
		}
		m := &msgs[len(msgs)-1]
		m.length += len(p.Payload)
		switch {
		case p.RETH != nil && info.Operation == bth.OpReadRequest:
			m.length = int(p.RETH.DMALen())
		case p.AtomicETH != nil:
			m.length = 8
		}
		if p.ImmDt != nil {
			m.wr.Imm = p.ImmDt.Imm()
			switch m.wr.Opcode {
			case verbs.OpSend:
				m.wr.Opcode = verbs.OpSendImm
			case verbs.OpWrite:
				m.wr.Opcode = verbs.OpWriteImm
			}
		}
		if (info.Position == bth.PosLast || info.Position == bth.PosOnly) && p.BTH.SE() {
			m.wr.Flags |= verbs.Solicited
		}
	}
	clk := clock.NewManual(time.Unix(1e9, 0))
	link := &fakeLink{addr: client}
	// Congestion control off: the replay sends as rxe did, the whole
	// window at once, where a delay window starts smaller and grows.
	dev, err := New(link, &Config{Clock: clk, Congestion: &congestion.Config{Mode: congestion.Off}})
	must(t, err)
	defer dev.Close()
	pdi, _ := dev.AllocPD()
	pd := pdi.(*PD)
	cqi, _ := dev.CreateCQ(4096)
	cq := cqi.(*CQ)
	q, err := dev.createQP(pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 16, MaxSendSGE: 1}})
	must(t, err)
	local, err := pd.pd.Register(make([]byte, 1<<20), verbs.LocalWrite)
	must(t, err)
	mtuEnum, _ := bth.MTUAtMost(mtu)
	first := reqs[0].pkt.BTH.PSN()
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.LocalWrite | verbs.RemoteAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: mtuEnum, DestQPN: serverQPN, RQPSN: 0,
		MaxDestRDAtomic: 16, MinRNRTimer: 12, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(server)}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRDAtomic|verbs.AttrMinRNRTimer))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: first, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRDAtomic: 128}, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|
		verbs.AttrRNRRetry|verbs.AttrMaxQPRDAtomic))
	var wrs []verbs.SendWR
	for i, m := range msgs {
		m.wr.ID = uint64(i)
		m.wr.SGL = []verbs.SGE{{Addr: local.Addr(), Length: uint32(m.length), LKey: local.LKey()}}
		wrs = append(wrs, m.wr)
	}
	must(t, q.PostSend(wrs))
	// perftest asks for 128 outstanding READs and atomics (out_reads).
	// Walk the capture: each request rxe sent must be the next goroce
	// sends (advancing the clock to goroce's next timer if it has not sent
	// it yet, as for an RNR wait); each answer from the server is fed in.
	var pending []reqKey
	pull := func() {
		for _, s := range link.take() {
			var sp bth.Packet
			must(t, sp.Parse(s.Data))
			pending = append(pending, reqKeyOf(&sp))
		}
	}
	n := 0
	for _, c := range caps {
		if c.pkt.Info.Transport != bth.TransportRC {
			continue
		}
		switch {
		case c.src == client && c.pkt.BTH.DestQP() == serverQPN && isRequest(c.pkt.Info.Operation):
			pull()
			for len(pending) == 0 {
				next, ok := clk.Next()
				if !ok {
					t.Fatalf("request %d (rxe's frame %d): goroce sent nothing; rxe sent %v", n, c.frame, reqKeyOf(&c.pkt))
				}
				clk.AdvanceTo(next)
				pull()
			}
			want := reqKeyOf(&c.pkt)
			if c.pkt.Truncated || len(c.pkt.Payload) != want.payload {
				want.payload = pending[0].payload // the capture cut the payload
			}
			if got := pending[0]; got != want {
				t.Fatalf("request %d (rxe's frame %d):\ngoroce %v\n   rxe %v", n, c.frame, got, want)
			}
			pending = pending[1:]
			n++
		case c.src == server && !isRequest(c.pkt.Info.Operation):
			data := slices.Clone(c.data)
			bth.BTH(data).SetDestQP(q.QPN())
			link.h([]transport.Packet{{Data: data, Src: server, Dst: client}})
		}
	}
	pull()
	if len(pending) > 0 {
		t.Fatalf("goroce sent %d more requests than rxe, the first %v", len(pending), pending[0])
	}
	wcs := make([]verbs.WC, 1024)
	got := cq.Poll(wcs)
	for _, wc := range wcs[:got] {
		if wc.Status != verbs.Success {
			t.Fatalf("completion %v", &wc)
		}
	}
	t.Logf("%d work requests, %d request packets as rxe sent them, %d completions", len(msgs), n, got)
}
