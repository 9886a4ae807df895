package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// rdma-lib's side, written here from the protocol's description (40-byte
// struct qp_info_t, twice, PSN 0, path MTU 1024) against the verbs
// directly, not through the code under test: RoCE over the in-memory
// network, the exchange over TCP on loopback.

// rdmalibPair is one of rdma-lib's two connections: a QP, its CQ and a
// 4096-byte buffer.
type rdmalibPair struct {
	qp  verbs.QP
	cq  verbs.CQ
	mr  verbs.MR
	buf []byte
}

// rdmalibFake is rdma-lib's program: a device and its two pairs.
type rdmalibFake struct {
	dev           verbs.Device
	pd            verbs.PD
	first, second *rdmalibPair
	remote        [2]rdmalibFakeInfo // what the peer described, per pair
	conns         []net.Conn
}

// rdmalibFakeInfo is struct qp_info_t, decoded by the test.
type rdmalibFakeInfo struct {
	qpn        uint32
	gid        [16]byte
	addr       uint64
	rkey       uint32
	padding    [8]byte // bytes 4-7 and 36-39
	paddingSet bool    // write padding as is (else zeros)
}

func (i rdmalibFakeInfo) bytes() []byte {
	b := make([]byte, 40)
	binary.LittleEndian.PutUint32(b, i.qpn)
	copy(b[8:24], i.gid[:])
	binary.LittleEndian.PutUint64(b[24:], i.addr)
	binary.LittleEndian.PutUint32(b[32:], i.rkey)
	if i.paddingSet {
		copy(b[4:8], i.padding[:4])
		copy(b[36:40], i.padding[4:])
	}
	return b
}

func rdmalibFakeParse(b []byte) rdmalibFakeInfo {
	var i rdmalibFakeInfo
	i.qpn = binary.LittleEndian.Uint32(b)
	copy(i.gid[:], b[8:24])
	i.addr = binary.LittleEndian.Uint64(b[24:])
	i.rkey = binary.LittleEndian.Uint32(b[32:])
	return i
}

func newRdmalibFake(t *testing.T, n *mem.Network, addr string) *rdmalibFake {
	t.Helper()
	dev, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}})
	if err != nil {
		t.Fatal(err)
	}
	f := &rdmalibFake{dev: dev}
	t.Cleanup(func() {
		for _, c := range f.conns {
			c.Close()
		}
		dev.Close()
	})
	if f.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	pair := func() *rdmalibPair {
		p := &rdmalibPair{buf: make([]byte, 4096)}
		var err error
		if p.cq, err = dev.CreateCQ(10); err != nil {
			t.Fatal(err)
		}
		if p.qp, err = f.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.cq, RecvCQ: p.cq,
			Cap: verbs.QPCap{MaxSendWR: 10, MaxRecvWR: 10, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		if p.mr, err = f.pd.RegMR(p.buf, verbs.LocalWrite|verbs.RemoteAccess); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f.first, f.second = pair(), pair()
	return f
}

// setup is both connections of the client (server "" for the server's
// side, which accepts on ln): exchange, INIT, RTR, RTS with PSN 0 and path
// MTU 1024. mark, when set, is the padding the fake writes.
func (f *rdmalibFake) setup(ln net.Listener, server string, mark *[8]byte) error {
	for i, p := range []*rdmalibPair{f.first, f.second} {
		var conn net.Conn
		var err error
		if server != "" {
			for try := 0; ; try++ { // the program's 3 tries, 1 s apart
				if conn, err = net.Dial("tcp", server); err == nil || try == 2 {
					break
				}
				time.Sleep(time.Second)
			}
		} else {
			conn, err = ln.Accept()
		}
		if err != nil {
			return err
		}
		f.conns = append(f.conns, conn)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		gid, _ := f.dev.GID(0)
		mine := rdmalibFakeInfo{qpn: p.qp.QPN(), gid: gid, addr: p.mr.Addr(), rkey: p.mr.RKey()}
		if mark != nil {
			mine.padding, mine.paddingSet = *mark, true
		}
		theirs := make([]byte, 40)
		if server != "" {
			_, err = conn.Write(mine.bytes())
		}
		if err == nil {
			_, err = io.ReadFull(conn, theirs)
		}
		if err == nil && server == "" {
			_, err = conn.Write(mine.bytes())
		}
		if err != nil {
			return fmt.Errorf("Failed to exchange QP info: %w", err)
		}
		f.remote[i] = rdmalibFakeParse(theirs)
		if err := roce.Connect(p.qp, &roce.Remote{QPN: f.remote[i].qpn, GID: f.remote[i].gid}, &roce.ConnParams{MTU: bth.MTU1024}); err != nil {
			return err
		}
	}
	return nil
}

// post posts one signaled request on the second pair: len bytes from the
// start of its buffer, to offset off of the peer's for a WRITE or READ.
func (f *rdmalibFake) post(op verbs.WROpcode, n int, off uint64, imm uint32) error {
	p := f.second
	wr := verbs.SendWR{Opcode: op, Flags: verbs.Signaled, Imm: imm,
		SGL: []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(n), LKey: p.mr.LKey()}}}
	if op != verbs.OpSend {
		wr.RemoteAddr, wr.RKey = f.remote[1].addr+off, f.remote[1].rkey
	}
	return p.qp.PostSend([]verbs.SendWR{wr})
}

