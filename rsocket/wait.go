package rsocket

import (
	"context"
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
	wantIomap               // room to publish an iomap entry, or no sending at all
	wantDirect              // room for an IOWrite's RDMA WRITE, or no sending at all
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
	case wantIomap:
		return s.canPublish() || s.writeErr() != nil
	case wantDirect:
		return s.canWriteDirect() || s.writeErr() != nil
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
// One of the waiting calls (the poller) waits for the CQ, and handles
// the completions when woken; the other sleeps until the poller's word
// (a completion concerned it) or its turn to poll (the poller returned).
// Where the CQ can be waited on while receiving for the device (the
// software device's, qp.CQ.WaitUntil), the poller takes the packets from
// the link itself (lead): what it waits for costs no hand-off between
// goroutines. Elsewhere it sleeps on the CQ's completion channel.
func (c *Conn) await(dir int, w want, dl *deadline, stop <-chan struct{}) error {
	s := &c.s
	for {
		c.progress()
		c.notify(dir)
		if s.satisfied(w) {
			c.leave(dir)
			return nil
		}
		if done, err := c.block(dir, w, dl, stop); done || err != nil {
			c.leave(dir)
			return err
		}
	}
}

// block waits once: it spins first when Options.Spin says so, then
// sleeps. It reports whether w was satisfied while spinning; the caller
// holds c.mu.
func (c *Conn) block(dir int, w want, dl *deadline, stop <-chan struct{}) (bool, error) {
	var expired <-chan struct{}
	if dl != nil {
		expired = dl.done()
	}
	if !c.polling && c.spinFor > 0 {
		if ok, err := c.spin(dir, w, expired, stop); ok || err != nil {
			return ok, err
		}
	}
	if !c.polling && c.s.ep.cq.wait != nil && !c.streaming() {
		return false, c.lead(dir, dl, expired, stop)
	}
	return false, c.sleep(dir, expired, stop)
}

// streamBytes is the bytes moved (either way) between waits, on
// average, that make the connection a stream: its waits sleep on the
// CQ's channel rather than lead, so that the device's receive goroutine
// takes the packets while this call copies (two threads at work), where
// a lead would do both in turn. A request answered by a response moves
// far less between its waits, and leads: its answer costs no hand-off.
// The average moves slowly (an eighth of the difference each wait), so a
// connection does not flip between the two: a wait that does not lead
// right after one that did finds the receive goroutine standing by.
const streamBytes = 16 << 10

// streaming updates the average bytes moved between waits and reports
// whether the connection is a stream; the caller holds c.mu.
func (c *Conn) streaming() bool {
	moved := c.s.stats.BytesReceived + c.s.stats.BytesSent
	d := int64(moved - c.movedAtWait)
	c.movedAtWait = moved
	c.movedAvg += (d - c.movedAvg) / 8
	return c.movedAvg >= streamBytes
}

// leadSlice bounds one wait of a leading call: it then looks whether the
// connection manager ended the connection (which also fails the QP, and
// that flushes the receives, so it mostly learns that sooner).
const leadSlice = 100 * time.Millisecond

// lead is the poller's sleep when the CQ can be waited on while receiving
// for the device (qp.CQ.WaitUntil): the call itself takes the packet from
// the link and handles it, so what it waits for costs no hand-off between
// goroutines, as CQ.Wait gives roce perf. It returns when the CQ has a
// completion, the other call's word comes, the deadline passes, stop
// closes, or the connection ends. Each of those but the last interrupts
// the wait (signal, the deadlines' wake, Close: each calls the CQ's
// Interrupt after it set what this looks at). expired is dl's channel.
// The caller holds c.mu.
func (c *Conn) lead(dir int, dl *deadline, expired, stop <-chan struct{}) error {
	cq := c.s.ep.cq.wait
	c.polling, c.leading = true, dir
	c.waiting[dir] = true
	c.s.stats.Sleeps++
	cmDone := c.cmDone
	c.mu.Unlock()
	var err error
	ended := false
	for {
		select {
		case <-c.wake[dir]:
		case <-cmDone:
			ended = true
		case <-expired:
			err = os.ErrDeadlineExceeded
		case <-stop:
			err = net.ErrClosed
		default:
			until := time.Now().Add(leadSlice)
			if dl != nil {
				if e := dl.done(); e != expired {
					expired = e // moved after it passed: a new channel
					continue
				}
				if t := dl.when(); !t.IsZero() && t.Before(until) {
					until = t
				}
			}
			if ok, _ := cq.WaitUntil(context.Background(), until); !ok {
				continue
			}
		}
		break
	}
	c.mu.Lock()
	c.waiting[dir] = false
	c.polling, c.leading = false, noDir
	if ended {
		c.cmEnded()
	}
	return err
}

// spin polls the CQ for up to Options.Spin, letting the other direction
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

// sleep arms the CQ, when this call polls, and sleeps until it, its own
// wake-up channel (the other call's word), the connection manager's end
// of the connection, the deadline or stop; the caller holds c.mu. The
// CQ is watched by the poller only: the first call to sleep takes that
// part.
func (c *Conn) sleep(dir int, expired, stop <-chan struct{}) error {
	ep := c.s.ep
	var cch, cmDone <-chan struct{}
	recv := !c.polling
	// A token left from an earlier arming would end the sleep at once:
	// drop it, arm, and look at the CQ again, which finds what it
	// announced.
	if recv {
		cch, cmDone = ep.cq.C(), c.cmDone
		drain(cch)
		ep.cq.ReqNotify(false)
	}
	if c.progress() > 0 {
		// Completions came before the CQ was armed: look again.
		return nil
	}
	c.polling = c.polling || recv
	c.waiting[dir] = true
	c.s.stats.Sleeps++
	c.mu.Unlock()
	var err error
	ended := false
	select {
	case <-cch:
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
		c.cmEnded()
	}
	return err
}

// cmEnded takes the connection manager's end of the connection, seen by
// a waiting call: what completed meanwhile first, then why the QP went
// down, if the stream is still up. The caller holds c.mu.
func (c *Conn) cmEnded() {
	c.cmDone = nil
	c.progress()
	if c.s.connected {
		c.s.qpDown(c.cc)
	}
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
	if c.leading == dir {
		c.s.ep.cq.wait.Interrupt()
	}
}

// awaitDrained waits until every message sent has completed.
func (c *Conn) awaitDrained(dl *deadline) error { return c.await(dirWrite, wantDrained, dl, nil) }
