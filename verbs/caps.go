package verbs

import "fmt"

// DeviceCap is a set of device capabilities, with the bits of
// ibv_device_cap_flags as the 64-bit device_cap_flags_ex of
// ibv_query_device_ex holds them.
type DeviceCap uint64

// Device capabilities goroce knows by name.
const (
	// CapRCRNRNAKGen: the device sends RNR NAKs on RC QPs
	// (IBV_DEVICE_RC_RNR_NAK_GEN).
	CapRCRNRNAKGen DeviceCap = 1 << 12
	// CapMemWindow: memory windows (IBV_DEVICE_MEM_WINDOW).
	CapMemWindow DeviceCap = 1 << 17
	// CapMemWindowType2B: type 2 windows bound to a QP
	// (IBV_DEVICE_MEM_WINDOW_TYPE_2B).
	CapMemWindowType2B DeviceCap = 1 << 24
	// CapFlushGlobal: FLUSH of placement type PlaceGlobal, and regions
	// and QPs with the FlushGlobal right (IBV_DEVICE_FLUSH_GLOBAL).
	CapFlushGlobal DeviceCap = 1 << 38
	// CapFlushPersistent: FLUSH of placement type PlacePersistent
	// (IBV_DEVICE_FLUSH_PERSISTENT).
	CapFlushPersistent DeviceCap = 1 << 39
	// CapAtomicWrite: ATOMIC_WRITE (IBV_DEVICE_ATOMIC_WRITE).
	CapAtomicWrite DeviceCap = 1 << 40
)

var capNames = map[DeviceCap]string{
	CapRCRNRNAKGen: "RC_RNR_NAK_GEN", CapMemWindow: "MEM_WINDOW", CapMemWindowType2B: "MEM_WINDOW_TYPE_2B",
	CapFlushGlobal: "FLUSH_GLOBAL", CapFlushPersistent: "FLUSH_PERSISTENT", CapAtomicWrite: "ATOMIC_WRITE",
}

// String lists the capabilities by their ibverbs names
// (MEM_WINDOW|ATOMIC_WRITE), the bits it does not know as a number, or
// "none".
func (c DeviceCap) String() string {
	if c == 0 {
		return "none"
	}
	var b []byte
	rest := c
	for i := range 64 {
		bit := DeviceCap(1) << i
		n, ok := capNames[bit]
		if c&bit == 0 || !ok {
			continue
		}
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = append(b, n...)
		rest &^= bit
	}
	if rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "%#x", uint64(rest))
	}
	return string(b)
}

// CapsOf returns the capabilities device d reports through a method
// Caps() DeviceCap (goroce's software device and hwverbs' have one), or 0
// when it has no such method or d is nil. A program checks a capability
// before it relies on it, as it would check ibv_query_device_ex:
//
//	if verbs.CapsOf(dev)&verbs.CapAtomicWrite == 0 {
//		return errors.New("the device has no ATOMIC_WRITE")
//	}
func CapsOf(d Device) DeviceCap {
	if c, ok := d.(interface{ Caps() DeviceCap }); ok {
		return c.Caps()
	}
	return 0
}
