package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// The seed programs' sides, written here against package cm and the verbs
// directly from the protocol descriptions (not through the session code
// under test), so that goroce's writeread and minimal modes are checked
// against a peer that speaks only the seed's protocol: no goroce private
// data in the REQ or REP, the seed's structures on the wire.

const (
	seedServerAddr = "198.18.0.1"
	seedClientAddr = "198.18.0.10"
)

// seedPeer is one side of a seed program: a device on the in-memory
// network, its CM agent, one RC QP and a registered buffer.
type seedPeer struct {
	dev   verbs.Device
	agent *cm.Agent
	pd    verbs.PD
	cq    verbs.CQ
	qp    verbs.QP
	mr    verbs.MR
}

func newSeedPeer(t *testing.T, n *mem.Network, addr string, bufLen int) *seedPeer {
	t.Helper()
	dev, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
	if err != nil {
		t.Fatal(err)
	}
	p := &seedPeer{dev: dev}
	t.Cleanup(func() {
		if p.agent != nil {
			p.agent.Close()
		}
		dev.Close()
	})
	if p.agent, err = cm.NewAgent(dev, nil); err != nil {
		t.Fatal(err)
	}
	if p.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if p.cq, err = dev.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if p.qp, err = p.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}}); err != nil {
		t.Fatal(err)
	}
	if p.mr, err = p.pd.RegMR(make([]byte, bufLen), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		t.Fatal(err)
	}
	if err := roce.ModifyToInit(p.qp, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *seedPeer) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: p.mr.Addr() + uint64(off), Length: uint32(n), LKey: p.mr.LKey()}}
}

func (p *seedPeer) recv(off, n int) error {
	return p.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: p.sge(off, n)}})
}

func (p *seedPeer) post(wr verbs.SendWR) error {
	wr.Flags |= verbs.Signaled
	return p.qp.PostSend([]verbs.SendWR{wr})
}

// complete waits for n successful completions, until ctx ends or done
// (the connection's end) is closed.
func (p *seedPeer) complete(ctx context.Context, done <-chan struct{}, n int) ([]verbs.WC, error) {
	var out []verbs.WC
	wc := make([]verbs.WC, 4)
	for len(out) < n {
		for _, w := range wc[:p.cq.Poll(wc)] {
			if w.Status != verbs.Success {
				return out, fmt.Errorf("%v", &w)
			}
			out = append(out, w)
		}
		if len(out) >= n {
			break
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-done:
			// What came before the disconnect is in the CQ by now.
			if p.cq.Poll(wc[:1]) == 0 {
				return out, errors.New("the peer disconnected")
			}
			if wc[0].Status != verbs.Success {
				return out, fmt.Errorf("%v", &wc[0])
			}
			out = append(out, wc[0])
			continue
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		p.cq.Wait(wctx)
		cancel()
	}
	return out, nil
}

// putMeta and getMeta are rdma-example's struct rdma_buffer_attr: packed,
// x86 byte order.
func putMeta(b []byte, addr uint64, n, stag uint32) {
	binary.LittleEndian.PutUint64(b, addr)
	binary.LittleEndian.PutUint32(b[8:], n)
	binary.LittleEndian.PutUint32(b[12:], stag)
}

func getMeta(b []byte) (addr uint64, n, stag uint32) {
	return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])
}

// seedFlags are a goroce side's flags for the in-memory network.
func seedFlags(t *testing.T, modeName string, port int, n *mem.Network, bind string, extra ...string) (*flags, *mode) {
	t.Helper()
	f, m := parseT(t, append([]string{"--mode", modeName, "-p", fmt.Sprint(port), "--transport", "mem",
		"--bind", bind, "--timeout", "10s"}, extra...)...)
	f.sc.dev.Net = n
	return f, m
}

