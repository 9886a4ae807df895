package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// udSide is a UD QP in RTS with a receive posted.
func udSide(t testing.TB, d verbs.Device) *side {
	t.Helper()
	s := newSide(t, d)
	q, err := s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(q, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.qp = q
	s.postRecv(t)
	return s
}

func TestResolveDatagram(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	srv, cli := udSide(t, hb.dev), udSide(t, ha.dev)
	l, err := hb.agent.ListenDatagram(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 4000), &DatagramListenConfig{
		QP: srv.qp,
		OnRequest: func(r *DatagramRequest) ([]byte, error) {
			if r.Remote.Addr() != ha.agent.Addr() || r.Local.Port() != 4000 {
				return nil, errors.New("unexpected request")
			}
			if bytes.HasPrefix(r.PrivateData, []byte("nope")) {
				return nil, Reject([]byte("not you"))
			}
			return []byte("ud service"), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(hb.agent.Addr(), 4000)
	p, err := ha.agent.ResolveDatagram(ctx, dst, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if p.QPN != srv.qp.QPN() || p.QKey != verbs.DefaultQKey || !bytes.HasPrefix(p.PrivateData, []byte("ud service")) {
		t.Fatalf("resolved %+v", p)
	}
	// The answer is good for sending: a UD SEND to the resolved QP.
	ah, err := cli.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(p.Addr.Addr()), HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(cli.mr.Bytes()[8192:], "datagram")
	if err := cli.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: ah, RemoteQPN: p.QPN, RemoteQKey: p.QKey,
		SGL: []verbs.SGE{{Addr: cli.mr.Addr() + 8192, Length: 8, LKey: cli.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, srv.cq); wc.Status != verbs.Success || string(srv.mr.Bytes()[40:48]) != "datagram" {
		t.Fatalf("UD receive %v", &wc)
	}

	_, err = ha.agent.ResolveDatagram(ctx, dst, []byte("nope"))
	var se *SIDRError
	if !errors.As(err, &se) || se.Status != mad.SIDRRejected || !bytes.HasPrefix(se.PrivateData, []byte("not you")) ||
		!errors.Is(err, ErrRejected) || errors.Is(err, ErrConnRefused) {
		t.Errorf("rejected resolve: %v", err)
	}
	_, err = ha.agent.ResolveDatagram(ctx, netip.AddrPortFrom(hb.agent.Addr(), 4001), nil)
	if !errors.As(err, &se) || se.Status != mad.SIDRServiceUnsupported || !errors.Is(err, ErrConnRefused) {
		t.Errorf("resolve of a port nobody serves: %v", err)
	}
	t.Log(err)
	// An RC listener does not answer for the UDP port space.
	rl, err := hb.agent.Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 4002), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if _, err := ha.agent.ResolveDatagram(ctx, netip.AddrPortFrom(hb.agent.Addr(), 4002), nil); !errors.Is(err, ErrConnRefused) {
		t.Errorf("resolve of an RC port: %v", err)
	}
	// Lost SIDR_REPs are recovered by sending the SIDR_REQ again...
	hb.link.dropNext(mad.AttrSIDRREP, 2)
	if _, err := ha.agent.ResolveDatagram(ctx, dst, nil); err != nil {
		t.Errorf("resolve with 2 lost answers: %v", err)
	}
	// ... up to the retries.
	hb.link.dropNext(mad.AttrSIDRREP, 100)
	if _, err := ha.agent.ResolveDatagram(ctx, dst, nil); !errors.Is(err, ErrTimeout) {
		t.Errorf("resolve with every answer lost: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ha.agent.ResolveDatagram(cctx, dst, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("resolve with a cancelled context: %v", err)
	}
	if _, err := ha.agent.ListenDatagram(ctx, netip.AddrPortFrom(ha.agent.Addr(), 1), &DatagramListenConfig{QP: rtsQP(t, ha.dev)}); err == nil {
		t.Error("ListenDatagram took an RC QP")
	}
}

// TestSentMADsRoundTrip records every MAD the agents send through the
// whole protocol and checks that each decodes to a message that encodes
// back to the same bytes, with the CM header rdma_cm sends.
func TestSentMADsRoundTrip(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ha.link.record()
	hb.link.record()
	ctx := ctxT(t, 10*time.Second)
	// REQ, MRA (slow decision), REP, RTU, duplicates, DREQ, DREP.
	slow := time.Duration(fastConfig().MaxRetries+1) * ha.agent.reqTimeout()
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(context.Context, *Request) (*Params, error) {
			time.Sleep(slow)
			return &Params{PrivateData: []byte("rep")}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		accepted <- acceptResult{conn: c, err: err}
	}()
	hb.link.dupNext(mad.AttrREP, 1)
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{PrivateData: []byte("req")})
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	ha.link.dupNext(mad.AttrDREQ, 1)
	c.Close()
	<-r.conn.Done()
	r.conn.Close()
	// REJ, SIDR_REQ and SIDR_REP.
	if _, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 1), nil); !errors.Is(err, ErrConnRefused) {
		t.Fatal(err)
	}
	if _, err := ha.agent.ResolveDatagram(ctx, netip.AddrPortFrom(hb.agent.Addr(), 1), nil); !errors.Is(err, ErrConnRefused) {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, b := range append(ha.link.recorded(), hb.link.recorded()...) {
		h, m, err := mad.Decode(b)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		seen[mad.AttrName(h.AttrID)]++
		if h.BaseVersion != 1 || h.MgmtClass != mad.ClassCM || h.ClassVersion != 2 || h.Method != mad.MethodSend ||
			h.Status != 0 || h.ClassSpecific != 0 || h.AttrMod != 0 {
			t.Errorf("%s header %+v", mad.AttrName(h.AttrID), h)
		}
		var again [mad.Len]byte
		if err := mad.Encode(h, m, again[:]); err != nil || !bytes.Equal(again[:], b) {
			t.Errorf("%s does not round-trip (%v):\n%x\n%x", mad.AttrName(h.AttrID), err, b, again)
		}
	}
	for _, name := range []string{"REQ", "MRA", "REP", "RTU", "DREQ", "DREP", "REJ", "SIDR_REQ", "SIDR_REP"} {
		if seen[name] == 0 {
			t.Errorf("no %s sent (sent %v)", name, seen)
		}
	}
	t.Logf("MADs sent: %v", seen)
}

// TestResolveDatagramLater answers SIDR_REQs after OnRequest has
// returned (ErrAnswerLater), as librdmacm's passive side does once its
// program has made the UD QP of the request and called rdma_accept: the
// peer waits for the answer through its repeats (which are dropped, not
// asked again), then gets the QP chosen at answer time; a refusal comes
// through the same way, and an answer cannot be given twice.
func TestResolveDatagramLater(t *testing.T) {
	checkNoLeak(t)
	ha, hb := memPair(t, fastConfig(), fastConfig())
	ctx := ctxT(t, 10*time.Second)
	srv := udSide(t, hb.dev)
	reqs := make(chan *DatagramRequest, 4)
	l, err := hb.agent.ListenDatagram(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 4001), &DatagramListenConfig{
		OnRequest: func(r *DatagramRequest) ([]byte, error) {
			reqs <- r
			return nil, ErrAnswerLater
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(hb.agent.Addr(), 4001)
	type res struct {
		p   *DatagramPeer
		err error
	}
	done := make(chan res, 1)
	go func() {
		p, err := ha.agent.ResolveDatagram(ctx, dst, []byte("later"))
		done <- res{p, err}
	}()
	r := <-reqs
	// Wait for the peer to repeat its SIDR_REQ (fastConfig's CM
	// timeouts are short): the repeat must not reach OnRequest again.
	for hb.agent.Stats().Received["SIDR_REQ"] < 2 {
		if ctx.Err() != nil {
			t.Fatal("the peer never repeated its SIDR_REQ")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case x := <-reqs:
		t.Fatalf("a repeat of the request reached OnRequest again: %+v", x)
	default:
	}
	if err := r.Answer(srv.qp, 0x1234, []byte("now")); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.p.QPN != srv.qp.QPN() || got.p.QKey != 0x1234 || !bytes.HasPrefix(got.p.PrivateData, []byte("now")) {
		t.Fatalf("resolved %+v, %v", got.p, got.err)
	}
	if err := r.Answer(srv.qp, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("a second Answer: %v", err)
	}
	go func() {
		p, err := ha.agent.ResolveDatagram(ctx, dst, []byte("again"))
		done <- res{p, err}
	}()
	r = <-reqs
	if err := r.Refuse([]byte("no")); err != nil {
		t.Fatal(err)
	}
	var se *SIDRError
	if got := <-done; !errors.As(got.err, &se) || se.Status != mad.SIDRRejected || !bytes.HasPrefix(se.PrivateData, []byte("no")) {
		t.Fatalf("refused resolve: %+v, %v", got.p, got.err)
	}
	if err := (&DatagramRequest{}).Answer(srv.qp, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Answer of a request not left for later: %v", err)
	}
}
