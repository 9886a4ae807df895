package roce

import "github.com/goroce/goroce/qp"

// SetRecvSource makes src a source of receives of q, a QP or an SRQ of
// goroce's software device (possibly wrapped by Trace), besides PostRecv:
// the responder takes the receives src holds when it finds the queue
// empty (qp.RecvSource). It reports false, and does nothing, for any
// other q.
func SetRecvSource(q any, src qp.RecvSource) bool {
	switch v := q.(type) {
	case *traceQP:
		q = v.QP
	case *traceSRQ:
		q = v.SRQ
	}
	s, ok := q.(interface{ SetRecvSource(qp.RecvSource) })
	if ok {
		s.SetRecvSource(src)
	}
	return ok
}
