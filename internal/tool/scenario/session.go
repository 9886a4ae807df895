package scenario

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// session is one connected end of a client/server scenario: a QP towards
// the peer, a registered buffer, and what the peer told about its own.
type session struct {
	role string
	dev  verbs.Device
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	log  *slog.Logger
	spin time.Duration

	// The peer's buffer, from the exchange.
	peer bufInfo
	// Extra key=value pairs of the peer's hello (scenario parameters).
	extra map[string]string
	// done is closed when the peer hangs up: the TCP connection of the
	// exchange ends, or rdma_cm's DREQ comes. hangup ends the session
	// from this side; remote names the peer.
	done   <-chan struct{}
	hangup func()
	remote string
	// ownDev: the session opened the device and closes it (the client);
	// a server's sessions share the listener's.
	ownDev bool
	// rdev is dev as roce.Open made it, for its counters.
	rdev *roce.Device
	// idle is rdma-lib's first QP pair, set up and never used; it goes
	// with the session.
	idle *session
	// warn is where the session warns of trouble it sees; watch follows
	// the work request being waited for (see mtu.go).
	warn    io.Writer
	watch   *mtuWatch
	pathMTU int // the QP's, once read (0: not yet)
}

// bufInfo is a registered buffer as the peer may address it.
type bufInfo struct {
	addr uint64
	rkey uint32
	len  uint32
}

// String formats b as the scenarios print a buffer.
func (b bufInfo) String() string {
	return fmt.Sprintf("addr: %#x, len: %d, stag: %#x", b.addr, b.len, b.rkey)
}

// hello is what each side sends over TCP before the QPs connect.
type hello struct {
	mode  string
	qpn   uint32
	psn   uint32
	gid   [16]byte
	buf   bufInfo
	mtu   int
	extra map[string]string
}

const helloVersion = "goroce-session/1"

func (h *hello) marshal() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s mode=%s qpn=%x psn=%x gid=%x addr=%x rkey=%x len=%d mtu=%d",
		helloVersion, h.mode, h.qpn, h.psn, h.gid[:], h.buf.addr, h.buf.rkey, h.buf.len, h.mtu)
	for k, v := range h.extra {
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	b.WriteByte('\n')
	return b.String()
}

func parseHello(line string) (*hello, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil, errors.New("empty hello")
	}
	if f[0] == "error" {
		return nil, &peerError{strings.TrimSpace(strings.TrimPrefix(line, "error"))}
	}
	if f[0] != helloVersion {
		return nil, fmt.Errorf("the peer does not speak %s (it sent %.40q)", helloVersion, line)
	}
	h := &hello{extra: map[string]string{}}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("malformed hello field %q", kv)
		}
		var err error
		num := func(base int, bits int) uint64 {
			n, e := strconv.ParseUint(v, base, bits)
			if e != nil && err == nil {
				err = fmt.Errorf("hello field %s=%q: %w", k, v, e)
			}
			return n
		}
		switch k {
		case "mode":
			h.mode = v
		case "qpn":
			h.qpn = uint32(num(16, 24))
		case "psn":
			h.psn = uint32(num(16, 24))
		case "gid":
			b, e := hex.DecodeString(v)
			if e != nil || len(b) != 16 {
				return nil, fmt.Errorf("hello field gid=%q is not 16 hex bytes", v)
			}
			copy(h.gid[:], b)
		case "addr":
			h.buf.addr = num(16, 64)
		case "rkey":
			h.buf.rkey = uint32(num(16, 32))
		case "len":
			h.buf.len = uint32(num(10, 32))
		case "mtu":
			h.mtu = int(num(10, 16))
		default:
			h.extra[k] = v
		}
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// peerError is an error the peer reported in the exchange.
type peerError struct{ msg string }

// Error says what the peer refused.
func (e *peerError) Error() string { return "the peer refused: " + e.msg }

// sessionConfig is what both roles need to set a session up.
type sessionConfig struct {
	dev     cli.DeviceFlags
	mode    string
	port    int
	mtu     int
	bufSize int               // bytes of the local buffer
	extra   map[string]string // parameters for the peer
	timeout time.Duration     // bound on the exchange and every wait
	spin    time.Duration     // busy-poll time before blocking on a CQ
	recvs   [][2]int          // receives (offset, length) posted before the exchange
	prepare func(*session)    // runs on a server session before the client hears back
	cm      string            // how the sides connect: rdmacm or tcp
	proto   string            // --proto: seed or goroce
	program *program          // the published program whose protocol the sides speak, or nil
	warn    io.Writer         // where a session warns of trouble it sees (standard error)
}

