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

// TestTimerFollowsProgress: an ACK that moves the requester on restarts
// the retransmission timeout from that ACK, though the timer is not set
// again (armTimer moves only the deadline): the timer, due at the old
// deadline, sends nothing and waits for the rest, and the packets still
// unacknowledged go again one whole timeout after the ACK, not before.
func TestTimerFollowsProgress(t *testing.T) {
	a := newAdversary(t, advOpts{mtu: bth.MTU1024})
	timeout := bth.ACKTimeout(14)
	start := a.clk.Now()
	a.post(a.write(1, 0, 1024), a.write(2, 1024, 1024))
	if got := a.sent(); len(got) != 2 {
		t.Fatalf("sent %v, want the two WRITEs", got)
	}
	a.clk.Advance(timeout / 2)
	a.inject(a.ackAt(0, bth.ACKSyndrome(bth.NoCredits))) // the first WRITE
	if got := a.polled(); len(got) != 1 {
		t.Fatalf("completions %v, want the first WRITE's", got)
	}
	a.fire() // the timer as first set
	if now := a.clk.Now(); now.Sub(start) != timeout {
		t.Fatalf("the timer fired %v after the post, want %v", now.Sub(start), timeout)
	}
	if got := a.sent(); len(got) != 0 {
		t.Fatalf("sent %v half a timeout after the ACK, want nothing", got)
	}
	a.fire() // a timeout after the ACK
	if now := a.clk.Now(); now.Sub(start) != timeout/2+timeout {
		t.Fatalf("the retransmission came %v after the post, want %v", now.Sub(start), timeout/2+timeout)
	}
	if got := a.sent(); len(got) != 1 || got[0] != "RDMA_WRITE_ONLY @1 1024B" {
		t.Fatalf("sent %v, want the second WRITE again", got)
	}
	// Everything acknowledged: the timer still due fires and sends nothing.
	a.inject(a.ackAt(1, bth.ACKSyndrome(bth.NoCredits)))
	a.fire()
	if got := a.sent(); len(got) != 0 {
		t.Fatalf("sent %v with nothing outstanding", got)
	}
	if _, ok := a.clk.Next(); ok {
		t.Fatal("a timer is still due with nothing outstanding")
	}
}
