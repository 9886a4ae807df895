package decode

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/layers"
)

// recordSink receives the decoded frames of one capture.
type recordSink interface {
	add(*packetRecord)
	// finish writes what the sink kept for the end and reports the first
	// write error.
	finish() error
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

// Write writes p unless an earlier write failed.
func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// textSink prints one line per RoCE or malformed frame.
type textSink struct {
	w   *errWriter
	buf []byte
}

func newTextSink(w io.Writer) *textSink { return &textSink{w: &errWriter{w: w}} }

func (s *textSink) finish() error { return s.w.err }

// endpoint formats ip:port, with brackets for IPv6.
func endpoint(b []byte, a netip.Addr, port uint16) []byte {
	return netip.AddrPortFrom(a, port).AppendTo(b)
}

func (s *textSink) add(rec *packetRecord) {
	if rec.kind == kindOther {
		return
	}
	b := s.buf[:0]
	b = strconv.AppendInt(b, int64(rec.frame), 10)
	b = append(b, ' ')
	b = strconv.AppendFloat(b, rec.time, 'f', 6, 64)
	if rec.hasAddr {
		b = append(b, ' ')
		b = endpoint(b, rec.src, rec.sport)
		b = append(b, " -> "...)
		b = endpoint(b, rec.dst, rec.dport)
	}
	if rec.kind == kindMalformed {
		b = append(b, " malformed: "...)
		b = append(b, rec.malformed...)
		b = append(b, '\n')
		s.buf = b
		s.w.Write(b)
		return
	}
	b = appendSummary(b, rec)
	b = append(b, '\n')
	s.buf = b
	s.w.Write(b)
}

// appendSummary appends the one-line description of a RoCE packet:
// opcode, QP, PSN, flags, extension headers, payload length and ICRC.
func appendSummary(b []byte, rec *packetRecord) []byte {
	r := rec.roce
	f := &r.BTH
	b = append(b, ' ')
	b = append(b, f.Opcode.String()...)
	b = appendHexField(b, " qp=", uint64(f.DestQP), 6)
	b = appendUintField(b, " psn=", uint64(f.PSN))
	b = append(b, ' ')
	b = append(b, flagChar(f.AckReq, 'A'), flagChar(f.SE, 'S'), flagChar(f.MigReq, 'M'),
		flagChar(f.FECN, 'F'), flagChar(f.BECN, 'B'))
	if f.PadCount != 0 {
		b = appendUintField(b, " pad=", uint64(f.PadCount))
	}
	if f.PKey != bth.DefaultPKey {
		b = appendHexField(b, " pkey=", uint64(f.PKey), 4)
	}
	if f.TVer != 0 {
		b = appendUintField(b, " tver=", uint64(f.TVer))
	}
	if r.Has(bth.HdrRDETH) {
		b = appendHexField(b, " RDETH eecnxt=", uint64(r.RDETH.EECnxt), 6)
	}
	if r.Has(bth.HdrDETH) {
		b = appendHexField(b, " DETH qkey=", uint64(r.DETH.QKey), 8)
		b = appendHexField(b, " srcqp=", uint64(r.DETH.SrcQP), 6)
	}
	if r.Has(bth.HdrFETH) {
		b = appendUintField(b, " FETH sel=", uint64(r.FETH.Selectivity))
		b = appendUintField(b, " placement=", uint64(r.FETH.Placement))
	}
	if r.Has(bth.HdrRETH) {
		b = appendHexField(b, " RETH va=", r.RETH.VA, 0)
		b = appendHexField(b, " rkey=", uint64(r.RETH.RKey), 0)
		b = appendUintField(b, " len=", uint64(r.RETH.DMALen))
	}
	if r.Has(bth.HdrAtomicETH) {
		b = appendHexField(b, " AtomicETH va=", r.AtomicETH.VA, 0)
		b = appendHexField(b, " rkey=", uint64(r.AtomicETH.RKey), 0)
		b = appendUintField(b, " swap_add=", r.AtomicETH.SwapAdd)
		b = appendUintField(b, " compare=", r.AtomicETH.Compare)
	}
	if r.Has(bth.HdrAETH) {
		b = append(b, " AETH "...)
		b = appendSyndrome(b, r.AETH.Syndrome)
		b = appendUintField(b, " msn=", uint64(r.AETH.MSN))
	}
	if r.Has(bth.HdrAtomicAckETH) {
		b = appendUintField(b, " orig=", r.AtomicAckETH.Orig)
	}
	if r.Has(bth.HdrImmDt) {
		b = appendHexField(b, " imm=", uint64(r.ImmDt.Imm), 8)
	}
	if r.Has(bth.HdrIETH) {
		b = appendHexField(b, " IETH rkey=", uint64(r.IETH.RKey), 0)
	}
	if m := rec.mad; m != nil {
		b = append(b, " MAD "...)
		b = appendName(b, layers.MADClassName(m.MgmtClass), uint64(m.MgmtClass), 2)
		b = append(b, ' ')
		b = appendName(b, layers.MADMethodName(m.Method), uint64(m.Method), 2)
		b = append(b, ' ')
		b = appendName(b, layers.MADAttributeName(m.MgmtClass, m.AttributeID), uint64(m.AttributeID), 4)
		b = appendHexField(b, " tid=", m.TransactionID, 0)
	}
	b = append(b, " payload="...)
	b = strconv.AppendInt(b, int64(rec.payloadLen), 10)
	switch {
	case rec.truncated:
		b = append(b, " icrc=truncated"...)
	case rec.icrcRXE:
		b = append(b, " icrc=rxe"...)
	case rec.icrcOK:
		b = append(b, " icrc=ok"...)
	default:
		b = append(b, " icrc=BAD"...)
	}
	if rec.malformed != "" {
		b = append(b, " malformed: "...)
		b = append(b, rec.malformed...)
	}
	return b
}

func flagChar(on bool, c byte) byte {
	if on {
		return c
	}
	return '.'
}

// appendHex appends 0x and v in hex, zero-padded to digits.
func appendHex(b []byte, v uint64, digits int) []byte {
	b = append(b, "0x"...)
	for n := len(strconv.FormatUint(v, 16)); n < digits; n++ {
		b = append(b, '0')
	}
	return strconv.AppendUint(b, v, 16)
}

// appendHexField appends label and v as appendHex does.
func appendHexField(b []byte, label string, v uint64, digits int) []byte {
	return appendHex(append(b, label...), v, digits)
}

// appendUintField appends label and v in decimal.
func appendUintField(b []byte, label string, v uint64) []byte {
	return strconv.AppendUint(append(b, label...), v, 10)
}

// appendName appends name, or v in hex when name is empty.
func appendName(b []byte, name string, v uint64, digits int) []byte {
	if name != "" {
		return append(b, name...)
	}
	return appendHex(b, v, digits)
}

// appendSyndrome describes an AETH syndrome: "ACK", "NAK
// PSN_SEQUENCE_ERROR" or "RNR_NAK 5.12ms".
func appendSyndrome(b []byte, s bth.Syndrome) []byte {
	switch s.Kind() {
	case bth.KindACK:
		b = append(b, "ACK"...)
		if s.Value() != bth.NoCredits {
			b = appendUintField(b, " credit=", uint64(s.Value()))
		}
	case bth.KindRNRNAK:
		b = append(b, "RNR_NAK "...)
		b = append(b, bth.RNRTimerDuration(s.Value()).String()...)
	case bth.KindNAK:
		b = append(b, "NAK "...)
		b = append(b, s.NAKCode().String()...)
	default:
		b = appendHexField(b, "RESERVED ", uint64(s), 2)
	}
	return b
}

// jsonRecord is the --json form of a RoCE packet: numbers are JSON numbers,
// 64-bit ones included.
type jsonRecord struct {
	File       string  `json:"file,omitempty"`
	Frame      int     `json:"frame"`
	Time       float64 `json:"time"`
	Src        string  `json:"src"`
	Dst        string  `json:"dst"`
	Sport      uint16  `json:"sport"`
	Dport      uint16  `json:"dport"`
	Opcode     uint8   `json:"opcode"`
	OpcodeName string  `json:"opcode_name"`
	DestQP     uint32  `json:"dest_qp"`
	PSN        uint32  `json:"psn"`
	AckReq     bool    `json:"ack_req"`
	SE         bool    `json:"se"`
	Mig        bool    `json:"mig"`
	Pad        uint8   `json:"pad"`
	TVer       uint8   `json:"tver"`
	PKey       uint16  `json:"pkey"`
	FECN       bool    `json:"fecn"`
	BECN       bool    `json:"becn"`
	PayloadLen int     `json:"payload_len"`
	Truncated  bool    `json:"truncated"`
	// ICRCOK and ICRC are null when the capture truncated the packet.
	ICRCOK *bool   `json:"icrc_ok"`
	ICRC   *uint32 `json:"icrc"`

	RDETH     *jsonRDETH     `json:"rdeth,omitempty"`
	DETH      *jsonDETH      `json:"deth,omitempty"`
	FETH      *jsonFETH      `json:"feth,omitempty"`
	RETH      *jsonRETH      `json:"reth,omitempty"`
	AtomicETH *jsonAtomicETH `json:"atomic_eth,omitempty"`
	AETH      *jsonAETH      `json:"aeth,omitempty"`
	AtomicAck *jsonAtomicAck `json:"atomic_ack,omitempty"`
	Imm       *uint32        `json:"imm,omitempty"`
	IETH      *jsonIETH      `json:"ieth,omitempty"`
	MAD       *jsonMAD       `json:"mad,omitempty"`
	// CM is the decoded CM message of a CM MAD: see decodeCM.
	CM any `json:"cm,omitempty"`

	Malformed string `json:"malformed,omitempty"`
}

type jsonRDETH struct {
	EECnxt uint32 `json:"eecnxt"`
}

type jsonDETH struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"`
}

