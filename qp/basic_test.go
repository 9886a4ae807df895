package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

func TestSendRecv(t *testing.T) {
	p := newPair(t, pairOpts{})
	for _, size := range []int{0, 1, 1023, 1024, 1025, 5000, 1 << 20} {
		src := p.a.reg(t, size+1)
		dst := p.b.reg(t, size+1)
		fill(src.Bytes(), size)
		must(t, p.b.qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{sge(dst, 0, size+1)}}}))
		must(t, p.a.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(src, 0, size)}}}))
		wa := p.poll(&p.a, 1)
		wb := p.poll(&p.b, 1)
		if wa[0].Status != verbs.Success || wa[0].ID != 9 || wa[0].Opcode != verbs.WCSend {
			t.Fatalf("size %d: send WC %v", size, &wa[0])
		}
		if wb[0].Status != verbs.Success || wb[0].ID != 7 || wb[0].Opcode != verbs.WCRecv || wb[0].ByteLen != uint32(size) {
			t.Fatalf("size %d: recv WC %v", size, &wb[0])
		}
		if !bytes.Equal(dst.Bytes()[:size], src.Bytes()[:size]) {
			t.Fatalf("size %d: data differs", size)
		}
	}
}

func TestWriteReadAtomic(t *testing.T) {
	p := newPair(t, pairOpts{mtu: bth.MTU4096})
	const size = 100000
	local := p.a.reg(t, 2*size)
	remote := p.b.reg(t, size)
	fill(local.Bytes()[:size], 1)
	must(t, p.a.qp.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, 0, size)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		{ID: 2, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(local, size, size)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
	}))
	wcs := p.poll(&p.a, 2)
	for i, wc := range wcs {
		if wc.Status != verbs.Success || wc.ID != uint64(i+1) {
			t.Fatalf("WC %d: %v", i, &wc)
		}
	}
	if !bytes.Equal(local.Bytes()[:size], local.Bytes()[size:]) || !bytes.Equal(remote.Bytes(), local.Bytes()[:size]) {
		t.Fatal("WRITE then READ did not round-trip")
	}
	// Atomics on the first 8 bytes of remote.
	binary.NativeEndian.PutUint64(remote.Bytes(), 100)
	res := p.a.reg(t, 16)
	must(t, p.a.qp.PostSend([]verbs.SendWR{
		{ID: 3, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(res, 0, 8)}, RemoteAddr: remote.Addr(), RKey: remote.RKey(), CompareAdd: 5},
		{ID: 4, Opcode: verbs.OpAtomicCmpSwp, Flags: verbs.Signaled, SGL: []verbs.SGE{sge(res, 8, 8)}, RemoteAddr: remote.Addr(), RKey: remote.RKey(), CompareAdd: 105, Swap: 7},
	}))
	wcs = p.poll(&p.a, 2)
	if wcs[0].Status != verbs.Success || wcs[1].Status != verbs.Success || wcs[0].Opcode != verbs.WCFetchAdd || wcs[1].Opcode != verbs.WCCompSwap {
		t.Fatalf("atomic WCs %v %v", &wcs[0], &wcs[1])
	}
	if got := binary.NativeEndian.Uint64(res.Bytes()); got != 100 {
		t.Fatalf("fetch-add returned %d", got)
	}
	if got := binary.NativeEndian.Uint64(res.Bytes()[8:]); got != 105 {
		t.Fatalf("cmp-swap returned %d", got)
	}
	if got := binary.NativeEndian.Uint64(remote.Bytes()); got != 7 {
		t.Fatalf("remote value %d", got)
	}
}
