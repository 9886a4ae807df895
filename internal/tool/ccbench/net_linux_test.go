//go:build linux

package ccbench

import (
	"math"
	"testing"
)

// TestMarkLimit checks the marking rule's packet rate and burst: packets
// of the marked stack's size at the fraction of the link's rate, and a
// burst of markBurst bytes of them, at least one.
func TestMarkLimit(t *testing.T) {
	for _, st := range []stack{goroceCC, goroceOff, {name: "tcp-cubic"}} {
		for _, v6 := range []bool{false, true} {
			frame := frameSize(st, v6)
			pps, burst := markLimit(0.95e9, frame)
			if got := float64(pps*frame) * 8; math.Abs(got-0.95e9) > float64(frame)*8 {
				t.Errorf("%s v6=%v: %d packets/s of %d bytes is %.0f bit/s, want 0.95e9 within a packet", st.name, v6, pps, frame, got)
			}
			if burst != markBurst/frame {
				t.Errorf("%s v6=%v: burst %d packets, want %d", st.name, v6, burst, markBurst/frame)
			}
		}
	}
	// A WRITE's middle packet at MTU 1024 is 1068 bytes of IPv4 (20 + 8
	// UDP + 12 BTH + 1024 + 4 ICRC), as tcpdump shows them, and 14 of
	// Ethernet.
	if f := frameSize(goroceCC, false); f != 1082 {
		t.Errorf("goroce's frame %d bytes, want 1082", f)
	}
	if _, burst := markLimit(1e9, 1<<20); burst != 1 {
		t.Errorf("burst %d for packets larger than markBurst, want 1", burst)
	}
}
