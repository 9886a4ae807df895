package cm

import (
	"fmt"
	"slices"

	"github.com/goroce/goroce/mad"
)

// A listener's handshakes: once Accept has sent a REP, the connection
// waits for its RTU in the agent (Listener.inflight) while Accept goes on
// with the next request; when the handshake ends, either way, markReady
// hands the connection to the listener (Listener.ended), and an Accept
// returns it. At most Config.MaxHalfOpen handshakes wait per listener:
// to start one more, Accept gives the oldest up.

// handshakeEnded hands a listener's handshake that ended to Accept; the
// caller holds a.mu. The channel has room for twice as many as may wait,
// and Accept empties it before it starts another handshake.
func (a *Agent) handshakeEnded(c *Conn) {
	c.inflight = false
	l := c.listener
	l.inflight = slices.DeleteFunc(l.inflight, func(x *Conn) bool { return x == c })
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

// abort rejects the handshakes in cs that still wait for their RTU, as an
// Accept whose ctx ended leaves them; it releases what the agent made for
// them.
func (l *Listener) abort(cs []*Conn, why error) {
	a := l.a
	a.mu.Lock()
	var gone []*Conn
	for _, c := range cs {
		if !c.inflight {
			continue
		}
		c.inflight = false
		l.inflight = slices.DeleteFunc(l.inflight, func(x *Conn) bool { return x == c })
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: mad.RejectedOther, Reason: mad.RejConsumerDefined})
		a.toErr(c)
		c.fail(fmt.Errorf("cm: accept from %v: %w", c.remote, why))
		a.forget(c)
		gone = append(gone, c)
	}
	a.mu.Unlock()
	for _, c := range gone {
		c.release()
	}
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
