package roce_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// endpoint is one side of the examples: a device, a PD, a CQ, an RC QP
// and a registered buffer.
type endpoint struct {
	dev *roce.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

// open makes an endpoint on addr, sending to peers on the same UDP port.
func open(addr string, port uint16) *endpoint {
	dev, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr(addr), Port: port, PeerPort: port}})
	if err != nil {
		log.Fatal(err)
	}
	e := &endpoint{dev: dev}
	if e.pd, err = dev.AllocPD(); err != nil {
		log.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(16); err != nil {
		log.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	// Register 4 KiB that the peer may read and write.
	if e.mr, err = e.pd.RegMR(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteRead|verbs.RemoteWrite); err != nil {
		log.Fatal(err)
	}
	return e
}

// info is what the two sides exchange out of band before they connect.
func (e *endpoint) info(psn uint32) *roce.Remote {
	gid, _ := e.dev.GID(0)
	return &roce.Remote{QPN: e.qp.QPN(), PSN: psn, GID: gid}
}

// pair returns a client and a server on 127.0.0.1 and 127.0.0.2, connected.
func pair() (client, server *endpoint) {
	port := uint16(examplePort())
	client, server = open("127.0.0.1", port), open("127.0.0.2", port)
	if err := roce.Connect(client.qp, server.info(100), &roce.ConnParams{PSN: 200}); err != nil {
		log.Fatal(err)
	}
	if err := roce.Connect(server.qp, client.info(200), &roce.ConnParams{PSN: 100}); err != nil {
		log.Fatal(err)
	}
	return client, server
}

func (e *endpoint) close() { e.dev.Close() }

// examplePort finds a UDP port free on both loopback addresses.
func examplePort() int {
	for {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			log.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err == nil {
			c2.Close()
			return port
		}
	}
}

// complete waits for one completion and returns it.
func complete(cq verbs.CQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for cq.Poll(wc) == 0 {
		if err := cq.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	return wc[0]
}

// Connect two QPs: each side creates its QP, they exchange QP number,
// starting PSN and GID (out of band: TCP, a file, rdma_cm), and each
// moves its QP through INIT and RTR to RTS towards the other.
func ExampleConnect() {
	client, server := pair()
	defer client.close()
	defer server.close()
	a, _ := client.qp.Query()
	fmt.Println(a.State, a.PathMTU, a.DestQPN == server.qp.QPN())
	// Output: RTS 1024 true
}

// Open a device: RoCEv2 over UDP sockets on a local address (Config's
// Link), with the engine's and the tracing settings next to it. A nil
// *Config is UDP on 127.0.0.1, port 4791.
func ExampleOpen() {
	dev, err := roce.Open(&roce.Config{
		Link:     &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(examplePort())},
		BusyPoll: 0, // no busy polling: completions wake the program
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	gid, _ := dev.GID(0)
	fmt.Println(dev.Name(), dev.Addr(), verbs.AddrFromGID(gid), dev.ActiveMTU())
	// Output: goroce:127.0.0.1 127.0.0.1 127.0.0.1 4096
}

// Trace a device: each verb the program calls is narrated, numbered, in
// the words of the tutorials (here on an in-memory network).
func ExampleTrace() {
	n := mem.NewNetwork(nil)
	defer n.Close()
	quiet := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
			return slog.Attr{}
		}
		return a
	}
	dev, err := roce.Open(&roce.Config{
		Link:  &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")},
		Trace: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: quiet})),
	})
	if err != nil {
		log.Fatal(err)
	}
	dev.AllocPD()
	dev.CreateCQ(16)
	dev.Close()
	// Output:
	// msg="alloc PD on goroce:198.18.0.1" step=1 kind=SLOW
	// msg="create CQ cqe=16" step=2 kind=SLOW
	// msg="close device goroce:198.18.0.1" step=3 kind=SLOW
}

// Register memory: the region's address and keys are what a peer needs
// to reach it with RDMA WRITE and READ.
func Example_registerMemory() {
	dev, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: uint16(examplePort())}})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	buf := make([]byte, 1<<16)
	mr, err := pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(mr.Len(), mr.Addr() != 0, mr.LKey() == mr.RKey())
	// A remote right that needs local write is refused without it, as
	// is an empty buffer.
	_, err = pd.RegMR(buf, verbs.RemoteWrite)
	fmt.Println(err)
	_, err = pd.RegMR(nil, verbs.LocalWrite)
	fmt.Println(errors.Is(err, verbs.ErrInvalidAttr))
	// Output:
	// 65536 true true
	// mr: remote write and remote atomic need local write: access REMOTE_WRITE: add LocalWrite
	// true
}

// SEND and RECV: the server posts a receive first; the client's SEND
// fills it, and both sides get a completion.
func Example_sendRecv() {
	client, server := pair()
	defer client.close()
	defer server.close()
	err := server.qp.PostRecv([]verbs.RecvWR{{ID: 1,
		SGL: []verbs.SGE{{Addr: server.mr.Addr(), Length: 4096, LKey: server.mr.LKey()}}}})
	if err != nil {
		log.Fatal(err)
	}
	n := copy(client.mr.Bytes(), "hello over RoCEv2")
	err = client.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: client.mr.Addr(), Length: uint32(n), LKey: client.mr.LKey()}}}})
	if err != nil {
		log.Fatal(err)
	}
	sent, got := complete(client.cq), complete(server.cq)
	fmt.Println(sent.Opcode, sent.Status)
	fmt.Println(got.Opcode, got.Status, got.ByteLen, string(server.mr.Bytes()[:got.ByteLen]))
	// Output:
	// SEND SUCCESS
	// RECV SUCCESS 17 hello over RoCEv2
}

// RDMA WRITE and READ: one-sided operations on the server's memory, named
// by its address and rkey; the server's CPU is not involved.
func Example_writeRead() {
	client, server := pair()
	defer client.close()
	defer server.close()
	n := copy(client.mr.Bytes(), "client-wrote-this")
	err := client.qp.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL:        []verbs.SGE{{Addr: client.mr.Addr(), Length: uint32(n), LKey: client.mr.LKey()}},
			RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey()},
		{ID: 2, Opcode: verbs.OpRead, Flags: verbs.Signaled,
			SGL:        []verbs.SGE{{Addr: client.mr.Addr() + 2048, Length: uint32(n), LKey: client.mr.LKey()}},
			RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey()},
	})
	if err != nil {
		log.Fatal(err)
	}
	w, r := complete(client.cq), complete(client.cq)
	fmt.Println(w.ID, w.Opcode, w.Status)
	fmt.Println(r.ID, r.Opcode, r.Status, string(client.mr.Bytes()[2048:2048+n]))
	// Output:
	// 1 RDMA_WRITE SUCCESS
	// 2 RDMA_READ SUCCESS client-wrote-this
}

// Completion handling: a failed request completes with a status, not a Go
// error, and the QP goes to ERR, flushing what was posted after it.
func Example_completionErrors() {
	client, server := pair()
	defer client.close()
	defer server.close()
	sgl := []verbs.SGE{{Addr: client.mr.Addr(), Length: 8, LKey: client.mr.LKey()}}
	err := client.qp.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: sgl, RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey() ^ 1},
		{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: sgl, RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey()},
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		wc := complete(client.cq)
		fmt.Println(wc.ID, wc.Status)
	}
	a, _ := client.qp.Query()
	fmt.Println(a.State)
	// Output:
	// 1 REM_ACCESS_ERR
	// 2 WR_FLUSH_ERR
	// ERR
}
