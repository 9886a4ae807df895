package bth

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/pcapfile"
)

// captureFrame is one RoCE frame from a capture in testdata.
type captureFrame struct {
	file   string
	index  int // frame number, from 1
	data   []byte
	wire   int // length on the wire
	frame  Frame
	packet Packet
}

// loadCaptures returns every RoCE frame of every capture in testdata
// (rxe over IPv4, and over IPv6 in captures/ipv6).
func loadCaptures(tb testing.TB) []captureFrame {
	tb.Helper()
	files, err := filepath.Glob("../testdata/captures/*.pcap")
	files6, err6 := filepath.Glob("../testdata/captures/ipv6/*.pcap")
	if err != nil || err6 != nil || len(files) == 0 || len(files6) == 0 {
		tb.Fatalf("no captures: %v %v", err, err6)
	}
	files = append(files, files6...)
	var out []captureFrame
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			tb.Fatal(err)
		}
		r, err := pcapfile.NewReader(f)
		if err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		if r.LinkType() != pcapfile.LinkTypeEthernet {
			tb.Fatalf("%s: link type %d", file, r.LinkType())
		}
		for i := 1; ; i++ {
			data, ci, err := r.ReadPacket()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
			cf := captureFrame{file: filepath.Base(file), index: i, data: data, wire: ci.Length}
			if err := ParseFrame(&cf.frame, data, LinkEthernet); err != nil {
				if errors.Is(err, ErrNotUDP) {
					continue // the TCP out-of-band exchange
				}
				tb.Fatalf("%s frame %d: %v", cf.file, i, err)
			}
			if cf.frame.Flow.DstPort != UDPPort {
				continue
			}
			if cf.frame.Truncated {
				err = cf.packet.ParseTruncated(cf.frame.Payload)
			} else {
				err = cf.packet.Parse(cf.frame.Payload)
			}
			if err != nil {
				tb.Fatalf("%s frame %d: %v", cf.file, i, err)
			}
			out = append(out, cf)
		}
		f.Close()
	}
	return out
}

func TestCapturesICRC(t *testing.T) {
	frames := loadCaptures(t)
	var checked, truncated int
	var solver IDSolver
	for _, cf := range frames {
		if !cf.packet.Info.Valid() {
			t.Errorf("%s frame %d: unknown opcode %#x", cf.file, cf.index, cf.data[0])
		}
		if cf.frame.Truncated {
			truncated++
			continue
		}
		checked++
		want := cf.packet.ICRCValue()
		if got := cf.frame.ICRC(); got != want {
			t.Errorf("%s frame %d: FrameICRC %#08x, packet has %#08x", cf.file, cf.index, got, want)
		}
		if got := referenceICRC(cf.frame.IP); got != want {
			t.Errorf("%s frame %d: reference ICRC %#08x, packet has %#08x", cf.file, cf.index, got, want)
		}
		fl := cf.frame.Flow
		if !fl.Verify(cf.packet.Raw) {
			t.Errorf("%s frame %d: Flow.Verify false", cf.file, cf.index)
		}
		// SealSplit on the packet cut anywhere after the BTH seals the
		// same ICRC.
		raw := cf.packet.Raw
		for _, k := range []int{BTHLen, (BTHLen + len(raw) - ICRCLen) / 2, len(raw) - ICRCLen} {
			head := append(append([]byte(nil), raw[:k]...), 0, 0, 0, 0)
			fl.SealSplit(head, raw[k:len(raw)-ICRCLen])
			if got := binary.LittleEndian.Uint32(head[k:]); got != want {
				t.Errorf("%s frame %d: SealSplit at %d: %#08x, packet has %#08x", cf.file, cf.index, k, got, want)
			}
		}
		// A receiver on a UDP socket does not see the IPv4 ID; recover it
		// (IPv6 has none).
		if id, ok := solver.Recover(&fl, cf.packet.Raw); fl.IsIPv4() && (!ok || id != fl.ID) {
			t.Errorf("%s frame %d: Recover = %#04x %v, want %#04x", cf.file, cf.index, id, ok, fl.ID)
		}
	}
	t.Logf("%d RoCE frames, %d ICRCs checked, %d truncated", len(frames), checked, truncated)
	if checked < 1000 {
		t.Errorf("only %d ICRCs checked", checked)
	}
}

func TestRecoverRejectsCorruption(t *testing.T) {
	frames := loadCaptures(t)
	var solver IDSolver
	rejected, tried := 0, 0
	for _, cf := range frames {
		if cf.frame.Truncated || len(cf.packet.Payload) == 0 || !cf.frame.Flow.IsIPv4() {
			continue
		}
		pkt := append([]byte(nil), cf.packet.Raw...)
		pkt[len(pkt)-ICRCLen-1] ^= 0x01 // flip one payload bit
		fl := cf.frame.Flow
		tried++
		if fl.Verify(pkt) {
			t.Fatalf("%s frame %d: corrupted packet verifies", cf.file, cf.index)
		}
		if _, ok := solver.Recover(&fl, pkt); !ok {
			rejected++
		}
	}
	// Recover trades 16 of the 32 check bits for the unknown ID, so about
	// one corruption in 65536 passes; with a few hundred tries none should.
	if rejected != tried {
		t.Errorf("Recover accepted %d of %d corrupted packets", tried-rejected, tried)
	}
}

