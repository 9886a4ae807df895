//go:build hwverbs && cgo && linux

package hwverbs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/verbs"
)

// TestCrossMW: memory windows between two processes with their own
// backends, as TestCross runs them (the same flags). Each side in turn
// owns windows on its memory and the other reaches them, so that between
// goroce's engine and kernel rxe both bind and both are reached:
//
//   - a type 2 window bound by a BIND_MW work request: the peer WRITEs and
//     READs through it, invalidates it with a SEND with invalidate (the
//     owner's receive says so), and its next WRITE is refused
//     (REM_ACCESS_ERR) and changes nothing;
//   - a type 2 window bound on one QP: the peer's WRITE through it on
//     another QP is refused (type 2B); the owner invalidates it with
//     LOCAL_INV, and the peer's next WRITE on the first QP is refused;
//   - a zero-based type 2 window: the peer addresses it from 0, and its
//     READ and WRITE reach the window's bytes at those offsets;
//   - a type 1 window bound with QP.BindMW: the peer READs through it, and
//     its WRITE just before the window, inside the region, is refused,
//     except by kernel rxe, which checks an access through a window
//     against the region's range only (check_rkey in rxe_resp.c): there
//     the WRITE lands, and the test checks that it did.
//
// A refused access puts both QPs in the error state, so each case
// connects QPs of its own.
func TestCrossMW(t *testing.T) {
	if *crossRole == "" {
		t.Skip("a two-process test: run with -cross.role and -cross.listen or -cross.peer (see README.md)")
	}
	dev, buf := crossDevice(t)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteAccess|verbs.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	mtu, ok := bth.MTUAtMost(*crossMTU)
	if !ok {
		t.Fatalf("-cross.mtu %d", *crossMTU)
	}
	conn := crossConn(t)
	defer conn.Close()
	x := &mwCross{t: t, dev: dev, pd: pd, mr: mr, mtu: mtu, listener: *crossListen != "",
		l: &crossLink{t: t, conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}}
	for phase := 1; phase <= 2; phase++ {
		owner := (phase == 1) == x.listener
		role := map[bool]string{true: "we own the windows", false: "the peer owns the windows"}[owner]
		for _, c := range []struct {
			name            string
			owner, accessor func()
		}{
			{"type 2, SEND with invalidate", x.sendInvOwner, x.sendInvAccessor},
			{"type 2, another QP, LOCAL_INV", x.localInvOwner, x.localInvAccessor},
			{"type 1, out of the window", x.type1Owner, x.type1Accessor},
			{"type 2, zero-based", x.zeroBasedOwner, x.zeroBasedAccessor},
		} {
			clear(buf)
			if owner {
				c.owner()
			} else {
				c.accessor()
			}
			t.Logf("phase %d (%s): %s: checked", phase, role, c.name)
		}
	}
}

// mwCross is one side of TestCrossMW.
type mwCross struct {
	t        *testing.T
	dev      verbs.Device
	pd       verbs.PD
	mr       verbs.MR
	mtu      bth.MTU
	listener bool
	l        *crossLink
}

// The windows' place in the owner's buffer, and the accessor's bytes.
const (
	mwOff      = 65536 // the type 2 windows' first byte
	mwLen      = 8192
	mwReadOff  = 300000 // where the accessor READs to
	mwStrayLen = 64     // the refused WRITEs
)

// mwConn is a connected RC QP with a CQ of its own.
type mwConn struct {
	qp verbs.QP
	cq verbs.CQ
}

// connect makes a QP, connects it to the peer's next one and waits for
// the peer to be ready to send.
func (x *mwCross) connect() *mwConn {
	t := x.t
	t.Helper()
	cq, err := x.dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := x.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy(); cq.Destroy() })
	gid, err := x.dev.GID(0)
	if err != nil {
		t.Fatal(err)
	}
	me := crossInfo{QPN: qp.QPN(), PSN: 0x1000, GID: gid}
	x.l.send(crossMsg{Kind: "info", Info: &me})
	peer := x.l.recv("info").Info
	if err := roce.Connect(qp, &roce.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID},
		&roce.ConnParams{MTU: x.mtu, PSN: me.PSN, MaxRDAtomic: 4, MaxDestRDAtomic: 4}); err != nil {
		t.Fatal(err)
	}
	x.l.send(crossMsg{Kind: "rts"})
	x.l.recv("rts")
	t.Logf("QP %d GID %v <-> peer QP %d GID %v", me.QPN, netip.AddrFrom16(me.GID).Unmap(), peer.QPN,
		netip.AddrFrom16(peer.GID).Unmap())
	return &mwConn{qp: qp, cq: cq}
}