func (f *rdmalibFake) recv() error {
	p := f.second
	return p.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: p.mr.Addr(), Length: 4096, LKey: p.mr.LKey()}}}})
}

// wait is wait_completion: the next completion of the second pair, which
// must succeed.
func (f *rdmalibFake) wait(ctx context.Context) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	for f.second.cq.Poll(wc) == 0 {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		f.second.cq.Wait(wctx)
		cancel()
		if ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
	}
	if wc[0].Status != verbs.Success {
		return wc[0], fmt.Errorf("Completion error: %v", wc[0].Status)
	}
	return wc[0], nil
}

// goroceRdmalibClient runs roce client against the fake server's TCP port
// on loopback (RoCE on the in-memory network).
func goroceRdmalibClient(t *testing.T, ctx context.Context, n *mem.Network, mode string, port int, stdin string, extra ...string) (string, error) {
	t.Helper()
	f, m := seedFlags(t, mode, port, n, seedClientAddr, extra...)
	var out bytes.Buffer
	err := dial(ctx, f, m, "127.0.0.1", strings.NewReader(stdin), &out, &bytes.Buffer{})
	return out.String(), err
}

// rdmalibFakeServer listens for the fake server on loopback.
func rdmalibFakeServer(t *testing.T, port int) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestRdmalibClient runs roce client --mode send, write and read against
// rdma-lib's servers.
func TestRdmalibClient(t *testing.T) {
	for _, mode := range []string{"send", "write", "read"} {
		t.Run(mode, func(t *testing.T) {
			ctx, n, port := seedTest(t)
			f := newRdmalibFake(t, n, seedServerAddr)
			ln := rdmalibFakeServer(t, port)
			got := make(chan []string, 1)
			errc := make(chan error, 1)
			go func() {
				lines, err := rdmalibFakeServe(ctx, f, ln, mode)
				got <- lines
				errc <- err
			}()
			stdin := "hello rdma\n\nsecond line\n"
			if mode == "read" {
				stdin = "0 4\n11 16\n"
			}
			out, err := goroceRdmalibClient(t, ctx, n, mode, port, stdin)
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out)
			}
			lines, serr := <-got, <-errc
			if serr != nil {
				t.Fatalf("rdma-lib's server: %v", serr)
			}
			want := map[string][]string{
				"send":  {"Received: hello rdma", "Received: second line"},
				"write": {"Received (11 bytes): hello rdma", "Received (12 bytes): second line"},
				"read":  nil,
			}[mode]
			if fmt.Sprint(lines) != fmt.Sprint(want) {
				t.Errorf("rdma-lib's server printed %q, want %q", lines, want)
			}
			wantOut := map[string][]string{
				"send":  {"Server acknowledged\nServer acknowledged\n"},
				"write": {"Message sent successfully\nMessage sent successfully\n"},
				"read":  {"Read data (5 bytes from position 0): Hello\n", "Read data (6 bytes from position 11): server\n"},
			}[mode]
			containsInOrder(t, "client", out, wantOut)
		})
	}
}

