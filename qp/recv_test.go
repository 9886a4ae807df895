package qp

import (
	"bytes"
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// TestReceiveTakesTransportParse checks that the receive path takes a
// packet's headers from the parse its transport made to check it
// (transport.Packet.Parsed) rather than parsing Data again, and parses
// Data itself only when the transport left Parsed nil. The Data handed
// over does not parse, so only the transport's parse can make it the
// WRITE it is handled as.
func TestReceiveTakesTransportParse(t *testing.T) {
	a := newAdversary(t, advOpts{})
	w := a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
	var parsed bth.Packet
	if err := parsed.Parse(w.bytes()); err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{0xFF}, 32) // opcode 0xFF: undefined
	a.link.h([]transport.Packet{{Data: garbage, Src: advPeer, Dst: advLocal, Parsed: &parsed}})
	if got := a.mr.Bytes()[:8]; !bytes.Equal(got, w.payload) {
		t.Errorf("memory %x after the WRITE the transport parsed, want %x", got, w.payload)
	}
	if got, want := a.sent(), []string{"ACKNOWLEDGE @0"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
	if s := a.dev.Stats(); s.DropMalformed != 0 || s.RcvdPkts != 1 {
		t.Errorf("%d malformed, %d received: the engine parsed Data again", s.DropMalformed, s.RcvdPkts)
	}
	a.link.h([]transport.Packet{{Data: garbage, Src: advPeer, Dst: advLocal}})
	if s := a.dev.Stats(); s.DropMalformed != 1 || s.RcvdPkts != 1 {
		t.Errorf("without Parsed: %d malformed, %d received; want the engine's own parse to drop it", s.DropMalformed, s.RcvdPkts)
	}
}
