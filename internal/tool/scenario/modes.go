package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// modeOpts are the scenario flags of roce server and roce client.
type modeOpts struct {
	n       int     // requests, messages or iterations
	str     string  // the string to send or write
	imm     uint    // immediate value of write-imm
	immSet  bool    // --imm was given
	text    string  // the text the read server stores
	fn      string  // lambda: the function to call
	dim     int     // params: number of weights
	lr      float64 // params: learning rate
	clients int     // server: clients to serve before exiting
	id      int     // params: this client's number (seeds its gradients)
	in      io.Reader
	out     io.Writer
	prompt  bool // print prompts (stdin is a terminal)
}

// mode is one client/server scenario from the seed documents, as goroce
// runs it (modes) or as its published program does (seedModes).
type mode struct {
	name    string
	summary string
	// program is the published program whose protocol the mode speaks,
	// or nil for goroce's session protocol.
	program *program
	// refuseClient, when set, is why the mode's client does not run.
	refuseClient error
	// setup runs once on the server before clients come; it may add
	// fields to the server's hello and return state shared by sessions.
	setup func(l *sessionListener, o *modeOpts) (any, error)
	// prepare runs on each server session before the client hears back.
	prepare func(s *session, state any)
	// serverRecv and clientRecv list the receives (offset, length) each
	// side posts before the exchange, so the peer's first message finds
	// one.
	serverRecv, clientRecv func(c *sessionConfig, o *modeOpts) [][2]int
	server                 func(ctx context.Context, s *session, o *modeOpts, state any) error
	client                 func(ctx context.Context, s *session, o *modeOpts) error
}

var modes = []*mode{
	{name: "reqresp", summary: "request/response: the client SENDs requests, the server answers each with a SEND (the sequence diagram)",
		serverRecv: recvAt(0, slotLen), server: reqrespServer, client: reqrespClient},
	{name: "writeread", summary: "the client RDMA WRITEs -s STRING into the server's buffer, READs it back and compares (rdma-example)",
		serverRecv: rdmaexRecv, clientRecv: rdmaexRecv, server: writereadServer, client: writereadClient},
	{name: "minimal", summary: "the server shares its buffer's address and rkey when it accepts; the client WRITEs -s STRING (client-wrote-this), READs the buffer back and prints it (the minimal sample)",
		prepare: minimalPrepare, server: minimalServer, client: minimalClient},
	{name: "write-imm", summary: "RDMA WRITE with immediate: the payload lands, the server's RECV is notified with the value (rdma-roce-lab's Example 2)",
		serverRecv: recvAt(0, 0), server: writeImmServer, client: writeImmClient},
	{name: "send", summary: "lines from stdin are SENT; the server prints each and acknowledges it (rdma-lib)",
		serverRecv: recvAt(0, lineSlot), server: sendServer, client: sendClient},
	{name: "write", summary: "lines from stdin are RDMA WRITTEN into the server's memory with immediate data; the server prints them (rdma-lib)",
		serverRecv: recvAt(0, 0), server: writeServer, client: writeClient},
	{name: "read", summary: "the server stores a text; the client READs the byte ranges START END it is given (rdma-lib)",
		setup: readSetup, prepare: func(s *session, text any) { copy(s.mr.Bytes(), text.(string)) },
		server: waitServer, client: readClient},
	{name: "lambda", summary: "remote execution (rdma-lib): goroce never runs code from the wire, so with rdma-lib's protocol its server answers every call with an error and its client does not call; with --proto goroce, the server's registered functions (checksum, wordcount, upper, sum)",
		setup: lambdaSetup, serverRecv: func(c *sessionConfig, _ *modeOpts) [][2]int { return [][2]int{{c.bufSize / 2, c.bufSize / 2}} }, server: lambdaServer, client: lambdaClient},
	{name: "flush", summary: "IBTA 1.5's FLUSH and ATOMIC_WRITE: the client WRITEs, FLUSHes, ATOMIC_WRITEs, READs back and ends with a FLUSH the server NAKs (-s qp: its QP's rights, -s mr: its region's); the server prints what landed (interop/peers' flush_server and flush_client)",
		setup: flushSetup, clientRecv: recvAt(0, 64), server: flushServer, client: flushClient},
	{name: "params", summary: "parameter server: clients WRITE gradients and READ back the updated weights",
		setup: paramsSetup, serverRecv: func(_ *sessionConfig, o *modeOpts) [][2]int { return [][2]int{{8 * o.dim, 64}} }, server: paramsServer, client: paramsClient},
}