// goroceServer runs roce server for one client; it returns the server's
// output and error once it ends.
func goroceServer(t *testing.T, ctx context.Context, n *mem.Network, mode string, port int) func() (string, error) {
	t.Helper()
	f, m := seedFlags(t, mode, port, n, seedServerAddr, "--clients", "1")
	out := &lockedBuffer{b: &bytes.Buffer{}}
	errc := make(chan error, 1)
	done := make(chan struct{})
	errOut := &lockedBuffer{b: &bytes.Buffer{}}
	go func() { defer close(done); errc <- serve(ctx, f, m, strings.NewReader(""), out, errOut) }()
	waitFor(t, errOut, "listening on", done)
	return func() (string, error) {
		select {
		case err := <-errc:
			return out.String(), err
		case <-time.After(20 * time.Second):
			return out.String(), errors.New("the server did not end")
		}
	}
}

// goroceClient runs roce client against the seed server.
func goroceClient(t *testing.T, ctx context.Context, n *mem.Network, mode string, port int, extra ...string) (string, error) {
	t.Helper()
	f, m := seedFlags(t, mode, port, n, seedClientAddr, extra...)
	var out bytes.Buffer
	err := dial(ctx, f, m, seedServerAddr, strings.NewReader(""), &out, &bytes.Buffer{})
	return out.String(), err
}

// rdmaexServer is rdma_server: a receive for the client's description
// before the accept (no private data, depths 3), a buffer of the length
// the client asks for, its description SENT back, then wait for the DREQ.
// It listens, then serve returns what the client's description and
// buffer held.
func rdmaexServer(t *testing.T, ctx context.Context, p *seedPeer, port int) (serve func() (clientLen uint32, buf string, err error)) {
	const metaIn = 0
	ln, err := p.agent.Listen(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)),
		&cm.ListenConfig{OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			if err := p.recv(metaIn, 16); err != nil {
				return nil, err
			}
			return &cm.Params{QP: p.qp, ResponderResources: 3, InitiatorDepth: 3}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func() (uint32, string, error) { return rdmaexServe(ctx, p, ln) }
}

func rdmaexServe(ctx context.Context, p *seedPeer, ln *cm.Listener) (uint32, string, error) {
	const metaIn, metaOut, data = 0, 32, 64
	conn, err := ln.Accept(ctx)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	wcs, err := p.complete(ctx, conn.Done(), 1)
	if err != nil {
		return 0, "", fmt.Errorf("the client's description: %w", err)
	}
	if wcs[0].Opcode != verbs.WCRecv || wcs[0].ByteLen != 16 {
		return 0, "", fmt.Errorf("the client's description: %v", &wcs[0])
	}
	addr, n, _ := getMeta(p.mr.Bytes()[metaIn:])
	if addr == 0 || n == 0 || data+int(n) > p.mr.Len() {
		return n, "", fmt.Errorf("the client describes addr %#x len %d", addr, n)
	}
	putMeta(p.mr.Bytes()[metaOut:], p.mr.Addr()+data, n, p.mr.RKey())
	if err := p.post(verbs.SendWR{Opcode: verbs.OpSend, SGL: p.sge(metaOut, 16)}); err != nil {
		return n, "", err
	}
	if _, err := p.complete(ctx, conn.Done(), 1); err != nil {
		return n, "", fmt.Errorf("the server's description: %w", err)
	}
	select {
	case <-conn.Done():
	case <-ctx.Done():
		return n, "", errors.New("the client did not disconnect")
	}
	cli.SyncMR(p.mr)
	return n, string(p.mr.Bytes()[data : data+int(n)]), nil
}

