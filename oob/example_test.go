package oob_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/verbs"
)

// Both sides of ibv_rc_pingpong's exchange over loopback. A real server
// would be ibv_rc_pingpong itself (or goroce against an ibv_rc_pingpong
// client) on port oob.Port.
func Example_pingpong() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()

	served := make(chan struct{})
	go func() {
		defer close(served)
		conn, err := oob.Accept(ctx, ln, nil)
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		s := oob.NewPingpongServer(conn, 1, nil)
		client, err := s.ReadDests(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("server: client QP %#x at %v\n", client[0].QPN, verbs.AddrFromGID(client[0].GID))
		// ... bring the local QP to RTR with client[0] here, then:
		local := oob.Dest{QPN: 0x11, PSN: 0xc91f32, GID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.11"))}
		if err := s.Reply(ctx, []oob.Dest{local}); err != nil {
			panic(err)
		}
	}()

	conn, err := oob.Dial(ctx, ln.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	local := oob.Dest{QPN: 0x12, PSN: 0x14ac03, GID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.12"))}
	server, err := oob.PingpongClient(ctx, conn, []oob.Dest{local}, 1, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("client: server QP %#x PSN %#x at %v\n", server[0].QPN, server[0].PSN, verbs.AddrFromGID(server[0].GID))
	<-served
	// Output:
	// server: client QP 0x12 at 198.18.0.12
	// client: server QP 0x11 PSN 0xc91f32 at 198.18.0.11
}

// The client side of an ib_write_bw run, as goroce would talk to
// "ib_write_bw -d rxe0 -x 1" running as a server (here a goroce server
// stands in for it).
func ExamplePerftest() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()

	run := func(role oob.Role, conn net.Conn, mtu bth.MTU, dest oob.PerftestDest) error {
		p := oob.NewPerftest(conn, role, nil)
		if _, err := p.ExchangeVersions(ctx); err != nil {
			return err
		}
		if _, err := p.CheckSysData(ctx, oob.DefaultSysData); err != nil {
			return err
		}
		agreed, err := p.CheckMTU(ctx, mtu)
		if err != nil {
			return err
		}
		peer, err := p.ExchangeDests(ctx, []oob.PerftestDest{dest})
		if err != nil {
			return err
		}
		// ... bring the QP to RTR/RTS with peer[0] and the agreed MTU ...
		if _, err := p.ExchangeDests(ctx, []oob.PerftestDest{dest}); err != nil {
			return err
		}
		if err := p.Barrier(ctx); err != nil {
			return err
		}
		if role == oob.Client {
			fmt.Printf("MTU %v, server QP %#x rkey %#x vaddr %#x\n", agreed, peer[0].QPN, peer[0].RKey, peer[0].VAddr)
		}
		// ... RDMA WRITEs ...
		if err := p.Barrier(ctx); err != nil {
			return err
		}
		rep, err := p.ExchangeBWReports(ctx, oob.BWReport{Size: 4096, Iters: 20, BWPeak: 7.1, BWAvg: 5.7, MsgRateAvg: 0.0015})
		if err != nil {
			return err
		}
		if role == oob.Server {
			fmt.Printf("client ran %d x %d bytes\n", rep.Iters, rep.Size)
		}
		return p.CloseConnection(ctx)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- run(oob.Server, server, bth.MTU4096, oob.PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0xb5b3d8, RKey: 0x215, VAddr: 0x56229b404000})
	}()
	if err := run(oob.Client, client, bth.MTU1024, oob.PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x6c2eec, RKey: 0x229, VAddr: 0x557ab7ee3000}); err != nil {
		panic(err)
	}
	if err := <-errc; err != nil {
		panic(err)
	}
	// Unordered output:
	// MTU 1024, server QP 0x11 rkey 0x215 vaddr 0x56229b404000
	// client ran 20 x 4096 bytes
}
