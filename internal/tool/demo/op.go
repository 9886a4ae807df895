package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/verbs"
)

// opRun is one operation's run: count requests from the client to the
// server, depth at a time, each byte and completion checked. Request i
// uses slot i%depth of each side's region: the client's source slots
// come first, then its result slots; the atomic counter sits after them
// in the server's.
type opRun struct {
	c              *config
	o              op
	client, server *side
	size           int
	counter        uint64   // offset of the atomic counter in the server's region
	readSrc        [][]byte // what each server slot holds for READs
	want           map[int][]byte
	posted         int
	doneC, doneS   int
	checked        int64
}

// runOp runs c.count operations o from client to server and returns the
// bytes checked.
func (c *config) runOp(ctx context.Context, o op, client, server *side) (int64, error) {
	r := &opRun{c: c, o: o, client: client, server: server, size: c.size,
		counter: uint64(2 * c.depth * max(c.size, 8)), want: make(map[int][]byte, c.depth)}
	if o.op.IsAtomic() {
		r.size = 8
		binary.NativeEndian.PutUint64(server.mr.Bytes()[r.counter:], 0)
		cli.SyncMR(server.mr)
	}
	if o.op == verbs.OpRead {
		for k := range c.depth {
			r.readSrc = append(r.readSrc, r.pattern(k))
			copy(server.mr.Bytes()[r.slot(k):], r.readSrc[k])
		}
		cli.SyncMR(server.mr)
	}
	if err := r.loop(ctx); err != nil {
		return r.checked, err
	}
	if o.op.IsAtomic() {
		cli.SyncMR(server.mr)
		if got := binary.NativeEndian.Uint64(server.mr.Bytes()[r.counter:]); got != uint64(c.count) {
			return r.checked, fmt.Errorf("the counter ends at %d, want %d", got, c.count)
		}
	}
	return r.checked, nil
}

// pattern is request i's data, from the seed.
func (r *opRun) pattern(i int) []byte {
	g := rand.New(rand.NewPCG(r.c.seed, uint64(r.o.op)<<32|uint64(i)))
	b := make([]byte, r.size)
	for j := range b {
		b[j] = byte(g.Uint32())
	}
	return b
}

func (r *opRun) slot(i int) uint64 { return uint64(i%r.c.depth) * uint64(r.size) }

// mine is the client's result slot of request i.
func (r *opRun) mine(i int) uint64 { return uint64(r.c.depth*r.size) + r.slot(i) }

// loop keeps depth requests in flight until every one has completed on
// both sides.
func (r *opRun) loop(ctx context.Context) error {
	c, recv := r.c, r.o.recv
	wcs := make([]verbs.WC, 32)
	for r.doneC < c.count || recv && r.doneS < c.count {
		for r.posted < c.count && r.posted < r.doneC+c.depth && (!recv || r.posted < r.doneS+c.depth) {
			if err := r.post(); err != nil {
				return err
			}
		}
		n := r.client.cq.Poll(wcs)
		if err := r.clientDone(wcs[:n]); err != nil {
			return err
		}
		m := r.server.cq.Poll(wcs)
		if err := r.serverDone(wcs[:m]); err != nil {
			return err
		}
		if n == 0 && m == 0 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			r.client.cq.Wait(wctx)
			cancel()
			if ctx.Err() != nil {
				return fmt.Errorf("timed out after %d of %d completions: %w", r.doneC, c.count, ctx.Err())
			}
		}
	}
	return nil
}

