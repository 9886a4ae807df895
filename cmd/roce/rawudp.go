package main

// roce rawudp: the raw-UDP baseline that roce perf is measured against.
// It moves datagrams of RoCE packet size between two processes with the
// batching goroce's UDP transport uses (GSO runs of one message's
// packets on the sender, GRO on the receiver), and nothing else: no
// headers to build, no ICRC, no engine. It is the ceiling of a UDP-socket
// stack on the machine at hand. With --lat it is the latency floor
// instead: a ping-pong of small datagrams between the two processes, timed
// as perftest times a latency test.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/perfstat"
)

const rawudpUsage = "[-s BYTES] [--gso N] [--first BYTES] [-D SECS] [--lat [-n ITERS] [--busy-poll]] [-p PORT] [--bind ADDR] [--json] [SERVER]"

// rawudpLatSize is the default datagram size of --lat: the RoCE packet of a
// 2-byte RDMA WRITE (BTH, RETH, 2 bytes and their pad, ICRC).
const rawudpLatSize = 36

type rawudpConfig struct {
	size     int
	gso      int
	first    int
	secs     float64
	duration time.Duration
	port     int
	bind     string
	json     bool
	timeout  time.Duration
	lat      bool
	iters    int
	busy     bool
}

func runRawUDP(args []string, stdout, stderr io.Writer) int {
	var c rawudpConfig
	fs := newFlagSet("rawudp")
	fs.IntVar(&c.size, "s", 4112, "datagram size in `bytes` (4112: a 4096-byte RoCE payload with BTH and ICRC)")
	fs.IntVar(&c.gso, "gso", 15, "datagrams per send: a GSO run of N segments received with GRO (a 64 KiB message at MTU 4096 is one packet and a run of 15); 0 sends one datagram per sendmmsg entry, in batches of 64, without offloads")
	fs.Float64Var(&c.secs, "D", 3, "how many `seconds` the client sends")
	fs.IntVar(&c.port, "p", 18517, "UDP and TCP (control) `port` of the server")
	fs.StringVar(&c.bind, "bind", "", "local IP `address` (default: the server 127.0.0.1, a client on loopback 127.0.0.2)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of the text line")
	fs.IntVar(&c.first, "first", 0, "precede each GSO run with one datagram of this many `bytes` in the same sendmmsg, as an RDMA WRITE's first packet (4128 bytes with its RETH) precedes the run of its other 15")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on waiting for the peer")
	fs.BoolVar(&c.lat, "lat", false, "measure latency instead: a ping-pong of datagrams (-s defaults to 36 bytes, a 2-byte RDMA WRITE), reported as half round trips like perftest's")
	fs.IntVar(&c.iters, "n", 1000, "round trips of --lat")
	fs.BoolVar(&c.busy, "busy-poll", false, "with --lat, both sides spin on non-blocking receives instead of sleeping in them")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: roce rawudp %s\n\n%s.\nStart the server (no SERVER argument), then the client; the client prints what the server received.\n\n", rawudpUsage, rawudpSummary)
			printDefaults(fs, stdout)
			return exitOK
		}
		return exitCode(stderr, "rawudp", err)
	}
	sizeSet := false
	fs.Visit(func(f *flag.Flag) { sizeSet = sizeSet || f.Name == "s" })
	if c.lat && !sizeSet {
		c.size = rawudpLatSize
	}
	switch {
	case c.lat && (c.size < 4 || c.size > 8192):
		return exitCode(stderr, "rawudp", usageErr("-s must be 4 to 8192 bytes with --lat"))
	case !c.lat && (c.size < 64 || c.size > 8192):
		return exitCode(stderr, "rawudp", usageErr("-s must be 64 to 8192 bytes"))
	case c.gso < 0 || c.gso > 64 || c.gso*c.size > 65000:
		return exitCode(stderr, "rawudp", usageErr("--gso must be 0 to 64, and --gso times -s at most 65000 bytes (one UDP datagram)"))
	case c.first != 0 && (c.first < 64 || c.first > 8192 || c.gso == 0):
		return exitCode(stderr, "rawudp", usageErr("--first must be 64 to 8192 bytes, with --gso"))
	case c.secs <= 0 || c.secs > 600:
		return exitCode(stderr, "rawudp", usageErr("-D must be more than 0 and at most 600 seconds"))
	case c.port < 1 || c.port > 65535:
		return exitCode(stderr, "rawudp", usageErr("-p must be 1-65535"))
	case c.iters < perfstat.MinIters || c.iters > 10_000_000:
		return exitCode(stderr, "rawudp", usageErr("-n must be %d to 10000000", perfstat.MinIters))
	case c.busy && !c.lat:
		return exitCode(stderr, "rawudp", usageErr("--busy-poll goes with --lat"))
	case fs.NArg() > 1:
		return exitCode(stderr, "rawudp", usageErr("want at most one argument, the server's address"))
	}
	c.duration = time.Duration(c.secs * float64(time.Second))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer stop()
	var err error
	if fs.NArg() == 0 {
		err = rawudpServe(ctx, &c, stdout)
	} else {
		err = rawudpClient(ctx, &c, fs.Arg(0), stdout)
	}
	return exitCode(stderr, "rawudp", err)
}

