package qp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// Memory windows through the verbs API, between two devices on the
// in-memory link: B binds windows on its memory, A reaches them.

const (
	mwRegion = 16 << 10 // B's region
	mwOff    = 1000     // where windows start in it
	mwLen    = 4096
)

// regMW registers n bytes with every right and MWBind in e's PD, filled
// with a pattern.
func (e *end) regMW(t testing.TB, n int) *mr.MR {
	t.Helper()
	m, err := e.pd.pd.Register(make([]byte, n), verbs.LocalWrite|verbs.RemoteAccess|verbs.MWBind)
	must(t, err)
	fill(m.Bytes(), n)
	return m
}

// allocMW allocates a window of type typ in e's PD.
func (e *end) allocMW(t testing.TB, typ verbs.MWType) *MW {
	t.Helper()
	w, err := e.pd.AllocMW(typ)
	must(t, err)
	return w.(*MW)
}

// bindWR is a signaled BIND_MW of type 2 window w to n bytes of m from
// byte off, with the next key.
func bindWR(w *MW, m *mr.MR, off, n int, access verbs.Access) verbs.SendWR {
	return verbs.SendWR{ID: 500, Opcode: verbs.OpBindMW, Flags: verbs.Signaled, BindMW: &verbs.BindMW{MW: w,
		RKey: verbs.IncRKey(w.RKey()), BindInfo: verbs.MWBindInfo{MR: m, Addr: m.Addr() + uint64(off),
			Length: uint64(n), Access: access}}}
}

// one posts wr on e's QP and returns its one completion.
func (p *pair) one(e *end, wr verbs.SendWR) verbs.WC {
	p.t.Helper()
	must(p.t, e.qp.PostSend([]verbs.SendWR{wr}))
	wcs := p.poll(e, 1)
	if len(wcs) != 1 {
		p.t.Fatalf("completions %v", wcs)
	}
	return wcs[0]
}

// wantWC checks a completion's ID, status and opcode.
func wantWC(t testing.TB, wc verbs.WC, id uint64, st verbs.Status, op verbs.WCOpcode) {
	t.Helper()
	if wc.ID != id || wc.Status != st || wc.Status == verbs.Success && wc.Opcode != op {
		t.Fatalf("completion %v, want wr_id=%d %v %v", &wc, id, st, op)
	}
}

// remote is an RDMA request of A on n bytes at addr through key.
func remote(op verbs.WROpcode, local *mr.MR, loff int, addr uint64, key uint32, n int) verbs.SendWR {
	return verbs.SendWR{ID: uint64(op) + 1, Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, loff, n)},
		RemoteAddr: addr, RKey: key}
}

