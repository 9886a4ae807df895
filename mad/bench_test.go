package mad

import "testing"

// benchREQ returns the REQ of the rping capture.
func benchREQ(b *testing.B) []byte {
	for _, cm := range allCaptureMADs(b) {
		if h, _, err := Decode(cm.mad); err == nil && h.AttrID == AttrREQ {
			return cm.mad
		}
	}
	b.Fatal("no REQ in the captures")
	return nil
}

// BenchmarkDecodeREQ decodes a captured REQ into caller-owned values: the
// header, the message and rdma_cm's private-data header.
func BenchmarkDecodeREQ(b *testing.B) {
	mad := benchREQ(b)
	var h Header
	var m REQ
	var c CMAHeader
	b.SetBytes(Len)
	b.ReportAllocs()
	for b.Loop() {
		if err := h.Unmarshal(mad); err != nil {
			b.Fatal(err)
		}
		if err := m.Unmarshal(mad[HeaderLen:]); err != nil {
			b.Fatal(err)
		}
		if err := c.Unmarshal(m.PrivateData[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes a captured REQ with the generic Decode, which
// allocates the message it returns.
func BenchmarkDecode(b *testing.B) {
	mad := benchREQ(b)
	b.SetBytes(Len)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(mad); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeREQ encodes a REQ with every field set.
func BenchmarkEncodeREQ(b *testing.B) {
	m := newCMAREQ()
	h := CMHeader(MethodSend, 1)
	buf := make([]byte, Len)
	b.SetBytes(Len)
	b.ReportAllocs()
	for b.Loop() {
		if err := Encode(h, m, buf); err != nil {
			b.Fatal(err)
		}
	}
}
