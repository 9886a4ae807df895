package cm

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestManualQP connects QPs the agent leaves to their owners
// (Params.ManualQP, rdma_cm's ids without a QP): neither side's QP is
// moved by the agent; the listener's owner takes its QP to RTS from the
// request's ConnInfo before accepting, the dialler's from the
// connection's once Dial returns at the REP, and Establish's RTU brings
// the listener's Accept back. The connection then carries data both
// ways. A dialler that closes instead of establishing refuses the REP.
func TestManualQP(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			checkNoLeak(t)
			ha, hb := be.open(t)
			ctx := ctxT(t, 20*time.Second)
			cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
			for _, q := range []verbs.QP{cli.qp, srv.qp} {
				if err := q.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState); err != nil {
					t.Fatal(err)
				}
			}
			move := func(q verbs.QP, i ConnInfo) error {
				for _, st := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
					a, mask, err := i.QPAttr(st)
					if err != nil {
						return err
					}
					if err := q.Modify(&a, mask); err != nil {
						return err
					}
				}
				return nil
			}
			l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
				OnRequest: func(_ context.Context, r *Request) (*Params, error) {
					if err := move(srv.qp, r.Info); err != nil {
						return nil, err
					}
					return &Params{QP: srv.qp, ManualQP: true}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan *Conn, 1)
			go func() {
				c, err := l.Accept(ctx)
				if err != nil {
					t.Error(err)
				}
				accepted <- c
			}()
			c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp, ManualQP: true})
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := cli.qp.Query(); st.State != verbs.StateReset {
				t.Fatalf("the agent moved the dialler's manual QP to %v", st.State)
			}
			select {
			case <-accepted:
				t.Fatal("Accept returned before Establish sent the RTU")
			case <-time.After(50 * time.Millisecond):
			}
			if err := move(cli.qp, c.Info()); err != nil {
				t.Fatal(err)
			}
			if err := c.Establish(); err != nil {
				t.Fatal(err)
			}
			if err := c.Establish(); !errors.Is(err, ErrInvalid) {
				t.Errorf("a second Establish: %v, want ErrInvalid", err)
			}
			s := <-accepted
			if s == nil {
				t.Fatal("no connection accepted")
			}
			srv.postRecv(t)
			cli.postRecv(t)
			exchange(t, cli, srv)
			exchange(t, srv, cli)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			<-s.Done()
			s.Close()
			// The agent leaves a manual QP alone on disconnect too, as
			// the kernel, which never sees it, does.
			if st, _ := cli.qp.Query(); st.State != verbs.StateRTS {
				t.Errorf("after Close the dialler's manual QP is %v, want RTS", st.State)
			}

			// Closing before Establish refuses the REP: Accept sees the
			// rejection, not a connection.
			cli2 := newSide(t, ha.dev)
			srv.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState)
			go func() {
				c, err := l.Accept(ctx)
				if err == nil {
					c.Close()
					t.Error("Accept took a connection whose dialler closed before Establish")
				}
				accepted <- nil
			}()
			c2, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli2.qp, ManualQP: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := c2.Close(); err != nil {
				t.Fatal(err)
			}
			<-accepted
		})
	}
}
