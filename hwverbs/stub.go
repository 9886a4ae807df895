//go:build !hwverbs || !cgo || !linux

package hwverbs

import (
	"context"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// Built reports whether this build has the libibverbs backend; this one
// does not (it lacks the hwverbs build tag, cgo, or Linux).
const Built = false

// Devices returns ErrNotBuilt: this build has no libibverbs backend.
func Devices() ([]string, error) { return nil, ErrNotBuilt }

// Open returns ErrNotBuilt: this build has no libibverbs backend.
func Open(name string, cfg *Config) (*Device, error) { return nil, ErrNotBuilt }

// Device is an RDMA device opened through libibverbs; this build cannot
// open one, so its methods only report ErrNotBuilt. It is safe for
// concurrent use.
type Device struct{}

// Name returns "".
func (d *Device) Name() string { return "" }

// Port returns 0.
func (d *Device) Port() uint8 { return 0 }

// GIDIndex returns 0.
func (d *Device) GIDIndex() int { return 0 }

// DroppedEvents returns 0.
func (d *Device) DroppedEvents() uint64 { return 0 }

// GID returns ErrNotBuilt.
func (d *Device) GID(index int) ([16]byte, error) { return [16]byte{}, ErrNotBuilt }

// Addr returns the zero address.
func (d *Device) Addr() netip.Addr { return netip.Addr{} }

// ActiveMTU returns 0.
func (d *Device) ActiveMTU() bth.MTU { return 0 }

// Caps returns 0: this build has no device.
func (d *Device) Caps() verbs.DeviceCap { return 0 }

// AllocPD returns ErrNotBuilt.
func (d *Device) AllocPD() (verbs.PD, error) { return nil, ErrNotBuilt }

// CreateCQ returns ErrNotBuilt.
func (d *Device) CreateCQ(cqe int) (verbs.CQ, error) { return nil, ErrNotBuilt }

// Events returns nil.
func (d *Device) Events() <-chan verbs.Event { return nil }

// Close returns nil.
func (d *Device) Close() error { return nil }

// PD is a protection domain; this build has none. It is safe for
// concurrent use.
type PD struct{}

// RegMR returns ErrNotBuilt.
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) { return nil, ErrNotBuilt }

// CreateQP returns ErrNotBuilt.
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) { return nil, ErrNotBuilt }

// CreateSRQ returns ErrNotBuilt.
func (p *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) { return nil, ErrNotBuilt }

// CreateAH returns ErrNotBuilt.
func (p *PD) CreateAH(attr verbs.AHAttr) (verbs.AH, error) { return nil, ErrNotBuilt }

// AllocMW returns ErrNotBuilt.
func (p *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) { return nil, ErrNotBuilt }

// Dealloc returns ErrNotBuilt.
func (p *PD) Dealloc() error { return ErrNotBuilt }

// MW is a memory window; this build has none. It is safe for concurrent
// use.
type MW struct{}

// RKey returns 0.
func (m *MW) RKey() uint32 { return 0 }

// Type returns 0.
func (m *MW) Type() verbs.MWType { return 0 }

// Dealloc returns ErrNotBuilt.
func (m *MW) Dealloc() error { return ErrNotBuilt }

// MR is a registered memory region; this build has none. It is safe for
// concurrent use.
type MR struct{}

// Addr returns 0.
func (m *MR) Addr() uint64 { return 0 }

// Len returns 0.
func (m *MR) Len() int { return 0 }

// LKey returns 0.
func (m *MR) LKey() uint32 { return 0 }

// RKey returns 0.
func (m *MR) RKey() uint32 { return 0 }

// Bytes returns nil.
func (m *MR) Bytes() []byte { return nil }

// Dereg returns ErrNotBuilt.
func (m *MR) Dereg() error { return ErrNotBuilt }

// CQ is a completion queue; this build has none. It is safe for
// concurrent use.
type CQ struct{}

// Poll returns 0.
func (c *CQ) Poll(wc []verbs.WC) int { return 0 }

// ReqNotify does nothing.
func (c *CQ) ReqNotify(solicitedOnly bool) {}

// C returns nil.
func (c *CQ) C() <-chan struct{} { return nil }

// Wait returns ErrNotBuilt.
func (c *CQ) Wait(ctx context.Context) error { return ErrNotBuilt }

// Destroy returns ErrNotBuilt.
func (c *CQ) Destroy() error { return ErrNotBuilt }

// QP is a queue pair; this build has none. It is safe for concurrent
// use.
type QP struct{}

// QPN returns 0.
func (q *QP) QPN() uint32 { return 0 }

// Type returns 0.
func (q *QP) Type() verbs.QPType { return 0 }

// Cap returns the zero QPCap.
func (q *QP) Cap() verbs.QPCap { return verbs.QPCap{} }

// Modify returns ErrNotBuilt.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error { return ErrNotBuilt }

// Query returns ErrNotBuilt.
func (q *QP) Query() (verbs.QPAttr, error) { return verbs.QPAttr{}, ErrNotBuilt }

// PostSend returns ErrNotBuilt.
func (q *QP) PostSend(wrs []verbs.SendWR) error { return ErrNotBuilt }

// PostRecv returns ErrNotBuilt.
func (q *QP) PostRecv(wrs []verbs.RecvWR) error { return ErrNotBuilt }

// BindMW returns ErrNotBuilt.
func (q *QP) BindMW(mw verbs.MW, bind *verbs.MWBindWR) error { return ErrNotBuilt }

// AttachMcast returns ErrNotBuilt.
func (q *QP) AttachMcast(gid [16]byte) error { return ErrNotBuilt }

// DetachMcast returns ErrNotBuilt.
func (q *QP) DetachMcast(gid [16]byte) error { return ErrNotBuilt }

// Destroy returns ErrNotBuilt.
func (q *QP) Destroy() error { return ErrNotBuilt }

// SRQ is a shared receive queue; this build has none. It is safe for
// concurrent use.
type SRQ struct{}

// PostRecv returns ErrNotBuilt.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) error { return ErrNotBuilt }

// Modify returns ErrNotBuilt.
func (s *SRQ) Modify(limit uint32) error { return ErrNotBuilt }

// Destroy returns ErrNotBuilt.
func (s *SRQ) Destroy() error { return ErrNotBuilt }

// AH is an address handle; this build has none. It is safe for
// concurrent use.
type AH struct{}

// Attr returns the zero AHAttr.
func (a *AH) Attr() verbs.AHAttr { return verbs.AHAttr{} }

// Destroy returns ErrNotBuilt.
func (a *AH) Destroy() error { return ErrNotBuilt }
