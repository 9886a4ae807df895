//go:build linux

package udp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

// goid returns the calling goroutine's id, from its stack header: the
// tests use it to tell which goroutine handed a batch over.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// goidLog is a handler that records which goroutine handed each batch
// over, and how many packets.
type goidLog struct {
	mu    sync.Mutex
	ids   []uint64
	count atomic.Int64
	got   chan struct{}
}

func newGoidLog() *goidLog { return &goidLog{got: make(chan struct{}, 64)} }

func (l *goidLog) handle(pkts []transport.Packet) {
	l.mu.Lock()
	l.ids = append(l.ids, goid())
	l.mu.Unlock()
	l.count.Add(int64(len(pkts)))
	select {
	case l.got <- struct{}{}:
	default:
	}
}

func (l *goidLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ids) == 0 {
		return 0
	}
	return l.ids[len(l.ids)-1]
}

// waitPair returns a sender and a started receiver whose handler is a
// goidLog.
func waitPair(t *testing.T, subnet byte) (a, b *Transport, log *goidLog) {
	t.Helper()
	a = mustNew(t, &Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 72, subnet, 1}), 4791)})
	b = mustNew(t, &Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 72, subnet, 2}), 4791)})
	log = newGoidLog()
	if err := b.Start(log.handle); err != nil {
		t.Fatal(err)
	}
	return a, b, log
}

// sendOne sends one small packet from a to b.
func sendOne(t *testing.T, a, b *Transport) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	if err := a.Send(randomBatch(rng, 1, a.LocalAddr(), b.LocalAddr(), 0)); err != nil {
		t.Error(err)
	}
}

// TestWaitReceives checks that a Wait blocked for the link receives the
// batch that comes and hands it over on the waiting goroutine.
func TestWaitReceives(t *testing.T) {
	a, b, log := waitPair(t, 1)
	for i := range 3 {
		go func() {
			time.Sleep(20 * time.Millisecond) // the Wait has blocked by then, most likely
			sendOne(t, a, b)
		}()
		me := goid()
		n, err := b.Wait(time.Now().Add(10*time.Second), nil)
		if err != nil || n != 1 {
			t.Fatalf("round %d: Wait = %d, %v; want 1 datagram", i, n, err)
		}
		if got := log.last(); got != me {
			t.Errorf("round %d: the batch was handed over by goroutine %d, not the waiting %d", i, got, me)
		}
	}
}

// TestWaitWake checks that a Wake ends a blocked Wait (a lost one would
// leave it until its deadline), that a Wait whose ready is already true
// returns at once, and that a Wait with nothing to wake it ends at its
// deadline.
func TestWaitWake(t *testing.T) {
	_, b, _ := waitPair(t, 2)
	var flag atomic.Bool
	ready := func() bool { return flag.Load() }
	for i := range 20 {
		flag.Store(false)
		go func() {
			time.Sleep(time.Duration(i%4) * time.Millisecond) // before and after the Wait blocks
			flag.Store(true)
			b.Wake()
		}()
		start := time.Now()
		n, err := b.Wait(start.Add(20*time.Second), ready)
		if err != nil || n != 0 {
			t.Fatalf("round %d: Wait = %d, %v", i, n, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("round %d: the Wake was lost: Wait returned after %v", i, d)
		}
		for !flag.Load() { // a spurious return: the waker has not run yet
			runtime.Gosched()
		}
	}
	// ready already true: at once, whatever the deadline.
	if n, err := b.Wait(time.Time{}, ready); n != 0 || err != nil {
		t.Fatalf("Wait with ready true: %d, %v", n, err)
	}
	flag.Store(false)
	start := time.Now()
	if n, err := b.Wait(start.Add(30*time.Millisecond), ready); n != 0 || err != nil || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("Wait until a deadline: %d, %v after %v", n, err, time.Since(start))
	}
}

// TestWaitOne checks that one goroutine waits at a time: a second Wait
// meanwhile fails with transport.ErrWaiting.
func TestWaitOne(t *testing.T) {
	_, b, _ := waitPair(t, 3)
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		_, err := b.Wait(time.Now().Add(20*time.Second), stop.Load)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !b.waiting.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the first Wait did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Wait(time.Time{}, nil); !errors.Is(err, transport.ErrWaiting) {
		t.Errorf("a second Wait: %v, want ErrWaiting", err)
	}
	stop.Store(true)
	b.Wake()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWaitHandsBack checks that the receive goroutine stands aside while
// waits come and takes receiving back when they stop: a packet sent well
// after the last Wait is handed over by it.
func TestWaitHandsBack(t *testing.T) {
	a, b, log := waitPair(t, 4)
	me := goid()
	go func() {
		time.Sleep(10 * time.Millisecond)
		sendOne(t, a, b)
	}()
	if n, err := b.Wait(time.Now().Add(10*time.Second), nil); n != 1 || err != nil {
		t.Fatalf("Wait = %d, %v", n, err)
	}
	time.Sleep(5 * pollerGrace)
	sendOne(t, a, b)
	select {
	case <-log.got:
	case <-time.After(10 * time.Second):
	}
	select {
	case <-log.got:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody received the packet sent after the waits stopped")
	}
	if got := log.last(); got == me || log.count.Load() != 2 {
		t.Errorf("the second packet: handed over by goroutine %d (the waiter was %d), %d packets", got, me, log.count.Load())
	}
}

// TestWaitClose checks that Close ends a blocked Wait with net.ErrClosed
// and that no goroutine is left behind.
func TestWaitClose(t *testing.T) {
	before := runtime.NumGoroutine()
	b, err := New(&Config{Addr: netip.MustParseAddrPort("127.72.5.2:4791")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Wait(time.Time{}, nil)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the Wait")
	}
	if _, err := b.Wait(time.Time{}, nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Wait on a closed transport: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

// TestWaitStream sends a long run of batches while one goroutine waits
// and another polls, and checks that every packet arrives once, in order.
func TestWaitStream(t *testing.T) {
	a := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.72.6.1:4791")})
	b := mustNew(t, &Config{Addr: netip.MustParseAddrPort("127.72.6.2:4791")})
	cb := transporttest.NewCollector(t)
	if err := b.Start(cb.Handle); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if _, err := b.Wait(time.Now().Add(5*time.Millisecond), stop.Load); err != nil && !errors.Is(err, transport.ErrWaiting) {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		for !stop.Load() {
			b.Poll()
			runtime.Gosched()
		}
	})
	rng := rand.New(rand.NewPCG(5, 5))
	exchange(t, rng, a, b, cb, []int{1, 64, 3, 17, 64, 64, 2}, 0)
	stop.Store(true)
	b.Wake()
	wg.Wait()
}

// TestWaitKeptFromRunning: a Wait kept from running for longer than
// pollerGrace between counting itself and taking the socket (a loaded
// machine, or the race detector) finds the receive goroutine back in the
// netpoller with no deadline; it must still get the socket and end by its
// deadline on a quiet link. (A Wait that kicked once then blocked on the
// socket's owner until the next datagram came: 30 s, a keepalive's
// period, in rsocket's tests.)
func TestWaitKeptFromRunning(t *testing.T) {
	_, b, _ := waitPair(t, 7)
	testHookOwn = func() { time.Sleep(3 * pollerGrace) }
	defer func() { testHookOwn = nil }()
	for i := range 30 {
		time.Sleep(2 * pollerGrace) // the receive goroutine goes back to the socket
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := b.Wait(start.Add(5*time.Millisecond), nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("wait %d: a Wait with a 5 ms deadline had not returned after 5 s", i)
		}
	}
}
