// Package congestion holds goroce's congestion control and loss recovery
// machines, as plain data driven by events and the time they happen at:
// no timer, no goroutine, no lock, no allocation. The engine (package qp)
// keeps one set per queue pair and calls them from the QP's own paths
// with the time its clock gives, so that a machine's behaviour follows
// from its inputs alone and tests check it against the equations it comes
// from (the DCQCN machine also against a slow reference, dcqcn_test.go).
//
//   - RTT: the round-trip time estimate of RFC 6298, from the ACKs.
//   - ReactionPoint: DCQCN's sender side (Zhu et al., SIGCOMM 2015), the
//     rate a flow paces at from the CNPs its receiver sends for
//     CE-marked packets, with ConnectX's rp_ settings and defaults.
//   - Window: a delay-based window after Swift (Kumar et al., SIGCOMM
//     2020), for paths where nothing marks ECN, whose loss response does
//     not take a loss with no queue behind it for congestion.
//   - Pacer: the token bucket that spaces packets at a rate.
//
// Config says which a queue pair runs (Mode) and with which settings;
// its zero value is the defaults, and Resolved checks and fills it.
package congestion
