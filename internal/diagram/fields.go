package diagram

import (
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// fields describes every decoded field of a record, a line per header, for
// the HTML page's hover text.
func fields(r *Record) string {
	var b strings.Builder
	b.WriteString("frame " + strconv.Itoa(r.Frame) + " at " + seconds(r.Time) + " s, " + strconv.Itoa(r.WireLen) + " B on the wire\n")
	if r.Src.IsValid() {
		b.WriteString(endpoint(r.Src.String(), r.SrcPort) + " -> " + endpoint(r.Dst.String(), r.DstPort) + "\n")
	}
	if r.Malformed != "" {
		b.WriteString("malformed: " + r.Malformed)
		return b.String()
	}
	f := &r.BTH
	b.WriteString("BTH " + f.Opcode.String() + " (" + hexPad(uint64(f.Opcode), 2) + ") dest_qp=" + uitoa(uint64(f.DestQP)) +
		" psn=" + uitoa(uint64(f.PSN)) + " flags=" + flagString(f) + " pad=" + uitoa(uint64(f.PadCount)) +
		" pkey=" + hexPad(uint64(f.PKey), 4) + " tver=" + uitoa(uint64(f.TVer)) + "\n")
	headerFields(&b, r)
	if r.MAD != nil {
		madFields(&b, r.MAD)
	}
	b.WriteString("payload " + strconv.Itoa(r.PayloadLen) + " B, ICRC ")
	switch {
	case r.Truncated:
		b.WriteString("not checked (the capture cut the packet short)")
	case r.ICRCOK:
		b.WriteString("ok")
	default:
		b.WriteString("BAD")
	}
	return b.String()
}

// endpoint formats an address and port, brackets around IPv6 addresses.
func endpoint(addr string, port uint16) string {
	if strings.Contains(addr, ":") {
		addr = "[" + addr + "]"
	}
	return addr + ":" + strconv.Itoa(int(port))
}

// flagString shows AckReq, SE, MigReq, FECN and BECN as A, S, M, F, B, or
// '.' for each bit not set, as the decode tool does.
func flagString(f *bth.BTHFields) string {
	b := []byte(".....")
	for i, on := range [5]bool{f.AckReq, f.SE, f.MigReq, f.FECN, f.BECN} {
		if on {
			b[i] = "ASMFB"[i]
		}
	}
	return string(b)
}

// headerFields writes a line per extension header the opcode carries.
func headerFields(b *strings.Builder, r *Record) {
	info := r.BTH.Opcode.Info()
	line := func(h bth.Header, s string) {
		if info.Has(h) {
			b.WriteString(s + "\n")
		}
	}
	line(bth.HdrRDETH, "RDETH eecnxt="+hex(uint64(r.RDETH.EECnxt)))
	line(bth.HdrDETH, "DETH qkey="+hexPad(uint64(r.DETH.QKey), 8)+" src_qp="+uitoa(uint64(r.DETH.SrcQP)))
	line(bth.HdrFETH, "FETH selectivity="+uitoa(uint64(r.FETH.Selectivity))+" placement="+uitoa(uint64(r.FETH.Placement)))
	line(bth.HdrRETH, "RETH va="+hex(r.RETH.VA)+" rkey="+hex(uint64(r.RETH.RKey))+" len="+uitoa(uint64(r.RETH.DMALen)))
	line(bth.HdrAtomicETH, "AtomicETH va="+hex(r.AtomicETH.VA)+" rkey="+hex(uint64(r.AtomicETH.RKey))+
		" swap_add="+uitoa(r.AtomicETH.SwapAdd)+" compare="+uitoa(r.AtomicETH.Compare))
	line(bth.HdrAETH, "AETH "+r.AETH.Syndrome.String()+" msn="+uitoa(uint64(r.AETH.MSN)))
	line(bth.HdrAtomicAckETH, "AtomicAckETH orig="+uitoa(r.AtomicAckETH.Orig))
	line(bth.HdrImmDt, "ImmDt imm="+hexPad(uint64(r.ImmDt.Imm), 8))
	line(bth.HdrIETH, "IETH rkey="+hex(uint64(r.IETH.RKey)))
}

// madFields writes the MAD header and the CM fields.
func madFields(b *strings.Builder, m *MAD) {
	b.WriteString("MAD class=" + hexPad(uint64(m.Class), 2) + " method=" + m.Method.String() +
		" attr=" + mad.AttrName(m.AttrID) + " tid=" + hex(m.TID) + "\n")
	if m.CMError != "" {
		b.WriteString("CM does not decode: " + m.CMError + "\n")
	}
	c := m.CM
	if c == nil {
		return
	}
	b.WriteString("CM local_comm_id=" + hexPad(uint64(c.LocalCommID), 8) + " remote_comm_id=" + hexPad(uint64(c.RemoteCommID), 8))
	switch m.AttrID {
	case mad.AttrREQ:
		b.WriteString(" service_id=" + hexPad(c.ServiceID, 16) + " local_qpn=" + uitoa(uint64(c.LocalQPN)) +
			" starting_psn=" + uitoa(uint64(c.StartingPSN)))
	case mad.AttrREP:
		b.WriteString(" local_qpn=" + uitoa(uint64(c.LocalQPN)) + " starting_psn=" + uitoa(uint64(c.StartingPSN)))
	case mad.AttrDREQ:
		b.WriteString(" remote_qpn=" + uitoa(uint64(c.RemoteQPN)))
	case mad.AttrREJ:
		b.WriteString(" rejected=" + c.Rejected.String() + " reason=" + strconv.Itoa(int(c.Reason)) + " (" + c.Reason.String() + ")")
	case mad.AttrMRA:
		b.WriteString(" mraed=" + c.MRAed.String())
	}
	b.WriteString("\n")
}

// seconds formats a time since the start of the capture as the decode
// tool does: seconds with six decimals.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }
