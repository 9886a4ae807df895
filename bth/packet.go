package bth

import "encoding/binary"

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
// nothing about the values; it does not check the ICRC.
func (p *Packet) Parse(b []byte) error { return p.parse(b, false) }

// ParseTruncated is Parse for a packet cut short by a capture: it needs the
// headers whole and takes what follows as payload, with no pad or ICRC.
func (p *Packet) ParseTruncated(b []byte) error { return p.parse(b, true) }

func (p *Packet) parse(b []byte, truncated bool) error {
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
// payload: headers, payload, pad and ICRC.
func Len(op Opcode, payloadLen int) int {
	return opTable[op].HeaderLen + payloadLen + PadCount(payloadLen) + ICRCLen
}

// Build lays out in b a packet with BTH f and payloadLen bytes of payload,
// and sets p's views to it for the caller to fill: the extension headers
// and the pad are zeroed, the BTH is written from f with the pad count of
// payloadLen, Payload is left as it is (copy into it), and the ICRC is left
// for Flow.Seal. It returns the packet's length; b must hold
// Len(f.Opcode, payloadLen) bytes. Build panics on an undefined opcode.
func (p *Packet) Build(b []byte, f *BTHFields, payloadLen int) int {
	info := &opTable[f.Opcode]
	if !info.Valid() {
		panic("bth: Build with undefined opcode " + f.Opcode.String())
	}
	pad := PadCount(payloadLen)
	n := info.HeaderLen + payloadLen + pad + ICRCLen
	b = b[:n]
	*p = Packet{Raw: b, BTH: BTH(b[:BTHLen]), Info: info}
	bf := *f
	bf.PadCount = uint8(pad)
	p.BTH.Encode(&bf)
	clear(b[BTHLen:info.HeaderLen])
	p.setHeaders(b)
	end := info.HeaderLen + payloadLen
	p.Payload = b[info.HeaderLen:end]
	p.Pad = b[end : end+pad]
	clear(p.Pad)
	p.ICRC = b[end+pad:]
	return n
}

// ICRCValue returns the ICRC carried by the packet.
func (p *Packet) ICRCValue() uint32 { return binary.LittleEndian.Uint32(p.ICRC) }
