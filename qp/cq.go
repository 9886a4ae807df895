package qp

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/yield"
	"github.com/goroce/goroce/verbs"
)

// CQ is a completion queue. Poll, Wait and ReqNotify are safe for
// concurrent use; the engine adds completions from its goroutines.
//
// A CQ that is full loses the completions that do not fit, as an overrun
// hardware CQ does: the device raises EventCQErr (once, until the CQ has
// had room again), and every QP whose completion was lost goes to ERR
// with EventQPFatal. The flush completions of what such a QP had
// outstanding go to the same full CQ, so those that find no room are lost
// too (Counters.LostCompletions counts them); everything posted to it
// once Poll has made room completes with WR_FLUSH_ERR. QPs that lost no
// completion go on as before.
type CQ struct {
	dev     *Device
	mu      sync.Mutex
	ring    []verbs.WC
	sink    CQSink   // set: completions go to it, not to ring (CreateCQSink)
	sinkWC  verbs.WC // what a push hands the sink, under mu (so that push's wc does not escape)
	head    int      // oldest entry
	n       atomic.Int32
	armed   uint8 // 0, armAny or armSolicited
	overrun bool  // completions were lost since the CQ last had room
	ch      chan struct{}
	users   atomic.Int32
	dead    bool

	// Waits (wait.go): leading is set while a waiter of this CQ leads
	// and may be blocked in the transport; sleepers counts the waiters
	// asleep on wake; spin is their adaptive spin.
	leading  atomic.Bool
	sleepers atomic.Int32
	wake     chan struct{}
	readyFn  func() bool
	spin     spinner
	intr     atomic.Bool // Interrupt was called; the next wait ends
}

const (
	armAny       = 1
	armSolicited = 2
)