// TestMWType2: a type 2 window bound on B's QP, VA-based and zero-based:
// A's WRITE, READ and atomics through its key reach the window's bytes of
// B's region and no others; a SEND with invalidate of its key completes
// at B with WithInv and the key, after which a WRITE through it fails
// with REM_ACCESS_ERR and B's memory stays as it was.
func TestMWType2(t *testing.T) {
	for _, zb := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero-based=%v", zb), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			region := p.b.regMW(t, mwRegion)
			w := p.b.allocMW(t, verbs.MWType2)
			access := verbs.RemoteAccess
			base := region.Addr() + mwOff // what A names the window's first byte
			if zb {
				access |= verbs.ZeroBased
				base = 0
			}
			wantWC(t, p.one(&p.b, bindWR(w, region, mwOff, mwLen, access)), 500, verbs.Success, verbs.WCBindMW)
			key := w.RKey()
			if w.Window().RKey() != key {
				t.Fatalf("RKey %#x, the window's on the device %#x", key, w.Window().RKey())
			}
			local := p.a.reg(t, 8192)
			fill(local.Bytes(), 77)
			want := bytes.Clone(region.Bytes())
			copy(want[mwOff+500:], local.Bytes()[:3000])
			wantWC(t, p.one(&p.a, remote(verbs.OpWrite, local, 0, base+500, key, 3000)), 1, verbs.Success, verbs.WCWrite)
			if !bytes.Equal(region.Bytes(), want) {
				t.Fatal("the WRITE through the window did not land where it should, or landed elsewhere too")
			}
			wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 4096, base, key, mwLen)), 5, verbs.Success, verbs.WCRead)
			if !bytes.Equal(local.Bytes()[4096:], want[mwOff:mwOff+mwLen]) {
				t.Fatal("the READ through the window read other bytes")
			}
			binary.NativeEndian.PutUint64(region.Bytes()[mwOff+8:], 40)
			fa := remote(verbs.OpAtomicFetchAdd, local, 0, base+8, key, 8)
			fa.CompareAdd = 2
			wantWC(t, p.one(&p.a, fa), 7, verbs.Success, verbs.WCFetchAdd)
			if got := binary.NativeEndian.Uint64(region.Bytes()[mwOff+8:]); got != 42 {
				t.Fatalf("FETCH_ADD through the window: %d", got)
			}
			inv := verbs.SendWR{ID: 9, Opcode: verbs.OpSendInv, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, 8)}, InvRKey: key}
			must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 77, SGL: []verbs.SGE{sge(region, 10000, 64)}}}))
			wantWC(t, p.one(&p.a, inv), 9, verbs.Success, verbs.WCSend)
			wb := p.poll(&p.b, 1)[0]
			if wb.ID != 77 || wb.Status != verbs.Success || wb.Flags&verbs.WithInv == 0 || wb.Imm != key {
				t.Fatalf("B's receive of the SEND with invalidate: %v", &wb)
			}
			before := bytes.Clone(region.Bytes())
			wantWC(t, p.one(&p.a, remote(verbs.OpWrite, local, 0, base, key, 8)), 1, verbs.RemAccessErr, verbs.WCWrite)
			if !bytes.Equal(region.Bytes(), before) {
				t.Fatal("a WRITE through the invalidated window changed memory")
			}
		})
	}
}

// TestMWType2Bounds: a request through the window's key that reaches
// past the window, though within the region, fails with REM_ACCESS_ERR,
// as does one through a key that was the window's before the last bind
// (rxe checks only the region's range, so that it carries out the
// first).
func TestMWType2Bounds(t *testing.T) {
	for _, c := range []struct {
		name string
		zb   bool
		op   verbs.WROpcode
		off  int64 // from the window's start
		n    int
		old  bool // through the key before the bind
	}{
		{"WRITE past the end", false, verbs.OpWrite, mwLen - 4, 8, false},
		{"WRITE before the start", false, verbs.OpWrite, -8, 8, false},
		{"READ past the end", false, verbs.OpRead, 1, mwLen, false},
		{"atomic past the end", false, verbs.OpAtomicFetchAdd, mwLen, 8, false},
		{"zero-based WRITE past the end", true, verbs.OpWrite, mwLen - 4, 8, false},
		{"zero-based READ by the region's address", true, verbs.OpRead, int64(mwOff), 8, false},
		{"WRITE through the key before the bind", false, verbs.OpWrite, 0, 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			region := p.b.regMW(t, mwRegion)
			w := p.b.allocMW(t, verbs.MWType2)
			old := w.RKey()
			access := verbs.RemoteAccess
			base := region.Addr() + mwOff
			if c.zb {
				access |= verbs.ZeroBased
				base = 0
			}
			wantWC(t, p.one(&p.b, bindWR(w, region, mwOff, mwLen, access)), 500, verbs.Success, verbs.WCBindMW)
			key := w.RKey()
			if c.old {
				key = old
			}
			if c.zb && c.off == mwOff {
				base = region.Addr() // the region's address of the window's start, not an offset
				c.off = 0
			}
			local := p.a.reg(t, 8192)
			before := bytes.Clone(region.Bytes())
			wr := remote(c.op, local, 0, base+uint64(c.off), key, c.n)
			wantWC(t, p.one(&p.a, wr), wr.ID, verbs.RemAccessErr, 0)
			if !bytes.Equal(region.Bytes(), before) {
				t.Fatal("B's memory changed")
			}
		})
	}
}

