//go:build hwverbs && cgo && linux

package hwverbs

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/verbs"

	"github.com/goroce/goroce/roce"
)

// flushPair returns two RC sides connected with the given QP rights on
// each, on two opens of the device.
func flushPair(t *testing.T, access verbs.Access) (a, b *side) {
	t.Helper()
	a, b = newSide(t, openT(t), verbs.RC, nil, nil), newSide(t, openT(t), verbs.RC, nil, nil)
	connect(t, a, b, &roce.ConnParams{Access: access})
	return a, b
}

// waitOne posts wr on s and returns its completion.
func (s *side) waitOne(t *testing.T, wr verbs.SendWR) verbs.WC {
	t.Helper()
	wr.Flags |= verbs.Signaled
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	return rocetest.Wait(t, s.cq)
}

// TestFlushAtomicWrite: IBTA 1.5's FLUSH and ATOMIC_WRITE through the
// ibv_wr_* API, where the device has them (rxe from kernel 6.2, with
// rdma-core 45 or later for FLUSH): the 8 bytes land and read back, a
// FLUSH after a WRITE completes with the WRITE's bytes in place, and the
// wrong rights are NAKed as rxe NAKs them (the QP's: an invalid request;
// the region's: a remote access error). Where the device has not, the
// post is refused with EOPNOTSUPP and nothing is sent.
func TestFlushAtomicWrite(t *testing.T) {
	every := verbs.LocalWrite | verbs.RemoteAccess | verbs.FlushGlobal
	d := openT(t)
	caps := d.Caps()
	t.Logf("%s: device_cap_flags_ex %#x (%v)", d.Name(), uint64(caps), caps)
	if caps&verbs.CapAtomicWrite == 0 || caps&verbs.CapFlushGlobal == 0 {
		a, _ := flushPair(t, verbs.LocalWrite|verbs.RemoteAccess)
		for _, wr := range []verbs.SendWR{{Opcode: verbs.OpAtomicWrite, CompareAdd: 1, RKey: a.mr.RKey()},
			{Opcode: verbs.OpFlush, Flush: verbs.FlushWR{Type: verbs.PlaceGlobal}}} {
			if caps&verbs.CapAtomicWrite != 0 && wr.Opcode == verbs.OpAtomicWrite {
				continue
			}
			err := a.qp.PostSend([]verbs.SendWR{wr})
			if !errors.Is(err, ErrUnsupported) || !errors.Is(err, syscall.EOPNOTSUPP) {
				t.Errorf("%v on a device without it: %v", wr.Opcode, err)
			}
		}
		t.Skip("the device has no FLUSH or ATOMIC_WRITE (rxe before kernel 6.2): refused as it should be")
	}
	t.Run("ATOMIC_WRITE lands and reads back", func(t *testing.T) {
		a, b := flushPair(t, every)
		const v = 0x0102030405060708
		if wc := a.waitOne(t, verbs.SendWR{ID: 1, Opcode: verbs.OpAtomicWrite, RemoteAddr: b.mr.Addr() + 64,
			RKey: b.mr.RKey(), CompareAdd: v}); wc.Status != verbs.Success || wc.Opcode != verbs.WCAtomicWrite {
			t.Fatalf("%v", &wc)
		}
		if got := binary.NativeEndian.Uint64(b.mr.Bytes()[64:]); got != v {
			t.Errorf("peer memory %#x, want %#x", got, v)
		}
		if wc := a.waitOne(t, verbs.SendWR{ID: 2, Opcode: verbs.OpRead, SGL: a.sge(512, 8), RemoteAddr: b.mr.Addr() + 64,
			RKey: b.mr.RKey()}); wc.Status != verbs.Success {
			t.Fatalf("%v", &wc)
		}
		if got := binary.NativeEndian.Uint64(a.mr.Bytes()[512:]); got != v {
			t.Errorf("read back %#x, want %#x", got, v)
		}
	})
	t.Run("FLUSH after a WRITE", func(t *testing.T) {
		a, b := flushPair(t, every)
		m, err := b.pd.RegMR(make([]byte, 8192), verbs.LocalWrite|verbs.RemoteWrite|verbs.FlushGlobal)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Dereg()
		for i := range a.mr.Bytes()[:4096] {
			a.mr.Bytes()[i] = byte(i * 7)
		}
		if err := a.qp.PostSend([]verbs.SendWR{
			{ID: 1, Opcode: verbs.OpWrite, SGL: a.sge(0, 4096), RemoteAddr: m.Addr() + 4096, RKey: m.RKey()},
			{ID: 2, Opcode: verbs.OpFlush, Flags: verbs.Signaled, RemoteAddr: m.Addr() + 4096, RKey: m.RKey(),
				Flush: verbs.FlushWR{Len: 4096, Type: verbs.PlaceGlobal, Level: verbs.FlushRange}},
		}); err != nil {
			t.Fatal(err)
		}
		if wc := rocetest.Wait(t, a.cq); wc.ID != 2 || wc.Status != verbs.Success || wc.Opcode != verbs.WCFlush {
			t.Fatalf("%v", &wc)
		}
		for i, c := range m.Bytes()[4096:] {
			if c != byte(i*7) {
				t.Fatalf("byte %d of the WRITE is not in place when the FLUSH completes", i)
			}
		}
	})
	for _, c := range []struct {
		name   string
		access verbs.Access // the peer QP's
		region verbs.Access
		wr     func(m verbs.MR) verbs.SendWR
		want   verbs.Status
	}{
		{"FLUSH to a QP without FlushGlobal", verbs.LocalWrite | verbs.RemoteAccess, every &^ verbs.RemoteAtomic,
			func(m verbs.MR) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.OpFlush, RKey: m.RKey(), Flush: verbs.FlushWR{Type: verbs.PlaceGlobal, Level: verbs.FlushMR}}
			}, verbs.RemInvReqErr},
		{"FLUSH to a region without FlushGlobal", every, verbs.LocalWrite | verbs.RemoteWrite,
			func(m verbs.MR) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.OpFlush, RemoteAddr: m.Addr(), RKey: m.RKey(),
					Flush: verbs.FlushWR{Len: 8, Type: verbs.PlaceGlobal}}
			}, verbs.RemAccessErr},
		{"ATOMIC_WRITE to a QP without remote write", verbs.LocalWrite | verbs.RemoteRead, verbs.LocalWrite | verbs.RemoteWrite,
			func(m verbs.MR) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.OpAtomicWrite, RemoteAddr: m.Addr(), RKey: m.RKey()}
			}, verbs.RemInvReqErr},
		{"ATOMIC_WRITE not 8-byte aligned", every, verbs.LocalWrite | verbs.RemoteWrite,
			func(m verbs.MR) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.OpAtomicWrite, RemoteAddr: m.Addr() + 4, RKey: m.RKey()}
			}, verbs.RemInvReqErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newSide(t, openT(t), verbs.RC, nil, nil)
			b := newSide(t, openT(t), verbs.RC, nil, nil)
			pa, pb := roce.ConnParams{Access: every, PSN: 0x10}, roce.ConnParams{Access: c.access, PSN: 0x20}
			if err := roce.Connect(a.qp, b.remote(t, pb.PSN), &pa); err != nil {
				t.Fatal(err)
			}
			if err := roce.Connect(b.qp, a.remote(t, pa.PSN), &pb); err != nil {
				t.Fatal(err)
			}
			m, err := b.pd.RegMR(make([]byte, 4096), c.region)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Dereg()
			if wc := a.waitOne(t, c.wr(m)); wc.Status != c.want {
				t.Errorf("%v, want %v", &wc, c.want)
			}
		})
	}
}