// CreateCQ returns a completion queue for at least cqe completions.
func (d *Device) CreateCQ(cqe int) (verbs.CQ, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	if cqe < 1 || cqe > MaxCQE {
		return nil, fmt.Errorf("%w: a CQ of %d entries: want 1 to %d", verbs.ErrInvalidCap, cqe, MaxCQE)
	}
	if d.closed.Load() {
		return nil, fmt.Errorf("%w: CreateCQ after Close", verbs.ErrClosed)
	}
	c := &CQ{dev: d, ring: make([]verbs.WC, cqe), ch: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	c.readyFn = c.ready
	return c, nil
}

// CQSink takes the completions of a CQ made by CreateCQSink in place of
// the CQ's own ring: a completion queue that lives elsewhere, such as the
// ring in shared memory that a program outside the process polls (package
// uverbs). The engine calls Push with the CQ's lock held, from whichever
// goroutine completes the work request, one completion at a time and in
// order; Push must not block or call back into the engine.
type CQSink interface {
	// Push adds wc (solicited: a receive of a solicited message) and
	// reports whether it had room. A completion it has no room for is
	// lost, as on a full CQ: the engine then raises EventCQErr and moves
	// the QP to ERR. The sink copies what it keeps of wc.
	Push(wc *verbs.WC, solicited bool) bool
}

// CreateCQSink returns a completion queue whose completions go to s: its
// Poll and Len find none, its ReqNotify and C are left unused (the sink
// notifies its own consumer), and its size is the sink's. cqe is only
// checked, as CreateCQ checks it.
func (d *Device) CreateCQSink(cqe int, s CQSink) (*CQ, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	if s == nil {
		return nil, fmt.Errorf("%w: CreateCQSink needs a CQSink", verbs.ErrNil)
	}
	if cqe < 1 || cqe > MaxCQE {
		return nil, fmt.Errorf("%w: a CQ of %d entries: want 1 to %d", verbs.ErrInvalidCap, cqe, MaxCQE)
	}
	c, err := d.CreateCQ(1) // the ring of one entry goes unused
	if err != nil {
		return nil, err
	}
	cq := c.(*CQ)
	cq.sink = s
	return cq, nil
}

// ok reports whether c was made by CreateCQ.
func (c *CQ) ok() bool { return c != nil && c.dev.ok() }

// errNilCQ is what the methods of a nil CQ return.
var errNilCQ = nilError("nil *CQ", "Device.CreateCQ")

// Len returns the number of completions waiting.
func (c *CQ) Len() int {
	if !c.ok() {
		return 0
	}
	return int(c.n.Load())
}

// Cap returns the number of completions the CQ holds.
func (c *CQ) Cap() int {
	if !c.ok() {
		return 0
	}
	return len(c.ring)
}

// Poll moves up to len(wc) completions, oldest first, into wc and returns
// how many. It does not block. On an empty CQ it yields the processor
// (runtime.Gosched) so that the goroutines that fill CQs run even when the
// program spins on Poll; in busy-poll mode (Config.BusyPoll) it receives
// from the link itself instead.
func (c *CQ) Poll(wc []verbs.WC) int {
	if !c.ok() {
		return 0
	}
	if c.n.Load() == 0 {
		p := c.dev.poller
		if p == nil {
			// A program spinning on an empty CQ would keep the
			// goroutines that fill it from running (Go preempts a
			// spinning goroutine only every 10 ms): give way.
			runtime.Gosched()
			return 0
		}
		// In busy-poll mode the caller receives, and handles, what is
		// waiting on the link. Finding nothing again and again, it lets
		// the threads that wait for its core run now and then (the
		// peer, on a machine with fewer cores than spinners).
		if c.dev.poll() == 0 {
			if c.dev.emptyPolls.Add(1)%busyYieldEvery == 0 {
				yield.CPU()
			}
			return 0
		}
		if c.n.Load() == 0 {
			return 0
		}
	}
	if len(wc) == 0 {
		return 0
	}
	c.mu.Lock()
	n := int(c.n.Load())
	if n > len(wc) {
		n = len(wc)
	}
	for i := range n {
		wc[i] = c.ring[c.head]
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
	}
	c.n.Add(int32(-n))
	c.mu.Unlock()
	return n
}

// ReqNotify arms the CQ: the next completion (only a solicited one or an
// error, if solicitedOnly) sends one value on C. Like ibv_req_notify_cq.
func (c *CQ) ReqNotify(solicitedOnly bool) {
	if !c.ok() {
		return
	}
	c.mu.Lock()
	if solicitedOnly {
		if c.armed != armAny {
			c.armed = armSolicited
		}
	} else {
		c.armed = armAny
	}
	c.mu.Unlock()
}

// C returns the CQ's completion channel (ibv_get_cq_event); nil for a nil
// CQ.
func (c *CQ) C() <-chan struct{} {
	if !c.ok() {
		return nil
	}
	return c.ch
}

// Wait blocks until the CQ holds a completion or ctx is done. Over the
// udp transport the waiting goroutine receives from the link itself,
// after a short adaptive spin (Config.WaitSpin), so that the completion
// costs no hand-off between goroutines; see wait.go. It does not arm the
// completion channel.
func (c *CQ) Wait(ctx context.Context) error {
	if !c.ok() {
		return errNilCQ
	}
	_, err := c.wait(ctx, time.Time{})
	return err
}

// WaitUntil is Wait with a deadline: it reports true when the CQ holds a
// completion, false when deadline passed first (the zero Time: no
// deadline) or Interrupt was called, and ctx's error when ctx ended
// first.
func (c *CQ) WaitUntil(ctx context.Context, deadline time.Time) (bool, error) {
	if !c.ok() {
		return false, errNilCQ
	}
	return c.wait(ctx, deadline)
}

// Interrupt ends the Wait or WaitUntil under way on c at once, as if a
// completion had come (WaitUntil reports false, unless one did), or the
// next one when none is under way. A program that waits for the CQ and
// for events of its own (another goroutine's word, a close, a deadline
// moved) wakes its waiter with it, as it would write to an eventfd it
// polls along with the CQ's channel. It does not block.
func (c *CQ) Interrupt() {
	if !c.ok() {
		return
	}
	c.intr.Store(true)
	c.pushed()
}

// Destroy frees the CQ; it fails with ErrBusy while queue pairs use it.
func (c *CQ) Destroy() error {
	if !c.ok() {
		return errNilCQ
	}
	if n := c.users.Load(); n != 0 {
		return fmt.Errorf("%w: %d queue pairs use the CQ: destroy them first", verbs.ErrBusy, n)
	}
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	return nil
}

// push adds a completion. It reports false when the CQ is full and the
// completion is lost.
func (c *CQ) push(wc *verbs.WC, solicited bool) bool {
	c.mu.Lock()
	if c.sink != nil {
		return c.pushSink(wc, solicited)
	}
	n := int(c.n.Load())
	if n == len(c.ring) {
		first := !c.overrun
		c.overrun = true
		c.mu.Unlock()
		if first {
			c.dev.event(verbs.Event{Type: verbs.EventCQErr, CQ: c})
		}
		return false
	}
	c.overrun = false
	i := c.head + n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = *wc
	c.n.Add(1)
	notify := c.armed == armAny || c.armed == armSolicited && (solicited || wc.Status != verbs.Success)
	if notify {
		c.armed = 0
	}
	c.mu.Unlock()
	if notify {
		select {
		case c.ch <- struct{}{}:
		default:
		}
	}
	c.pushed()
	return true
}

// pushSink is push for a CQ made by CreateCQSink; the caller holds c.mu,
// which it releases.
func (c *CQ) pushSink(wc *verbs.WC, solicited bool) bool {
	c.sinkWC = *wc
	if !c.sink.Push(&c.sinkWC, solicited) {
		first := !c.overrun
		c.overrun = true
		c.mu.Unlock()
		if first {
			c.dev.event(verbs.Event{Type: verbs.EventCQErr, CQ: c})
		}
		return false
	}
	c.overrun = false
	c.mu.Unlock()
	return true
}