// post posts wr on c and returns its completion.
func (x *mwCross) post(c *mwConn, wr verbs.SendWR) verbs.WC {
	x.t.Helper()
	wr.Flags |= verbs.Signaled
	if err := c.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		x.t.Fatal(err)
	}
	return rocetest.Wait(x.t, c.cq)
}

// expect checks a completion against what the step wants, and fails
// both sides when it differs.
func (x *mwCross) expect(what string, wc verbs.WC, st verbs.Status, op verbs.WCOpcode) {
	x.t.Helper()
	if wc.Status != st || st == verbs.Success && wc.Opcode != op {
		x.fail(fmt.Sprintf("%s: completion %v, want %v %v", what, &wc, st, op))
	}
}

// fail tells the peer and fails the test.
func (x *mwCross) fail(msg string) {
	x.t.Helper()
	x.l.send(crossMsg{Kind: "failed", Err: msg})
	x.t.Fatal(msg)
}

// window allocates a window of typ in x's PD, deallocated at the end.
func (x *mwCross) window(typ verbs.MWType) verbs.MW {
	x.t.Helper()
	w, err := x.pd.AllocMW(typ)
	if err != nil {
		x.t.Fatal(err)
	}
	x.t.Cleanup(func() { w.Dealloc() })
	return w
}

// bind2 binds a type 2 window to [mwOff, mwOff+mwLen) of the region
// through c, with remote read and write, and returns the key.
func (x *mwCross) bind2(c *mwConn) (verbs.MW, uint32) {
	x.t.Helper()
	return x.bind2At(c, mwOff, mwLen, 0)
}

// bind2At binds a type 2 window to [off, off+n) of the region through c,
// with remote read and write and the extra rights, and returns the key.
func (x *mwCross) bind2At(c *mwConn, off int, n uint64, extra verbs.Access) (verbs.MW, uint32) {
	x.t.Helper()
	w := x.window(verbs.MWType2)
	key := verbs.IncRKey(w.RKey())
	x.expect("BIND_MW", x.post(c, verbs.SendWR{ID: 1, Opcode: verbs.OpBindMW, BindMW: &verbs.BindMW{MW: w, RKey: key,
		BindInfo: verbs.MWBindInfo{MR: x.mr, Addr: x.mr.Addr() + uint64(off), Length: n,
			Access: verbs.RemoteRead | verbs.RemoteWrite | extra}}}), verbs.Success, verbs.WCBindMW)
	if w.RKey() != key {
		x.fail(fmt.Sprintf("RKey %#x after the bind of %#x", w.RKey(), key))
	}
	return w, key
}

// tell sends the window's address and key, and whether accesses outside
// it are refused.
func (x *mwCross) tell(kind string, addr uint64, key uint32) {
	x.l.send(crossMsg{Kind: kind, Info: &crossInfo{Addr: addr, RKey: key, Len: mwLen, Bounds: x.bounds()}})
}

// bounds reports whether this side refuses an access through a window
// outside the window: goroce's engine does, kernel rxe (a device named
// rxe*) does not.
func (x *mwCross) bounds() bool {
	return *crossRole == "soft" || !strings.HasPrefix(x.dev.Name(), "rxe")
}

// checked waits for the owner's verdict.
func (x *mwCross) checked() { x.l.recv("checked") }

// verdict checks the owner's memory and tells the accessor.
func (x *mwCross) verdict(errs ...string) {
	x.t.Helper()
	for _, e := range errs {
		if e != "" {
			x.fail(e)
		}
	}
	x.l.send(crossMsg{Kind: "checked"})
}

// same says how got differs from want, or "".
func same(what string, got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	return what + ": the bytes differ"
}

// mwPattern is what the accessor WRITEs.
func mwPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*29) + seed
	}
	return b
}

func (x *mwCross) sendInvOwner() {
	c := x.connect()
	_, key := x.bind2(c)
	if err := c.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}}}}); err != nil {
		x.t.Fatal(err)
	}
	x.tell("window", x.mr.Addr()+mwOff, key)
	checkInvRecv(x.t, rocetest.Wait(x.t, c.cq), key)
	x.l.recv("done")
	b := x.mr.Bytes()
	x.verdict(same("the WRITE through the window", b[mwOff+100:mwOff+100+crossLen], mwPattern(crossLen, 1)),
		same("the window's start, which the WRITE after the invalidation aimed at", b[mwOff:mwOff+100], make([]byte, 100)))
}