// rdmaexClient is rdma_client: a receive for the server's description,
// a REQ without private data (depths 3, retry count 3), its description
// SENT, both completions, WRITE, READ back, compare, disconnect.
func rdmaexClient(ctx context.Context, p *seedPeer, port int, str string) error {
	const metaIn, metaOut, src = 0, 32, 64
	dst := src + len(str)
	if err := p.recv(metaIn, 16); err != nil {
		return err
	}
	conn, err := p.agent.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)),
		&cm.Params{QP: p.qp, ResponderResources: 3, InitiatorDepth: 3, RetryCount: 3})
	if err != nil {
		return err
	}
	defer conn.Close()
	copy(p.mr.Bytes()[src:], str)
	putMeta(p.mr.Bytes()[metaOut:], p.mr.Addr()+src, uint32(len(str)), p.mr.RKey())
	if err := p.post(verbs.SendWR{Opcode: verbs.OpSend, SGL: p.sge(metaOut, 16)}); err != nil {
		return err
	}
	if _, err := p.complete(ctx, conn.Done(), 2); err != nil {
		return fmt.Errorf("the exchange: %w", err)
	}
	addr, n, stag := getMeta(p.mr.Bytes()[metaIn:])
	if n != uint32(len(str)) {
		return fmt.Errorf("the server offers %d bytes for a %d-byte string", n, len(str))
	}
	for _, wr := range []verbs.SendWR{{Opcode: verbs.OpWrite, SGL: p.sge(src, len(str))}, {Opcode: verbs.OpRead, SGL: p.sge(dst, len(str))}} {
		wr.RemoteAddr, wr.RKey = addr, stag
		if err := p.post(wr); err != nil {
			return err
		}
		if _, err := p.complete(ctx, conn.Done(), 1); err != nil {
			return fmt.Errorf("%v: %w", wr.Opcode, err)
		}
	}
	if got := string(p.mr.Bytes()[dst : dst+len(str)]); got != str {
		return fmt.Errorf("read back %q, wrote %q", got, str)
	}
	return nil
}

// minimalSeedServer is rdma_min_server: accept with {addr, rkey}
// big-endian in the private data (depths 1) of a buffer holding
// "server-initial". It listens, then serve returns what the buffer holds
// once the client has disconnected.
func minimalSeedServer(t *testing.T, ctx context.Context, p *seedPeer, port int) (serve func() (string, error)) {
	copy(p.mr.Bytes(), "server-initial\x00")
	cli.SyncMR(p.mr)
	info := make([]byte, 12)
	binary.BigEndian.PutUint64(info, p.mr.Addr())
	binary.BigEndian.PutUint32(info[8:], p.mr.RKey())
	ln, err := p.agent.Listen(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)),
		&cm.ListenConfig{OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			return &cm.Params{QP: p.qp, ResponderResources: 1, InitiatorDepth: 1, PrivateData: info}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func() (string, error) { return minimalSeedServe(ctx, p, ln) }
}

func minimalSeedServe(ctx context.Context, p *seedPeer, ln *cm.Listener) (string, error) {
	conn, err := ln.Accept(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	select {
	case <-conn.Done():
	case <-ctx.Done():
		return "", errors.New("the client did not disconnect")
	}
	cli.SyncMR(p.mr)
	return cString(p.mr.Bytes()), nil
}

// minimalSeedClient is rdma_min_client: no private data, WRITE
// "client-wrote-this" and its NUL, READ 4096 bytes, return them as a C
// string.
func minimalSeedClient(ctx context.Context, p *seedPeer, port int) (string, error) {
	conn, err := p.agent.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)),
		&cm.Params{QP: p.qp, ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	rep := conn.PrivateData()
	addr, rkey := binary.BigEndian.Uint64(rep), binary.BigEndian.Uint32(rep[8:])
	copy(p.mr.Bytes(), "client-wrote-this\x00")
	for _, wr := range []verbs.SendWR{{Opcode: verbs.OpWrite, SGL: p.sge(0, 18)}, {Opcode: verbs.OpRead, SGL: p.sge(4096, 4096)}} {
		wr.RemoteAddr, wr.RKey = addr, rkey
		if err := p.post(wr); err != nil {
			return "", err
		}
		if _, err := p.complete(ctx, conn.Done(), 1); err != nil {
			return "", fmt.Errorf("%v: %w", wr.Opcode, err)
		}
	}
	return cString(p.mr.Bytes()[4096:]), nil
}

