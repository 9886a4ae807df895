package main

// roce rawudp: the raw-UDP baseline that roce perf is measured against.
// It moves datagrams of RoCE packet size between two processes with the
// batching goroce's UDP transport uses (GSO runs of one message's
// packets on the sender, GRO on the receiver), and nothing else: no
// headers to build, no ICRC, no engine. It is the ceiling of a UDP-socket
// stack on the machine at hand.

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
)

const rawudpUsage = "[-s BYTES] [--gso N] [--first BYTES] [-D SECS] [-p PORT] [--bind ADDR] [--json] [SERVER]"

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
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: roce rawudp %s\n\n%s.\nStart the server (no SERVER argument), then the client; the client prints what the server received.\n\n", rawudpUsage, rawudpSummary)
			printDefaults(fs, stdout)
			return exitOK
		}
		return exitCode(stderr, "rawudp", err)
	}
	switch {
	case c.size < 64 || c.size > 8192:
		return exitCode(stderr, "rawudp", usageErr("-s must be 64 to 8192 bytes"))
	case c.gso < 0 || c.gso > 64 || c.gso*c.size > 65000:
		return exitCode(stderr, "rawudp", usageErr("--gso must be 0 to 64, and --gso times -s at most 65000 bytes (one UDP datagram)"))
	case c.first != 0 && (c.first < 64 || c.first > 8192 || c.gso == 0):
		return exitCode(stderr, "rawudp", usageErr("--first must be 64 to 8192 bytes, with --gso"))
	case c.secs <= 0 || c.secs > 600:
		return exitCode(stderr, "rawudp", usageErr("-D must be more than 0 and at most 600 seconds"))
	case c.port < 1 || c.port > 65535:
		return exitCode(stderr, "rawudp", usageErr("-p must be 1-65535"))
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
