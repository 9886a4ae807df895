package roce

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Errors of the Poll functions' arguments.
var (
	errPollNilCQ  = fmt.Errorf("roce: Poll: %w: a CQ from Device.CreateCQ is required", verbs.ErrNil)
	errPollNoRoom = fmt.Errorf("roce: Poll: %w: wc has no room; give it a length of at least 1", verbs.ErrInvalidAttr)
)

// Poll waits for completions on cq and moves up to len(wc) of them,
// oldest first, into wc. It returns as soon as there is at least one, or
// with ctx's error when ctx ends first; check each completion with its
// Err method. Poll polls once and, when the CQ is empty, sleeps until the
// CQ's next completion (CQ.Wait: ReqNotify, then the completion
// channel), so that a waiting program costs no CPU and wakes a few
// microseconds after the completion came, the time a goroutine takes to
// be woken. Poll allocates nothing.
//
// Poll is the loop every program writes around CQ.Poll:
//
//	n, err := roce.Poll(ctx, cq, wcs)
//	if err != nil {
//		return err // ctx ended
//	}
//	for _, wc := range wcs[:n] {
//		if err := wc.Err(); err != nil {
//			return err
//		}
//		...
//	}
func Poll(ctx context.Context, cq verbs.CQ, wc []verbs.WC) (int, error) {
	return PollSpin(ctx, cq, wc, 0)
}

// PollSpin is Poll that busy-polls cq for up to spin before it sleeps.
//
// Spinning trades a core for latency. It pays when a program waits for
// one completion at a time on a short round trip (ping-pong, small
// RPCs) and has a core to spare: with the software device in busy-poll
// mode (Config.BusyPoll) the spinning goroutine receives from the link
// itself, and the completion is there without any goroutine being woken
// (the lowest latency goroutine wake-ups allow: see BENCHMARKS.md). It
// costs when cores are few or completions are far apart: the spinning
// goroutine takes the processor from the engine's own goroutines (which,
// outside busy-poll mode, are the ones that produce the completion
// waited for) and from the rest of the program, and a spin longer than
// the usual wait burns CPU for nothing. On the software device outside
// busy-poll mode an empty CQ.Poll yields the processor, so there
// spinning mostly adds scheduler work; leave spin at 0 there unless a
// benchmark says otherwise. And in busy-poll mode a poll makes the UDP
// transport's own receive loop leave the socket to pollers for about a
// millisecond: a spin that ends in a sleep may then wait that long for
// the next packet. There, spin for longer than the gaps between
// completions (a goroutine dedicated to polling), or not at all.
func PollSpin(ctx context.Context, cq verbs.CQ, wc []verbs.WC, spin time.Duration) (int, error) {
	switch {
	case cq == nil:
		return 0, errPollNilCQ
	case len(wc) == 0:
		return 0, errPollNoRoom
	}
	if n := cq.Poll(wc); n > 0 {
		return n, nil
	}
	if spin > 0 {
		if n, err := spinPoll(ctx, cq, wc, spin); n > 0 || err != nil {
			return n, err
		}
	}
	for {
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
	}
}

// spinPoll polls cq until a completion comes, spin passes or ctx ends;
// it looks at the clock and ctx every 64 polls.
func spinPoll(ctx context.Context, cq verbs.CQ, wc []verbs.WC, spin time.Duration) (int, error) {
	start := time.Now()
	for i := 1; ; i++ {
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if i%64 != 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Since(start) >= spin {
			return 0, nil
		}
	}
}

// PollOne waits for the next completion on cq (as Poll does) and returns
// it with its error: ctx's error (and a zero WC) when ctx ended first,
// otherwise the completion's own (verbs.WC.Err: nil when it succeeded, a
// *verbs.WCError that matches its Status with errors.Is when it did not).
// It is the way to wait for the request just posted:
//
//	if err := qp.PostSend(wrs); err != nil {
//		return err
//	}
//	if _, err := roce.PollOne(ctx, cq); err != nil {
//		return fmt.Errorf("RDMA WRITE: %w", err)
//	}
//
// PollOne allocates the WC it polls into; Poll with a slice of the
// caller's does not.
func PollOne(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	if _, err := Poll(ctx, cq, wc[:]); err != nil {
		return verbs.WC{}, fmt.Errorf("roce: waiting for a completion: %w", err)
	}
	return wc[0], wc[0].Err()
}
