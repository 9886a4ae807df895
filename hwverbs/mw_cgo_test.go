//go:build hwverbs && cgo && linux

package hwverbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/verbs"
)

// Memory windows on the device (kernel rxe in the lab): these need an
// RDMA device and skip without one.

// mwRegion registers n bytes of s's PD with every right and MWBind.
func (s *side) mwRegion(t testing.TB, n int) verbs.MR {
	t.Helper()
	m, err := s.pd.RegMR(make([]byte, n), verbs.LocalWrite|verbs.RemoteAccess|verbs.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Dereg() })
	return m
}

// alloc allocates a window of type typ in s's PD.
func (s *side) alloc(t testing.TB, typ verbs.MWType) verbs.MW {
	t.Helper()
	w, err := s.pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	if w.Type() != typ {
		t.Fatalf("type %v, want %v", w.Type(), typ)
	}
	t.Cleanup(func() { w.Dealloc() })
	return w
}

// post posts wr on s's QP and returns its completion.
func (s *side) post(t testing.TB, wr verbs.SendWR) verbs.WC {
	t.Helper()
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	return rocetest.Wait(t, s.cq)
}

func wantStatus(t testing.TB, wc verbs.WC, st verbs.Status, op verbs.WCOpcode) {
	t.Helper()
	if wc.Status != st || st == verbs.Success && wc.Opcode != op {
		t.Fatalf("completion %v, want %v %v", &wc, st, op)
	}
}

// wantLocalError checks the completion of a work request the device
// refused locally (a bind, a LOCAL_INV), which puts the QP in ERR: status
// st, as rxe 6.1 reports it, or WR_FLUSH_ERR, as rxe 6.12 does (its
// requester moves the QP to ERR, and the queue's flush completes the
// failed request with the rest); the QP must be in ERR either way.
func wantLocalError(t testing.TB, s *side, wc verbs.WC, id uint64, st verbs.Status) {
	t.Helper()
	if wc.ID != id || wc.Status != st && wc.Status != verbs.WRFlushErr {
		t.Fatalf("completion %v, want %v (or WR_FLUSH_ERR) for work request %d", &wc, st, id)
	}
	if wc.Status == verbs.WRFlushErr {
		t.Logf("the device flushed the failed work request instead of completing it with %v (rxe 6.12 does)", st)
	}
	if attr, err := s.qp.Query(); err != nil || attr.State != verbs.StateErr {
		t.Fatalf("QP state %v (%v) after the failed work request, want ERR", attr.State, err)
	}
}

// TestMWType2OnDevice: a type 2 window bound with a BIND_MW work request
// (its RKey the key posted), reached by the peer's WRITE and READ, then
// invalidated by the peer's SEND with invalidate (the receive says so,
// with the key): the peer's next WRITE through it fails with
// REM_ACCESS_ERR and changes nothing.
func TestMWType2OnDevice(t *testing.T) {
	a, b := rcPair(t)
	region := b.mwRegion(t, 1<<16)
	w := b.alloc(t, verbs.MWType2)
	key := verbs.IncRKey(w.RKey())
	info := verbs.MWBindInfo{MR: region, Addr: region.Addr() + 4096, Length: 4096, Access: verbs.RemoteWrite | verbs.RemoteRead}
	wc := b.post(t, verbs.SendWR{ID: 1, Opcode: verbs.OpBindMW, Flags: verbs.Signaled,
		BindMW: &verbs.BindMW{MW: w, RKey: key, BindInfo: info}})
	wantStatus(t, wc, verbs.Success, verbs.WCBindMW)
	if w.RKey() != key {
		t.Fatalf("RKey %#x after the bind of %#x", w.RKey(), key)
	}
	src := a.mr.Bytes()[:3000]
	for i := range src {
		src[i] = byte(i * 13)
	}
	wantStatus(t, a.post(t, verbs.SendWR{ID: 2, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 3000),
		RemoteAddr: info.Addr + 100, RKey: key}), verbs.Success, verbs.WCWrite)
	if !bytes.Equal(region.Bytes()[4096+100:4096+3100], src) {
		t.Fatal("the WRITE through the window did not land")
	}
	wantStatus(t, a.post(t, verbs.SendWR{ID: 3, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(8192, 4096),
		RemoteAddr: info.Addr, RKey: key}), verbs.Success, verbs.WCRead)
	if !bytes.Equal(a.mr.Bytes()[8192:8192+4096], region.Bytes()[4096:8192]) {
		t.Fatal("the READ through the window read other bytes")
	}
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{{Addr: region.Addr(), Length: 64, LKey: region.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, a.post(t, verbs.SendWR{ID: 4, Opcode: verbs.OpSendInv, Flags: verbs.Signaled, SGL: a.sge(0, 8),
		InvRKey: key}), verbs.Success, verbs.WCSend)
	checkInvRecv(t, rocetest.Wait(t, b.cq), key)
	before := bytes.Clone(region.Bytes())
	wantStatus(t, a.post(t, verbs.SendWR{ID: 5, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 8),
		RemoteAddr: info.Addr, RKey: key}), verbs.RemAccessErr, 0)
	if !bytes.Equal(region.Bytes(), before) {
		t.Fatal("a WRITE through the invalidated window changed memory")
	}
}