// cmSeed returns how the mode's published program connects over rdma_cm,
// or nil for goroce's private data.
func (c *sessionConfig) cmSeed() *cmSeed {
	if c.program == nil || c.program.cm != "rdmacm" {
		return nil
	}
	return cmSeeds[c.mode]
}

// bufLen is the size of a session's buffer: --buf, and for rdma-lib's
// protocol room for the program's 4096 bytes and the replies after them.
func (c *sessionConfig) bufLen() int {
	if c.rdmalib() {
		return max(c.bufSize, 2*rdmalibBuf)
	}
	return max(c.bufSize, 64)
}

// rdmalib reports whether the sides set up their connection with
// rdma-lib's TCP exchange.
func (c *sessionConfig) rdmalib() bool { return c.program == rdmaLib }

// openPD opens the device cfg describes (a client's moves to a free
// loopback address, see cli.DeviceFlags.Open) and allocates its
// protection domain; it closes the device when that fails.
func (c *sessionConfig) openPD(cfg *roce.Config, client bool, log *slog.Logger) (*roce.Device, verbs.PD, error) {
	dev, err := c.dev.Open(cfg, client, log)
	if err != nil {
		return nil, nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, pd, nil
}

// openSession opens a device and sets a session up on it (the client).
func openSession(c *sessionConfig, role string, cfg *roce.Config, log *slog.Logger) (*session, error) {
	dev, pd, err := c.openPD(cfg, true, log)
	if err != nil {
		return nil, err
	}
	s, err := newSession(c, role, dev, pd, log)
	if err != nil {
		dev.Close()
		return nil, err
	}
	s.ownDev, s.rdev = true, dev
	return s, nil
}

// newSession makes the CQ, QP and buffer of a session on dev and pd.
func newSession(c *sessionConfig, role string, dev verbs.Device, pd verbs.PD, log *slog.Logger) (*session, error) {
	s := &session{role: role, dev: dev, pd: pd, log: log, spin: c.spin, warn: c.warn}
	if s.warn == nil {
		s.warn = io.Discard
	}
	cli.Step(log, roce.StepControl, "set up CQ, QP and a %d-byte buffer", c.bufSize)
	var err error
	if s.cq, err = dev.CreateCQ(256); err != nil {
		return nil, err
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		s.cq.Destroy()
		return nil, err
	}
	if s.mr, err = s.pd.RegMR(make([]byte, c.bufLen()), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		s.qp.Destroy()
		s.cq.Destroy()
		return nil, err
	}
	if err := roce.ModifyToInit(s.qp, nil); err != nil {
		s.freeResources()
		return nil, err
	}
	for i, r := range c.recvs {
		if err := s.postRecv(uint64(i), r[0], r[1]); err != nil {
			s.freeResources()
			return nil, err
		}
	}
	return s, nil
}

// hello is what this side tells the peer: its QP, a random first PSN,
// its buffer, and its path MTU (--mtu, or the device's active MTU).
func (s *session) hello(mode string, mtu int, extra map[string]string) *hello {
	if mtu <= 0 {
		mtu = s.dev.ActiveMTU().Bytes()
	}
	gid, _ := s.dev.GID(0)
	return &hello{mode: mode, qpn: s.qp.QPN(), psn: rand.Uint32() & 0xFFFFFF, gid: gid,
		buf: bufInfo{s.mr.Addr(), s.mr.RKey(), uint32(s.mr.Len())}, mtu: mtu, extra: extra}
}

// connect moves the QP to RTS towards the peer of the exchange.
func (s *session) connect(mine, theirs *hello) error {
	active := s.dev.ActiveMTU().Bytes()
	limit := func(n int) int { // 0: an older peer's "no limit"
		if n <= 0 {
			return active
		}
		return n
	}
	mtu, _ := bth.MTUAtMost(min(limit(mine.mtu), limit(theirs.mtu), active))
	p := &roce.ConnParams{MTU: mtu, PSN: mine.psn, MaxRDAtomic: 16, MaxDestRDAtomic: 16}
	cli.Step(s.log, roce.StepControl, "connect QP %d to the peer's QP %d (path MTU %d)", s.qp.QPN(), theirs.qpn, mtu.Bytes())
	if err := roce.Connect(s.qp, &roce.Remote{QPN: theirs.qpn, PSN: theirs.psn, GID: theirs.gid}, p); err != nil {
		return err
	}
	s.peer, s.extra = theirs.buf, theirs.extra
	return nil
}

// watchTCP makes conn, the TCP connection of the exchange, the session's
// lifeline: its end is the peer's departure, closing it is hanging up.
func (s *session) watchTCP(conn net.Conn) {
	done := make(chan struct{})
	s.done, s.remote = done, conn.RemoteAddr().String()
	s.hangup = func() { conn.Close() }
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := conn.Read(buf); err != nil {
				close(done)
				return
			}
		}
	}()
}

