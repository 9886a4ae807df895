package rsocket

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
)

// Conn is one end of an rsocket stream: a net.Conn over an RC queue pair
// that speaks librdmacm's rsocket protocol, so that its peer may be
// another Conn or a program using rsockets (rstream, riostream, rcopy, or
// any socket program under librspreload.so).
//
// Read returns what has arrived, up to len(p), waiting only when nothing
// has; Write returns once all of p is copied out (into the send buffer,
// or inline into the send queue), waiting for the peer's credits and
// buffers when it runs ahead of the peer's reader. Deadlines, Close and
// CloseWrite behave as for a *net.TCPConn; errors are *net.OpError values
// whose Err is os.ErrDeadlineExceeded, net.ErrClosed, ErrReset,
// ErrShutdown, ErrConnLost or ErrProtocol (and a Read past the peer's
// orderly end returns io.EOF).
//
// A Conn is safe for concurrent use: Reads are served one at a time, as
// are Writes (with CloseWrite), and one Read and one Write proceed at the
// same time; Close, the deadline setters and the address methods may be
// called at any time from any goroutine, and Close makes every blocked
// call return.
type Conn struct {
	cc           *cm.Conn
	laddr, raddr *Addr
	linger       time.Duration
	log          *slog.Logger

	rsem, wsem chan struct{} // held by the Read, the Write in progress
	rdl, wdl   *deadline
	closing    chan struct{} // closed by Close
	closeOnce  sync.Once
	keep       *time.Timer // keepalives; nil when off
	keepEvery  time.Duration
	spinFor    time.Duration

	mu      sync.Mutex
	s       stream // under mu
	polling bool   // a call waits on the receive CQ's channel, or leads; under mu
	leading int    // the direction of the polling call if it leads (in the CQ's WaitUntil), or noDir; under mu
	// movedAtWait is the bytes sent and received when a call last
	// waited, and movedAvg their average between waits (streaming);
	// under mu.
	movedAtWait uint64
	movedAvg    int64
	waiting     [2]bool
	wake        [2]chan struct{}
	cmDone      <-chan struct{} // cc.Done() until seen closed; under mu
	closed      bool            // under mu
}

var _ net.Conn = (*Conn)(nil)

// newConn makes the Conn of an established connection: ep's resources,
// connected by cc to a peer that sent peer.
func newConn(ep *endpoint, cc *cm.Conn, o *Options, peer *connData) *Conn {
	c := &Conn{
		cc: cc, laddr: &Addr{AddrPort: cc.LocalAddr()}, raddr: &Addr{AddrPort: cc.RemoteAddr()},
		linger: o.Linger, log: o.Logger, spinFor: o.Spin,
		rsem: make(chan struct{}, 1), wsem: make(chan struct{}, 1),
		rdl: newDeadline(), wdl: newDeadline(), closing: make(chan struct{}),
		wake:   [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)},
		cmDone: cc.Done(),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.s.init(ep, o, peer)
	c.leading = noDir
	if w := ep.cq.wait; w != nil {
		c.rdl.wake, c.wdl.wake = w.Interrupt, w.Interrupt
	}
	if o.KeepAlive > 0 {
		c.keepEvery = o.KeepAlive
		// Under c.mu, which keepalive takes first: a tick that comes
		// before the assignment ends would read c.keep as it is written.
		c.mu.Lock()
		c.keep = time.AfterFunc(o.KeepAlive, c.keepalive)
		c.mu.Unlock()
	}
	c.log.Debug("rsocket: connected", "local", c.laddr, "remote", c.raddr, "qpn", ep.qp.QPN(),
		"credits", peer.credits, "peer_buffer", peer.dataBuf.length*2)
	return c
}