// post posts the next request (and the server's receive for it).
func (r *opRun) post() error {
	i, size, client, server := r.posted, uint64(r.size), r.client, r.server
	// This request lets the server's engine write slot(i) again, where
	// this goroutine checked request i-depth: order the check first (the
	// request reaches the server's device through the sockets).
	cli.SyncMR(server.mr)
	wr := verbs.SendWR{ID: uint64(i), Opcode: r.o.op, Flags: verbs.Signaled, Imm: uint32(i),
		RemoteAddr: server.mr.Addr() + r.slot(i), RKey: server.mr.RKey()}
	switch r.o.op {
	case verbs.OpRead:
		// The server's slots were filled before the first READ: the demo
		// never rewrites memory a peer may still be reading (a late
		// duplicate READ re-reads it).
		r.want[i] = r.readSrc[i%r.c.depth]
		clear(client.mr.Bytes()[r.mine(i) : r.mine(i)+size])
		wr.SGL = []verbs.SGE{{Addr: client.mr.Addr() + r.mine(i), Length: uint32(size), LKey: client.mr.LKey()}}
	case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwp:
		wr.RemoteAddr = server.mr.Addr() + r.counter
		wr.CompareAdd, wr.Swap = uint64(i), uint64(i+1) // compare-and-swap i -> i+1
		if r.o.op == verbs.OpAtomicFetchAdd {
			wr.CompareAdd = 1
		}
		wr.SGL = []verbs.SGE{{Addr: client.mr.Addr() + r.mine(i), Length: 8, LKey: client.mr.LKey()}}
	default:
		r.want[i] = r.pattern(i)
		copy(client.mr.Bytes()[r.slot(i):r.slot(i)+size], r.want[i])
		wr.SGL = []verbs.SGE{{Addr: client.mr.Addr() + r.slot(i), Length: uint32(size), LKey: client.mr.LKey()}}
	}
	if r.o.recv {
		if err := server.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i),
			SGL: []verbs.SGE{{Addr: server.mr.Addr() + r.slot(i), Length: uint32(size), LKey: server.mr.LKey()}}}}); err != nil {
			return err
		}
	}
	r.posted++
	return client.qp.PostSend([]verbs.SendWR{wr})
}

// clientDone checks the client's completions, in order, and the data
// they stand for.
func (r *opRun) clientDone(wcs []verbs.WC) error {
	size := uint64(r.size)
	for _, wc := range wcs {
		i := r.doneC
		if wc.Status != verbs.Success || wc.ID != uint64(i) {
			return fmt.Errorf("completion %d: %v", i, &wc)
		}
		switch r.o.op {
		case verbs.OpRead:
			if !bytes.Equal(r.client.mr.Bytes()[r.mine(i):r.mine(i)+size], r.want[i]) {
				return fmt.Errorf("READ %d: data differs", i)
			}
			r.checked += int64(size)
		case verbs.OpWrite:
			cli.SyncMR(r.server.mr)
			if !bytes.Equal(r.server.mr.Bytes()[r.slot(i):r.slot(i)+size], r.want[i]) {
				return fmt.Errorf("WRITE %d: data differs at the server", i)
			}
			r.checked += int64(size)
		case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwp:
			if got := binary.NativeEndian.Uint64(r.client.mr.Bytes()[r.mine(i):]); got != uint64(i) {
				return fmt.Errorf("%v %d returned %d, want %d", r.o.op, i, got, i)
			}
			r.checked += 8
		}
		if !r.o.recv {
			delete(r.want, i)
		}
		r.doneC++
	}
	return nil
}

// serverDone checks the server's receive completions, in order, and the
// data they stand for.
func (r *opRun) serverDone(wcs []verbs.WC) error {
	size := uint64(r.size)
	for _, wc := range wcs {
		i := r.doneS
		wantOp := verbs.WCRecv
		if r.o.op == verbs.OpWriteImm {
			wantOp = verbs.WCRecvRDMAWithIm
		}
		if wc.Status != verbs.Success || wc.ID != uint64(i) || wc.Opcode != wantOp || wc.ByteLen != uint32(size) {
			return fmt.Errorf("server completion %d: %v", i, &wc)
		}
		if r.o.op != verbs.OpSend && (wc.Flags&verbs.WithImm == 0 || wc.Imm != uint32(i)) {
			return fmt.Errorf("server completion %d: immediate %v", i, &wc)
		}
		cli.SyncMR(r.server.mr)
		if !bytes.Equal(r.server.mr.Bytes()[r.slot(i):r.slot(i)+size], r.want[i]) {
			return fmt.Errorf("%v %d: data differs at the server", r.o.op, i)
		}
		r.checked += int64(size)
		delete(r.want, i)
		r.doneS++
	}
	return nil
}
