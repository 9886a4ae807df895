package qp

import (
	"testing"
	"time"

	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// exitChan registers an OnExit watcher on q that sends what it is told.
func exitChan(q *QP) (<-chan Exit, func() bool) {
	ch := make(chan Exit, 1)
	stop := q.OnExit(func(e Exit) { ch <- e })
	return ch, stop
}

// waitExit waits up to 5 s for a watcher's call.
func waitExit(t *testing.T, ch <-chan Exit) Exit {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("OnExit's function was not called")
	}
	return Exit{}
}

// TestOnExit checks that a QP's watchers learn when it leaves service,
// and why: a work request that failed, a Modify, a Destroy.
func TestOnExit(t *testing.T) {
	t.Run("retry exceeded", func(t *testing.T) {
		p := newPair(t, pairOpts{retry: 1})
		ch, _ := exitChan(p.a.qp)
		local, remote := p.a.reg(t, 64), p.b.reg(t, 64)
		p.net.SetFaults(mem.Faults{Drop: 1})
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{sge(local, 0, 8)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
		if wc := p.poll(&p.a, 1); wc[0].Status != verbs.RetryExcErr {
			t.Fatalf("completion %v", &wc[0])
		}
		if e := waitExit(t, ch); e != (Exit{Status: verbs.RetryExcErr}) {
			t.Errorf("exit %+v, want RETRY_EXC_ERR", e)
		}
	})
	t.Run("modify", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ch, _ := exitChan(p.a.qp)
		// A move that is not to ERR says nothing.
		must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateSQD}, verbs.AttrState))
		select {
		case e := <-ch:
			t.Fatalf("called on SQD: %+v", e)
		case <-time.After(20 * time.Millisecond):
		}
		must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
		if e := waitExit(t, ch); e != (Exit{Modified: true}) {
			t.Errorf("exit %+v, want Modified", e)
		}
		// Already in ERR: at once.
		ch2, stop := exitChan(p.a.qp)
		if e := waitExit(t, ch2); e != (Exit{}) {
			t.Errorf("exit in ERR %+v", e)
		}
		if stop() {
			t.Error("stop after the call reported true")
		}
	})
	t.Run("destroy", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ch, _ := exitChan(p.a.qp)
		must(t, p.a.qp.Destroy())
		if e := waitExit(t, ch); e != (Exit{Destroyed: true}) {
			t.Errorf("exit %+v, want Destroyed", e)
		}
		ch2, _ := exitChan(p.a.qp)
		if e := waitExit(t, ch2); e != (Exit{Destroyed: true}) {
			t.Errorf("exit after destroy %+v", e)
		}
	})
	t.Run("stop", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ch, stop := exitChan(p.a.qp)
		kept, _ := exitChan(p.a.qp)
		if !stop() {
			t.Fatal("stop of a pending watcher reported false")
		}
		if stop() {
			t.Error("second stop reported true")
		}
		must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
		waitExit(t, kept)
		select {
		case e := <-ch:
			t.Fatalf("stopped watcher called: %+v", e)
		case <-time.After(20 * time.Millisecond):
		}
		if p.a.qp.OnExit(nil)() {
			t.Error("stop of a nil function reported true")
		}
	})
}

// TestHasGSI checks that the device reports its QP 1 while it exists.
func TestHasGSI(t *testing.T) {
	p := newPair(t, pairOpts{})
	d := p.a.dev
	if d.HasGSI() {
		t.Fatal("a new device reports a GSI QP")
	}
	q, err := d.createQP(p.a.pd, &verbs.QPInitAttr{Type: verbs.GSI, SendCQ: p.a.cq, RecvCQ: p.a.cq})
	must(t, err)
	if !d.HasGSI() {
		t.Fatal("no GSI QP reported after creating one")
	}
	must(t, q.Destroy())
	if d.HasGSI() {
		t.Fatal("GSI QP reported after its destruction")
	}
}
