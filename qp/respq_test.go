package qp

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
)

// TestReadTurns: a responder sends at most respTurn READ responses a
// turn; the rest, and what it owes after them, follow on the next turns
// (the QP's pacing timer), in PSN order: two READs of 64 packets and a
// WRITE asking for an ACK, come in one batch, go as the first READ's
// responses, then the second's and the WRITE's ACK.
func TestReadTurns(t *testing.T) {
	a := newAdversary(t, advOpts{}) // path MTU 256: 16 KiB is 64 packets
	read := func(psn int) *wire { return a.req(bth.RCReadRequest, psn, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 16<<10) }
	write := a.req(bth.RCWriteOnly, 128, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack()
	a.inject(read(0), read(64), write)
	first := a.sent()
	if len(first) != respTurn || first[0] != "RDMA_READ_RESPONSE_FIRST @0 256B" || first[63] != "RDMA_READ_RESPONSE_LAST @63 256B" {
		t.Fatalf("first turn: %d packets, %q ... %q; want the first READ's 64", len(first), first[0], first[len(first)-1])
	}
	a.fire() // the next turn
	rest := a.sent()
	if len(rest) != respTurn+1 {
		t.Fatalf("second turn: %d packets, want the second READ's 64 and the ACK", len(rest))
	}
	for i, s := range rest[:respTurn] {
		if want := "@" + strconv.Itoa(64+i) + " 256B"; s[len(s)-len(want):] != want {
			t.Fatalf("second turn, packet %d: %q, want PSN %d", i, s, 64+i)
		}
	}
	if rest[respTurn] != "ACKNOWLEDGE @128" {
		t.Errorf("after the READs: %q, want the WRITE's ACK", rest[respTurn])
	}
	if n := a.qp.resp.rq.n; n != 0 {
		t.Errorf("%d responses still queued", n)
	}
}

// TestReadTurnsAskedAgain: a READ asked again from a PSN its queued
// responses have not reached yet needs nothing more; asked again from one
// they passed, the responses from there go again, as a new message, and
// what was queued after them goes (the requester went back, and asks for
// it again).
func TestReadTurnsAskedAgain(t *testing.T) {
	a := newAdversary(t, advOpts{})
	read := func(psn, off, n int) *wire {
		return a.req(bth.RCReadRequest, psn, 0).rethOf(a.mr.Addr()+uint64(off), a.mr.RKey(), uint32(n))
	}
	a.inject(read(0, 0, 16<<10), read(64, 0, 16<<10))
	if n := len(a.sent()); n != respTurn {
		t.Fatalf("first turn: %d packets", n)
	}
	a.inject(read(100, 36*256, 28*256)) // PSN 100, in the second READ: not sent yet
	a.inject(read(10, 10*256, 54*256))  // PSN 10, in the first: sent
	got := a.sent()
	if len(got) != 54 || got[0] != "RDMA_READ_RESPONSE_FIRST @10 256B" || got[53] != "RDMA_READ_RESPONSE_LAST @63 256B" {
		t.Fatalf("asked again from 10: %d packets, %q ... %q; want the 54 from 10 on, from a FIRST", len(got), got[0],
			got[len(got)-1])
	}
	a.fire()
	if got := a.sent(); len(got) != 0 {
		t.Errorf("the second READ's responses went after the requester went back past them: %d packets", len(got))
	}
}

// TestReadResponsesPaced: READ responses are paced as requests are: after
// a CNP (a first rate of 8 Mbit/s), a READ's four responses go one at a
// time, on the pacing timer.
func TestReadResponsesPaced(t *testing.T) {
	cc := &congestion.Config{DCQCN: congestion.DCQCNConfig{RateOnFirstCNP: 8e6, MinDecFac: 100}}
	a := newAdversary(t, advOpts{cc: cc})
	a.inject(a.req(bth.CNP, 0, 0))
	a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 1024))
	for i := range 4 {
		if got := a.sent(); len(got) != 1 || got[0][len(got[0])-len("@"+strconv.Itoa(i)+" 256B"):] != "@"+strconv.Itoa(i)+" 256B" {
			t.Fatalf("step %d: sent %q, want response %d alone", i, got, i)
		}
		if i < 3 {
			a.fire()
		}
	}
}
