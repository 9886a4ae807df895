package roce

import (
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/verbs"
)

// OnQPExit arranges for f to be called, in its own goroutine and once,
// when q next enters the error state or is destroyed (at once when it is
// in ERR already), for a QP of goroce's software device, possibly wrapped
// by Trace (qp.QP.OnExit). The returned stop cancels the call and reports
// whether it did. ok is false, and f is never called, for a QP that cannot
// tell (a hardware backend's): poll its state with Query instead.
func OnQPExit(q verbs.QP, f func(qp.Exit)) (stop func() bool, ok bool) {
	if tq, isTrace := q.(*traceQP); isTrace {
		q = tq.QP
	}
	w, ok := q.(interface {
		OnExit(func(qp.Exit)) func() bool
	})
	if !ok || f == nil {
		return func() bool { return false }, ok
	}
	return w.OnExit(f), true
}