// rdmalibFakeServe is rdma-lib's server of mode: both connections, then
// what the mode does, until the client's departure shows (a failed wait).
// It returns the lines it printed.
func rdmalibFakeServe(ctx context.Context, f *rdmalibFake, ln net.Listener, mode string) ([]string, error) {
	if mode == "read" {
		copy(f.second.buf, "Hello from server memory!\x00")
		cli.SyncMR(f.second.mr)
	}
	if err := f.setup(ln, "", nil); err != nil {
		return nil, err
	}
	var lines []string
	if mode == "read" {
		return nil, nil
	}
	for len(lines) < 2 {
		if err := f.recv(); err != nil {
			return lines, err
		}
		wc, err := f.wait(ctx)
		if err != nil {
			return lines, err
		}
		cli.SyncMR(f.second.mr)
		if mode == "write" {
			lines = append(lines, fmt.Sprintf("Received (%d bytes): %s", wc.Imm, cString(f.second.buf)))
			continue
		}
		lines = append(lines, "Received: "+cString(f.second.buf))
		copy(f.second.buf, "ACK\x00")
		if err := f.post(verbs.OpSend, 4, 0, 0); err != nil {
			return lines, err
		}
		if _, err := f.wait(ctx); err != nil {
			return lines, err
		}
	}
	return lines, nil
}

// goroceRdmalibServer runs roce server with rdma-lib's protocol on the
// in-memory network, its exchange on loopback port.
func goroceRdmalibServer(t *testing.T, ctx context.Context, n *mem.Network, mode string, port int, extra ...string) func() (string, error) {
	t.Helper()
	f, m := seedFlags(t, mode, port, n, seedServerAddr, append([]string{"--clients", "1"}, extra...)...)
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

// TestRdmalibServer runs rdma-lib's clients against roce server --mode
// send, write and read.
func TestRdmalibServer(t *testing.T) {
	for _, mode := range []string{"send", "write", "read"} {
		t.Run(mode, func(t *testing.T) {
			ctx, n, port := seedTest(t)
			wait := goroceRdmalibServer(t, ctx, n, mode, port, "--text", "Hello from server memory!")
			f := newRdmalibFake(t, n, seedClientAddr)
			if err := f.setup(nil, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil); err != nil {
				t.Fatalf("rdma-lib's client: %v", err)
			}
			var got []string
			for _, line := range []string{"hello rdma", "second line"} {
				s, err := rdmalibFakeClientLine(ctx, f, mode, line)
				if err != nil {
					t.Fatalf("rdma-lib's client: %v", err)
				}
				got = append(got, s)
			}
			for _, c := range f.conns {
				c.Close()
			}
			out, err := wait()
			if err != nil {
				t.Fatalf("server: %v\n%s", err, out)
			}
			want := map[string][]string{
				"send":  {"Server acknowledged", "Server acknowledged"},
				"write": {"Message sent successfully", "Message sent successfully"},
				"read":  {"Read data (5 bytes from position 0): Hello", "Read data (6 bytes from position 11): server"},
			}[mode]
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rdma-lib's client printed %q, want %q", got, want)
			}
			wantOut := map[string][]string{
				"send":  {"Send-Receive Server ready.\n", "Received: hello rdma\nReceived: second line\n"},
				"write": {"Write Server ready.\n", "Received (11 bytes): hello rdma\nReceived (12 bytes): second line\n"},
				"read":  {"Read Server ready.\nWaiting for client read requests...\n"},
			}[mode]
			containsInOrder(t, "server", out, wantOut)
		})
	}
}

