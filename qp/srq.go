package qp

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// SRQ is a shared receive queue: receives that any queue pair attached to
// it consumes. It is safe for concurrent use.
type SRQ struct {
	dev   *Device
	pd    *mr.PD
	mu    sync.Mutex
	q     recvQueue
	limit int // SRQ limit event threshold; 0 when not armed
	users int
	dead  bool
	src   RecvSource // receives posted elsewhere (recvsource.go)
}

// CreateSRQ returns a shared receive queue in the PD.
func (p *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	s, err := p.dev.createSRQ(p.pd, attr)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *Device) createSRQ(pd *mr.PD, attr verbs.SRQAttr) (*SRQ, error) {
	switch {
	case attr.MaxWR == 0 || attr.MaxWR > MaxWR:
		return nil, fmt.Errorf("%w: SRQ MaxWR %d: want 1 to %d", verbs.ErrInvalidCap, attr.MaxWR, MaxWR)
	case attr.MaxSGE > MaxSGE:
		return nil, fmt.Errorf("%w: SRQ MaxSGE %d: want 0 (meaning 1) to %d", verbs.ErrInvalidCap, attr.MaxSGE, MaxSGE)
	case attr.Limit > attr.MaxWR:
		return nil, fmt.Errorf("%w: SRQ Limit %d exceeds MaxWR %d: want 0 (no limit event) to MaxWR",
			verbs.ErrInvalidCap, attr.Limit, attr.MaxWR)
	}
	if attr.MaxSGE == 0 {
		attr.MaxSGE = 1
	}
	pd.Hold()
	return &SRQ{dev: d, pd: pd, q: recvQueue{max: int(attr.MaxWR), maxSGE: int(attr.MaxSGE)},
		limit: int(attr.Limit)}, nil
}

// ok reports whether s was made by CreateSRQ.
func (s *SRQ) ok() bool { return s != nil && s.dev.ok() && s.pd != nil }

// errNilSRQ is what the methods of a nil SRQ return.
var errNilSRQ = nilError("nil *SRQ", "PD.CreateSRQ")

// PostRecv posts receives to the SRQ.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) error {
	if !s.ok() {
		return errNilSRQ
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return fmt.Errorf("%w: PostRecv on an SRQ after Destroy", verbs.ErrDestroyed)
	}
	for i := range wrs {
		if err := checkRecvWR(&wrs[i], s.q.maxSGE); err != nil {
			return &verbs.PostError{Index: i, Err: err}
		}
		if s.q.full() {
			return &verbs.PostError{Index: i, Err: fmt.Errorf("%w: %d receives posted to the SRQ: wait for completions, "+
				"or create it with a larger MaxWR", verbs.ErrQueueFull, s.q.max)}
		}
		s.q.post(&wrs[i])
	}
	return nil
}

// Modify arms the limit event with a new threshold (IBV_SRQ_LIMIT).
func (s *SRQ) Modify(limit uint32) error {
	if !s.ok() {
		return errNilSRQ
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(limit) > int64(s.q.max) {
		return fmt.Errorf("%w: SRQ limit %d exceeds its %d entries: want 0 (disarmed) to %d",
			verbs.ErrInvalidAttr, limit, s.q.max, s.q.max)
	}
	s.limit = int(limit)
	return nil
}

// Query returns the SRQ's attributes.
func (s *SRQ) Query() verbs.SRQAttr {
	if !s.ok() {
		return verbs.SRQAttr{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: uint32(s.q.max), MaxSGE: uint32(s.q.maxSGE), Limit: uint32(s.limit)}
}

// Len returns the number of posted receives.
func (s *SRQ) Len() int {
	if !s.ok() {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.n
}

// Destroy frees the SRQ; it fails with ErrBusy while queue pairs use it.
func (s *SRQ) Destroy() error {
	if !s.ok() {
		return errNilSRQ
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users > 0 {
		return fmt.Errorf("%w: %d queue pairs use the SRQ: destroy them first", verbs.ErrBusy, s.users)
	}
	if !s.dead {
		s.dead = true
		s.pd.Drop()
	}
	return nil
}

// take removes the oldest receive into w and reports whether there was one.
func (s *SRQ) take(w *recvWQE) bool {
	s.mu.Lock()
	r := s.q.peek()
	if r == nil {
		s.pull()
		r = s.q.peek()
	}
	if r == nil {
		s.mu.Unlock()
		return false
	}
	w.id, w.len = r.id, r.len
	w.sgl = append(w.sgl[:0], r.sgl...)
	s.q.pop()
	fire := s.limit > 0 && s.q.n < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		s.dev.event(verbs.Event{Type: verbs.EventSRQLimitReached, SRQ: s})
	}
	return true
}
