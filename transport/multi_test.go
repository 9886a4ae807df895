package transport

import (
	"net/netip"
	"reflect"
	"testing"
)

// addrLink is a Transport of one address that records what it is sent
// and reports the counters it is given.
type addrLink struct {
	addr  netip.Addr
	sent  []netip.Addr
	stats Stats
	h     Handler
}

func (l *addrLink) Start(h Handler) error { l.h = h; return nil }
func (l *addrLink) Send(p []Packet) error {
	for _, q := range p {
		l.sent = append(l.sent, q.Dst)
	}
	return nil
}
func (l *addrLink) LocalAddr() netip.Addr { return l.addr }
func (l *addrLink) BatchSize() int        { return 8 }
func (l *addrLink) MaxPacket() int        { return 4096 }
func (l *addrLink) Stats() Stats          { return l.stats }
func (l *addrLink) Close() error          { return nil }

// TestMulti checks that a Multi sends each packet through the part of
// its destination's family, in order, starts every part with the one
// handler, and sums every counter of its parts.
func TestMulti(t *testing.T) {
	v4 := &addrLink{addr: netip.MustParseAddr("198.18.0.1")}
	v6 := &addrLink{addr: netip.MustParseAddr("2001:db8::1")}
	m, err := NewMulti(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := m.Start(func(p []Packet) { got += len(p) }); err != nil {
		t.Fatal(err)
	}
	v6.h(make([]Packet, 2))
	v4.h(make([]Packet, 3))
	if got != 5 {
		t.Errorf("the handler got %d packets of the parts' 5", got)
	}
	dsts := []string{"198.18.0.2", "::ffff:198.18.0.3", "2001:db8::2", "2001:db8::3", "198.18.0.4"}
	var pkts []Packet
	for _, d := range dsts {
		pkts = append(pkts, Packet{Dst: netip.MustParseAddr(d)})
	}
	if err := m.Send(pkts); err != nil {
		t.Fatal(err)
	}
	want4 := []netip.Addr{pkts[0].Dst, pkts[1].Dst, pkts[4].Dst}
	want6 := []netip.Addr{pkts[2].Dst, pkts[3].Dst}
	if !reflect.DeepEqual(v4.sent, want4) || !reflect.DeepEqual(v6.sent, want6) {
		t.Errorf("sent %v through the IPv4 part and %v through the IPv6 one; want %v and %v", v4.sent, v6.sent, want4, want6)
	}
	if a := m.LocalAddrs(); len(a) != 2 || a[0] != v4.addr || a[1] != v6.addr || m.LocalAddr() != v4.addr {
		t.Errorf("LocalAddrs %v, LocalAddr %v", a, m.LocalAddr())
	}
	// Every counter is summed: set each field of the parts' Stats to
	// distinct values.
	r4, r6 := reflect.ValueOf(&v4.stats).Elem(), reflect.ValueOf(&v6.stats).Elem()
	for i := range r4.NumField() {
		r4.Field(i).SetUint(uint64(1 + i))
		r6.Field(i).SetUint(uint64(100 * (1 + i)))
	}
	s := reflect.ValueOf(m.Stats())
	for i := range s.NumField() {
		if got, want := s.Field(i).Uint(), uint64(101*(1+i)); got != want {
			t.Errorf("Stats.%s = %d, want %d", s.Type().Field(i).Name, got, want)
		}
	}
	only4, _ := NewMulti(v4)
	if err := only4.Send([]Packet{{Dst: netip.MustParseAddr("2001:db8::9")}, {Dst: netip.MustParseAddr("198.18.0.9")}}); err != nil {
		t.Errorf("one part: %v", err) // a single part takes everything, as the transport itself would
	}
	two4, _ := NewMulti(v4, &addrLink{addr: netip.MustParseAddr("198.18.0.5")})
	if err := two4.Send([]Packet{{Dst: netip.MustParseAddr("2001:db8::9")}}); err == nil {
		t.Error("an IPv6 packet through two IPv4 parts: no error")
	}
}
