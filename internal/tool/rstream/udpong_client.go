package rstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/goroce/goroce/internal/cli"
)

// The client of roce udpong: udpong.c's client_run.

// errNoAnswer means a message got no answer within --timeout.
var errNoAnswer = errors.New("no answer from the server")

// client logs in and runs the series or the custom test, printing
// udpong's lines. A test that fails is reported on stderr and the next
// one runs, as udpong's do; failing to log in fails the run.
func (p *pong) client(ctx context.Context) error {
	fmt.Fprint(p.env.Stdout, pongHeader)
	p.msg[0] = pongLogin
	if n, err := p.sendRecv(pongCtrl, time.Second); err != nil || n != pongCtrl {
		return &cli.ExitError{Code: exitFailure, Err: fmt.Errorf("login to %v: %w", p.server, err)}
	}
	if p.o.custom {
		p.test(ctx, "custom", p.o.size, p.o.count, p.o.echo)
		return nil
	}
	for _, echo := range []bool{true, false} {
		for _, size := range pongSizes {
			if ctx.Err() != nil {
				return nil
			}
			if echo {
				p.test(ctx, seriesName(size, "lat"), size, sizeToCount(size)/10, true)
			} else {
				p.test(ctx, seriesName(size, "bw"), size, sizeToCount(size), false)
			}
		}
	}
	return nil
}

// test is udpong's run_test: start (the server resets this client's
// count), count messages of size (each echoed in a latency test), end
// (the server answers with its count), then the result line.
func (p *pong) test(ctx context.Context, name string, size, count int, echo bool) {
	err := p.runTest(name, size, count, echo)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(p.env.Stderr, "%s: %v\n", name, err)
	}
}

func (p *pong) runTest(name string, size, count int, echo bool) error {
	p.msg[0] = pongStart
	if _, err := p.sendRecv(pongCtrl, time.Second); err != nil {
		return err
	}
	p.msg[0] = pongData
	if echo {
		p.msg[0] = pongEcho
	}
	start := time.Now()
	for range count {
		var err error
		if echo {
			_, err = p.sendRecv(size, time.Millisecond)
		} else {
			err = p.send(size)
		}
		if err != nil {
			return err
		}
	}
	p.msg[0] = pongEnd
	if _, err := p.sendRecv(pongCtrl, time.Millisecond); err != nil {
		return err
	}
	elapsed := time.Since(start)
	transfers := int64(binary.BigEndian.Uint32(p.msg[4:8]))
	if echo {
		transfers = int64(count) * 2
	}
	p.printResult(name, size, transfers, elapsed)
	return nil
}

// printResult writes udpong's show_perf line: the elapsed microseconds
// kept in a float, the rates computed as udpong computes them.
func (p *pong) printResult(name string, size int, transfers int64, elapsed time.Duration) {
	usec := float32(elapsed.Microseconds())
	bytes := transfers * int64(size)
	fmt.Fprintf(p.env.Stdout, "%-10s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", name, sizeStr(int64(size)), cntStr(transfers),
		sizeStr(bytes), float64(usec)/1e6, float64(bytes*8)/(1000*float64(usec)), float64(usec/float32(transfers)))
}

// send sends the first size bytes of the message to the server.
func (p *pong) send(size int) error {
	if _, err := p.c.WriteTo(p.msg[:size], net.UDPAddrFromAddrPort(p.server)); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}

// sendRecv is udpong's client_send_recv: the message, with the next
// sequence number, is sent again each time wait passes without the
// answer of that number, for --timeout at most; the answer is read into
// the message. (udpong also sends again for each stale answer it reads,
// the answer to a copy of an earlier message sent again: when the round
// trip is longer than wait, the copies in flight then never stop growing.
// This reads on until wait passes instead, and sends the message's own op
// and number again, not what a stale answer left in it.)
func (p *pong) sendRecv(size int, wait time.Duration) (int, error) {
	op, seq := p.msg[0], p.seqno
	for end := time.Now().Add(p.o.timeout); time.Now().Before(end); {
		p.msg[0], p.msg[2] = op, seq
		if err := p.send(size); err != nil {
			return 0, err
		}
		n, err := p.recvSeq(size, seq, time.Now().Add(wait))
		if err != nil {
			return 0, err
		}
		if n > 0 {
			p.seqno++
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w within --timeout %v", errNoAnswer, p.o.timeout)
}

// recvSeq reads answers until one has sequence number seq (its length is
// returned) or deadline passes (0).
func (p *pong) recvSeq(size int, seq byte, deadline time.Time) (int, error) {
	p.c.SetReadDeadline(deadline)
	for {
		n, _, err := p.c.ReadFrom(p.msg[:size])
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return 0, nil
		case err != nil:
			return 0, fmt.Errorf("rrecv: %w", err)
		case n > 2 && p.msg[2] == seq:
			return n, nil
		}
	}
}