const rawudpSummary = "the raw-UDP baseline: datagrams of RoCE packet size between two processes, batched as goroce's UDP transport batches, with no RoCE work"

// rawudpResult is what the server measured, sent back to the client.
type rawudpResult struct {
	Bytes     uint64  `json:"bytes"`
	Datagrams uint64  `json:"datagrams"`
	Seconds   float64 `json:"seconds"`
	Sent      uint64  `json:"sent_datagrams"`
	Size      int     `json:"size"`
	GSO       int     `json:"gso"`
	First     int     `json:"first,omitempty"`
	GBps      float64 `json:"gb_per_sec"`
	MiBps     float64 `json:"mib_per_sec"`
	Mpps      float64 `json:"mpps"`
}

func (r *rawudpResult) compute() {
	if r.Seconds > 0 {
		r.GBps = float64(r.Bytes) / r.Seconds / 1e9
		r.MiBps = float64(r.Bytes) / r.Seconds / (1 << 20)
		r.Mpps = float64(r.Datagrams) / r.Seconds / 1e6
	}
}

// rawSocket opens a blocking UDP socket on addr with big buffers; rcvTimeo
// bounds each receive so the receiver can see it should stop.
func rawSocket(addr netip.AddrPort, rcvTimeo time.Duration) (int, error) {
	fam := unix.AF_INET
	if addr.Addr().Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, 16 << 20}, {unix.SO_SNDBUFFORCE, 16 << 20}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], o[1]) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0]-32, o[1]) // SO_RCVBUF, SO_SNDBUF: capped by rmem_max
		}
	}
	if rcvTimeo > 0 {
		tv := unix.NsecToTimeval(rcvTimeo.Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err := unix.Bind(fd, sockaddrOf(addr)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %v: %w", addr, err)
	}
	return fd, nil
}

func sockaddrOf(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()}
}

// rawudpServe receives one client's run and reports it back.
func rawudpServe(ctx context.Context, c *rawudpConfig, stdout io.Writer) error {
	bind := c.bind
	if bind == "" {
		bind = "127.0.0.1"
	}
	ip, err := resolveAddr(bind)
	if err != nil {
		return usageErr("--bind: %v", err)
	}
	addr := netip.AddrPortFrom(ip, uint16(c.port))
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	fd, err := rawSocket(addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if c.gso > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
			return fmt.Errorf("UDP_GRO: %w (try --gso 0)", err)
		}
	}
	fmt.Fprintf(stdout, "rawudp server on %v, waiting for a client\n", addr)
	go func() { <-ctx.Done(); ln.Close() }()
	conn, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(c.timeout))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if strings.HasPrefix(line, "lat ") {
		return rawudpEchoServe(fd, conn, br, line, stdout)
	}
	var size, gso, first int
	if _, err := fmt.Sscanf(line, "start %d %d %d", &size, &gso, &first); err != nil {
		return fmt.Errorf("control: not a rawudp client (%.40q)", line)
	}
	var stop atomic.Bool
	done := make(chan rawudpResult, 1)
	go func() { done <- rawudpReceive(fd, size, first, &stop) }()
	if _, err := io.WriteString(conn, "ready\n"); err != nil {
		stop.Store(true)
		<-done
		return err
	}
	conn.SetDeadline(time.Now().Add(c.timeout + 10*time.Minute))
	line, err = br.ReadString('\n')
	// The client's datagrams are in the socket before its "stop": a last
	// moment lets the receiver drain them.
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	res := <-done
	if err != nil || !strings.HasPrefix(line, "stop ") {
		return fmt.Errorf("control: the client did not finish (%v)", err)
	}
	res.Sent, _ = strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "stop ")), 10, 64)
	res.Size, res.GSO, res.First = size, gso, first
	res.compute()
	b, _ := json.Marshal(&res)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintln(stdout, res.text())
	return nil
}

