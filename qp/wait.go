package qp

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/yield"
	"github.com/goroce/goroce/transport"
)

// Waiting for completions.
//
// Over a transport that lets a goroutine wait for packets and receive
// them itself (transport.Waiter: the udp transport), the goroutine that
// waits for a completion leads: it waits in the kernel for the link,
// and runs the receive path for what comes on its own stack, so that the
// completion it waits for is made by the goroutine that takes it, with
// no goroutine woken in between. The responder's ACKs for what a lead
// received wait for the thread's next post (deferack.go), as in
// busy-poll mode. One goroutine leads at a time; the others (followers)
// sleep until their CQ has a completion or the leader leaves, and then
// one of them leads. Before it blocks, a waiter spins for a while,
// polling the link, as long as recent waits on its CQ ended within the
// spin limit (Config.WaitSpin): the adaptive poll of Linux's haltpoll.
// Over other transports waiters sleep, and the transport's goroutine
// receives.

// Adaptive spin. A wait that blocked and ended within the limit would
// have been caught by a spin that long: the spin doubles (from
// spinGrowStart) up to the limit. A wait that outlasted the limit spun
// for nothing: the spin halves, down to 0 below spinGrowStart. But how
// long a wait that blocked took counts the wake-up, which on a busy
// machine can take longer than the limit itself (sysmon, the scheduler):
// once there, every wait blocks and outlasts the limit, and the spin
// never came back, though spinning would catch each completion in a few
// microseconds (a 2-byte WRITE round trip at 7-10 us instead of 4, READ
// at 35-60 instead of 6). So a spinner that no longer spins spins the
// whole limit once in probeEvery waits, and one such spin that catches
// its completion starts the spin again.
const (
	// DefaultWaitSpin is Config.WaitSpin's default.
	DefaultWaitSpin = 50 * time.Microsecond
	spinGrowStart   = 2 * time.Microsecond
	probeEvery      = 16
	// waitSlice bounds one blocking wait when the context has no
	// deadline but can end: the wait looks at the context that often.
	waitSlice = 5 * time.Millisecond
)

// leadState is who waits for the link: at most one leader, and the CQs
// of followers.
type leadState struct {
	off       atomic.Bool // the transport's Wait failed (closed): nobody leads
	mu        sync.Mutex
	leading   bool
	followers []*CQ // one entry per sleeping follower
}

// spinner is the adaptive spin of one kind of wait (a CQ's, the
// device's ProgressWait).
type spinner struct {
	ns    atomic.Int64  // how long the next wait spins
	waits atomic.Uint32 // waits that did not spin, counted for the probes
}

// next returns how long to spin, at most limit, and whether the spin is
// a probe of a spinner that no longer spins.
func (s *spinner) next(limit time.Duration) (time.Duration, bool) {
	if cur := time.Duration(s.ns.Load()); cur > 0 {
		return min(cur, limit), false
	}
	if s.waits.Add(1)%probeEvery == 0 {
		return limit, true
	}
	return 0, false
}

// caught starts the spin again after a probe caught its completion
// after took: a spin twice that long.
func (s *spinner) caught(took, limit time.Duration) {
	s.ns.Store(int64(min(max(2*took, spinGrowStart), limit)))
}

// blocked adapts the spin to a wait that blocked after its spin and
// took took in all.
func (s *spinner) blocked(took, limit time.Duration) {
	cur := time.Duration(s.ns.Load())
	switch {
	case took <= limit:
		s.ns.Store(int64(min(max(2*cur, spinGrowStart), limit)))
	case cur > 0:
		if cur /= 2; cur < spinGrowStart {
			cur = 0
		}
		s.ns.Store(int64(cur))
	}
}

// wait blocks until c holds a completion (true), deadline passes (false;
// the zero Time is none) or ctx ends (its error).
func (c *CQ) wait(ctx context.Context, deadline time.Time) (bool, error) {
	if c.n.Load() > 0 {
		return true, nil
	}
	if c.intr.Swap(false) {
		return false, nil
	}
	d := c.dev
	start := time.Now()
	limit := d.waitSpin
	// Spinning polls the link, which sends the transport's receive
	// goroutine to stand by: only where a waiter then takes over.
	if spin, probe := c.spin.next(limit); spin > 0 && d.link != nil && d.canLead() {
		if c.spinFor(ctx, start, spin, deadline) {
			if probe {
				c.spin.caught(time.Since(start), limit)
			}
			return true, nil
		}
	}
	ok, err := c.block(ctx, deadline)
	if ok {
		c.spin.blocked(time.Since(start), limit)
	}
	return ok, err
}

