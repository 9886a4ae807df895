package mad

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// fill sets b to seed, seed+1, seed+2...
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i)
	}
}

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// wire is the expected content of the class data at an offset, worked out
// by hand from the IBTA tables (the layouts in include/rdma/ibta_vol1_c12.h).
type wire struct {
	off int
	hex string
}

func newREQ() *REQ {
	m := &REQ{
		LocalCommID: 0x11223344, VendorID: 0x0a0b0c, ServiceID: 0x0123456789abcdef,
		LocalCAGUID: 0x1122334455667788, LocalQKey: 0x99aabbcc, LocalQPN: 0xabcdef,
		ResponderResources: 0x12, LocalEECN: 0x345678, InitiatorDepth: 0x9a, RemoteEECN: 0xbcdef1,
		RemoteCMResponseTimeout: 0x15, TransportServiceType: TransportUC, EndToEndFlowControl: true,
		StartingPSN: 0x654321, LocalCMResponseTimeout: 0x0e, RetryCount: 5, PKey: 0x8001,
		PathMTU: bth.MTU4096, RDCExists: true, RNRRetryCount: 6, MaxCMRetries: 0xb, SRQ: true,
		ExtendedTransportType: 3,
		Primary: Path{
			LocalLID: 0x0102, RemoteLID: 0x0304, LocalGID: gid("2001:db8::1"), RemoteGID: gid("2001:db8::2"),
			FlowLabel: 0xabcde, PacketRate: 0x2a, TrafficClass: 0x88, HopLimit: 0x40, SL: 9,
			SubnetLocal: true, LocalACKTimeout: 0x13,
		},
		Alternate: Path{
			LocalLID: 0x0506, RemoteLID: 0x0708, LocalGID: gid("2001:db8::3"), RemoteGID: gid("2001:db8::4"),
			FlowLabel: 0x12345, PacketRate: 0x15, TrafficClass: 0x44, HopLimit: 0x20, SL: 3,
			LocalACKTimeout: 0x1f,
		},
		SAPSupported: true,
	}
	fill(m.PrivateData[:], 0x80)
	return m
}

// newCMAREQ is a REQ as rdma_cm sends it over IPv6.
func newCMAREQ() *REQ {
	m := newREQ()
	m.ServiceID = ServiceID(PortSpaceTCP, 4791)
	m.Primary.LocalGID, m.Primary.RemoteGID = gid("::ffff:198.18.0.12"), gid("::ffff:198.18.0.11")
	h := CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("2001:db8::12"), Dst: netip.MustParseAddr("2001:db8::11")}
	if err := h.Marshal(m.PrivateData[:]); err != nil {
		panic(err)
	}
	return m
}

func newREP() *REP {
	m := &REP{
		LocalCommID: 0x01020304, RemoteCommID: 0x05060708, LocalQKey: 0x090a0b0c, LocalQPN: 0x0d0e0f,
		LocalEECN: 0x101112, StartingPSN: 0x131415, ResponderResources: 0x16, InitiatorDepth: 0x17,
		TargetACKDelay: 0x19, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 5, SRQ: true,
		LocalCAGUID: 0x18191a1b1c1d1e1f, VendorID: 0xa1b2c3,
	}
	fill(m.PrivateData[:], 0x20)
	return m
}

func newMRA() *MRA {
	m := &MRA{LocalCommID: 0x0a0b0c0d, RemoteCommID: 0x01020304, MessageMRAed: MRAedLAP, ServiceTimeout: 0x17}
	fill(m.PrivateData[:], 0x30)
	return m
}

func newREJ() *REJ {
	m := &REJ{
		LocalCommID: 0x11111111, RemoteCommID: 0x22222222, MessageRejected: RejectedREP,
		RejectInfoLength: 16, Reason: RejInvalidServiceID,
	}
	fill(m.ARI[:], 0x40)
	fill(m.PrivateData[:], 0x50)
	return m
}

func newRTU() *RTU {
	m := &RTU{LocalCommID: 0x21222324, RemoteCommID: 0x25262728}
	fill(m.PrivateData[:], 0x60)
	return m
}

func newDREQ() *DREQ {
	m := &DREQ{LocalCommID: 0x29292929, RemoteCommID: 0x2a2a2a2a, RemoteQPN: 0xfedcba}
	fill(m.PrivateData[:], 0x70)
	return m
}

func newDREP() *DREP {
	m := &DREP{LocalCommID: 0x2b2b2b2b, RemoteCommID: 0x2c2c2c2c}
	fill(m.PrivateData[:], 0x90)
	return m
}

