package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/transport/mem"
)

// net/http over RDMA: an HTTP server on one software device, a client on
// another, joined by the in-memory network (a UDP device, roce.Open with
// an address, works the same across hosts).
func Example() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	server, client := open(n, "198.18.0.1"), open(n, "198.18.0.2")
	defer server.Close()
	defer client.Close()

	ln, err := rsocket.Listen(context.Background(), server, netip.MustParseAddrPort("198.18.0.1:80"))
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over RDMA, %s\n", r.UserAgent())
	}))

	// The client side: an http.Transport that dials rsockets.
	tr := &http.Transport{DialContext: (&rsocket.Dialer{Device: client}).DialContext}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://198.18.0.1/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(os.Stdout, resp.Body)
	// Output: hello over RDMA, Go-http-client/1.1
}

// open returns a software device on the in-memory network n.
func open(n *mem.Network, addr string) *roce.Device {
	d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// Direct placement (rsockets' riomap and riowrite): the server maps a
// buffer for the client, which writes into it by offset; a message after
// the write tells the server the bytes are there.
func ExampleConn_IOWrite() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	serverDev, clientDev := open(n, "198.18.0.1"), open(n, "198.18.0.2")
	defer serverDev.Close()
	defer clientDev.Close()

	// Each side offers the peer an iomap table of 4 entries.
	opts := rsocket.Options{IOMapSize: 4}
	ctx := context.Background()
	ln, err := (&rsocket.ListenConfig{Options: opts}).Listen(ctx, serverDev, netip.MustParseAddrPort("198.18.0.1:7471"))
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *rsocket.Conn, 1)
	go func() {
		c, err := ln.AcceptContext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- c
	}()
	client, err := (&rsocket.Dialer{Options: opts}).Dial(ctx, clientDev, netip.MustParseAddrPort("198.18.0.1:7471"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	defer server.Close()

	// The server maps buf at offset 1000, and says so.
	buf := make([]byte, 32)
	if _, err := server.Map(buf, 1000); err != nil {
		log.Fatal(err)
	}
	server.Write([]byte("mapped"))

	// The client, once it knows, writes at offset 1004, then says so.
	io.ReadFull(client, make([]byte, 6))
	if _, err := client.IOWrite([]byte("placed directly"), 1004); err != nil {
		log.Fatal(err)
	}
	client.Write([]byte("done"))

	io.ReadFull(server, make([]byte, 4))
	fmt.Printf("%q\n", buf[4:19])
	server.Unmap(1000)
	// Output: "placed directly"
}

// Datagram rsockets (librdmacm's SOCK_DGRAM rsockets, as udpong uses
// them): two sockets on two software devices over UDP loopback, on
// addresses of their own (127.0.77.1 and .2, away from other programs'
// devices on 127.0.0.1). The first datagram goes on the receiver's UDP
// socket and teaches it the sender's QP; the answer, and what follows,
// are UD SENDs.
func ExamplePacketConn() {
	ctx := context.Background()
	a, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.77.1"), Port: 14791, PeerPort: 14791}})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.77.2"), Port: 14791, PeerPort: 14791}})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	server, err := rsocket.ListenPacket(ctx, b, netip.MustParseAddrPort("127.0.77.2:7174"))
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	client, err := rsocket.ListenPacket(ctx, a, netip.MustParseAddrPort("127.0.77.1:0")) // any free port
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if _, err := client.WriteTo([]byte("ping"), server.LocalAddr()); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, server.MaxDatagram())
	n, from, err := server.ReadFrom(buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server: %q from the client: %v\n", buf[:n], from.String() == client.LocalAddr().String())
	server.WriteTo([]byte("pong"), from)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err = client.ReadFrom(buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client: %q\n", buf[:n])
	// Output:
	// server: "ping" from the client: true
	// client: "pong"
}
