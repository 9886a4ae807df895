package qp

import (
	"testing"

	"github.com/goroce/goroce/bth"
)

// TestRetransmitCopiesPayload: a request's first packets may carry their
// payload from registered memory in place (the link reads it when the
// batch is sent), but packets sent again after a go-back-N must not. The
// ACK of the originals can come in the same receive batch as the NAK that
// makes the requester go back, complete the request and let the program
// reuse the memory before the batch with the resent packets reaches the
// link, which would then read the program's new bytes (a data race the
// stress suite's soak found under the race detector).
func TestRetransmitCopiesPayload(t *testing.T) {
	a := newAdversary(t, advOpts{mtu: bth.MTU1024})
	a.post(a.write(1, 0, 2048)) // two packets of 1,024 bytes, sent in place
	if got := a.sent(); len(got) != 2 || a.link.refd != 2 {
		t.Fatalf("sent %v, %d in place; want the two packets of the WRITE in place", got, a.link.refd)
	}
	a.link.refd = 0
	// The responder says it expects the WRITE's first PSN again, and in
	// the same batch acknowledges it all: the requester goes back, and the
	// ACK then completes the WRITE.
	a.inject(a.ackAt(0, bth.NAKSyndrome(bth.NAKPSNSequenceError)), a.ackAt(1, bth.ACKSyndrome(bth.NoCredits)))
	if got := a.sent(); len(got) == 0 || a.link.refd != 0 {
		t.Fatalf("sent again %v, %d of them from registered memory in place; want copies", got, a.link.refd)
	}
	if got := a.polled(); len(got) != 1 {
		t.Fatalf("completions %v, want the WRITE's", got)
	}
}