// recvAt returns one receive of n bytes at off.
func recvAt(off, n int) func(*sessionConfig, *modeOpts) [][2]int {
	return func(*sessionConfig, *modeOpts) [][2]int { return [][2]int{{off, n}} }
}

func findMode(name string) (*mode, error) {
	var names []string
	for _, m := range modes {
		if m.name == name {
			return m, nil
		}
		names = append(names, m.name)
	}
	if name == "" {
		return nil, cli.Usagef("--mode is required: %s", strings.Join(names, ", "))
	}
	return nil, cli.Usagef("unknown --mode %q (want %s)", name, strings.Join(names, ", "))
}

// --- reqresp ---------------------------------------------------------

const reqSlot, respSlot, slotLen = 0, 1024, 1024

func reqrespServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	for n := 0; ; n++ {
		wc, err := s.expect(ctx, verbs.WCRecv)
		if errors.Is(err, errPeerGone) {
			fmt.Fprintf(o.out, "served %d requests\n", n)
			return nil
		}
		if err != nil {
			return err
		}
		req := string(s.mr.Bytes()[reqSlot : reqSlot+int(wc.ByteLen)])
		cli.Step(s.log, roce.StepData, "process request %q", req)
		seq, body, ok := parseReq(req)
		resp := fmt.Sprintf("RESP %d %s", seq, strings.ToUpper(body))
		if !ok {
			resp = fmt.Sprintf("ERR malformed request %.40q", req)
		}
		// The next request's receive goes up before the response leaves.
		if err := s.postRecv(0, reqSlot, slotLen); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, respSlot, []byte(resp), nil); err != nil {
			return err
		}
	}
}

