package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// rdma-lib (./rdma send|write|read|lambda [HOST]) sets its connection up
// without rdma_cm, on TCP port 18515: the client connects, writes the
// 40-byte description of its QP and buffer and reads the server's; the
// server reads first, then writes. The description is the program's
// struct qp_info_t in x86 byte order:
//
//	 0  QP number (4 bytes, little-endian)   4  padding
//	 8  GID (16 bytes), of GID index 1: the IPv4-mapped RoCEv2 GID
//	24  buffer address (8, little-endian)
//	32  rkey (4, little-endian)             36  padding
//
// PSNs are 0 both ways and never exchanged; both sides use path MTU 1024,
// ACK timeout 14, 7 retries, 7 RNR retries, RNR timer 12 and one READ in
// flight each way. Each side does all of that twice, on two TCP
// connections in a row (the program's main sets one connection up, then
// the mode's code its own): only the second QP pair carries the mode's
// traffic; the first stays up, unused, until the program ends. The client
// tries each TCP connection 3 times, 1 s apart, since the server listens
// for the second one only once the first is set up.
//
// A goroce side marks the padding at 36 with "gR", 1 and its mode, so that
// two goroce sides of different modes refuse each other, as over rdma_cm.
// The program leaves that padding as its compiler does, and ignores it.

const (
	rdmalibBuf     = 4096 // MAX_BUFFER_SIZE: each side's buffer
	rdmalibInfoLen = 40   // sizeof(struct qp_info_t)
	// rdmalibDialFor is how long a client tries again a refused TCP
	// connection (the program: 3 tries, 1 s apart), and rdmalibDialGap
	// how long it waits between tries.
	rdmalibDialFor = 3 * time.Second
	rdmalibDialGap = 250 * time.Millisecond
)

// rdmalibModes numbers the modes in a goroce side's mark.
var rdmalibModes = []string{1: "send", 2: "write", 3: "read", 4: "lambda"}

// rdmalibInfo is one side's struct qp_info_t.
type rdmalibInfo struct {
	qpn  uint32
	gid  [16]byte
	addr uint64
	rkey uint32
	mode string // a goroce side's mode, from its mark; "" for the program
}

// marshal returns the 40 bytes of i, with the mark of i.mode when set.
func (i *rdmalibInfo) marshal() []byte {
	b := make([]byte, rdmalibInfoLen)
	binary.LittleEndian.PutUint32(b, i.qpn)
	copy(b[8:], i.gid[:])
	binary.LittleEndian.PutUint64(b[24:], i.addr)
	binary.LittleEndian.PutUint32(b[32:], i.rkey)
	for n, m := range rdmalibModes {
		if m != "" && m == i.mode {
			copy(b[36:], []byte{'g', 'R', 1, byte(n)})
		}
	}
	return b
}

// parseRdmalibInfo reads a description; b holds rdmalibInfoLen bytes.
func parseRdmalibInfo(b []byte) rdmalibInfo {
	i := rdmalibInfo{qpn: binary.LittleEndian.Uint32(b), addr: binary.LittleEndian.Uint64(b[24:]),
		rkey: binary.LittleEndian.Uint32(b[32:])}
	copy(i.gid[:], b[8:24])
	if bytes.Equal(b[36:39], []byte{'g', 'R', 1}) && int(b[39]) < len(rdmalibModes) {
		i.mode = rdmalibModes[b[39]]
	}
	return i
}

// rdmalibDescribe returns the description of s's QP and buffer.
func rdmalibDescribe(s *session, mode string) *rdmalibInfo {
	gid, _ := s.dev.GID(0)
	return &rdmalibInfo{qpn: s.qp.QPN(), gid: gid, addr: s.mr.Addr(), rkey: s.mr.RKey(), mode: mode}
}

// exchangeRdmalib sends s's description on conn and reads the peer's: the
// client writes first, the server reads first. Both within c.timeout.
func exchangeRdmalib(conn net.Conn, s *session, c *sessionConfig, client bool) (rdmalibInfo, error) {
	conn.SetDeadline(time.Now().Add(c.timeout))
	defer conn.SetDeadline(time.Time{})
	mine := rdmalibDescribe(s, c.mode).marshal()
	theirs := make([]byte, rdmalibInfoLen)
	if client {
		if _, err := conn.Write(mine); err != nil {
			return rdmalibInfo{}, fmt.Errorf("sending the QP description: %w", err)
		}
	}
	if n, err := io.ReadFull(conn, theirs); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// io.EOF itself only when nothing came (a port probe).
			return rdmalibInfo{}, fmt.Errorf("the peer closed the connection after %d bytes of the 40-byte QP description "+
				"(is it rdma-lib's ./rdma, on port %d?): %w", n, c.port, err)
		}
		return rdmalibInfo{}, fmt.Errorf("reading the peer's QP description: %w", err)
	}
	if !client {
		if _, err := conn.Write(mine); err != nil {
			return rdmalibInfo{}, fmt.Errorf("sending the QP description: %w", err)
		}
	}
	return parseRdmalibInfo(theirs), nil
}

