package rstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/rsocket"
)

// seriesSize is a size of rstream's series; one with all set runs only
// with -S all.
type seriesSize struct {
	size int
	all  bool
}

// seriesSizes are the sizes of rstream's series, in its order: 64 B,
// then each power of two from 128 B to 4 MiB followed by the size
// halfway to the next. Without -S all only 64 B, 4 KiB, 64 KiB and 1 MiB
// run.
var seriesSizes = func() []seriesSize {
	s := []seriesSize{{1 << 6, false}}
	for p := 7; p <= 22; p++ {
		every := p == 12 || p == 16 || p == 20
		s = append(s, seriesSize{1 << p, !every}, seriesSize{1<<p + 1<<(p-1), true})
	}
	return s
}()

// run runs the custom test, or rstream's series: the latency tests on
// one connection, then the bandwidth tests on a second.
func (r *runner) run(ctx context.Context) error {
	if r.o.custom {
		c, err := r.connect(ctx, optNone)
		if err != nil {
			return err
		}
		err = r.runTest(ctx, c, "custom", r.o.sizeCustom, r.o.count, r.o.iters)
		if cerr := c.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
		return err
	}
	for _, kind := range []string{"lat", "bw"} {
		opt := optLatency
		if kind == "bw" {
			opt = optBandwidth
		}
		c, err := r.connect(ctx, opt)
		if err != nil {
			return err
		}
		err = r.runSeries(ctx, c, kind)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// runSeries runs the series' tests of one kind on c: latency tests of
// sizeToCount(size) iterations of one transfer, or bandwidth tests of
// one iteration of sizeToCount(size) transfers.
func (r *runner) runSeries(ctx context.Context, c net.Conn, kind string) error {
	for _, s := range seriesSizes {
		if s.all && !r.o.sizeAll {
			continue
		}
		count, iters := 1, r.seriesCount(s.size)
		if kind == "bw" {
			count, iters = iters, 1
		}
		if err := r.runTest(ctx, c, seriesName(s.size, kind), s.size, count, iters); err != nil {
			return err
		}
	}
	return nil
}

// seriesCount is how many transfers or iterations the series runs of a
// size: rstream's sizeToCount, or a test's smaller count.
func (r *runner) seriesCount(size int) int {
	if r.countOf != nil {
		return r.countOf(size)
	}
	return sizeToCount(size)
}

// runTest is one test on c: the 16-byte exchange that starts it (client
// to server, then back), then iters iterations of count transfers of size
// bytes from the client to the server and count back, timed, and its
// result line.
func (r *runner) runTest(ctx context.Context, c net.Conn, name string, size, count, iters int) error {
	if r.o.io {
		return r.runIOTest(ctx, c.(*rsocket.Conn), name, size, count, iters)
	}
	w := startWatchdog(ctx, c, r.o.timeout)
	client := r.o.server != ""
	err := r.exchange(c, w, syncSize, 1, client)
	var elapsed time.Duration
	if err == nil {
		start := time.Now()
		for i := 0; i < iters && err == nil; i++ {
			if err = r.exchange(c, w, size, count, client); err != nil {
				break
			}
		}
		elapsed = time.Since(start)
	}
	return r.report(ctx, w, err, name, size, count, iters, elapsed)
}

// report ends a test whose iterations ended with err after elapsed: the
// watchdog's firing, the context's end or err fails it; otherwise its
// result line is printed.
func (r *runner) report(ctx context.Context, w *watchdog, err error, name string, size, count, iters int, elapsed time.Duration) error {
	if w.end() {
		return fmt.Errorf("%s: no transfer completed for %v (--timeout)", name, r.o.timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	res := newResult(name, size, count, iters, elapsed)
	res.print(r.env.Stdout)
	return nil
}

// exchange moves count transfers of size bytes from the client to the
// server, then count back.
func (r *runner) exchange(c net.Conn, w *watchdog, size, count int, client bool) error {
	for _, send := range []bool{client, !client} {
		for range count {
			var err error
			if send {
				err = r.sendXfer(c, size)
			} else {
				err = r.recvXfer(c, size)
			}
			if err != nil {
				return err
			}
			w.tick()
		}
	}
	return nil
}

// sendXfer sends size bytes of the buffer, filled with the next bytes of
// the verify pattern with -T v.
func (r *runner) sendXfer(c net.Conn, size int) error {
	b := r.buf[:size]
	if r.o.tests.verify {
		r.fill(b)
	}
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}

// recvXfer receives size bytes into the buffer and, with -T v, checks
// them against the pattern.
func (r *runner) recvXfer(c net.Conn, size int) error {
	b := r.buf[:size]
	if _, err := io.ReadFull(c, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("rrecv: the peer ended the connection: %w", err)
		}
		return fmt.Errorf("rrecv: %w", err)
	}
	if r.o.tests.verify {
		return r.check(b)
	}
	return nil
}

// pattern is the verify pattern, byte i being byte(i): a window of it
// from any of its first 256 bytes on is a run of the pattern.
var pattern = func() []byte {
	p := make([]byte, patternWindow+256)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}()

// patternWindow is how much of the pattern fill and check take at once.
const patternWindow = 64 << 10

// fill fills b with the next bytes of the verify pattern.
func (r *runner) fill(b []byte) {
	for len(b) > 0 {
		n := copy(b, pattern[r.sent:int(r.sent)+patternWindow])
		b = b[n:]
		r.sent += byte(n)
	}
}

// check checks that b holds the next bytes of the verify pattern, a
// window at a time, and says which byte differs first when one does.
func (r *runner) check(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), patternWindow)
		if want := pattern[r.recvd : int(r.recvd)+n]; !bytes.Equal(b[:n], want) {
			i := 0
			for b[i] == want[i] {
				i++
			}
			return fmt.Errorf("data verification failed byte %d: %#02x, want %#02x", r.verified+int64(i), b[i], want[i])
		}
		b = b[n:]
		r.recvd += byte(n)
		r.verified += int64(n)
	}
	return nil
}

// watchdog closes a connection on which no transfer completed for its
// limit, or whose context ended, so that the call waiting on it returns.
// tick is called by the goroutine running the test; the watchdog's own
// goroutine is stopped and waited for by end.
type watchdog struct {
	ticks atomic.Uint64
	fired atomic.Bool
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startWatchdog(ctx context.Context, c io.Closer, limit time.Duration) *watchdog {
	w := &watchdog{stop: make(chan struct{})}
	every := max(limit/8, 10*time.Millisecond)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		last, since := w.ticks.Load(), time.Now()
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				c.Close()
				return
			case now := <-t.C:
				if n := w.ticks.Load(); n != last {
					last, since = n, now
				} else if now.Sub(since) >= limit {
					w.fired.Store(true)
					c.Close()
					return
				}
			}
		}
	}()
	return w
}

// tick records a transfer.
func (w *watchdog) tick() { w.ticks.Add(1) }

// end stops the watchdog and reports whether it closed the connection
// for want of progress.
func (w *watchdog) end() bool {
	close(w.stop)
	w.wg.Wait()
	return w.fired.Load()
}
