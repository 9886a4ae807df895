//go:build hwverbs && cgo && linux

package hwverbs

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include "ibverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Built reports whether this build has the libibverbs backend.
const Built = true

const (
	postBatch  = 32  // work requests translated and posted per C call
	pollBatch  = 32  // completions polled per C call
	eventBatch = 256 // events taken per wakeup before polling the fds again
	linkEth    = 2   // IBV_LINK_LAYER_ETHERNET
	linkIB     = 1   // IBV_LINK_LAYER_INFINIBAND
)

// Devices returns the names of the RDMA devices libibverbs sees, such as
// rxe0 or mlx5_0; none is not an error.
func Devices() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, nil // no kernel RDMA support: no devices
		}
		return nil, &Error{Op: "ibv_get_device_list", Errno: errnoOf(err)}
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		names = append(names, C.GoString(C.ibv_get_device_name(d)))
	}
	return names, nil
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// cErr returns the *Error of a call that returned NULL, from the errno cgo
// captured.
func cErr(op string, err error) *Error { return errnoError(op, errnoOf(err)) }

// Device is an RDMA device opened through libibverbs. It is safe for
// concurrent use.
type Device struct {
	name   string
	port   uint8
	gidIdx int
	log    *slog.Logger

	caps verbs.DeviceCap // device_cap_flags_ex

	ctx  *C.struct_ibv_context
	ch   *C.struct_ibv_comp_channel
	aev  *C.gr_aev // the event goroutine's out parameter, in C memory
	wake int       // eventfd that stops the event goroutine

	events  chan verbs.Event
	dropped atomic.Uint64
	stop    atomic.Bool
	wg      sync.WaitGroup

	// life is held for reading by every control-path call and for
	// writing by Close, so nothing is created while Close tears down.
	life   sync.RWMutex
	closed bool

	mu     sync.RWMutex // the tables below
	nextID uint64
	pds    map[*PD]struct{}
	mrs    map[*MR]struct{}
	cqs    map[uint64]*CQ
	qps    map[*QP]struct{}
	srqs   map[uint64]*SRQ
	ahs    map[*AH]struct{}
	mws    map[*MW]struct{}
}

// Open opens the RDMA device of the given name ("" for the first one)
// through libibverbs, with cfg (nil for the defaults: port 1, the GID
// chosen as the package documentation says).
func Open(name string, cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Port == 0 {
		c.Port = 1
	}
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, fmt.Errorf("%w (the kernel has no RDMA support)", ErrNoDevice)
		}
		return nil, &Error{Op: "ibv_get_device_list", Errno: errnoOf(err)}
	}
	var dev *C.struct_ibv_device
	var names []string
	for _, d := range unsafe.Slice(list, int(n)) {
		dn := C.GoString(C.ibv_get_device_name(d))
		names = append(names, dn)
		if dev == nil && (name == "" || name == dn) {
			dev, name = d, dn
		}
	}
	if dev == nil {
		C.ibv_free_device_list(list)
		if name == "" {
			return nil, ErrNoDevice
		}
		return nil, fmt.Errorf("%w named %q (have %v)", ErrNoDevice, name, names)
	}
	ctx, err := C.ibv_open_device(dev)
	C.ibv_free_device_list(list)
	if ctx == nil {
		return nil, cErr("ibv_open_device", err)
	}
	d := &Device{name: name, port: c.Port, log: c.Logger, ctx: ctx, wake: -1,
		events: make(chan verbs.Event, 64), nextID: 1,
		pds: map[*PD]struct{}{}, mrs: map[*MR]struct{}{}, mws: map[*MW]struct{}{}, cqs: map[uint64]*CQ{},
		qps: map[*QP]struct{}{}, srqs: map[uint64]*SRQ{}, ahs: map[*AH]struct{}{}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if err := d.setup(&c); err != nil {
		d.release()
		return nil, err
	}
	d.wg.Add(1)
	go d.run()
	gid, _ := d.GID(0)
	d.log.Debug("open device", "device", name, "port", c.Port, "gid_index", d.gidIdx,
		"gid", netip.AddrFrom16(gid).Unmap())
	return d, nil
}

