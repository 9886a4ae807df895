package diagram

import (
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// opName returns an opcode's name as the diagram shows it: RC opcodes
// without their transport ("RDMA WRITE FIRST"), others with it ("UC SEND
// ONLY"), words apart.
func opName(op bth.Opcode) string {
	n := strings.TrimPrefix(op.String(), "RC_")
	return strings.ReplaceAll(n, "_", " ")
}

// opRange names the opcodes of a burst: "RDMA WRITE FIRST..LAST", the
// words the two share said once, or one name when they are the same.
func opRange(first, last bth.Opcode) string {
	if first == last {
		return opName(first)
	}
	a, b := strings.Fields(opName(first)), strings.Fields(opName(last))
	n := 0
	for n < len(a)-1 && n < len(b)-1 && a[n] == b[n] {
		n++
	}
	head := strings.Join(a[:n], " ")
	if head != "" {
		head += " "
	}
	return head + strings.Join(a[n:], " ") + ".." + strings.Join(b[n:], " ")
}

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// hexPad formats v in hex with at least digits digits.
func hexPad(v uint64, digits int) string {
	s := strconv.FormatUint(v, 16)
	if len(s) < digits {
		s = strings.Repeat("0", digits-len(s)) + s
	}
	return "0x" + s
}

// label returns the arrow text of one packet: what it is, its PSN and
// the numbers that matter for its kind.
func label(r *Record) string {
	if r.MAD != nil {
		return madLabel(r.MAD)
	}
	f := &r.BTH
	psn := ", PSN " + uitoa(uint64(f.PSN))
	info := f.Opcode.Info()
	var s string
	switch info.Operation {
	case bth.OpAcknowledge:
		s = ackLabel(r.AETH.Syndrome) + psn
		if r.AETH.Syndrome.Kind() == bth.KindACK {
			s += ", MSN " + uitoa(uint64(r.AETH.MSN))
		}
	case bth.OpAtomicAcknowledge:
		s = opName(f.Opcode) + psn + ", original " + hex(r.AtomicAckETH.Orig)
	case bth.OpReadRequest:
		s = opName(f.Opcode) + psn + ", " + uitoa(uint64(r.RETH.DMALen)) + " B"
	case bth.OpCompareSwap:
		s = opName(f.Opcode) + psn + ", compare " + hex(r.AtomicETH.Compare) + " swap " + hex(r.AtomicETH.SwapAdd)
	case bth.OpFetchAdd:
		s = opName(f.Opcode) + psn + ", add " + uitoa(r.AtomicETH.SwapAdd)
	case bth.OpCNP:
		s = opName(f.Opcode)
	default:
		s = opName(f.Opcode) + psn + ", " + strconv.Itoa(r.PayloadLen) + " B" + extras(r)
	}
	return s + ecn(f)
}

// extras names the immediate data or the key to invalidate a packet
// carries.
func extras(r *Record) string {
	info := r.BTH.Opcode.Info()
	s := ""
	if info.Has(bth.HdrImmDt) {
		s += ", imm " + hexPad(uint64(r.ImmDt.Imm), 8)
	}
	if info.Has(bth.HdrIETH) {
		s += ", invalidate rkey " + hex(uint64(r.IETH.RKey))
	}
	return s
}

// ecn marks the congestion bits.
func ecn(f *bth.BTHFields) string {
	s := ""
	if f.FECN {
		s += ", FECN"
	}
	if f.BECN {
		s += ", BECN"
	}
	return s
}

// ackLabel names an AETH syndrome: "ACK", "NAK PSN sequence error" or
// "RNR NAK 7.68ms".
func ackLabel(syn bth.Syndrome) string {
	switch syn.Kind() {
	case bth.KindACK:
		return "ACK"
	case bth.KindRNRNAK:
		return "RNR NAK " + bth.RNRTimerDuration(syn.Value()).String()
	case bth.KindNAK:
		return "NAK " + nakName(syn.NAKCode())
	}
	return "ACKNOWLEDGE with reserved syndrome " + hex(uint64(syn))
}

// madLabel names a MAD: "CM REQ", or its class and attribute.
func madLabel(m *MAD) string {
	if m.Class == mad.ClassCM {
		return "CM " + mad.AttrName(m.AttrID)
	}
	return "MAD class " + hexPad(uint64(m.Class), 2) + " " + m.Method.String() + " attribute " + hexPad(uint64(m.AttrID), 4)
}

// frames refers to the frames of records first and last.
func frames(first, last *Record) string {
	if first == last {
		return "frame " + strconv.Itoa(first.Frame)
	}
	return "frames " + strconv.Itoa(first.Frame) + "-" + strconv.Itoa(last.Frame)
}
