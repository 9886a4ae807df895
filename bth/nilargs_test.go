package bth

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
)

// zeroOn checks that a view accessor reads zeros from a nil view and from
// one a byte shorter than its header (of 0xFF bytes, so that a read of
// them would show), and that it reads the header from a whole one.
func zeroOn[T any](t *testing.T, size int, get func(b []byte) T) {
	t.Helper()
	for _, b := range [][]byte{nil, bytes.Repeat([]byte{0xFF}, size-1)} {
		if v := get(b); !reflect.ValueOf(&v).Elem().IsZero() {
			t.Errorf("a view of %d bytes reads %v", len(b), v)
		}
	}
	if v := get(bytes.Repeat([]byte{0xFF}, size)); reflect.ValueOf(&v).Elem().IsZero() {
		t.Errorf("a whole view of 0xFF bytes reads %v", v)
	}
}

// encodes checks an Encode or setter: it refuses a nil or short view and
// (with bad) a value that does not fit, writing nothing, and works on a
// whole one.
func encodes(t *testing.T, hdr string, size int, enc func(b []byte) error, bad func(b []byte) error) {
	t.Helper()
	for _, b := range [][]byte{nil, make([]byte, size-1)} {
		apitest.Err(t, enc(b), ErrShortBuffer, hdr+" view of", "give Encode a slice of at least")
	}
	b := bytes.Repeat([]byte{0xAA}, size)
	if bad != nil {
		apitest.Err(t, bad(b), ErrRange, "does not fit", "at most")
		if !bytes.Equal(b, bytes.Repeat([]byte{0xAA}, size)) {
			t.Errorf("a refused %s was written: % x", hdr, b)
		}
	}
	if err := enc(b); err != nil {
		t.Error(err)
	}
}