// rxeWithInv is the flag kernel rxe sets on the receive of a SEND with
// invalidate: the kernel's IB_WC_WITH_INVALIDATE (1 << 2), which
// libibverbs calls IBV_WC_IP_CSUM_OK; its IBV_WC_WITH_INV is 1 << 3.
// rxe's provider passes the kernel's flags on as they are.
const rxeWithInv = verbs.WCFlags(1 << 2)

// checkInvRecv checks the receive of a SEND with invalidate of key: a
// successful RECV that says it invalidated key, or, as rxe reports it,
// that carries rxe's flag (and no key: libibverbs reads the key only
// with IBV_WC_WITH_INV).
func checkInvRecv(t testing.TB, wc verbs.WC, key uint32) {
	t.Helper()
	switch {
	case wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv:
		t.Fatalf("the receive of the SEND with invalidate: %v", &wc)
	case wc.Flags&verbs.WithInv != 0 && wc.Imm != key:
		t.Fatalf("the receive of the SEND with invalidate names key %#x, want %#x", wc.Imm, key)
	case wc.Flags&verbs.WithInv == 0 && wc.Flags&rxeWithInv == 0:
		t.Fatalf("the receive of the SEND with invalidate does not say so: %v", &wc)
	case wc.Flags&verbs.WithInv == 0:
		t.Logf("the device flags the invalidation %#x, the kernel's IB_WC_WITH_INVALIDATE (rxe), not IBV_WC_WITH_INV", uint8(wc.Flags))
	}
}

// TestMWType1OnDevice: QP.BindMW binds a type 1 window (RKey one higher
// in the low byte, a BIND_MW completion); the peer reads through it; a
// bind of length 0 unbinds it and the peer's next READ fails.
func TestMWType1OnDevice(t *testing.T) {
	a, b := rcPair(t)
	region := b.mwRegion(t, 1<<16)
	w := b.alloc(t, verbs.MWType1)
	k0 := w.RKey()
	bind := func(n uint64) {
		t.Helper()
		err := b.qp.BindMW(w, &verbs.MWBindWR{ID: 7, Flags: verbs.Signaled, BindInfo: verbs.MWBindInfo{MR: region,
			Addr: region.Addr() + 64, Length: n, Access: verbs.RemoteRead}})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, rocetest.Wait(t, b.cq), verbs.Success, verbs.WCBindMW)
	}
	bind(128)
	if w.RKey() != verbs.IncRKey(k0) {
		t.Fatalf("RKey %#x after BindMW, allocated with %#x", w.RKey(), k0)
	}
	copy(region.Bytes()[64:], "type 1 window")
	wantStatus(t, a.post(t, verbs.SendWR{ID: 1, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 13),
		RemoteAddr: region.Addr() + 64, RKey: w.RKey()}), verbs.Success, verbs.WCRead)
	if string(a.mr.Bytes()[:13]) != "type 1 window" {
		t.Fatalf("READ through the window: %q", a.mr.Bytes()[:13])
	}
	bind(0)
	wantStatus(t, a.post(t, verbs.SendWR{ID: 2, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 13),
		RemoteAddr: region.Addr() + 64, RKey: w.RKey()}), verbs.RemAccessErr, 0)
}