type jsonFETH struct {
	Selectivity uint8 `json:"selectivity"`
	Placement   uint8 `json:"placement"`
}

type jsonRETH struct {
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dma_len"`
}

type jsonAtomicETH struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

type jsonAETH struct {
	Syndrome uint8  `json:"syndrome"`
	Kind     string `json:"kind"`
	// Value is the credit count, RNR timer or NAK code.
	Value   uint8  `json:"value"`
	NAK     string `json:"nak,omitempty"`
	RNRWait string `json:"rnr_wait,omitempty"`
	MSN     uint32 `json:"msn"`
}

type jsonAtomicAck struct {
	Orig uint64 `json:"orig"`
}

type jsonIETH struct {
	RKey uint32 `json:"rkey"`
}

type jsonMAD struct {
	BaseVersion  uint8  `json:"base_version"`
	Class        uint8  `json:"class"`
	ClassName    string `json:"class_name,omitempty"`
	ClassVersion uint8  `json:"class_version"`
	Method       uint8  `json:"method"`
	MethodName   string `json:"method_name,omitempty"`
	Status       uint16 `json:"status"`
	AttrID       uint16 `json:"attr_id"`
	AttrName     string `json:"attr_name,omitempty"`
	AttrMod      uint32 `json:"attr_mod"`
	TID          uint64 `json:"tid"`
}