func (r *rawudpResult) text() string {
	first := ""
	if r.First > 0 {
		first = fmt.Sprintf(" after a %d-byte one", r.First)
	}
	return fmt.Sprintf("rawudp: %d-byte datagrams, gso %d%s: received %d of %d in %.3f s: %.3f GB/s (%.2f MiB/s), %.3f Mpps",
		r.Size, r.GSO, first, r.Datagrams, r.Sent, r.Seconds, r.GBps, r.MiBps, r.Mpps)
}

// rawudpReceive counts what arrives until stop, timing from the first
// datagram to the last. GRO hands over runs of size-byte segments, and
// the first-byte datagrams that precede them alone.
func rawudpReceive(fd, size, first int, stop *atomic.Bool) rawudpResult {
	const slots = 16
	bufs := make([]byte, slots*65536)
	iovs := make([]unix.Iovec, slots)
	msgs := make([]mmsg, slots)
	for i := range msgs {
		iovs[i].Base = &bufs[i*65536]
		iovs[i].SetLen(65536)
		msgs[i].hdr.Iov = &iovs[i]
		msgs[i].hdr.SetIovlen(1)
	}
	var res rawudpResult
	var start, last time.Time
	for !stop.Load() {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), slots, 0, 0, 0)
		if e != 0 {
			continue // EAGAIN from the receive timeout, EINTR
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		last = now
		for i := range int(n) {
			b := uint64(msgs[i].n)
			res.Bytes += b
			if first > 0 && b == uint64(first) {
				res.Datagrams++
				continue
			}
			res.Datagrams += (b + uint64(size) - 1) / uint64(size)
		}
	}
	if !start.IsZero() {
		res.Seconds = last.Sub(start).Seconds()
	}
	return res
}

// mmsg is struct mmsghdr.
type mmsg struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// rawudpClient sends for c.duration and prints what the server received.
func rawudpClient(ctx context.Context, c *rawudpConfig, server string, stdout io.Writer) error {
	sip, err := resolveAddr(server)
	if err != nil {
		return usageErr("%v", err)
	}
	saddr := netip.AddrPortFrom(sip, uint16(c.port))
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	conn, err := d.DialContext(dctx, "tcp", saddr.String())
	cancel()
	if err != nil {
		return fmt.Errorf("cannot reach the server: %w", err)
	}
	defer conn.Close()
	bind := c.bind
	if bind == "" {
		bind = conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()
		if bind == "127.0.0.1" {
			bind = "127.0.0.2"
		}
	}
	ip, err := resolveAddr(bind)
	if err != nil {
		return usageErr("--bind: %v", err)
	}
	fd, err := rawSocket(netip.AddrPortFrom(ip, 0), 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sockaddrOf(saddr)); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	conn.SetDeadline(time.Now().Add(c.timeout))
	br := bufio.NewReader(conn)
	if c.lat {
		return rawudpPingPong(ctx, fd, conn, br, c, stdout)
	}
	fmt.Fprintf(conn, "start %d %d %d\n", c.size, c.gso, c.first)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("control: the server did not start (%v)", err)
	}
	sent, err := rawudpSend(ctx, fd, c)
	if err != nil {
		return err
	}
	conn.SetDeadline(time.Now().Add(c.timeout))
	fmt.Fprintf(conn, "stop %d\n", sent)
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("control: no result from the server: %w", err)
	}
	var res rawudpResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if c.json {
		b, _ := json.Marshal(&res)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintln(stdout, res.text())
	}
	return nil
}

// rawudpSend sends for c.duration: GSO runs of c.gso datagrams, or
// sendmmsg batches of 64 single datagrams. It returns the datagrams sent.
func rawudpSend(ctx context.Context, fd int, c *rawudpConfig) (uint64, error) {
	const batch = 64
	payload := make([]byte, batch*c.size)
	for i := range payload {
		payload[i] = byte(i)
	}
	var sent uint64
	end := time.Now().Add(c.duration)
	if c.gso > 0 && c.first > 0 {
		return rawudpSendFirst(ctx, fd, c, payload, end)
	}
	if c.gso > 0 {
		oob := segmentCmsg(c.size)
		run := payload[:c.gso*c.size]
		for i := 0; ; i++ {
			if i%64 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
				break
			}
			if _, err := unix.SendmsgN(fd, run, oob, nil, 0); err != nil {
				if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EINTR) {
					continue
				}
				return sent, fmt.Errorf("sendmsg: %w (try --gso 0 where the kernel lacks UDP GSO)", err)
			}
			sent += uint64(c.gso)
		}
		return sent, nil
	}
	return rawudpSendBatches(ctx, fd, c, payload, end)
}

