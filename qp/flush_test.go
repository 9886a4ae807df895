package qp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// flushAccess is the QP rights of the FLUSH tests: every remote right and
// FlushGlobal.
const flushQPAccess = verbs.LocalWrite | verbs.RemoteAccess | verbs.FlushGlobal

// regFlush registers n bytes in e's PD with every right and FlushGlobal.
func (e *end) regFlush(t testing.TB, n int) *mr.MR {
	t.Helper()
	m, err := e.pd.pd.Register(make([]byte, n), flushQPAccess)
	must(t, err)
	return m
}

// TestFlushAfterWrites: a FLUSH completes only once every WRITE and
// ATOMIC_WRITE posted before it is in the peer's memory, on a network
// that drops, duplicates and reorders packets: each round posts
// unsignaled WRITEs of up to three packets and an ATOMIC_WRITE into fresh
// places, then a signaled FLUSH, and when the FLUSH completes B's memory
// must hold all of them. The seed replays a failure.
func TestFlushAfterWrites(t *testing.T) {
	for _, c := range []struct {
		name string
		f    mem.Faults
		seed uint64
	}{
		{"clean", mem.Faults{}, 31},
		{"loss", mem.Faults{Drop: 0.05}, 32},
		{"mixed", mem.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.05}, 33},
	} {
		t.Run(c.name, func(t *testing.T) {
			const rounds, writes, mtu = 60, 6, 1024
			p := newPair(t, pairOpts{mtu: bth.MTU1024, faults: c.f, seed: c.seed, access: flushQPAccess, timeout: 12})
			rng := rand.New(rand.NewPCG(c.seed, 1))
			slot := 3*mtu + 8
			local := p.a.reg(t, writes*slot)
			remote := p.b.regFlush(t, writes*slot)
			want := make([]byte, len(remote.Bytes()))
			wcs := make([]verbs.WC, 16)
			for r := range rounds {
				var wrs []verbs.SendWR
				for i := range writes - 1 {
					off, n := i*slot, 1+rng.IntN(3*mtu)
					for j := range n {
						local.Bytes()[off+j] = byte(rng.Uint32())
					}
					copy(want[off:], local.Bytes()[off:off+n])
					wrs = append(wrs, verbs.SendWR{ID: uint64(r), Opcode: verbs.OpWrite, SGL: []verbs.SGE{sge(local, off, n)},
						RemoteAddr: remote.Addr() + uint64(off), RKey: remote.RKey()})
				}
				v, off := rng.Uint64(), (writes-1)*slot
				binary.NativeEndian.PutUint64(want[off:], v)
				wrs = append(wrs, verbs.SendWR{ID: uint64(r), Opcode: verbs.OpAtomicWrite, RemoteAddr: remote.Addr() + uint64(off),
					RKey: remote.RKey(), CompareAdd: v},
					verbs.SendWR{ID: uint64(r), Opcode: verbs.OpFlush, Flags: verbs.Signaled, RKey: remote.RKey(),
						Flush: verbs.FlushWR{Type: verbs.PlaceGlobal, Level: verbs.FlushMR}})
				must(t, p.a.qp.PostSend(wrs))
				var wc *verbs.WC
				err := p.net.Run(func() bool {
					if n := p.a.cq.Poll(wcs); n > 0 {
						wc = &wcs[0]
					}
					return wc != nil
				}, time.Minute)
				if err != nil || wc.Status != verbs.Success || wc.Opcode != verbs.WCFlush || wc.ID != uint64(r) {
					t.Fatalf("seed %d round %d: %v, %v\n%s", c.seed, r, err, wc, p.debug())
				}
				if !bytes.Equal(remote.Bytes(), want) {
					t.Fatalf("seed %d round %d: the FLUSH completed before the writes before it were placed", c.seed, r)
				}
			}
			ca := p.a.qp.Counters()
			t.Logf("seed %d: A %s; net %+v", c.seed, &ca, p.net.Stats())
			if c.f.Drop > 0 && ca.Retransmits == 0 {
				t.Error("loss without retransmissions")
			}
		})
	}
}

