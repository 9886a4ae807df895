package scenario

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The path-MTU trap: over rdma_cm the client's REQ sets the path MTU of
// both QPs. When it offers more than the peer's link carries (goroce's
// default of 4096 from a 9000-byte link, the peer's link 1500 bytes, which
// carries path MTU 1024), the connection comes up and small messages pass,
// but no packet of more than 1024 bytes gets through: a large WRITE or
// SEND is never acknowledged, and rxe answers a large READ with RNR NAKs
// (it cannot send its response) until someone gives up. The seed modes
// ask for 1024 unless --mtu says otherwise; a session also watches each
// work request that moves packets of more than 1024 bytes on a path MTU
// above that, and when the device's counters show the symptom (RNR NAKs
// to a READ, requests sent again and never answered) it warns, once, and
// a failure of that request says what to try.

// errPathMTU is what a request that met the symptom fails with, next to
// its own error: the peer's link may not carry the path MTU.
var errPathMTU = errors.New("packets of more than 1024 bytes get no answer")

// mtuLook is how often a watch reads the device's counters while it
// waits.
const mtuLook = 500 * time.Millisecond

// mtuWatch follows one work request whose packets carry more than
// seedMTU bytes, on a connection whose path MTU allows that. It belongs
// to its session's goroutine.
type mtuWatch struct {
	what    string // "RDMA_READ of 4096 bytes"
	read    bool
	pathMTU int
	rnr0    uint64 // the device's RNR NAKs received, and requests sent again, at the post
	retx0   uint64
	next    time.Time // when to read the counters again
	why     string    // the symptom, once seen
	warned  bool
}

// watchMTU returns a watch for wr, or nil when its packets are no larger
// than seedMTU bytes, the path MTU keeps them so, or the device has no
// counters.
func (s *session) watchMTU(wr *verbs.SendWR) *mtuWatch {
	n := 0
	for _, sge := range wr.SGL {
		n += int(sge.Length)
	}
	if n <= seedMTU || s.rdev == nil {
		return nil
	}
	if s.pathMTU == 0 {
		a, err := s.qp.Query()
		if err != nil {
			return nil
		}
		s.pathMTU = a.PathMTU.Bytes()
	}
	if s.pathMTU <= seedMTU {
		return nil
	}
	c := s.rdev.Stats().Engine
	return &mtuWatch{what: fmt.Sprintf("%v of %d bytes", wr.Opcode, n), read: wr.Opcode == verbs.OpRead, pathMTU: s.pathMTU,
		rnr0: c.RcvdRNRErr, retx0: c.Retransmits, next: time.Now().Add(mtuLook)}
}

// symptom says what the counters show of the trap since the post, or "".
func (w *mtuWatch) symptom(rnr, retx uint64) string {
	switch {
	case w.read && rnr > w.rnr0:
		// A READ needs no receive: rxe answers one with RNR NAKs when it
		// cannot send the response.
		return fmt.Sprintf("was answered with %s and no data", count(rnr-w.rnr0, "RNR NAK"))
	case retx > w.retx0:
		return fmt.Sprintf("was sent again %s without an answer", count(retx-w.retx0, "time"))
	}
	return ""
}

// count says n things.
func count(n uint64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// look reads the counters when it is time (or now, with force) and warns
// once when they show the symptom.
func (s *session) look(force bool) {
	w := s.watch
	if w == nil || w.why != "" || !force && time.Now().Before(w.next) {
		return
	}
	w.next = time.Now().Add(mtuLook)
	c := s.rdev.Stats().Engine
	if w.why = w.symptom(c.RcvdRNRErr, c.Retransmits); w.why != "" && !w.warned {
		w.warned = true
		fmt.Fprintf(s.warn, "roce %s: warning: %s\n", s.role, w.advice())
	}
}

// advice says what the watch saw and what to try.
func (w *mtuWatch) advice() string {
	return fmt.Sprintf("the %s %s: the path MTU is %d, and packets of more than %d bytes may not cross the peer's "+
		"link (an Ethernet MTU of 1500 carries path MTU 1024); try --mtu 1024, or raise the peer's interface MTU "+
		"(9000 carries 4096)", w.what, w.why, w.pathMTU, seedMTU)
}

// settle ends the watch of the request just completed (or failed with
// err) and returns err, with the advice when the request met the trap: it
// showed the symptom, or was never acknowledged.
func (s *session) settle(err error) error {
	w := s.watch
	s.watch = nil
	if err == nil || w == nil {
		return err
	}
	s.watch = w
	s.look(true)
	s.watch = nil
	if w.why == "" && errors.Is(err, verbs.RetryExcErr) {
		w.why = "was never acknowledged"
	}
	if w.why == "" {
		return err
	}
	return &pathMTUError{w: w, err: err}
}

// pathMTUError is a request's failure with the trap's symptom.
type pathMTUError struct {
	w   *mtuWatch
	err error
}

// Error is the request's error and the advice (short when the session
// has warned already).
func (e *pathMTUError) Error() string {
	if e.w.warned {
		return fmt.Sprintf("%v (path MTU %d: %v; try --mtu 1024, or raise the peer's interface MTU)", e.err, e.w.pathMTU, errPathMTU)
	}
	return e.err.Error() + "; " + e.w.advice()
}

// Unwrap returns the request's error and errPathMTU.
func (e *pathMTUError) Unwrap() []error { return []error{e.err, errPathMTU} }
