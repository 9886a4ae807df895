package rdmacm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/hwverbs/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// A server on a libibverbs device accepts rdma_cm connections and
// tells each client, in the REP's private data, where it may RDMA WRITE;
// a request whose private data does not start with "hello" is refused.
func ExampleListen() {
	dev, err := hwverbs.Open("rxe0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 1<<20), verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	info := binary.BigEndian.AppendUint64(nil, mr.Addr())
	info = binary.BigEndian.AppendUint32(info, mr.RKey())
	ctx := context.Background()
	ln, err := rdmacm.Listen(ctx, dev, netip.AddrPortFrom(dev.Addr(), 7174), &rdmacm.ListenConfig{
		OnRequest: func(ctx context.Context, r *rdmacm.Request) (*rdmacm.Params, error) {
			if string(r.PrivateData[:5]) != "hello" {
				return nil, cm.Reject([]byte("say hello"))
			}
			return &rdmacm.Params{PD: pd, PrivateData: info}, nil
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	conn, err := ln.Accept(ctx)
	if err != nil {
		log.Fatal(err)
	}
	<-conn.Done() // until the client disconnects
	fmt.Println(conn.Err())
	conn.Close()
}

// A client dials with its own QP, a receive already posted, and reads
// the server's private data; a refusal says why.
func ExampleDial() {
	dev, err := hwverbs.Open("", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(32)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := rdmacm.Dial(ctx, dev, netip.MustParseAddrPort("198.18.0.11:7174"),
		&rdmacm.Params{QP: qp, PrivateData: []byte("hello")})
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		log.Fatalf("refused (reason %d): %q", rej.Reason, rej.PrivateData)
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, cm.ErrTimeout):
		log.Fatalf("no server there: %v", err)
	case err != nil:
		log.Fatal(err)
	}
	defer conn.Close()
	pdata := conn.PrivateData()
	fmt.Printf("server buffer at %#x, rkey %#x\n", binary.BigEndian.Uint64(pdata), binary.BigEndian.Uint32(pdata[8:]))
}