func seedTest(t *testing.T) (context.Context, *mem.Network, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	return ctx, n, clitest.FreeTCPPort(t)
}

// TestSeedWritereadClient runs roce client --mode writeread against
// rdma-example's server.
func TestSeedWritereadClient(t *testing.T) {
	ctx, n, port := seedTest(t)
	p := newSeedPeer(t, n, seedServerAddr, 4096)
	type res struct {
		n   uint32
		buf string
		err error
	}
	rc := make(chan res, 1)
	serve := rdmaexServer(t, ctx, p, port)
	go func() { n, buf, err := serve(); rc <- res{n, buf, err} }()
	out, err := goroceClient(t, ctx, n, "writeread", port, "-s", "hello world 789")
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	r := <-rc
	if r.err != nil {
		t.Fatalf("rdma_server: %v", r.err)
	}
	if r.n != 15 || r.buf != "hello world 789" {
		t.Fatalf("rdma_server saw a %d-byte request and holds %q", r.n, r.buf)
	}
	containsInOrder(t, "client", out, []string{"Passed string is : hello world 789 , with count 15",
		"The client is connected successfully", " , len: 15 , stag : 0x", "...\nSUCCESS, source and destination buffers match",
		"Client resource clean up is complete"})
}

// TestSeedWritereadServer runs rdma-example's client against roce server
// --mode writeread.
func TestSeedWritereadServer(t *testing.T) {
	ctx, n, port := seedTest(t)
	wait := goroceServer(t, ctx, n, "writeread", port)
	p := newSeedPeer(t, n, seedClientAddr, 4096)
	if err := rdmaexClient(ctx, p, port, "hello world 789"); err != nil {
		t.Fatalf("rdma_client: %v", err)
	}
	out, err := wait()
	if err != nil {
		t.Fatalf("server: %v\n%s", err, out)
	}
	containsInOrder(t, "server", out, []string{"A new connection is accepted from 198.18.0.10\n",
		"Client side buffer information is received...", "The client has requested buffer length of : 15 bytes",
		"A disconnect event is received from the client...", "Server shut-down is complete"})
	if !regexp.MustCompile(`(?m)^buffer attr, addr: 0x[0-9a-f]+ , len: 15 , stag : 0x[0-9a-f]+$`).MatchString(out) {
		t.Fatalf("the server does not print the client's buffer as rdma_server does:\n%s", out)
	}
}

// TestSeedMinimalClient runs roce client --mode minimal against the
// minimal sample's server.
func TestSeedMinimalClient(t *testing.T) {
	ctx, n, port := seedTest(t)
	p := newSeedPeer(t, n, seedServerAddr, 4096)
	type res struct {
		buf string
		err error
	}
	rc := make(chan res, 1)
	serve := minimalSeedServer(t, ctx, p, port)
	go func() { buf, err := serve(); rc <- res{buf, err} }()
	out, err := goroceClient(t, ctx, n, "minimal", port)
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if r := <-rc; r.err != nil || r.buf != "client-wrote-this" {
		t.Fatalf("rdma_min_server: %q, %v", r.buf, r.err)
	}
	containsInOrder(t, "client", out, []string{"Client read back: 'client-wrote-this'\n"})
}

// TestSeedMinimalServer runs the minimal sample's client against roce
// server --mode minimal.
func TestSeedMinimalServer(t *testing.T) {
	ctx, n, port := seedTest(t)
	wait := goroceServer(t, ctx, n, "minimal", port)
	p := newSeedPeer(t, n, seedClientAddr, 8192)
	got, err := minimalSeedClient(ctx, p, port)
	if err != nil || got != "client-wrote-this" {
		t.Fatalf("rdma_min_client: read back %q, %v", got, err)
	}
	out, err := wait()
	if err != nil {
		t.Fatalf("server: %v\n%s", err, out)
	}
	containsInOrder(t, "server", out, []string{"Server buffer after client ops: 'client-wrote-this'\n"})
}

