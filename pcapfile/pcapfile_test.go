package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
)

// TestRoundTrip writes two packets, one in pieces, and reads them back.
func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 123456789)
	if err := w.WritePacket(at, []byte{1, 2}, []byte{3}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(at.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&buf)
	if err != nil || r.LinkType() != LinkTypeRaw {
		t.Fatalf("NewReader: %v, link type %d", err, r.LinkType())
	}
	for i, want := range [][]byte{{1, 2, 3}, {}} {
		data, ci, err := r.ReadPacket()
		if err != nil || !bytes.Equal(data, want) || !ci.Time.Equal(at.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("packet %d: % x at %v, %v", i, data, ci.Time, err)
		}
	}
	if _, _, err := r.ReadPacket(); err != io.EOF {
		t.Fatalf("after the last packet: %v", err)
	}
}

// TestHugeRecord checks that a file whose header claims a 4 GiB snap
// length and a record to match is refused before ReadPacket allocates.
func TestHugeRecord(t *testing.T) {
	var b bytes.Buffer
	for _, v := range []uint32{magicMicro, 2 | 4<<16, 0, 0, 1<<32 - 1, LinkTypeRaw, 0, 0, 1<<32 - 1, 1<<32 - 1} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	r, err := NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	data, _, err := r.ReadPacket()
	runtime.ReadMemStats(&after)
	apitest.Err(t, err, nil, "4294967295 bytes exceeds", "damaged")
	if n := after.TotalAlloc - before.TotalAlloc; data != nil || n > 1<<20 {
		t.Errorf("ReadPacket returned %d bytes after allocating %d", len(data), n)
	}
}

// TestNilArgs calls every exported function and method of the package
// with nil and zero arguments: none panics, and each error says what is
// wrong and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	apitest.Run(t, ".", apitest.Table{
		"NewWriter": func(t *testing.T) {
			_, err := NewWriter(nil, 0)
			apitest.Err(t, err, ErrNil, "needs an io.Writer")
		},
		"Writer.WritePacket": func(t *testing.T) {
			apitest.Err(t, (&Writer{}).WritePacket(time.Time{}), ErrNil, "nil *Writer", "NewWriter")
		},
		"Writer.Flush": func(t *testing.T) { apitest.Err(t, (*Writer)(nil).Flush(), ErrNil, "nil *Writer") },
		"NewReader": func(t *testing.T) {
			_, err := NewReader(nil)
			apitest.Err(t, err, ErrNil, "needs an io.Reader")
			if _, err := NewReader(bytes.NewReader(nil)); !errors.Is(err, ErrNotPcap) {
				t.Errorf("NewReader of nothing: %v", err)
			}
		},
		"Reader.LinkType": func(t *testing.T) {
			if (*Reader)(nil).LinkType() != 0 {
				t.Error("a nil Reader has a link type")
			}
		},
		"Reader.ReadPacket": func(t *testing.T) {
			_, _, err := (&Reader{}).ReadPacket()
			apitest.Err(t, err, ErrNil, "nil *Reader", "NewReader")
		},
	})
	apitest.NilReceivers(t, ".", (*Writer)(nil), (*Reader)(nil))
}
