//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// PD is a protection domain. It is safe for concurrent use.
type PD struct {
	dev  *Device
	pd   *C.struct_ibv_pd
	mu   sync.Mutex
	dead bool
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if err := d.opened(); err != nil {
		return nil, err
	}
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return nil, verbs.ErrClosed
	}
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, cErr("ibv_alloc_pd", err)
	}
	p := &PD{dev: d, pd: pd}
	d.mu.Lock()
	d.pds[p] = struct{}{}
	d.mu.Unlock()
	return p, nil
}

// Dealloc frees the PD; it fails with verbs.ErrBusy while objects use it.
func (p *PD) Dealloc() error {
	if err := p.made(); err != nil {
		return err
	}
	p.dev.life.RLock()
	defer p.dev.life.RUnlock()
	return p.dealloc()
}

func (p *PD) dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoError("ibv_dealloc_pd", syscall.Errno(C.gr_errno_ret(rc)))
	}
	p.dead = true
	p.dev.mu.Lock()
	delete(p.dev.pds, p)
	p.dev.mu.Unlock()
	return nil
}

// made reports an error for a PD that AllocPD did not make (nil, or the
// zero value).
func (p *PD) made() error {
	if p == nil || p.pd == nil || p.dev == nil {
		return errNilObject("*PD", "Device.AllocPD")
	}
	return nil
}

// usable reports an error if the PD cannot make objects: destroyed, or
// its device closed. The caller holds dev.life.
func (p *PD) usable() error {
	if p.dev.closed {
		return verbs.ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return verbs.ErrDestroyed
	}
	return nil
}

// MR is a registered memory region. It is safe for concurrent use.
type MR struct {
	pd   *PD
	mr   *C.struct_ibv_mr
	buf  []byte
	pin  runtime.Pinner
	addr uint64
	lkey uint32
	rkey uint32
	mu   sync.Mutex
	dead bool
}

// RegMR registers buf, which must not be empty. Memory from Alloc is
// registered as it is; Go memory is pinned until Dereg (see the package
// documentation).
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := p.made(); err != nil {
		return nil, err
	}
	if err := checkRegMR(buf, access); err != nil {
		return nil, err
	}
	p.dev.life.RLock()
	defer p.dev.life.RUnlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	m := &MR{pd: p, buf: buf}
	m.pin.Pin(&buf[0])
	mr, err := C.gr_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		m.pin.Unpin()
		e := cErr("ibv_reg_mr", err)
		e.Detail = fmt.Sprintf("%d bytes, %v", len(buf), access)
		return nil, e
	}
	m.mr, m.addr = mr, uint64(uintptr(unsafe.Pointer(&buf[0])))
	m.lkey, m.rkey = uint32(mr.lkey), uint32(mr.rkey)
	p.dev.mu.Lock()
	p.dev.mrs[m] = struct{}{}
	p.dev.mu.Unlock()
	return m, nil
}

// Addr returns the address of Bytes()[0], which peers and SGEs use (0 for
// a nil MR).
func (m *MR) Addr() uint64 {
	if m == nil {
		return 0
	}
	return m.addr
}

// Len returns the region's length.
func (m *MR) Len() int {
	if m == nil {
		return 0
	}
	return len(m.buf)
}

// LKey returns the local key.
func (m *MR) LKey() uint32 {
	if m == nil {
		return 0
	}
	return m.lkey
}

// RKey returns the remote key.
func (m *MR) RKey() uint32 {
	if m == nil {
		return 0
	}
	return m.rkey
}

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte {
	if m == nil {
		return nil
	}
	return m.buf
}

// Dereg deregisters the region and unpins Go memory.
func (m *MR) Dereg() error {
	if m == nil || m.mr == nil || m.pd == nil {
		return errNilObject("*MR", "PD.RegMR")
	}
	m.pd.dev.life.RLock()
	defer m.pd.dev.life.RUnlock()
	return m.dereg()
}

func (m *MR) dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return verbs.ErrDestroyed
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		e := errnoError("ibv_dereg_mr", syscall.Errno(C.gr_errno_ret(rc)))
		if e.Errno == syscall.EINVAL || e.Errno == syscall.EBUSY {
			e.Detail = "memory windows may be bound to the region: invalidate or deallocate them first"
		}
		return e
	}
	m.dead = true
	m.pin.Unpin()
	d := m.pd.dev
	d.mu.Lock()
	delete(d.mrs, m)
	d.mu.Unlock()
	return nil
}
