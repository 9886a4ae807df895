package decode

import (
	"io"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/bth"
)

// flowKey names one direction of a connection: the packets from src to dst
// for one destination QP.
type flowKey struct {
	src, dst netip.Addr
	qp       uint32
}

// flowStats are the totals of one flow.
type flowStats struct {
	key       flowKey
	transport bth.Transport // of the flow's first packet
	packets   int
	bytes     int // frame lengths on the wire
	payload   int // RoCE payload bytes
	truncated int
	// messages counts new messages by operation: First and Only packets
	// that are not retransmissions.
	messages [bth.OpCNP + 1]int
	acks     int     // ACKNOWLEDGE and ATOMIC ACKNOWLEDGE packets with an ACK syndrome
	naks     [32]int // ... with a NAK syndrome, by NAK code
	rnrNaks  int     // ... with an RNR NAK syndrome
	cnps     int     // congestion notification packets
	retrans  int     // retransmitted requests: see flowSink.add
	resent   int     // RDMA READ response packets whose PSN the flow carried before
	icrcBad  int     // ICRC failures
	seen     map[bth.PSN]struct{}
	reads    []readRequest // the latest RDMA READ requests, for their PSN spans
}

// readRequest is an RDMA READ request: its PSN and the length it asks
// for, which its responses carry in consecutive PSNs.
type readRequest struct {
	psn    bth.PSN
	dmaLen uint32
}

// maxReads bounds the READ requests a flow remembers.
const maxReads = 4096

// hostPair names the two ends of a path, in a fixed order.
type hostPair struct{ a, b netip.Addr }

func pairOf(x, y netip.Addr) hostPair {
	if y.Less(x) {
		x, y = y, x
	}
	return hostPair{x, y}
}

// flowSink adds up the RoCE packets of a capture per flow and prints the
// totals at the end, flows in the order they first appear.
type flowSink struct {
	w         *errWriter
	flows     map[flowKey]*flowStats
	pmtu      map[hostPair]int // the largest First or Middle payload seen between two hosts
	order     []*flowStats
	roce      int
	other     int
	malformed int
	truncated int
	icrcBad   int
}

func newFlowSink(w io.Writer) *flowSink {
	return &flowSink{w: &errWriter{w: w}, flows: map[flowKey]*flowStats{}, pmtu: map[hostPair]int{}}
}

// isRequest reports whether op is sent by a requester and so carries a new
// PSN unless it is a retransmission.
func isRequest(op bth.Operation) bool {
	switch op {
	case bth.OpSend, bth.OpWrite, bth.OpReadRequest, bth.OpCompareSwap, bth.OpFetchAdd, bth.OpFlush,
		bth.OpAtomicWrite:
		return true
	}
	return false
}

