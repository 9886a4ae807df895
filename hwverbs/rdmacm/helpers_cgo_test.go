//go:build hwverbs && cgo && linux

package rdmacm

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// The device tests need an RDMA device with an address (kernel rxe in
// the lab VMs: interop/hwverbs.sh); without one they skip.

// openT opens the first device, or skips the test.
func openT(t testing.TB) *hwverbs.Device {
	t.Helper()
	names, err := hwverbs.Devices()
	if err != nil || len(names) == 0 {
		t.Skipf("no RDMA device (%v)", err)
	}
	d, err := hwverbs.Open("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Addr().IsValid() {
		d.Close()
		t.Skipf("%s has no IP address", d.Name())
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// bufLen is the size of each test endpoint's registered buffer.
const bufLen = 64 << 10

// ep is one end of a test connection: its verbs objects and a buffer
// with every right. It is used by one goroutine at a time.
type ep struct {
	t   testing.TB
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
	wcs []verbs.WC
}

// newEP makes a PD, a CQ and a buffer on d, and unless noQP an RC QP in
// INIT, where receives may be posted, as rdma_create_qp leaves its QPs.
func newEP(t testing.TB, d verbs.Device, noQP bool) *ep {
	t.Helper()
	e := &ep{t: t, wcs: make([]verbs.WC, 1)}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if !noQP {
		e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		toInit(t, e.qp)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, bufLen), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
		t.Fatal(err)
	}
	return e
}

// toInit moves a QP from RESET to INIT.
func toInit(t testing.TB, qp verbs.QP) {
	t.Helper()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: verbs.RemoteWrite | verbs.RemoteRead},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
}

// info is the description of e's buffer a peer needs: address, rkey,
// length (16 bytes, big-endian, as rping's).
func (e *ep) info() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, e.mr.Addr())
	binary.BigEndian.PutUint32(b[8:], e.mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(e.mr.Len()))
	return b
}

// remote is a peer's buffer, from its info.
type remote struct {
	addr uint64
	rkey uint32
	len  uint32
}

func parseInfo(b []byte) remote {
	return remote{binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

func (e *ep) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

// recv posts a receive into the buffer at off.
func (e *ep) recv(off, n int) {
	e.t.Helper()
	if err := e.qp.PostRecv([]verbs.RecvWR{{ID: uint64(off), SGL: e.sge(off, n)}}); err != nil {
		e.t.Fatal(err)
	}
}

// post posts one signaled work request on the buffer at off.
func (e *ep) post(op verbs.WROpcode, off, n int, r remote, roff int) {
	e.t.Helper()
	wr := verbs.SendWR{ID: uint64(off), Opcode: op, Flags: verbs.Signaled, SGL: e.sge(off, n)}
	if op != verbs.OpSend {
		wr.RemoteAddr, wr.RKey = r.addr+uint64(roff), r.rkey
	}
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		e.t.Fatal(err)
	}
}

// wait returns the next completion, failing after 10 s.
func (e *ep) wait() verbs.WC {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if e.cq.Poll(e.wcs) == 1 {
			return e.wcs[0]
		}
		e.cq.ReqNotify(false)
		if e.cq.Poll(e.wcs) == 1 {
			return e.wcs[0]
		}
		if err := e.cq.Wait(ctx); err != nil {
			e.t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// done waits for a successful completion of opcode op.
func (e *ep) done(op verbs.WCOpcode) verbs.WC {
	e.t.Helper()
	wc := e.wait()
	if wc.Status != verbs.Success || wc.Opcode != op {
		e.t.Fatalf("completion %v, want %v: %v", wc.Opcode, op, wc)
	}
	return wc
}

// pattern fills n bytes with a pattern of seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
	return b
}

// syncMR orders the test's accesses to a software device's memory with the
// engine's, when the backend has such a thing (hwverbs's memory is the
// NIC's: nothing to do).
func syncMR(mr verbs.MR) {
	if s, ok := mr.(interface{ Sync() }); ok {
		s.Sync()
	}
}

// noLeak fails t when goroutines started after base are still running a
// second after the test's end.
func noLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Second)
		for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > base {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines left (%d before):\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	})
}
