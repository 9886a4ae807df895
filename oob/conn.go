package oob

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Port is the TCP port rdma-core's examples and perftest use by default.
const Port = 18515

// DefaultTimeout bounds each step whose context has no deadline, when
// Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Config holds the options of the exchanges. A nil *Config means the
// defaults. A Config is read, never written, by this package: it is safe to
// share between goroutines.
type Config struct {
	// Timeout bounds each step (each message read or written, each accept
	// or dial) whose context has no deadline. A context deadline, when
	// there is one, is used instead. Zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives Debug records for each step; nil discards them.
	Logger *slog.Logger

	// PerftestVersion is the version a Perftest session announces; empty
	// means PerftestVersion ("6.06", perftest v4.5-0.17). It must fit in
	// 15 bytes.
	PerftestVersion string
	// MinPeerVersion is the oldest peer version a Perftest session accepts;
	// zero means MinPeerVersion (5.70, as perftest v4.5 checks). A
	// negative value accepts any version.
	MinPeerVersion float64
	// ReportPerPort adds the four per-port fields (bw_avg_p1,
	// msgRate_avg_p1, bw_avg_p2, msgRate_avg_p2) to the BW report
	// exchange, as perftest's --report-per-port does. Both sides must agree.
	ReportPerPort bool
}

func (c *Config) timeout() time.Duration {
	if c == nil || c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

var discard = slog.New(slog.DiscardHandler)

func (c *Config) logger() *slog.Logger {
	if c == nil || c.Logger == nil {
		return discard
	}
	return c.Logger
}

// deadliner is the part of net.Conn and *net.TCPListener that bounds I/O.
type deadliner interface {
	SetDeadline(t time.Time) error
}

// longAgo is a deadline in the past, to interrupt blocked I/O.
var longAgo = time.Unix(1, 0)

// limit is what bounds a step: the configured timeout, or the context's
// deadline when timeout is 0.
type limit struct {
	timeout time.Duration
}

// bound starts a step on d: it sets d's deadline from ctx (or the
// configured timeout) and arranges for ctx's cancellation to interrupt the
// step. The returned function ends the step; call it before the next.
func bound(ctx context.Context, d deadliner, cfg *Config) (end func(), lim limit, err error) {
	if err := ctx.Err(); err != nil {
		return nil, lim, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		lim.timeout = cfg.timeout()
		dl = time.Now().Add(lim.timeout)
	}
	if err := d.SetDeadline(dl); err != nil {
		return nil, lim, err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = d.SetDeadline(longAgo)
		close(fired)
	})
	return func() {
		if !stop() {
			// The cancellation callback has started: let it finish so that
			// it cannot move the deadline of the next step.
			<-fired
		}
		_ = d.SetDeadline(time.Time{})
	}, lim, nil
}

// ioError turns an error from a read or write on a step into an *Error
// with the right sentinel. n is how many bytes moved before the error.
func ioError(ctx context.Context, step, expected string, n int, lim limit, partial []byte, err error) *Error {
	e := &Error{Step: step, Expected: expected, Cause: err}
	var got string
	if n > 0 {
		got = strconv.Itoa(n) + " bytes " + quote(partial) + " then "
	}
	var ne net.Error
	// Deadlines, ours or the context's, and cancellation (which moves the
	// deadline into the past) all end a call as a timeout; a dial ended by
	// its context returns the context's error.
	interrupted := errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case interrupted && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		e.Err, e.Cause = ctx.Err(), nil
		e.Got = got + "the context was cancelled"
	case interrupted && (lim.timeout == 0 || ctx.Err() != nil):
		// The context's deadline (the socket's deadline may fire a moment
		// before the context's timer does).
		e.Err, e.Cause = ErrTimeout, context.DeadlineExceeded
		e.Got = got + "nothing more before the context's deadline"
	case interrupted:
		e.Err = ErrTimeout
		e.Got = got + "nothing more within " + lim.timeout.String()
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		e.Err, e.Cause = ErrClosed, nil
		e.Got = got + "end of stream"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED):
		e.Err = ErrClosed
		e.Got = got + "a reset connection"
	case errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe):
		e.Err = ErrClosed
		e.Got = got + "a connection the peer has closed"
	case errors.Is(err, net.ErrClosed):
		e.Err = ErrClosed
		e.Got = got + "a connection closed on this side"
	default:
		e.Err = ErrIO
		e.Got = got + "a network error"
	}
	return e
}

