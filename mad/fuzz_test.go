package mad

import (
	"bytes"
	"reflect"
	"testing"
)

// seedMADs adds the captured MADs and an encoded MAD of every message type
// to a fuzz corpus.
func seedMADs(f *testing.F) {
	for _, cm := range allCaptureMADs(f) {
		f.Add(cm.mad)
	}
	for _, s := range sampleMessages() {
		b := make([]byte, Len)
		if err := Encode(CMHeader(MethodSend, 42), s.msg, b); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzDecode checks that Decode never panics, that whatever it accepts
// encodes again and decodes to the same header and message, and that
// Encode reproduces the input but for its reserved bits.
func FuzzDecode(f *testing.F) {
	seedMADs(f)
	kept := map[uint16][]byte{}
	for _, s := range sampleMessages() {
		kept[s.msg.AttrID()] = keptBits(f, s.msg.AttrID())
	}
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := Decode(mad)
		if err != nil {
			if m != nil {
				t.Fatalf("message %v with error %v", m, err)
			}
			return
		}
		b := make([]byte, Len)
		if err := Encode(h, m, b); err != nil {
			t.Fatalf("Encode of a decoded %s: %v", AttrName(h.AttrID), err)
		}
		h2, m2, err := Decode(b)
		if err != nil || h2 != h || !reflect.DeepEqual(m2, m) {
			t.Fatalf("Decode(Encode(x)) = %+v %+v %v, want %+v %+v", h2, m2, err, h, m)
		}
		want := bytes.Clone(mad)
		want[18], want[19] = 0, 0 // the header's reserved field
		k := kept[h.AttrID]
		for i := range DataLen {
			want[HeaderLen+i] &= k[i]
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", b, want)
		}
	})
}

// FuzzHeader checks the MAD header decoder on its own.
func FuzzHeader(f *testing.F) {
	seedMADs(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		if err := h.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, HeaderLen)
		if err := h.Marshal(out); err != nil {
			t.Fatalf("Marshal of a decoded header: %v", err)
		}
		want := bytes.Clone(b[:HeaderLen])
		want[18], want[19] = 0, 0
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encoded %x, want %x", out, want)
		}
	})
}

// FuzzCMAHeader checks the rdma_cm private-data header decoder.
func FuzzCMAHeader(f *testing.F) {
	for _, cm := range allCaptureMADs(f) {
		if h, m, err := Decode(cm.mad); err == nil && h.AttrID == AttrREQ {
			f.Add(m.(*REQ).PrivateData[:])
		}
	}
	f.Add(newCMAREQ().PrivateData[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var h CMAHeader
		if err := h.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, CMAHeaderLen)
		if err := h.Marshal(out); err != nil {
			t.Fatalf("Marshal of a decoded header %+v: %v", h, err)
		}
		want := bytes.Clone(b[:CMAHeaderLen])
		want[1] &= 0xF0
		if want[1] == 0x40 {
			clear(want[4:16])
			clear(want[20:32])
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encoded %x, want %x", out, want)
		}
		var h2 CMAHeader
		if err := h2.Unmarshal(out); err != nil || h2 != h {
			t.Fatalf("round trip %+v %v, want %+v", h2, err, h)
		}
	})
}
