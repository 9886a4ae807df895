// Package stress holds goroce's load and attack suite: real devices over
// UDP loopback (127.0.0.0/8 addresses, roce.Open with the udp transport),
// driven the way an operator meets them, with a hostile sender that builds
// its own packets (package bth) where a case needs one. The package has
// no API; its tests are the suite:
//
//   - TestSoak: 64 RC connections run every operation (SEND, SEND with
//     immediate, WRITE, WRITE with immediate, READ, both atomics) with
//     random sizes up to 1 MiB and random scatter/gather lists, at 0 %,
//     1 % and 5 % loss with duplication and reordering; every byte and
//     every completion is checked, and resident memory and goroutines
//     must stay flat once warm.
//   - TestFlood: a hostile sender floods a responder in the middle of a
//     transfer with every kind of bad packet; the protected memory must
//     stay unchanged, every packet must be counted under its reason, and
//     the transfer's throughput during the flood is reported.
//   - TestExhaustion: a peer tries to exhaust state: rdma_cm REQs that
//     never finish, READs beyond the responder resources, a peer that goes
//     silent with READs outstanding, 10,000 connections opened and
//     dropped. Every table must stay within its configured bound.
//   - TestManyQPs: 10,000 connected QPs on one device: memory per idle QP,
//     time to connect them, traffic over a random subset.
//   - TestKeyGuessing: an attacker who knows a valid address range guesses
//     rkeys; the rate the engine absorbs them and the expected time to a
//     hit are reported.
//
// The suite runs on Linux (its sockets' options, /proc for the kernel's
// drops and the process's memory); elsewhere the package is empty.
//
// Each case logs its figures (go test -v) and ends with a summary line.
// `go test ./stress` runs the short versions (part of make test); with
// GOROCE_SOAK set to a duration (make soak sets 1h) the soak runs that
// long and the other cases run their long versions.
package stress
