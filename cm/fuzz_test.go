package cm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// nullLink is a transport that drops what is sent and delivers nothing:
// the fuzz target calls the agent's receive path directly.
type nullLink struct{ addr netip.Addr }

func (n *nullLink) Start(transport.Handler) error    { return nil }
func (n *nullLink) Send([]transport.Packet) error    { return nil }
func (n *nullLink) LocalAddr() netip.Addr            { return n.addr }
func (n *nullLink) BatchSize() int                   { return 1 }
func (n *nullLink) MaxPacket() int                   { return 4096 + 64 }
func (n *nullLink) Stats() transport.Stats           { return transport.Stats{} }
func (n *nullLink) Close() error                     { return nil }
func (n *nullLink) addrPort(p uint16) netip.AddrPort { return netip.AddrPortFrom(n.addr, p) }

// FuzzReceive feeds arbitrary MADs to an agent that listens on rping's
// port and has an established connection and a datagram listener: it must
// never panic, whatever arrives.
func FuzzReceive(f *testing.F) {
	for _, name := range []string{"rxe_rping_rdmacm.pcap", "rxe_write_bw_rdmacm.pcap"} {
		for _, m := range captureMADs(f, name) {
			f.Add(m.raw)
		}
	}
	var sidr [mad.Len]byte
	cma := mad.CMAHeader{SrcPort: 1, Src: netip.MustParseAddr("198.18.0.12"), Dst: netip.MustParseAddr("198.18.0.11")}
	req := &mad.SIDRREQ{RequestID: 1, PKey: 0xFFFF, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174)}
	cma.Marshal(req.PrivateData[:])
	mad.Encode(mad.CMHeader(mad.MethodSend, 1), req, sidr[:])
	f.Add(sidr[:])

	link := &nullLink{addr: netip.MustParseAddr("198.18.0.11")}
	d, err := roce.Open(&roce.Config{Transport: link})
	if err != nil {
		f.Fatal(err)
	}
	defer d.Close()
	a, err := NewAgent(d, &Config{MaxRetries: 1})
	if err != nil {
		f.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	if _, err := a.Listen(ctx, link.addrPort(7174), &ListenConfig{Backlog: 4}); err != nil {
		f.Fatal(err)
	}
	ud := udQP(f, d)
	if _, err := a.ListenDatagram(ctx, link.addrPort(7174), &DatagramListenConfig{QP: ud}); err != nil {
		f.Fatal(err)
	}
	peer := netip.MustParseAddr("198.18.0.12")
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < mad.Len {
			b = append(b, make([]byte, mad.Len-len(b))...)
		}
		a.receive(peer, b[:mad.Len])
	})
}

// BenchmarkConnect measures a whole connection's life over the in-memory
// network: REQ, REP, RTU, then DREQ and DREP, with the QPs reused.
func BenchmarkConnect(b *testing.B) {
	ha, hb := memPair(b, nil, nil)
	cli, srv := newSide(b, ha.dev), newSide(b, hb.dev)
	ctx := context.Background()
	l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
		OnRequest: func(context.Context, *Request) (*Params, error) { return &Params{QP: srv.qp}, nil }})
	if err != nil {
		b.Fatal(err)
	}
	reset := func(q verbs.QP) {
		if err := q.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		reset(cli.qp)
		reset(srv.qp)
		accepted := make(chan *Conn, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err != nil {
				b.Error(err)
			}
			accepted <- c
		}()
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := ha.agent.Dial(dctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &Params{QP: cli.qp})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		s := <-accepted
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		<-s.Done()
		s.Close()
	}
}