// TestMWType1: QP.BindMW binds a type 1 window (its RKey one higher in
// the low byte, a BIND_MW completion); A reaches it; a bind elsewhere
// moves it, and the old range is then out of reach; a bind of length 0
// unbinds it.
func TestMWType1(t *testing.T) {
	p := newPair(t, pairOpts{})
	region := p.b.regMW(t, mwRegion)
	w := p.b.allocMW(t, verbs.MWType1)
	k0 := w.RKey()
	bind := func(off, n int) {
		t.Helper()
		info := verbs.MWBindInfo{MR: region, Addr: region.Addr() + uint64(off), Length: uint64(n), Access: verbs.RemoteWrite | verbs.RemoteRead}
		if n == 0 {
			info = verbs.MWBindInfo{}
		}
		before := w.RKey()
		must(t, p.b.qp.BindMW(w, &verbs.MWBindWR{ID: 600, Flags: verbs.Signaled, BindInfo: info}))
		if w.RKey() != verbs.IncRKey(before) {
			t.Fatalf("RKey %#x after BindMW, was %#x", w.RKey(), before)
		}
		wantWC(t, p.poll(&p.b, 1)[0], 600, verbs.Success, verbs.WCBindMW)
		if w.Window().RKey() != w.RKey() {
			t.Fatalf("the window's key on the device %#x, RKey %#x", w.Window().RKey(), w.RKey())
		}
	}
	bind(mwOff, mwLen)
	local := p.a.reg(t, 8192)
	fill(local.Bytes(), 5)
	wantWC(t, p.one(&p.a, remote(verbs.OpWrite, local, 0, region.Addr()+mwOff, w.RKey(), mwLen)), 1, verbs.Success, verbs.WCWrite)
	if !bytes.Equal(region.Bytes()[mwOff:mwOff+mwLen], local.Bytes()[:mwLen]) {
		t.Fatal("the WRITE through the type 1 window did not land")
	}
	bind(8192, 100)
	wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr()+8192, w.RKey(), 100)), 5, verbs.Success, verbs.WCRead)
	bind(0, 0)
	if w.RKey()>>8 != k0>>8 {
		t.Fatalf("key %#x, allocated with %#x", w.RKey(), k0)
	}
	wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr()+8192, w.RKey(), 100)), 5, verbs.RemAccessErr, 0)
}

// TestMWBindErrors: binds the device refuses complete with MW_BIND_ERR,
// as rxe's do, and leave the window as it was; the QP goes to ERR.
func TestMWBindErrors(t *testing.T) {
	type env struct {
		p      *pair
		region *mr.MR
		w      *MW
	}
	for _, c := range []struct {
		name string
		wr   func(e *env) verbs.SendWR
	}{
		{"region without MWBind", func(e *env) verbs.SendWR {
			return bindWR(e.w, e.p.b.reg(e.p.t, 4096), 0, 64, verbs.RemoteRead)
		}},
		{"range past the region's end", func(e *env) verbs.SendWR {
			return bindWR(e.w, e.region, mwRegion-8, 16, verbs.RemoteRead)
		}},
		{"length 0", func(e *env) verbs.SendWR { return bindWR(e.w, e.region, 0, 0, verbs.RemoteRead) }},
		{"bound already", func(e *env) verbs.SendWR {
			wantWC(e.p.t, e.p.one(&e.p.b, bindWR(e.w, e.region, 0, 64, verbs.RemoteRead)), 500, verbs.Success, verbs.WCBindMW)
			return bindWR(e.w, e.region, 64, 64, verbs.RemoteRead)
		}},
		{"region of another PD", func(e *env) verbs.SendWR {
			m, err := newPD(e.p.b.dev).Register(make([]byte, 4096), verbs.LocalWrite|verbs.RemoteAccess|verbs.MWBind)
			must(e.p.t, err)
			return bindWR(e.w, m, 0, 64, verbs.RemoteRead)
		}},
		{"window of another PD", func(e *env) verbs.SendWR {
			pd, err := e.p.b.dev.AllocPD()
			must(e.p.t, err)
			w, err := pd.(*PD).AllocMW(verbs.MWType2)
			must(e.p.t, err)
			return bindWR(w.(*MW), e.region, 0, 64, verbs.RemoteRead)
		}},
		{"region deregistered", func(e *env) verbs.SendWR {
			m := e.p.b.regMW(e.p.t, 4096)
			must(e.p.t, m.Dereg())
			return bindWR(e.w, m, 0, 64, verbs.RemoteRead)
		}},
		{"region invalidated", func(e *env) verbs.SendWR {
			m := e.p.b.regMW(e.p.t, 4096)
			wantWC(e.p.t, e.p.one(&e.p.b, verbs.SendWR{ID: 501, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled,
				InvRKey: m.RKey()}), 501, verbs.Success, verbs.WCLocalInv)
			return bindWR(e.w, m, 0, 64, verbs.RemoteRead)
		}},
		{"writable window on a region without LocalWrite", func(e *env) verbs.SendWR {
			m, err := e.p.b.pd.pd.Register(make([]byte, 4096), verbs.RemoteRead|verbs.MWBind)
			must(e.p.t, err)
			return bindWR(e.w, m, 0, 64, verbs.RemoteWrite)
		}},
		{"window deallocated", func(e *env) verbs.SendWR {
			wr := bindWR(e.w, e.region, 0, 64, verbs.RemoteRead)
			must(e.p.t, e.w.Dealloc())
			return wr
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			e := &env{p: p, region: p.b.regMW(t, mwRegion), w: p.b.allocMW(t, verbs.MWType2)}
			wr := c.wr(e)
			w := wr.BindMW.MW.(*MW)
			onDevice := w.Window().RKey()
			wantWC(t, p.one(&p.b, wr), 500, verbs.MWBindErr, verbs.WCBindMW)
			if w.Window().RKey() != onDevice {
				t.Errorf("the refused bind changed the window's key on the device: %#x -> %#x", onDevice, w.Window().RKey())
			}
			if p.b.qp.State() != verbs.StateErr {
				t.Errorf("QP state %v after MW_BIND_ERR", p.b.qp.State())
			}
		})
	}
}

