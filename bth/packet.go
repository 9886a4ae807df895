package bth

import (
	"encoding/binary"
	"strconv"
)

// Packet is a RoCE transport packet, the UDP payload from the BTH to the
// ICRC, split into views of its headers. Headers the opcode does not carry
// are nil.
type Packet struct {
	// Raw is the whole packet, BTH through ICRC (through the end of the
	// capture when truncated).
	Raw  []byte
	BTH  BTH
	Info *OpInfo

	RDETH        RDETH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	CNPPad       []byte

	// Payload is the payload without its pad.
	Payload []byte
	Pad     []byte
	// ICRC holds the four ICRC bytes; nil when truncated.
	ICRC []byte
	// Truncated reports a packet cut short by a capture: the headers are
	// whole, Payload holds what there is, and Pad and ICRC are nil.
	Truncated bool
}

// Parse splits b, a whole RoCE packet from its BTH through its ICRC, into p.
// It checks that the opcode is defined and that the lengths add up, and
// nothing about the values; it does not check the ICRC. Its errors are the
// bare sentinels (ErrTruncated, ErrUnknownOpcode, ErrPadCount), so that a
// malformed packet costs no allocation.
func (p *Packet) Parse(b []byte) error { return p.parse(b, false) }

// ParseTruncated is Parse for a packet cut short by a capture: it needs the
// headers whole and takes what follows as payload, with no pad or ICRC.
func (p *Packet) ParseTruncated(b []byte) error { return p.parse(b, true) }

func (p *Packet) parse(b []byte, truncated bool) error {
	if p == nil {
		return nilError("Parse into a nil *Packet")
	}
	*p = Packet{}
	if len(b) < BTHLen {
		return ErrTruncated
	}
	info := &opTable[b[0]]
	if !info.Valid() {
		return ErrUnknownOpcode
	}
	end := len(b)
	if !truncated {
		end -= ICRCLen
	}
	if end < info.HeaderLen {
		return ErrTruncated
	}
	p.Raw, p.BTH, p.Info = b, BTH(b[:BTHLen]), info
	p.setHeaders(b)
	rest := b[info.HeaderLen:end]
	if truncated {
		p.Payload, p.Truncated = rest, true
		return nil
	}
	pad := p.BTH.PadCount()
	if pad > len(rest) {
		return ErrPadCount
	}
	p.Payload = rest[:len(rest)-pad]
	p.Pad = rest[len(rest)-pad:]
	p.ICRC = b[end:]
	return nil
}

// setHeaders points each header view the opcode carries into b.
func (p *Packet) setHeaders(b []byte) {
	i := p.Info
	p.RDETH = i.view(b, HdrRDETH, RDETHLen)
	p.DETH = i.view(b, HdrDETH, DETHLen)
	p.FETH = i.view(b, HdrFETH, FETHLen)
	p.RETH = i.view(b, HdrRETH, RETHLen)
	p.AtomicETH = i.view(b, HdrAtomicETH, AtomicETHLen)
	p.AETH = i.view(b, HdrAETH, AETHLen)
	p.AtomicAckETH = i.view(b, HdrAtomicAckETH, AtomicAckETHLen)
	p.ImmDt = i.view(b, HdrImmDt, ImmDtLen)
	p.IETH = i.view(b, HdrIETH, IETHLen)
	p.CNPPad = i.view(b, HdrCNPPad, CNPPadLen)
}

// view returns header h of a packet b of this opcode, or nil if absent.
func (i *OpInfo) view(b []byte, h Header, size int) []byte {
	if i.Headers&h == 0 {
		return nil
	}
	o := int(i.off[bitIndex(h)])
	return b[o : o+size : o+size]
}

// Len returns the length of a packet of opcode op with payloadLen bytes of
// payload: headers, payload, pad and ICRC; 0 for an undefined opcode or a
// negative payloadLen.
func Len(op Opcode, payloadLen int) int {
	if !op.Valid() || payloadLen < 0 {
		return 0
	}
	return opTable[op].HeaderLen + payloadLen + PadCount(payloadLen) + ICRCLen
}

// Build lays out in b a packet with BTH f and payloadLen bytes of payload,
// and sets p's views to it for the caller to fill: the extension headers
// and the pad are zeroed, the BTH is written from f with the pad count of
// payloadLen, Payload is left as it is (copy into it), and the ICRC is left
// for Flow.Seal. It returns the packet's length, Len(f.Opcode,
// payloadLen), which b must have the capacity for.
//
// Build returns 0, leaving p and b as they were, when it cannot build the
// packet: a nil p or f, an undefined opcode, a DestQP or PSN wider than 24
// bits, a negative payloadLen, or too small a b. CheckBuild says which.
func (p *Packet) Build(b []byte, f *BTHFields, payloadLen int) int {
	if p == nil || f == nil || payloadLen < 0 || f.DestQP > MaxQPN || f.PSN > PSNMask || f.TVer > 15 {
		return 0 // CheckBuild says why
	}
	info := &opTable[f.Opcode]
	pad := PadCount(payloadLen)
	n := info.HeaderLen + payloadLen + pad + ICRCLen
	if !info.Valid() || n > cap(b) {
		return 0
	}
	b = b[:n]
	*p = Packet{Raw: b, BTH: BTH(b[:BTHLen]), Info: info}
	bf := *f
	bf.PadCount = uint8(pad)
	p.BTH.encode(&bf)
	clear(b[BTHLen:info.HeaderLen])
	p.setHeaders(b)
	end := info.HeaderLen + payloadLen
	p.Payload = b[info.HeaderLen:end]
	p.Pad = b[end : end+pad]
	clear(p.Pad)
	p.ICRC = b[end+pad:]
	return n
}

// CheckBuild reports why Build would refuse its arguments: an error
// wrapping ErrNil, ErrUnknownOpcode, ErrRange or ErrShortBuffer that says
// what to change; nil when Build would build the packet.
func CheckBuild(b []byte, f *BTHFields, payloadLen int) error {
	switch {
	case f == nil:
		return nilError("Build needs a *BTHFields")
	case !f.Opcode.Valid():
		return &wrapError{msg: "bth: Build with opcode " + f.Opcode.String() + ", which the IBTA does not define",
			err: ErrUnknownOpcode}
	case payloadLen < 0:
		return rangeError("Build", "payloadLen", uint64(int64(payloadLen)), "a length of 0 or more")
	}
	if n := Len(f.Opcode, payloadLen); cap(b) < n {
		return &wrapError{msg: "bth: a " + f.Opcode.String() + " packet with " + strconv.Itoa(payloadLen) +
			" bytes of payload takes " + strconv.Itoa(n) + " bytes; b has room for " + strconv.Itoa(cap(b)) +
			": make it Len(op, payloadLen) long", err: ErrShortBuffer}
	}
	g := *f
	g.PadCount = 0 // Build sets it
	return g.check(BTHLen)
}

// ICRCValue returns the ICRC carried by the packet (0 when it has none).
func (p *Packet) ICRCValue() uint32 {
	if p == nil || len(p.ICRC) < ICRCLen {
		return 0
	}
	return binary.LittleEndian.Uint32(p.ICRC)
}