// spinFor polls the link, and c, until c holds a completion (true), spin
// has passed since start, or the deadline or ctx say to stop.
func (c *CQ) spinFor(ctx context.Context, start time.Time, spin time.Duration, deadline time.Time) bool {
	d := c.dev
	for i := 0; ; i++ {
		if c.n.Load() > 0 || c.intr.Load() {
			return c.n.Load() > 0
		}
		if d.pollLink() == 0 {
			yield.CPU()
		}
		if i%16 == 15 {
			now := time.Now()
			if now.Sub(start) >= spin || ctx.Err() != nil || !deadline.IsZero() && !now.Before(deadline) {
				return c.n.Load() > 0
			}
		}
	}
}

// block waits, leading or following, until c holds a completion, the
// deadline passes or ctx ends.
func (c *CQ) block(ctx context.Context, deadline time.Time) (bool, error) {
	d := c.dev
	for c.n.Load() == 0 {
		if c.intr.Swap(false) {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return false, nil
		}
		if d.canLead() && d.lead.take() {
			if d.leadWait(ctx, deadline, c.readyFn, &c.leading) == nil {
				continue
			}
			// The transport is closed: nothing more comes from it.
			d.lead.off.Store(true)
		}
		if err := c.sleep(ctx, deadline); err != nil {
			return false, err
		}
	}
	return true, nil
}

// take makes the caller the leader, if there is none.
func (l *leadState) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return false
	}
	l.leading = true
	return true
}

// leave ends the caller's lead and wakes the followers: one of them leads
// next.
func (l *leadState) leave() {
	l.mu.Lock()
	l.leading = false
	for _, c := range l.followers {
		c.signal()
	}
	l.mu.Unlock()
}

// follow registers c's waiter as a follower, unless nobody leads (false:
// the caller may lead).
func (l *leadState) follow(c *CQ) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return false
	}
	l.followers = append(l.followers, c)
	return true
}

// unfollow removes one registration of c.
func (l *leadState) unfollow(c *CQ) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range l.followers {
		if f == c {
			last := len(l.followers) - 1
			l.followers[i] = l.followers[last]
			l.followers[last] = nil
			l.followers = l.followers[:last]
			return
		}
	}
}

// leadWait leads, as taken with lead.take, until ready reports true, the
// deadline passes or ctx ends; leading is set by ready and cleared on the
// way out, so that a completion made elsewhere meanwhile wakes the
// transport's wait. It fails only when the transport cannot be waited on
// (closed): the caller then sleeps.
func (d *Device) leadWait(ctx context.Context, deadline time.Time, ready func() bool, leading *atomic.Bool) error {
	defer d.lead.leave()
	defer leading.Store(false)
	for !ready() {
		dl, ok := linkDeadline(ctx, deadline)
		if !ok {
			return nil
		}
		if _, err := d.waitLink(dl, ready); err != nil {
			return err
		}
	}
	return nil
}

// linkDeadline returns the deadline of one blocking wait for the link:
// deadline, or ctx's when earlier, and at most waitSlice away when ctx can
// end without one; ok is false when ctx has ended or the deadline passed.
func linkDeadline(ctx context.Context, deadline time.Time) (dl time.Time, ok bool) {
	if ctx.Err() != nil {
		return dl, false
	}
	dl = deadline
	if cd, ok := ctx.Deadline(); ok && (dl.IsZero() || cd.Before(dl)) {
		dl = cd
	}
	if ctx.Done() == nil && dl.IsZero() {
		return dl, true
	}
	now := time.Now()
	if ctx.Done() != nil {
		if s := now.Add(waitSlice); dl.IsZero() || s.Before(dl) {
			dl = s
		}
	}
	return dl, now.Before(dl)
}