// jsonMalformed is the --json form of a frame that does not decode.
type jsonMalformed struct {
	File      string  `json:"file,omitempty"`
	Frame     int     `json:"frame"`
	Time      float64 `json:"time"`
	Src       string  `json:"src,omitempty"`
	Dst       string  `json:"dst,omitempty"`
	Sport     uint16  `json:"sport,omitempty"`
	Dport     uint16  `json:"dport,omitempty"`
	Malformed string  `json:"malformed"`
}

// jsonSink prints one JSON object per line.
type jsonSink struct {
	w    *errWriter
	enc  *json.Encoder
	file string
}

func newJSONSink(w io.Writer, file string) *jsonSink {
	ew := &errWriter{w: w}
	enc := json.NewEncoder(ew)
	enc.SetEscapeHTML(false)
	return &jsonSink{w: ew, enc: enc, file: file}
}

func (s *jsonSink) finish() error { return s.w.err }

func (s *jsonSink) add(rec *packetRecord) {
	switch rec.kind {
	case kindOther:
		return
	case kindMalformed:
		m := jsonMalformed{File: s.file, Frame: rec.frame, Time: rec.time, Malformed: rec.malformed}
		if rec.hasAddr {
			m.Src, m.Dst, m.Sport, m.Dport = rec.src.String(), rec.dst.String(), rec.sport, rec.dport
		}
		s.enc.Encode(&m)
		return
	}
	j := toJSON(rec)
	j.File = s.file
	s.enc.Encode(j)
}