// setup checks the port, chooses the GID and makes the completion
// channel and the event goroutine's file descriptors.
func (d *Device) setup(c *Config) error {
	var pa C.gr_port
	if rc := C.gr_query_port(d.ctx, C.uint8_t(d.port), &pa); rc != 0 {
		e := errnoError("ibv_query_port", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("%s port %d", d.name, d.port)
		return e
	}
	if pa.link_layer == linkIB {
		return fmt.Errorf("%w: %s port %d is InfiniBand; goroce speaks RoCE (Ethernet)", ErrUnsupported, d.name, d.port)
	}
	var entries []gidEntry
	var raw [16]C.uint8_t
	var v2 C.int
	for i := 0; i < int(pa.gid_tbl_len); i++ {
		if C.gr_query_gid(d.ctx, C.uint8_t(d.port), C.int(i), &raw[0], &v2) != 0 {
			continue
		}
		e := gidEntry{index: i, roce2: v2 != 0}
		for j := range raw {
			e.gid[j] = byte(raw[j])
		}
		entries = append(entries, e)
	}
	idx, err := chooseGID(entries, c)
	if err != nil {
		return fmt.Errorf("%w (%s port %d)", err, d.name, d.port)
	}
	d.gidIdx = idx
	var caps C.uint64_t
	if rc := C.gr_query_device_caps(d.ctx, &caps); rc != 0 {
		d.log.Debug("ibv_query_device_ex failed: the device reports no capabilities", "device", d.name,
			"errno", syscall.Errno(rc))
	}
	d.caps = verbs.DeviceCap(caps)
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return cErr("ibv_create_comp_channel", err)
	}
	d.ch = ch
	for _, fd := range []C.int{C.gr_channel_fd(ch), C.gr_async_fd(d.ctx)} {
		if err := unix.SetNonblock(int(fd), true); err != nil {
			return fmt.Errorf("hwverbs: event descriptor: %w", err)
		}
	}
	if d.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("hwverbs: eventfd: %w", err)
	}
	d.aev = (*C.gr_aev)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gr_aev{}))))
	if d.aev == nil {
		return errnoError("calloc", syscall.ENOMEM)
	}
	return nil
}

// release frees what setup made and closes the device.
func (d *Device) release() error {
	var err error
	if d.ch != nil {
		if rc := C.ibv_destroy_comp_channel(d.ch); rc != 0 {
			err = errnoError("ibv_destroy_comp_channel", syscall.Errno(C.gr_errno_ret(rc)))
		}
		d.ch = nil
	}
	if d.wake >= 0 {
		unix.Close(d.wake)
		d.wake = -1
	}
	if d.aev != nil {
		C.free(unsafe.Pointer(d.aev))
		d.aev = nil
	}
	if d.ctx != nil {
		if rc := C.ibv_close_device(d.ctx); rc != 0 && err == nil {
			err = errnoError("ibv_close_device", syscall.Errno(C.gr_errno_ret(rc)))
		}
		d.ctx = nil
	}
	return err
}

// errNilObject is the error of a method called on a nil object, or on a
// zero one its constructor did not make: what is the type, from where a
// usable one comes.
func errNilObject(what, from string) error {
	return fmt.Errorf("%w: hwverbs: nil or zero %s: use one from %s", errNilKind, what, from)
}

// opened reports an error for a Device that Open did not make (nil, or
// the zero value).
func (d *Device) opened() error {
	if d == nil || d.events == nil {
		return errNilObject("*Device", "hwverbs.Open")
	}
	return nil
}

// Name returns the device's name, such as rxe0 ("" for a nil Device).
func (d *Device) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// Port returns the port the device uses (0 for a nil Device).
func (d *Device) Port() uint8 {
	if d == nil {
		return 0
	}
	return d.port
}

// GIDIndex returns the GID table index behind GID index 0.
func (d *Device) GIDIndex() int {
	if d == nil {
		return 0
	}
	return d.gidIdx
}

// DroppedEvents returns how many asynchronous events found Events full.
func (d *Device) DroppedEvents() uint64 {
	if d == nil {
		return 0
	}
	return d.dropped.Load()
}