func (s *flowSink) add(rec *packetRecord) {
	switch rec.kind {
	case kindOther:
		s.other++
		return
	case kindMalformed:
		s.malformed++
		return
	}
	if rec.madMalformedOnly {
		s.malformed++
	}
	s.roce++
	r := rec.roce
	k := flowKey{src: rec.src, dst: rec.dst, qp: r.BTH.DestQP}
	fs := s.flows[k]
	if fs == nil {
		fs = &flowStats{key: k, transport: r.BTH.Opcode.Transport(), seen: map[bth.PSN]struct{}{}}
		s.flows[k] = fs
		s.order = append(s.order, fs)
	}
	fs.packets++
	fs.bytes += rec.wireLen
	fs.payload += rec.payloadLen
	if rec.truncated {
		fs.truncated++
		s.truncated++
	} else if !rec.icrcOK {
		fs.icrcBad++
		s.icrcBad++
	}
	info := r.BTH.Opcode.Info()
	pair := pairOf(rec.src, rec.dst)
	if (info.Position == bth.PosFirst || info.Position == bth.PosMiddle) && rec.payloadLen > s.pmtu[pair] {
		s.pmtu[pair] = rec.payloadLen // First and Middle packets carry a whole path MTU
	}
	switch info.Operation {
	case bth.OpAcknowledge, bth.OpAtomicAcknowledge:
		switch syn := r.AETH.Syndrome; syn.Kind() {
		case bth.KindACK:
			fs.acks++
		case bth.KindRNRNAK:
			fs.rnrNaks++
		case bth.KindNAK:
			fs.naks[syn.Value()]++
		}
		return
	case bth.OpCNP:
		fs.cnps++
		return
	}
	psn := r.BTH.PSN
	_, again := fs.seen[psn]
	fs.seen[psn] = struct{}{}
	switch {
	case isRequest(info.Operation):
		// A request is a retransmission when its PSN was sent before,
		// or lies in the PSNs of an earlier READ's responses: a requester
		// re-issues a partly answered READ from the first missing one.
		if !again {
			again = fs.inReadSpan(psn, s.pmtu[pair])
		}
		if again {
			fs.retrans++
			return
		}
		if info.Operation == bth.OpReadRequest {
			if len(fs.reads) == maxReads {
				fs.reads = append(fs.reads[:0], fs.reads[maxReads/2:]...)
			}
			fs.reads = append(fs.reads, readRequest{psn: psn, dmaLen: r.RETH.DMALen})
		}
	case info.Operation == bth.OpReadResponse && again:
		fs.resent++
		return
	}
	if info.Position == bth.PosFirst || info.Position == bth.PosOnly {
		fs.messages[info.Operation]++
	}
}

// inReadSpan reports whether psn is one of the response PSNs of an earlier
// READ request of the flow, for path MTU pmtu (0 when not known yet: then
// each READ spans one PSN).
func (fs *flowStats) inReadSpan(psn bth.PSN, pmtu int) bool {
	for _, rr := range fs.reads {
		span := uint32(1)
		if pmtu > 0 && rr.dmaLen > uint32(pmtu) {
			span = (rr.dmaLen + uint32(pmtu) - 1) / uint32(pmtu)
		}
		if psn.InWindow(rr.psn, span) {
			return true
		}
	}
	return false
}

func (s *flowSink) finish() error {
	w := s.w
	for _, fs := range s.order {
		printf(w, "flow %s -> %s qp 0x%06x %s\n", fs.key.src, fs.key.dst, fs.key.qp, fs.transport)
		printf(w, "  packets %d, bytes %d, payload bytes %d, truncated %d\n", fs.packets, fs.bytes, fs.payload,
			fs.truncated)
		var parts []string
		for op, n := range fs.messages {
			if n > 0 {
				parts = append(parts, bth.Operation(op).String()+" "+itoa(n))
			}
		}
		printf(w, "  messages: %s\n", joinOrNone(parts))
		parts = parts[:0]
		if fs.acks > 0 {
			parts = append(parts, "ACK "+itoa(fs.acks))
		}
		for code, n := range fs.naks {
			if n > 0 {
				parts = append(parts, "NAK "+bth.NAKCode(code).String()+" "+itoa(n))
			}
		}
		if fs.rnrNaks > 0 {
			parts = append(parts, "RNR_NAK "+itoa(fs.rnrNaks))
		}
		if fs.cnps > 0 {
			parts = append(parts, "CNP "+itoa(fs.cnps))
		}
		printf(w, "  acknowledgements: %s\n", joinOrNone(parts))
		printf(w, "  retransmitted requests %d, resent read responses %d, ICRC failures %d\n", fs.retrans, fs.resent,
			fs.icrcBad)
	}
	printf(w, "total: %d flows, %d RoCE packets (%d truncated, %d ICRC failures), %d non-RoCE packets, %d malformed\n",
		len(s.order), s.roce, s.truncated, s.icrcBad, s.other, s.malformed)
	return w.err
}

func joinOrNone(parts []string) string {
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