// close tears the session down.
func (s *session) close() {
	if s.hangup != nil {
		s.hangup()
	}
	if s.ownDev {
		s.dev.Close()
		return
	}
	if s.idle != nil {
		s.idle.freeResources()
	}
	s.freeResources()
}

func (s *session) freeResources() {
	s.qp.Destroy()
	s.mr.Dereg()
	s.cq.Destroy()
}

// errPeerGone means the peer ended the session.
var errPeerGone = errors.New("the peer disconnected")

// sessionEnd is what a server's loop returns when waiting for the client's
// next message failed with err: nothing when the client has gone (the
// session's normal end), else err.
func sessionEnd(err error) error {
	if errors.Is(err, errPeerGone) {
		return nil
	}
	return err
}

// peerGrace is how long a session keeps polling after the peer hung up,
// for completions already on their way.
const peerGrace = 200 * time.Millisecond

// wait returns the next completion, busy-polling for s.spin first and
// then blocking, until ctx ends or the peer goes away.
func (s *session) wait(ctx context.Context) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(s.spin)
	var gone time.Time
	for i := 0; ; i++ {
		if s.cq.Poll(wc) == 1 {
			return wc[0], nil
		}
		if i%64 == 0 {
			if time.Now().Before(deadline) {
				continue
			}
			select {
			case <-s.done:
				// Completions already on their way (an ACK for our last
				// send) still come; after that, the peer is gone.
				if gone.IsZero() {
					gone = time.Now()
				} else if time.Since(gone) > peerGrace {
					return verbs.WC{}, errPeerGone
				}
			case <-ctx.Done():
				return verbs.WC{}, ctx.Err()
			default:
			}
			s.look(false)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			s.cq.Wait(wctx)
			cancel()
		}
	}
}

// expect waits for a completion and checks its status and opcode.
func (s *session) expect(ctx context.Context, op verbs.WCOpcode) (verbs.WC, error) {
	wc, err := s.expectAny(ctx)
	if err == nil && wc.Opcode != op {
		err = fmt.Errorf("expected a %v completion, got %v", op, &wc)
	}
	return wc, err
}

// expectAny waits for a completion of any opcode and checks its status.
func (s *session) expectAny(ctx context.Context) (verbs.WC, error) {
	wc, err := s.wait(ctx)
	if err != nil {
		return wc, err
	}
	if wc.Status == verbs.WRFlushErr {
		// A disconnect moves the QP to ERR, which flushes what was
		// posted: when the peer is leaving, that is the session's end.
		select {
		case <-s.done:
			return wc, errPeerGone
		case <-time.After(peerGrace):
		}
	}
	if wc.Status != verbs.Success {
		return wc, fmt.Errorf("%v completed with %w", wc.Opcode, wc.Status)
	}
	return wc, nil
}

// sge returns the SGE for n bytes at off in the local buffer.
func (s *session) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

// postRecv posts a receive of n bytes at off.
func (s *session) postRecv(id uint64, off, n int) error {
	return s.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: s.sge(off, n)}})
}

// do posts one signaled work request and waits for its completion.
func (s *session) do(ctx context.Context, wr verbs.SendWR, op verbs.WCOpcode) error {
	if err := s.postSend(wr); err != nil {
		return err
	}
	_, err := s.expect(ctx, op)
	return s.settle(err)
}

// postSend posts one signaled work request, watched for the path-MTU trap
// (mtu.go) until settle.
func (s *session) postSend(wr verbs.SendWR) error {
	wr.Flags |= verbs.Signaled
	s.watch = s.watchMTU(&wr)
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		s.watch = nil
		return err
	}
	return nil
}

