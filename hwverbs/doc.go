// Package hwverbs gives goroce's verbs interfaces (package verbs) over
// libibverbs, for real RNICs and the Linux kernel's soft-RoCE (rxe), so
// that roce.Connect, roce.Trace and the end-to-end tests of
// roce/rocetest run unchanged on hardware.
//
// # Building
//
// cgo is optional. The default build is pure Go and needs no C library:
// Open and Devices then return ErrNotBuilt, whose text says what to
// install and how to build. The libibverbs backend is built with
//
//	apt-get install libibverbs-dev rdma-core   # headers, libibverbs, providers
//	apt-get install librdmacm-dev              # for hwverbs/rdmacm
//	go build -tags hwverbs ./...               # cgo must be enabled
//
// and needs libibverbs1 and the provider of the device (ibverbs-providers
// on Debian) where it runs, and librdmacm1 for hwverbs/rdmacm. The C code is in ibverbs.c, declared in
// ibverbs.h; the Go that calls it is in one *_cgo.go file per object
// (device_cgo.go, events_cgo.go, mr_cgo.go for PDs and MRs, cq_cgo.go,
// qp_cgo.go, post_cgo.go for the work request batches, srq_cgo.go for
// SRQs and AHs), all under the build constraint hwverbs && cgo && linux;
// stub.go, with the complementary constraint, stands in for them
// otherwise, as Go's os/user does. Built is true in the libibverbs build.
//
// # Memory
//
// The NIC reads and writes registered memory by its virtual address
// while the program runs, so that memory must neither move nor be freed
// while registered. RegMR accepts both kinds of buffer:
//
//   - memory from Alloc, mapped with mmap outside the Go heap: the
//     garbage collector never sees it; Free unmaps it after Dereg;
//   - ordinary Go memory (make([]byte, n)): RegMR pins the buffer's
//     backing array with a runtime.Pinner for the region's lifetime, and
//     Dereg (or Device.Close) unpins it. Go's collector does not move
//     heap objects and a pinned object is not freed, which is what the
//     cgo pointer rules ask of memory C keeps using after a call.
//
// Close the device (or Dereg every region) before dropping it: a pinned
// buffer whose Pinner becomes unreachable makes the runtime panic.
//
// Only C memory crosses into libibverbs on the data path: each QP, SRQ
// and CQ owns preallocated C arrays of work requests, scatter/gather
// elements and completions, PostSend, PostRecv and Poll translate into
// them and call a small C function that posts or polls a whole batch.
// They allocate nothing in Go.
//
// # GIDs
//
// A RoCE port has a table of GIDs: on rxe, index 0 holds the link-local
// IPv6 address made from the MAC and index 1 the IPv4-mapped address of
// the interface. Open chooses one the way perftest does (the first
// IPv4-mapped GID, then RoCE v2 over v1), unless Config names an index or
// an address. goroce's verbs number GIDs as the software device does, in
// which index 0 is the device's own GID, so hwverbs maps index 0 (of
// Device.GID, AHAttr.SGIDIndex and the address vector of Modify) to the
// chosen entry, and any other index to that entry of the table;
// Device.GIDIndex reports the table index behind index 0.
//
// # Events
//
// Each device runs one goroutine. It turns completion events
// (ibv_get_cq_event on the device's completion channel, each acknowledged
// at once with ibv_ack_cq_events) into a value on the CQ's C() channel,
// and asynchronous events (ibv_get_async_event) into Device.Events.
// Close stops it and waits for it.
//
// # FLUSH and ATOMIC_WRITE
//
// IBTA 1.5's FLUSH and ATOMIC_WRITE have no fields in ibv_post_send's
// work request: an RC QP of a device whose capability bits name them
// (Device.Caps, ibv_query_device_ex's device_cap_flags_ex: rxe from
// kernel 6.2) is made with ibv_create_qp_ex and their send_ops_flags,
// and PostSend posts them through the ibv_wr_* builders
// (ibv_wr_atomic_write, ibv_wr_flush), in order with the requests
// around them. ibv_wr_flush came with rdma-core 45; hwverbs builds with
// rdma-core 44's headers and finds the builder where rdma-core 45 put it
// at the end of struct ibv_qp_ex, on a QP that a library with it made.
// Where the device, or the libibverbs it runs with, has no such
// operation, PostSend refuses it with an error wrapping ErrUnsupported
// and EOPNOTSUPP, and sends nothing.
//
// # Errors
//
// An ibv call that fails returns an *Error holding the errno and, where
// one fits, the verbs sentinel error (verbs.ErrQueueFull for a full
// queue, verbs.ErrBusy for a PD still in use, …), so errors.Is works with
// both.
//
// # Connections
//
// Package hwverbs/rdmacm connects RC QPs of a Device through librdmacm
// (the kernel's rdma_cm), with the API of package cm: Listen, Accept,
// Dial, Close. Otherwise a program exchanges QPNs, PSNs and GIDs itself
// (as rdma-core's pingpong examples do over TCP) and calls roce.Connect.
//
// # Memory windows
//
// PD.AllocMW is ibv_alloc_mw; QP.BindMW binds a type 1 window
// (ibv_bind_mw), and a BIND_MW work request (SendWR.BindMW) a type 2
// window, whose new key keeps the window's upper 24 bits and takes the
// low byte the program chose (verbs.IncRKey). MW.RKey is ibv_mw.rkey as
// goroce keeps it: the key of the last bind posted. The device makes the
// checks and reports them as it does: MW_BIND_ERR for a bind it refuses,
// LOC_QP_OP_ERR for a LOCAL_INV it cannot carry out, a remote access
// error at the peer for an access outside a window, after its
// invalidation or, for a type 2 window, on another QP. hwverbs refuses
// before the device sees them what rxe's provider would crash on or
// libibverbs refuses (a bind without a region, a type 1 window in a work
// request, a key with other upper bits). A region with windows bound
// cannot be deregistered (verbs.ErrBusy; rxe returns EINVAL); Close
// deallocates windows first. rxe marks the receive of a SEND with
// invalidate with the kernel's IB_WC_WITH_INVALIDATE (1 << 2), which
// libibverbs calls IBV_WC_IP_CSUM_OK, and leaves the invalidated key out
// of the completion; hwverbs passes the flags on as they are. Kernel rxe
// checks a remote access through a window against the range of the
// region under it, not the window's (check_rkey in rxe_resp.c): a peer
// with a window's key reaches the whole region (TestCrossMW shows it);
// goroce's engine refuses an access outside the window.
//
// # UD
//
// Address handles always carry a GRH, as RoCE needs. A UD receive buffer
// starts with the 40-byte GRH area the device fills in (for IPv4, 20 zero
// bytes then the IPv4 header), so a receive for an MTU-sized message
// needs MTU+40 bytes.
package hwverbs