// TestMWPostErrors: what a post refuses, before the device sees it, with
// a *verbs.PostError and the sentinel; nothing is posted and the QP
// stays in RTS.
func TestMWPostErrors(t *testing.T) {
	p := newPair(t, pairOpts{})
	region := p.b.regMW(t, mwRegion)
	w2 := p.b.allocMW(t, verbs.MWType2)
	w1 := p.b.allocMW(t, verbs.MWType1)
	other := p.a.allocMW(t, verbs.MWType2)
	good := func() verbs.SendWR { return bindWR(w2, region, 0, 64, verbs.RemoteRead) }
	for _, c := range []struct {
		name string
		edit func(wr *verbs.SendWR)
		err  error
	}{
		{"no BindMW", func(wr *verbs.SendWR) { wr.BindMW = nil }, verbs.ErrInvalidWR},
		{"no window", func(wr *verbs.SendWR) { wr.BindMW.MW = nil }, verbs.ErrNil},
		{"a window of another device", func(wr *verbs.SendWR) { wr.BindMW.MW = other }, verbs.ErrForeign},
		{"a type 1 window", func(wr *verbs.SendWR) { wr.BindMW.MW, wr.BindMW.RKey = w1, verbs.IncRKey(w1.RKey()) }, verbs.ErrInvalidWR},
		{"a key of another index", func(wr *verbs.SendWR) { wr.BindMW.RKey += 0x100 }, verbs.ErrInvalidWR},
		{"no region", func(wr *verbs.SendWR) { wr.BindMW.BindInfo.MR = nil }, verbs.ErrInvalidWR},
		{"SGEs", func(wr *verbs.SendWR) { wr.SGL = []verbs.SGE{sge(region, 0, 8)} }, verbs.ErrInvalidWR},
		{"inline", func(wr *verbs.SendWR) { wr.Flags |= verbs.Inline }, verbs.ErrInvalidWR},
	} {
		wr := good()
		c.edit(&wr)
		err := p.b.qp.PostSend([]verbs.SendWR{wr})
		var pe *verbs.PostError
		if !errors.As(err, &pe) || pe.Index != 0 || !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want a PostError of %v", c.name, err, c.err)
		}
	}
	if got := p.settle(&p.b); len(got) != 0 || p.b.qp.State() != verbs.StateRTS {
		t.Fatalf("completions %v, state %v", got, p.b.qp.State())
	}
	if w2.RKey() != w2.Window().RKey() {
		t.Errorf("a refused post changed RKey to %#x", w2.RKey())
	}
	if err := p.b.qp.BindMW(w1, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{MR: region, Length: 8,
		Access: verbs.RemoteRead | verbs.ZeroBased}}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("BindMW zero-based: %v", err)
	}
	if err := p.b.qp.BindMW(w1, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{Addr: 8, Length: 8}}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("BindMW of a range without a region: %v", err)
	}
	otherPD, err := newPD(p.b.dev).Register(make([]byte, 64), verbs.LocalWrite|verbs.MWBind)
	must(t, err)
	if err := p.b.qp.BindMW(w1, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{MR: otherPD, Addr: otherPD.Addr(), Length: 8}}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("BindMW to a region of another PD: %v", err)
	}
	ud := newPair(t, pairOpts{typ: verbs.UD})
	uw := ud.b.allocMW(t, verbs.MWType2)
	if err := ud.b.qp.PostSend([]verbs.SendWR{bindWR(uw, ud.b.regMW(t, 64), 0, 8, verbs.RemoteRead)}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("BIND_MW on a UD QP: %v", err)
	}
}

// TestMWLocalInv: LOCAL_INV of a bound type 2 window completes as
// LOCAL_INV, and A's requests through its key then fail; it may be bound
// again, with a new key, which reaches memory while the old one does
// not. What LOCAL_INV cannot invalidate completes LOC_QP_OP_ERR, as in
// rxe.
func TestMWLocalInv(t *testing.T) {
	p := newPair(t, pairOpts{})
	region := p.b.regMW(t, mwRegion)
	w := p.b.allocMW(t, verbs.MWType2)
	local := p.a.reg(t, 8192)
	wantWC(t, p.one(&p.b, bindWR(w, region, mwOff, mwLen, verbs.RemoteRead)), 500, verbs.Success, verbs.WCBindMW)
	k1 := w.RKey()
	wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr()+mwOff, k1, 64)), 5, verbs.Success, verbs.WCRead)
	wantWC(t, p.one(&p.b, verbs.SendWR{ID: 7, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: k1}),
		7, verbs.Success, verbs.WCLocalInv)
	wantWC(t, p.one(&p.b, bindWR(w, region, 0, 64, verbs.RemoteRead)), 500, verbs.Success, verbs.WCBindMW)
	k2 := w.RKey()
	if k2 == k1 || k2>>8 != k1>>8 {
		t.Fatalf("keys %#x then %#x", k1, k2)
	}
	wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr(), k2, 64)), 5, verbs.Success, verbs.WCRead)
	wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr(), k1, 64)), 5, verbs.RemAccessErr, 0)

	for _, c := range []struct {
		name string
		key  func(p *pair) uint32
	}{
		{"unknown key", func(p *pair) uint32 { return 0xFFFFFF00 }},
		{"a region with a window bound", func(p *pair) uint32 {
			m := p.b.regMW(t, 4096)
			wantWC(t, p.one(&p.b, bindWR(p.b.allocMW(t, verbs.MWType2), m, 0, 64, verbs.RemoteRead)), 500, verbs.Success, verbs.WCBindMW)
			return m.RKey()
		}},
		{"a type 1 window", func(p *pair) uint32 {
			w := p.b.allocMW(t, verbs.MWType1)
			must(t, p.b.qp.BindMW(w, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{MR: region, Addr: region.Addr(), Length: 8}}))
			return w.RKey()
		}},
		{"an unbound type 2 window", func(p *pair) uint32 { return p.b.allocMW(t, verbs.MWType2).RKey() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			region = p.b.regMW(t, 4096)
			key := c.key(p)
			wantWC(t, p.one(&p.b, verbs.SendWR{ID: 8, Opcode: verbs.OpLocalInv, Flags: verbs.Signaled, InvRKey: key}),
				8, verbs.LocQPOpErr, 0)
		})
	}
}

