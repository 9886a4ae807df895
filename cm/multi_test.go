package cm

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
)

// TestMultiAddress connects to and from a device of two addresses (an
// IPv4 and an IPv6 one, roce.Multi) over each: its connections use its
// address of the peer's IP version, a listener on one address takes only
// requests to it, one on 0.0.0.0 only IPv4 ones and one on :: both, as
// rdma_cm's listeners do.
func TestMultiAddress(t *testing.T) {
	a4, a6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("2001:db8::1")
	p4, p6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::2")
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	open := func(l roce.Link) *host {
		d, err := roce.Open(&roce.Config{Link: l})
		if err != nil {
			t.Fatal(err)
		}
		return newHostDev(t, d, nil, fastConfig())
	}
	multi := open(roce.Multi{&roce.Mem{Network: n, Addr: a4}, &roce.Mem{Network: n, Addr: a6}})
	peers := map[netip.Addr]*host{p4: open(&roce.Mem{Network: n, Addr: p4}), p6: open(&roce.Mem{Network: n, Addr: p6})}
	if multi.agent.Addr() != a4 {
		t.Errorf("Addr() = %v, want the first address %v", multi.agent.Addr(), a4)
	}
	ctx := ctxT(t, 20*time.Second)

	// connect dials from a to b's address dst and reports the two ends'
	// local addresses, or the dial's error.
	connect := func(a, b *host, listen, dst netip.Addr) (netip.Addr, netip.Addr, error) {
		t.Helper()
		cli, srv := newSide(t, a.dev), newSide(t, b.dev)
		l, err := b.agent.Listen(ctx, netip.AddrPortFrom(listen, 7174), &ListenConfig{
			OnRequest: func(context.Context, *Request) (*Params, error) { return &Params{QP: srv.qp}, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		accepted := make(chan *Conn, 1)
		go func() {
			c, _ := l.Accept(ctx)
			accepted <- c
		}()
		c, err := a.agent.Dial(ctx, netip.AddrPortFrom(dst, 7174), &Params{QP: cli.qp})
		if err != nil {
			return netip.Addr{}, netip.Addr{}, err
		}
		defer c.Close()
		s := <-accepted
		if s == nil {
			t.Fatal("no connection accepted")
		}
		defer s.Close()
		srv.postRecv(t)
		cli.postRecv(t)
		exchange(t, cli, srv)
		return c.LocalAddr().Addr(), s.LocalAddr().Addr(), nil
	}
	for _, tc := range []struct {
		peer, local, listen netip.Addr
	}{
		{p4, a4, a4}, {p6, a6, a6},
		{p4, a4, netip.IPv4Unspecified()}, {p4, a4, netip.IPv6Unspecified()}, {p6, a6, netip.IPv6Unspecified()},
	} {
		if lc, ls, err := connect(peers[tc.peer], multi, tc.listen, tc.local); err != nil {
			t.Errorf("%v to %v listening on %v: %v", tc.peer, tc.local, tc.listen, err)
		} else if lc != tc.peer || ls != tc.local {
			t.Errorf("%v to %v listening on %v: ends at %v and %v", tc.peer, tc.local, tc.listen, lc, ls)
		}
		if tc.listen.IsUnspecified() {
			continue
		}
		if lc, ls, err := connect(multi, peers[tc.peer], tc.peer, tc.peer); err != nil {
			t.Errorf("%v to %v: %v", tc.local, tc.peer, err)
		} else if lc != tc.local || ls != tc.peer {
			t.Errorf("%v to %v: ends at %v and %v", tc.local, tc.peer, lc, ls)
		}
	}
	// Requests to the other address, or over IPv6 to 0.0.0.0, find no
	// listener.
	for _, tc := range []struct{ peer, listen, dst netip.Addr }{{p6, a4, a6}, {p4, a6, a4}, {p6, netip.IPv4Unspecified(), a6}} {
		if _, _, err := connect(peers[tc.peer], multi, tc.listen, tc.dst); !errors.Is(err, ErrRejected) {
			t.Errorf("%v to %v listening on %v: %v, want a rejection", tc.peer, tc.dst, tc.listen, err)
		}
	}
	// SIDR: a datagram listener on :: answers over either IP version, as
	// its device's address of that version.
	srv := udSide(t, multi.dev)
	dl, err := multi.agent.ListenDatagram(ctx, netip.AddrPortFrom(netip.IPv6Unspecified(), 4000), &DatagramListenConfig{
		QP: srv.qp,
		OnRequest: func(r *DatagramRequest) ([]byte, error) {
			if r.Local.Addr() != a4 && r.Local.Addr() != a6 || r.Local.Addr().Is4() != r.Remote.Addr().Is4() {
				return nil, Reject([]byte(r.Local.String() + " for " + r.Remote.String()))
			}
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	for peer, dst := range map[netip.Addr]netip.Addr{p4: a4, p6: a6} {
		if p, err := peers[peer].agent.ResolveDatagram(ctx, netip.AddrPortFrom(dst, 4000), nil); err != nil || p.QPN != srv.qp.QPN() {
			t.Errorf("SIDR from %v to %v: %+v, %v", peer, dst, p, err)
		}
	}
	if _, err := multi.agent.Listen(ctx, netip.AddrPortFrom(p4, 1), nil); !errors.Is(err, ErrAddr) {
		t.Errorf("Listen on a peer's address: %v, want ErrAddr", err)
	}
}