func newLAP() *LAP {
	m := &LAP{
		LocalCommID: 0x31323334, RemoteCommID: 0x35363738, RemoteQPN: 0x393a3b, RemoteCMResponseTimeout: 0x1d,
		Alternate: Path{
			LocalLID: 0x4142, RemoteLID: 0x4344, LocalGID: gid("2001:db8::5"), RemoteGID: gid("2001:db8::6"),
			FlowLabel: 0xfedcb, TrafficClass: 0x5a, HopLimit: 0x7f, PacketRate: 0x3f, SL: 0xf,
			SubnetLocal: true, LocalACKTimeout: 0x11,
		},
	}
	fill(m.PrivateData[:], 0xa0)
	return m
}

func newAPR() *APR {
	m := &APR{LocalCommID: 0x45464748, RemoteCommID: 0x494a4b4c, AdditionalInfoLength: 0x20, Status: APInvalidGID}
	fill(m.AdditionalInfo[:], 0xb0)
	fill(m.PrivateData[:], 0xc0)
	return m
}

func newSIDRREQ() *SIDRREQ {
	m := &SIDRREQ{RequestID: 0x51525354, PKey: 0x7fff, ServiceID: ServiceID(PortSpaceUDP, 0x1234)}
	fill(m.PrivateData[:], 0xd0)
	return m
}

func newSIDRREP() *SIDRREP {
	m := &SIDRREP{
		RequestID: 0x61626364, Status: SIDRRedirect, AdditionalInfoLength: 0x48, QPN: 0x656667,
		ServiceID: 0x68696a6b6c6d6e6f, QKey: 0x70717273, VendorID: 0x747576,
	}
	fill(m.AdditionalInfo[:], 0xe0)
	fill(m.PrivateData[:], 0xf0)
	return m
}

func newClassPortInfo() *ClassPortInfo {
	return &ClassPortInfo{
		BaseVersion: 1, ClassVersion: 2, CapabilityMask: 0x0304, CapabilityMask2: 0x5abcdef, RespTimeValue: 0x13,
		RedirectGID: gid("2001:db8::7"), RedirectTC: 0x81, RedirectSL: 0xa, RedirectFL: 0xbcdef,
		RedirectLID: 0x1234, RedirectPKey: 0xffff, RedirectQP: 0x010203, RedirectQKey: bth.GSIQKey,
		TrapGID: gid("2001:db8::8"), TrapTC: 0x42, TrapSL: 5, TrapFL: 0x6789a, TrapLID: 0x5678,
		TrapPKey: 0x7fff, TrapHL: 0x40, TrapQP: 0x040506, TrapQKey: bth.GSIQKey,
	}
}

