package rsocket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// connDataGolden is struct rs_conn_data as librdmacm's rs_format_conn_data
// fills it on a little-endian host with the default iomap size 0:
// version 1, flags RS_CONN_FLAG_IOMAP, 384 credits, a 2-entry target SGL
// and the first half (64 KiB) of a 128 KiB receive buffer; every
// multi-byte field big-endian.
var connDataGolden = []byte{
	0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, // version, flags, credits, reserved[3], iomap size
	0x00, 0x00, 0x7f, 0x00, 0x11, 0x22, 0x33, 0x40, // target_sgl.addr
	0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x02, // target_sgl.key, .length (entries)
	0x00, 0x00, 0x7f, 0x00, 0xaa, 0xbb, 0xc0, 0x00, // data_buf.addr
	0x00, 0x00, 0x56, 0x78, 0x00, 0x01, 0x00, 0x00, // data_buf.key, .length (bytes)
}

var connDataGoldenFields = connData{
	version: 1, flags: flagIomap, credits: 384,
	targetSGL: sge{addr: 0x7f0011223340, key: 0x1234, length: 2},
	dataBuf:   sge{addr: 0x7f00aabbc000, key: 0x5678, length: 64 << 10},
}

func TestConnDataWire(t *testing.T) {
	if got := connDataGoldenFields.marshal(); !bytes.Equal(got, connDataGolden) {
		t.Fatalf("marshal:\n% x\nwant\n% x", got, connDataGolden)
	}
	// As the REP carries it: zero-padded to 196 bytes.
	padded := append(append([]byte(nil), connDataGolden...), make([]byte, 196-connDataLen)...)
	d, err := parseConnData(padded)
	if err != nil || d != connDataGoldenFields {
		t.Fatalf("parse: %+v, %v", d, err)
	}
	// A peer's receive buffer half may be larger than a message's 29
	// bits of length (librdmacm takes mem_default as it comes).
	huge := append([]byte(nil), connDataGolden...)
	copy(huge[36:], []byte{0x40, 0, 0, 0}) // 1 GiB
	if d, err := parseConnData(huge); err != nil || d.dataBuf.length != 1<<30 {
		t.Fatalf("parse a 1 GiB first buffer: %+v, %v", d, err)
	}
	// Another iomap size and the big-endian flag parse as they are.
	b := append([]byte(nil), connDataGolden...)
	b[1], b[7] = flagNet|flagIomap, 0x11
	if d, err := parseConnData(b); err != nil || d.flags != 3 || d.iomapSize != 0x11 || order(d.flags) != binary.BigEndian {
		t.Fatalf("parse big-endian peer: %+v, %v", d, err)
	}
}

func TestConnDataRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:39] }},
		{"version 0", func(b []byte) []byte { b[0] = 0; return b }},
		{"version 2", func(b []byte) []byte { b[0] = 2; return b }},
		{"no credits", func(b []byte) []byte { b[2], b[3] = 0, 0; return b }},
		{"no target SGL entries", func(b []byte) []byte { b[23] = 0; return b }},
		{"empty data buffer", func(b []byte) []byte { clear(b[36:40]); return b }},
		{"zeros (no rsocket data)", func(b []byte) []byte { return make([]byte, 56) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.edit(append([]byte(nil), connDataGolden...))
			if _, err := parseConnData(b); !errors.Is(err, errConnData) {
				t.Fatalf("parse: %v, want errConnData", err)
			}
		})
	}
}

func TestImmediate(t *testing.T) {
	for _, c := range []struct {
		op, data, want uint32
	}{
		{opData, 65536, 0x00010000},
		{opData, msgDataMask, 0x1FFFFFFF},
		{opSGL, 384 + 17, 0x80000191},
		{opCtrl, ctrlDisconnect, 0xE0000000},
		{opCtrl, ctrlKeepalive, 0xE0000001},
		{opCtrl, ctrlShutdown, 0xE0000002},
		{opIomapSGL, 3, 0xC0000003},
	} {
		m := msg(c.op, c.data)
		if m != c.want || msgOp(m) != c.op || msgData(m) != c.data {
			t.Errorf("msg(%d, %d) = %#x (op %d, data %d), want %#x", c.op, c.data, m, msgOp(m), msgData(m), c.want)
		}
	}
}

func TestSGEByteOrder(t *testing.T) {
	e := sge{addr: 0x0102030405060708, key: 0x11121314, length: 0x21222324}
	var le, be [sgeLen]byte
	e.put(le[:], order(0))
	e.put(be[:], order(flagNet))
	if want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11, 0x24, 0x23, 0x22, 0x21}; !bytes.Equal(le[:], want) {
		t.Errorf("little-endian entry % x", le)
	}
	if want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24}; !bytes.Equal(be[:], want) {
		t.Errorf("big-endian entry % x", be)
	}
	if getSGE(le[:], order(0)) != e || getSGE(be[:], order(flagNet)) != e {
		t.Error("round trip")
	}
}

// FuzzConnData checks that any private data parses without panicking and
// that what parses marshals back to the same 40 bytes.
func FuzzConnData(f *testing.F) {
	f.Add(connDataGolden)
	f.Add(make([]byte, 196))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseConnData(b)
		if err != nil {
			return
		}
		want := append([]byte(nil), b[:connDataLen]...)
		clear(want[4:7]) // reserved
		if got := d.marshal(); !bytes.Equal(got, want) {
			t.Fatalf("round trip:\n% x\nwant\n% x", got, want)
		}
	})
}
