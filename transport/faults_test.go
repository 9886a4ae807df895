package transport

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a transport that keeps what it is given.
type recorder struct {
	Transport
	mu  sync.Mutex
	got []Packet
}

func (r *recorder) Send(p []Packet) error {
	r.mu.Lock()
	r.got = append(r.got, p...)
	r.mu.Unlock()
	return nil
}

func (r *recorder) Close() error { return nil }

func TestFaulty(t *testing.T) {
	dst := netip.MustParseAddr("198.18.0.2")
	mk := func(i int) Packet { return Packet{Data: []byte{byte(i), 1, 2, 3}, Dst: dst} }
	r := &recorder{}
	f := NewFaulty(r, Faults{Drop: 0.1, Duplicate: 0.1, Corrupt: 0.05}, 1)
	for i := range 1000 {
		f.Send([]Packet{mk(i)})
	}
	s := f.FaultStats()
	if want := 1000 - int(s.Dropped) + int(s.Duplicated); len(r.got) != want {
		t.Fatalf("%d packets passed, want %d (%+v)", len(r.got), want, s)
	}
	if s.Dropped < 60 || s.Dropped > 140 || s.Duplicated < 50 || s.Corrupted == 0 {
		t.Fatalf("fault counts off: %+v", s)
	}
	// Reordering: a held packet goes after the next one. (It waits an
	// hour here: a loaded machine could take the default 1 ms between two
	// sends, and the held packet would go first.)
	r2 := &recorder{}
	g := NewFaulty(r2, Faults{Reorder: 1}, 2)
	g.holdFor = time.Hour
	g.Send([]Packet{mk(1)})
	g.f.Reorder = 0
	g.Send([]Packet{mk(2)})
	if len(r2.got) != 2 || r2.got[0].Data[0] != 2 || r2.got[1].Data[0] != 1 {
		t.Fatalf("reorder: %v", r2.got)
	}
	g.Close()
}

// TestFaultyConcurrentSends sends from two goroutines at once, as a
// device's receive path and a posting thread do: under the race detector
// a batch buffer shared between them is a reported race, and without it
// packets of one Send could be replaced by the other's.
func TestFaultyConcurrentSends(t *testing.T) {
	rec := &countingLink{}
	f := NewFaulty(rec, Faults{Drop: 0.1, Delay: time.Microsecond}, 1)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				f.Send([]Packet{{Data: []byte{byte(g), byte(i)}}, {Data: []byte{byte(g), byte(i)}}})
			}
		}()
	}
	wg.Wait()
	st := f.FaultStats()
	if got, want := rec.n.Load(), int64(2*500*2)-int64(st.Dropped); got != want {
		t.Fatalf("%d packets reached the link, want %d (%d dropped)", got, want, st.Dropped)
	}
	if bad := rec.mixed.Load(); bad != 0 {
		t.Fatalf("%d batches mixed two senders' packets", bad)
	}
}

// countingLink counts the packets sent through it and the batches whose
// packets came from more than one sender (first byte).
type countingLink struct {
	Transport
	n, mixed atomic.Int64
}

func (c *countingLink) Send(pkts []Packet) error {
	for _, p := range pkts {
		if p.Data[0] != pkts[0].Data[0] {
			c.mixed.Add(1)
			break
		}
	}
	c.n.Add(int64(len(pkts)))
	return nil
}
