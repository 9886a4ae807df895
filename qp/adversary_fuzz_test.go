package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// fuzzOps are the opcodes FuzzAdversary's peer sends: every RC opcode,
// requests and responses alike, and one of another transport.
var fuzzOps = []bth.Opcode{
	bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendLastImm, bth.RCSendOnly, bth.RCSendOnlyImm,
	bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteLastImm, bth.RCWriteOnly, bth.RCWriteOnlyImm,
	bth.RCReadRequest, bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast,
	bth.RCReadResponseOnly, bth.RCAcknowledge, bth.RCAtomicAcknowledge, bth.RCCompareSwap, bth.RCFetchAdd,
	bth.RCSendLastInvalidate, bth.RCSendOnlyInvalidate, bth.RCFlush, bth.RCAtomicWrite,
	bth.RCSendOnly.WithTransport(bth.TransportUC), bth.UDSendOnly, bth.UDSendOnlyImm,
}

// fuzzSyndromes are the AETH syndromes of the peer's responses.
var fuzzSyndromes = []bth.Syndrome{
	bth.ACKSyndrome(bth.NoCredits), bth.ACKSyndrome(3), bth.RNRNAKSyndrome(1), bth.NAKSyndrome(bth.NAKPSNSequenceError),
	bth.NAKSyndrome(bth.NAKInvalidRequest), bth.NAKSyndrome(bth.NAKRemoteAccessError),
	bth.NAKSyndrome(bth.NAKRemoteOpError), bth.Syndrome(0xFF),
}

// FuzzAdversary runs goroce's QP against a peer that obeys nothing: RC
// (MTU 256 or 1024, with or without an SRQ), UC or UD, by the script's
// length modulo 5. A script is a run of 8-byte steps:
//
//	b0%8   0-4 a packet of the peer: opcode fuzzOps[b1], PSN int8(b2)
//	           from the peer's next request PSN (a request opcode) or
//	           goroce's first (a response), b3 the AckReq and SE bits, a
//	           target the peer has no right to, the pad, the Q_Key, the
//	           syndrome; b4-b5 the payload length, b6-b7 where its RETH or
//	           atomic points
//	       5-6 a work request of goroce's: WRITE, READ, FETCH_AND_ADD,
//	           SEND, a receive, FLUSH or ATOMIC_WRITE (b1)
//	       7   the clock runs to goroce's next timer
//
// Then the QP is moved to the error state. Whatever came: nothing panics;
// everything goroce sends parses, is of its QP's transport and goes to
// the peer's address and QP; every work request posted completes exactly
// once (an SRQ's receives at most once: they outlive the QP); memory no remote
// right covers (the receive buffer past the receives posted, the local
// buffer past what goroce's own requests name) is not touched.
func FuzzAdversary(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 10, 0, 1, 0, 8, 0, 0})                            // a WRITE ONLY, in order
	f.Add([]byte{0, 10, 0, 5, 0, 8, 0, 0})                            // the same with a wrong key
	f.Add([]byte{0, 6, 0, 0, 1, 0, 0, 0, 0, 7, 1, 1, 1, 0, 0, 0})     // WRITE FIRST, then a MIDDLE
	f.Add([]byte{0, 12, 0, 1, 0, 0, 0, 64, 0, 12, 0, 1, 0, 0, 0, 64}) // a READ, then its duplicate
	f.Add([]byte{0, 20, 0, 1, 0, 0, 0, 8})                            // FETCH_AND_ADD
	f.Add([]byte{0, 4, 0, 3, 0, 16, 0, 0, 0, 4, 0, 3, 0, 16, 0, 0})   // two SENDs into the receives
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 4, 17, 0, 0, 0, 0, 0, 0})    // goroce's WRITE, then the peer's ACK
	f.Add([]byte{5, 1, 0, 0, 0, 0, 0, 0, 4, 16, 0, 0, 0, 32, 0, 0})   // goroce's READ, and a response
	f.Add([]byte{5, 2, 0, 0, 0, 0, 0, 0, 4, 18, 0, 0, 0, 0, 0, 0})    // goroce's atomic, an atomic ACK
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 4, 17, 0, 0x60, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0})  // retries
	f.Add([]byte{0, 24, 0, 1, 0, 8, 0, 2, 0, 24, 0, 1, 0, 8, 0, 2})                        // ATOMIC_WRITE, then its duplicate
	f.Add([]byte{0, 23, 0, 1, 0, 0, 0, 17, 0, 23, 0, 1, 0, 0, 0, 17})                      // a global FLUSH, then its duplicate
	f.Add([]byte{0, 23, 0, 5, 0, 0, 0, 18})                                                // a persistent FLUSH where no right is
	f.Add([]byte{5, 5, 0, 0, 0, 0, 0, 0, 4, 16, 0, 0, 0, 0, 0, 0})                         // goroce's FLUSH, an empty response
	f.Add([]byte{5, 6, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 4, 17, 0, 0, 0, 0, 0, 0}) // goroce's ATOMIC_WRITE, a retry, an ACK
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 8*48 {
			script = script[:8*48]
		}
		o := advOpts{typ: verbs.RC, recvs: 2, cqe: 512, access: verbs.LocalWrite | verbs.RemoteAccess | verbs.FlushGlobal,
			mrFlush: true}
		switch len(script) % 5 {
		case 1:
			o.srq = true
		case 2:
			o.mtu = bth.MTU1024
		case 3:
			o.typ = verbs.UC
		case 4:
			o.typ = verbs.UD
		}
		a := newAdversary(t, o)
		rbufOrig, lbufOrig := bytes.Clone(a.rbuf.Bytes()), bytes.Clone(a.lbuf.Bytes())
		// The receives newAdversary posts; an SRQ's stay in it when the QP
		// fails, and complete at most once.
		posted := map[uint64]bool{100: !o.srq, 101: !o.srq}
		done := map[uint64]int{}
		nextID, nextRecv := uint64(1000), 2
		for s := script; len(s) >= 8; s = s[8:] {
			switch k := s[0] % 8; {
			case k <= 4:
				a.inject(a.fuzzPacket(s[:8]))
			case k <= 6:
				id := nextID
				nextID++
				if a.fuzzPost(s[1], id, &nextRecv) {
					posted[id] = true
				}
			default:
				if next, ok := a.clk.Next(); ok {
					a.clk.AdvanceTo(next)
				}
			}
			a.fuzzPoll(done)
			a.fuzzSent(o.typ)
		}
		if err := a.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
			t.Fatalf("Modify to ERR: %v", err)
		}
		a.fuzzPoll(done)
		a.fuzzSent(o.typ)
		for id, n := range done {
			if _, ok := posted[id]; !ok {
				t.Errorf("a completion for work request %d, never posted", id)
			} else if n != 1 {
				t.Errorf("work request %d completed %d times", id, n)
			}
		}
		for id, must := range posted {
			if must && done[id] == 0 {
				t.Errorf("work request %d never completed", id)
			}
		}
		if !bytes.Equal(a.rbuf.Bytes()[8192:], rbufOrig[8192:]) {
			t.Error("the receive buffer changed past the receives posted")
		}
		if !bytes.Equal(a.lbuf.Bytes()[4096:], lbufOrig[4096:]) {
			t.Error("the local buffer changed past what goroce's requests name")
		}
	})
}