// sample is a message with every field set, and where its fields must land.
type sample struct {
	name string
	msg  Message
	wire []wire
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

func sampleMessages() []sample {
	req, cmaReq, rep, mra, rej := newREQ(), newCMAREQ(), newREP(), newMRA(), newREJ()
	rtu, dreq, drep, lap, apr := newRTU(), newDREQ(), newDREP(), newLAP(), newAPR()
	sreq, srep, cpi := newSIDRREQ(), newSIDRREP(), newClassPortInfo()
	return []sample{
		{"REQ", req, []wire{
			{0, "11223344" + "000a0b0c" + "0123456789abcdef" + "1122334455667788" + "00000000" + "99aabbcc"},
			{32, "abcdef12" + "3456789a" + "bcdef1ab" + "65432175" + "8001" + "5e" + "bb"},
			{52, "01020304" + "20010db8000000000000000000000001" + "20010db8000000000000000000000002"},
			{88, "abcde02a" + "88" + "40" + "98" + "98"},
			{96, "05060708" + "20010db8000000000000000000000003" + "20010db8000000000000000000000004"},
			{132, "12345015" + "44" + "20" + "30" + "fc"},
			{140, hexOf(req.PrivateData[:])},
		}},
		{"REQ/rdma_cm", cmaReq, []wire{
			{8, "000000000106" + "12b7"},
			{56, "00000000000000000000ffffc612000c" + "00000000000000000000ffffc612000b"},
			{140, "0060" + "9c40" + "20010db8000000000000000000000012" + "20010db8000000000000000000000011"},
			{176, hexOf(cmaReq.PrivateData[CMAHeaderLen:])},
		}},
		{"REP", rep, []wire{
			{0, "01020304" + "05060708" + "090a0b0c" + "0d0e0fa1" + "101112b2" + "131415c3" + "16" + "17" + "cd" + "b0" + "18191a1b1c1d1e1f"},
			{36, hexOf(rep.PrivateData[:])},
		}},
		{"MRA", mra, []wire{{0, "0a0b0c0d" + "01020304" + "80" + "b8" + hexOf(mra.PrivateData[:])}}},
		{"REJ", rej, []wire{{0, "11111111" + "22222222" + "40" + "20" + "0008" + hexOf(rej.ARI[:]) + hexOf(rej.PrivateData[:])}}},
		{"RTU", rtu, []wire{{0, "21222324" + "25262728" + hexOf(rtu.PrivateData[:])}}},
		{"DREQ", dreq, []wire{{0, "29292929" + "2a2a2a2a" + "fedcba00" + hexOf(dreq.PrivateData[:])}}},
		{"DREP", drep, []wire{{0, "2b2b2b2b" + "2c2c2c2c" + hexOf(drep.PrivateData[:])}}},
		{"LAP", lap, []wire{{0, "31323334" + "35363738" + "00000000" + "393a3be8" + "00000000" + "41424344" +
			"20010db8000000000000000000000005" + "20010db8000000000000000000000006" +
			"fedcb05a" + "7f" + "3f" + "f8" + "88" + hexOf(lap.PrivateData[:])}}},
		{"APR", apr, []wire{{0, "45464748" + "494a4b4c" + "20" + "08" + "0000" + hexOf(apr.AdditionalInfo[:]) + hexOf(apr.PrivateData[:])}}},
		{"SIDR_REQ", sreq, []wire{{0, "51525354" + "7fff0000" + "0000000001111234" + hexOf(sreq.PrivateData[:])}}},
		{"SIDR_REP", srep, []wire{{0, "61626364" + "04487475" + "65666776" + "68696a6b6c6d6e6f" + "70717273" +
			hexOf(srep.AdditionalInfo[:]) + hexOf(srep.PrivateData[:])}}},
		{"ClassPortInfo", cpi, []wire{{0, "01020304" + "b579bdf3" + "20010db8000000000000000000000007" +
			"81abcdef" + "1234ffff" + "00010203" + "80010000" + "20010db8000000000000000000000008" +
			"4256789a" + "56787fff" + "40040506" + "80010000" + strings.Repeat("00", DataLen-ClassPortInfoLen)}}},
	}
}

// TestMessages encodes a message of each type with every field set,
// checks the bytes against the IBTA layout, and decodes it back.
func TestMessages(t *testing.T) {
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			var b [Len]byte
			for i := range b {
				b[i] = 0xEE // Encode must write every byte
			}
			h := CMHeader(MethodSend, 0xfeedface12345678)
			h.AttrID = 0x9999 // Encode takes the ID from the message
			if err := Encode(h, s.msg, b[:]); err != nil {
				t.Fatal(err)
			}
			if got, want := hexOf(b[:HeaderLen]), "01070203"+"0000"+"0000"+"feedface12345678"+hexOf(be16(s.msg.AttrID()))+"0000"+"00000000"; got != want {
				t.Errorf("header %s, want %s", got, want)
			}
			d := b[HeaderLen:]
			covered := 0
			for _, w := range s.wire {
				want, err := hex.DecodeString(w.hex)
				if err != nil {
					t.Fatal(err)
				}
				if got := d[w.off : w.off+len(want)]; !bytes.Equal(got, want) {
					t.Errorf("at %d: %x\n  want %x", w.off, got, want)
				}
				covered += len(want)
			}
			// The layouts cover every byte, so a byte Encode left alone
			// (still 0xEE) shows as a mismatch.
			if s.name != "REQ/rdma_cm" && covered != DataLen {
				t.Errorf("the expected layout covers %d of %d bytes", covered, DataLen)
			}
			gh, gm, err := Decode(b[:])
			if err != nil {
				t.Fatal(err)
			}
			h.AttrID = s.msg.AttrID()
			if gh != h {
				t.Errorf("header %+v, want %+v", gh, h)
			}
			if !reflect.DeepEqual(gm, s.msg) {
				t.Errorf("decoded %+v\nwant %+v", gm, s.msg)
			}
			if AttrName(gm.AttrID()) != strings.TrimSuffix(s.name, "/rdma_cm") {
				t.Errorf("AttrName %q", AttrName(gm.AttrID()))
			}
		})
	}
}

func be16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