// TestAtomicWriteReadBack: ATOMIC_WRITEs and WRITEs of the same 8 bytes,
// in turn, each read back with a READ, on a network that duplicates
// packets: a duplicate ATOMIC_WRITE arriving after the WRITE that
// followed it is answered and not carried out again, so the READ always
// finds the last value written.
func TestAtomicWriteReadBack(t *testing.T) {
	const seed = 41
	p := newPair(t, pairOpts{faults: mem.Faults{Duplicate: 0.3, Reorder: 0.05, Drop: 0.02}, seed: seed, timeout: 12})
	local := p.a.reg(t, 16)
	remote := p.b.reg(t, 64)
	rng := rand.New(rand.NewPCG(seed, 2))
	addr := remote.Addr() + 16
	for i := range 300 {
		v := rng.Uint64()
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.OpAtomicWrite, Flags: verbs.Signaled, RemoteAddr: addr,
			RKey: remote.RKey(), CompareAdd: v}
		if i%2 == 1 {
			binary.NativeEndian.PutUint64(local.Bytes(), v)
			wr.Opcode, wr.CompareAdd, wr.SGL = verbs.OpWrite, 0, []verbs.SGE{sge(local, 0, 8)}
		}
		clear(local.Bytes()[8:])
		must(t, p.a.qp.PostSend([]verbs.SendWR{wr, {ID: 1 << 20, Opcode: verbs.OpRead, Flags: verbs.Signaled,
			SGL: []verbs.SGE{sge(local, 8, 8)}, RemoteAddr: addr, RKey: remote.RKey()}}))
		wcs := p.poll(&p.a, 2)
		if wcs[0].Err() != nil || wcs[1].Err() != nil {
			t.Fatalf("seed %d op %d: %v, %v\n%s", seed, i, &wcs[0], &wcs[1], p.debug())
		}
		if got := binary.NativeEndian.Uint64(local.Bytes()[8:]); got != v {
			t.Fatalf("seed %d op %d (%v): read back %#x, want %#x", seed, i, wr.Opcode, got, v)
		}
	}
	if cb := p.b.qp.Counters(); cb.DuplicateRequest == 0 {
		t.Error("no duplicate reached the responder")
	}
}

// TestAtomicWriteWhole: a reader of the peer's memory never sees half of
// an ATOMIC_WRITE. B's program reads the 8 bytes with atomic loads while
// A writes all zeros and all ones in turn over real goroutines; every
// value it sees is one of the two. Under the race detector a plain copy
// of the 8 bytes by the engine would be reported as a race with the
// reader.
func TestAtomicWriteWhole(t *testing.T) {
	p := newPair(t, pairOpts{live: true})
	remote := p.b.reg(t, 64)
	word := (*uint64)(unsafe.Pointer(&remote.Bytes()[8]))
	var stop atomic.Bool
	var torn atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if v := atomic.LoadUint64(word); v != 0 && v != ^uint64(0) {
				torn.Store(v)
			}
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	wcs := make([]verbs.WC, 8)
	deadline := time.Now().Add(30 * time.Second)
	for i := range 2000 {
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpAtomicWrite, Flags: verbs.Signaled,
			RemoteAddr: remote.Addr() + 8, RKey: remote.RKey(), CompareAdd: -uint64(i % 2)}}))
		for n := 0; n == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("ATOMIC_WRITE %d did not complete in time\n%s", i, p.debug())
			}
			n = p.a.cq.Poll(wcs)
			if n > 0 && wcs[0].Err() != nil {
				t.Fatal(wcs[0].Err())
			}
		}
	}
	if v := torn.Load(); v != 0 {
		t.Errorf("a reader saw %#x, half of an ATOMIC_WRITE", v)
	}
}

// TestFlushCaps: the software device reports FLUSH of the global
// placement type and ATOMIC_WRITE, and not the persistent type, which
// its memory cannot honour.
func TestFlushCaps(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := verbs.CapsOf(p.a.dev)
	if c&(verbs.CapFlushGlobal|verbs.CapAtomicWrite) != verbs.CapFlushGlobal|verbs.CapAtomicWrite || c&verbs.CapFlushPersistent != 0 {
		t.Errorf("capabilities %v", c)
	}
}