func parseReq(s string) (int, string, bool) {
	f := strings.SplitN(s, " ", 3)
	if len(f) < 2 || f[0] != "REQ" {
		return 0, "", false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	body := ""
	if len(f) == 3 {
		body = f[2]
	}
	return n, body, true
}

func reqrespClient(ctx context.Context, s *session, o *modeOpts) error {
	body := o.str
	if body == "" {
		body = "hello rdma"
	}
	if len(body) > slotLen-32 {
		return cli.Usagef("-s is longer than %d bytes", slotLen-32)
	}
	lat := make([]time.Duration, 0, o.n)
	for i := range o.n {
		if err := s.postRecv(uint64(i), respSlot, slotLen); err != nil {
			return err
		}
		req := fmt.Sprintf("REQ %d %s", i, body)
		t0 := time.Now()
		if err := s.sendBytes(ctx, reqSlot, []byte(req), nil); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return fmt.Errorf("response %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0))
		got := string(s.mr.Bytes()[respSlot : respSlot+int(wc.ByteLen)])
		if want := fmt.Sprintf("RESP %d %s", i, strings.ToUpper(body)); got != want {
			return fmt.Errorf("response %d is %q, want %q", i, got, want)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	fmt.Fprintf(o.out, "%d requests answered; round trip µs: min %.1f avg %.1f p50 %.1f p99 %.1f max %.1f\n",
		len(lat), us(lat[0]), us(sum/time.Duration(len(lat))), us(lat[len(lat)/2]), us(lat[len(lat)*99/100]), us(lat[len(lat)-1]))
	return nil
}

// --- writeread -------------------------------------------------------

const dashes = "---------------------------------------------------------"

// writereadServer prints what rdma_server prints; over rdma_cm the
// exchange of buffer descriptions is done (rdmaexAccepted), over TCP the
// hello carried the client's buffer and string length.
func writereadServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	from := s.remote
	if ap, err := netip.ParseAddrPort(from); err == nil {
		from = ap.Addr().Unmap().String()
	}
	fmt.Fprintf(o.out, "A new connection is accepted from %s\n", from)
	fmt.Fprintln(o.out, "Client side buffer information is received...")
	fmt.Fprint(o.out, rdmaexAttr(s.peer))
	fmt.Fprintf(o.out, "The client has requested buffer length of : %s bytes\n", s.extra["strlen"])
	return waitServer(ctx, s, o, nil)
}

// waitServer waits for the client to disconnect.
func waitServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	select {
	case <-s.done:
		fmt.Fprintln(o.out, "A disconnect event is received from the client...")
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func writereadClient(ctx context.Context, s *session, o *modeOpts) error {
	str := o.str
	n := len(str)
	if n == 0 {
		return cli.Usagef("writeread needs -s STRING")
	}
	if uint32(n) > s.peer.len || 2*n > s.mr.Len() {
		return fmt.Errorf("-s is %d bytes; the server's buffer holds %d", n, s.peer.len)
	}
	fmt.Fprint(o.out, rdmaexAttr(s.peer))
	src := s.mr.Bytes()[:n]
	dst := s.mr.Bytes()[n : 2*n]
	copy(src, str)
	clear(dst)
	cli.Step(s.log, roce.StepData, "RDMA WRITE the string into the server's buffer")
	if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWrite, SGL: s.sge(0, n), RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
		return err
	}
	cli.Step(s.log, roce.StepData, "RDMA READ it back into a second buffer")
	if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpRead, SGL: s.sge(n, n), RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCRead); err != nil {
		return err
	}
	if !bytes.Equal(src, dst) {
		return fmt.Errorf("FAILURE, source %q and destination %q buffers differ", src, dst)
	}
	fmt.Fprintln(o.out, "...\nSUCCESS, source and destination buffers match")
	return nil
}

// --- minimal ---------------------------------------------------------

// minimalWrite is what the sample's client writes, and minimalInitial
// what its server's buffer holds before.
const minimalWrite, minimalInitial = "client-wrote-this", "server-initial"

// minimalWait is how long the sample's server gives its client after the
// connection is up before it prints its buffer and disconnects.
const minimalWait = 2 * time.Second

func minimalPrepare(s *session, _ any) {
	clear(s.mr.Bytes())
	copy(s.mr.Bytes(), minimalInitial)
	cli.SyncMR(s.mr)
}

// minimalServer waits until the client has left (or, as the sample does,
// for 2 s), then prints its buffer as a C string; the session's end
// disconnects.
func minimalServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	t := time.NewTimer(minimalWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	cli.SyncMR(s.mr) // the client's WRITE came with no completion here
	fmt.Fprintf(o.out, "Server buffer after client ops: '%s'\n", cString(s.mr.Bytes()))
	return nil
}

// minimalClient WRITEs the string and its NUL to the start of the
// server's buffer, READs the buffer (4096 bytes, the sample's size) back
// and prints it as a C string. Unlike the sample, a read-back that is not
// the string is an error.
func minimalClient(ctx context.Context, s *session, o *modeOpts) error {
	str := o.str
	if str == "" {
		str = minimalWrite
	}
	n := len(str) + 1
	rl := min(int(s.peer.len), s.mr.Len())
	if s.peer.len == 0 {
		rl = min(minimalBufLen, s.mr.Len())
	}
	if n > rl || strings.IndexByte(str, 0) >= 0 {
		return cli.Usagef("-s takes at most %d bytes without NUL", rl-1)
	}
	b := s.mr.Bytes()
	copy(b, str)
	b[n-1] = 0
	cli.Step(s.log, roce.StepData, "post RDMA_WRITE len=%d", n)
	if err := s.do(ctx, verbs.SendWR{ID: 1, Opcode: verbs.OpWrite, SGL: s.sge(0, n), RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
		return err
	}
	clear(b[:rl])
	cli.Step(s.log, roce.StepData, "post RDMA_READ len=%d", rl)
	if err := s.do(ctx, verbs.SendWR{ID: 2, Opcode: verbs.OpRead, SGL: s.sge(0, rl), RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCRead); err != nil {
		return err
	}
	got := cString(b[:rl])
	fmt.Fprintf(o.out, "Client read back: '%s'\n", got)
	if got != str {
		return fmt.Errorf("read back %q, wrote %q", got, str)
	}
	return nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// --- write-imm -------------------------------------------------------

func writeImmServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	for {
		wc, err := s.expect(ctx, verbs.WCRecvRDMAWithIm)
		if err != nil {
			return sessionEnd(err)
		}
		data := s.mr.Bytes()[:wc.ByteLen]
		fmt.Fprintf(o.out, "RECV notified: imm=0x%08x, %d bytes written: %q\n", wc.Imm, wc.ByteLen, data)
		if err := s.postRecv(0, 0, 0); err != nil {
			return err
		}
	}
}

func writeImmClient(ctx context.Context, s *session, o *modeOpts) error {
	str := o.str
	if str == "" {
		str = "payload delivered by RDMA_WRITE_WITH_IMM"
	}
	if uint32(len(str)) > s.peer.len {
		return fmt.Errorf("-s is %d bytes; the server's buffer holds %d", len(str), s.peer.len)
	}
	copy(s.mr.Bytes(), str)
	for i := range o.n {
		imm := uint32(o.imm) + uint32(i)
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: imm, SGL: s.sge(0, len(str)),
			RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "RDMA_WRITE_WITH_IMM of %d bytes, imm=0x%08x: done\n", len(str), imm)
	}
	return nil
}

// --- send ------------------------------------------------------------

const lineSlot = 2048

func sendServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	for n := 1; ; n++ {
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return sessionEnd(err)
		}
		fmt.Fprintf(o.out, "Received: %s\n", s.mr.Bytes()[:wc.ByteLen])
		if err := s.postRecv(0, 0, lineSlot); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, lineSlot, []byte(fmt.Sprintf("ACK %d", n)), nil); err != nil {
			return err
		}
	}
}

