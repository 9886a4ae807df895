package uverbs

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/uverbs/abi"
)

// Shared memory: the ring file the device makes for each session, the
// rings in it, and the atomics both processes use on them.

const pageSize = 4096

func roundPage(n int64) int64 { return (n + pageSize - 1) &^ (pageSize - 1) }

// u32 is the uint32 at off of shared memory mem, for atomic access.
func u32(mem []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }

// u64 is the uint64 at off of shared memory mem, for atomic access.
func u64(mem []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }

// Offsets of the fields both sides touch atomically.
var (
	offSleeping = int(unsafe.Offsetof(abi.SessionPage{}.Sleeping))
	offVersion  = int(unsafe.Offsetof(abi.SessionPage{}.Version))
	offSummary  = int(unsafe.Offsetof(abi.SessionPage{}.Summary))
	offDirty    = int(unsafe.Offsetof(abi.SessionPage{}.Dirty))
	offProd     = int(unsafe.Offsetof(abi.RingHeader{}.Prod))
	offCons     = int(unsafe.Offsetof(abi.RingHeader{}.Cons))
	offArmed    = int(unsafe.Offsetof(abi.RingHeader{}.Armed))
)

// ringFile is a session's ring file: a memfd the device allocates rings
// in, page by page, and never reuses an offset of (a freed ring's pages
// are punched out of the file). The program maps the ranges the replies
// name.
type ringFile struct {
	fd   int
	size int64
	next int64
}

func newRingFile() (ringFile, error) {
	fd, err := unix.MemfdCreate("goroce-rings", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return ringFile{fd: -1}, fmt.Errorf("uverbs: ring file: %w", err)
	}
	r := ringFile{fd: fd, size: 1 << 20}
	if err := unix.Ftruncate(fd, r.size); err != nil {
		unix.Close(fd)
		return ringFile{fd: -1}, fmt.Errorf("uverbs: ring file: %w", err)
	}
	// The program may grow the file, never shrink it under the device.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		unix.Close(fd)
		return ringFile{fd: -1}, fmt.Errorf("uverbs: ring file: %w", err)
	}
	return r, nil
}

// alloc maps n bytes of new space; it returns their offset in the file.
func (r *ringFile) alloc(n int64) (int64, []byte, error) {
	n = roundPage(n)
	off := r.next
	if off+n > r.size {
		size := max(2*r.size, roundPage(off+n))
		if err := unix.Ftruncate(r.fd, size); err != nil {
			return 0, nil, err
		}
		r.size = size
	}
	mem, err := unix.Mmap(r.fd, off, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, nil, err
	}
	r.next = off + n
	return off, mem, nil
}

// free unmaps a ring and gives its pages back.
func (r *ringFile) free(off int64, mem []byte) {
	if mem == nil {
		return
	}
	n := len(mem)
	unix.Munmap(mem)
	unix.Fallocate(r.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, int64(n))
}

func (r *ringFile) close() {
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// ring is one ring in the ring file: its header, then entries slots of
// stride bytes.
type ring struct {
	off     int64
	mem     []byte
	entries uint32 // a power of two
	stride  uint32
}

// newRing allocates a ring of at least n slots of stride bytes.
func (r *ringFile) newRing(n, stride uint32) (ring, error) {
	entries := uint32(1)
	for entries < n {
		entries <<= 1
	}
	off, mem, err := r.alloc(abi.RingHeaderSize + int64(entries)*int64(stride))
	if err != nil {
		return ring{}, fmt.Errorf("uverbs: ring of %d x %d bytes: %w", entries, stride, err)
	}
	return ring{off: off, mem: mem, entries: entries, stride: stride}, nil
}

func (g *ring) reply() abi.RingReply {
	if g.mem == nil {
		return abi.RingReply{}
	}
	return abi.RingReply{Offset: uint64(g.off), Size: uint64(len(g.mem)), Entries: g.entries, Stride: g.stride}
}

func (g *ring) prod() *atomic.Uint32  { return u32(g.mem, offProd) }
func (g *ring) cons() *atomic.Uint32  { return u32(g.mem, offCons) }
func (g *ring) armed() *atomic.Uint32 { return u32(g.mem, offArmed) }

// slot returns the slot of index i.
func (g *ring) slot(i uint32) []byte {
	off := abi.RingHeaderSize + int(i&(g.entries-1))*int(g.stride)
	return g.mem[off : off+int(g.stride) : off+int(g.stride)]
}

// mapMem maps [off, off+n) of the program-memory file, both page
// aligned.
func mapMem(fd int, off, n int64) ([]byte, error) {
	return unix.Mmap(fd, off, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