// TestSeedMinimalClientNoBuffer: a server whose accept carries no
// buffer (rdma-example's) is a clear error for the minimal client.
func TestSeedMinimalClientNoBuffer(t *testing.T) {
	ctx, n, port := seedTest(t)
	p := newSeedPeer(t, n, seedServerAddr, 4096)
	errc := make(chan error, 1)
	serve := rdmaexServer(t, ctx, p, port)
	go func() { _, _, err := serve(); errc <- err }()
	out, err := goroceClient(t, ctx, n, "minimal", port)
	if !errors.Is(err, errNoBufInfo) {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if err := <-errc; err == nil {
		t.Fatal("rdma_server: no error after the client left")
	}
}

// TestSeedForeignClientRefused: a mode without a seed protocol refuses a
// client without goroce's private data, with the reason in the REJ, and
// goes on listening.
func TestSeedForeignClientRefused(t *testing.T) {
	ctx, n, port := seedTest(t)
	sctx, stop := context.WithCancel(ctx)
	wait := goroceServer(t, sctx, n, "reqresp", port)
	p := newSeedPeer(t, n, seedClientAddr, 4096)
	err := rdmaexClient(ctx, p, port, "x")
	var rej *cm.RejectError
	if !errors.As(err, &rej) || !strings.Contains(string(rej.PrivateData), "not a goroce session's") {
		t.Fatalf("rdma_client: %v", err)
	}
	stop()
	if out, err := wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("server: %v\n%s", err, out)
	}
}

// TestSeedWritereadServerTooLong: a client asking for more than the
// server's buffer gets disconnected, and the server says why.
func TestSeedWritereadServerTooLong(t *testing.T) {
	ctx, n, port := seedTest(t)
	wait := goroceServer(t, ctx, n, "writeread", port)
	p := newSeedPeer(t, n, seedClientAddr, 16384)
	if err := rdmaexClient(ctx, p, port, strings.Repeat("x", 5000)); err == nil {
		t.Fatal("rdma_client: no error")
	}
	out, err := wait()
	if err == nil || !strings.Contains(err.Error(), "the client asks for a 5000-byte buffer; this server offers 1 to 4032") {
		t.Fatalf("server: %v\n%s", err, out)
	}
}

// immSeedServer is rdma_server_imm: a 64-byte receive posted, then the
// minimal sample's accept ({addr, rkey} big-endian, depths 1) of a buffer
// holding "server-initial". It listens, then serve returns the receive's
// completion and the buffer.
func immSeedServer(t *testing.T, ctx context.Context, p *seedPeer, port int) (serve func() (verbs.WC, string, error)) {
	copy(p.mr.Bytes(), "server-initial\x00")
	cli.SyncMR(p.mr)
	info := make([]byte, 12)
	binary.BigEndian.PutUint64(info, p.mr.Addr())
	binary.BigEndian.PutUint32(info[8:], p.mr.RKey())
	ln, err := p.agent.Listen(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)),
		&cm.ListenConfig{OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			if err := p.recv(p.mr.Len()-64, 64); err != nil {
				return nil, err
			}
			return &cm.Params{QP: p.qp, ResponderResources: 1, InitiatorDepth: 1, PrivateData: info}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return func() (verbs.WC, string, error) {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return verbs.WC{}, "", err
		}
		defer conn.Close()
		wcs, err := p.complete(ctx, conn.Done(), 1)
		if err != nil {
			return verbs.WC{}, "", err
		}
		cli.SyncMR(p.mr)
		return wcs[0], cString(p.mr.Bytes()), nil
	}
}