// lines calls f for each line of o.in, prompting when interactive.
func lines(o *modeOpts, prompt string, f func(line string) error) error {
	sc := bufio.NewScanner(o.in)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for {
		if o.prompt {
			fmt.Fprint(o.out, prompt)
		}
		if !sc.Scan() {
			return sc.Err()
		}
		if err := f(sc.Text()); err != nil {
			return err
		}
	}
}

func sendClient(ctx context.Context, s *session, o *modeOpts) error {
	return lines(o, "> ", func(line string) error {
		if len(line) > lineSlot {
			fmt.Fprintf(o.out, "line of %d bytes is longer than %d; not sent\n", len(line), lineSlot)
			return nil
		}
		if err := s.postRecv(1, lineSlot, 64); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, 0, []byte(line), nil); err != nil {
			return err
		}
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(s.mr.Bytes()[lineSlot:lineSlot+int(wc.ByteLen)], []byte("ACK ")) {
			return fmt.Errorf("unexpected answer %q", s.mr.Bytes()[lineSlot:lineSlot+int(wc.ByteLen)])
		}
		fmt.Fprintln(o.out, "Server acknowledged")
		return nil
	})
}

// --- write -----------------------------------------------------------

// The write mode rotates over writeSlots slots of the server's buffer so
// that a line is not overwritten before the server prints it.
const writeSlots = 8

func writeServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	slot := s.mr.Len() / writeSlots
	for {
		wc, err := s.expect(ctx, verbs.WCRecvRDMAWithIm)
		if err != nil {
			return sessionEnd(err)
		}
		off := int(wc.Imm%writeSlots) * slot
		fmt.Fprintf(o.out, "Received via RDMA WRITE: %s\n", s.mr.Bytes()[off:off+int(wc.ByteLen)])
		if err := s.postRecv(0, 0, 0); err != nil {
			return err
		}
	}
}

func writeClient(ctx context.Context, s *session, o *modeOpts) error {
	slot := int(s.peer.len) / writeSlots
	seq := uint32(0)
	return lines(o, "> ", func(line string) error {
		if len(line) > slot || len(line) > s.mr.Len() {
			fmt.Fprintf(o.out, "line of %d bytes is longer than %d; not sent\n", len(line), slot)
			return nil
		}
		copy(s.mr.Bytes(), line)
		off := uint64(seq%writeSlots) * uint64(slot)
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: seq, SGL: s.sge(0, len(line)),
			RemoteAddr: s.peer.addr + off, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
			return err
		}
		seq++
		fmt.Fprintln(o.out, "Message sent successfully")
		return nil
	})
}