// Stats counts what a connection did. Fields are cumulative. It is a
// copy, owned by the caller.
type Stats struct {
	// MessagesSent and MessagesReceived count data messages (RDMA WRITEs
	// with immediate carrying stream bytes), BytesSent and BytesReceived
	// their bytes.
	MessagesSent, MessagesReceived uint64
	BytesSent, BytesReceived       uint64
	// CreditsSent and CreditsReceived count credit messages, with or
	// without a new receive buffer.
	CreditsSent, CreditsReceived uint64
	// IOWrites and IOBytesSent count the RDMA WRITEs IOWrite sent and
	// their bytes; IOMapsSent and IOMapsReceived the iomap entries
	// published to the peer (Map) and by it.
	IOWrites, IOBytesSent      uint64
	IOMapsSent, IOMapsReceived uint64
	// Sleeps counts the times a Read, Write or Close waited for
	// completions or for the other call, past Options.Spin.
	Sleeps uint64
}

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats {
	if !c.ok() {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.stats
}

// ok reports whether c is a Conn that Dial or Accept made.
func (c *Conn) ok() bool { return c != nil && c.cc != nil }

// LocalAddr returns this side's address and port.
func (c *Conn) LocalAddr() net.Addr {
	if !c.ok() {
		return nil
	}
	return c.laddr
}

// RemoteAddr returns the peer's address and port.
func (c *Conn) RemoteAddr() net.Addr {
	if !c.ok() {
		return nil
	}
	return c.raddr
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if !c.ok() {
		return errInvalid
	}
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the deadline of Read calls, pending ones too.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if !c.ok() {
		return errInvalid
	}
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline of Write calls, pending ones too.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if !c.ok() {
		return errInvalid
	}
	c.wdl.set(t)
	return nil
}

func (c *Conn) opError(op string, err error) error {
	if err == io.EOF {
		return err
	}
	return opError(op, c.laddr, c.raddr, err)
}

// enter takes the direction's turn (sem), unless the deadline passes or
// the Conn closes first.
func (c *Conn) enter(sem chan struct{}, dl *deadline) error {
	select {
	case <-c.closing:
		return net.ErrClosed
	case <-dl.done():
		return os.ErrDeadlineExceeded
	default:
	}
	select {
	case sem <- struct{}{}:
	case <-c.closing:
		return net.ErrClosed
	case <-dl.done():
		return os.ErrDeadlineExceeded
	}
	select {
	case <-c.closing:
		<-sem
		return net.ErrClosed
	default:
	}
	return nil
}

// tryEnter is enter without the wait: it fails with
// os.ErrDeadlineExceeded when another call has the turn.
func (c *Conn) tryEnter(sem chan struct{}, dl *deadline) error {
	select {
	case <-c.closing:
		return net.ErrClosed
	case <-dl.done():
		return os.ErrDeadlineExceeded
	default:
	}
	select {
	case sem <- struct{}{}:
		return nil
	default:
		return os.ErrDeadlineExceeded
	}
}

// Read reads what has arrived, up to len(p) bytes, waiting until some
// data has. After the peer's CloseWrite or Close, and the data sent
// before it, Read returns io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	if !c.ok() {
		return 0, errInvalid
	}
	if err := c.enter(c.rsem, c.rdl); err != nil {
		return 0, c.opError("read", err)
	}
	defer func() { <-c.rsem }()
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.s
	for {
		if s.rmsgHead == s.rmsgTail {
			if err := c.await(dirRead, wantData, c.rdl, c.closing); err != nil {
				return 0, c.opError("read", err)
			}
		}
		if n := s.consume(p); n > 0 {
			if s.creditsDue() && s.ctrlSeq == s.ctrlMax {
				// Credits wait for a control slot: completions of
				// earlier control messages free them.
				c.progress()
				c.notify(dirRead)
			} else {
				s.updateCredits()
			}
			return n, nil
		}
		if err := s.readErr(); err != nil {
			c.notify(dirRead)
			return 0, c.opError("read", err)
		}
	}
}

// Write writes all of p, waiting for the peer's credits and buffers as
// needed. It returns early, with the count written, on an error or when
// the write deadline passes.
func (c *Conn) Write(p []byte) (int, error) {
	if !c.ok() {
		return 0, errInvalid
	}
	if err := c.enter(c.wsem, c.wdl); err != nil {
		return 0, c.opError("write", err)
	}
	defer func() { <-c.wsem }()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.s
	n := 0
	for n < len(p) {
		if !s.canSend() {
			if err := c.await(dirWrite, wantSend, c.wdl, c.closing); err != nil {
				return n, c.opError("write", err)
			}
		}
		if err := s.writeErr(); err != nil {
			c.notify(dirWrite)
			return n, c.opError("write", err)
		}
		if !s.canSend() {
			continue
		}
		k, err := s.sendData(p[n:])
		if err != nil {
			c.notify(dirWrite)
			return n, c.opError("write", err)
		}
		n += k
	}
	return n, nil
}