// expectBoth waits for one successful completion of each of ops, in
// whichever order they come.
func (s *session) expectBoth(ctx context.Context, ops ...verbs.WCOpcode) ([]verbs.WC, error) {
	got := make([]verbs.WC, len(ops))
	seen := make([]bool, len(ops))
	for range ops {
		wc, err := s.expectAny(ctx)
		if err != nil {
			return got, err
		}
		i := slices.Index(ops, wc.Opcode)
		if i < 0 || seen[i] {
			return got, fmt.Errorf("unexpected %v", &wc)
		}
		got[i], seen[i] = wc, true
	}
	return got, nil
}

// sendBytes SENDs b from off in the local buffer (after copying it there).
func (s *session) sendBytes(ctx context.Context, off int, b []byte, imm *uint32) error {
	copy(s.mr.Bytes()[off:], b)
	wr := verbs.SendWR{Opcode: verbs.OpSend, SGL: s.sge(off, len(b))}
	if imm != nil {
		wr.Opcode, wr.Imm = verbs.OpSendImm, *imm
	}
	return s.do(ctx, wr, verbs.WCSend)
}

// dialSession connects a client to the server, over rdma_cm, rdma-lib's
// TCP exchange or goroce's.
func dialSession(ctx context.Context, c *sessionConfig, server string, log *slog.Logger) (*session, error) {
	switch {
	case c.cm == "rdmacm":
		return dialSessionCM(ctx, c, server, log)
	case c.rdmalib():
		return dialRdmalib(ctx, c, server, log)
	}
	return dialSessionTCP(ctx, c, server, log)
}

// dialSessionTCP is the client's side of the TCP exchange.
func dialSessionTCP(ctx context.Context, c *sessionConfig, server string, log *slog.Logger) (*session, error) {
	host := server
	addr := net.JoinHostPort(host, strconv.Itoa(c.port))
	cli.Step(log, roce.StepControl, "connect to %s over TCP for the exchange", addr)
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, cli.DialError(addr, "roce server --mode "+c.mode+" --cm tcp", err)
	}
	// The device's address: --bind, or the address this host reaches the
	// server from.
	cfg, err := c.dev.Config(cli.LocalAddr(conn).String())
	if err != nil {
		conn.Close()
		return nil, err
	}
	s, err := openSession(c, "client", cfg, log)
	if err != nil {
		conn.Close()
		return nil, err
	}
	s.hangup = func() { conn.Close() }
	mine := s.hello(c.mode, c.mtu, c.extra)
	conn.SetDeadline(time.Now().Add(c.timeout))
	cli.Step(log, roce.StepControl, "exchange QP info: send mine (QPN %d), read the server's", mine.qpn)
	if _, err := conn.Write([]byte(mine.marshal())); err != nil {
		s.close()
		return nil, fmt.Errorf("exchange: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		s.close()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("exchange: the server closed the connection before answering")
		}
		return nil, fmt.Errorf("exchange: %w", err)
	}
	theirs, err := parseHello(line)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("exchange: %w", err)
	}
	if err := s.connect(mine, theirs); err != nil {
		s.close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	s.watchTCP(conn)
	return s, nil
}

// sessionListener is the server's side of the exchange. It owns the
// device; each accepted client gets a session (CQ, QP, buffer) on it.
type sessionListener struct {
	ln   net.Listener // the TCP exchange's, or nil over rdma_cm
	cfg  *sessionConfig
	dev  verbs.Device
	rdev *roce.Device
	pd   verbs.PD
	log  *slog.Logger

	// Over rdma_cm.
	agent     *cm.Agent
	cmln      *cm.Listener
	pending   *session // the session onRequest made for the request Accept returns
	refused   error    // why onRequest refused the last request
	oneClient bool     // a refused client ends the server
	cancel    func()
}

// listenSession opens the server's device on --bind (127.0.0.1 for the
// udp transport when unset) and listens for clients on TCP there.
func listenSession(c *sessionConfig, log *slog.Logger) (*sessionListener, error) {
	def := ""
	if c.dev.Transport == "udp" {
		def = "127.0.0.1"
	}
	if def == "" && c.dev.Bind == "" {
		return nil, cli.Usagef("--bind is needed with --transport %s (the address clients reach)", c.dev.Transport)
	}
	cfg, err := c.dev.Config(def)
	if err != nil {
		return nil, err
	}
	dev, pd, err := c.openPD(cfg, false, log)
	if err != nil {
		return nil, err
	}
	host := dev.Addr().String()
	if c.dev.Transport == "mem" {
		host = "127.0.0.1" // the in-process network's addresses are not the host's
	}
	l := &sessionListener{cfg: c, dev: dev, rdev: dev, pd: pd, log: log}
	if c.cm == "rdmacm" {
		if err := l.listenCM(context.Background(), dev.Addr()); err != nil {
			dev.Close()
			return nil, err
		}
		return l, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(c.port)))
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	cli.Step(log, roce.StepControl, "listen on %v for the exchange; RoCE device %s", ln.Addr(), dev.Name())
	l.ln = ln
	return l, nil
}

