package udp

import (
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/stats"
)

// receiver checks received datagrams and hands the RoCE packets in them to
// the handler in batches. It is not safe for concurrent use: each receive
// goroutine has its own.
type receiver struct {
	h         transport.Handler
	batch     []transport.Packet // len 0 between datagrams, cap = batch size
	parsed    []bth.Packet       // batch[i].Parsed is &parsed[i]; as long as batch's cap
	solver    bth.IDSolver
	localPort uint16
	maxPacket int // 0: no limit
	stats     *stats.Counters

	// Counts not yet added to stats.
	packets, bytes, icrcErrors, malformed uint64
}

func newReceiver(h transport.Handler, batch int, localPort uint16, counts *stats.Counters) *receiver {
	batch = max(batch, 1)
	return &receiver{
		h:         h,
		batch:     make([]transport.Packet, 0, batch),
		parsed:    make([]bth.Packet, batch),
		localPort: localPort,
		stats:     counts,
	}
}

// datagram takes one received UDP payload, from src to dst with TOS tos.
// A GRO datagram is a train of segments of seg bytes each (the last may be
// shorter); seg <= 0 means one packet. Each IPv4 packet's ID is recovered
// with the solver, in one CRC pass; when it is the ID a goroce socket sender
// uses (0, or the segment index of a GSO send) that is the same as checking
// the ICRC with the expected ID.
func (r *receiver) datagram(buf []byte, src netip.AddrPort, dst netip.Addr, tos uint8, seg int) {
	if len(buf) == 0 {
		r.malformed++
		return
	}
	if seg <= 0 || seg > len(buf) {
		seg = len(buf)
	}
	flow := bth.Flow{
		Src:     src.Addr(),
		Dst:     dst,
		SrcPort: src.Port(),
		DstPort: r.localPort,
		DF:      true,
	}
	ipv4 := flow.IsIPv4()
	if ipv4 != dst.Unmap().Is4() {
		r.malformed += uint64((len(buf) + seg - 1) / seg)
		return
	}
	for off := 0; off < len(buf); off += seg {
		data := buf[off:min(off+seg, len(buf))]
		// Parsed into the slot of the batch the packet takes if it is
		// good; a bad one leaves the slot to the next.
		parsed := &r.parsed[len(r.batch)]
		if len(data) < bth.BTHLen+bth.ICRCLen || (r.maxPacket > 0 && len(data) > r.maxPacket) ||
			parsed.Parse(data) != nil {
			r.malformed++
			continue
		}
		var id uint16
		rxeFlush := false
		if ipv4 {
			var ok bool
			// One CRC pass: the solver returns the ID that fits, which
			// is the full check when it is the expected one.
			if id, ok = r.solver.Recover(&flow, data); !ok {
				recover := func(d []byte) bool { id, ok = r.solver.Recover(&flow, d); return ok }
				if rxeFlush = transport.VerifyFlushRXE(data, recover); !rxeFlush {
					r.icrcErrors++
					continue
				}
			}
		} else if !flow.Verify(data) {
			if rxeFlush = transport.VerifyFlushRXE(data, flow.Verify); !rxeFlush {
				r.icrcErrors++
				continue
			}
		}
		r.packets++
		r.bytes += uint64(len(data))
		r.batch = append(r.batch, transport.Packet{
			Data:    data,
			Src:     flow.Src,
			Dst:     flow.Dst,
			SrcPort: flow.SrcPort,
			TOS:     tos,
			IPID:    id,
			Parsed:  parsed,

			RXEFlushICRC: rxeFlush,
		})
		if len(r.batch) == cap(r.batch) {
			r.flush()
		}
	}
}

// flush counts what was received and hands the batch to the handler, so
// that the counters include a packet by the time the handler sees it.
func (r *receiver) flush() {
	r.commit()
	if len(r.batch) == 0 {
		return
	}
	r.h(r.batch)
	clear(r.batch) // drop references to the buffers
	r.batch = r.batch[:0]
}

// commit adds the counts gathered since the last commit to the stats.
func (r *receiver) commit() {
	r.stats.AddRx(r.packets, r.bytes, r.icrcErrors, r.malformed)
	r.packets, r.bytes, r.icrcErrors, r.malformed = 0, 0, 0, 0
}