// toJSON converts a RoCE record to its --json form.
func toJSON(rec *packetRecord) *jsonRecord {
	r := rec.roce
	f := &r.BTH
	j := &jsonRecord{
		Frame: rec.frame, Time: rec.time,
		Src: rec.src.String(), Dst: rec.dst.String(), Sport: rec.sport, Dport: rec.dport,
		Opcode: uint8(f.Opcode), OpcodeName: f.Opcode.String(), DestQP: f.DestQP, PSN: uint32(f.PSN),
		AckReq: f.AckReq, SE: f.SE, Mig: f.MigReq, Pad: f.PadCount, TVer: f.TVer, PKey: f.PKey,
		FECN: f.FECN, BECN: f.BECN, PayloadLen: rec.payloadLen, Truncated: rec.truncated,
		Malformed: rec.malformed,
	}
	if !rec.truncated {
		ok, icrc := rec.icrcOK, rec.icrcWire
		j.ICRCOK, j.ICRC = &ok, &icrc
	}
	if r.Has(bth.HdrRDETH) {
		j.RDETH = &jsonRDETH{EECnxt: r.RDETH.EECnxt}
	}
	if r.Has(bth.HdrDETH) {
		j.DETH = &jsonDETH{QKey: r.DETH.QKey, SrcQP: r.DETH.SrcQP}
	}
	if r.Has(bth.HdrFETH) {
		j.FETH = &jsonFETH{Selectivity: r.FETH.Selectivity, Placement: r.FETH.Placement}
	}
	if r.Has(bth.HdrRETH) {
		j.RETH = &jsonRETH{VA: r.RETH.VA, RKey: r.RETH.RKey, DMALen: r.RETH.DMALen}
	}
	if r.Has(bth.HdrAtomicETH) {
		a := &r.AtomicETH
		j.AtomicETH = &jsonAtomicETH{VA: a.VA, RKey: a.RKey, SwapAdd: a.SwapAdd, Compare: a.Compare}
	}
	if r.Has(bth.HdrAETH) {
		s := r.AETH.Syndrome
		a := &jsonAETH{Syndrome: uint8(s), Kind: s.Kind().String(), Value: s.Value(), MSN: r.AETH.MSN}
		switch s.Kind() {
		case bth.KindNAK:
			a.NAK = s.NAKCode().String()
		case bth.KindRNRNAK:
			a.RNRWait = bth.RNRTimerDuration(s.Value()).String()
		}
		j.AETH = a
	}
	if r.Has(bth.HdrAtomicAckETH) {
		j.AtomicAck = &jsonAtomicAck{Orig: r.AtomicAckETH.Orig}
	}
	if r.Has(bth.HdrImmDt) {
		imm := r.ImmDt.Imm
		j.Imm = &imm
	}
	if r.Has(bth.HdrIETH) {
		j.IETH = &jsonIETH{RKey: r.IETH.RKey}
	}
	if m := rec.mad; m != nil {
		j.MAD = &jsonMAD{BaseVersion: m.BaseVersion, Class: m.MgmtClass, ClassName: layers.MADClassName(m.MgmtClass),
			ClassVersion: m.ClassVersion, Method: m.Method, MethodName: layers.MADMethodName(m.Method),
			Status: m.Status, AttrID: m.AttributeID, AttrName: layers.MADAttributeName(m.MgmtClass, m.AttributeID),
			AttrMod: m.AttributeModifier, TID: m.TransactionID}
		j.CM = decodeCM(m)
	}
	return j
}

// printf writes to w and ignores errors, which errWriter keeps.
func printf(w io.Writer, format string, args ...any) { fmt.Fprintf(w, format, args...) }

func itoa(n int) string { return strconv.Itoa(n) }
