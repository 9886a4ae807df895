package roce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// pollPair is two RC QPs connected to each other, each with one CQ and a
// registered 64 KiB buffer.
type pollPair struct {
	cq   [2]verbs.CQ
	qp   [2]verbs.QP
	mr   [2]verbs.MR
	devs [2]verbs.Device
}

func newPollPair(t *testing.T, a, b verbs.Device) *pollPair {
	t.Helper()
	p := &pollPair{devs: [2]verbs.Device{a, b}}
	for i, d := range p.devs {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		if p.cq[i], err = d.CreateCQ(256); err != nil {
			t.Fatal(err)
		}
		p.qp[i], err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.cq[i], RecvCQ: p.cq[i],
			Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if p.mr[i], err = pd.RegMR(make([]byte, 64<<10), verbs.LocalWrite|verbs.RemoteAccess); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		gid, _ := p.devs[1-i].GID(0)
		r := &roce.Remote{QPN: p.qp[1-i].QPN(), PSN: 100, GID: gid}
		if err := roce.Connect(p.qp[i], r, &roce.ConnParams{PSN: 100}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// write posts an RDMA WRITE of n bytes from side 0 to side 1, with the
// given rkey (the peer's, or a bad one). It may run on any goroutine.
func (p *pollPair) write(t *testing.T, id uint64, n uint32, rkey uint32) {
	t.Helper()
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: p.mr[0].Addr(), Length: n, LKey: p.mr[0].LKey()}},
		RemoteAddr: p.mr[1].Addr(), RKey: rkey}
	if err := p.qp[0].PostSend([]verbs.SendWR{wr}); err != nil {
		t.Error(err)
	}
}

func TestPollArgs(t *testing.T) {
	ctx := context.Background()
	if _, err := roce.Poll(ctx, nil, make([]verbs.WC, 1)); err == nil {
		t.Error("Poll with a nil CQ: no error")
	}
	a, b := links[0].open(t)
	p := newPollPair(t, a, b)
	if _, err := roce.Poll(ctx, p.cq[0], nil); err == nil {
		t.Error("Poll into an empty slice: no error")
	}
	if _, err := roce.PollOne(ctx, nil); err == nil {
		t.Error("PollOne with a nil CQ: no error")
	}
}

func TestPoll(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			a, b := l.open(t)
			p := newPollPair(t, a, b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			// A completion that comes while Poll sleeps wakes it.
			got := make(chan error, 1)
			go func() {
				wc, err := roce.PollOne(ctx, p.cq[0])
				if err == nil && (wc.ID != 1 || wc.Opcode != verbs.WCWrite) {
					err = errors.New(wc.String())
				}
				got <- err
			}()
			time.Sleep(10 * time.Millisecond)
			p.write(t, 1, 4096, p.mr[1].RKey())
			if err := <-got; err != nil {
				t.Fatalf("PollOne: %v", err)
			}

			// A failed completion is an error matching its status.
			p.write(t, 2, 64, p.mr[1].RKey()^0xFF)
			wc, err := roce.PollOne(ctx, p.cq[0])
			if !errors.Is(err, verbs.RemAccessErr) || wc.ID != 2 {
				t.Fatalf("bad rkey: %v %v", &wc, err)
			}
			var we *verbs.WCError
			if !errors.As(err, &we) || we.Status != verbs.RemAccessErr {
				t.Fatalf("bad rkey: errors.As: %v", err)
			}

			// An empty CQ: Poll returns when ctx ends, not before.
			short, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancel2()
			start := time.Now()
			n, err := roce.Poll(short, p.cq[1], make([]verbs.WC, 4))
			if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("empty CQ: %d %v", n, err)
			}
			if el := time.Since(start); el < 30*time.Millisecond {
				t.Fatalf("empty CQ: returned after %v, before ctx ended", el)
			}
		})
	}
}

func TestPollSpin(t *testing.T) {
	a, b := links[0].open(t)
	p := newPollPair(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 8)
	// Spin that ends before the completion comes: the sleep that follows
	// still gets it.
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.write(t, 5, 100, p.mr[1].RKey())
	}()
	n, err := roce.PollSpin(ctx, p.cq[0], wcs, time.Millisecond)
	if err != nil || n != 1 || wcs[0].ID != 5 || wcs[0].Err() != nil {
		t.Fatalf("PollSpin: %d %v %v", n, err, &wcs[0])
	}
	// A completion within the spin.
	p.write(t, 6, 100, p.mr[1].RKey())
	n, err = roce.PollSpin(ctx, p.cq[0], wcs, 5*time.Second)
	if err != nil || n != 1 || wcs[0].ID != 6 {
		t.Fatalf("PollSpin: %d %v %v", n, err, &wcs[0])
	}
	// ctx ending while spinning.
	short, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if n, err := roce.PollSpin(short, p.cq[1], wcs, time.Hour); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PollSpin on an empty CQ: %d %v", n, err)
	}
}

func TestPollAllocs(t *testing.T) {
	a, b := links[0].open(t)
	p := newPollPair(t, a, b)
	ctx := context.Background()
	const n = 60
	for i := range n {
		p.write(t, uint64(i), 8, p.mr[1].RKey())
	}
	lenCQ, ok := p.cq[0].(interface{ Len() int })
	if !ok {
		t.Skip("the CQ does not say how many completions it holds")
	}
	for deadline := time.Now().Add(10 * time.Second); lenCQ.Len() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions after 10 s", lenCQ.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
	wc := make([]verbs.WC, 1)
	allocs := testing.AllocsPerRun(50, func() {
		if k, err := roce.Poll(ctx, p.cq[0], wc); k != 1 || err != nil {
			t.Fatalf("Poll: %d %v", k, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Poll allocates %v times per call", allocs)
	}
}
