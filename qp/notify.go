package qp

import "github.com/goroce/goroce/verbs"

// Exit says why a queue pair left service: it entered the error state or
// was destroyed. It is plain data.
type Exit struct {
	// Status is the status of the work request whose failure moved the
	// QP to ERR: RETRY_EXC_ERR when the peer stopped acknowledging,
	// RNR_RETRY_EXC_ERR when it had no receive posted for too long, a
	// remote error when it refused a request. It is Success when no work
	// request failed: Modify moved the QP, the responder met a request
	// of the peer's it could not serve, or the QP was destroyed.
	Status verbs.Status
	// Modified reports a move to ERR by Modify.
	Modified bool
	// Destroyed reports that the QP was destroyed.
	Destroyed bool
}

// exitWatch is one OnExit registration.
type exitWatch struct {
	id uint64
	f  func(Exit)
}

// exitWatches are a QP's OnExit registrations; QP.mu guards them.
type exitWatches struct {
	next uint64
	list []exitWatch
}

// OnExit arranges for f to be called, in its own goroutine and once, when
// the QP next enters the error state or is destroyed; at once (still in
// its own goroutine) when it is in ERR or destroyed already. The returned
// stop cancels the call: it reports whether it did so, false when f has
// been started already or stop was called before, as with
// context.AfterFunc. A nil f is never called, nor f for a nil QP. Nothing
// is spent on the data path: watchers are looked at only when the QP
// leaves service.
func (q *QP) OnExit(f func(Exit)) (stop func() bool) {
	if f == nil || !q.ok() {
		return func() bool { return false }
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.destroyed:
		go f(Exit{Destroyed: true})
		return func() bool { return false }
	case q.state == verbs.StateErr:
		go f(Exit{})
		return func() bool { return false }
	}
	w := &q.exits
	w.next++
	id := w.next
	w.list = append(w.list, exitWatch{id: id, f: f})
	return func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, x := range w.list {
			if x.id == id {
				w.list = append(w.list[:i], w.list[i+1:]...)
				return true
			}
		}
		return false
	}
}

// exited starts every OnExit watcher with e and forgets them; the caller
// holds q.mu.
func (q *QP) exited(e Exit) {
	for _, x := range q.exits.list {
		go x.f(e)
	}
	clear(q.exits.list)
	q.exits.list = q.exits.list[:0]
}

// sendFailure returns the status of the first failed send work request
// still in the send queue (the one that moves the QP to ERR), or Success;
// the caller holds q.mu.
func (q *QP) sendFailure() verbs.Status {
	for s := q.sq.first; s != q.sq.tail; s++ {
		if w := q.sq.at(s); w.state == wqeDone && w.status != verbs.Success && w.status != verbs.WRFlushErr {
			return w.status
		}
	}
	return verbs.Success
}