// TestMWErrorsOnDevice: what hwverbs refuses before the device sees it;
// a bind to a region without MWBind completes MW_BIND_ERR, a LOCAL_INV
// of a type 1 window LOC_QP_OP_ERR (each puts the QP in ERR: one
// connection each; rxe 6.12 flushes them instead, see wantLocalError); a
// region with a window bound cannot be deregistered (verbs.ErrBusy).
func TestMWErrorsOnDevice(t *testing.T) {
	bind := func(w verbs.MW, m verbs.MR) verbs.SendWR {
		return verbs.SendWR{ID: 1, Opcode: verbs.OpBindMW, Flags: verbs.Signaled, BindMW: &verbs.BindMW{MW: w,
			RKey: verbs.IncRKey(w.RKey()), BindInfo: verbs.MWBindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: verbs.RemoteRead}}}
	}
	t.Run("refused by hwverbs", func(t *testing.T) {
		_, b := rcPair(t)
		region := b.mwRegion(t, 4096)
		w2, w1 := b.alloc(t, verbs.MWType2), b.alloc(t, verbs.MWType1)
		k2, k1 := w2.RKey(), w1.RKey()
		for _, c := range []struct {
			name string
			edit func(wr *verbs.SendWR)
		}{
			{"type 1 in a work request", func(wr *verbs.SendWR) { wr.BindMW.MW, wr.BindMW.RKey = w1, verbs.IncRKey(w1.RKey()) }},
			{"no region", func(wr *verbs.SendWR) { wr.BindMW.BindInfo.MR = nil }},
			{"key with other upper 24 bits", func(wr *verbs.SendWR) { wr.BindMW.RKey += 0x100 }},
			{"SGEs", func(wr *verbs.SendWR) { wr.SGL = b.sge(0, 8) }},
		} {
			wr := bind(w2, region)
			c.edit(&wr)
			if err := b.qp.PostSend([]verbs.SendWR{wr}); !errors.Is(err, verbs.ErrInvalidWR) {
				t.Errorf("%s: %v, want %v", c.name, err, verbs.ErrInvalidWR)
			}
		}
		if _, err := b.pd.AllocMW(3); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("AllocMW(3): %v", err)
		}
		if err := b.qp.BindMW(w1, &verbs.MWBindWR{}); !errors.Is(err, verbs.ErrInvalidWR) {
			t.Errorf("BindMW without a region: %v", err)
		}
		if w2.RKey() != k2 || w1.RKey() != k1 {
			t.Errorf("refused posts changed RKey: %#x -> %#x, %#x -> %#x", k2, w2.RKey(), k1, w1.RKey())
		}
	})
	t.Run("region busy", func(t *testing.T) {
		_, b := rcPair(t)
		region := b.mwRegion(t, 4096)
		w := b.alloc(t, verbs.MWType2)
		wantStatus(t, b.post(t, bind(w, region)), verbs.Success, verbs.WCBindMW)
		err := region.Dereg()
		if !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Dereg with a window bound: %v", err)
		}
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if err := region.Dereg(); err != nil {
			t.Fatalf("Dereg once the window is gone: %v", err)
		}
	})
	t.Run("MW_BIND_ERR", func(t *testing.T) {
		_, b := rcPair(t)
		plain, err := b.pd.RegMR(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteAccess)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Dereg()
		wantLocalError(t, b, b.post(t, bind(b.alloc(t, verbs.MWType2), plain)), 1, verbs.MWBindErr)
	})
	t.Run("LOC_QP_OP_ERR", func(t *testing.T) {
		_, b := rcPair(t)
		region := b.mwRegion(t, 4096)
		w := b.alloc(t, verbs.MWType1)
		if err := b.qp.BindMW(w, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{MR: region, Addr: region.Addr(), Length: 8}}); err != nil {
			t.Fatal(err)
		}
		wantLocalError(t, b, b.post(t, verbs.SendWR{ID: 3, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: w.RKey()}),
			3, verbs.LocQPOpErr)
	})
}
