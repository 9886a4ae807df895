package unreach

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/transport"
)

func TestList(t *testing.T) {
	var l List
	if l.Watched() {
		t.Fatal("an empty list is watched")
	}
	var a, b []transport.Unreachable
	stopA, first := l.Add(func(u transport.Unreachable) { a = append(a, u) })
	if !first || !l.Watched() {
		t.Fatalf("first add: first %v, watched %v", first, l.Watched())
	}
	stopB, first := l.Add(func(u transport.Unreachable) { b = append(b, u) })
	if first {
		t.Fatal("second add reported first")
	}
	if stop, first := l.Add(nil); first {
		t.Fatal("nil watcher registered")
	} else {
		stop()
	}
	pkt := []byte{1, 2, 3}
	u := transport.Unreachable{Dst: netip.MustParseAddr("198.18.0.9"), Packet: pkt}
	l.Notify(u)
	pkt[0] = 9
	if len(a) != 1 || len(b) != 1 || a[0].Dst != u.Dst || a[0].Packet[0] != 1 || &a[0].Packet[0] == &b[0].Packet[0] {
		t.Fatalf("notices %+v %+v: want one each, with its own copy of the packet", a, b)
	}
	stopA()
	stopA()
	l.Notify(u)
	if len(a) != 1 || len(b) != 2 {
		t.Fatalf("after stop: %d and %d notices", len(a), len(b))
	}
	stopB()
	if l.Watched() {
		t.Fatal("watched after every stop")
	}
}
