//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/mmsg"
	"github.com/goroce/goroce/transport"
)

// Waits: a goroutine that waits for packets receives them itself.
//
// The receive goroutine waits in Go's netpoller for the socket, receives
// a batch and hands it to the handler; whoever waits for what the batch
// brings (a completion) is woken by the handler: two goroutines, and a
// hand-off between them, per batch. Wait lets the waiting goroutine take
// the receive goroutine's place in the netpoller instead: it is woken by
// the socket, receives and handles the batch on its own stack, and the
// handler's work is the last thing done before it returns to its caller.
//
// Ownership of the socket's netpoller wait (and of its read deadline,
// which is how a wait is bounded and woken) is Transport.ownMu. A Wait
// counts itself in polls, kicks the receive goroutine out of the
// netpoller (a read deadline in the past) and takes ownMu; the receive
// goroutine, finding polls moved, stands by: it sleeps pollerGrace, and
// while a Wait is in progress, until it ends, and takes the socket back
// once waits (and polls) stop coming.

// aLongTimeAgo is a read deadline in the past: it ends a netpoller wait.
var aLongTimeAgo = time.Unix(1, 0)

// Wait receives, on the caller's goroutine, the next batch that comes
// and hands it to the handler before returning the number of datagrams
// it took (transport.Waiter). Before it blocks in the netpoller it calls
// ready, and returns 0 when ready reports true; it blocks until a batch
// comes, deadline passes (the zero Time: none) or Wake is called, and
// returns 0 in the last two cases. One goroutine waits at a time: others
// get transport.ErrWaiting. After Close it fails with net.ErrClosed.
func (t *Transport) Wait(deadline time.Time, ready func() bool) (int, error) {
	if !t.ok() {
		return 0, errNilTransport
	}
	if !t.rxRun.Load() {
		return 0, fmt.Errorf("%w: Wait before Start: start the transport first", ErrNotStarted)
	}
	if t.closing.Load() {
		return 0, fmt.Errorf("udp: wait: %w", net.ErrClosed)
	}
	if !t.waitMu.TryLock() {
		return 0, transport.ErrWaiting
	}
	defer t.waitMu.Unlock()
	t.own()
	defer t.ownMu.Unlock()
	defer t.endWait()
	if t.closing.Load() {
		return 0, fmt.Errorf("udp: wait: %w", net.ErrClosed)
	}
	t.deadlineSet.Store(true)
	if err := t.conn.SetReadDeadline(deadline); err != nil {
		return 0, fmt.Errorf("udp: wait: %w", err)
	}
	t.waitN, t.waitReady = 0, ready
	err := t.rc.Read(t.waitFn)
	t.waitReady = nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("udp: wait: %w", err)
	}
	return t.waitN, nil
}

// own takes ownMu for a Wait, counted in polls and in wanting until it
// has it. A receive goroutine in the netpoller is kicked out; one about
// to go in sees wanting and does not (Dekker: wanting, then inRead here;
// inRead, then wanting in readOwned), nor does it go back while wanting
// is set (standBy). A count in polls alone is not enough: a receive
// goroutine that read polls after the count, stood by for pollerGrace
// while the Wait was kept from running (a loaded machine), and went back
// to the socket blocked there with no deadline, and the Wait blocked on
// ownMu until the next datagram came.
func (t *Transport) own() {
	t.polls.Add(1)
	t.wanting.Add(1)
	if t.inRead.Load() {
		t.kick()
	}
	if testHookOwn != nil {
		testHookOwn()
	}
	t.ownMu.Lock()
	t.waiting.Store(true)
	t.wanting.Add(-1)
}

// testHookOwn, when set (by tests), runs between a Wait's kick and its
// try for ownMu.
var testHookOwn func()

// Wake ends the Wait in progress, if it is blocked in the netpoller
// (transport.Waiter). A Wait that is not calls its ready before it
// blocks: a Wake for what ready checks is not lost, and a Wake from the
// handler the Wait itself runs costs nothing.
func (t *Transport) Wake() {
	if t.ok() && t.waiting.Load() && t.parked.Load() {
		t.kick()
	}
}

// kick ends a netpoller wait on the socket: the receive goroutine's or a
// waiter's.
func (t *Transport) kick() {
	t.deadlineSet.Store(true)
	t.conn.SetReadDeadline(aLongTimeAgo)
}

// endWait ends a Wait: a receive goroutine standing by for it hears so.
func (t *Transport) endWait() {
	t.waiting.Store(false)
	if t.exitWanted.Load() {
		select {
		case t.waitExit <- struct{}{}:
		default:
		}
	}
}

// waitRead is a Wait's RawConn.Read callback: one recvmmsg, handed to the
// handler. It returns false, to wait in the netpoller, when the socket
// is empty.
func (t *Transport) waitRead(fd uintptr) bool {
	t.parked.Store(false)
	if t.closing.Load() {
		return true
	}
	t.rxMu.Lock()
	rx := t.rx
	rx.reset()
	n, e := mmsg.Recv(fd, rx.msgs, unix.MSG_DONTWAIT)
	if e == 0 && n > 0 {
		rx.n = n
		t.deliver(rx, t.rcv)
		t.rxMu.Unlock()
		t.waitN = n
		return true
	}
	t.rxMu.Unlock()
	if e != 0 && e != unix.EAGAIN {
		// An error other than an empty socket ends the wait: its
		// caller looks again.
		return true
	}
	// About to block: a Wake kicks from now on (Dekker with the waker,
	// whose cause ready sees).
	t.parked.Store(true)
	return t.waitReady != nil && t.waitReady()
}

// standBy keeps the receive goroutine off the socket while polls and
// waits come: it sleeps pollerGrace (waiting in the netpoller meanwhile
// would wake it for every datagram a poller then takes), and while a
// Wait is in progress, until it ends.
func (t *Transport) standBy() {
	time.Sleep(pollerGrace)
	for (t.waiting.Load() || t.wanting.Load() > 0) && !t.closing.Load() {
		if !t.waiting.Load() {
			time.Sleep(pollerGrace / 8) // a Wait is on its way to the socket
			continue
		}
		t.exitWanted.Store(true)
		if t.waiting.Load() {
			<-t.waitExit // Close sends one too
		}
		t.exitWanted.Store(false)
	}
}

// pollerGrace is how long after a Poll or a Wait the receive goroutine
// leaves receiving to pollers and waiters (it looks again after that
// long).
const pollerGrace = time.Millisecond
