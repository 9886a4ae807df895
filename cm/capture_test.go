package cm

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// capMAD is a MAD of a capture with the packet headers that carried it.
type capMAD struct {
	src, dst netip.Addr
	bth      bth.BTHFields
	deth     bth.DETHFields
	hdr      mad.Header
	msg      mad.Message
	raw      []byte
}

// captureMADs returns the CM MADs of a capture of testdata/captures, in
// order.
func captureMADs(tb testing.TB, name string) []capMAD {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "captures", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []capMAD
	for i := 1; i <= 10000; i++ {
		raw, _, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		var fr bth.Frame
		if bth.ParseFrame(&fr, raw, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		var p bth.Packet
		if p.Parse(fr.Payload) != nil || p.BTH.Opcode() != bth.UDSendOnly || p.BTH.DestQP() != bth.GSIQPN {
			continue
		}
		h, m, err := mad.Decode(p.Payload)
		if err != nil {
			tb.Fatalf("%s frame %d: %v", name, i, err)
		}
		out = append(out, capMAD{src: fr.Flow.Src, dst: fr.Flow.Dst, bth: p.BTH.Fields(), deth: p.DETH.Fields(),
			hdr: h, msg: m, raw: append([]byte(nil), p.Payload...)})
	}
	return out
}

// findMAD returns the first MAD of the capture with attribute attr.
func findMAD(tb testing.TB, mads []capMAD, attr uint16) capMAD {
	tb.Helper()
	for _, m := range mads {
		if m.hdr.AttrID == attr {
			return m
		}
	}
	tb.Fatalf("no %s in the capture", mad.AttrName(attr))
	return capMAD{}
}

// fakePeer is a raw endpoint on the in-memory network that sends MADs as
// rxe does and hands over what it receives.
type fakePeer struct {
	t   *testing.T
	ep  *mem.Endpoint
	in  chan capMAD
	psn uint32
}

func newFakePeer(t *testing.T, n *mem.Network, addr string) *fakePeer {
	t.Helper()
	ep, err := n.Endpoint(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{t: t, ep: ep, in: make(chan capMAD, 64)}
	err = ep.Start(func(pkts []transport.Packet) {
		for _, tp := range pkts {
			var p bth.Packet
			if p.Parse(tp.Data) != nil || p.DETH == nil {
				continue
			}
			h, m, err := mad.Decode(p.Payload)
			if err != nil {
				continue
			}
			f.in <- capMAD{src: tp.Src, dst: tp.Dst, bth: p.BTH.Fields(), deth: p.DETH.Fields(), hdr: h, msg: m,
				raw: append([]byte(nil), p.Payload...)}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return f
}

// send sends a MAD to QP 1 of dst as a UD SEND Only from QP 1.
func (f *fakePeer) send(dst netip.Addr, h mad.Header, m mad.Message) {
	f.t.Helper()
	var b [mad.Len]byte
	if err := mad.Encode(h, m, b[:]); err != nil {
		f.t.Fatal(err)
	}
	buf := make([]byte, bth.Len(bth.UDSendOnly, mad.Len))
	var p bth.Packet
	n := p.Build(buf, &bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: bth.GSIQPN, AckReq: true,
		PSN: bth.PSN(f.psn)}, mad.Len)
	f.psn++
	p.DETH.Encode(&bth.DETHFields{QKey: bth.GSIQKey, SrcQP: bth.GSIQPN})
	copy(p.Payload, b[:])
	if err := f.ep.Send([]transport.Packet{{Data: buf[:n], Src: f.ep.LocalAddr(), Dst: dst}}); err != nil {
		f.t.Fatal(err)
	}
}

// recv waits up to 10 s for a MAD of attribute attr, skipping others.
func (f *fakePeer) recv(attr uint16) capMAD {
	f.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-f.in:
			if m.hdr.AttrID == attr {
				return m
			}
			f.t.Logf("fake peer: skipping %s", mad.AttrName(m.hdr.AttrID))
		case <-deadline:
			f.t.Fatalf("fake peer: no %s", mad.AttrName(attr))
		}
	}
}

// checkMADPacket checks the headers of a MAD we sent against those rxe
// used for the same message in the capture.
func checkMADPacket(t *testing.T, got, want capMAD) {
	t.Helper()
	gb, wb := got.bth, want.bth
	// The PSN counts the GSI QP's sends. rxe also sets AckReq on UD
	// packets, which UD receivers ignore; goroce's engine (package qp)
	// leaves it clear.
	gb.PSN, wb.PSN = 0, 0
	gb.AckReq, wb.AckReq = false, false
	if gb != wb || got.deth != want.deth {
		t.Errorf("%s packet: BTH %+v DETH %+v, rxe sent BTH %+v DETH %+v", mad.AttrName(got.hdr.AttrID),
			got.bth, got.deth, want.bth, want.deth)
	}
	gh, wh := got.hdr, want.hdr
	gh.TID, wh.TID = 0, 0
	if gh != wh {
		t.Errorf("%s header %+v, rxe sent %+v", mad.AttrName(got.hdr.AttrID), got.hdr, want.hdr)
	}
}

// rpingCaptures are the rping captures the formula and replay tests run on: rxe
// against rxe over IPv4 and over IPv6 (its rdma_cm header says IP version
// 6, its GIDs are the IPv6 addresses).
var rpingCaptures = []string{"rxe_rping_rdmacm.pcap", "ipv6/rxe_rping_rdmacm_ipv6.pcap"}

// TestCaptureFormulas checks the values the agent derives the way the
// kernel does against the rping captures: TID, flow label, ACK timeout.
func TestCaptureFormulas(t *testing.T) {
	for _, name := range rpingCaptures {
		t.Run(filepath.Base(name), func(t *testing.T) { captureFormulas(t, name) })
	}
}

func captureFormulas(t *testing.T, capture string) {
	mads := captureMADs(t, capture)
	req := findMAD(t, mads, mad.AttrREQ)
	m := req.msg.(*mad.REQ)
	var cma mad.CMAHeader
	if err := cma.Unmarshal(m.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	if got := formTID(uint32(req.hdr.TID>>32), m.LocalCommID); got != req.hdr.TID {
		t.Errorf("TID of comm ID %#x: %#x, capture %#x", m.LocalCommID, got, req.hdr.TID)
	}
	if got := flowLabel(cma.SrcPort, 7174); got != m.Primary.FlowLabel {
		t.Errorf("flow label %#x, capture %#x", got, m.Primary.FlowLabel)
	}
	if got := ackTimeout(caACKDelay, DefaultPacketLifeTime); got != m.Primary.LocalACKTimeout {
		t.Errorf("ACK timeout %d, capture %d", got, m.Primary.LocalACKTimeout)
	}
	rep := findMAD(t, mads, mad.AttrREP).msg.(*mad.REP)
	if got := ackTimeout(rep.TargetACKDelay, m.Primary.LocalACKTimeout-1); got != m.Primary.LocalACKTimeout {
		t.Errorf("active side's ACK timeout after the REP %d", got)
	}
	for _, tc := range []struct{ delay, life, want uint8 }{{15, 18, 19}, {15, 8, 15}, {15, 13, 16}, {0, 0, 2}, {31, 31, 31}} {
		if got := ackTimeout(tc.delay, tc.life); got != tc.want {
			t.Errorf("ackTimeout(%d, %d) = %d, want %d", tc.delay, tc.life, got, tc.want)
		}
	}
}

// TestReplayREQ replays the REQ of each rping capture into a passive agent
// at the capture's server address and checks its REP, its QP and the rest
// of the exchange against what rxe's passive side did.
func TestReplayREQ(t *testing.T) {
	for _, name := range rpingCaptures {
		t.Run(filepath.Base(name), func(t *testing.T) { replayREQ(t, name) })
	}
}

func replayREQ(t *testing.T, capture string) {
	checkNoLeak(t)
	mads := captureMADs(t, capture)
	cReq, cRep, cRtu := findMAD(t, mads, mad.AttrREQ), findMAD(t, mads, mad.AttrREP), findMAD(t, mads, mad.AttrRTU)
	cDreq, cDrep := findMAD(t, mads, mad.AttrDREQ), findMAD(t, mads, mad.AttrDREP)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	ep, err := n.Endpoint(cReq.dst)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, ep, nil)
	peer := newFakePeer(t, n, cReq.src.String())
	ctx := ctxT(t, 10*time.Second)
	srv := newSide(t, h.dev)
	l, accepted := listenOne(t, ctx, h, srv, nil)
	defer l.Close()

	peer.send(cReq.dst, cReq.hdr, cReq.msg)
	got := peer.recv(mad.AttrREP)
	checkMADPacket(t, got, cRep)
	if got.hdr.TID != cReq.hdr.TID {
		t.Errorf("REP TID %#x, REQ's %#x", got.hdr.TID, cReq.hdr.TID)
	}
	rep, want := *got.msg.(*mad.REP), *cRep.msg.(*mad.REP)
	// What depends on our choices: our comm ID, QPN, PSN and GUID.
	if rep.LocalCommID == 0 || rep.LocalQPN != srv.qp.QPN() {
		t.Errorf("REP comm ID %#x QPN %#x (QP %#x)", rep.LocalCommID, rep.LocalQPN, srv.qp.QPN())
	}
	rep.LocalCommID, rep.LocalQPN, rep.StartingPSN, rep.LocalCAGUID = want.LocalCommID, want.LocalQPN, want.StartingPSN, want.LocalCAGUID
	if rep != want {
		t.Errorf("REP\n got %+v\nrxe %+v", rep, want)
	}
	// The QP is in RTS towards the REQ's QP, sending from the REQ's PSN.
	req := cReq.msg.(*mad.REQ)
	a, _ := srv.qp.Query()
	gotRep := got.msg.(*mad.REP)
	if a.State != verbs.StateRTS || a.PathMTU != bth.MTU1024 || a.DestQPN != req.LocalQPN ||
		uint32(a.SQPSN) != req.StartingPSN || uint32(a.RQPSN) != gotRep.StartingPSN || a.Timeout != 19 ||
		a.RetryCnt != 7 || a.RNRRetry != 7 || a.MaxRDAtomic != 1 || a.MaxDestRDAtomic != 1 ||
		a.AH.DGID != req.Primary.LocalGID || a.AH.FlowLabel != req.Primary.FlowLabel || a.AH.HopLimit != 64 ||
		a.Access != verbs.RemoteWrite|verbs.RemoteRead|verbs.RemoteAtomic {
		t.Errorf("QP attributes %+v", a)
	}

	// The capture's RTU, addressed to our comm ID, completes Accept.
	rtu := *cRtu.msg.(*mad.RTU)
	rtu.RemoteCommID = gotRep.LocalCommID
	peer.send(cReq.dst, cRtu.hdr, &rtu)
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	var cma mad.CMAHeader
	if err := cma.Unmarshal(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	if r.req.Remote != netip.AddrPortFrom(cReq.src, cma.SrcPort) || cma.Src.Unmap() != cReq.src || r.req.RemoteQPN != req.LocalQPN {
		t.Errorf("request %+v, REQ from %v QP %#x, rdma_cm header %+v", r.req, cReq.src, req.LocalQPN, cma)
	}
	// The capture's DREQ: we answer with the DREP rxe answered with.
	dreq := *cDreq.msg.(*mad.DREQ)
	dreq.RemoteCommID, dreq.RemoteQPN = gotRep.LocalCommID, srv.qp.QPN()
	peer.send(cReq.dst, cDreq.hdr, &dreq)
	gotDrep := peer.recv(mad.AttrDREP)
	checkMADPacket(t, gotDrep, cDrep)
	drep, wantDrep := *gotDrep.msg.(*mad.DREP), *cDrep.msg.(*mad.DREP)
	if gotDrep.hdr.TID != cDreq.hdr.TID || drep.LocalCommID != gotRep.LocalCommID {
		t.Errorf("DREP TID %#x comm ID %#x", gotDrep.hdr.TID, drep.LocalCommID)
	}
	drep.LocalCommID = wantDrep.LocalCommID
	if drep != wantDrep {
		t.Errorf("DREP\n got %+v\nrxe %+v", drep, wantDrep)
	}
	select {
	case <-r.conn.Done():
	case <-ctx.Done():
		t.Fatal("the DREQ did not end the connection")
	}
	if !errors.Is(r.conn.Err(), ErrDisconnected) {
		t.Errorf("ended with %v", r.conn.Err())
	}
	if a, _ := srv.qp.Query(); a.State != verbs.StateErr {
		t.Errorf("QP %v after the DREQ", a.State)
	}
	r.conn.Close()
}

// TestReplayREP plays rxe's passive side from each rping capture against
// an active agent at the capture's client address: the REQ, RTU and DREQ
// it sends are compared with rxe's, field by field where they do not
// depend on the agent's choices.
func TestReplayREP(t *testing.T) {
	for _, name := range rpingCaptures {
		t.Run(filepath.Base(name), func(t *testing.T) { replayREP(t, name) })
	}
}

func replayREP(t *testing.T, capture string) {
	checkNoLeak(t)
	mads := captureMADs(t, capture)
	cReq, cRep, cRtu := findMAD(t, mads, mad.AttrREQ), findMAD(t, mads, mad.AttrREP), findMAD(t, mads, mad.AttrRTU)
	cDreq, cDrep := findMAD(t, mads, mad.AttrDREQ), findMAD(t, mads, mad.AttrDREP)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	ep, err := n.Endpoint(cReq.src)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, ep, nil)
	peer := newFakePeer(t, n, cReq.dst.String())
	ctx := ctxT(t, 10*time.Second)
	cli := newSide(t, h.dev)
	type dialResult struct {
		c   *Conn
		err error
	}
	dialed := make(chan dialResult, 1)
	go func() {
		c, err := h.agent.Dial(ctx, netip.AddrPortFrom(cReq.dst, 7174), &Params{QP: cli.qp, PathMTU: bth.MTU1024})
		dialed <- dialResult{c, err}
	}()
	got := peer.recv(mad.AttrREQ)
	checkMADPacket(t, got, cReq)
	req, want := *got.msg.(*mad.REQ), *cReq.msg.(*mad.REQ)
	if got.hdr.TID != formTID(1, req.LocalCommID) {
		t.Errorf("REQ TID %#x for comm ID %#x", got.hdr.TID, req.LocalCommID)
	}
	var cma, wantCMA mad.CMAHeader
	if err := cma.Unmarshal(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	wantCMA.Unmarshal(want.PrivateData[:])
	if cma.Src != wantCMA.Src || cma.Dst != wantCMA.Dst || cma.SrcPort < ephemeralLow || cma.SrcPort > ephemeralHigh {
		t.Errorf("rdma_cm header %+v, rxe %+v", cma, wantCMA)
	}
	if req.LocalQPN != cli.qp.QPN() || req.Primary.FlowLabel != flowLabel(cma.SrcPort, 7174) {
		t.Errorf("REQ QPN %#x flow label %#x", req.LocalQPN, req.Primary.FlowLabel)
	}
	myPSN := req.StartingPSN
	req.LocalCommID, req.LocalCAGUID, req.LocalQPN, req.StartingPSN = want.LocalCommID, want.LocalCAGUID, want.LocalQPN, want.StartingPSN
	req.Primary.FlowLabel = want.Primary.FlowLabel
	req.PrivateData = want.PrivateData
	if req != want {
		t.Errorf("REQ\n got %+v\nrxe %+v", req, want)
	}

	// rxe's REP, addressed to our REQ.
	rep := *cRep.msg.(*mad.REP)
	rep.RemoteCommID = got.msg.(*mad.REQ).LocalCommID
	rh := cRep.hdr
	rh.TID = got.hdr.TID
	peer.send(cReq.src, rh, &rep)
	rtuMAD := peer.recv(mad.AttrRTU)
	checkMADPacket(t, rtuMAD, cRtu)
	rtu, wantRTU := *rtuMAD.msg.(*mad.RTU), *cRtu.msg.(*mad.RTU)
	if rtuMAD.hdr.TID != got.hdr.TID || rtu.LocalCommID != rep.RemoteCommID {
		t.Errorf("RTU TID %#x comm ID %#x", rtuMAD.hdr.TID, rtu.LocalCommID)
	}
	rtu.LocalCommID = wantRTU.LocalCommID
	if rtu != wantRTU {
		t.Errorf("RTU\n got %+v\nrxe %+v", rtu, wantRTU)
	}
	d := <-dialed
	if d.err != nil {
		t.Fatal(d.err)
	}
	a, _ := cli.qp.Query()
	if a.State != verbs.StateRTS || a.PathMTU != bth.MTU1024 || a.DestQPN != rep.LocalQPN || uint32(a.SQPSN) != rep.StartingPSN ||
		uint32(a.RQPSN) != myPSN || a.Timeout != 19 || a.RetryCnt != 7 || a.RNRRetry != 7 || a.MaxRDAtomic != 1 ||
		a.MaxDestRDAtomic != 1 {
		t.Errorf("QP attributes %+v", a)
	}

	// Close: the DREQ is rxe's but for our IDs; rxe's DREP ends it.
	closed := make(chan error, 1)
	go func() { closed <- d.c.Close() }()
	dreqMAD := peer.recv(mad.AttrDREQ)
	checkMADPacket(t, dreqMAD, cDreq)
	dreq, wantDreq := *dreqMAD.msg.(*mad.DREQ), *cDreq.msg.(*mad.DREQ)
	if dreqMAD.hdr.TID != got.hdr.TID || dreq.LocalCommID != rep.RemoteCommID {
		t.Errorf("DREQ TID %#x comm ID %#x", dreqMAD.hdr.TID, dreq.LocalCommID)
	}
	dreq.LocalCommID = wantDreq.LocalCommID
	if dreq != wantDreq {
		t.Errorf("DREQ\n got %+v\nrxe %+v", dreq, wantDreq)
	}
	drep := *cDrep.msg.(*mad.DREP)
	drep.RemoteCommID = rep.RemoteCommID
	dh := cDrep.hdr
	dh.TID = dreqMAD.hdr.TID
	peer.send(cReq.src, dh, &drep)
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if a, _ := cli.qp.Query(); a.State != verbs.StateErr {
		t.Errorf("QP %v after close", a.State)
	}
}

// TestStaleConnection has a peer send a second REQ from a QP that is
// still connected: the agent rejects it as stale and tears the old
// connection down with a DREQ.
func TestStaleConnection(t *testing.T) {
	checkNoLeak(t)
	mads := captureMADs(t, "rxe_rping_rdmacm.pcap")
	cReq, cRtu := findMAD(t, mads, mad.AttrREQ), findMAD(t, mads, mad.AttrRTU)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	ep, err := n.Endpoint(cReq.dst)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, ep, nil)
	peer := newFakePeer(t, n, cReq.src.String())
	ctx := ctxT(t, 10*time.Second)
	l, err := h.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- acceptResult{conn: c, err: err}
	}()
	peer.send(cReq.dst, cReq.hdr, cReq.msg)
	rep := peer.recv(mad.AttrREP).msg.(*mad.REP)
	rtu := *cRtu.msg.(*mad.RTU)
	rtu.RemoteCommID = rep.LocalCommID
	peer.send(cReq.dst, cRtu.hdr, &rtu)
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The peer restarts and connects again from the same QP number.
	req2 := *cReq.msg.(*mad.REQ)
	req2.LocalCommID++
	h2 := cReq.hdr
	h2.TID++
	peer.send(cReq.dst, h2, &req2)
	rej := peer.recv(mad.AttrREJ).msg.(*mad.REJ)
	if rej.Reason != mad.RejStaleConn || rej.RemoteCommID != req2.LocalCommID || rej.MessageRejected != mad.RejectedREQ {
		t.Errorf("REJ %+v", rej)
	}
	dreq := peer.recv(mad.AttrDREQ).msg.(*mad.DREQ)
	if dreq.LocalCommID != rep.LocalCommID || dreq.RemoteQPN != req2.LocalQPN {
		t.Errorf("DREQ %+v", dreq)
	}
	<-r.conn.Done()
	if !errors.Is(r.conn.Err(), ErrStale) {
		t.Errorf("old connection ended with %v", r.conn.Err())
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	r.conn.CloseContext(cctx)
}
