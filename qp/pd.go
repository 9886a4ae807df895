package qp

import (
	"fmt"

	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/verbs"
)

// PD is a protection domain of the software device. It is safe for
// concurrent use.
type PD struct {
	dev *Device
	pd  *mr.PD
}

// AllocPD returns a new protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	if d.closed.Load() {
		return nil, fmt.Errorf("%w: AllocPD after Close", verbs.ErrClosed)
	}
	return &PD{dev: d, pd: d.mrs.AllocPD()}, nil
}

// ok reports whether p was made by AllocPD.
func (p *PD) ok() bool { return p != nil && p.dev.ok() && p.pd != nil }

// errNilPD is what the methods of a nil PD return.
var errNilPD = nilError("nil *PD", "Device.AllocPD")

// RegMR registers buf in the PD. The region's address is that of buf[0],
// as with ibv_reg_mr. An empty buf is refused, as libibverbs does.
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	m, err := p.pd.Register(buf, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// RegMRIOVA registers buf in the PD at address iova: SGEs and peers name
// buf[0] as iova, as with ibv_reg_mr_iova. A device that serves memory
// mapped from another process (package uverbs) registers it at the
// addresses that process knows it by.
func (p *PD) RegMRIOVA(buf []byte, iova uint64, access verbs.Access) (verbs.MR, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	m, err := p.pd.RegisterIOVA(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Dealloc frees the PD; it fails while regions or queue pairs use it.
func (p *PD) Dealloc() error {
	if !p.ok() {
		return errNilPD
	}
	return p.pd.Dealloc()
}

// MRPD returns the engine's protection domain behind a PD of this device.
func (p *PD) MRPD() *mr.PD {
	if p == nil {
		return nil
	}
	return p.pd
}

const localWrite = verbs.LocalWrite

// gather copies the payload of w from byte off into dst. It reports false
// when an SGE does not name valid local memory.
func (q *QP) gather(w *sendWQE, off uint64, dst []byte) bool {
	if w.wr.Flags&verbs.Inline != 0 {
		copy(dst, w.inline[off:])
		return true
	}
	for _, e := range w.sgl {
		if len(dst) == 0 {
			break
		}
		if off >= uint64(e.Length) {
			off -= uint64(e.Length)
			continue
		}
		n := min(uint64(e.Length)-off, uint64(len(dst)))
		m, mem, err := q.dev.mrs.Lookup(q.pd, q.id, e.LKey, e.Addr+off, uint32(n), 0)
		if err != nil {
			return false
		}
		copy(dst, mem)
		m.Release(q.id)
		dst = dst[n:]
		off = 0
	}
	return len(dst) == 0
}

// payloadRef returns the n bytes of w's data from byte off as a slice of
// registered memory, for the packet to carry in place, and the region
// they lie in, pinned (mr.MR.Pin) until the batch that carries them is
// sent; or nil when they must be copied: a small or padded payload,
// inline data, or bytes that span SGEs or fail the key check (gather then
// reports it). The memory is read by the transport after the region's
// access ends, as a NIC reads it by DMA: a WR's memory must stay
// registered and unchanged until the WR completes.
func (q *QP) payloadRef(w *sendWQE, off, n uint64) ([]byte, *mr.MR) {
	if !q.dev.inPlace || n < minRefPayload || n%4 != 0 || w.wr.Flags&verbs.Inline != 0 {
		return nil, nil
	}
	for _, e := range w.sgl {
		if off >= uint64(e.Length) {
			off -= uint64(e.Length)
			continue
		}
		if off+n > uint64(e.Length) {
			return nil, nil
		}
		m, mem, err := q.dev.mrs.Lookup(q.pd, q.id, e.LKey, e.Addr+off, uint32(n), 0)
		if err != nil {
			return nil, nil
		}
		m.Pin(q.id)
		m.Release(q.id)
		return mem, m
	}
	return nil, nil
}

// scatter copies src into the memory of sgl from byte off. It reports
// false when an SGE does not name valid, locally writable memory or the
// list is too short.
func (q *QP) scatter(sgl []verbs.SGE, off uint64, src []byte) bool {
	for _, e := range sgl {
		if len(src) == 0 {
			break
		}
		if off >= uint64(e.Length) {
			off -= uint64(e.Length)
			continue
		}
		n := min(uint64(e.Length)-off, uint64(len(src)))
		m, mem, err := q.dev.mrs.Lookup(q.pd, q.id, e.LKey, e.Addr+off, uint32(n), localWrite)
		if err != nil {
			return false
		}
		copy(mem, src[:n])
		m.Release(q.id)
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}
