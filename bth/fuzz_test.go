package bth

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// fuzzSeeds returns one RoCE frame per capture and opcode, whole and, when
// the capture has them, truncated.
func fuzzSeeds(f *testing.F) []captureFrame {
	seen := map[[3]any]bool{}
	var out []captureFrame
	for _, cf := range loadCaptures(f) {
		k := [3]any{cf.file, cf.packet.BTH.Opcode(), cf.frame.Truncated}
		if !seen[k] {
			seen[k] = true
			out = append(out, cf)
		}
	}
	return out
}

// FuzzPacketParse checks that Parse and ParseTruncated never panic, that
// what Parse accepts is laid out as the opcode table says, and that Build
// lays out the same packet again from the parsed fields.
func FuzzPacketParse(f *testing.F) {
	for _, cf := range fuzzSeeds(f) {
		f.Add(cf.frame.Payload)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.ParseTruncated(b); err == nil {
			if !p.Truncated || p.ICRC != nil || p.Pad != nil || len(p.Payload) != len(b)-p.Info.HeaderLen {
				t.Fatalf("ParseTruncated: payload %d of %d, truncated %v", len(p.Payload), len(b), p.Truncated)
			}
		}
		if err := p.Parse(b); err != nil {
			return
		}
		info := p.Info
		if !info.Valid() || info != p.BTH.Opcode().Info() || p.Truncated {
			t.Fatalf("Parse accepted opcode %v", p.BTH.Opcode())
		}
		if n := info.HeaderLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); n != len(b) || len(p.ICRC) != ICRCLen ||
			len(p.Pad) != p.BTH.PadCount() {
			t.Fatalf("lengths: headers %d payload %d pad %d icrc %d, packet %d", info.HeaderLen, len(p.Payload),
				len(p.Pad), len(p.ICRC), len(b))
		}
		views := []struct {
			h Header
			v []byte
		}{{HdrRDETH, p.RDETH}, {HdrDETH, p.DETH}, {HdrFETH, p.FETH}, {HdrRETH, p.RETH},
			{HdrAtomicETH, p.AtomicETH}, {HdrAETH, p.AETH}, {HdrAtomicAckETH, p.AtomicAckETH},
			{HdrImmDt, p.ImmDt}, {HdrIETH, p.IETH}, {HdrCNPPad, p.CNPPad}}
		for _, hv := range views {
			if (hv.v != nil) != info.Has(hv.h) {
				t.Fatalf("%v: header %v present %v", p.BTH.Opcode(), hv.h, hv.v != nil)
			}
			if o := info.Offset(hv.h); hv.v != nil && !bytes.Equal(hv.v, b[o:o+len(hv.v)]) {
				t.Fatalf("%v: header %v not at offset %d", p.BTH.Opcode(), hv.h, o)
			}
		}
		// Build the packet again from the parsed fields.
		buf := make([]byte, Len(p.BTH.Opcode(), len(p.Payload)))
		var q Packet
		bf := p.BTH.Fields()
		n := q.Build(buf, &bf, len(p.Payload))
		encodeExtHeaders(&q, &p)
		copy(q.Payload, p.Payload)
		var r Packet
		if err := r.Parse(buf[:n]); err != nil {
			t.Fatalf("parsing the rebuilt packet: %v", err)
		}
		got, want := r.BTH.Fields(), p.BTH.Fields()
		got.PadCount, want.PadCount = 0, 0 // Build derives it from the payload length
		if got != want || !bytes.Equal(r.Payload, p.Payload) || !bytes.Equal(r.Raw[BTHLen:info.HeaderLen],
			maskedHeaders(&p)) {
			t.Fatalf("rebuilt packet differs\n got %x\nwant %x", r.Raw, b)
		}
	})
}

// maskedHeaders returns the extension headers of p with their reserved
// bits cleared, as the encoders write them.
func maskedHeaders(p *Packet) []byte {
	h := append([]byte(nil), p.Raw[BTHLen:p.Info.HeaderLen]...)
	clearAt := func(hdr Header, i int, mask byte) {
		if o := p.Info.Offset(hdr); o >= 0 {
			h[o-BTHLen+i] &= mask
		}
	}
	clearAt(HdrRDETH, 0, 0)
	clearAt(HdrDETH, 4, 0)
	for i := range 3 {
		clearAt(HdrFETH, i, 0)
	}
	clearAt(HdrFETH, 3, 0x3F)
	if o := p.Info.Offset(HdrCNPPad); o >= 0 {
		clear(h[o-BTHLen : o-BTHLen+CNPPadLen])
	}
	return h
}