// TestNilArgs calls every exported function and method of the package
// with nil, short and out-of-range arguments: none panics, accessors of a
// short view read zeros, and encoders refuse with an error that wraps
// its sentinel.
func TestNilArgs(t *testing.T) {
	v4 := Flow{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"), SrcPort: 1, DstPort: UDPPort}
	bad := []Flow{{}, {Src: v4.Src}, {Src: v4.Src, Dst: netip.MustParseAddr("2001:db8::1")},
		{Src: netip.MustParseAddr("2001:db8::1"), Dst: v4.Dst}}
	pkt := make([]byte, BTHLen+ICRCLen)
	apitest.Run(t, ".", apitest.Table{
		"IsFlush":         func(t *testing.T) { want(t, IsFlush(nil), false) },
		"FlushICRCRXE":    func(t *testing.T) { want(t, FlushICRCRXE(5, nil), uint32(5)) },
		"UnfoldFlushICRC": func(t *testing.T) { UnfoldFlushICRC(nil); UnfoldFlushICRC(make([]byte, 36)) },
		"AckKind.String":  func(t *testing.T) { want(t, AckKind(9).String(), "RESERVED") },
		"MTU.Valid":       func(t *testing.T) { want(t, MTU(0).Valid(), false) },
		"MTU.Bytes":       func(t *testing.T) { want(t, MTU(6).Bytes(), 0) },
		"MTU.String":      func(t *testing.T) { want(t, MTU(0xFF).String(), "MTU(255)") },
		"MTUFromBytes": func(t *testing.T) {
			m, ok := MTUFromBytes(-1)
			want(t, m, 0)
			want(t, ok, false)
		},
		"MTUAtMost": func(t *testing.T) {
			m, ok := MTUAtMost(-1 << 62)
			want(t, m, 0)
			want(t, ok, false)
		},
		"NAKCode.String":   func(t *testing.T) { want(t, NAKCode(31).String(), "NAK_31") },
		"ACKSyndrome":      func(t *testing.T) { want(t, ACKSyndrome(0xFF).Value(), uint8(31)) },
		"RNRNAKSyndrome":   func(t *testing.T) { want(t, RNRNAKSyndrome(0xFF).Kind(), KindRNRNAK) },
		"NAKSyndrome":      func(t *testing.T) { want(t, NAKSyndrome(0xFF).Kind(), KindNAK) },
		"Syndrome.Kind":    func(t *testing.T) { want(t, Syndrome(0xFF).Kind(), KindNAK) },
		"Syndrome.Value":   func(t *testing.T) { want(t, Syndrome(0xFF).Value(), uint8(31)) },
		"Syndrome.NAKCode": func(t *testing.T) { want(t, Syndrome(0).NAKCode(), NAKPSNSequenceError) },
		"Syndrome.String":  func(t *testing.T) { want(t, Syndrome(0x40).String(), "RESERVED 0x40") },
		"RNRTimerDuration": func(t *testing.T) { want(t, RNRTimerDuration(0xFF), RNRTimerDuration(31)) },
		"RNRTimerCode": func(t *testing.T) {
			want(t, RNRTimerCode(-time.Second), uint8(1))
			want(t, RNRTimerCode(time.Hour), uint8(0))
		},
		"ACKTimeout": func(t *testing.T) { want(t, ACKTimeout(0), time.Duration(0)) },
		"wrapError.Error": func(t *testing.T) {
			want(t, (*wrapError)(nil).Error(), "<nil>")
		},
		"wrapError.Unwrap": func(t *testing.T) {
			if (*wrapError)(nil).Unwrap() != nil {
				t.Error("a nil wrapError wraps")
			}
		},
		"FrameFields.HeaderLen": func(t *testing.T) { want(t, (*FrameFields)(nil).HeaderLen(), 0) },
		"EncodeFrame":           func(t *testing.T) { encodeFrame(t, v4, bad) },
		"IPv4.HeaderLen":        func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) int { return IPv4(b).HeaderLen() }) },
		"IPv4.TotalLen":         func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) int { return IPv4(b).TotalLen() }) },
		"IPv4.TOS":              func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) uint8 { return IPv4(b).TOS() }) },
		"IPv4.ID":               func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) uint16 { return IPv4(b).ID() }) },
		"IPv4.DF":               func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) bool { return IPv4(b).DF() }) },
		"IPv4.TTL":              func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) uint8 { return IPv4(b).TTL() }) },
		"IPv4.Src":              func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) netip.Addr { return IPv4(b).Src() }) },
		"IPv4.Dst":              func(t *testing.T) { zeroOn(t, IPv4MinLen, func(b []byte) netip.Addr { return IPv4(b).Dst() }) },
		"IPv4.ChecksumValid": func(t *testing.T) {
			// IHL 15 (60 bytes) in a 20-byte view.
			h := make(IPv4, IPv4MinLen)
			h[0] = 0x4F
			if h.ChecksumValid() || IPv4(nil).ChecksumValid() {
				t.Error("a header shorter than its IHL has a valid checksum")
			}
		},
		"IPv6.TrafficClass": func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) uint8 { return IPv6(b).TrafficClass() }) },
		"IPv6.FlowLabel":    func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) uint32 { return IPv6(b).FlowLabel() }) },
		"IPv6.PayloadLen":   func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) int { return IPv6(b).PayloadLen() }) },
		"IPv6.HopLimit":     func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) uint8 { return IPv6(b).HopLimit() }) },
		"IPv6.Src":          func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) netip.Addr { return IPv6(b).Src() }) },
		"IPv6.Dst":          func(t *testing.T) { zeroOn(t, IPv6Len, func(b []byte) netip.Addr { return IPv6(b).Dst() }) },
		"UDP.SrcPort":       func(t *testing.T) { zeroOn(t, UDPLen, func(b []byte) uint16 { return UDP(b).SrcPort() }) },
		"UDP.DstPort":       func(t *testing.T) { zeroOn(t, UDPLen, func(b []byte) uint16 { return UDP(b).DstPort() }) },
		"UDP.Length":        func(t *testing.T) { zeroOn(t, UDPLen, func(b []byte) int { return UDP(b).Length() }) },
		"UDP.Checksum":      func(t *testing.T) { zeroOn(t, UDPLen, func(b []byte) uint16 { return UDP(b).Checksum() }) },
		"ParseFrame": func(t *testing.T) {
			apitest.Err(t, ParseFrame(nil, nil, LinkIP), ErrNil, "*Frame")
			var fr Frame
			if err := ParseFrame(&fr, nil, LinkType(9)); !errors.Is(err, ErrTruncated) {
				t.Errorf("ParseFrame(nil) = %v", err)
			}
		},
		"Frame.ICRC": func(t *testing.T) {
			want(t, (*Frame)(nil).ICRC(), uint32(0))
			want(t, (&Frame{IP: []byte{0x45, 0}}).ICRC(), uint32(0))
		},
		"FieldError.Error": func(t *testing.T) { want(t, (*FieldError)(nil).Error(), "<nil>") },
		"FieldError.Unwrap": func(t *testing.T) {
			if (*FieldError)(nil).Unwrap() != nil {
				t.Error("a nil FieldError wraps")
			}
		},
		"BTH.Opcode":   func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) Opcode { return BTH(b).Opcode() }) },
		"BTH.SE":       func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) bool { return BTH(b).SE() }) },
		"BTH.MigReq":   func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) bool { return BTH(b).MigReq() }) },
		"BTH.PadCount": func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) int { return BTH(b).PadCount() }) },
		"BTH.TVer":     func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) uint8 { return BTH(b).TVer() }) },
		"BTH.PKey":     func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) uint16 { return BTH(b).PKey() }) },
		"BTH.FECN":     func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) bool { return BTH(b).FECN() }) },
		"BTH.BECN":     func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) bool { return BTH(b).BECN() }) },
		"BTH.DestQP":   func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) uint32 { return BTH(b).DestQP() }) },
		"BTH.AckReq":   func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) bool { return BTH(b).AckReq() }) },
		"BTH.PSN":      func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) PSN { return BTH(b).PSN() }) },
		"BTH.SetPSN": func(t *testing.T) {
			encodes(t, "BTH", BTHLen, func(b []byte) error { return BTH(b).SetPSN(PSNMask) },
				func(b []byte) error { return BTH(b).SetPSN(PSNMask + 1) })
		},
		"BTH.SetAckReq": func(t *testing.T) {
			encodes(t, "BTH", BTHLen, func(b []byte) error { return BTH(b).SetAckReq(true) }, nil)
		},
		"BTH.SetDestQP": func(t *testing.T) {
			encodes(t, "BTH", BTHLen, func(b []byte) error { return BTH(b).SetDestQP(MaxQPN) },
				func(b []byte) error { return BTH(b).SetDestQP(1 << 24) })
		},
		"BTH.SetECN": func(t *testing.T) {
			encodes(t, "BTH", BTHLen, func(b []byte) error { return BTH(b).SetECN(true, true) }, nil)
		},
		"BTH.Fields": func(t *testing.T) { zeroOn(t, BTHLen, func(b []byte) BTHFields { return BTH(b).Fields() }) },
		"BTH.Encode": func(t *testing.T) {
			encodes(t, "BTH", BTHLen, func(b []byte) error { return BTH(b).Encode(&BTHFields{}) },
				func(b []byte) error { return BTH(b).Encode(&BTHFields{PSN: 1 << 24}) })
			for _, f := range []BTHFields{{DestQP: 1 << 24}, {PadCount: 4}, {TVer: 16}} {
				apitest.Err(t, BTH(make([]byte, BTHLen)).Encode(&f), ErrRange, "BTH.")
			}
			apitest.Err(t, BTH(make([]byte, BTHLen)).Encode(nil), ErrNil, "*BTHFields")
		},
		"RETH.VA":     func(t *testing.T) { zeroOn(t, RETHLen, func(b []byte) uint64 { return RETH(b).VA() }) },
		"RETH.RKey":   func(t *testing.T) { zeroOn(t, RETHLen, func(b []byte) uint32 { return RETH(b).RKey() }) },
		"RETH.DMALen": func(t *testing.T) { zeroOn(t, RETHLen, func(b []byte) uint32 { return RETH(b).DMALen() }) },
		"RETH.Fields": func(t *testing.T) { zeroOn(t, RETHLen, func(b []byte) RETHFields { return RETH(b).Fields() }) },
		"RETH.Encode": func(t *testing.T) {
			encodes(t, "RETH", RETHLen, func(b []byte) error { return RETH(b).Encode(&RETHFields{}) }, nil)
			apitest.Err(t, RETH(make([]byte, RETHLen)).Encode(nil), ErrNil, "*RETHFields")
		},
		"AtomicETH.VA":      func(t *testing.T) { zeroOn(t, AtomicETHLen, func(b []byte) uint64 { return AtomicETH(b).VA() }) },
		"AtomicETH.RKey":    func(t *testing.T) { zeroOn(t, AtomicETHLen, func(b []byte) uint32 { return AtomicETH(b).RKey() }) },
		"AtomicETH.SwapAdd": func(t *testing.T) { zeroOn(t, AtomicETHLen, func(b []byte) uint64 { return AtomicETH(b).SwapAdd() }) },
		"AtomicETH.Compare": func(t *testing.T) { zeroOn(t, AtomicETHLen, func(b []byte) uint64 { return AtomicETH(b).Compare() }) },
		"AtomicETH.Fields": func(t *testing.T) {
			zeroOn(t, AtomicETHLen, func(b []byte) AtomicETHFields { return AtomicETH(b).Fields() })
		},
		"AtomicETH.Encode": func(t *testing.T) {
			encodes(t, "AtomicETH", AtomicETHLen, func(b []byte) error { return AtomicETH(b).Encode(&AtomicETHFields{}) }, nil)
			apitest.Err(t, AtomicETH(make([]byte, AtomicETHLen)).Encode(nil), ErrNil)
		},
		"AETH.Syndrome": func(t *testing.T) { zeroOn(t, AETHLen, func(b []byte) Syndrome { return AETH(b).Syndrome() }) },
		"AETH.MSN":      func(t *testing.T) { zeroOn(t, AETHLen, func(b []byte) uint32 { return AETH(b).MSN() }) },
		"AETH.Fields":   func(t *testing.T) { zeroOn(t, AETHLen, func(b []byte) AETHFields { return AETH(b).Fields() }) },
		"AETH.Encode": func(t *testing.T) {
			encodes(t, "AETH", AETHLen, func(b []byte) error { return AETH(b).Encode(&AETHFields{MSN: MaxQPN}) },
				func(b []byte) error { return AETH(b).Encode(&AETHFields{MSN: 1 << 24}) })
		},
		"AtomicAckETH.Orig": func(t *testing.T) {
			zeroOn(t, AtomicAckETHLen, func(b []byte) uint64 { return AtomicAckETH(b).Orig() })
		},
		"AtomicAckETH.Fields": func(t *testing.T) {
			zeroOn(t, AtomicAckETHLen, func(b []byte) AtomicAckETHFields { return AtomicAckETH(b).Fields() })
		},
		"AtomicAckETH.Encode": func(t *testing.T) {
			encodes(t, "AtomicAckETH", AtomicAckETHLen,
				func(b []byte) error { return AtomicAckETH(b).Encode(&AtomicAckETHFields{}) }, nil)
		},
		"ImmDt.Imm":    func(t *testing.T) { zeroOn(t, ImmDtLen, func(b []byte) uint32 { return ImmDt(b).Imm() }) },
		"ImmDt.Fields": func(t *testing.T) { zeroOn(t, ImmDtLen, func(b []byte) ImmDtFields { return ImmDt(b).Fields() }) },
		"ImmDt.Encode": func(t *testing.T) {
			encodes(t, "ImmDt", ImmDtLen, func(b []byte) error { return ImmDt(b).Encode(&ImmDtFields{}) }, nil)
		},
		"IETH.RKey":   func(t *testing.T) { zeroOn(t, IETHLen, func(b []byte) uint32 { return IETH(b).RKey() }) },
		"IETH.Fields": func(t *testing.T) { zeroOn(t, IETHLen, func(b []byte) IETHFields { return IETH(b).Fields() }) },
		"IETH.Encode": func(t *testing.T) {
			encodes(t, "IETH", IETHLen, func(b []byte) error { return IETH(b).Encode(&IETHFields{}) }, nil)
		},
		"DETH.QKey":   func(t *testing.T) { zeroOn(t, DETHLen, func(b []byte) uint32 { return DETH(b).QKey() }) },
		"DETH.SrcQP":  func(t *testing.T) { zeroOn(t, DETHLen, func(b []byte) uint32 { return DETH(b).SrcQP() }) },
		"DETH.Fields": func(t *testing.T) { zeroOn(t, DETHLen, func(b []byte) DETHFields { return DETH(b).Fields() }) },
		"DETH.Encode": func(t *testing.T) {
			encodes(t, "DETH", DETHLen, func(b []byte) error { return DETH(b).Encode(&DETHFields{}) },
				func(b []byte) error { return DETH(b).Encode(&DETHFields{SrcQP: 1 << 24}) })
		},
		"RDETH.EECnxt": func(t *testing.T) { zeroOn(t, RDETHLen, func(b []byte) uint32 { return RDETH(b).EECnxt() }) },
		"RDETH.Fields": func(t *testing.T) { zeroOn(t, RDETHLen, func(b []byte) RDETHFields { return RDETH(b).Fields() }) },
		"RDETH.Encode": func(t *testing.T) {
			encodes(t, "RDETH", RDETHLen, func(b []byte) error { return RDETH(b).Encode(&RDETHFields{}) },
				func(b []byte) error { return RDETH(b).Encode(&RDETHFields{EECnxt: 1 << 24}) })
		},
		"FETH.Selectivity": func(t *testing.T) { zeroOn(t, FETHLen, func(b []byte) uint8 { return FETH(b).Selectivity() }) },
		"FETH.Placement":   func(t *testing.T) { zeroOn(t, FETHLen, func(b []byte) uint8 { return FETH(b).Placement() }) },
		"FETH.Fields":      func(t *testing.T) { zeroOn(t, FETHLen, func(b []byte) FETHFields { return FETH(b).Fields() }) },
		"FETH.Encode": func(t *testing.T) {
			encodes(t, "FETH", FETHLen, func(b []byte) error { return FETH(b).Encode(&FETHFields{Selectivity: 3}) },
				func(b []byte) error { return FETH(b).Encode(&FETHFields{Placement: 16}) })
			apitest.Err(t, FETH(make([]byte, 4)).Encode(&FETHFields{Selectivity: 4}), ErrRange, "FETH.Selectivity")
		},
		"Flow.IsIPv4": func(t *testing.T) { want(t, (*Flow)(nil).IsIPv4(), false) },
		"Flow.ICRC": func(t *testing.T) {
			want(t, (*Flow)(nil).ICRC(pkt), uint32(0))
			want(t, v4.ICRC(pkt[:BTHLen-1]), uint32(0))
			for _, f := range bad {
				f.ICRC(pkt) // means nothing, but does not panic
			}
		},
		"Flow.Seal":      func(t *testing.T) { seals(t, v4, bad, func(f *Flow, p []byte) error { return f.Seal(p) }) },
		"Flow.SealSplit": func(t *testing.T) { seals(t, v4, bad, func(f *Flow, p []byte) error { return f.SealSplit(p, nil) }) },
		"Flow.Verify": func(t *testing.T) {
			if err := v4.Seal(pkt); err != nil || !v4.Verify(pkt) {
				t.Fatalf("seal and verify: %v", err)
			}
			if (*Flow)(nil).Verify(pkt) || v4.Verify(pkt[:BTHLen]) {
				t.Error("a nil flow or a short packet verifies")
			}
			for _, f := range bad {
				if f.Verify(pkt) {
					t.Errorf("%+v verifies", f)
				}
			}
		},
		"FrameICRC": func(t *testing.T) {
			for _, ip := range [][]byte{nil, {0x40}, {0x4F}, make([]byte, IPv6Len)} {
				want(t, FrameICRC(ip), uint32(0))
			}
		},
		"IDSolver.Recover": func(t *testing.T) {
			var s IDSolver
			if _, ok := (*IDSolver)(nil).Recover(&v4, pkt); ok {
				t.Error("a nil solver recovers")
			}
			for _, f := range append(bad, Flow{}) {
				if _, ok := s.Recover(&f, pkt); ok {
					t.Errorf("recovered on %+v", f)
				}
			}
			if _, ok := s.Recover(nil, pkt); ok {
				t.Error("recovered on a nil flow")
			}
		},
		"Transport.String":     func(t *testing.T) { want(t, Transport(99).String(), "invalid") },
		"Operation.String":     func(t *testing.T) { want(t, Operation(99).String(), "invalid") },
		"OpInfo.Valid":         func(t *testing.T) { want(t, (*OpInfo)(nil).Valid(), false) },
		"OpInfo.Has":           func(t *testing.T) { want(t, (*OpInfo)(nil).Has(HdrRETH), false) },
		"Opcode.Info":          func(t *testing.T) { want(t, Opcode(0xFF).Info().Valid(), false) },
		"Opcode.Valid":         func(t *testing.T) { want(t, Opcode(0xFF).Valid(), false) },
		"Opcode.String":        func(t *testing.T) { want(t, Opcode(0xFF).String(), "0xff") },
		"Opcode.Transport":     func(t *testing.T) { want(t, Opcode(0xFF).Transport(), TransportInvalid) },
		"Opcode.HeaderLen":     func(t *testing.T) { want(t, Opcode(0xFF).HeaderLen(), 0) },
		"Opcode.WithTransport": func(t *testing.T) { want(t, RCSendOnly.WithTransport(TransportCNP), Opcode(0xFF)) },
		"OpInfo.Offset": func(t *testing.T) {
			want(t, (*OpInfo)(nil).Offset(HdrRETH), -1)
			want(t, RCWriteOnly.Info().Offset(HdrRETH|1<<12), -1)
			want(t, RCWriteOnly.Info().Offset(1<<15), -1)
		},
		"Header.String": func(t *testing.T) { want(t, Header(1<<15).String(), "") },
		"Packet.Parse": func(t *testing.T) {
			apitest.Err(t, (*Packet)(nil).Parse(pkt), ErrNil, "nil *Packet")
			var p Packet
			if err := p.Parse(nil); !errors.Is(err, ErrTruncated) {
				t.Errorf("Parse(nil) = %v", err)
			}
		},
		"Packet.ParseTruncated": func(t *testing.T) {
			apitest.Err(t, (*Packet)(nil).ParseTruncated(pkt), ErrNil, "nil *Packet")
		},
		"Len": func(t *testing.T) {
			want(t, Len(0xFF, 0), 0)
			want(t, Len(RCSendOnly, -1), 0)
		},
		"Packet.Build": func(t *testing.T) { builds(t) },
		"CheckBuild": func(t *testing.T) {
			apitest.Err(t, CheckBuild(nil, nil, 0), ErrNil, "*BTHFields")
			if err := CheckBuild(make([]byte, 16), &BTHFields{Opcode: RCSendOnly}, 0); err != nil {
				t.Error(err)
			}
		},
		"Packet.ICRCValue": func(t *testing.T) {
			want(t, (*Packet)(nil).ICRCValue(), uint32(0))
			want(t, (&Packet{ICRC: []byte{1}}).ICRCValue(), uint32(0))
		},
		"PSN.Valid":      func(t *testing.T) { want(t, PSN(1<<24).Valid(), false) },
		"PSN.Add":        func(t *testing.T) { want(t, PSN(PSNMask).Add(1<<32-1), PSN(PSNMask-1)) },
		"PSN.Next":       func(t *testing.T) { want(t, PSN(1<<32-1).Next(), PSN(0)) },
		"PSN.Diff":       func(t *testing.T) { want(t, PSN(0).Diff(1<<31), int32(0)) },
		"PSN.LessThan":   func(t *testing.T) { want(t, PSN(0).LessThan(PSNMask), false) },
		"PSN.LessThanEq": func(t *testing.T) { want(t, PSN(PSNMask).LessThanEq(0), true) },
		"PSN.InWindow":   func(t *testing.T) { want(t, PSN(5).InWindow(5, 0), false) },
		"PSN.InRange":    func(t *testing.T) { want(t, PSN(5).InRange(5, 5), false) },
		"PadCount":       func(t *testing.T) { want(t, PadCount(-1), 1) },
	})
	apitest.NilReceivers(t, ".", (*FrameFields)(nil), (*Frame)(nil), (*FieldError)(nil), (*Flow)(nil),
		(*IDSolver)(nil), (*OpInfo)(nil), (*Packet)(nil))
}

