// Package oob speaks the out-of-band TCP exchanges that rdma-core's example
// programs (ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong,
// ibv_srq_pingpong) and perftest (ib_write_bw, ib_read_bw, ib_send_bw,
// ib_atomic_bw, ib_*_lat, without -R) use on TCP port 18515 to swap queue
// pair numbers, PSNs, GIDs and memory keys before any RDMA traffic. Both
// roles are implemented, so goroce can stand in for either end of those
// tools.
//
// # Pingpong (rdma-core v44, libibverbs/examples/*_pingpong.c)
//
// Each side has one entry per QP, 52 bytes of text:
//
//	"%04x:%06x:%06x:%s\0"   lid:qpn:psn:gid  (gid = 32 hex digits, raw byte order)
//
// The client connects and writes its entries; the server reads them, moves
// its QP to RTR with them, and writes its own; the client reads those and
// writes "done\0", which the server waits for. rc, uc and ud send one entry
// per side; srq always sends 256 (MAX_QP), the unused ones being the text
// form of an all-zero entry ("0000:000000:000000:000…0\0"). PingpongClient
// runs the client side; PingpongServer splits the server side in two
// (ReadDests, then Reply) so that the caller can bring its QP up between
// them.
//
// # perftest (v4.5-0.17 and 25.01.0-0.80, src/perftest_communication.c)
//
// Debian 12 ships perftest 4.5-0.17, which announces "6.06", and Debian 13
// 25.01.0-0.80, which announces "6.24". Their TCP exchanges differ in one
// place: the newer one ends without "done\0" (CloseConnection takes
// either).
//
// A Perftest session runs one step per method. In every exchange the client
// writes and then reads, and the server reads and then writes, the same
// number of bytes:
//
//	ExchangeVersions  16 bytes, "6.06" NUL-padded; peers older than 5.70 are refused
//	CheckSysData      4 + 4 bytes, big-endian cycle_buffer and cache_line_size (peer >= 5.32); the larger wins
//	CheckMTU          "3\0": the ASCII ibv_mtu enum (4 bytes for peers < 5.31, none < 5.1); the smaller wins
//	HandShake         108 bytes: lid:out_reads:qpn:psn:rkey:vaddr:gid[0]:…:gid[15]:srqn: + NUL
//	Barrier           one more HandShake with the first local entry
//	ExchangeBWReports 8-byte big-endian size, iters (4 bytes for peers < 5.33), bw_peak,
//	                  bw_avg, msgRate_avg (IEEE 754 doubles, big-endian)
//	CloseConnection   a HandShake, then "done\0" each way; perftest 23.10 (6.17) and
//	                  later send no "done\0" and close the connection instead
//
// The tools chain these steps differently; with N QPs (from the v4.5-0.17
// sources, confirmed by the captures in testdata/captures; 25.01 chains
// them the same way for these tests):
//
//	ib_write_bw, ib_read_bw, ib_atomic_bw: versions, sys data, MTU, N handshakes,
//	    N handshakes, barrier; traffic; barrier, BW reports, close
//	ib_send_bw:  versions, sys data, MTU, N handshakes, barrier, N handshakes,
//	    barrier; traffic; close (no reports unless duplex)
//	ib_send_lat: versions, sys data, MTU, N handshakes, barrier, N handshakes,
//	    barrier; traffic; close
//	ib_read_lat: versions, sys data, MTU, a handshake of the first entry,
//	    N handshakes, N handshakes, barrier; traffic; close
//	ib_write_lat: as ib_read_lat, but the connection just closes after the
//	    traffic (no close handshake, no "done")
//
// (A barrier is a handshake of the first entry again; the peer's answer
// carries nothing new.)
//
// perftest gates parts of the exchange on the peer's version, comparing
// atof of the version string with 5.1, 5.31, 5.32 and 5.33 (some of those
// comparisons in single precision); Compat reproduces that. A newer peer
// (perftest 6.28 and later add a parameter negotiation) checks our version
// the same way and falls back to the 6.06 exchange, so announcing "6.06" is
// what keeps them compatible.
//
// With -R (rdma_cm) perftest carries the version, system data, MTU and
// report messages unchanged in RC SENDs, one message per SEND, but the
// per-QP handshake is a 56-byte binary struct instead of the 108-byte text
// (PerftestDest.EncodeCM, ParsePerftestDestCM), there is no "done\0", and
// two all-zero handshakes precede the real ones
// (rxe_write_bw_rdmacm.pcap). The codec functions (Encode*, Parse*) work on
// byte slices and know nothing of net.Conn, so that transport can reuse
// them.
//
// # Errors and time limits
//
// Every read and write of a step is bounded: by the context's deadline when
// it has one, or else by Config.Timeout. Cancelling the context interrupts
// the step. Errors are *Error values naming the step, what was expected and
// what came; they wrap one of the sentinel errors (ErrFormat, ErrClosed,
// ErrTimeout, ErrVersion, ErrIO, ErrInvalid) or the context's error, for
// errors.Is.
package oob
