//go:build linux

package stress

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/verbs"
)

// stream keeps depth WRITEs of size bytes in flight from one QP into a
// region, from its own goroutine, and counts the bytes completed; every
// completion must come, in order, with SUCCESS.
type stream struct {
	t      *testing.T
	s      *side
	q      verbs.QP
	src    verbs.MR
	dst    verbs.MR
	size   int
	depth  int
	pkts   uint32 // packets per request
	bytes  atomic.Int64
	posted atomic.Int64 // requests posted
	err    atomic.Value // the first failure, a string
	stop   chan struct{}
	done   chan struct{}
}

func newStream(t *testing.T, s *side, q verbs.QP, dst verbs.MR, size, depth int, mtu bth.MTU) *stream {
	st := &stream{t: t, s: s, q: q, dst: dst, size: size, depth: depth, pkts: uint32((size + mtu.Bytes() - 1) / mtu.Bytes()),
		src: s.reg(t, dst.Len(), verbs.LocalWrite), stop: make(chan struct{}), done: make(chan struct{})}
	b := st.src.Bytes()
	for i := range b {
		b[i] = byte(i*13 + i>>12)
	}
	syncMR(st.src)
	return st
}

func (st *stream) start() { go st.run() }

// finish stops the stream and waits for its requests to complete.
func (st *stream) finish() {
	close(st.stop)
	<-st.done
	if e := st.err.Load(); e != nil {
		st.t.Errorf("the legitimate stream failed: %s", e)
	}
}

func (st *stream) fail(s string) {
	st.err.CompareAndSwap(nil, s)
}

func (st *stream) run() {
	defer close(st.done)
	slots := st.dst.Len() / st.size
	wr := []verbs.SendWR{{Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: make([]verbs.SGE, 1)}}
	wcs := make([]verbs.WC, 32)
	posted, done := 0, 0
	stopping := false
	for {
		select {
		case <-st.stop:
			stopping = true
		default:
		}
		if stopping && done == posted {
			return
		}
		for !stopping && posted < done+st.depth {
			off := uint64(posted%slots) * uint64(st.size)
			wr[0].ID = uint64(posted)
			wr[0].SGL[0] = verbs.SGE{Addr: st.src.Addr() + off, Length: uint32(st.size), LKey: st.src.LKey()}
			wr[0].RemoteAddr, wr[0].RKey = st.dst.Addr()+off, st.dst.RKey()
			if err := st.q.PostSend(wr); err != nil {
				st.fail("post: " + err.Error())
				return
			}
			posted++
			st.posted.Add(1)
		}
		wc, ok := waitWC(st.t, st.s.cq, 20*time.Second)
		if !ok {
			a, _ := st.q.Query()
			st.fail(fmt.Sprintf("no completion for 20 s with %d of %d requests done; the QP is in %v, its counters: %v",
				done, posted, a.State, st.q.(*qp.QP).Counters()))
			return
		}
		if !st.complete(&wc, &done) {
			return
		}
		for n := st.s.cq.Poll(wcs); n > 0; n = st.s.cq.Poll(wcs) {
			for i := range wcs[:n] {
				if !st.complete(&wcs[i], &done) {
					return
				}
			}
		}
	}
}

// complete checks that wc is the next completion and counts it.
func (st *stream) complete(wc *verbs.WC, done *int) bool {
	if wc.Status != verbs.Success || wc.ID != uint64(*done) {
		st.fail(fmt.Sprintf("completion %v, want wr_id %d SUCCESS", wc, *done))
		return false
	}
	*done++
	st.bytes.Add(int64(st.size))
	return true
}
