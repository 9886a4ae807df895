package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// side is an application endpoint of the tests: its own PD, CQ, RC QP
// with a receive posted, and a registered buffer, as rping sets them up
// before connecting.
type side struct {
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
	dev verbs.Device
}

func newSide(t testing.TB, d verbs.Device) *side {
	t.Helper()
	s := &side{dev: d}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	// rdma_create_qp leaves the QP in INIT, where receives can be posted.
	if err := roce.ModifyToInit(s.qp, nil); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(make([]byte, 1<<16), verbs.LocalWrite|verbs.RemoteRead|verbs.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	return s
}

// postRecv posts a receive of the first 4 KiB of the buffer.
func (s *side) postRecv(t testing.TB) {
	t.Helper()
	if err := s.qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: 4096, LKey: s.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// exchange checks that the connection carries data both ways: a SEND
// from a to b, then an RDMA WRITE and READ from b to a's buffer.
func exchange(t testing.TB, a, b *side) {
	t.Helper()
	msg := []byte("hello over a CM connection")
	copy(a.mr.Bytes()[8192:], msg)
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr() + 8192, Length: uint32(len(msg)), LKey: a.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCSend {
		t.Fatalf("send: %v", &wc)
	}
	if wc := waitWC(t, b.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != len(msg) ||
		!bytes.Equal(b.mr.Bytes()[:len(msg)], msg) {
		t.Fatalf("receive: %v %q", &wc, b.mr.Bytes()[:len(msg)])
	}
	copy(b.mr.Bytes()[100:], "written by b")
	if err := b.qp.PostSend([]verbs.SendWR{
		{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: b.mr.Addr() + 100, Length: 12, LKey: b.mr.LKey()}},
			RemoteAddr: a.mr.Addr() + 200, RKey: a.mr.RKey()},
		{ID: 3, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: b.mr.Addr() + 300, Length: 12, LKey: b.mr.LKey()}},
			RemoteAddr: a.mr.Addr() + 200, RKey: a.mr.RKey()},
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if wc := waitWC(t, b.cq); wc.Status != verbs.Success {
			t.Fatalf("b: %v", &wc)
		}
	}
	// The READ brings back what the WRITE left in a's memory (read
	// through b's completion: over UDP the race detector cannot see the
	// socket between a's engine and this goroutine).
	if got := string(b.mr.Bytes()[300:312]); got != "written by b" {
		t.Fatalf("READ got %q", got)
	}
}

// acceptResult is what a listener's one Accept returned, with the
// request its OnRequest saw.
type acceptResult struct {
	conn *Conn
	req  *Request
	err  error
}

// listenOne starts a listener on h's port 7174 whose OnRequest gives srv's
// QP and answers with repData; it returns the accept's result on a
// channel.
func listenOne(t testing.TB, ctx context.Context, h *host, srv *side, repData []byte) (*Listener, <-chan acceptResult) {
	t.Helper()
	return listenWith(t, ctx, h, &Params{QP: srv.qp, PrivateData: repData})
}