func (x *mwCross) sendInvAccessor() {
	c := x.connect()
	win := x.l.recv("window").Info
	b := x.mr.Bytes()
	copy(b, mwPattern(crossLen, 1))
	sge := func(off, n int) []verbs.SGE {
		return []verbs.SGE{{Addr: x.mr.Addr() + uint64(off), Length: uint32(n), LKey: x.mr.LKey()}}
	}
	x.expect("WRITE through the window", x.post(c, verbs.SendWR{ID: 2, Opcode: verbs.OpWrite, SGL: sge(0, crossLen),
		RemoteAddr: win.Addr + 100, RKey: win.RKey}), verbs.Success, verbs.WCWrite)
	x.expect("READ through the window", x.post(c, verbs.SendWR{ID: 3, Opcode: verbs.OpRead, SGL: sge(mwReadOff, crossLen),
		RemoteAddr: win.Addr + 100, RKey: win.RKey}), verbs.Success, verbs.WCRead)
	if e := same("the READ through the window", b[mwReadOff:mwReadOff+crossLen], b[:crossLen]); e != "" {
		x.fail(e)
	}
	x.expect("SEND with invalidate", x.post(c, verbs.SendWR{ID: 4, Opcode: verbs.OpSendInv, SGL: sge(0, 8),
		InvRKey: win.RKey}), verbs.Success, verbs.WCSend)
	x.expect("WRITE after the invalidation", x.post(c, verbs.SendWR{ID: 5, Opcode: verbs.OpWrite, SGL: sge(0, mwStrayLen),
		RemoteAddr: win.Addr, RKey: win.RKey}), verbs.RemAccessErr, 0)
	x.l.send(crossMsg{Kind: "done"})
	x.checked()
}

func (x *mwCross) localInvOwner() {
	c1, c2 := x.connect(), x.connect()
	_, key := x.bind2(c1)
	_ = c2 // the peer's WRITE on it is refused, and puts it in error
	x.tell("window", x.mr.Addr()+mwOff, key)
	x.l.recv("done")
	x.expect("LOCAL_INV", x.post(c1, verbs.SendWR{ID: 6, Opcode: verbs.OpLocalInv, InvRKey: key}), verbs.Success, verbs.WCLocalInv)
	x.l.send(crossMsg{Kind: "invalidated"})
	x.l.recv("done")
	b := x.mr.Bytes()
	x.verdict(same("the WRITE on the window's QP", b[mwOff:mwOff+crossLen], mwPattern(crossLen, 2)),
		same("the target of the WRITE on another QP", b[mwOff+crossLen:mwOff+crossLen+mwStrayLen], make([]byte, mwStrayLen)),
		same("the target of the WRITE after LOCAL_INV", b[mwOff+6000:mwOff+6000+mwStrayLen], make([]byte, mwStrayLen)))
}

func (x *mwCross) localInvAccessor() {
	c1, c2 := x.connect(), x.connect()
	win := x.l.recv("window").Info
	copy(x.mr.Bytes(), mwPattern(crossLen, 2))
	sgl := []verbs.SGE{{Addr: x.mr.Addr(), Length: crossLen, LKey: x.mr.LKey()}}
	x.expect("WRITE on the window's QP", x.post(c1, verbs.SendWR{ID: 2, Opcode: verbs.OpWrite, SGL: sgl,
		RemoteAddr: win.Addr, RKey: win.RKey}), verbs.Success, verbs.WCWrite)
	stray := []verbs.SGE{{Addr: x.mr.Addr(), Length: mwStrayLen, LKey: x.mr.LKey()}}
	x.expect("WRITE through a type 2 window on another QP", x.post(c2, verbs.SendWR{ID: 3, Opcode: verbs.OpWrite, SGL: stray,
		RemoteAddr: win.Addr + crossLen, RKey: win.RKey}), verbs.RemAccessErr, 0)
	x.l.send(crossMsg{Kind: "done"})
	x.l.recv("invalidated")
	x.expect("WRITE after LOCAL_INV", x.post(c1, verbs.SendWR{ID: 4, Opcode: verbs.OpWrite, SGL: stray,
		RemoteAddr: win.Addr + 6000, RKey: win.RKey}), verbs.RemAccessErr, 0)
	x.l.send(crossMsg{Kind: "done"})
	x.checked()
}

// The type 1 window: 4096 bytes of the region from mwOff+4096.
const (
	mw1Off = mwOff + 4096
	mw1Len = 4096
)