// CloseWrite shuts the sending side down: the peer reads io.EOF after
// the data written before, and may go on writing to this side (an
// rsocket SHUTDOWN message; a DISCONNECT when the peer had shut down its
// side already). Write then fails with ErrShutdown.
func (c *Conn) CloseWrite() error {
	if !c.ok() {
		return errInvalid
	}
	if err := c.enter(c.wsem, c.wdl); err != nil {
		return c.opError("close", err)
	}
	defer func() { <-c.wsem }()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.s
	if s.wshut {
		return nil
	}
	if err := c.awaitCtrl(c.wdl, c.closing); err != nil {
		return c.opError("close", err)
	}
	if s.connected {
		if s.readable {
			s.sendCtrl(ctrlShutdown)
		} else {
			s.sendCtrl(ctrlDisconnect)
			s.connected = false
		}
	}
	s.wshut, s.writable = true, false
	return nil
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// awaitCtrl waits for a free control slot, or for the connection to end.
func (c *Conn) awaitCtrl(dl *deadline, stop <-chan struct{}) error {
	for c.s.connected && c.s.ctrlSeq == c.s.ctrlMax {
		if err := c.await(dirWrite, wantCtrl, dl, stop); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the connection as rsockets' rclose does: it sends the
// peer a DISCONNECT after the data already written, waits until the
// peer's device has acknowledged all of it (or the QP fails, or
// Options.Linger passes), disconnects through the connection manager
// (DREQ, waiting up to 2 s for the answer) and frees the queue pair and
// buffers. When the peer sent its DISCONNECT first, Close waits for the
// peer's DREQ instead, for one and a half ACK timeouts at most, so that
// the QP is there to acknowledge the DISCONNECT again should the first
// acknowledgment have been lost. Blocked Reads and Writes return
// net.ErrClosed at once. A second Close returns an error matching
// net.ErrClosed.
func (c *Conn) Close() error {
	if !c.ok() {
		return errInvalid
	}
	first := false
	c.closeOnce.Do(func() {
		first = true
		close(c.closing)
		if w := c.s.ep.cq.wait; w != nil {
			w.Interrupt() // a call that leads looks at closing
		}
	})
	if !first {
		return c.opError("close", net.ErrClosed)
	}
	// Calls under way return at once; take their turns for good.
	c.rsem <- struct{}{}
	c.wsem <- struct{}{}
	if c.keep != nil {
		c.keep.Stop()
	}
	c.rdl.stop()
	c.wdl.stop()
	end := time.Now().Add(c.linger)
	c.drain(end)
	c.timeWait(end)
	ctx, cancel := context.WithTimeout(context.Background(), min(c.linger, disconnectWait))
	err := c.cc.CloseContext(ctx)
	cancel()
	c.log.Debug("rsocket: closed", "local", c.laddr, "remote", c.raddr, "disconnect", err)
	c.mu.Lock()
	c.closed = true
	c.s.ep.close()
	c.mu.Unlock()
	return nil
}

// drain sends a DISCONNECT if the connection is up and waits until every
// message sent has completed, until end at the latest.
func (c *Conn) drain(end time.Time) {
	dl := newDeadline()
	dl.set(end)
	defer dl.stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.s
	if !s.connected {
		return
	}
	if c.awaitCtrl(dl, nil) != nil || !s.connected {
		return
	}
	s.sendCtrl(ctrlDisconnect)
	s.connected, s.readable, s.writable = false, false, false
	for !s.sendsDone() && s.err == nil {
		if c.awaitDrained(dl) != nil {
			return
		}
	}
}

// timeWait holds the QP, until end at the latest, when the peer ended
// the connection with a DISCONNECT and this side sent none: until the
// peer's DREQ, or one and a half ACK timeouts after the DISCONNECT came.
// An rsocket peer disconnects only once its DISCONNECT is acknowledged
// (rshutdown waits for every send). Were that acknowledgment lost and
// the QP gone, the peer's retransmission would find nobody to answer it,
// and the peer would wait out its retries, about eight ACK timeouts.
func (c *Conn) timeWait(end time.Time) {
	c.mu.Lock()
	s := &c.s
	came, hold := s.peerEnded, !s.peerEnded.IsZero() && !s.endSent && s.err == nil
	c.mu.Unlock()
	rto := bth.ACKTimeout(c.cc.Info().LocalACKTimeout)
	if !hold || rto == 0 { // 0: no timeout, so no retransmission either
		return
	}
	if last := came.Add(rto + rto/2); last.Before(end) {
		end = last
	}
	tm := time.NewTimer(time.Until(end))
	defer tm.Stop()
	select {
	case <-c.cc.Done():
	case <-tm.C:
	}
}

// keepalive probes an idle connection with a zero-length RDMA WRITE, as
// librdmacm's keepalive service does, and handles what completed
// meanwhile, so that a peer gone silent fails the QP's retries and a
// waiting Read learns it.
func (c *Conn) keepalive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isClosed(c.closing) || c.closed {
		// A tick that raced Close: the QP may be gone, and the timer
		// must stay stopped.
		return
	}
	s := &c.s
	c.progress()
	for d := range c.waiting {
		if s.ev[d] && c.waiting[d] {
			c.signal(d)
		}
	}
	s.ev = [2]bool{}
	if s.connected && !s.active && s.ctrlSeq != s.ctrlMax {
		s.sendCtrl(ctrlKeepalive)
	}
	s.active = false
	c.keep.Reset(c.keepEvery)
}
