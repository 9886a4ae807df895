// Package unreach keeps the watchers of a transport's "destination
// unreachable" notices (transport.UnreachableNotifier) for the transports
// that have them.
package unreach

import (
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/transport"
)

// List is a set of watchers. The zero List is empty and ready; it is safe
// for concurrent use.
type List struct {
	mu   sync.Mutex
	next uint64
	fs   map[uint64]func(transport.Unreachable)
	n    atomic.Int32
}

// Add registers f and returns the function that removes it, once. It
// reports whether f is the first watcher (the transport may start
// listening then). A nil f is not registered.
func (l *List) Add(f func(transport.Unreachable)) (stop func(), first bool) {
	if f == nil {
		return func() {}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs == nil {
		l.fs = make(map[uint64]func(transport.Unreachable))
	}
	l.next++
	id := l.next
	l.fs[id] = f
	first = l.n.Add(1) == 1
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.fs, id)
			l.n.Add(-1)
			l.mu.Unlock()
		})
	}, first
}

// Watched reports whether anyone watches, without a lock.
func (l *List) Watched() bool { return l.n.Load() > 0 }

// Notify calls every watcher with u, each with its own copy of the packet
// bytes.
func (l *List) Notify(u transport.Unreachable) {
	l.mu.Lock()
	fs := make([]func(transport.Unreachable), 0, len(l.fs))
	for _, f := range l.fs {
		fs = append(fs, f)
	}
	l.mu.Unlock()
	for _, f := range fs {
		v := u
		v.Packet = append([]byte(nil), u.Packet...)
		f(v)
	}
}