// segmentCmsg is the UDP_SEGMENT control message for size-byte segments.
func segmentCmsg(size int) []byte {
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
	return oob
}

// rawudpSendFirst sends, in each sendmmsg, a c.first-byte datagram and a
// GSO run of c.gso: the framing of an RDMA WRITE of (c.gso+1) packets.
func rawudpSendFirst(ctx context.Context, fd int, c *rawudpConfig, payload []byte, end time.Time) (uint64, error) {
	oob := segmentCmsg(c.size)
	head := make([]byte, c.first)
	iovs := []unix.Iovec{{Base: &head[0]}, {Base: &payload[0]}}
	iovs[0].SetLen(len(head))
	iovs[1].SetLen(c.gso * c.size)
	msgs := make([]mmsg, 2)
	for i := range msgs {
		msgs[i].hdr.Iov = &iovs[i]
		msgs[i].hdr.SetIovlen(1)
	}
	msgs[1].hdr.Control = &oob[0]
	msgs[1].hdr.SetControllen(len(oob))
	var sent uint64
	for i := 0; ; i++ {
		if i%64 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			return sent, nil
		}
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), 2, 0, 0, 0)
		if e != 0 {
			if e == unix.ENOBUFS || e == unix.ECONNREFUSED || e == unix.EINTR {
				continue
			}
			return sent, fmt.Errorf("sendmmsg: %w", e)
		}
		if n == 2 {
			sent += uint64(c.gso) + 1
		} else {
			sent++
		}
	}
}

// rawudpSendBatches sends sendmmsg batches of 64 single datagrams.
func rawudpSendBatches(ctx context.Context, fd int, c *rawudpConfig, payload []byte, end time.Time) (uint64, error) {
	const batch = 64
	var sent uint64
	iovs := make([]unix.Iovec, batch)
	msgs := make([]mmsg, batch)
	for i := range msgs {
		iovs[i].Base = &payload[i*c.size]
		iovs[i].SetLen(c.size)
		msgs[i].hdr.Iov = &iovs[i]
		msgs[i].hdr.SetIovlen(1)
	}
	for i := 0; ; i++ {
		if i%16 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			break
		}
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), batch, 0, 0, 0)
		if e != 0 {
			if e == unix.ENOBUFS || e == unix.ECONNREFUSED || e == unix.EINTR {
				continue
			}
			return sent, fmt.Errorf("sendmmsg: %w", e)
		}
		sent += uint64(n)
	}
	return sent, nil
}

// rawudpLatResult is what a --lat client measured.
type rawudpLatResult struct {
	Size     int                `json:"size"`
	Iters    int                `json:"iterations"`
	BusyPoll bool               `json:"busy_poll"`
	Lost     int                `json:"lost"`
	Results  map[string]float64 `json:"results"`
}

// rawudpEchoServe answers a --lat client: every datagram goes straight
// back to where it came from until the client says stop on the control
// connection.
func rawudpEchoServe(fd int, conn net.Conn, br *bufio.Reader, line string, stdout io.Writer) error {
	var size, busy int
	if _, err := fmt.Sscanf(line, "lat %d %d", &size, &busy); err != nil || size < 4 || size > 8192 {
		return fmt.Errorf("control: not a rawudp client (%.40q)", line)
	}
	if busy == 1 {
		if err := unix.SetNonblock(fd, true); err != nil {
			return err
		}
	}
	var stop atomic.Bool
	done := make(chan uint64, 1)
	go func() { done <- rawudpEcho(fd, &stop) }()
	if _, err := io.WriteString(conn, "ready\n"); err != nil {
		stop.Store(true)
		<-done
		return err
	}
	conn.SetDeadline(time.Time{})
	line, err := br.ReadString('\n')
	stop.Store(true)
	n := <-done
	if err != nil || line != "stop\n" {
		return fmt.Errorf("control: the client did not finish (%v)", err)
	}
	fmt.Fprintf(conn, "echoed %d\n", n)
	fmt.Fprintf(stdout, "rawudp: echoed %d %d-byte datagrams\n", n, size)
	return nil
}

