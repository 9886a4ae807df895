package qp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// TestOpcodeSizes runs every data operation at the sizes around the path
// MTU, on RC and UC, one SGE and several.
func TestOpcodeSizes(t *testing.T) {
	const mtu = 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 17, 1 << 20}
	type opcase struct {
		op    verbs.WROpcode
		types []verbs.QPType
	}
	ops := []opcase{
		{verbs.OpSend, []verbs.QPType{verbs.RC, verbs.UC}},
		{verbs.OpSendImm, []verbs.QPType{verbs.RC, verbs.UC}},
		{verbs.OpSendInv, []verbs.QPType{verbs.RC}},
		{verbs.OpWrite, []verbs.QPType{verbs.RC, verbs.UC}},
		{verbs.OpWriteImm, []verbs.QPType{verbs.RC, verbs.UC}},
		{verbs.OpRead, []verbs.QPType{verbs.RC}},
	}
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC} {
		p := newPair(t, pairOpts{typ: typ, mtu: bth.MTU1024})
		for _, oc := range ops {
			if !hasType(oc.types, typ) {
				continue
			}
			for _, size := range sizes {
				for _, nsge := range []int{1, 3} {
					name := fmt.Sprintf("%v/%v/%d/sge%d", typ, oc.op, size, nsge)
					t.Run(name, func(t *testing.T) { runOp(t, p, oc.op, size, nsge) })
				}
			}
		}
	}
}

func hasType(ts []verbs.QPType, t verbs.QPType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// runOp performs one operation from A to B and checks data and
// completions on both sides.
func runOp(t *testing.T, p *pair, op verbs.WROpcode, size, nsge int) {
	// The local buffer is split over nsge SGEs in distinct regions.
	var sgl []verbs.SGE
	var locals [][]byte
	for i := range nsge {
		n := size / nsge
		if i == nsge-1 {
			n = size - (nsge-1)*(size/nsge)
		}
		m := p.a.reg(t, n+8)
		fill(m.Bytes(), size+i)
		sgl = append(sgl, sge(m, 4, n))
		locals = append(locals, m.Bytes()[4:4+n])
	}
	local := bytes.Join(locals, nil)
	remote := p.b.reg(t, size+16)
	fill(remote.Bytes(), size*3+1)
	before := bytes.Clone(remote.Bytes())
	wr := verbs.SendWR{ID: 42, Opcode: op, Flags: verbs.Signaled, SGL: sgl, RemoteAddr: remote.Addr() + 8,
		RKey: remote.RKey(), Imm: 0xA5A5_0000 | uint32(size&0xFFFF)}
	wantRecv := op == verbs.OpSend || op == verbs.OpSendImm || op == verbs.OpSendInv || op == verbs.OpWriteImm
	var inv *int
	if op == verbs.OpSendInv {
		victim := p.b.reg(t, 64)
		wr.InvRKey = victim.RKey()
		defer func() {
			if _, _, err := p.b.dev.mrs.Lookup(p.b.pd.pd, 0, victim.RKey(), victim.Addr(), 1, 0); err == nil {
				t.Error("SEND_WITH_INV left the key valid")
			}
		}()
		inv = new(int)
	}
	if wantRecv {
		must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 77, SGL: []verbs.SGE{sge(remote, 8, size)}}}))
	}
	must(t, p.a.qp.PostSend([]verbs.SendWR{wr}))
	wa := p.poll(&p.a, 1)[0]
	wantOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.OpSend: verbs.WCSend, verbs.OpSendImm: verbs.WCSend, verbs.OpSendInv: verbs.WCSend, verbs.OpWrite: verbs.WCWrite,
		verbs.OpWriteImm: verbs.WCWrite, verbs.OpRead: verbs.WCRead}[op]
	if wa.Status != verbs.Success || wa.ID != 42 || wa.Opcode != wantOp || wa.QPN != p.a.qp.QPN() {
		t.Fatalf("requester WC %v", &wa)
	}
	if wantRecv {
		wb := p.poll(&p.b, 1)[0]
		wantOp := verbs.WCRecv
		if op == verbs.OpWriteImm {
			wantOp = verbs.WCRecvRDMAWithIm
		}
		if wb.Status != verbs.Success || wb.ID != 77 || wb.Opcode != wantOp || wb.ByteLen != uint32(size) {
			t.Fatalf("responder WC %v", &wb)
		}
		switch op {
		case verbs.OpSendImm, verbs.OpWriteImm:
			if wb.Flags&verbs.WithImm == 0 || wb.Imm != wr.Imm {
				t.Fatalf("immediate: WC %v", &wb)
			}
		case verbs.OpSendInv:
			if wb.Flags&verbs.WithInv == 0 || wb.Imm != wr.InvRKey {
				t.Fatalf("invalidate: WC %v", &wb)
			}
		default:
			if wb.Flags&(verbs.WithImm|verbs.WithInv) != 0 {
				t.Fatalf("flags: WC %v", &wb)
			}
		}
	}
	_ = inv
	// UC completes on send; let the packets land.
	p.drain()
	got := remote.Bytes()
	if op == verbs.OpRead {
		// The local SGEs now hold what the remote had.
		var read []byte
		for _, s := range sgl {
			m, mem, err := p.a.dev.mrs.Lookup(p.a.pd.pd, 0, s.LKey, s.Addr, s.Length, 0)
			must(t, err)
			read = append(read, mem...)
			m.Release(0)
		}
		if !bytes.Equal(read, before[8:8+size]) {
			t.Fatal("READ data differs")
		}
		if !bytes.Equal(got, before) {
			t.Fatal("READ changed remote memory")
		}
		return
	}
	if !bytes.Equal(got[8:8+size], local) {
		t.Fatal("data differs")
	}
	if !bytes.Equal(got[:8], before[:8]) || !bytes.Equal(got[8+size:], before[8+size:]) {
		t.Fatal("bytes outside the target changed")
	}
}

