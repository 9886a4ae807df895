package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"

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