// GID returns the GID of the given index: 0 is the device's chosen GID,
// any other index the port's table entry.
func (d *Device) GID(index int) ([16]byte, error) {
	if err := d.opened(); err != nil {
		return [16]byte{}, err
	}
	if index < 0 || index > 255 {
		return [16]byte{}, fmt.Errorf("%w: GID index %d", verbs.ErrInvalidAttr, index)
	}
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return [16]byte{}, verbs.ErrClosed
	}
	var raw [16]C.uint8_t
	var v2 C.int
	if rc := C.gr_query_gid(d.ctx, C.uint8_t(d.port), C.int(tableIndex(index, d.gidIdx)), &raw[0], &v2); rc != 0 {
		e := errnoError("ibv_query_gid", syscall.Errno(rc))
		e.Detail = fmt.Sprintf("index %d", index)
		return [16]byte{}, e
	}
	var g [16]byte
	for i := range raw {
		g[i] = byte(raw[i])
	}
	return g, nil
}

// Addr returns the IP address of the device's GID (index 0).
func (d *Device) Addr() netip.Addr {
	g, err := d.GID(0)
	if err != nil {
		return netip.Addr{}
	}
	return netip.AddrFrom16(g).Unmap()
}

// ActiveMTU returns the port's active MTU, or 0 if it cannot be read.
func (d *Device) ActiveMTU() bth.MTU {
	if d.opened() != nil {
		return 0
	}
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed {
		return 0
	}
	var pa C.gr_port
	if C.gr_query_port(d.ctx, C.uint8_t(d.port), &pa) != 0 {
		return 0
	}
	return bth.MTU(pa.active_mtu)
}

// Caps returns the device's capabilities, device_cap_flags_ex of
// ibv_query_device_ex (verbs.CapsOf): rxe 6.12 has CapFlushGlobal,
// CapFlushPersistent and CapAtomicWrite, rxe 6.1 none of them.
func (d *Device) Caps() verbs.DeviceCap {
	if d.opened() != nil {
		return 0
	}
	return d.caps
}

// Events returns the channel of asynchronous events. Events that find it
// full are dropped and counted (DroppedEvents); Close closes it. A nil
// Device has none.
func (d *Device) Events() <-chan verbs.Event {
	if d == nil {
		return nil
	}
	return d.events
}

func (d *Device) newID() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	return id
}

// Close destroys every object made from the device (QPs, SRQs, AHs, MRs,
// CQs, PDs, in that order), stops the event goroutine, closes the
// device, and closes Events. Closing twice is harmless.
func (d *Device) Close() error {
	if err := d.opened(); err != nil {
		return err
	}
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.stop.Store(true)
	var one = [8]byte{1}
	unix.Write(d.wake, one[:])
	d.wg.Wait()

	d.mu.RLock()
	qps, srqs, ahs := keys(d.qps), values(d.srqs), keys(d.ahs)
	mrs, cqs, pds, mws := keys(d.mrs), values(d.cqs), keys(d.pds), keys(d.mws)
	d.mu.RUnlock()
	var errs []error
	// Windows first: a region with windows bound is not deregistered,
	// and rxe holds the QP a type 2 window is bound to.
	for _, w := range mws {
		errs = append(errs, w.dealloc())
	}
	for _, q := range qps {
		errs = append(errs, q.destroy())
	}
	for _, s := range srqs {
		errs = append(errs, s.destroy())
	}
	for _, a := range ahs {
		errs = append(errs, a.destroy())
	}
	for _, m := range mrs {
		errs = append(errs, m.dereg())
	}
	for _, c := range cqs {
		errs = append(errs, c.destroy())
	}
	for _, p := range pds {
		errs = append(errs, p.dealloc())
	}
	errs = append(errs, d.release())
	close(d.events)
	d.log.Debug("close device", "device", d.name)
	return errors.Join(errs...)
}

func keys[K comparable, V any](m map[K]V) []K {
	s := make([]K, 0, len(m))
	for k := range m {
		s = append(s, k)
	}
	return s
}

func values[K comparable, V any](m map[K]V) []V {
	s := make([]V, 0, len(m))
	for _, v := range m {
		s = append(s, v)
	}
	return s
}