// --- read ------------------------------------------------------------

func readSetup(l *sessionListener, o *modeOpts) (any, error) {
	text, err := readText(o, l.cfg.bufSize, false)
	if err != nil {
		return nil, err
	}
	l.cfg.extra["textlen"] = strconv.Itoa(len(text))
	fmt.Fprintf(o.out, "Stored %d bytes; waiting for a client\n", len(text))
	return text, nil
}

// readText is the read server's text: --text, or the first line of the
// input; at most limit bytes. With prompt (rdma-lib's read server, which
// prints it whatever its input is) or a terminal, it asks for the line.
func readText(o *modeOpts, limit int, prompt bool) (string, error) {
	text := o.text
	if text == "" {
		if o.prompt || prompt {
			fmt.Fprint(o.out, "Enter text to store: ")
		}
		sc := bufio.NewScanner(o.in)
		if sc.Scan() {
			text = sc.Text()
		}
	}
	if text == "" {
		return "", cli.Usagef("the read server needs a text: --text TEXT or a line on stdin")
	}
	if len(text) > limit {
		return "", cli.Usagef("the text is %d bytes; the server holds at most %d (--buf)", len(text), limit)
	}
	return text, nil
}

func readClient(ctx context.Context, s *session, o *modeOpts) error {
	n, err := strconv.Atoi(s.extra["textlen"])
	if err != nil {
		return errors.New("the server did not say how long its text is")
	}
	return lines(o, "Enter range (start end): ", func(line string) error {
		var a, b int
		if _, err := fmt.Sscan(line, &a, &b); err != nil {
			fmt.Fprintln(o.out, "want two numbers: START END")
			return nil
		}
		if a < 0 || b < a || b >= n || b-a+1 > s.mr.Len() {
			fmt.Fprintf(o.out, "range %d-%d is outside the server's %d bytes (0-%d)\n", a, b, n, n-1)
			return nil
		}
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpRead, SGL: s.sge(0, b-a+1),
			RemoteAddr: s.peer.addr + uint64(a), RKey: s.peer.rkey}, verbs.WCRead); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "Read data (%d bytes from position %d): %s\n", b-a+1, a, s.mr.Bytes()[:b-a+1])
		return nil
	})
}

// --- lambda ----------------------------------------------------------

// lambdaFunc is a function the lambda server runs on request. Only these
// run: a request names one, it is looked up in this table, and anything
// else is refused. Nothing from the wire is ever executed.
type lambdaFunc struct {
	name string
	help string
	run  func(args []byte) ([]byte, error)
}

var lambdaFuncs = []lambdaFunc{
	{"checksum", "CRC-32 (IEEE) of the arguments, in hex", func(a []byte) ([]byte, error) {
		return fmt.Appendf(nil, "%08x", crc32.ChecksumIEEE(a)), nil
	}},
	{"wordcount", "number of words in the arguments", func(a []byte) ([]byte, error) {
		return strconv.AppendInt(nil, int64(len(strings.Fields(string(a)))), 10), nil
	}},
	{"upper", "the arguments in upper case", func(a []byte) ([]byte, error) { return bytes.ToUpper(a), nil }},
	{"sum", "sum of the arguments as little-endian int64s", func(a []byte) ([]byte, error) {
		if len(a)%8 != 0 {
			return nil, fmt.Errorf("sum takes int64s: %d bytes is not a multiple of 8", len(a))
		}
		var s int64
		for i := 0; i < len(a); i += 8 {
			s += int64(binary.LittleEndian.Uint64(a[i:]))
		}
		return strconv.AppendInt(nil, s, 10), nil
	}},
}

func lambdaNames() string {
	var n []string
	for _, f := range lambdaFuncs {
		n = append(n, f.name)
	}
	return strings.Join(n, ",")
}

func lambdaSetup(l *sessionListener, o *modeOpts) (any, error) {
	l.cfg.extra["functions"] = lambdaNames()
	return nil, nil
}

