package rsocket

import (
	"net"
	"os"
	"time"
)

// want is what a waiting call waits for.
type want uint8

const (
	wantData    want = iota // data to read, or no more to come
	wantSend                // room to send a data message, or no sending at all
	wantCtrl                // a free control slot, or no connection
	wantDrained             // every message sent completed, or a failure
)

// satisfied reports whether what w waits for has happened; the caller
// holds c.mu.
func (s *stream) satisfied(w want) bool {
	switch w {
	case wantData:
		return s.rmsgHead != s.rmsgTail || !s.readable || s.err != nil
	case wantSend:
		return s.canSend() || s.writeErr() != nil
	case wantCtrl:
		return s.ctrlSeq != s.ctrlMax || !s.connected
	}
	return s.sendsDone() || s.err != nil
}

// progress is stream.progress, then a look at why the QP went to ERR
// when a flushed receive said it did; the caller holds c.mu.
func (c *Conn) progress() int {
	n := c.s.progress()
	if c.s.qpErr {
		c.s.qpDown(c.cc)
	}
	return n
}

// await waits, with c.mu held (and released while it sleeps), until w is
// satisfied, dl passes (os.ErrDeadlineExceeded) or stop closes
// (net.ErrClosed). dir is the caller's direction: one Read and one Write
// (or CloseWrite, or Close's drain) may wait at once.
//
// One of the waiting calls sleeps on the receive CQ's completion channel
// and handles the completions when woken (the receive poller); a call of
// the write direction also sleeps on the send CQ's channel, which only
// it watches. A call that is not the receive poller is woken by the
// poller when a completion concerns it, or to take over when the poller
// returns. A message a waiting Read wants thus costs one wake-up: the
// engine's goroutine wakes the reader, which handles the completion
// itself; and the acknowledgements of a connection's own writes wake
// only a waiting Write.
func (c *Conn) await(dir int, w want, dl *deadline, stop <-chan struct{}) error {
	s := &c.s
	for {
		c.progress()
		c.notify(dir)
		if s.satisfied(w) {
			c.leave(dir)
			return nil
		}
		var expired <-chan struct{}
		if dl != nil {
			expired = dl.done()
		}
		if done, err := c.block(dir, w, expired, stop); done || err != nil {
			c.leave(dir)
			return err
		}
	}
}

// block waits once: it spins first when Options.Spin says so, then
// sleeps. It reports whether w was satisfied while spinning; the caller
// holds c.mu.
func (c *Conn) block(dir int, w want, expired, stop <-chan struct{}) (bool, error) {
	if !c.polling && c.spinFor > 0 {
		if ok, err := c.spin(dir, w, expired, stop); ok || err != nil {
			return ok, err
		}
	}
	return false, c.sleep(dir, expired, stop)
}

// spin polls the CQs for up to Options.Spin, letting the other direction
// in between polls, and reports whether w was satisfied meanwhile; the
// caller holds c.mu.
func (c *Conn) spin(dir int, w want, expired, stop <-chan struct{}) (bool, error) {
	start := time.Now()
	for i := 0; ; i++ {
		c.mu.Unlock()
		c.mu.Lock()
		c.progress()
		c.notify(dir)
		if c.s.satisfied(w) {
			return true, nil
		}
		if i%16 != 15 {
			continue
		}
		select {
		case <-expired:
			return false, os.ErrDeadlineExceeded
		case <-stop:
			return false, net.ErrClosed
		default:
		}
		if c.polling || time.Since(start) >= c.spinFor {
			return false, nil
		}
	}
}

// sleep arms the CQs the call watches and sleeps until one of them, its
// own wake-up channel (the other call's word), the connection manager's
// end of the connection, the deadline or stop; the caller holds c.mu.
// The receive CQ is watched by the receive poller only: the first call
// to sleep takes that part.
func (c *Conn) sleep(dir int, expired, stop <-chan struct{}) error {
	ep := c.s.ep
	var rch, sch, cmDone <-chan struct{}
	recv := !c.polling
	// A token left from an earlier arming would end the sleep at once:
	// drop it, arm, and look at the CQs again, which finds what it
	// announced.
	if recv {
		rch, cmDone = ep.rcq.C(), c.cmDone
		drain(rch)
		ep.rcq.ReqNotify(false)
	}
	if dir == dirWrite {
		sch = ep.scq.C()
		drain(sch)
		ep.scq.ReqNotify(false)
	}
	if c.progress() > 0 {
		// Completions came before the CQs were armed: look again.
		return nil
	}
	c.polling = c.polling || recv
	c.waiting[dir] = true
	c.s.stats.Sleeps++
	c.mu.Unlock()
	var err error
	ended := false
	select {
	case <-rch:
	case <-sch:
	case <-c.wake[dir]:
	case <-cmDone:
		ended = true
	case <-expired:
		err = os.ErrDeadlineExceeded
	case <-stop:
		err = net.ErrClosed
	}
	c.mu.Lock()
	c.waiting[dir] = false
	if recv {
		c.polling = false
	}
	if ended {
		c.cmDone = nil
		c.progress()
		if c.s.connected {
			c.s.qpDown(c.cc)
		}
	}
	return err
}

// drain takes a value waiting on ch, if any.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// notify wakes the call waiting in the other direction when what
// happened since the last notify concerns it; the caller holds c.mu.
func (c *Conn) notify(dir int) {
	if o := 1 - dir; c.s.ev[o] && c.waiting[o] {
		c.signal(o)
	}
	c.s.ev = [2]bool{}
}

// leave hands the poller's part to the call waiting in the other
// direction, if nobody polls, as this one stops waiting; the caller
// holds c.mu.
func (c *Conn) leave(dir int) {
	if o := 1 - dir; c.waiting[o] && !c.polling {
		c.signal(o)
	}
}

func (c *Conn) signal(dir int) {
	select {
	case c.wake[dir] <- struct{}{}:
	default:
	}
}

// awaitDrained waits until every message sent has completed.
func (c *Conn) awaitDrained(dl *deadline) error { return c.await(dirWrite, wantDrained, dl, nil) }