func (x *mwCross) type1Owner() {
	c := x.connect()
	w := x.window(verbs.MWType1)
	k0 := w.RKey()
	if err := c.qp.BindMW(w, &verbs.MWBindWR{ID: 7, Flags: verbs.Signaled, BindInfo: verbs.MWBindInfo{MR: x.mr,
		Addr: x.mr.Addr() + mw1Off, Length: mw1Len, Access: verbs.RemoteRead | verbs.RemoteWrite}}); err != nil {
		x.t.Fatal(err)
	}
	x.expect("ibv_bind_mw", rocetest.Wait(x.t, c.cq), verbs.Success, verbs.WCBindMW)
	if w.RKey()>>8 != k0>>8 || w.RKey() == k0 {
		x.fail(fmt.Sprintf("RKey %#x after the bind, allocated with %#x", w.RKey(), k0))
	}
	b := x.mr.Bytes()
	copy(b[mw1Off:], mwPattern(mw1Len, 3))
	x.tell("window", x.mr.Addr()+mw1Off, w.RKey())
	x.l.recv("done")
	want := make([]byte, mwStrayLen)
	if !x.bounds() {
		want = mwPattern(mwStrayLen, 4)
	}
	x.verdict(same("the bytes before the window", b[mw1Off-mwStrayLen:mw1Off], want))
}

func (x *mwCross) type1Accessor() {
	c := x.connect()
	win := x.l.recv("window").Info
	b := x.mr.Bytes()
	x.expect("READ through the window", x.post(c, verbs.SendWR{ID: 2, Opcode: verbs.OpRead,
		SGL:        []verbs.SGE{{Addr: x.mr.Addr() + mwReadOff, Length: mw1Len, LKey: x.mr.LKey()}},
		RemoteAddr: win.Addr, RKey: win.RKey}), verbs.Success, verbs.WCRead)
	if e := same("the READ through the type 1 window", b[mwReadOff:mwReadOff+mw1Len], mwPattern(mw1Len, 3)); e != "" {
		x.fail(e)
	}
	copy(b, mwPattern(mwStrayLen, 4))
	st, op := verbs.RemAccessErr, verbs.WCOpcode(0)
	if !win.Bounds {
		st, op = verbs.Success, verbs.WCWrite
		x.t.Log("the peer lets a WRITE through a window outside it, inside its region, land (as kernel rxe does)")
	}
	x.expect("WRITE before the window", x.post(c, verbs.SendWR{ID: 3, Opcode: verbs.OpWrite,
		SGL:        []verbs.SGE{{Addr: x.mr.Addr(), Length: mwStrayLen, LKey: x.mr.LKey()}},
		RemoteAddr: win.Addr - mwStrayLen, RKey: win.RKey}), st, op)
	x.l.send(crossMsg{Kind: "done"})
	x.checked()
}

// The zero-based window: mw1Len bytes from mw1Off, addressed from 0.
const mwZeroAt = 0x100 // where in it the accessor READs and WRITEs

func (x *mwCross) zeroBasedOwner() {
	c := x.connect()
	_, key := x.bind2At(c, mw1Off, mw1Len, verbs.ZeroBased)
	b := x.mr.Bytes()
	copy(b[mw1Off:], mwPattern(mw1Len, 5))
	x.tell("window", 0, key)
	x.l.recv("done")
	want := mwPattern(mw1Len, 5)
	copy(want[mwZeroAt:], mwPattern(mwStrayLen, 6))
	x.verdict(same("the zero-based window after the WRITE at offset 0x100", b[mw1Off:mw1Off+mw1Len], want),
		same("the bytes before the window", b[mw1Off-mwStrayLen:mw1Off], make([]byte, mwStrayLen)))
}

func (x *mwCross) zeroBasedAccessor() {
	c := x.connect()
	win := x.l.recv("window").Info
	if win.Addr != 0 {
		x.fail(fmt.Sprintf("a zero-based window told at address %#x", win.Addr))
	}
	b := x.mr.Bytes()
	x.expect("READ at offset 0 of the zero-based window", x.post(c, verbs.SendWR{ID: 2, Opcode: verbs.OpRead,
		SGL:        []verbs.SGE{{Addr: x.mr.Addr() + mwReadOff, Length: mw1Len, LKey: x.mr.LKey()}},
		RemoteAddr: 0, RKey: win.RKey}), verbs.Success, verbs.WCRead)
	if e := same("the READ of the zero-based window", b[mwReadOff:mwReadOff+mw1Len], mwPattern(mw1Len, 5)); e != "" {
		x.fail(e)
	}
	copy(b, mwPattern(mwStrayLen, 6))
	x.expect("WRITE at offset 0x100 of the zero-based window", x.post(c, verbs.SendWR{ID: 3, Opcode: verbs.OpWrite,
		SGL:        []verbs.SGE{{Addr: x.mr.Addr(), Length: mwStrayLen, LKey: x.mr.LKey()}},
		RemoteAddr: mwZeroAt, RKey: win.RKey}), verbs.Success, verbs.WCWrite)
	x.l.send(crossMsg{Kind: "done"})
	x.checked()
}
