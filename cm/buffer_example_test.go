package cm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// Announce a buffer to the peer in the connection's private data, and
// read the peer's: the server offers a 4 KiB region in its REP, the
// client finds its address, rkey and length for its RDMA WRITEs.
func ExampleBufferData() {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	open := func(addr string) *roce.Device {
		d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
		if err != nil {
			log.Fatal(err)
		}
		return d
	}
	serverDev, clientDev := open("198.18.0.11"), open("198.18.0.12")
	defer serverDev.Close()
	defer clientDev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pd, _ := serverDev.AllocPD()
	mr, err := pd.RegMR(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := cm.Listen(ctx, serverDev, netip.MustParseAddrPort("198.18.0.11:7174"), &cm.ListenConfig{
		OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			return &cm.Params{PD: pd, PrivateData: cm.BufferData(mr)}, nil
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			<-c.Done()
			c.Close()
		}
	}()

	c, err := cm.Dial(ctx, clientDev, netip.MustParseAddrPort("198.18.0.11:7174"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, err := c.PeerBuffer()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(b.Addr == mr.Addr(), b.RKey == mr.RKey(), b.Len)
	// Output: true true 4096
}
