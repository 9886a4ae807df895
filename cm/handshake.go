package cm

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/goroce/goroce/mad"
)

// A listener's handshakes: once Accept has sent a REP, the connection
// waits for its RTU (Listener.inflight) and the Accept that sent it waits
// with it (Conn.awaited); when another request waits after RTUPatience,
// or half the backlog does, Accept leaves it: when the handshake ends,
// either way, markReady hands the connection to the listener
// (Listener.ended), and a later Accept returns it. At most Config.MaxHalfOpen handshakes wait per
// listener: to start one more, Accept gives the oldest up.

// RTUPatience is how long Accept waits for the RTU of the handshake it
// started before it takes the next request, if one waits: a peer
// answers in a round trip, and one that has not answered by then may
// never do.
const RTUPatience = 50 * time.Millisecond

// await waits for the end of c's handshake, which this Accept started,
// and returns what Accept returns for it; done is false when it left the
// handshake to finish in the background: because its RTU took longer
// than RTUPatience and another request waits, or at once while half the
// backlog waits (a flood of requests that never finish must not fill it,
// and a peer answers well within the time the next request takes). When
// ctx ends first, the handshake is rejected.
func (l *Listener) await(ctx context.Context, c *Conn) (conn *Conn, err error, done bool) {
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		if n := len(l.pending); (n >= max(1, cap(l.pending)/2) || n > 0 && time.Since(start) >= RTUPatience) && l.leave(c) {
			return nil, nil, false
		}
		select {
		case <-c.ready:
			conn, err = l.finish(c)
			return conn, err, true
		case <-ctx.Done():
			l.abort(c, ctx.Err())
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, ctx.Err()), true
		case <-t.C:
		}
	}
}

// leave hands c's handshake to the background; it reports false when
// the handshake has ended already (c.ready is closed).
func (l *Listener) leave(c *Conn) bool {
	a := l.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.flags.ready {
		return false
	}
	c.awaited = false
	return true
}

// handshakeEnded hands a listener's handshake that ended to Accept,
// unless an Accept waits for it; the caller holds a.mu. The channel has
// room for twice as many as may wait, and Accept empties it before it
// starts another handshake.
func (a *Agent) handshakeEnded(c *Conn) {
	c.inflight = false
	l := c.listener
	l.inflight = slices.DeleteFunc(l.inflight, func(x *Conn) bool { return x == c })
	if c.awaited {
		return
	}
	select {
	case l.ended <- c:
	default:
		// Cannot happen (see above); if it did, the connection would be
		// lost to Accept: end it rather than leak it.
		a.log.Error("cm: no room for an ended handshake", "local_id", c.info.LocalCommID)
		if c.hsErr == nil {
			a.toErr(c)
			c.endLocked(ErrClosed)
			a.sendDREQ(c)
		}
	}
}

// finish returns what Accept returns for a handshake that ended: the
// connection, or its error after releasing what the agent made for it.
func (l *Listener) finish(c *Conn) (*Conn, error) {
	a := l.a
	a.mu.Lock()
	err := c.hsErr
	a.mu.Unlock()
	if err != nil {
		c.release()
		return nil, err
	}
	if l.shared != nil {
		c.unshare = l.shared.ref()
	}
	return c, nil
}

// makeRoomLocked gives up the oldest handshakes waiting for their RTU
// while the listener has Config.MaxHalfOpen of them, so that one more
// can start; the caller holds a.mu and releases the connections returned
// once it has let go of it.
func (l *Listener) makeRoomLocked() []*Conn {
	a := l.a
	var gone []*Conn
	for len(l.inflight) >= a.maxHalfOpen {
		c := l.inflight[0]
		l.inflight = l.inflight[1:]
		c.inflight = false
		a.ctr.evicted.Add(1)
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: mad.RejectedOther, Reason: mad.RejTimeout})
		a.toErr(c)
		c.fail(fmt.Errorf("cm: accept from %v: %w: given up for newer requests, %d handshakes waiting for their RTU "+
			"(Config.MaxHalfOpen)", c.remote, ErrTimeout, a.maxHalfOpen))
		a.forget(c)
		gone = append(gone, c)
	}
	return gone
}

// abort rejects c's handshake if it still waits for its RTU, as an
// Accept whose ctx ended leaves it, and releases what the agent made for
// it.
func (l *Listener) abort(c *Conn, why error) {
	a := l.a
	a.mu.Lock()
	if !c.inflight {
		a.mu.Unlock()
		return
	}
	c.inflight = false
	l.inflight = slices.DeleteFunc(l.inflight, func(x *Conn) bool { return x == c })
	a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
		MessageRejected: mad.RejectedOther, Reason: mad.RejConsumerDefined})
	a.toErr(c)
	c.fail(fmt.Errorf("cm: accept from %v: %w", c.remote, why))
	a.forget(c)
	a.mu.Unlock()
	c.release()
}

// closeHandshakesLocked ends the handshakes of a listener that closes:
// those waiting for their RTU are rejected, those that ended unreturned
// are disconnected; the caller holds a.mu.
func (a *Agent) closeHandshakesLocked(l *Listener) {
	for _, c := range l.inflight {
		c.inflight = false
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: mad.RejectedOther, Reason: mad.RejConsumerDefined})
		a.toErr(c)
		c.fail(ErrClosed)
		a.forget(c)
		c.release()
	}
	l.inflight = nil
	for {
		select {
		case c := <-l.ended:
			if c.hsErr == nil && c.state == stEstablished {
				a.toErr(c)
				c.endLocked(ErrClosed)
				a.sendDREQ(c)
			}
			c.release()
		default:
			return
		}
	}
}