func encodeFrame(t *testing.T, v4 Flow, bad []Flow) {
	_, err := EncodeFrame(nil, nil)
	apitest.Err(t, err, ErrNil, "*FrameFields")
	frame := make([]byte, IPv4MinLen+UDPLen+BTHLen+ICRCLen)
	for _, f := range bad {
		_, err := EncodeFrame(frame, &FrameFields{Flow: f})
		apitest.Err(t, err, ErrFlow, "set Src and Dst, both IPv4 or both IPv6")
	}
	_, err = EncodeFrame(frame, &FrameFields{Flow: v4, FlowLabel: 1 << 20})
	apitest.Err(t, err, ErrRange, "FlowLabel")
	_, err = EncodeFrame(frame[:IPv4MinLen], &FrameFields{Flow: v4})
	apitest.Err(t, err, ErrShortBuffer, "frame of 20 bytes", "f.HeaderLen()")
	_, err = EncodeFrame(make([]byte, 1<<16), &FrameFields{Flow: v4})
	apitest.Err(t, err, ErrRange, "IP.length")
	if n, err := EncodeFrame(frame, &FrameFields{Flow: v4}); err != nil || n != IPv4MinLen+UDPLen {
		t.Errorf("EncodeFrame = %d, %v", n, err)
	}
	if !strings.Contains(bad[2].check().Error(), "198.18.0.1 to 2001:db8::1") {
		t.Errorf("flow error %q names no addresses", bad[2].check())
	}
}