// exchangeError is the failure of one client's exchange; the listener
// goes on.
type exchangeError struct{ err error }

// Error and Unwrap are those of the exchange's error.
func (e *exchangeError) Error() string { return e.err.Error() }

// Unwrap returns the exchange's error.
func (e *exchangeError) Unwrap() error { return e.err }

// accept waits for a client and sets a session up with it. A client that
// asks for another mode is refused with an error both sides print; such
// failures of one client are *exchangeError.
func (l *sessionListener) accept(ctx context.Context) (*session, error) {
	if l.cmln != nil {
		return l.acceptCM(ctx)
	}
	var s *session
	var err error
	if l.cfg.rdmalib() {
		s, err = l.acceptRdmalib(ctx)
	} else {
		s, err = l.accept1(ctx)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		var ee *exchangeError
		if !errors.As(err, &ee) {
			err = &exchangeError{err}
		}
	}
	return s, err
}

func (l *sessionListener) accept1(ctx context.Context) (*session, error) {
	var conn net.Conn
	var line string
	for conn == nil {
		var err error
		if conn, err = l.acceptTCP(ctx, 0); err != nil {
			return nil, err
		}
		conn.SetDeadline(time.Now().Add(l.cfg.timeout))
		line, err = bufio.NewReader(conn).ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			// A connection that closed without a word (a port probe):
			// not a client.
			conn.Close()
			conn = nil
			continue
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("exchange with %v: %w", conn.RemoteAddr(), err)
		}
	}
	theirs, err := parseHello(line)
	if err != nil {
		fmt.Fprintf(conn, "error %v\n", err)
		conn.Close()
		return nil, fmt.Errorf("exchange with %v: %w", conn.RemoteAddr(), err)
	}
	if theirs.mode != l.cfg.mode {
		msg := fmt.Sprintf("mode mismatch: the server runs --mode %s, the client asked for --mode %s", l.cfg.mode, theirs.mode)
		fmt.Fprintf(conn, "error %s\n", msg)
		conn.Close()
		return nil, errors.New(msg)
	}
	s, err := l.newSession()
	if err != nil {
		fmt.Fprintf(conn, "error the server could not set up a QP: %v\n", err)
		conn.Close()
		return nil, err
	}
	s.hangup = func() { conn.Close() }
	if l.cfg.prepare != nil {
		l.cfg.prepare(s)
	}
	mine := s.hello(l.cfg.mode, l.cfg.mtu, l.cfg.extra)
	if err := s.connect(mine, theirs); err != nil {
		fmt.Fprintf(conn, "error %v\n", err)
		s.close()
		return nil, err
	}
	if _, err := conn.Write([]byte(mine.marshal())); err != nil {
		s.close()
		return nil, fmt.Errorf("exchange: %w", err)
	}
	conn.SetDeadline(time.Time{})
	s.watchTCP(conn)
	return s, nil
}

// newSession makes a server session on the listener's device.
func (l *sessionListener) newSession() (*session, error) {
	s, err := newSession(l.cfg, "server", l.dev, l.pd, l.log)
	if err != nil {
		return nil, err
	}
	s.rdev = l.rdev
	return s, nil
}

// acceptTCP waits for the next TCP connection, for at most limit (0: no
// limit). The end of ctx closes the listener.
func (l *sessionListener) acceptTCP(ctx context.Context, limit time.Duration) (net.Conn, error) {
	if tl, ok := l.ln.(*net.TCPListener); ok {
		var d time.Time
		if limit > 0 {
			d = time.Now().Add(limit)
		}
		tl.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { l.ln.Close() })
	defer stop()
	conn, err := l.ln.Accept()
	var ne net.Error
	switch {
	case err == nil:
		return conn, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &ne) && ne.Timeout():
		return nil, fmt.Errorf("no connection within %v", limit)
	}
	return nil, fmt.Errorf("accept: %w", net.ErrClosed)
}

func (l *sessionListener) close() {
	if l.ln != nil {
		l.ln.Close()
	}
	if l.cmln != nil {
		l.cmln.Close()
		l.agent.Close()
	}
	l.dev.Close()
}
