package uverbs

import (
	"encoding/binary"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// cqSink is a CQ's ring in shared memory: the engine pushes completions
// into it (roce.CQSink) and the program's ibv_poll_cq takes them out.
type cqSink struct {
	mu   sync.Mutex
	h    uint32
	r    ring
	prod uint32 // the device's producer index; the ring's Prod is its copy for the program
	ch   int    // write end of the completion channel, or -1
	lost uint64 // completion events the channel had no room for
}

var _ roce.CQSink = (*cqSink)(nil)

// Work request IDs the worker gives the engine carry what the completion
// needs to retire in the program's queue: the kind of queue, its handle
// and the program's index of the request.
func wrID(kind uint8, h, seq uint32) uint64 { return uint64(kind)<<62 | uint64(h)<<32 | uint64(seq) }

func splitID(id uint64) (kind uint8, h, seq uint32) {
	return uint8(id >> 62), uint32(id>>32) & (1<<30 - 1), uint32(id)
}

// Push writes the engine's completion into the ring (roce.CQSink).
func (k *cqSink) Push(wc *verbs.WC, solicited bool) bool {
	kind, h, seq := splitID(wc.ID)
	e := abi.CQE{Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), VendorErr: wc.VendorErr, ByteLen: wc.ByteLen,
		Imm: wc.Imm, QPN: wc.QPN, SrcQP: wc.SrcQP, WCFlags: uint32(wc.Flags), PKeyIndex: wc.PKeyIndex, SLID: wc.SLID,
		SL: wc.SL, DLIDPathBits: wc.DLIDPathBits, Kind: kind, Seq: seq, Handle: h}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.put(&e, solicited || wc.Status != verbs.Success)
}

// put adds e; the caller holds k.mu. event says whether a CQ armed for
// solicited completions only gets an event for it.
func (k *cqSink) put(e *abi.CQE, event bool) bool {
	// The program's consumer index may be anything: a bad one only
	// makes this CQ look full or lose what it overwrites.
	if k.r.mem == nil || k.prod-k.r.cons().Load() >= k.r.entries {
		return false
	}
	*(*abi.CQE)(unsafe.Pointer(&k.r.slot(k.prod)[0])) = *e
	k.prod++
	k.r.prod().Store(k.prod)
	armed := k.r.armed()
	if a := armed.Load(); (a == abi.ArmAny || a == abi.ArmSolicited && event) && armed.CompareAndSwap(a, 0) {
		k.notify()
	}
	return true
}

// notify writes the CQ's event to its channel, without blocking.
func (k *cqSink) notify() {
	if k.ch < 0 {
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint32(b[:], k.h)
	if n, err := unix.Write(k.ch, b[:]); n != 8 || err != nil {
		k.lost++
	}
}

// pending returns how many completions the program has not taken, as far
// as the device can tell.
func (k *cqSink) pending() uint32 {
	n := k.prod - k.r.cons().Load()
	return min(n, k.r.entries)
}

// nextPow2 returns the least power of two of at least n (and 1).
func nextPow2(n uint32) uint32 {
	p := uint32(1)
	for p < n {
		p <<= 1
	}
	return p
}

func (s *session) createCQ(body []byte) (any, uint32) {
	var req abi.CreateCQReq
	if !decode(body, &req) || req.CQE < 1 || req.CQE > roce.MaxCQE || req.CompVector != 0 {
		return nil, abi.EINVAL
	}
	var ch *chanObj
	if req.Channel != 0 {
		if ch = s.chans[req.Channel]; ch == nil {
			return nil, abi.EINVAL
		}
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	r, err := s.rings.newRing(nextPow2(req.CQE), abi.CQESize)
	if err != nil {
		return nil, abi.ENOMEM
	}
	k := &cqSink{h: h, r: r, ch: -1}
	if ch != nil {
		k.ch = ch.fd
	}
	cq, err := s.srv.dev.CreateCQSink(int(r.entries), k)
	if err != nil {
		s.rings.free(r.off, r.mem)
		return nil, errno(err)
	}
	c := &cqObj{s: s, h: h, cq: cq, sink: k, ch: ch}
	if ch != nil {
		ch.users++
	}
	s.cqs[h] = c
	s.srv.mu.Lock()
	s.srv.byCQ[cq] = c
	s.srv.mu.Unlock()
	return &abi.CreateCQReply{Handle: h, CQE: r.entries, Ring: r.reply()}, 0
}

// resizeCQ moves the completions not yet polled into a new ring. The
// library holds the CQ's lock throughout, so it reads the old ring no
// more.
func (s *session) resizeCQ(body []byte) (any, uint32) {
	var req abi.ResizeCQReq
	if !decode(body, &req) || req.CQE < 1 || req.CQE > roce.MaxCQE {
		return nil, abi.EINVAL
	}
	c := s.cqs[req.Handle]
	if c == nil {
		return nil, abi.EINVAL
	}
	k := c.sink
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pending() > req.CQE {
		return nil, abi.EINVAL // ibv_resize_cq: fewer entries than completions waiting
	}
	n := nextPow2(req.CQE)
	r, err := s.rings.newRing(n, abi.CQESize)
	if err != nil {
		return nil, abi.ENOMEM
	}
	cons := k.prod - k.pending()
	for i := cons; i != k.prod; i++ {
		copy(r.slot(i), k.r.slot(i))
	}
	r.cons().Store(cons)
	r.prod().Store(k.prod)
	r.armed().Store(k.r.armed().Load())
	old := k.r
	k.r = r
	s.rings.free(old.off, old.mem)
	return &abi.ResizeCQReply{CQE: r.entries, Ring: r.reply()}, 0
}

func (s *session) destroyCQ(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	c := s.cqs[req.Handle]
	if c == nil {
		return abi.EINVAL
	}
	if err := c.cq.Destroy(); err != nil {
		return errno(err)
	}
	s.freeCQ(c)
	return 0
}

// freeCQ destroys c (its QPs are gone) and frees its ring.
func (s *session) freeCQ(c *cqObj) {
	c.cq.Destroy()
	s.srv.mu.Lock()
	delete(s.srv.byCQ, c.cq)
	s.srv.mu.Unlock()
	c.sink.mu.Lock()
	s.rings.free(c.sink.r.off, c.sink.r.mem)
	c.sink.r = ring{}
	c.sink.mu.Unlock()
	if c.ch != nil {
		c.ch.users--
	}
	delete(s.cqs, c.h)
}

// synth adds a completion the engine did not make: that of a work request
// the device could not post.
func (c *cqObj) synth(kind uint8, h, seq uint32, st verbs.Status, op verbs.WCOpcode, qpn uint32) {
	k := c.sink
	e := abi.CQE{Status: uint32(st), Opcode: uint32(op), QPN: qpn, Kind: kind, Seq: seq, Handle: h}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.put(&e, true)
}
