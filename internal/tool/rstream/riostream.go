package rstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/rsocket"
)

// Riostream is roce riostream.
var Riostream = &cli.Command{
	UsageLine: "riostream [-s SERVER] [-b ADDR] [-f ip|ipv6|name] [-B BYTES] [-i BYTES] [-I N] [-C N] [-S BYTES|all]\n" +
		"            [-p PORT] [-T a|b|n|v]... [--transport udp|afpacket] [--dev IFACE] [--pcap FILE]\n" +
		"            [--roce-port PORT] [--mtu BYTES] [--busy-poll D] [--spin D] [--timeout D]",
	Short: ioSummary,
	Long: ioSummary + ", either role, its flags and result lines.\n\n" +
		"Each side maps its buffer for the peer (rsocket's Conn.Map, riomap) and the transfers are\n" +
		"IOWrites (riowrite: RDMA WRITEs straight into the peer's buffer); a side knows the peer's\n" +
		"last transfer of an iteration has come when the last byte of its buffer changes, as\n" +
		"riostream polls it. Without -s it is the server, listening on -b's address; with -s SERVER\n" +
		"the client. Both print riostream's lines, which are rstream's. The default is the series of\n" +
		"latency tests, then bandwidth tests on a second connection; -S, -C or -I run one custom test.\n\n",
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs, "riostream")
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(fs, args); err != nil {
				return err
			}
			return o.main(ctx, env)
		}
	},
}

const ioSummary = "stream into the peer's mapped buffer as librdmacm's riostream does: riomap and riowrite"

// runIOTest is one test of riostream's on c (its run_test): the buffer
// mapped for the peer at offset 0, with its last byte (the poll byte)
// set to 0xff first; the 16-byte exchange; then iters iterations of
// count IOWrites of size bytes each way, the client first, each side
// writing a marker into its poll byte before its last transfer (so the
// peer's poll byte gets it) and waiting for the peer's next marker in
// its own; the result line; the buffer unmapped.
func (r *runner) runIOTest(ctx context.Context, c *rsocket.Conn, name string, size, count, iters int) error {
	buf := r.buf[:size]
	buf[size-1] = 0xff
	off, err := c.Map(buf, 0)
	if err != nil {
		return fmt.Errorf("riomap: %w", err)
	}
	c.SyncMapped()
	w := startWatchdog(ctx, c, r.o.timeout)
	client := r.o.server != ""
	err = r.syncIO(c, client)
	var elapsed time.Duration
	if err == nil {
		start := time.Now()
		err = r.ioIterations(ctx, c, w, buf, count, iters, client)
		elapsed = time.Since(start)
	}
	if err := r.report(ctx, w, err, name, size, count, iters, elapsed); err != nil {
		return err
	}
	if err := c.Unmap(off); err != nil {
		return fmt.Errorf("riounmap: %w", err)
	}
	return nil
}

// syncIO is riostream's sync_test: 16 bytes from the client to the
// server, then 16 back, from and into the buffer, unverified. The
// mapping each side published comes before them.
func (r *runner) syncIO(c *rsocket.Conn, client bool) error {
	b := r.buf[:syncSize]
	for _, send := range []bool{client, !client} {
		if send {
			if _, err := c.Write(b); err != nil {
				return fmt.Errorf("rsend: %w", err)
			}
			continue
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return fmt.Errorf("rrecv: %w", err)
		}
	}
	c.SyncMapped()
	return nil
}

// ioIterations runs the timed iterations: the client sends, then waits
// for the server's marker; the server waits, then sends. Markers count
// up from 0 over the test, one per side and iteration.
func (r *runner) ioIterations(ctx context.Context, c *rsocket.Conn, w *watchdog, buf []byte, count, iters int, client bool) error {
	var marker byte
	for range iters {
		if !client {
			if err := r.recvIO(ctx, c, w, buf, marker); err != nil {
				return err
			}
			marker++
		}
		for range count - 1 {
			if err := sendIO(c, w, buf); err != nil {
				return err
			}
		}
		buf[len(buf)-1] = marker
		marker++
		if r.o.tests.verify {
			r.fill(buf[:len(buf)-1])
		}
		c.SyncMapped() // the writes above, before the peer's next
		if err := sendIO(c, w, buf); err != nil {
			return err
		}
		if client {
			if err := r.recvIO(ctx, c, w, buf, marker); err != nil {
				return err
			}
			marker++
		}
	}
	return nil
}

// sendIO writes the whole buffer into the peer's, at offset 0.
func sendIO(c *rsocket.Conn, w *watchdog, buf []byte) error {
	if _, err := c.IOWrite(buf, 0); err != nil {
		return fmt.Errorf("riowrite: %w", err)
	}
	w.tick()
	return nil
}

// errPeerGone says the connection ended while a side waited for its
// poll byte.
var errPeerGone = errors.New("the connection ended while waiting for the peer's transfer")

// recvIO waits until the poll byte (the buffer's last) is want, as
// riostream's recv_xfer spins on it, and with -T v checks the rest of
// the buffer against the pattern. The device receives between looks
// (ProgressWait: on this goroutine over UDP; elsewhere it yields). The
// watchdog's closing of c, or ctx's end, ends the wait.
func (r *runner) recvIO(ctx context.Context, c *rsocket.Conn, w *watchdog, buf []byte, want byte) error {
	poll := &buf[len(buf)-1]
	for i := 0; loadByte(poll) != want; i++ {
		if w.fired.Load() || ctx.Err() != nil {
			return errPeerGone
		}
		if r.dev != nil {
			if _, err := r.dev.ProgressWait(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
				return err
			}
		} else if i%64 == 63 {
			runtime.Gosched()
		}
	}
	c.SyncMapped() // the peer's bytes, before this goroutine reads them
	w.tick()
	if !r.o.tests.verify {
		return nil
	}
	return r.check(buf[:len(buf)-1])
}

// loadByte reads a byte that the peer's RDMA WRITE fills behind the
// program's back, as riostream's volatile poll does: the software device
// writes it from whichever goroutine takes the packet. It is kept out of
// the race detector's view (the write is ordered by the protocol, and
// SyncMapped orders the rest of the buffer once the byte is seen) and
// out of line, so that every call loads the byte again.
//
//go:norace
//go:noinline
func loadByte(p *byte) byte { return *p }