// waitLink is one wait of the leader for the link; transport.ErrWaiting
// (a waiter of the transport's other than this device's: none in goroce)
// yields and reports nothing taken.
func (d *Device) waitLink(dl time.Time, ready func() bool) (int, error) {
	d.polled() // the ACKs left for this thread go before it blocks
	d.polling.Add(1)
	n, err := d.waiter.Wait(dl, ready)
	d.polling.Add(-1)
	if errors.Is(err, transport.ErrWaiting) {
		runtime.Gosched()
		return 0, nil
	}
	return n, err
}

// ProgressWait receives and handles, on the caller's goroutine, what
// comes from the link, as Progress does, but blocks (after a short
// adaptive spin, as CQ.Wait) until something has come: it returns the
// number of packets (or datagrams) it handled, or 0 once deadline (the
// zero Time: none) has passed or ctx has ended (with ctx's error). It is
// for programs that wait for memory an RDMA WRITE fills (perftest's write
// latency test) rather than for a completion, in any mode: what they wait
// for comes with a packet. Over a transport that cannot be waited on
// (not udp), or while another goroutine waits for the link, it yields the
// processor and returns 0, and the caller looks again.
func (d *Device) ProgressWait(ctx context.Context, deadline time.Time) (int, error) {
	if !d.ok() {
		return 0, errNilDevice
	}
	start := time.Now()
	if spin, probe := d.progressSpin.next(d.waitSpin); spin > 0 && d.link != nil && d.canLead() {
		for i := 0; ; i++ {
			if n := d.pollLink(); n > 0 {
				if probe {
					d.progressSpin.caught(time.Since(start), d.waitSpin)
				}
				return n, nil
			}
			yield.CPU()
			if i%16 == 15 && (time.Since(start) >= spin || ctx.Err() != nil) {
				break
			}
		}
	}
	if !d.canLead() || !d.lead.take() {
		runtime.Gosched()
		return 0, ctx.Err()
	}
	defer d.lead.leave()
	for {
		dl, ok := linkDeadline(ctx, deadline)
		if !ok {
			return 0, ctx.Err()
		}
		n, err := d.waitLink(dl, nil)
		if n > 0 {
			d.progressSpin.blocked(time.Since(start), d.waitSpin)
			return n, nil
		}
		if err != nil {
			d.lead.off.Store(true)
			return 0, err
		}
	}
}

// canLead reports whether waiters may receive from the link themselves.
func (d *Device) canLead() bool { return d.waiter != nil && !d.lead.off.Load() }

// sleep waits on c's wake channel until a completion, the leader's
// leaving, the deadline or ctx; it returns ctx's error only.
func (c *CQ) sleep(ctx context.Context, deadline time.Time) error {
	d := c.dev
	if d.canLead() {
		if !d.lead.follow(c) {
			return nil // nobody leads: the caller may
		}
		defer d.lead.unfollow(c)
	}
	c.sleepers.Add(1)
	defer c.sleepers.Add(-1)
	if c.n.Load() > 0 || c.intr.Load() {
		return nil
	}
	var tc <-chan time.Time
	if !deadline.IsZero() {
		t := d.timer(time.Until(deadline))
		defer d.putTimer(t)
		tc = t.C
	}
	select {
	case <-c.wake:
	case <-tc:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.n.Load() > 0 && c.sleepers.Load() > 1 {
		c.signal() // another sleeper of this CQ's
	}
	return nil
}

// signal wakes a goroutine asleep in c's Wait.
func (c *CQ) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// ready is what a leading waiter of c checks before it blocks: set
// leading, so that a completion pushed from elsewhere wakes it, then look.
func (c *CQ) ready() bool {
	c.leading.Store(true)
	return c.n.Load() > 0 || c.intr.Load()
}

// pushed wakes who waits for c's completion: a leader blocked in the
// transport, sleepers. The caller has added one.
func (c *CQ) pushed() {
	if c.leading.Load() {
		c.dev.waiter.Wake()
	}
	if c.sleepers.Load() > 0 {
		c.signal()
	}
}

// timer returns a stopped timer set to fire after dur, from the device's
// free list.
func (d *Device) timer(dur time.Duration) *time.Timer {
	select {
	case t := <-d.timers:
		t.Reset(dur)
		return t
	default:
		return time.NewTimer(dur)
	}
}

// putTimer stops t and keeps it for the next sleep.
func (d *Device) putTimer(t *time.Timer) {
	t.Stop()
	select {
	case d.timers <- t:
	default:
	}
}