// connectRdmalib moves s's QP to RTS towards the peer of info, with
// rdma-lib's attributes: PSN 0 both ways, the path MTU (1024 unless
// --mtu), timeout 14, 7 retries, 7 RNR retries, RNR timer 12, one READ
// each way (roce.ConnParams' defaults).
func connectRdmalib(s *session, c *sessionConfig, theirs rdmalibInfo) error {
	if theirs.mode != "" && theirs.mode != c.mode {
		server, client := c.mode, theirs.mode
		if s.role == "client" {
			server, client = client, server
		}
		return fmt.Errorf("mode mismatch: the server runs --mode %s, the client asked for --mode %s", server, client)
	}
	if theirs.gid == ([16]byte{}) {
		return fmt.Errorf("the peer's QP description has no GID (rdma-lib reads GID index 1: is the peer's RDMA device on an IP interface?)")
	}
	mtu, _ := bth.MTUAtMost(c.mtu)
	cli.Step(s.log, roce.StepControl, "connect QP %d to the peer's QP %d (path MTU %d, PSN 0 both ways)", s.qp.QPN(), theirs.qpn, mtu.Bytes())
	if err := roce.Connect(s.qp, &roce.Remote{QPN: theirs.qpn, GID: theirs.gid}, &roce.ConnParams{MTU: mtu}); err != nil {
		return err
	}
	s.peer = bufInfo{addr: theirs.addr, rkey: theirs.rkey, len: rdmalibBuf}
	s.extra = map[string]string{}
	return nil
}

// dialRdmalib is rdma-lib's client: both connections, both exchanges; the
// session is the second QP pair, and holds the first.
func dialRdmalib(ctx context.Context, c *sessionConfig, server string, log *slog.Logger) (*session, error) {
	addr := net.JoinHostPort(server, strconv.Itoa(c.port))
	cli.Step(log, roce.StepControl, "connect to %s over TCP for the first exchange", addr)
	conn1, err := dialRdmalibTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	cfg, err := c.dev.Config(cli.LocalAddr(conn1).String())
	if err != nil {
		conn1.Close()
		return nil, err
	}
	s, err := openSession(c, "client", cfg, log)
	if err != nil {
		conn1.Close()
		return nil, err
	}
	var conn2 net.Conn
	s.hangup = func() {
		conn1.Close()
		if conn2 != nil {
			conn2.Close()
		}
	}
	fail := func(err error) (*session, error) { s.close(); return nil, err }
	if s.idle, err = setupRdmalibIdle(conn1, c, "client", s.dev, s.pd, log); err != nil {
		return fail(err)
	}
	cli.Step(log, roce.StepControl, "connect to %s over TCP for the second exchange: the QPs that carry the traffic", addr)
	if conn2, err = dialRdmalibTCP(ctx, addr); err != nil {
		return fail(err)
	}
	theirs, err := exchangeRdmalib(conn2, s, c, true)
	if err != nil {
		return fail(err)
	}
	if err := connectRdmalib(s, c, theirs); err != nil {
		return fail(err)
	}
	hangup := s.hangup
	s.watchTCP(conn2)
	s.hangup = hangup
	return s, nil
}

// setupRdmalibIdle sets up the first of rdma-lib's two QP pairs on conn:
// a QP of its own, connected and never used.
func setupRdmalibIdle(conn net.Conn, c *sessionConfig, role string, dev verbs.Device, pd verbs.PD, log *slog.Logger) (*session, error) {
	idleCfg := *c
	idleCfg.recvs = nil
	idle, err := newSession(&idleCfg, role, dev, pd, log)
	if err != nil {
		return nil, err
	}
	theirs, err := exchangeRdmalib(conn, idle, c, role == "client")
	if err == nil {
		err = connectRdmalib(idle, c, theirs)
	}
	if err != nil {
		idle.freeResources()
		return nil, err
	}
	return idle, nil
}

// dialRdmalibTCP connects to addr, trying again for rdmalibDialFor while
// the connection is refused.
func dialRdmalibTCP(ctx context.Context, addr string) (net.Conn, error) {
	giveUp := time.Now().Add(rdmalibDialFor)
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the program's SO_SNDTIMEO
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(giveUp) {
			return nil, cli.DialError(addr, "roce server --mode MODE, or rdma-lib's ./rdma MODE", err)
		}
		t := time.NewTimer(rdmalibDialGap)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// acceptRdmalib is rdma-lib's server: both connections, both exchanges.
// A connection that closes before a byte (a port probe) is no client.
func (l *sessionListener) acceptRdmalib(ctx context.Context) (*session, error) {
	var conn1 net.Conn
	var idle *session
	for idle == nil {
		var err error
		if conn1, err = l.acceptTCP(ctx, 0); err != nil {
			return nil, err
		}
		idle, err = setupRdmalibIdle(conn1, l.cfg, "server", l.dev, l.pd, l.log)
		if err != nil {
			conn1.Close()
			if errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				continue
			}
			return nil, fmt.Errorf("exchange with %v: %w", conn1.RemoteAddr(), err)
		}
	}
	// The client comes back at once for the second connection.
	conn2, err := l.acceptTCP(ctx, l.cfg.timeout)
	if err != nil {
		idle.freeResources()
		conn1.Close()
		if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("%v did not come back for the second exchange: %w", conn1.RemoteAddr(), err)
		}
		return nil, err
	}
	s, err := l.newSession()
	if err == nil {
		s.idle = idle
		if l.cfg.prepare != nil {
			l.cfg.prepare(s)
		}
		var theirs rdmalibInfo
		if theirs, err = exchangeRdmalib(conn2, s, l.cfg, false); err == nil {
			err = connectRdmalib(s, l.cfg, theirs)
		}
		if err != nil {
			s.freeResources()
		}
	}
	if err != nil {
		idle.freeResources()
		conn1.Close()
		conn2.Close()
		return nil, fmt.Errorf("exchange with %v: %w", conn2.RemoteAddr(), err)
	}
	s.watchTCP(conn2)
	s.hangup = func() { conn1.Close(); conn2.Close() }
	return s, nil
}