// TestMWDealloc: a window deallocated while bound reaches no memory any
// more; the region it was bound to could not be deregistered until then
// (verbs.ErrBusy), and can after.
func TestMWDealloc(t *testing.T) {
	p := newPair(t, pairOpts{})
	region := p.b.regMW(t, mwRegion)
	w1, w2 := p.b.allocMW(t, verbs.MWType1), p.b.allocMW(t, verbs.MWType2)
	must(t, p.b.qp.BindMW(w1, &verbs.MWBindWR{BindInfo: verbs.MWBindInfo{MR: region, Addr: region.Addr(), Length: 64,
		Access: verbs.RemoteWrite}}))
	wantWC(t, p.one(&p.b, bindWR(w2, region, 0, 64, verbs.RemoteWrite)), 500, verbs.Success, verbs.WCBindMW)
	if err := region.Dereg(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dereg with windows bound: %v", err)
	}
	if err := p.b.pd.Dealloc(); !errors.Is(err, mr.ErrPDBusy) {
		t.Fatalf("PD Dealloc with windows: %v", err)
	}
	must(t, w1.Dealloc())
	must(t, w2.Dealloc())
	local := p.a.reg(t, 64)
	before := bytes.Clone(region.Bytes())
	a2, _ := p.second(t) // the first failure puts A's first QP in ERR
	wantWC(t, p.one(&p.a, remote(verbs.OpWrite, local, 0, region.Addr(), w2.RKey(), 8)), 1, verbs.RemAccessErr, 0)
	wantWC(t, p.one(&a2, remote(verbs.OpWrite, local, 0, region.Addr(), w1.RKey(), 8)), 1, verbs.RemAccessErr, 0)
	if !bytes.Equal(region.Bytes(), before) {
		t.Fatal("a WRITE through a deallocated window changed memory")
	}
	must(t, region.Dereg())
}

// TestMWOtherConnection: a type 2 window is reached only through the QP
// it was bound on (type 2B); a type 1 window through any QP of its PD.
// Two connections join A's and B's devices, their QPs in one PD each.
func TestMWOtherConnection(t *testing.T) {
	for _, typ := range []verbs.MWType{verbs.MWType1, verbs.MWType2} {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			a2, _ := p.second(t)
			region := p.b.regMW(t, mwRegion)
			w := p.b.allocMW(t, typ)
			info := verbs.MWBindInfo{MR: region, Addr: region.Addr(), Length: 64, Access: verbs.RemoteRead}
			if typ == verbs.MWType1 {
				must(t, p.b.qp.BindMW(w, &verbs.MWBindWR{ID: 500, Flags: verbs.Signaled, BindInfo: info}))
				wantWC(t, p.poll(&p.b, 1)[0], 500, verbs.Success, verbs.WCBindMW)
			} else {
				wantWC(t, p.one(&p.b, bindWR(w, region, 0, 64, verbs.RemoteRead)), 500, verbs.Success, verbs.WCBindMW)
			}
			local := p.a.reg(t, 64)
			want := verbs.Success
			if typ == verbs.MWType2 {
				want = verbs.RemAccessErr
			}
			wantWC(t, p.one(&a2, remote(verbs.OpRead, local, 0, region.Addr(), w.RKey(), 8)), 5, want, verbs.WCRead)
			wantWC(t, p.one(&p.a, remote(verbs.OpRead, local, 0, region.Addr(), w.RKey(), 8)), 5, verbs.Success, verbs.WCRead)
		})
	}
}

// second connects a second pair of QPs between p's devices, in the same
// PDs and CQs.
func (p *pair) second(t *testing.T) (a, b end) {
	t.Helper()
	o := pairOpts{}
	o.defaults()
	a, b = end{dev: p.a.dev, pd: p.a.pd, cq: p.a.cq}, end{dev: p.b.dev, pd: p.b.pd, cq: p.b.cq}
	for _, e := range []*end{&a, &b} {
		q, err := e.dev.createQP(e.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq, Cap: o.cap})
		must(t, err)
		e.qp = q
	}
	connect(t, &a, &b, o)
	connect(t, &b, &a, o)
	return a, b
}

// TestMWMaxMRs: windows count against Config.MaxMRs as regions do.
func TestMWMaxMRs(t *testing.T) {
	_, pd, _ := newTestDevice(t, &Config{MaxMRs: 2})
	if _, err := pd.RegMR(make([]byte, 8), verbs.LocalWrite|verbs.MWBind); err != nil {
		t.Fatal(err)
	}
	w, err := pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.AllocMW(verbs.MWType1); !errors.Is(err, mr.ErrTableFull) {
		t.Errorf("a second window beyond MaxMRs 2: %v", err)
	}
	if _, err := pd.RegMR(make([]byte, 8), verbs.LocalWrite); !errors.Is(err, mr.ErrTableFull) {
		t.Errorf("a region beyond MaxMRs 2: %v", err)
	}
	if err := w.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.AllocMW(verbs.MWType1); err != nil {
		t.Errorf("a window once the first is gone: %v", err)
	}
}
