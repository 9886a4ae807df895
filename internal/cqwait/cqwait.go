// Package cqwait waits for completions on a completion queue as the C
// tools poll theirs, without allocating: it spins for a while, yielding
// the processor, then waits through the CQ's own WaitUntil where it has
// one (the software device's, whose waiting goroutine receives from the
// link itself), or else sleeps on the CQ's completion channel in short
// slices, so that every wait stays bounded by its context. roce perf and
// roce pingpong wait with it.
package cqwait

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/goroce/goroce/verbs"
)

// ErrNothing means a wait was given no CQ, or no room for a completion.
var ErrNothing = errors.New("cqwait: no CQ or no room for a completion to wait for")

// Waiter waits for completions. It is not safe for concurrent use: one
// goroutine at a time waits with it.
type Waiter struct {
	spin  time.Duration // how long to spin before sleeping; < 0 spins until the limit
	timer *time.Timer
}

// New returns a Waiter that spins for spin (0: never, below 0: for the
// whole of each wait) before it sleeps.
func New(spin time.Duration) *Waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Waiter{spin: spin, timer: t}
}

// Poll polls cq into wc until at least one completion comes or ctx ends.
func (w *Waiter) Poll(ctx context.Context, cq verbs.CQ, wc []verbs.WC) (int, error) {
	for {
		n, err := w.PollFor(ctx, cq, wc, time.Second)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// PollFor polls cq into wc until a completion comes, ctx ends or limit
// passes; it returns 0 and no error in the last case.
func (w *Waiter) PollFor(ctx context.Context, cq verbs.CQ, wc []verbs.WC, limit time.Duration) (int, error) {
	if cq == nil || len(wc) == 0 {
		return 0, ErrNothing
	}
	if n := cq.Poll(wc); n > 0 {
		return n, nil
	}
	start := time.Now()
	if w.spin != 0 {
		n, done, err := w.spinFor(ctx, cq, wc, start, limit)
		if n > 0 || done || err != nil {
			return n, err
		}
	}
	if dw, ok := cq.(deadlineWaiter); ok {
		return w.waitUntil(ctx, dw, cq, wc, start.Add(limit))
	}
	for {
		cq.ReqNotify(false)
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		rem := limit - time.Since(start)
		if rem <= 0 {
			return 0, ctx.Err()
		}
		if err := w.sleep(ctx, cq.C(), min(rem, 10*time.Millisecond)); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
	}
}

// deadlineWaiter is a CQ that waits with a deadline itself: the software
// device's (qp.CQ.WaitUntil), whose waiter spins briefly and then
// receives from the link on its own goroutine.
type deadlineWaiter interface {
	WaitUntil(ctx context.Context, deadline time.Time) (bool, error)
}

// waitUntil waits with the CQ's own WaitUntil until a completion comes
// (polled into wc), ctx ends or deadline passes (0 and no error).
func (w *Waiter) waitUntil(ctx context.Context, dw deadlineWaiter, cq verbs.CQ, wc []verbs.WC, deadline time.Time) (int, error) {
	for {
		ok, err := dw.WaitUntil(ctx, deadline)
		if err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 || !ok {
			return n, nil
		}
	}
}

// spinFor polls cq, yielding between polls, until a completion comes, the
// spin time passes, or (done) the limit does.
func (w *Waiter) spinFor(ctx context.Context, cq verbs.CQ, wc []verbs.WC, start time.Time, limit time.Duration) (n int, done bool, err error) {
	for i := 1; ; i++ {
		if n := cq.Poll(wc); n > 0 {
			return n, true, nil
		}
		if i&255 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, true, err
			}
			el := time.Since(start)
			if el > limit {
				return 0, true, nil
			}
			if w.spin > 0 && el > w.spin {
				return 0, false, nil
			}
		}
		runtime.Gosched()
	}
}

// sleep waits for a value on c, at most d, and reports ctx's error.
func (w *Waiter) sleep(ctx context.Context, c <-chan struct{}, d time.Duration) error {
	w.timer.Reset(d)
	select {
	case <-c:
	case <-w.timer.C:
	case <-ctx.Done():
	}
	w.timer.Stop()
	return ctx.Err()
}

// WaitEvent waits for the CQ's next completion event (ibv_get_cq_event;
// the caller armed it with ReqNotify); it does not poll.
func (w *Waiter) WaitEvent(ctx context.Context, cq verbs.CQ) error {
	if cq == nil {
		return ErrNothing
	}
	for {
		w.timer.Reset(50 * time.Millisecond)
		select {
		case <-cq.C():
			w.timer.Stop()
			return nil
		case <-w.timer.C:
		case <-ctx.Done():
			w.timer.Stop()
			return ctx.Err()
		}
	}
}
