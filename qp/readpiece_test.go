package qp

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// readRequests returns the READ requests the QP sent since the last look:
// each one's PSN (from the first the QP sends) and RETH.
func (a *adversary) readRequests() (psns []int, reths []bth.RETHFields) {
	a.t.Helper()
	for _, s := range a.link.take() {
		var p bth.Packet
		must(a.t, p.Parse(s.Data))
		if p.BTH.Opcode() != bth.RCReadRequest {
			a.t.Fatalf("sent %v, want READ requests only", p.BTH.Opcode())
		}
		psns = append(psns, int(p.BTH.PSN().Diff(advSQPSN)))
		reths = append(reths, p.RETH.Fields())
	}
	return psns, reths
}

// readPieceResponses are the responses of the piece of PSNs [from, to),
// to the last PSN's LAST; skip is left out (lost), -1 for none.
func (a *adversary) readPieceResponses(from, to, skip int) []*wire {
	var ws []*wire
	for i := from; i < to; i++ {
		op := bth.RCReadResponseMiddle
		switch {
		case to-from == 1:
			op = bth.RCReadResponseOnly
		case i == from:
			op = bth.RCReadResponseFirst
		case i == to-1:
			op = bth.RCReadResponseLast
		}
		if i != skip {
			ws = append(ws, a.resp(op, i, a.mtu))
		}
	}
	return ws
}

// pieceRig returns an adversary whose QP takes rdAtomic READs at once,
// with the engine's own window (no congestion control), after posting a
// signaled READ (ID 1) of npsn packets into a buffer of its own, which it
// returns.
func pieceRig(t *testing.T, rdAtomic uint8, npsn int) (*adversary, *mr.MR) {
	t.Helper()
	a := newAdversary(t, advOpts{rdAtomic: rdAtomic, maxUnack: 1024, cc: &congestion.Config{Mode: congestion.Off}})
	n := npsn * a.mtu
	buf, err := a.pd.pd.Register(make([]byte, n), verbs.LocalWrite)
	must(t, err)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.OpRead, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: buf.Addr(), Length: uint32(n), LKey: buf.LKey()}},
		RemoteAddr: advRemoteVA, RKey: advRemoteRKey})
	return a, buf
}

// TestReadInPieces: a READ of more than readPiece responses is asked for
// in pieces of readPiece PSNs, each a READ request of its own for its part
// of the memory, no more at once than max_rd_atomic allows; the next
// piece goes when one is answered, a response lost in a piece asks again
// for the rest of that piece only, and the READ completes once, when its
// last response lands, with every byte in place.
func TestReadInPieces(t *testing.T) {
	const npsn = 2*readPiece + 10
	a, buf := pieceRig(t, 2, npsn)
	piece := uint32(readPiece * a.mtu)
	psns, reths := a.readRequests()
	if len(psns) != 2 || psns[0] != 0 || psns[1] != readPiece ||
		reths[0] != (bth.RETHFields{VA: advRemoteVA, RKey: advRemoteRKey, DMALen: piece}) ||
		reths[1] != (bth.RETHFields{VA: advRemoteVA + uint64(piece), RKey: advRemoteRKey, DMALen: piece}) {
		t.Fatalf("first requests: PSNs %v, RETHs %+v; want the first two pieces (max_rd_atomic 2)", psns, reths)
	}
	// The first piece answered: the third, the READ's last 10 PSNs, goes.
	a.inject(a.readPieceResponses(0, readPiece, -1)...)
	if psns, reths = a.readRequests(); len(psns) != 1 || psns[0] != 2*readPiece ||
		reths[0] != (bth.RETHFields{VA: advRemoteVA + 2*uint64(piece), RKey: advRemoteRKey, DMALen: 10 * uint32(a.mtu)}) {
		t.Fatalf("after the first piece: PSNs %v, RETHs %+v; want the third piece", psns, reths)
	}
	// A response of the second piece lost: the rest of that piece is
	// asked for again, and after it the third piece.
	lost := readPiece + 40
	a.inject(a.readPieceResponses(readPiece, 2*readPiece, lost)...)
	psns, reths = a.readRequests()
	if len(psns) != 2 || psns[0] != lost || psns[1] != 2*readPiece ||
		reths[0] != (bth.RETHFields{VA: advRemoteVA + uint64(lost*a.mtu), RKey: advRemoteRKey,
			DMALen: uint32((2*readPiece - lost) * a.mtu)}) {
		t.Fatalf("after a loss at %d: PSNs %v, RETHs %+v; want the rest of the second piece, then the third", lost, psns, reths)
	}
	if got := a.polled(); len(got) != 0 {
		t.Fatalf("completions before the last response: %v", got)
	}
	a.inject(a.readPieceResponses(lost, 2*readPiece, -1)...)
	a.inject(a.readPieceResponses(2*readPiece, npsn, -1)...)
	if got := a.polled(); len(got) != 1 || got[0] != "1 SUCCESS" {
		t.Fatalf("completions: %v, want the READ's SUCCESS once", got)
	}
	for i := range npsn {
		if want := a.resp(bth.RCReadResponseMiddle, i, a.mtu).payload; !bytes.Equal(buf.Bytes()[i*a.mtu:(i+1)*a.mtu], want) {
			t.Fatalf("response @%d did not land", i)
		}
	}
	if r := a.qp.req.rdOutstanding; r != 0 {
		t.Errorf("%d READ requests outstanding after the READ completed", r)
	}
}

// TestReadWholeWithOneResource: with max_rd_atomic 1 a piece could go
// only once the one before it was answered, so a READ is asked for whole,
// in one request, however long.
func TestReadWholeWithOneResource(t *testing.T) {
	const npsn = 2*readPiece + 10
	a, _ := pieceRig(t, 1, npsn)
	n := npsn * a.mtu
	psns, reths := a.readRequests()
	if len(psns) != 1 || psns[0] != 0 || reths[0].DMALen != uint32(n) {
		t.Fatalf("requests: PSNs %v, RETHs %+v; want one for all %d bytes", psns, reths, n)
	}
	a.inject(a.readPieceResponses(0, npsn, -1)...)
	if got := a.polled(); len(got) != 1 || got[0] != "1 SUCCESS" {
		t.Fatalf("completions: %v, want the READ's SUCCESS", got)
	}
}

// TestReadPieceBounds: a response that ends a piece must be its LAST (or
// ONLY), and a piece starts with a FIRST: a MIDDLE at a piece's last PSN
// fails the READ with LOC_PROT_ERR as any response past its message's end
// does, and a MIDDLE at the next piece's first PSN with BAD_RESP_ERR.
func TestReadPieceBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		bad  func(a *adversary) []*wire
		want string
	}{
		{"MIDDLE at a piece's last PSN", func(a *adversary) []*wire {
			ws := a.readPieceResponses(0, readPiece, -1)
			ws[len(ws)-1] = a.resp(bth.RCReadResponseMiddle, readPiece-1, a.mtu)
			return ws
		}, "1 LOC_PROT_ERR"},
		{"MIDDLE at a piece's first PSN", func(a *adversary) []*wire {
			ws := a.readPieceResponses(0, readPiece, -1)
			return append(ws, a.resp(bth.RCReadResponseMiddle, readPiece, a.mtu))
		}, "1 BAD_RESP_ERR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _ := pieceRig(t, 2, readPiece+8)
			a.link.take()
			a.inject(c.bad(a)...)
			if got := a.polled(); len(got) != 1 || got[0] != c.want {
				t.Fatalf("completions: %v, want %s", got, c.want)
			}
		})
	}
}
