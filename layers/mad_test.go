package layers

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
)

func TestPacketMAD(t *testing.T) {
	p := gopacket.NewPacket(testPacketRoCECMREQ, gplayers.LayerTypeEthernet, gopacket.Default)
	if p.ErrorLayer() != nil {
		t.Fatal("decode failed:", p.ErrorLayer().Error())
	}
	checkLayers(t, p, ethIPv4UDPRoCEMAD)
	got, ok := p.Layer(LayerTypeMAD).(*MAD)
	if !ok {
		t.Fatal("no MAD layer")
	}
	// The MAD starts after Ethernet (14), IPv4 (20), UDP (8), BTH (12) and
	// DETH (8); it is 256 bytes long.
	const madStart = 62
	want := &MAD{
		BaseLayer: gplayers.BaseLayer{
			Contents: testPacketRoCECMREQ[madStart : madStart+MADHeaderLen],
			Payload:  testPacketRoCECMREQ[madStart+MADHeaderLen : madStart+MADLen],
		},
		BaseVersion: 1, MgmtClass: MADClassCM, ClassVersion: 2, Method: 0x03,
		TransactionID: 0x00000002f2182779, AttributeID: CMAttrREQ,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MAD\n got %+v\nwant %+v", got, want)
	}
	// The REQ's local communication ID opens the MAD data; the service ID
	// (rping's port 7174 in the TCP port space) follows at offset 8.
	if !bytes.Equal(got.Payload[:4], []byte{0x79, 0x27, 0x18, 0xf2}) ||
		!bytes.Equal(got.Payload[8:16], []byte{0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06}) {
		t.Errorf("MAD data starts % x", got.Payload[:16])
	}
	if got.Response() || MADClassName(got.MgmtClass) != "CM" || MADMethodName(got.Method) != "Send" ||
		MADAttributeName(got.MgmtClass, got.AttributeID) != "REQ" {
		t.Errorf("names: response %v class %q method %q attr %q", got.Response(), MADClassName(got.MgmtClass),
			MADMethodName(got.Method), MADAttributeName(got.MgmtClass, got.AttributeID))
	}
}

func TestIsomorphicPacketMAD(t *testing.T) {
	m := &MAD{BaseVersion: 1, MgmtClass: MADClassSubnAdm, ClassVersion: 2, Method: 0x81, Status: 0x1c,
		ClassSpecific: 0xbeef, TransactionID: 0xfedcba9876543210, AttributeID: 0x0035, AttributeModifier: 0x80000001}
	data := bytes.Repeat([]byte{0xa5}, MADLen-MADHeaderLen)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{}, m, gopacket.Payload(data)); err != nil {
		t.Fatal(err)
	}
	if len(b.Bytes()) != MADLen || b.Bytes()[18] != 0 || b.Bytes()[19] != 0 {
		t.Fatalf("serialized % x", b.Bytes()[:MADHeaderLen])
	}
	p := gopacket.NewPacket(b.Bytes(), LayerTypeMAD, gopacket.Default)
	got := p.Layer(LayerTypeMAD).(*MAD)
	got.BaseLayer = gplayers.BaseLayer{}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("MAD isomorph mismatch\n got %+v\nwant %+v", got, m)
	}
	if !got.Response() {
		t.Error("GetResp is a response")
	}
}

func TestMADDecodeErrors(t *testing.T) {
	var m MAD
	if err := m.DecodeFromBytes(make([]byte, MADHeaderLen-1), gopacket.NilDecodeFeedback); !errors.Is(err, ErrMADTruncated) {
		t.Errorf("short MAD: %v", err)
	}
	// A UD SEND to QP1 whose payload is too short for a MAD header is an
	// error layer, not a panic.
	frame := append([]byte(nil), testPacketRoCECMREQ...)
	p := gopacket.NewPacket(frame[:62+10], gplayers.LayerTypeEthernet, gopacket.Default)
	if p.Layer(LayerTypeRoCE) == nil {
		t.Fatal("no RoCE layer in a truncated CM frame")
	}
	if p.ErrorLayer() == nil || !errors.Is(p.ErrorLayer().Error(), ErrMADTruncated) {
		t.Errorf("error layer %v", p.ErrorLayer())
	}
}

func TestRegisterMADClassLayerType(t *testing.T) {
	lt := gopacket.LayerTypeDecodeFailure // any type other than Payload
	defer RegisterMADClassLayerType(MADClassCM, gopacket.LayerTypeZero)
	m := MAD{MgmtClass: MADClassCM}
	if m.NextLayerType() != gopacket.LayerTypePayload {
		t.Fatalf("unregistered class: %v", m.NextLayerType())
	}
	RegisterMADClassLayerType(MADClassCM, lt)
	if m.NextLayerType() != lt {
		t.Errorf("registered class: %v", m.NextLayerType())
	}
	if (&MAD{MgmtClass: MADClassSubnAdm}).NextLayerType() != gopacket.LayerTypePayload {
		t.Error("registration leaked to another class")
	}
}

func TestMADNames(t *testing.T) {
	for _, tc := range []struct {
		class  uint8
		method uint8
		attr   uint16
		names  [3]string
	}{
		{MADClassCM, 0x03, CMAttrREP, [3]string{"CM", "Send", "REP"}},
		{MADClassCM, 0x03, CMAttrDREP, [3]string{"CM", "Send", "DREP"}},
		{MADClassSubnAdm, 0x81, 0x0001, [3]string{"SubnAdm", "GetResp", "ClassPortInfo"}},
		{0x42, 0x7f, 0x1234, [3]string{"", "", ""}},
	} {
		got := [3]string{MADClassName(tc.class), MADMethodName(tc.method), MADAttributeName(tc.class, tc.attr)}
		if got != tc.names {
			t.Errorf("class %#x method %#x attr %#x: %q, want %q", tc.class, tc.method, tc.attr, got, tc.names)
		}
	}
}

func BenchmarkDecodePacketMAD(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		gopacket.NewPacket(testPacketRoCECMREQ, gplayers.LayerTypeEthernet, gopacket.NoCopy)
	}
}
