// Package uverbs serves a goroce device to programs in other processes, as
// the kernel's uverbs serves an RDMA driver to libibverbs: it is the
// device side of `roce device`, and libgoroce, the C library programs load
// (LD_PRELOAD), is the other side. Every process on the host that opens
// the device gets a session over a Unix control socket and shares one
// engine, one address and one UDP port, as the processes on a host share
// rxe0.
//
// The control socket carries the slow verbs (open, PD, MR, CQ, QP, SRQ and
// AH creation and destruction, ibv_modify_qp, queries), one request and
// one reply at a time (package abi has the messages). The fast ones go
// through shared memory, as a NIC's do: the library writes work requests
// into the rings of its send and receive queues and rings a doorbell; the
// session's worker copies them out, checks them and posts them to the
// engine; the engine's completions go straight into the CQ's ring (a
// qp.CQSink), where the program's ibv_poll_cq reads them without a system
// call. Registered memory is shared too: the library maps the pages of a
// region from a file the device maps as well, so that the engine places a
// WRITE's payload in the program's memory, and sends from it, with the
// copies the pure-Go engine makes and no more.
//
// # What a session owns
//
// A session's objects (PDs, MRs, MWs, CQs, QPs, SRQs, AHs, completion
// channels) are named by handles that mean nothing to another session. A
// session ends when its control socket closes, which the kernel does when
// the process exits however it exits: then its QPs are destroyed (their
// peers see them go silent, as a dead process's rxe QPs do), its regions
// deregistered and unmapped, and the rest freed.
//
// # Trust
//
// Nothing a program writes is trusted: the worker copies each work request
// out of the ring before it reads it, bounds every count by what the
// queue was created with, and the engine checks every SGE against the
// regions of the QP's PD, so a bad address, length or key is an error
// completion, never an access outside the program's own registered memory.
// The files the device maps are sealed against shrinking, so no access
// faults.
//
// # Locks
//
// session.mu serializes a session's control requests and its worker's
// drains; it is taken before any engine lock (a QP's, a CQ's). A CQ's sink
// has a lock of its own, taken under the engine's CQ lock when a
// completion is pushed and alone when the CQ is resized. Server.mu guards
// the sessions and the map that routes the engine's asynchronous events;
// it is never held while a session's lock is taken.
package uverbs