// rdmalibFakeClientLine is what rdma-lib's client does with one line of
// its input; the read client reads 0-4 for the first line, 11-16 for the
// second.
func rdmalibFakeClientLine(ctx context.Context, f *rdmalibFake, mode, line string) (string, error) {
	n := len(line) + 1
	switch mode {
	case "send":
		copy(f.second.buf, line+"\x00")
		if err := f.post(verbs.OpSend, n, 0, 0); err != nil {
			return "", err
		}
		if _, err := f.wait(ctx); err != nil {
			return "", err
		}
		if err := f.recv(); err != nil {
			return "", err
		}
		if _, err := f.wait(ctx); err != nil {
			return "", err
		}
		if a := cString(f.second.buf); a != "ACK" {
			return "", fmt.Errorf("answer %q", a)
		}
		return "Server acknowledged", nil
	case "write":
		copy(f.second.buf, line+"\x00")
		if err := f.post(verbs.OpWriteImm, n, 0, uint32(n)); err != nil {
			return "", err
		}
		if _, err := f.wait(ctx); err != nil {
			return "", err
		}
		return "Message sent successfully", nil
	}
	start, end := 0, 4
	if line != "hello rdma" {
		start, end = 11, 16
	}
	if err := f.post(verbs.OpRead, end-start+1, uint64(start), 0); err != nil {
		return "", err
	}
	if _, err := f.wait(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("Read data (%d bytes from position %d): %s", end-start+1, start, cString(f.second.buf[:end-start+1])), nil
}

// TestRdmalibLambdaServer runs rdma-lib's lambda client against roce
// server --mode lambda: the call is refused, never run, and the client
// gets result -1 with no output instead of waiting for ever.
func TestRdmalibLambdaServer(t *testing.T) {
	ctx, n, port := seedTest(t)
	wait := goroceRdmalibServer(t, ctx, n, "lambda", port)
	f := newRdmalibFake(t, n, seedClientAddr)
	if err := f.setup(nil, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil); err != nil {
		t.Fatalf("rdma-lib's client: %v", err)
	}
	b := f.second.buf
	// struct lambda_metadata, then the client's struct qp_info_t: where
	// the result goes.
	clear(b)
	copy(b, "process_data")
	binary.LittleEndian.PutUint64(b[128:], 4096) // code_size
	binary.LittleEndian.PutUint64(b[136:], 41)   // input_size
	gid, _ := f.dev.GID(0)
	copy(b[152:], rdmalibFakeInfo{qpn: f.second.qp.QPN(), gid: gid, addr: f.second.mr.Addr(), rkey: f.second.mr.RKey()}.bytes())
	for i, fill := range []byte{0, 0xC3, 'T'} { // the call, the "code" (x86 RET), the input
		if i > 0 {
			for j := range b {
				b[j] = fill
			}
		}
		if err := f.post(verbs.OpWriteImm, 4096, 0, 4096); err != nil {
			t.Fatal(err)
		}
		if _, err := f.wait(ctx); err != nil {
			t.Fatalf("rdma-lib's client, write %d: %v", i, err)
		}
	}
	if err := f.recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.wait(ctx); err != nil {
		t.Fatalf("rdma-lib's client, waiting for the result: %v", err)
	}
	cli.SyncMR(f.second.mr)
	if res, size := int32(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint64(b[4:]); res != -1 || size != 0 {
		t.Errorf("result %d, output size %d; want -1 and 0", res, size)
	}
	out, err := wait()
	// The call's name is read as the call completes, and the code's first
	// packets may have overwritten it by then (rdma-lib's protocol holds
	// nothing back): only the refusal itself is certain.
	if err == nil || !strings.Contains(err.Error(), `lambda: refused to run "`) ||
		!strings.Contains(err.Error(), "goroce never runs code sent over the wire; answered error -1") {
		t.Fatalf("server: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Lambda server ready: goroce never runs code sent over the wire") {
		t.Errorf("server output:\n%s", out)
	}
}

// TestRdmalibLambdaClientRefuses: roce client --mode lambda does not
// connect to rdma-lib's server, which would run what it sends; it says
// so in one line.
func TestRdmalibLambdaClientRefuses(t *testing.T) {
	ctx, n, port := seedTest(t)
	ln := rdmalibFakeServer(t, port)
	out, err := goroceRdmalibClient(t, ctx, n, "lambda", port, "")
	if !errors.Is(err, errRdmalibLambda) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("client: %v\n%s", err, out)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("the client connected")
	}
}