// immSeedClient is rdma_client_imm: no private data, depths 0, the
// buffer from the REP's private data, "client-wrote-with-imm" and its NUL
// written WITH_IMM, the immediate the length.
func immSeedClient(ctx context.Context, p *seedPeer, port int) error {
	conn, err := p.agent.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(seedServerAddr), uint16(port)), &cm.Params{QP: p.qp})
	if err != nil {
		return err
	}
	defer conn.Close()
	rep := conn.PrivateData()
	if len(rep) < 12 {
		return fmt.Errorf("No private_data (%d bytes)", len(rep))
	}
	addr, rkey := binary.BigEndian.Uint64(rep), binary.BigEndian.Uint32(rep[8:])
	copy(p.mr.Bytes(), "client-wrote-with-imm\x00")
	if err := p.post(verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: 22, SGL: p.sge(0, 22), RemoteAddr: addr, RKey: rkey}); err != nil {
		return err
	}
	_, err = p.complete(ctx, conn.Done(), 1)
	return err
}

// TestSeedImmClient runs roce client --mode write-imm against Example 2's
// server: the REP's {be64 addr, be32 rkey} says where to write.
func TestSeedImmClient(t *testing.T) {
	ctx, n, port := seedTest(t)
	p := newSeedPeer(t, n, seedServerAddr, 4096)
	type res struct {
		wc  verbs.WC
		buf string
		err error
	}
	rc := make(chan res, 1)
	serve := immSeedServer(t, ctx, p, port)
	go func() { wc, buf, err := serve(); rc <- res{wc, buf, err} }()
	out, err := goroceClient(t, ctx, n, "write-imm", port)
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	r := <-rc
	if r.err != nil || r.wc.Opcode != verbs.WCRecvRDMAWithIm || r.wc.Flags&verbs.WithImm == 0 || r.wc.Imm != 22 {
		t.Fatalf("rdma_server_imm: %v, %v", &r.wc, r.err)
	}
	if r.buf != "client-wrote-with-imm" {
		t.Fatalf("rdma_server_imm's buffer holds %q", r.buf)
	}
	containsInOrder(t, "client", out, []string{"post RDMA_WRITE_WITH_IMM len=22\n", "RDMA_WRITE_WITH_IMM completed\n"})
}

// TestSeedImmServer runs Example 2's client, whose REQ carries no private
// data, against roce server --mode write-imm.
func TestSeedImmServer(t *testing.T) {
	ctx, n, port := seedTest(t)
	wait := goroceServer(t, ctx, n, "write-imm", port)
	p := newSeedPeer(t, n, seedClientAddr, 4096)
	if err := immSeedClient(ctx, p, port); err != nil {
		out, serr := wait()
		t.Fatalf("rdma_client_imm: %v\nserver: %v\n%s", err, serr, out)
	}
	out, err := wait()
	if err != nil {
		t.Fatalf("server: %v\n%s", err, out)
	}
	containsInOrder(t, "server", out, []string{"got RECV with IMM\n", "  imm_data net=0x16000000\n", "  imm_data host=22\n",
		"after WRITE_WITH_IMM, buf='client-wrote-with-imm'\n"})
}

// TestSeedGoroceProtoHint: a client with --proto goroce that meets the
// published program's server says to leave the flag out.
func TestSeedGoroceProtoHint(t *testing.T) {
	ctx, n, port := seedTest(t)
	p := newSeedPeer(t, n, seedServerAddr, 4096)
	serve := immSeedServer(t, ctx, p, port)
	go serve()
	out, err := goroceClient(t, ctx, n, "write-imm", port, "--proto", "goroce")
	want := "the peer's private data is not a goroce session's"
	hint := "(if the server is rdma-roce-lab's Example 2 (github.com/montybeatnik/rdma-roce-lab), leave --proto goroce out"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), hint) {
		t.Fatalf("client: %v\n%s", err, out)
	}
}