func seals(t *testing.T, v4 Flow, bad []Flow, seal func(f *Flow, p []byte) error) {
	t.Helper()
	apitest.Err(t, seal(nil, make([]byte, 16)), ErrNil, "*Flow")
	for _, f := range bad {
		apitest.Err(t, seal(&f, make([]byte, 16)), ErrFlow, "both IPv4 or both IPv6")
	}
	apitest.Err(t, seal(&v4, make([]byte, 15)), ErrShortBuffer, "15 bytes", "at least a BTH and an ICRC")
}

func builds(t *testing.T) {
	b := make([]byte, 64)
	for _, c := range []struct {
		f      *BTHFields
		n      int
		target error
		words  string
	}{
		{nil, 0, ErrNil, "*BTHFields"},
		{&BTHFields{Opcode: 0xFF}, 0, ErrUnknownOpcode, "0xff"},
		{&BTHFields{Opcode: RCSendOnly}, -1, ErrRange, "payloadLen"},
		{&BTHFields{Opcode: RCSendOnly}, 64, ErrShortBuffer, "takes 80 bytes; b has room for 64"},
		{&BTHFields{Opcode: RCSendOnly, DestQP: 1 << 24}, 0, ErrRange, "BTH.DestQP"},
		{&BTHFields{Opcode: RCSendOnly, PSN: 1 << 24}, 0, ErrRange, "BTH.PSN"},
	} {
		var p Packet
		if n := p.Build(b, c.f, c.n); n != 0 || p.Raw != nil {
			t.Errorf("Build(%+v, %d) = %d", c.f, c.n, n)
		}
		apitest.Err(t, CheckBuild(b, c.f, c.n), c.target, c.words)
	}
	if n := (*Packet)(nil).Build(b, &BTHFields{Opcode: RCSendOnly}, 0); n != 0 {
		t.Errorf("a nil Packet built %d bytes", n)
	}
	var p Packet
	if n := p.Build(b, &BTHFields{Opcode: RCSendOnly, PadCount: 3}, 1); n != BTHLen+4+ICRCLen || p.BTH.PadCount() != 3 {
		t.Errorf("Build = %d, pad %d", n, p.BTH.PadCount())
	}
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
