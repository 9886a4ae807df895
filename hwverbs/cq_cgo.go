//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// CQ is a completion queue. It is safe for concurrent use.
type CQ struct {
	dev *Device
	id  uint64
	ch  chan struct{}

	mu     sync.Mutex
	cq     *C.struct_ibv_cq
	b      *C.gr_cqb
	out    []C.gr_wc // b.out, as Go sees it
	ph, pn int       // completions polled by Wait and not yet returned: out[ph:ph+pn]
	dead   bool
}

// CreateCQ creates a completion queue of at least cqe entries, attached
// to the device's completion channel.
func (d *Device) CreateCQ(cqe int) (verbs.CQ, error) {
	if err := d.opened(); err != nil {
		return nil, err
	}
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return nil, verbs.ErrClosed
	}
	if cqe < 1 || cqe > 1<<30 {
		return nil, fmt.Errorf("%w: a CQ of %d entries: it takes 1 to %d", verbs.ErrInvalidCap, cqe, 1<<30)
	}
	c := &CQ{dev: d, id: d.newID(), ch: make(chan struct{}, 1)}
	cq, err := C.gr_create_cq(d.ctx, C.int(cqe), C.uint64_t(c.id), d.ch)
	if cq == nil {
		e := cErr("ibv_create_cq", err)
		e.Detail = fmt.Sprintf("%d entries", cqe)
		return nil, e
	}
	c.cq = cq
	c.b = C.gr_cqb_new(cq, pollBatch)
	if c.b == nil {
		C.ibv_destroy_cq(cq)
		return nil, errnoError("calloc", syscall.ENOMEM)
	}
	c.out = unsafe.Slice(c.b.out, pollBatch)
	d.mu.Lock()
	d.cqs[c.id] = c
	d.mu.Unlock()
	return c, nil
}

func fromCWC(w *verbs.WC, c *C.gr_wc) {
	*w = verbs.WC{
		ID: uint64(c.id), Status: verbs.Status(c.status), Opcode: verbs.WCOpcode(c.opcode),
		VendorErr: uint32(c.vendor_err), ByteLen: uint32(c.byte_len), Imm: uint32(c.imm),
		QPN: uint32(c.qp_num), SrcQP: uint32(c.src_qp), Flags: verbs.WCFlags(c.flags),
		PKeyIndex: uint16(c.pkey_index), SLID: uint16(c.slid), SL: uint8(c.sl),
		DLIDPathBits: uint8(c.dlid_path_bits),
	}
}

// Poll moves up to len(wc) completions into wc and returns how many. It
// does not block and allocates nothing.
func (c *CQ) Poll(wc []verbs.WC) int {
	if len(wc) == 0 || c.made() != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return 0
	}
	got := 0
	for c.pn > 0 && got < len(wc) {
		fromCWC(&wc[got], &c.out[c.ph])
		c.ph++
		c.pn--
		got++
	}
	if c.pn > 0 {
		return got
	}
	for got < len(wc) {
		want := min(len(wc)-got, pollBatch)
		k := int(C.gr_poll(c.b, C.int(want)))
		if k <= 0 {
			break
		}
		for i := range k {
			fromCWC(&wc[got+i], &c.out[i])
		}
		got += k
		if k < want {
			break
		}
	}
	return got
}

// made reports an error for a CQ that CreateCQ did not make (nil, or the
// zero value).
func (c *CQ) made() error {
	if c == nil || c.cq == nil || c.dev == nil {
		return errNilObject("*CQ", "Device.CreateCQ")
	}
	return nil
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (only a
// solicited one, if solicitedOnly) sends a value on C.
func (c *CQ) ReqNotify(solicitedOnly bool) {
	if c.made() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	if rc := C.ibv_req_notify_cq(c.cq, so); rc != 0 {
		c.dev.log.Warn("ibv_req_notify_cq failed", "err", syscall.Errno(C.gr_errno_ret(rc)))
	}
}

// C returns the completion channel: a value arrives on it after an armed
// CQ gets a completion. A nil CQ has none.
func (c *CQ) C() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.ch
}

// ready polls into the CQ's own buffer; it reports whether a completion
// is waiting there.
func (c *CQ) ready(arm bool) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false, verbs.ErrDestroyed
	}
	if c.pn > 0 {
		return true, nil
	}
	if arm {
		if rc := C.ibv_req_notify_cq(c.cq, 0); rc != 0 {
			return false, errnoError("ibv_req_notify_cq", syscall.Errno(C.gr_errno_ret(rc)))
		}
	}
	k := int(C.gr_poll(c.b, pollBatch))
	if k > 0 {
		c.ph, c.pn = 0, k
		return true, nil
	}
	return false, nil
}

// Wait blocks until a completion is waiting or ctx is done. It arms the
// CQ and takes values from C while it waits.
func (c *CQ) Wait(ctx context.Context) error {
	if err := c.made(); err != nil {
		return err
	}
	for {
		if ok, err := c.ready(false); ok || err != nil {
			return err
		}
		if ok, err := c.ready(true); ok || err != nil {
			return err
		}
		select {
		case <-c.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Destroy frees the CQ; it fails with verbs.ErrBusy while QPs use it.
// Completions not yet polled are lost.
func (c *CQ) Destroy() error {
	if err := c.made(); err != nil {
		return err
	}
	c.dev.life.RLock()
	defer c.dev.life.RUnlock()
	return c.destroy()
}

func (c *CQ) destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
		return errnoError("ibv_destroy_cq", syscall.Errno(C.gr_errno_ret(rc)))
	}
	c.dead = true
	C.gr_cqb_free(c.b)
	c.b, c.out, c.pn = nil, nil, 0
	select { // wake a Wait, which then sees the CQ is gone
	case c.ch <- struct{}{}:
	default:
	}
	c.dev.mu.Lock()
	delete(c.dev.cqs, c.id)
	c.dev.mu.Unlock()
	return nil
}
