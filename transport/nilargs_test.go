package transport

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/pcapfile"
)

// nopLink is a Transport that drops what it is sent.
type nopLink struct{ sent int }

func (l *nopLink) Start(Handler) error   { return nil }
func (l *nopLink) Send(p []Packet) error { l.sent += len(p); return nil }
func (l *nopLink) LocalAddr() netip.Addr { return netip.MustParseAddr("198.18.0.1") }
func (l *nopLink) BatchSize() int        { return 1 }
func (l *nopLink) MaxPacket() int        { return 4096 }
func (l *nopLink) Stats() Stats          { return Stats{} }
func (l *nopLink) Close() error          { return nil }

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics, and each error names what is
// missing and wraps ErrNil.
func TestNilArgs(t *testing.T) {
	noLink := NewFaulty(nil, Faults{Drop: 1}, 1)
	noSniff := Sniff(nil, nil)
	apitest.Run(t, ".", apitest.Table{
		"VerifyFlushRXE": func(t *testing.T) {
			want(t, VerifyFlushRXE(nil, nil), false)
			want(t, VerifyFlushRXE(make([]byte, 36), func([]byte) bool { return true }), false) // opcode 0: not a FLUSH
		},
		"Faults.Any": func(t *testing.T) {
			if (*Faults)(nil).Any() || (&Faults{Delay: -1}).Any() {
				t.Error("nil or negative faults inject something")
			}
		},
		"NewMulti": func(t *testing.T) {
			_, err := NewMulti()
			apitest.Err(t, err, ErrNil, "at least one transport")
			_, err = NewMulti(&nopLink{}, nil)
			apitest.Err(t, err, ErrNil, "transport 1")
		},
		"Multi.Start":        func(t *testing.T) { apitest.Err(t, (*Multi)(nil).Start(nil), ErrNil, "NewMulti") },
		"Multi.Send":         func(t *testing.T) { apitest.Err(t, (*Multi)(nil).Send(nil), ErrNil, "NewMulti") },
		"Multi.Close":        func(t *testing.T) { apitest.Err(t, (*Multi)(nil).Close(), ErrNil, "NewMulti") },
		"Multi.LocalAddr":    func(t *testing.T) { want(t, (*Multi)(nil).LocalAddr(), netip.Addr{}) },
		"Multi.LocalAddrs":   func(t *testing.T) { want(t, len((*Multi)(nil).LocalAddrs()), 0) },
		"Multi.BatchSize":    func(t *testing.T) { want(t, (*Multi)(nil).BatchSize(), 0) },
		"Multi.MaxPacket":    func(t *testing.T) { want(t, (*Multi)(nil).MaxPacket(), 0) },
		"Multi.SendsPayload": func(t *testing.T) { want(t, (*Multi)(nil).SendsPayload(), false) },
		"Multi.Stats":        func(t *testing.T) { want(t, (*Multi)(nil).Stats(), Stats{}) },
		"Multi.JoinGroup": func(t *testing.T) {
			apitest.Err(t, (*Multi)(nil).JoinGroup(netip.Addr{}), ErrNil, "NewMulti")
			m, _ := NewMulti(&nopLink{})
			apitest.Err(t, m.JoinGroup(netip.MustParseAddr("ff15::1")), nil, "no local address", "ff15::1")
			apitest.Err(t, m.JoinGroup(netip.MustParseAddr("239.255.0.1")), ErrNoMulticast, "*transport.nopLink")
		},
		"Multi.LeaveGroup": func(t *testing.T) {
			apitest.Err(t, (*Multi)(nil).LeaveGroup(netip.Addr{}), ErrNil, "NewMulti")
			m, _ := NewMulti(&nopLink{})
			apitest.Err(t, m.LeaveGroup(netip.Addr{}), nil, "no local address")
		},
		"JoinGroup": func(t *testing.T) {
			apitest.Err(t, JoinGroup(nil, netip.Addr{}), ErrNoMulticast, "udp, afpacket or mem")
			apitest.Err(t, JoinGroup(&nopLink{}, netip.Addr{}), errors.ErrUnsupported)
		},
		"LeaveGroup": func(t *testing.T) {
			apitest.Err(t, LeaveGroup(nil, netip.Addr{}), ErrNoMulticast, "udp, afpacket or mem")
		},
		"CheckGroup": func(t *testing.T) {
			a4, a6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("2001:db8::1")
			apitest.Err(t, CheckGroup(netip.Addr{}, a4), nil, "not a multicast address")
			apitest.Err(t, CheckGroup(a4, a4), nil, "not a multicast address", "224.0.0.0/4")
			apitest.Err(t, CheckGroup(netip.MustParseAddr("ff15::1"), a4), nil, "IP version")
			apitest.Err(t, CheckGroup(netip.MustParseAddr("239.255.0.1"), a6), nil, "IP version")
			if err := CheckGroup(netip.MustParseAddr("::ffff:239.255.0.1"), a4); err != nil {
				t.Error(err)
			}
		},
		"Faulty.JoinGroup":  func(t *testing.T) { apitest.Err(t, noLink.JoinGroup(netip.Addr{}), ErrNil, "*Faulty") },
		"Faulty.LeaveGroup": func(t *testing.T) { apitest.Err(t, noLink.LeaveGroup(netip.Addr{}), ErrNil, "*Faulty") },
		"Sniffer.JoinGroup": func(t *testing.T) {
			apitest.Err(t, noSniff.JoinGroup(netip.Addr{}), ErrNil, "*Sniffer")
			apitest.Err(t, Sniff(&nopLink{}, nil).JoinGroup(netip.Addr{}), ErrNoMulticast)
		},
		"Sniffer.LeaveGroup": func(t *testing.T) { apitest.Err(t, noSniff.LeaveGroup(netip.Addr{}), ErrNil, "*Sniffer") },
		"Multi.NotifyUnreachable": func(t *testing.T) {
			(*Multi)(nil).NotifyUnreachable(func(Unreachable) {})()
			m, _ := NewMulti(&nopLink{})
			m.NotifyUnreachable(nil)()
		},
		"NewFaulty":           func(t *testing.T) { apitest.Err(t, noLink.Start(func([]Packet) {}), ErrNil, "NewFaulty with one") },
		"Faulty.SendsPayload": func(t *testing.T) { want(t, noLink.SendsPayload(), false) },
		"Faulty.FaultStats":   func(t *testing.T) { want(t, noLink.FaultStats(), FaultStats{}) },
		"Faulty.Send": func(t *testing.T) {
			apitest.Err(t, noLink.Send(nil), ErrNil, "*Faulty")
			// Empty packets, corrupted and truncated: nothing to flip or cut.
			l := &nopLink{}
			f := NewFaulty(l, Faults{Corrupt: 1, Truncate: 1}, 1)
			if err := f.Send(make([]Packet, 4)); err != nil || l.sent != 4 {
				t.Errorf("sent %d of 4 empty packets: %v", l.sent, err)
			}
		},
		"Faulty.Close":     func(t *testing.T) { apitest.Err(t, (*Faulty)(nil).Close(), ErrNil, "*Faulty") },
		"Faulty.Start":     func(t *testing.T) { apitest.Err(t, (&Faulty{}).Start(nil), ErrNil) },
		"Faulty.LocalAddr": func(t *testing.T) { want(t, noLink.LocalAddr(), netip.Addr{}) },
		"Faulty.BatchSize": func(t *testing.T) { want(t, noLink.BatchSize(), 0) },
		"Faulty.MaxPacket": func(t *testing.T) { want(t, noLink.MaxPacket(), 0) },
		"Faulty.Stats":     func(t *testing.T) { want(t, noLink.Stats(), Stats{}) },
		"Sniff": func(t *testing.T) {
			s := Sniff(&nopLink{}, nil)
			if err := s.Send([]Packet{{Data: make([]byte, 16), Src: netip.MustParseAddr("198.18.0.1"),
				Dst: netip.MustParseAddr("198.18.0.2")}}); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, s.Err(), pcapfile.ErrNil, "nil *Writer")
			apitest.Err(t, s.Close(), pcapfile.ErrNil)
		},
		"Sniffer.Err":          func(t *testing.T) { apitest.Err(t, noSniff.Err(), ErrNil, "use Sniff with one") },
		"Sniffer.Start":        func(t *testing.T) { apitest.Err(t, Sniff(&nopLink{}, nil).Start(nil), ErrNil, "Handler") },
		"Sniffer.Send":         func(t *testing.T) { apitest.Err(t, noSniff.Send(nil), ErrNil, "*Sniffer") },
		"Sniffer.LocalAddr":    func(t *testing.T) { want(t, noSniff.LocalAddr(), netip.Addr{}) },
		"Sniffer.SendsPayload": func(t *testing.T) { want(t, noSniff.SendsPayload(), false) },
		"Sniffer.BatchSize":    func(t *testing.T) { want(t, noSniff.BatchSize(), 0) },
		"Sniffer.MaxPacket":    func(t *testing.T) { want(t, noSniff.MaxPacket(), 0) },
		"Sniffer.Stats":        func(t *testing.T) { want(t, noSniff.Stats(), Stats{}) },
		"Sniffer.Close":        func(t *testing.T) { apitest.Err(t, noSniff.Close(), ErrNil, "*Sniffer") },
		"Packet.Len":           func(t *testing.T) { want(t, (*Packet)(nil).Len(), 0) },
		"Packet.AppendTo": func(t *testing.T) {
			if b := (*Packet)(nil).AppendTo([]byte{1}); !bytes.Equal(b, []byte{1}) {
				t.Errorf("a nil packet appended % x", b)
			}
			p := &Packet{Data: []byte{1, 2}, Payload: []byte{3}}
			if b := p.AppendTo(nil); !bytes.Equal(b, []byte{3, 1, 2}) {
				t.Errorf("a packet shorter than its ICRC appended as % x", b)
			}
		},
		"Packet.Seal": func(t *testing.T) {
			apitest.Err(t, (*Packet)(nil).Seal(&bth.Flow{}), ErrNil, "*Packet")
			apitest.Err(t, (&Packet{Data: make([]byte, 16)}).Seal(nil), bth.ErrNil, "*Flow")
			apitest.Err(t, (&Packet{Data: make([]byte, 16), Payload: []byte{1}}).Seal(&bth.Flow{}), bth.ErrFlow)
		},
		"SendsPayload": func(t *testing.T) { want(t, SendsPayload(nil), false) },
	})
	apitest.NilReceivers(t, ".", (*Faults)(nil), (*Faulty)(nil), (*Sniffer)(nil), (*Packet)(nil), (*Multi)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
