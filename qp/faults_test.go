package qp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"

	"github.com/goroce/goroce/transport/mem"
)

// TestFaultMatrix moves 64 MiB per case (8 MiB with -short) over a faulty
// link, with SEND, WRITE, WRITE with immediate and READ messages of 64 KiB,
// and checks every byte and that every completion arrives exactly once and
// in order. A failure prints the seed; the simulation is deterministic, so
// the seed replays it.
func TestFaultMatrix(t *testing.T) {
	total := 64 << 20
	if testing.Short() {
		total = 8 << 20
	}
	cases := []struct {
		name string
		f    mem.Faults
		// mayFail: at this loss a run of eight lost tries in a row is
		// likely somewhere in 64 MiB, and retry_cnt 7 then ends the QP
		// as it would on an RNIC: every request must still complete
		// exactly once, RETRY_EXC_ERR and then WR_FLUSH_ERR.
		mayFail bool
	}{
		{"loss1", mem.Faults{Drop: 0.01}, false},
		{"loss5", mem.Faults{Drop: 0.05}, false},
		{"loss10", mem.Faults{Drop: 0.10}, false},
		{"loss20", mem.Faults{Drop: 0.20}, true},
		{"duplicate5", mem.Faults{Duplicate: 0.05}, false},
		{"reorder5", mem.Faults{Reorder: 0.05}, false},
		{"corrupt2", mem.Faults{Corrupt: 0.02}, false},
		{"mixed", mem.Faults{Drop: 0.02, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.01, Truncate: 0.01,
			Delay: 30 * time.Microsecond}, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seed := uint64(1000 + i)
			p := newPair(t, pairOpts{mtu: bth.MTU4096, faults: c.f, seed: seed, retry: 7, timeout: 12})
			moved, failed := stream(t, p, total, 64<<10, c.mayFail)
			ca, cb := p.a.qp.Counters(), p.b.qp.Counters()
			t.Logf("seed %d: %d MiB verified; A: %s; B: %s; net %+v", seed, moved>>20, &ca, &cb, p.net.Stats())
			if failed != nil {
				t.Logf("seed %d: the QP ended with %v after %d MiB", seed, failed, moved>>20)
			}
			if c.f.Drop > 0 && ca.Retransmits == 0 {
				t.Error("loss without retransmissions")
			}
		})
	}
}

// stream runs total bytes of mixed operations of size msg from A to B
// with up to 32 requests in flight, checking data and completion order,
// and returns the bytes moved. With mayFail, the requester may run out of
// retries: the request that did completes RETRY_EXC_ERR, every later one
// WR_FLUSH_ERR, and stream returns the failed completion.
func stream(t *testing.T, p *pair, total, msg int, mayFail bool) (int, *verbs.WC) {
	const depth = 32
	pattern := make([]byte, 1<<20+msg)
	rng := rand.New(rand.NewPCG(p.seed, 7))
	for i := range pattern {
		pattern[i] = byte(rng.Uint32())
	}
	// Each slot has a local buffer and a remote one.
	local := p.a.reg(t, depth*msg)
	remote := p.b.reg(t, depth*msg)
	ops := []verbs.WROpcode{verbs.OpSend, verbs.OpWrite, verbs.OpWriteImm, verbs.OpRead}
	content := func(id int) []byte { off := id * 4099 % (1 << 20); return pattern[off : off+msg] }
	slot := func(id int) int { return id % depth * msg }
	var posted, doneA, doneB, moved int
	var expectRecv []int // message ids whose receive completion B expects, in order
	var failed *verbs.WC
	post := func() {
		id := posted
		op := ops[id%len(ops)]
		s := slot(id)
		wr := verbs.SendWR{ID: uint64(id), Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, s, msg)},
			RemoteAddr: remote.Addr() + uint64(s), RKey: remote.RKey(), Imm: uint32(id)}
		if op == verbs.OpRead {
			copy(remote.Bytes()[s:s+msg], content(id))
			clear(local.Bytes()[s : s+msg])
		} else {
			copy(local.Bytes()[s:s+msg], content(id))
		}
		if op == verbs.OpSend || op == verbs.OpWriteImm {
			must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(id), SGL: []verbs.SGE{sge(remote, s, msg)}}}))
			expectRecv = append(expectRecv, id)
		}
		must(t, p.a.qp.PostSend([]verbs.SendWR{wr}))
		posted++
	}
	wcs := make([]verbs.WC, 64)
	for posted < depth && posted*msg < total {
		post()
	}
	err := p.net.Run(func() bool {
		for n := p.b.cq.Poll(wcs); n > 0; n = p.b.cq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				id := expectRecv[doneB]
				if wc.Status != verbs.Success || wc.ID != uint64(id) || wc.ByteLen != uint32(msg) {
					t.Fatalf("seed %d: receive %d: WC %v\n%s", p.seed, id, &wc, p.debug())
				}
				if ops[id%len(ops)] == verbs.OpWriteImm && (wc.Imm != uint32(id) || wc.Flags&verbs.WithImm == 0) {
					t.Fatalf("seed %d: receive %d: WC %v\n%s", p.seed, id, &wc, p.debug())
				}
				doneB++
			}
		}
		for n := p.a.cq.Poll(wcs); n > 0; n = p.a.cq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				id := doneA
				if wc.ID != uint64(id) {
					t.Fatalf("seed %d: request %d: WC %v\n%s", p.seed, id, &wc, p.debug())
				}
				if failed != nil || wc.Status != verbs.Success {
					if !mayFail || failed == nil && wc.Status != verbs.RetryExcErr || failed != nil && wc.Status != verbs.WRFlushErr {
						t.Fatalf("seed %d: request %d: WC %v after %v\n%s", p.seed, id, &wc, failed, p.debug())
					}
					if failed == nil {
						failed = &wc
					}
					doneA++
					continue
				}
				s := slot(id)
				got := remote.Bytes()[s : s+msg]
				if ops[id%len(ops)] == verbs.OpRead {
					got = local.Bytes()[s : s+msg]
				}
				// A SEND or WRITE may complete at the requester before
				// the receive completion is polled, but its bytes are in
				// place once the ACK came back.
				if !bytes.Equal(got, content(id)) {
					t.Fatalf("seed %d: message %d (%v): data differs", p.seed, id, ops[id%len(ops)])
				}
				moved += msg
				doneA++
				if posted*msg < total {
					post()
				}
			}
		}
		if failed != nil {
			// The receives of what did not arrive stay posted on B.
			return doneA == posted
		}
		return doneA == posted && doneB == len(expectRecv) && posted*msg >= total
	}, 10*time.Minute)
	if err != nil {
		t.Fatalf("seed %d: %v after %d of %d messages\n%s", p.seed, err, doneA, posted, p.debug())
	}
	return moved, failed
}

func TestFaultMatrixReplays(t *testing.T) {
	// The same seed gives the same run: counters match exactly.
	run := func() string {
		p := newPair(t, pairOpts{mtu: bth.MTU1024, faults: mem.Faults{Drop: 0.05, Reorder: 0.05}, seed: 99})
		stream(t, p, 2<<20, 16<<10, false)
		ca, cb := p.a.qp.Counters(), p.b.qp.Counters()
		return fmt.Sprint(&ca, &cb, p.net.Stats())
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs with one seed differ:\n%s\n%s", a, b)
	}
}