// rawudpEcho sends every datagram back until stop and returns how many it
// echoed. The first datagram's source becomes the socket's peer, so the
// rest take plain reads and writes. A blocking socket wakes up from its
// receive timeout to look at stop; a non-blocking one spins.
func rawudpEcho(fd int, stop *atomic.Bool) uint64 {
	buf := make([]byte, 65536)
	var n uint64
	connected := false
	for !stop.Load() {
		if !connected {
			m, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || from == nil {
				continue
			}
			if unix.Sendto(fd, buf[:m], 0, from) == nil {
				n++
			}
			connected = unix.Connect(fd, from) == nil
			continue
		}
		m, err := unix.Read(fd, buf)
		if err != nil {
			continue // EAGAIN: the receive timeout, or nothing yet when spinning
		}
		if _, err := unix.Write(fd, buf[:m]); err == nil {
			n++
		}
	}
	return n
}

// rawudpPingPong runs c.iters round trips of c.size-byte datagrams (after
// 100 not counted) and prints the half round trips as perftest prints a
// latency test's. A datagram or echo lost is sent again, at most 10 times
// in a run; each carries its round's number, so a late echo is not taken
// for the next one's.
func rawudpPingPong(ctx context.Context, fd int, conn net.Conn, br *bufio.Reader, c *rawudpConfig, stdout io.Writer) error {
	const warmup, maxLost = 100, 10
	busy := 0
	if c.busy {
		busy = 1
		if err := unix.SetNonblock(fd, true); err != nil {
			return err
		}
	} else {
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	fmt.Fprintf(conn, "lat %d %d\n", c.size, busy)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("control: the server did not start (%v)", err)
	}
	out := make([]byte, c.size)
	in := make([]byte, 65536)
	tposted := make([]time.Duration, 0, c.iters)
	start := time.Now()
	lost := 0
	for i := 0; i < warmup+c.iters; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		binary.LittleEndian.PutUint32(out, uint32(i))
		t := time.Since(start)
		if _, err := unix.Write(fd, out); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		got, err := rawudpAwait(fd, in, uint32(i), c.busy)
		if err != nil {
			return err
		}
		if !got {
			if lost++; lost > maxLost {
				return fmt.Errorf("more than %d datagrams or echoes lost", maxLost)
			}
			i--
			continue
		}
		if i >= warmup {
			tposted = append(tposted, t)
		}
	}
	tposted = append(tposted, time.Since(start)) // the end of the last round trip
	conn.SetDeadline(time.Now().Add(c.timeout))
	io.WriteString(conn, "stop\n")
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "echoed ") {
		return fmt.Errorf("control: no answer from the server (%v)", err)
	}
	l := perfstat.Latencies(tposted, 2)
	res := rawudpLatResult{Size: c.size, Iters: c.iters, BusyPoll: c.busy, Lost: lost, Results: map[string]float64{
		"t_min_us": perfstat.Round(l.Min, 2), "t_max_us": perfstat.Round(l.Max, 2), "t_typical_us": perfstat.Round(l.Typical, 2),
		"t_avg_us": perfstat.Round(l.Avg, 2), "t_99_us": perfstat.Round(l.P99, 2),
	}}
	if c.json {
		b, _ := json.Marshal(&res)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	mode := "blocking receives"
	if c.busy {
		mode = "busy poll"
	}
	fmt.Fprintf(stdout, "rawudp: %d-byte datagrams, %d round trips (%s), half round trip: t_min %.2f us, t_typical %.2f us, t_avg %.2f us, t_99 %.2f us; %d lost\n",
		c.size, c.iters, mode, l.Min, l.Typical, l.Avg, l.P99, lost)
	return nil
}

// rawudpAwait waits for the echo of round seq: false after 200 ms without
// it (the datagram or its echo was lost). A blocking socket's receive
// timeout is those 200 ms.
func rawudpAwait(fd int, in []byte, seq uint32, busy bool) (bool, error) {
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		m, err := unix.Read(fd, in)
		switch {
		case err == nil && m >= 4 && binary.LittleEndian.Uint32(in) == seq:
			return true, nil
		case err == nil || err == unix.EINTR:
			// a late echo of an earlier round
		case err != unix.EAGAIN:
			return false, fmt.Errorf("receive: %w", err)
		case !busy || time.Now().After(deadline):
			return false, nil
		}
	}
}