// fuzzPacket builds the peer's packet a FuzzAdversary step names.
func (a *adversary) fuzzPacket(s []byte) *wire {
	op := fuzzOps[int(s[1])%len(fuzzOps)]
	n := int(binary.BigEndian.Uint16(s[4:])) % 600
	var w *wire
	if isResponse([]byte{byte(op)}) {
		w = a.resp(op, int(int8(s[2])), n).withSyn(fuzzSyndromes[s[3]>>5])
	} else {
		w = a.req(op, int(int8(s[2])), n)
	}
	w.f.AckReq, w.f.SE = s[3]&1 != 0, s[3]&2 != 0
	if s[3]&8 != 0 {
		w.pad = int(s[3]>>3) % 4
	}
	key, va := a.mr.RKey(), a.mr.Addr()+uint64(s[6])*64
	if s[3]&4 != 0 {
		// The part of the receive buffer no receive names: the peer has
		// no right to it, with its key or any other.
		key, va = a.rbuf.RKey()+uint32(s[6]&1), a.rbuf.Addr()+8192+uint64(s[6])*16
	}
	w.rethOf(va, key, uint32(s[7])*4)
	w.fethOf(verbs.FlushLevel(s[7]>>2&3), verbs.PlacementType(s[7]&3))
	w.atomicOf(va&^7+uint64(s[7]&7), key, 1, 0)
	w.ieth = key
	if s[3]&16 != 0 {
		w.qkey = advQKey // a UD QP's: the others get none
	}
	return w
}

// fuzzPost posts one of goroce's work requests, with ID id, and reports
// whether it was taken.
func (a *adversary) fuzzPost(kind byte, id uint64, nextRecv *int) bool {
	var wr verbs.SendWR
	switch kind % 7 {
	case 0:
		wr = a.write(id, 0, 64)
	case 1:
		wr = a.read(id, 0, 300)
	case 2:
		wr = a.fetchAdd(id, 512)
	case 3:
		wr = a.write(id, 1024, 100)
		wr.Opcode = verbs.OpSend
	case 5:
		wr = a.flushWR(id, 64, verbs.FlushRange, verbs.PlaceGlobal)
	case 6:
		wr = a.atomicWriteWR(id, uint64(id))
	default:
		// More receives into the first 8 KiB of the receive buffer,
		// where newAdversary's two are.
		off := (*nextRecv % 2) * 4096
		*nextRecv++
		return a.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{sge(a.rbuf, off, 4096)}}}) == nil
	}
	return a.qp.PostSend([]verbs.SendWR{wr}) == nil
}

// fuzzPoll counts the completions waiting by work request ID.
func (a *adversary) fuzzPoll(done map[uint64]int) {
	wcs := make([]verbs.WC, 64)
	for n := a.cq.Poll(wcs); n > 0; n = a.cq.Poll(wcs) {
		for _, wc := range wcs[:n] {
			done[wc.ID]++
		}
	}
}

// fuzzSent checks what goroce sent since the last call: whole packets of
// the QP's transport (typ), to the peer's address and QP.
func (a *adversary) fuzzSent(typ verbs.QPType) {
	a.t.Helper()
	for _, s := range a.link.take() {
		var p bth.Packet
		if err := p.Parse(s.Data); err != nil {
			a.t.Fatalf("goroce sent a packet that does not parse: %v: % x", err, s.Data)
		}
		if p.Info.Transport != transportOf(typ) || p.BTH.DestQP() != advPeerQPN || s.Dst != advPeer {
			a.t.Fatalf("goroce sent %v to QP %#x at %v, not its peer's QP %#x at %v", p.BTH.Opcode(), p.BTH.DestQP(), s.Dst, advPeerQPN, advPeer)
		}
	}
}