// The lambda buffer: the client WRITEs arguments into the first half of
// the server's buffer; the server WRITEs the result into the second half
// of the client's; the call and its answer travel as SENDs.
func lambdaServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	half := s.mr.Len() / 2
	for {
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return sessionEnd(err)
		}
		call := string(s.mr.Bytes()[half : half+int(wc.ByteLen)])
		answer := lambdaCall(call, s.mr.Bytes()[:half], func(res []byte) error {
			// The result goes into the second half of the client's buffer.
			peerHalf := uint64(s.peer.len / 2)
			if uint64(len(res)) > peerHalf {
				return fmt.Errorf("the result is %d bytes; the client's result region holds %d", len(res), peerHalf)
			}
			copy(s.mr.Bytes()[half:], res)
			return s.do(ctx, verbs.SendWR{Opcode: verbs.OpWrite, SGL: s.sge(half, len(res)),
				RemoteAddr: s.peer.addr + peerHalf, RKey: s.peer.rkey}, verbs.WCWrite)
		})
		fmt.Fprintf(o.out, "call %q -> %s\n", call, answer)
		if err := s.postRecv(0, half, half); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, half, []byte(answer), nil); err != nil {
			return err
		}
	}
}

// lambdaCall runs a "CALL name length" request on the arguments region
// and returns the answer: "OK length" or "ERR why".
func lambdaCall(call string, region []byte, write func([]byte) error) string {
	f := strings.Fields(call)
	if len(f) != 3 || f[0] != "CALL" {
		return fmt.Sprintf("ERR malformed call %.40q", call)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 0 {
		return fmt.Sprintf("ERR bad argument length %q", f[2])
	}
	if n > len(region) {
		return fmt.Sprintf("ERR arguments of %d bytes exceed the %d-byte argument region", n, len(region))
	}
	for _, fn := range lambdaFuncs {
		if fn.name != f[1] {
			continue
		}
		res, err := fn.run(region[:n])
		if err != nil {
			return "ERR " + err.Error()
		}
		if err := write(res); err != nil {
			return "ERR " + err.Error()
		}
		return fmt.Sprintf("OK %d", len(res))
	}
	return fmt.Sprintf("ERR unknown function %q (the server has %s)", f[1], lambdaNames())
}

func lambdaClient(ctx context.Context, s *session, o *modeOpts) error {
	if o.fn == "" || strings.ContainsAny(o.fn, " \t\n") {
		return cli.Usagef("--fn takes a function name, one word (the server has %s)", s.extra["functions"])
	}
	half := s.mr.Len() / 2
	args := []byte(o.str)
	if o.fn == "sum" && o.str != "" && !bytes.ContainsAny(args, "\x00") {
		// sum takes numbers on the command line: -s "1 2 3".
		var b []byte
		for _, w := range strings.Fields(o.str) {
			v, err := strconv.ParseInt(w, 10, 64)
			if err != nil {
				return cli.Usagef("sum takes integers: %q", w)
			}
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		args = b
	}
	fmt.Fprintf(o.out, "server functions: %s\n", s.extra["functions"])
	// WRITE what fits the server's argument region; the call announces
	// the true length, so the server refuses what does not fit.
	n := min(len(args), half, int(s.peer.len/2))
	copy(s.mr.Bytes(), args[:n])
	if n > 0 {
		cli.Step(s.log, roce.StepData, "RDMA WRITE %d bytes of arguments into the server's argument region", n)
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWrite, SGL: s.sge(0, n), RemoteAddr: s.peer.addr,
			RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
			return err
		}
	}
	if err := s.postRecv(1, 0, half); err != nil {
		return err
	}
	call := fmt.Sprintf("CALL %s %d", o.fn, len(args))
	if err := s.sendBytes(ctx, half, []byte(call), nil); err != nil {
		return err
	}
	wc, err := s.expect(ctx, verbs.WCRecv)
	if err != nil {
		return err
	}
	answer := string(s.mr.Bytes()[:wc.ByteLen])
	if rest, ok := strings.CutPrefix(answer, "OK "); ok {
		n, _ := strconv.Atoi(rest)
		fmt.Fprintf(o.out, "%s(%d bytes) = %s\n", o.fn, len(args), s.mr.Bytes()[half:half+n])
		return nil
	}
	return fmt.Errorf("the server refused: %s", strings.TrimPrefix(answer, "ERR "))
}

// --- params ----------------------------------------------------------

// paramsState is the parameter server's: the weights, updated under mu.
// Clients never read them directly: each READs the copy the server put in
// its own session's buffer before answering, so that no READ races with
// another client's update.
type paramsState struct {
	mu      sync.Mutex
	weights []byte // dim little-endian float64s
	dim     int
	lr      float64
	steps   int
}

func paramsSetup(l *sessionListener, o *modeOpts) (any, error) {
	st := &paramsState{dim: o.dim, lr: o.lr, weights: make([]byte, 8*o.dim)}
	for j := range o.dim {
		binary.LittleEndian.PutUint64(st.weights[8*j:], math.Float64bits(1))
	}
	l.cfg.extra["dim"] = strconv.Itoa(o.dim)
	fmt.Fprintf(o.out, "weights: %d float64s, all 1.0; learning rate %g\n", o.dim, o.lr)
	return st, nil
}

// The params protocol, in each session's buffer on the server: the client
// WRITEs its gradient (dim float64s) at 0 and SENDs "STEP i" (received at
// 8*dim); the server applies w -= lr*g under a lock, copies the weights to
// 8*dim+128 and answers "DONE i" (sent from 8*dim+64); the client READs
// the weights from there.
func paramsServer(ctx context.Context, s *session, o *modeOpts, state any) error {
	st := state.(*paramsState)
	b := s.mr.Bytes()
	for {
		wc, err := s.expect(ctx, verbs.WCRecv)
		if err != nil {
			return sessionEnd(err)
		}
		msg := string(b[8*st.dim : 8*st.dim+int(wc.ByteLen)])
		st.mu.Lock()
		w := st.weights
		for j := range st.dim {
			g := math.Float64frombits(binary.LittleEndian.Uint64(b[8*j:]))
			v := math.Float64frombits(binary.LittleEndian.Uint64(w[8*j:]))
			binary.LittleEndian.PutUint64(w[8*j:], math.Float64bits(v-st.lr*g))
		}
		st.steps++
		copy(b[8*st.dim+128:], w)
		st.mu.Unlock()
		if err := s.postRecv(0, 8*st.dim, 64); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, 8*st.dim+64, []byte(strings.Replace(msg, "STEP", "DONE", 1)), nil); err != nil {
			return err
		}
	}
}

