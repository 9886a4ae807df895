// Package roce is goroce's public API: RDMA verbs over RoCEv2, in pure Go.
//
// Open returns a software RDMA device that speaks RoCEv2 over a UDP socket
// (the default; no privileges needed), raw Ethernet frames (afpacket) or
// an in-memory network (mem, for tests). The device has the shape of
// libibverbs: protection domains, memory regions, completion queues,
// queue pairs (RC, UC, UD), shared receive queues and address handles,
// with the same work requests, completions and attribute rules, so code
// written against ibverbs reads the same here. Package hwverbs gives the
// same interfaces over libibverbs, for real RNICs and kernel rxe, so a
// program switches backend in one line.
//
// Connect moves a QP to RTS towards a peer once the two sides have
// exchanged their QP numbers, PSNs and GIDs (out of band, or through
// package cm's rdma_cm-compatible connection manager). Trace wraps a
// device so that every step a program takes is logged through log/slog,
// the way the tutorials narrate an RDMA program.
//
// The work requests, completions, statuses, attributes, errors and the
// Device, PD, QP, CQ, ... interfaces are package verbs'; programs use
// them from there.
package roce
