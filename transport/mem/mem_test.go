package mem

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
)

var (
	addrA   = netip.MustParseAddr("198.18.0.1")
	addrB   = netip.MustParseAddr("198.18.0.2")
	nowhere = netip.MustParseAddr("198.18.0.99")
)

// noticeLog collects an endpoint's unreachable notices.
type noticeLog struct {
	mu  sync.Mutex
	got []transport.Unreachable
}

func (l *noticeLog) add(u transport.Unreachable) {
	l.mu.Lock()
	l.got = append(l.got, u)
	l.mu.Unlock()
}

func (l *noticeLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// TestUnreachable checks that a packet to an address without an endpoint
// comes back to its sender's watchers as a notice, after the latency, and
// that a packet to an endpoint does not.
func TestUnreachable(t *testing.T) {
	n := NewNetwork(nil)
	a, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Endpoint(addrB)
	if err != nil {
		t.Fatal(err)
	}
	var got []transport.Packet
	a.Start(func([]transport.Packet) {})
	b.Start(func(p []transport.Packet) { got = append(got, p...) })
	pkt := transporttest.BuildPacket(rand.New(rand.NewPCG(1, 2)), bth.RCSendOnly, 16, 5)
	send := func(dst netip.Addr) {
		t.Helper()
		if err := a.Send([]transport.Packet{{Data: append([]byte(nil), pkt...), Src: addrA, Dst: dst}}); err != nil {
			t.Fatal(err)
		}
	}
	// Nobody watches: the packet is only counted.
	send(nowhere)
	var log noticeLog
	stop := a.NotifyUnreachable(log.add)
	send(nowhere)
	send(addrB)
	start := n.Clock().Now()
	if err := n.Run(func() bool { return log.len() == 1 && len(got) == 1 }, time.Second); err != nil {
		t.Fatalf("run: %v (%d notices, %d packets)", err, log.len(), len(got))
	}
	if took := n.Clock().Now().Sub(start); took != time.Microsecond {
		t.Errorf("notice after %v, want the latency (1µs)", took)
	}
	u := log.got[0]
	if u.Dst != nowhere || !errors.Is(u.Err, ErrNoEndpoint) || len(u.Packet) != len(pkt) ||
		!bytes.Equal(u.Packet[:bth.BTHLen], pkt[:bth.BTHLen]) {
		t.Errorf("notice %+v", u)
	}
	if s := n.Stats(); s.Unroutable != 2 || s.Delivered != 1 {
		t.Errorf("stats %+v: want 2 unroutable, 1 delivered", s)
	}
	stop()
	send(nowhere)
	if err := n.Run(func() bool { return false }, time.Second); !errors.Is(err, ErrIdle) {
		t.Fatal(err)
	}
	if log.len() != 1 {
		t.Errorf("%d notices after stop", log.len())
	}
}

// TestUnreachableLive is TestUnreachable's first notice in live mode.
func TestUnreachableLive(t *testing.T) {
	n := NewNetwork(&Config{Live: true})
	defer n.Close()
	a, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan transport.Unreachable, 1)
	defer a.NotifyUnreachable(func(u transport.Unreachable) { ch <- u })()
	pkt := transporttest.BuildPacket(rand.New(rand.NewPCG(1, 2)), bth.RCSendOnly, 16, 5)
	if err := a.Send([]transport.Packet{{Data: pkt, Src: addrA, Dst: nowhere}}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-ch:
		if u.Dst != nowhere {
			t.Errorf("notice for %v", u.Dst)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notice")
	}
}

// TestDeliverParsed checks that each packet delivered carries the parse
// the endpoint checked it with (transport.Packet.Parsed), its own, in
// batches where malformed packets were dropped between good ones.
func TestDeliverParsed(t *testing.T) {
	n := NewNetwork(&Config{BatchSize: 4})
	a, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Endpoint(addrB)
	if err != nil {
		t.Fatal(err)
	}
	var psns, want []bth.PSN
	if err := a.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(func(p []transport.Packet) {
		for i := range p {
			if err := transporttest.CheckParsed(&p[i]); err != nil {
				t.Errorf("packet %d of a batch of %d: %v", i, len(p), err)
				continue
			}
			psns = append(psns, p[i].Parsed.BTH.PSN())
		}
	}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var pkts []transport.Packet
	for i := range 11 {
		var data []byte
		switch i % 4 {
		case 1:
			data = transporttest.BuildPacket(rng, bth.RCSendOnly, 16, bth.PSN(i))
			data[0] = 0x1F // an undefined opcode, sealed all the same: malformed
		case 3:
			data = make([]byte, bth.BTHLen) // no room for an ICRC: malformed
		default:
			op, size := []bth.Opcode{bth.RCWriteOnly, bth.RCAcknowledge, bth.RCSendOnly}[i%3], i
			if op == bth.RCAcknowledge {
				size = 0
			}
			data = transporttest.BuildPacket(rng, op, size, bth.PSN(i))
			want = append(want, bth.PSN(i))
		}
		pkts = append(pkts, transport.Packet{Data: data, Src: addrA, Dst: addrB})
	}
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	if err := n.Run(func() bool { return len(psns) >= len(want) }, time.Second); err != nil {
		t.Fatalf("run: %v (%d of %d delivered)", err, len(psns), len(want))
	}
	if !slices.Equal(psns, want) {
		t.Errorf("parsed PSNs %v, want %v", psns, want)
	}
	if s := b.Stats(); s.RxMalformed != 5 || s.RxPackets != uint64(len(want)) {
		t.Errorf("stats %+v: want %d packets, 5 malformed", s, len(want))
	}
}