// gradient is client id's gradient at an iteration: fixed, so the final
// weights do not depend on how clients interleave.
func gradient(id, j int) float64 { return float64(id+1) * 0.01 * float64(j+1) }

func paramsClient(ctx context.Context, s *session, o *modeOpts) error {
	dim, err := strconv.Atoi(s.extra["dim"])
	if err != nil || dim < 1 {
		return errors.New("the server did not describe its weights")
	}
	if s.peer.len < uint32(16*dim+128) || s.mr.Len() < 16*dim+128 {
		return errors.New("the server's buffers do not fit the weights")
	}
	waddr := s.peer.addr + uint64(8*dim+128)
	b := s.mr.Bytes()
	wOff := 8*dim + 128
	for it := range o.n {
		for j := range dim {
			binary.LittleEndian.PutUint64(b[8*j:], math.Float64bits(gradient(o.id, j)))
		}
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpWrite, SGL: s.sge(0, 8*dim), RemoteAddr: s.peer.addr,
			RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
			return err
		}
		if err := s.postRecv(1, 8*dim+64, 64); err != nil {
			return err
		}
		if err := s.sendBytes(ctx, 8*dim, []byte(fmt.Sprintf("STEP %d", it)), nil); err != nil {
			return err
		}
		if _, err := s.expect(ctx, verbs.WCRecv); err != nil {
			return err
		}
		if err := s.do(ctx, verbs.SendWR{Opcode: verbs.OpRead, SGL: s.sge(wOff, 8*dim), RemoteAddr: waddr,
			RKey: s.peer.rkey}, verbs.WCRead); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "iteration %d: weights %s\n", it, formatWeights(b[wOff:wOff+8*dim]))
	}
	return nil
}

func formatWeights(b []byte) string {
	var parts []string
	for j := 0; j+8 <= len(b); j += 8 {
		parts = append(parts, strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(b[j:])), 'f', 4, 64))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
