package rawudp

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/perfstat"
)

// The two sides talk over a TCP connection to the server's port: the
// client says "start SIZE GSO FIRST WORK" (or "lat SIZE BUSY ACK CALLS
// ADDR", ADDR its receiving socket's address or "-"), the server
// answers "ready", the client sends its datagrams and then "stop SENT"
// (or "stop"), and the server answers with its result as one JSON line
// (or "echoed N").

// serve receives one client's run and reports it back.
func serve(ctx context.Context, c *config, stdout io.Writer) error {
	bind := c.bind
	if bind == "" {
		bind = "127.0.0.1"
	}
	ip, err := cli.ResolveAddr(bind)
	if err != nil {
		return cli.Usagef("--bind: %w", err)
	}
	addr := netip.AddrPortFrom(ip, uint16(c.port))
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	s, err := openSocket(addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer s.close()
	if c.gso > 0 {
		if err := s.enableGRO(); err != nil {
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
		return echoServe(s, addr.Addr(), conn, br, line, stdout)
	}
	return receiveServe(s, c, conn, br, line, stdout)
}

// receiveServe counts a bandwidth run's datagrams and sends the result.
func receiveServe(s *socket, c *config, conn net.Conn, br *bufio.Reader, line string, stdout io.Writer) error {
	var size, gso, first, work int
	if n, _ := fmt.Sscanf(line, "start %d %d %d %d", &size, &gso, &first, &work); n < 3 {
		return fmt.Errorf("control: not a rawudp client (%.40q)", line)
	}
	var stop atomic.Bool
	done := make(chan result, 1)
	go func() { done <- s.receive(size, first, work == 1, &stop) }()
	if _, err := io.WriteString(conn, "ready\n"); err != nil {
		stop.Store(true)
		<-done
		return err
	}
	conn.SetDeadline(time.Now().Add(c.timeout + 10*time.Minute))
	line, err := br.ReadString('\n')
	// The client's datagrams are in the socket before its "stop": a last
	// moment lets the receiver drain them.
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	res := <-done
	if err != nil || !strings.HasPrefix(line, "stop ") {
		return fmt.Errorf("control: the client did not finish (%v)", err)
	}
	res.Sent, _ = strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "stop ")), 10, 64)
	res.Size, res.GSO, res.First, res.Work = size, gso, first, work == 1
	res.compute()
	b, _ := json.Marshal(&res)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintln(stdout, res.text())
	return nil
}

// echoServe answers a --lat client: every datagram goes straight back to
// where it came from until the client says stop on the control
// connection.
func echoServe(s *socket, local netip.Addr, conn net.Conn, br *bufio.Reader, line string, stdout io.Writer) error {
	var size, busy, ack, calls int
	var peer string
	if n, _ := fmt.Sscanf(line, "lat %d %d %d %d %s", &size, &busy, &ack, &calls, &peer); n < 2 || size < 4 || size > 8192 || ack == 1 && size < ackSize {
		return fmt.Errorf("control: not a rawudp client (%.40q)", line)
	}
	if calls == 1 {
		to, err := netip.ParseAddrPort(peer)
		if err != nil {
			return fmt.Errorf("control: --calls without the client's address (%.60q)", line)
		}
		if err := s.setCalls(local, to); err != nil {
			return err
		}
	}
	if ack == 1 {
		if err := s.setAck(size); err != nil {
			return err
		}
	}
	if busy == 1 {
		if err := s.setNonblock(); err != nil {
			return err
		}
	}
	var stop atomic.Bool
	done := make(chan uint64, 1)
	cpu := perfstat.ProcessCPU()
	go func() { done <- s.echo(&stop) }()
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
	used := perfstat.ProcessCPU().Sub(cpu)
	fmt.Fprintf(conn, "echoed %d %d\n", n, used.Total().Microseconds())
	fmt.Fprintf(stdout, "rawudp: echoed %d %d-byte datagrams\n", n, size)
	return nil
}

// runClient sends for c.duration (or runs the ping-pong) and prints what
// the server measured.
func runClient(ctx context.Context, c *config, server string, stdout io.Writer) error {
	sip, err := cli.ResolveAddr(server)
	if err != nil {
		return cli.Usagef("%w", err)
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
		bind = cli.LocalAddr(conn).String()
		if bind == "127.0.0.1" {
			bind = "127.0.0.2"
		}
	}
	ip, err := cli.ResolveAddr(bind)
	if err != nil {
		return cli.Usagef("--bind: %w", err)
	}
	s, err := openSocket(netip.AddrPortFrom(ip, 0), 0)
	if err != nil {
		return err
	}
	defer s.close()
	if c.calls {
		// The server answers from its second socket: take datagrams from
		// any source, as goroce's transport does.
		if err := s.setCalls(ip, saddr); err != nil {
			return err
		}
	} else if err := s.connect(saddr); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	conn.SetDeadline(time.Now().Add(c.timeout))
	br := bufio.NewReader(conn)
	if c.lat {
		return pingPong(ctx, s, conn, br, c, stdout)
	}
	return sendRun(ctx, s, conn, br, c, stdout)
}

