// Package congestion holds goroce's congestion control and loss recovery
// machines, as plain data driven by events and the time they happen at:
// no timer, no goroutine, no lock. The engine (package qp) keeps one set
// per queue pair and calls them from the QP's own paths, with the time
// its clock gives, so that a machine's behaviour follows from its inputs
// alone and the tests can check it against the equations it comes from.
//
//   - RTT: the round-trip time estimate of RFC 6298, from the samples the
//     engine takes of its ACKs.
package congestion