// TestReservedBits checks that the bits Marshal writes as zero whatever the
// message are exactly the reserved bits of the IBTA tables.
func TestReservedBits(t *testing.T) {
	type bits struct {
		off  int
		mask byte
	}
	reserved := map[uint16][]bits{
		AttrREQ: {{4, 0xFF}, {24, 0xFF}, {25, 0xFF}, {26, 0xFF}, {27, 0xFF}, {90, 0x0F}, {91, 0xC0}, {94, 0x07}, {95, 0x07},
			{134, 0x0F}, {135, 0xC0}, {138, 0x07}, {139, 0x03}},
		AttrMRA:     {{8, 0x3F}, {9, 0x07}},
		AttrREJ:     {{8, 0x3F}, {9, 0x01}},
		AttrREP:     {{27, 0x0F}},
		AttrRTU:     nil,
		AttrDREQ:    {{11, 0xFF}},
		AttrDREP:    nil,
		AttrLAP:     {{8, 0xFF}, {9, 0xFF}, {10, 0xFF}, {11, 0xFF}, {15, 0x07}, {16, 0xFF}, {17, 0xFF}, {18, 0xFF}, {19, 0xFF}, {58, 0x0F}, {61, 0xC0}, {62, 0x07}, {63, 0x07}},
		AttrAPR:     {{10, 0xFF}, {11, 0xFF}},
		AttrSIDRREQ: {{6, 0xFF}, {7, 0xFF}},
		AttrSIDRREP: nil,
		AttrClassPortInfo: func() []bits {
			r := []bits{{32, 0xFF}}
			for i := ClassPortInfoLen; i < DataLen; i++ {
				r = append(r, bits{i, 0xFF})
			}
			return r
		}(),
	}
	for attr, res := range reserved {
		t.Run(AttrName(attr), func(t *testing.T) {
			want := bytes.Repeat([]byte{0xFF}, DataLen)
			for _, r := range res {
				want[r.off] &^= r.mask
			}
			if got := keptBits(t, attr); !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("byte %d: kept bits %08b, want %08b", i, got[i], want[i])
					}
				}
			}
		})
	}
	var h Header
	var b [HeaderLen]byte
	for i := range b {
		b[i] = 0xFF
	}
	b[0] = BaseVersion
	if err := h.Unmarshal(b[:]); err != nil {
		t.Fatal(err)
	}
	if err := h.Marshal(b[:]); err != nil {
		t.Fatal(err)
	}
	if b[18] != 0 || b[19] != 0 || bytes.Count(b[1:], []byte{0xFF}) != HeaderLen-3 {
		t.Errorf("header re-encoded as %x", b)
	}
}

