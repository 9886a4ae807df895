package cm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
)

// Connect two software devices with rdma_cm's protocol: the server
// listens on port 7174 and answers with private data (here a buffer's
// address and rkey would go, as in the minimal RDMA samples); the client
// dials with its own private data. Both get an RC QP in RTS.
func Example() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	open := func(addr string) (*roce.Device, *cm.Agent) {
		d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
		if err != nil {
			log.Fatal(err)
		}
		a, err := cm.NewAgent(d, nil)
		if err != nil {
			log.Fatal(err)
		}
		return d, a
	}
	serverDev, server := open("198.18.0.11")
	defer serverDev.Close()
	defer server.Close()
	clientDev, client := open("198.18.0.12")
	defer clientDev.Close()
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := server.Listen(ctx, netip.MustParseAddrPort("0.0.0.0:7174"), &cm.ListenConfig{
		OnRequest: func(_ context.Context, r *cm.Request) (*cm.Params, error) {
			fmt.Printf("server: request from %v: %s\n", r.Remote.Addr(), r.PrivateData[:5])
			return &cm.Params{PrivateData: []byte("addr+rkey")}, nil
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *cm.Conn)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- c
	}()

	c, err := client.Dial(ctx, netip.MustParseAddrPort("198.18.0.11:7174"), &cm.Params{PrivateData: []byte("hello")})
	if err != nil {
		log.Fatal(err)
	}
	s := <-accepted
	a, _ := c.QP().Query()
	fmt.Printf("client: connected to %v, QP %v, server says %s\n", c.RemoteAddr(), a.State, c.PrivateData()[:9])

	// Either side disconnects; the other sees the end of the connection.
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	<-s.Done()
	fmt.Println("server:", s.Err())
	s.Close()
	// Output:
	// server: request from 198.18.0.12: hello
	// client: connected to 198.18.0.11:7174, QP RTS, server says addr+rkey
	// server: cm: peer disconnected: EOF
}

// A connection refused: nobody listens on the port, the peer's CM answers
// with a REJ "invalid service ID".
func ExampleRejectError() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	var agents []*cm.Agent
	for _, addr := range []string{"198.18.0.11", "198.18.0.12"} {
		d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
		if err != nil {
			log.Fatal(err)
		}
		defer d.Close()
		a, err := cm.NewAgent(d, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer a.Close()
		agents = append(agents, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := agents[1].Dial(ctx, netip.MustParseAddrPort("198.18.0.11:7174"), nil)
	fmt.Println(err)
	// Output: cm: connection to 198.18.0.11:7174 refused: nobody listens on that port (REJ reason 8, invalid service ID)
}

// Dialing fails fast and says why: a peer the network reports unreachable
// (here an address with no host on the in-memory network; over UDP, the
// ICMP port unreachable of a host where nothing receives RoCEv2) fails at
// once with ErrUnreachable, not after the CM's retries.
func ExampleDial_unreachable() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.12")}})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cm.Dial(ctx, d, netip.MustParseAddrPort("198.18.0.99:7174"), nil)
	fmt.Println(errors.Is(err, cm.ErrUnreachable))
	fmt.Println(err)
	// Output:
	// true
	// cm: connect to 198.18.0.99:7174: peer unreachable: mem: no endpoint has that address (host unreachable); check the address, and the route to it
}