// listenWith is listenOne with the accepting side's parameters p.
func listenWith(t testing.TB, ctx context.Context, h *host, p *Params) (*Listener, <-chan acceptResult) {
	t.Helper()
	var req *Request
	l, err := h.agent.Listen(ctx, netip.AddrPortFrom(h.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(_ context.Context, r *Request) (*Params, error) {
			req = r
			return p, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- acceptResult{c, req, err}
	}()
	return l, ch
}

func TestConnect(t *testing.T) {
	for _, be := range backends {
		for _, closer := range []string{"active", "passive"} {
			t.Run(be.name+"/close="+closer, func(t *testing.T) {
				checkNoLeak(t)
				ha, hb := be.open(t)
				ctx := ctxT(t, 20*time.Second)
				cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
				srv.postRecv(t)
				cli.postRecv(t)
				l, accepted := listenOne(t, ctx, hb, srv, []byte("rep private data"))
				defer l.Close()
				c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174),
					&Params{QP: cli.qp, PrivateData: []byte("req private data")})
				if err != nil {
					t.Fatal(err)
				}
				r := <-accepted
				if r.err != nil {
					t.Fatal(r.err)
				}
				s := r.conn
				// Private data both ways, zero-padded to the message's area.
				if got := c.PrivateData(); len(got) != mad.REPPrivateDataLen || !bytes.HasPrefix(got, []byte("rep private data")) {
					t.Errorf("active side got REP private data %q", got)
				}
				if got := s.PrivateData(); len(got) != mad.MaxREQUserData || !bytes.HasPrefix(got, []byte("req private data")) {
					t.Errorf("passive side got REQ private data %q", got)
				}
				if r.req.Remote != c.LocalAddr() || r.req.Local != s.LocalAddr() || r.req.RemoteQPN != cli.qp.QPN() {
					t.Errorf("request %+v; dialer %v, listener %v", r.req, c.LocalAddr(), s.LocalAddr())
				}
				// What each side negotiated mirrors the other.
				ci, si := c.Info(), s.Info()
				if ci.SendPSN != si.RecvPSN || ci.RecvPSN != si.SendPSN || ci.RemoteQPN != si.LocalQPN ||
					si.RemoteQPN != ci.LocalQPN || ci.RemoteCommID != si.LocalCommID || si.RemoteCommID != ci.LocalCommID {
					t.Errorf("active %+v\npassive %+v", ci, si)
				}
				for _, q := range []verbs.QP{cli.qp, srv.qp} {
					if a, _ := q.Query(); a.State != verbs.StateRTS {
						t.Errorf("QP %d is %v", q.QPN(), a.State)
					}
				}
				exchange(t, cli, srv)
				exchange(t, srv, cli)

				first, second := c, s
				if closer == "passive" {
					first, second = s, c
				}
				if err := first.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				select {
				case <-second.Done():
				case <-ctx.Done():
					t.Fatal("the other side did not see the disconnect")
				}
				if err := second.Err(); !errors.Is(err, ErrDisconnected) || !errors.Is(err, io.EOF) {
					t.Errorf("other side ended with %v", err)
				}
				if err := first.Err(); !errors.Is(err, ErrClosed) {
					t.Errorf("closing side ended with %v", err)
				}
				if err := second.Close(); err != nil {
					t.Errorf("second close: %v", err)
				}
				for _, q := range []verbs.QP{cli.qp, srv.qp} {
					if a, _ := q.Query(); a.State != verbs.StateErr {
						t.Errorf("QP %d is %v after the disconnect", q.QPN(), a.State)
					}
				}
				sa, sb := ha.agent.Stats(), hb.agent.Stats()
				if sa.Sent["REQ"] < 1 || sb.Sent["REP"] < 1 || sa.Sent["RTU"] < 1 || sa.Sent["DREQ"]+sb.Sent["DREQ"] < 1 ||
					sa.Timeouts+sb.Timeouts != 0 || sa.Malformed+sb.Malformed != 0 {
					t.Errorf("stats: active %+v, passive %+v", sa, sb)
				}
			})
		}
	}
}

// TestACKTimeout sets each side's QP timeout as RDMA_OPTION_ID_ACK_TIMEOUT
// does: on that side's QP only, while the REQ still carries the timeout
// derived from the path.
func TestACKTimeout(t *testing.T) {
	ha, hb := backends[0].open(t)
	ctx := ctxT(t, 20*time.Second)
	cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
	l, accepted := listenWith(t, ctx, hb, &Params{QP: srv.qp, ACKTimeout: 16})
	defer l.Close()
	c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp, ACKTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.conn
	defer s.Close()
	derived := ackTimeout(caACKDelay, ha.agent.lifeTime)
	if got := s.req.Primary.LocalACKTimeout; got != derived {
		t.Errorf("the REQ carried local ACK timeout %d, want the derived %d", got, derived)
	}
	for _, q := range []struct {
		name string
		qp   verbs.QP
		c    *Conn
		want uint8
	}{{"active", cli.qp, c, 14}, {"passive", srv.qp, s, 16}} {
		a, err := q.qp.Query()
		if err != nil {
			t.Fatal(err)
		}
		if a.State != verbs.StateRTS || a.Timeout != q.want {
			t.Errorf("%s QP: %v with timeout %d, want RTS with %d", q.name, a.State, a.Timeout, q.want)
		}
		// Info reports the timeout in effect, not the path's.
		if got := q.c.Info().LocalACKTimeout; got != q.want {
			t.Errorf("%s Info().LocalACKTimeout = %d, want %d", q.name, got, q.want)
		}
	}
}