// keptBits decodes class data of all ones as attr and encodes it again:
// what comes back are the bits the message keeps.
func keptBits(t testing.TB, attr uint16) []byte {
	m := NewMessage(attr)
	ones := bytes.Repeat([]byte{0xFF}, DataLen)
	if err := m.Unmarshal(ones); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, DataLen)
	if err := m.Marshal(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOutOfRange sets each sub-byte or 24-bit field one past its largest
// value: Marshal and Encode must fail with a FieldError naming it and leave
// the buffer alone.
func TestOutOfRange(t *testing.T) {
	tests := []struct {
		field string
		msg   func() Message
	}{
		{"VendorID", func() Message { m := newREQ(); m.VendorID = 1 << 24; return m }},
		{"LocalQPN", func() Message { m := newREQ(); m.LocalQPN = 1 << 24; return m }},
		{"LocalEECN", func() Message { m := newREQ(); m.LocalEECN = 1 << 24; return m }},
		{"RemoteEECN", func() Message { m := newREQ(); m.RemoteEECN = 1 << 24; return m }},
		{"RemoteCMResponseTimeout", func() Message { m := newREQ(); m.RemoteCMResponseTimeout = 32; return m }},
		{"TransportServiceType", func() Message { m := newREQ(); m.TransportServiceType = 4; return m }},
		{"StartingPSN", func() Message { m := newREQ(); m.StartingPSN = 1 << 24; return m }},
		{"LocalCMResponseTimeout", func() Message { m := newREQ(); m.LocalCMResponseTimeout = 32; return m }},
		{"RetryCount", func() Message { m := newREQ(); m.RetryCount = 8; return m }},
		{"PathMTU", func() Message { m := newREQ(); m.PathMTU = 16; return m }},
		{"RNRRetryCount", func() Message { m := newREQ(); m.RNRRetryCount = 8; return m }},
		{"MaxCMRetries", func() Message { m := newREQ(); m.MaxCMRetries = 16; return m }},
		{"ExtendedTransportType", func() Message { m := newREQ(); m.ExtendedTransportType = 8; return m }},
		{"Primary.FlowLabel", func() Message { m := newREQ(); m.Primary.FlowLabel = 1 << 20; return m }},
		{"Primary.PacketRate", func() Message { m := newREQ(); m.Primary.PacketRate = 64; return m }},
		{"Primary.SL", func() Message { m := newREQ(); m.Primary.SL = 16; return m }},
		{"Primary.LocalACKTimeout", func() Message { m := newREQ(); m.Primary.LocalACKTimeout = 32; return m }},
		{"Alternate.FlowLabel", func() Message { m := newREQ(); m.Alternate.FlowLabel = 1 << 20; return m }},
		{"Alternate.PacketRate", func() Message { m := newREQ(); m.Alternate.PacketRate = 64; return m }},
		{"Alternate.SL", func() Message { m := newREQ(); m.Alternate.SL = 16; return m }},
		{"Alternate.LocalACKTimeout", func() Message { m := newREQ(); m.Alternate.LocalACKTimeout = 32; return m }},
		{"MessageMRAed", func() Message { m := newMRA(); m.MessageMRAed = 4; return m }},
		{"ServiceTimeout", func() Message { m := newMRA(); m.ServiceTimeout = 32; return m }},
		{"MessageRejected", func() Message { m := newREJ(); m.MessageRejected = 4; return m }},
		{"RejectInfoLength", func() Message { m := newREJ(); m.RejectInfoLength = 128; return m }},
		{"LocalQPN", func() Message { m := newREP(); m.LocalQPN = 1 << 24; return m }},
		{"LocalEECN", func() Message { m := newREP(); m.LocalEECN = 1 << 24; return m }},
		{"StartingPSN", func() Message { m := newREP(); m.StartingPSN = 1 << 24; return m }},
		{"TargetACKDelay", func() Message { m := newREP(); m.TargetACKDelay = 32; return m }},
		{"FailoverAccepted", func() Message { m := newREP(); m.FailoverAccepted = 4; return m }},
		{"RNRRetryCount", func() Message { m := newREP(); m.RNRRetryCount = 8; return m }},
		{"VendorID", func() Message { m := newREP(); m.VendorID = 1 << 24; return m }},
		{"RemoteQPN", func() Message { m := newDREQ(); m.RemoteQPN = 1 << 24; return m }},
		{"RemoteQPN", func() Message { m := newLAP(); m.RemoteQPN = 1 << 24; return m }},
		{"RemoteCMResponseTimeout", func() Message { m := newLAP(); m.RemoteCMResponseTimeout = 32; return m }},
		{"Alternate.FlowLabel", func() Message { m := newLAP(); m.Alternate.FlowLabel = 1 << 20; return m }},
		{"Alternate.PacketRate", func() Message { m := newLAP(); m.Alternate.PacketRate = 64; return m }},
		{"Alternate.SL", func() Message { m := newLAP(); m.Alternate.SL = 16; return m }},
		{"Alternate.LocalACKTimeout", func() Message { m := newLAP(); m.Alternate.LocalACKTimeout = 32; return m }},
		{"QPN", func() Message { m := newSIDRREP(); m.QPN = 1 << 24; return m }},
		{"VendorID", func() Message { m := newSIDRREP(); m.VendorID = 1 << 24; return m }},
		{"CapabilityMask2", func() Message { m := newClassPortInfo(); m.CapabilityMask2 = 1 << 27; return m }},
		{"RespTimeValue", func() Message { m := newClassPortInfo(); m.RespTimeValue = 32; return m }},
		{"RedirectSL", func() Message { m := newClassPortInfo(); m.RedirectSL = 16; return m }},
		{"RedirectFL", func() Message { m := newClassPortInfo(); m.RedirectFL = 1 << 20; return m }},
		{"RedirectQP", func() Message { m := newClassPortInfo(); m.RedirectQP = 1 << 24; return m }},
		{"TrapSL", func() Message { m := newClassPortInfo(); m.TrapSL = 16; return m }},
		{"TrapFL", func() Message { m := newClassPortInfo(); m.TrapFL = 1 << 20; return m }},
		{"TrapQP", func() Message { m := newClassPortInfo(); m.TrapQP = 1 << 24; return m }},
	}
	for _, tt := range tests {
		m := tt.msg()
		t.Run(AttrName(m.AttrID())+"."+tt.field, func(t *testing.T) {
			b := bytes.Repeat([]byte{0xEE}, Len)
			for _, err := range []error{m.Marshal(b[HeaderLen:]), Encode(CMHeader(MethodSend, 1), m, b)} {
				var fe *FieldError
				if !errors.As(err, &fe) || !errors.Is(err, ErrRange) {
					t.Fatalf("error %v, want a FieldError", err)
				}
				if fe.Field != tt.field || !strings.Contains(err.Error(), tt.field) {
					t.Errorf("error names %q (%v), want %q", fe.Field, err, tt.field)
				}
				if fe.Value != 1<<fe.Bits {
					t.Errorf("error says %d does not fit %d bits", fe.Value, fe.Bits)
				}
			}
			if !bytes.Equal(b, bytes.Repeat([]byte{0xEE}, Len)) {
				t.Errorf("buffer written on error")
			}
		})
	}
	// The largest values that fit are accepted.
	for _, s := range sampleMessages() {
		if err := s.msg.Marshal(make([]byte, DataLen)); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	max := newREQ()
	max.LocalQPN, max.StartingPSN, max.RemoteCMResponseTimeout, max.RetryCount = 1<<24-1, 1<<24-1, 31, 7
	max.PathMTU, max.Primary.FlowLabel, max.Primary.PacketRate, max.Primary.SL = 15, 1<<20-1, 63, 15
	if err := max.Marshal(make([]byte, DataLen)); err != nil {
		t.Errorf("largest values: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := make([]byte, Len)
	if err := Encode(CMHeader(MethodSend, 7), newRTU(), valid); err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(valid)
		f(b)
		return b
	}
	tests := []struct {
		name string
		mad  []byte
		want error
	}{
		{"empty", nil, ErrLength},
		{"short header", valid[:HeaderLen-1], ErrLength},
		{"short", valid[:Len-1], ErrLength},
		{"long", append(bytes.Clone(valid), 0), ErrLength},
		{"base version 0", mod(func(b []byte) { b[0] = 0 }), ErrBaseVersion},
		{"base version 2", mod(func(b []byte) { b[0] = 2 }), ErrBaseVersion},
		{"class SA", mod(func(b []byte) { b[1] = ClassSubnAdm }), ErrClass},
		{"class version 1", mod(func(b []byte) { b[2] = 1 }), ErrClassVersion},
		{"attribute 0", mod(func(b []byte) { b[16], b[17] = 0, 0 }), ErrUnknownAttr},
		{"attribute 0x1B", mod(func(b []byte) { b[16], b[17] = 0, 0x1B }), ErrUnknownAttr},
		{"attribute 0x1010", mod(func(b []byte) { b[16], b[17] = 0x10, 0x10 }), ErrUnknownAttr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m, err := Decode(tt.mad)
			if !errors.Is(err, tt.want) || m != nil {
				t.Errorf("Decode: %v, %v; want %v", m, err, tt.want)
			}
		})
	}
	if _, _, err := Decode(valid); err != nil {
		t.Errorf("valid MAD: %v", err)
	}
	// Short buffers for every encoder and decoder.
	for _, s := range sampleMessages() {
		if err := s.msg.Marshal(make([]byte, DataLen-1)); !errors.Is(err, ErrShort) {
			t.Errorf("%s.Marshal short: %v", s.name, err)
		}
		if err := NewMessage(s.msg.AttrID()).Unmarshal(make([]byte, DataLen-1)); !errors.Is(err, ErrShort) {
			t.Errorf("%s.Unmarshal short: %v", s.name, err)
		}
		if err := Encode(CMHeader(MethodSend, 1), s.msg, make([]byte, Len-1)); !errors.Is(err, ErrShort) {
			t.Errorf("Encode %s short: %v", s.name, err)
		}
	}
	var h Header
	if err := h.Unmarshal(make([]byte, HeaderLen-1)); !errors.Is(err, ErrShort) {
		t.Errorf("Header.Unmarshal short: %v", err)
	}
	if err := h.Marshal(make([]byte, HeaderLen)); !errors.Is(err, ErrBaseVersion) {
		t.Errorf("Header.Marshal of base version 0: %v", err)
	}
	if err := Encode(Header{}, newRTU(), make([]byte, Len)); !errors.Is(err, ErrBaseVersion) {
		t.Errorf("Encode of base version 0: %v", err)
	}
	if NewMessage(0x1B) != nil {
		t.Error("NewMessage(0x1B) is not nil")
	}
}

// TestUnmarshalIgnoresReserved decodes messages with every reserved bit
// set and checks they equal the clean decoding and re-encode clean.
func TestUnmarshalIgnoresReserved(t *testing.T) {
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			clean := make([]byte, DataLen)
			if err := s.msg.Marshal(clean); err != nil {
				t.Fatal(err)
			}
			kept := keptBits(t, s.msg.AttrID())
			dirty := bytes.Clone(clean)
			for i := range dirty {
				dirty[i] |= ^kept[i]
			}
			m := NewMessage(s.msg.AttrID())
			if err := m.Unmarshal(dirty); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, s.msg) {
				t.Errorf("with reserved bits set: %+v", m)
			}
			again := make([]byte, DataLen)
			if err := m.Marshal(again); err != nil || !bytes.Equal(again, clean) {
				t.Errorf("re-encoded %x, %v", again, err)
			}
		})
	}
}