// TestRebuildCaptures decodes each untruncated RoCE frame and encodes it
// again from the decoded fields, headers and ICRC included; the bytes must
// come out the same.
func TestRebuildCaptures(t *testing.T) {
	for _, cf := range loadCaptures(t) {
		if cf.frame.Truncated {
			continue
		}
		p := &cf.packet
		buf := make([]byte, len(cf.data))
		ff := FrameFields{Ethernet: true, Flow: cf.frame.Flow, UDPChecksum: cf.frame.UDP.Checksum() != 0}
		if ip4 := cf.frame.IPv4; ip4 != nil {
			ff.TOS, ff.TTL = ip4.TOS(), ip4.TTL()
		} else {
			ip6 := cf.frame.IPv6
			ff.TOS, ff.TTL, ff.FlowLabel = ip6.TrafficClass(), ip6.HopLimit(), ip6.FlowLabel()
		}
		copy(ff.DstMAC[:], cf.data[0:6])
		copy(ff.SrcMAC[:], cf.data[6:12])
		hl := ff.HeaderLen()
		var q Packet
		bf := p.BTH.Fields()
		n := q.Build(buf[hl:], &bf, len(p.Payload))
		encodeExtHeaders(&q, p)
		copy(q.Payload, p.Payload)
		copy(q.Pad, p.Pad) // rxe pads with zeros, so this is a no-op, checked below
		ff.Flow.Seal(q.Raw)
		EncodeFrame(buf[:hl+n], &ff)
		got := buf[:hl+n]
		want := cf.data[:len(cf.frame.Ethernet)+len(cf.frame.IP)]
		if ff.UDPChecksum || cf.frame.IPv6 != nil {
			// The sender's kernel left the checksum to offload, so the
			// capture holds only the pseudo-header sum; over IPv6, rxe
			// sends 0 where EncodeFrame always computes one. Check that
			// ours is right, then compare the rest.
			u := got[hl-UDPLen : hl+n]
			addrs := got[EthernetLen+12 : EthernetLen+20]
			if cf.frame.IPv6 != nil {
				addrs = got[EthernetLen+8 : EthernetLen+40]
			}
			if c := fold(checksum(checksum(ProtocolUDP+uint32(len(u)), addrs), u)); c != 0xFFFF {
				t.Errorf("%s frame %d: UDP checksum %#04x does not verify", cf.file, cf.index, UDP(u).Checksum())
			}
			copy(u[6:8], want[hl-2:hl])
		}
		if string(got) != string(want) {
			t.Errorf("%s frame %d: rebuilt frame differs\n got %x\nwant %x", cf.file, cf.index, got, want)
		}
	}
}

// encodeExtHeaders writes p's extension headers into q through the Fields
// and Encode of each view.
func encodeExtHeaders(q, p *Packet) {
	if p.RDETH != nil {
		f := p.RDETH.Fields()
		q.RDETH.Encode(&f)
	}
	if p.DETH != nil {
		f := p.DETH.Fields()
		q.DETH.Encode(&f)
	}
	if p.FETH != nil {
		f := p.FETH.Fields()
		q.FETH.Encode(&f)
	}
	if p.RETH != nil {
		f := p.RETH.Fields()
		q.RETH.Encode(&f)
	}
	if p.AtomicETH != nil {
		f := p.AtomicETH.Fields()
		q.AtomicETH.Encode(&f)
	}
	if p.AETH != nil {
		f := p.AETH.Fields()
		q.AETH.Encode(&f)
	}
	if p.AtomicAckETH != nil {
		f := p.AtomicAckETH.Fields()
		q.AtomicAckETH.Encode(&f)
	}
	if p.ImmDt != nil {
		f := p.ImmDt.Fields()
		q.ImmDt.Encode(&f)
	}
	if p.IETH != nil {
		f := p.IETH.Fields()
		q.IETH.Encode(&f)
	}
}

func TestCNPBuild(t *testing.T) {
	// A CNP as the notes describe it: opcode 0x81, P_Key 0xFFFF, BECN set,
	// the flow's QP, PSN 0, 16 reserved bytes, ICRC.
	buf := make([]byte, 64)
	var p Packet
	n := p.Build(buf, &BTHFields{Opcode: CNP, PKey: DefaultPKey, BECN: true, DestQP: 0x12}, 0)
	if n != BTHLen+CNPPadLen+ICRCLen {
		t.Fatalf("CNP length %d", n)
	}
	if buf[4] != 0x40 || len(p.CNPPad) != CNPPadLen || binary.BigEndian.Uint16(buf[2:]) != 0xFFFF {
		t.Fatalf("CNP header % x", buf[:n])
	}
}