// sendRun is a bandwidth run's client.
func sendRun(ctx context.Context, s *socket, conn net.Conn, br *bufio.Reader, c *config, stdout io.Writer) error {
	fmt.Fprintf(conn, "start %d %d %d %d\n", c.size, c.gso, c.first, b2i(c.work))
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("control: the server did not start (%v)", err)
	}
	sent, err := s.send(ctx, c)
	if err != nil {
		return err
	}
	conn.SetDeadline(time.Now().Add(c.timeout))
	fmt.Fprintf(conn, "stop %d\n", sent)
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("control: no result from the server: %w", err)
	}
	var res result
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

// pingPong runs c.iters round trips of c.size-byte datagrams (after 100
// not counted) and prints the half round trips as perftest prints a
// latency test's. A datagram or echo lost is sent again, at most 10 times
// in a run; each carries its round's number, so a late echo is not taken
// for the next one's.
func pingPong(ctx context.Context, s *socket, conn net.Conn, br *bufio.Reader, c *config, stdout io.Writer) error {
	if err := latStart(s, conn, br, c); err != nil {
		return err
	}
	cpu := perfstat.ProcessCPU()
	tposted, lost, err := rounds(ctx, s, c)
	if err != nil {
		return err
	}
	used := perfstat.ProcessCPU().Sub(cpu)
	conn.SetDeadline(time.Now().Add(c.timeout))
	io.WriteString(conn, "stop\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "echoed ") {
		return fmt.Errorf("control: no answer from the server (%v)", err)
	}
	var echoed, peerCPU int64 // a server that does not say its CPU time leaves 0
	fmt.Sscanf(line, "echoed %d %d", &echoed, &peerCPU)
	l := perfstat.Latencies(tposted, 2)
	res := latResult{Size: c.size, Iters: c.iters, BusyPoll: c.busy, Lost: lost, Ack: c.ack, Calls: c.calls, Results: map[string]float64{
		"t_min_us": perfstat.Round(l.Min, 2), "t_max_us": perfstat.Round(l.Max, 2), "t_typical_us": perfstat.Round(l.Typical, 2),
		"t_avg_us": perfstat.Round(l.Avg, 2), "t_99_us": perfstat.Round(l.P99, 2), "p99_us": perfstat.Round(l.P99, 2),
		"p99_9_us": perfstat.Round(l.P999, 2),
	}, CPU: perfstat.Round(float64(used.Total().Nanoseconds())/1e3, 2), PeerCPU: float64(peerCPU)}
	if c.json {
		b, _ := json.Marshal(&res)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	mode := "blocking receives"
	if c.busy {
		mode = "busy poll"
	}
	if c.ack {
		mode += ", each with a 20-byte ACK"
	}
	if c.calls {
		mode += ", goroce's system calls"
	}
	fmt.Fprintf(stdout, "rawudp: %d-byte datagrams, %d round trips (%s), half round trip: t_min %.2f us, t_typical %.2f us, t_avg %.2f us, t_99 %.2f us; %d lost\n",
		c.size, c.iters, mode, l.Min, l.Typical, l.Avg, l.P99, lost)
	return nil
}

// latStart sets the client's socket up for c's ping-pong and has the
// server set up its own.
func latStart(s *socket, conn net.Conn, br *bufio.Reader, c *config) error {
	if c.busy {
		if err := s.setNonblock(); err != nil {
			return err
		}
	} else if err := s.setRecvTimeout(200 * time.Millisecond); err != nil {
		return err
	}
	if c.ack {
		if err := s.setAck(c.size); err != nil {
			return err
		}
	}
	rx := "-"
	if c.calls {
		a, err := s.localAddr()
		if err != nil {
			return err
		}
		rx = a.String()
	}
	fmt.Fprintf(conn, "lat %d %d %d %d %s\n", c.size, b2i(c.busy), b2i(c.ack), b2i(c.calls), rx)
	if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("control: the server did not start (%v)", err)
	}
	return nil
}

// rounds sends and awaits the ping-pong's datagrams and returns the
// posting times of the counted rounds (and the end of the last) and how
// many were lost.
func rounds(ctx context.Context, s *socket, c *config) ([]time.Duration, int, error) {
	const warmup, maxLost = 100, 10
	out := make([]byte, c.size+s.ackLen)
	in := make([]byte, 65536)
	tposted := make([]time.Duration, 0, c.iters+1)
	start := time.Now()
	lost := 0
	for i := 0; i < warmup+c.iters; i++ {
		if ctx.Err() != nil {
			return nil, lost, ctx.Err()
		}
		binary.LittleEndian.PutUint32(out, uint32(i))
		t := time.Since(start)
		if err := s.write(out); err != nil {
			return nil, lost, fmt.Errorf("send: %w", err)
		}
		got, err := s.await(in, uint32(i), c.busy)
		if err != nil {
			return nil, lost, err
		}
		if !got {
			if lost++; lost > maxLost {
				return nil, lost, fmt.Errorf("more than %d datagrams or echoes lost", maxLost)
			}
			i--
			continue
		}
		if i >= warmup {
			tposted = append(tposted, t)
		}
	}
	return append(tposted, time.Since(start)), lost, nil // the end of the last round trip
}

// b2i is 1 for true, 0 for false: a flag on the control connection.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