func TestCMAHeader(t *testing.T) {
	v4 := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	tests := []struct {
		name string
		h    CMAHeader
		wire string
	}{
		{"IPv4", CMAHeader{SrcPort: 0xc395, Src: v4("198.18.0.12"), Dst: v4("198.18.0.11")},
			"0040c395" + "000000000000000000000000c612000c" + "000000000000000000000000c612000b"},
		{"IPv6", CMAHeader{SrcPort: 1, Src: v4("2001:db8::1"), Dst: v4("2001:db8:ffff::2")},
			"00600001" + "20010db8000000000000000000000001" + "20010db8ffff00000000000000000002"},
		{"IPv4-mapped is IPv6", CMAHeader{SrcPort: 0xffff, Src: v4("::ffff:198.18.0.1"), Dst: v4("::ffff:198.18.0.2")},
			"0060ffff" + "00000000000000000000ffffc6120001" + "00000000000000000000ffffc6120002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Repeat([]byte{0xEE}, CMAHeaderLen+1)
			if err := tt.h.Marshal(b); err != nil {
				t.Fatal(err)
			}
			if got := hexOf(b[:CMAHeaderLen]); got != tt.wire || b[CMAHeaderLen] != 0xEE {
				t.Errorf("wire %s\n want %s", got, tt.wire)
			}
			var h CMAHeader
			if err := h.Unmarshal(b); err != nil || h != tt.h {
				t.Errorf("Unmarshal: %+v, %v", h, err)
			}
		})
	}
	bad := []struct {
		name string
		h    CMAHeader
	}{
		{"no source", CMAHeader{Dst: v4("198.18.0.1")}},
		{"no destination", CMAHeader{Src: v4("198.18.0.1")}},
		{"mixed", CMAHeader{Src: v4("198.18.0.1"), Dst: v4("2001:db8::1")}},
		{"mixed mapped", CMAHeader{Src: v4("198.18.0.1"), Dst: v4("::ffff:198.18.0.2")}},
	}
	for _, tt := range bad {
		b := bytes.Repeat([]byte{0xEE}, CMAHeaderLen)
		if err := tt.h.Marshal(b); !errors.Is(err, ErrAddr) || b[0] != 0xEE {
			t.Errorf("%s: Marshal %v", tt.name, err)
		}
	}
	var h CMAHeader
	good, _ := hex.DecodeString(tests[0].wire)
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:CMAHeaderLen-1], ErrShort},
		{"version 1", append([]byte{1}, good[1:]...), ErrCMAVersion},
		{"IP version 5", append([]byte{0, 0x50}, good[2:]...), ErrIPVersion},
		{"IP version 0", append([]byte{0, 0x00}, good[2:]...), ErrIPVersion},
	} {
		if err := h.Unmarshal(c.b); !errors.Is(err, c.want) {
			t.Errorf("Unmarshal %s: %v, want %v", c.name, err, c.want)
		}
	}
	// The reserved nibble and the IPv4 padding are ignored.
	dirty := bytes.Clone(good)
	dirty[1] |= 0x0F
	dirty[4], dirty[20] = 0xAA, 0xBB
	if err := h.Unmarshal(dirty); err != nil || h != tests[0].h {
		t.Errorf("with reserved bits: %+v, %v", h, err)
	}
	if MaxREQUserData != 56 {
		t.Errorf("MaxREQUserData %d", MaxREQUserData)
	}
}