// FuzzParseFrame checks that ParseFrame never panics on either link type
// and that the views it returns agree with the bytes.
func FuzzParseFrame(f *testing.F) {
	for _, cf := range fuzzSeeds(f) {
		f.Add(cf.data, false)
		f.Add(cf.data[EthernetLen:], true)
	}
	f.Fuzz(func(t *testing.T, b []byte, ip bool) {
		link := LinkEthernet
		if ip {
			link = LinkIP
		}
		var fr Frame
		if err := ParseFrame(&fr, b, link); err != nil {
			return
		}
		if (fr.IPv4 == nil) == (fr.IPv6 == nil) {
			t.Fatal("want exactly one of IPv4 and IPv6")
		}
		hl := len(fr.IPv4) + len(fr.IPv6)
		if len(fr.IP) < hl+UDPLen || !bytes.Equal(fr.IP[hl:hl+UDPLen], fr.UDP) ||
			!bytes.Equal(fr.IP[hl+UDPLen:], fr.Payload) {
			t.Fatalf("IP %d bytes, header %d, payload %d", len(fr.IP), hl, len(fr.Payload))
		}
		if fr.UDP.SrcPort() != fr.Flow.SrcPort || fr.UDP.DstPort() != fr.Flow.DstPort {
			t.Fatal("flow ports differ from the UDP header")
		}
		whole := fr.UDP.Length() == UDPLen+len(fr.Payload)
		if whole == fr.Truncated {
			t.Fatalf("UDP length %d, payload %d, truncated %v", fr.UDP.Length(), len(fr.Payload), fr.Truncated)
		}
		if !fr.Truncated && len(fr.Payload) >= BTHLen+ICRCLen {
			if got, want := FrameICRC(fr.IP), referenceICRC(fr.IP); got != want {
				t.Fatalf("FrameICRC %#08x, reference %#08x", got, want)
			}
		}
	})
}

// FuzzFrameICRC builds valid RoCEv2 frames over IPv4 (with or without
// options) and IPv6 with arbitrary addresses, ports, TOS, TTL, flow label,
// IPv4 ID and packet bytes, and checks bth.FrameICRC and Flow.ICRC against
// referenceICRC, a bitwise CRC-32 of the masked frame that shares no code
// with them.
func FuzzFrameICRC(f *testing.F) {
	for i, cf := range fuzzSeeds(f) {
		if cf.frame.Truncated {
			continue
		}
		if ip6 := cf.frame.IPv6; ip6 != nil {
			f.Add([]byte(ip6[8:40]), uint16(0xc000+i), ip6.TrafficClass(), uint8(64), uint32(i), uint8(0),
				true, cf.frame.Payload[:len(cf.frame.Payload)-ICRCLen])
			continue
		}
		f.Add(cf.frame.IP[12:20], uint16(0xc000+i), cf.frame.IPv4.TOS(), uint8(64), uint32(i), uint8(i%3),
			false, cf.frame.Payload[:len(cf.frame.Payload)-ICRCLen])
	}
	f.Add(bytes.Repeat([]byte{0x20, 0x01, 0x0d, 0xb8}, 8), uint16(0xc001), uint8(0xb8), uint8(1), uint32(0xfffff),
		uint8(0), true, make([]byte, BTHLen+16))
	f.Fuzz(func(t *testing.T, addrs []byte, sport uint16, tos, ttl uint8, idLabel uint32, nopts uint8, v6 bool,
		pkt []byte) {
		if len(pkt) < BTHLen || len(pkt) > 9000 {
			return
		}
		var fl Flow
		ff := FrameFields{Ethernet: true, TOS: tos, TTL: ttl, UDPChecksum: idLabel&1 == 1}
		if v6 {
			var a [32]byte
			copy(a[:], addrs)
			// An IPv4-mapped address would make the flow an IPv4 one.
			if a[0] == 0 {
				a[0] = 0x20
			}
			if a[16] == 0 {
				a[16] = 0x20
			}
			fl = Flow{Src: netip.AddrFrom16([16]byte(a[:16])), Dst: netip.AddrFrom16([16]byte(a[16:]))}
			ff.FlowLabel = idLabel & 0xFFFFF
			nopts = 0
		} else {
			var a [8]byte
			copy(a[:], addrs)
			fl = Flow{Src: netip.AddrFrom4([4]byte(a[:4])), Dst: netip.AddrFrom4([4]byte(a[4:])),
				ID: uint16(idLabel >> 8), DF: idLabel&2 == 2}
			nopts %= 11 // up to 40 bytes of options
		}
		fl.SrcPort, fl.DstPort = sport, UDPPort
		ff.Flow = fl
		hl := ff.HeaderLen()
		frame := make([]byte, hl+len(pkt)+ICRCLen)
		copy(frame[hl:], pkt)
		EncodeFrame(frame, &ff)
		if nopts > 0 {
			frame = withIPv4Options(frame, int(nopts)*4)
		}
		var fr Frame
		if err := ParseFrame(&fr, frame, LinkEthernet); err != nil {
			t.Fatalf("ParseFrame of a built frame: %v", err)
		}
		want := referenceICRC(fr.IP)
		if got := FrameICRC(fr.IP); got != want {
			t.Fatalf("FrameICRC %#08x, reference %#08x", got, want)
		}
		if nopts == 0 {
			if got := fr.Flow.ICRC(pkt); got != want {
				t.Fatalf("Flow.ICRC %#08x, reference %#08x", got, want)
			}
		}
	})
}

// withIPv4Options inserts n bytes of IPv4 options (NOPs and an end of list)
// after the 20-byte IPv4 header of an Ethernet frame and fixes the header
// length, total length and checksum.
func withIPv4Options(frame []byte, n int) []byte {
	ip := EthernetLen
	out := make([]byte, 0, len(frame)+n)
	out = append(out, frame[:ip+IPv4MinLen]...)
	for i := range n {
		o := byte(1) // NOP
		if i == n-1 {
			o = 0 // end of option list
		}
		out = append(out, o)
	}
	out = append(out, frame[ip+IPv4MinLen:]...)
	h := out[ip:]
	h[0] = 0x40 | byte((IPv4MinLen+n)/4)
	binary.BigEndian.PutUint16(h[2:], uint16(len(out)-ip))
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^fold(checksum(0, h[:IPv4MinLen+n])))
	return out
}