// stream runs the reads and writes of one step on a connection.
type stream struct {
	conn net.Conn
	cfg  *Config
}

// readMsg reads exactly len(buf) bytes within one bounded step.
func (s *stream) readMsg(ctx context.Context, step, what string, buf []byte) error {
	_, err := s.readMsgN(ctx, step, what, buf)
	return err
}

// readMsgN is readMsg that also says how many bytes came before an
// error.
func (s *stream) readMsgN(ctx context.Context, step, what string, buf []byte) (int, error) {
	if s.conn == nil {
		return 0, invalid(step+": read", "no connection: pass the net.Conn from Dial or Accept")
	}
	end, lim, err := bound(ctx, s.conn, s.cfg)
	if err != nil {
		return 0, stepError(ctx, step+": read", err)
	}
	defer end()
	n, err := io.ReadFull(s.conn, buf)
	if err != nil {
		return n, ioError(ctx, step+": read", expectBytes(len(buf), what), n, lim, buf[:n], err)
	}
	return n, nil
}

// writeMsg writes msg in one Write call, within one bounded step. One call
// matters: the C tools read each message with a single read() and fail on
// a short one, so a message must not be split by the sender.
func (s *stream) writeMsg(ctx context.Context, step, what string, msg []byte) error {
	if s.conn == nil {
		return invalid(step+": write", "no connection: pass the net.Conn from Dial or Accept")
	}
	end, lim, err := bound(ctx, s.conn, s.cfg)
	if err != nil {
		return stepError(ctx, step+": write", err)
	}
	defer end()
	n, err := s.conn.Write(msg)
	if err == nil && n != len(msg) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return ioError(ctx, step+": write", expectBytes(len(msg), what)+" to be sent", n, lim, nil, err)
	}
	return nil
}

func expectBytes(n int, what string) string {
	return strconv.Itoa(n) + " bytes of " + what
}

// stepError reports a step that could not start: the context had already
// ended, or the deadline could not be set.
func stepError(ctx context.Context, step string, err error) *Error {
	if ctx.Err() != nil {
		e := &Error{Step: step, Got: "the context ended before the step", Err: ctx.Err()}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			e.Err, e.Cause = ErrTimeout, ctx.Err()
		}
		return e
	}
	return ioError(ctx, step, "", 0, limit{}, nil, err)
}

// Dial connects to addr ("host:port") over TCP within the step bound of
// ctx and cfg.
func Dial(ctx context.Context, addr string, cfg *Config) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, stepError(ctx, "dial "+addr, err)
	}
	var d net.Dialer
	var lim limit
	if dl, ok := ctx.Deadline(); ok {
		d.Deadline = dl
	} else {
		lim.timeout = cfg.timeout()
		d.Timeout = lim.timeout
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, ioError(ctx, "dial "+addr, "a TCP connection", 0, lim, nil, err)
	}
	cfg.logger().Debug("oob: connected", "local", c.LocalAddr(), "remote", c.RemoteAddr())
	return c, nil
}

// Accept waits for one connection on ln within the step bound of ctx and
// cfg. ln must support SetDeadline (as *net.TCPListener and
// *net.UnixListener do), since an unbounded accept could wait forever.
func Accept(ctx context.Context, ln net.Listener, cfg *Config) (net.Conn, error) {
	if ln == nil {
		return nil, invalid("accept", "no listener: pass a *net.TCPListener")
	}
	d, ok := ln.(deadliner)
	if !ok {
		return nil, invalid("accept", "a listener without SetDeadline cannot be bounded")
	}
	end, lim, err := bound(ctx, d, cfg)
	if err != nil {
		return nil, stepError(ctx, "accept", err)
	}
	defer end()
	c, err := ln.Accept()
	if err != nil {
		return nil, ioError(ctx, "accept on "+ln.Addr().String(), "a client connection", 0, lim, nil, err)
	}
	cfg.logger().Debug("oob: accepted", "local", c.LocalAddr(), "remote", c.RemoteAddr())
	return c, nil
}
