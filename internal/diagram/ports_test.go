package diagram

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
)

// portFrame returns a raw IPv4 frame of a RoCE SEND to UDP port dport,
// its ICRC right unless bad, parsed.
func portFrame(t *testing.T, dport uint16, bad bool) *bth.Frame {
	t.Helper()
	ff := bth.FrameFields{Flow: bth.Flow{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 49152, DstPort: dport, DF: true}}
	hl := ff.HeaderLen()
	b := make([]byte, hl+bth.BTHLen+8+bth.ICRCLen)
	var p bth.Packet
	p.Build(b[hl:], &bth.BTHFields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: 17}, 8)
	if err := ff.Flow.Seal(b[hl:]); err != nil {
		t.Fatal(err)
	}
	if bad {
		b[len(b)-1] ^= 1
	}
	if _, err := bth.EncodeFrame(b, &ff); err != nil {
		t.Fatal(err)
	}
	var fr bth.Frame
	if err := bth.ParseFrame(&fr, b, bth.LinkIP); err != nil {
		t.Fatal(err)
	}
	return &fr
}

// TestPorts: 4791 and the ports given are RoCE's; another port becomes
// RoCE's with its first datagram whose ICRC verifies, and takes bad ones
// from then on; the hint names the port of datagrams left out before.
func TestPorts(t *testing.T) {
	p := NewPorts(6000)
	for _, c := range []struct {
		port uint16
		bad  bool
		want bool
	}{
		{bth.UDPPort, true, true}, {6000, true, true},
		{5000, true, false}, {5000, false, true}, {5000, true, true},
		{53, true, false},
	} {
		if got := p.Take(portFrame(t, c.port, c.bad)); got != c.want {
			t.Errorf("port %d, bad ICRC %v: taken %v, want %v", c.port, c.bad, got, c.want)
		}
	}
	if l := p.Learned(); len(l) != 1 || l[0] != 5000 {
		t.Errorf("learned %v, want [5000]", l)
	}
	if h := p.Hint(); !strings.Contains(h, "2 UDP packets not on port 4791") || !strings.Contains(h, "try --roce-port 5000") {
		t.Errorf("hint %q", h)
	}
	none := NewPorts()
	none.Take(portFrame(t, 53, true))
	if h := none.Hint(); !strings.Contains(h, "(1 to port 53)") || !strings.Contains(h, "try --roce-port 53") {
		t.Errorf("hint with no RoCE %q", h)
	}
	var nilPorts *Ports
	if !nilPorts.Take(portFrame(t, bth.UDPPort, false)) || nilPorts.Take(portFrame(t, 5000, false)) || nilPorts.Take(nil) ||
		nilPorts.Hint() != "" || nilPorts.Learned() != nil {
		t.Error("a nil *Ports takes only port 4791")
	}
	nilPorts.TakeRoCE()
}