// TestUDSend sends datagrams up to the path MTU and checks the GRH area.
func TestUDSend(t *testing.T) {
	p := newPair(t, pairOpts{typ: verbs.UD})
	mtu := p.a.dev.ActiveMTU().Bytes()
	ah, err := p.a.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(p.b.dev.Addr()), TrafficClass: 0x20})
	must(t, err)
	for _, size := range []int{0, 1, 1000, mtu} {
		for _, op := range []verbs.WROpcode{verbs.OpSend, verbs.OpSendImm} {
			src := p.a.reg(t, max(size, 1)) // regions are never empty
			fill(src.Bytes(), size)
			dst := p.b.reg(t, GRHLen+size)
			must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 5, SGL: []verbs.SGE{sge(dst, 0, GRHLen+size)}}}))
			must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 6, Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, size)},
				AH: ah, RemoteQPN: p.b.qp.QPN(), RemoteQKey: 0x11111111, Imm: 0xFEED}}))
			wa := p.poll(&p.a, 1)[0]
			wb := p.poll(&p.b, 1)[0]
			if wa.Status != verbs.Success || wb.Status != verbs.Success {
				t.Fatalf("size %d: WCs %v / %v", size, &wa, &wb)
			}
			if wb.ByteLen != uint32(GRHLen+size) || wb.SrcQP != p.a.qp.QPN() || wb.Flags&verbs.WithGRH == 0 {
				t.Fatalf("size %d: recv WC %v", size, &wb)
			}
			if (op == verbs.OpSendImm) != (wb.Flags&verbs.WithImm != 0) || op == verbs.OpSendImm && wb.Imm != 0xFEED {
				t.Fatalf("size %d: recv WC %v", size, &wb)
			}
			g := dst.Bytes()
			if !bytes.Equal(g[:20], make([]byte, 20)) || g[20] != 0x45 || g[21] != 0x20 {
				t.Fatalf("GRH area % x", g[:40])
			}
			if !bytes.Equal(g[32:36], addrA.AsSlice()) || !bytes.Equal(g[36:40], addrB.AsSlice()) {
				t.Fatalf("GRH addresses % x", g[32:40])
			}
			if !bytes.Equal(g[GRHLen:], src.Bytes()[:size]) {
				t.Fatalf("size %d: payload differs", size)
			}
		}
	}
	// Too big for the MTU: LOC_LEN_ERR and the send queue errors out.
	big := p.a.reg(t, mtu+1)
	must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 8, Opcode: verbs.OpSend, SGL: []verbs.SGE{sge(big, 0, mtu+1)}, AH: ah,
		RemoteQPN: p.b.qp.QPN(), RemoteQKey: 0x11111111}}))
	if wa := p.poll(&p.a, 1)[0]; wa.Status != verbs.LocLenErr {
		t.Fatalf("oversized UD send: %v", &wa)
	}
	if s := p.a.qp.State(); s != verbs.StateSQE {
		t.Fatalf("state after UD send error %v, want SQE", s)
	}
	// A wrong Q_Key is dropped by the receiver.
	must(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState))
	src := p.a.reg(t, 8)
	dst := p.b.reg(t, 64)
	must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{sge(dst, 0, 64)}}}))
	must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 10, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, 8)}, AH: ah,
		RemoteQPN: p.b.qp.QPN(), RemoteQKey: 0x22222222}}))
	p.poll(&p.a, 1)
	if got := p.settle(&p.b); len(got) != 0 {
		t.Fatalf("bad Q_Key delivered: %v", got)
	}
	if c := p.b.qp.Counters(); c.DropBadQKey != 1 {
		t.Fatalf("DropBadQKey = %d", c.DropBadQKey)
	}
}