func TestServiceID(t *testing.T) {
	tests := []struct {
		ps   PortSpace
		port uint16
		id   uint64
		name string
	}{
		{PortSpaceTCP, 7174, 0x0000000001061c06, "TCP"},
		{PortSpaceTCP, 18515, 0x0000000001064853, "TCP"},
		{PortSpaceUDP, 0, 0x0000000001110000, "UDP"},
		{PortSpaceIB, 0xffff, 0x00000000013fffff, "IB"},
		{PortSpaceIPoIB, 1, 0x0000000000020001, "IPoIB"},
	}
	for _, tt := range tests {
		if got := ServiceID(tt.ps, tt.port); got != tt.id {
			t.Errorf("ServiceID(%v, %d) = %#x, want %#x", tt.ps, tt.port, got, tt.id)
		}
		ps, port, ok := ParseServiceID(tt.id)
		if !ok || ps != tt.ps || port != tt.port {
			t.Errorf("ParseServiceID(%#x) = %v %d %v", tt.id, ps, port, ok)
		}
		if tt.ps.String() != tt.name {
			t.Errorf("%v.String() = %q", tt.ps, tt.ps.String())
		}
	}
	for _, id := range []uint64{0, 0x0000000001070000, 0x0000000101061c06, 0x0200000000000000, 0xffffffffffffffff} {
		if ps, port, ok := ParseServiceID(id); ok {
			t.Errorf("ParseServiceID(%#x) = %v %d, true", id, ps, port)
		}
	}
	if s := PortSpace(0x0107).String(); s != "PortSpace(0x0107)" {
		t.Errorf("String %q", s)
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		t uint8
		d time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{1, 8192 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond}, // rxe's default local ACK timeout, about 67 ms
		{20, 4294967296 * time.Nanosecond},
		{31, 4096 << 31 * time.Nanosecond},
		{32, 4096 << 31 * time.Nanosecond},
		{255, 4096 << 31 * time.Nanosecond},
	}
	for _, tt := range tests {
		if got := Timeout(tt.t); got != tt.d {
			t.Errorf("Timeout(%d) = %v, want %v", tt.t, got, tt.d)
		}
	}
	for _, c := range []struct {
		d time.Duration
		t uint8
	}{
		{0, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {4 * time.Second, 20}, {4294967296, 20}, {4294967297, 21}, {24 * time.Hour, 31},
	} {
		if got := TimeoutExp(c.d); got != c.t {
			t.Errorf("TimeoutExp(%v) = %d, want %d", c.d, got, c.t)
		}
	}
}

func TestNames(t *testing.T) {
	names := map[uint16]string{
		AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP",
		AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
		AttrLAP: "LAP", AttrAPR: "APR", 0x1b: "Attr(0x001b)", 0xff10: "Attr(0xff10)",
	}
	for id, want := range names {
		if got := AttrName(id); got != want {
			t.Errorf("AttrName(%#x) = %q, want %q", id, got, want)
		}
		if m := NewMessage(id); m != nil && m.AttrID() != id {
			t.Errorf("NewMessage(%#x).AttrID() = %#x", id, m.AttrID())
		}
	}
	for _, c := range []struct{ got, want string }{
		{MethodSend.String(), "Send"}, {MethodGetResp.String(), "GetResp"}, {Method(0x42).String(), "Method(0x42)"},
		{RejStaleConn.String(), "stale connection"}, {RejConsumerDefined.String(), "consumer defined"},
		{RejectReason(34).String(), "reason(34)"}, {RejectReason(1000).String(), "reason(1000)"},
		{TransportRC.String(), "RC"}, {TransportType(3).String(), "Extended"},
		{RejectedREP.String(), "REP"}, {RejectedMsg(3).String(), "RejectedMsg(3)"},
		{MRAedLAP.String(), "LAP"}, {MRAedMsg(3).String(), "MRAedMsg(3)"},
		{SIDRNoQP.String(), "no QP"}, {SIDRStatus(9).String(), "SIDRStatus(9)"},
		{APIsCurrent.String(), "path is the current one"}, {APStatus(14).String(), "APStatus(14)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for r := RejectReason(1); r <= 35; r++ {
		if r != 34 && strings.HasPrefix(r.String(), "reason(") {
			t.Errorf("reason %d has no name", r)
		}
	}
}

func TestREJARIBytes(t *testing.T) {
	m := newREJ()
	if got := m.ARIBytes(); !bytes.Equal(got, m.ARI[:16]) {
		t.Errorf("ARIBytes %x", got)
	}
	m.RejectInfoLength = 127
	if got := m.ARIBytes(); len(got) != REJARILen {
		t.Errorf("ARIBytes of length 127: %d bytes", len(got))
	}
}

// TestDecodeAllocs checks that a REQ decodes without allocating when the
// caller brings the message.
func TestDecodeAllocs(t *testing.T) {
	mad := make([]byte, Len)
	if err := Encode(CMHeader(MethodSend, 1), newCMAREQ(), mad); err != nil {
		t.Fatal(err)
	}
	var h Header
	var m REQ
	var c CMAHeader
	allocs := testing.AllocsPerRun(100, func() {
		if h.Unmarshal(mad) != nil || m.Unmarshal(mad[HeaderLen:]) != nil || c.Unmarshal(m.PrivateData[:]) != nil {
			panic("decode failed")
		}
		if m.Marshal(mad[HeaderLen:]) != nil {
			panic("encode failed")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode and encode", allocs)
	}
}
