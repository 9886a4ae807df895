package abi

import (
	"bytes"
	"encoding/binary"
	"os"
	"reflect"
	"testing"
)

// TestLayouts checks that every struct of the ABI has its padding
// written out: the bytes encoding/binary writes (what the device sends)
// are the struct's bytes in memory (what the C library reads), and the
// sizes the package names are the structs'.
func TestLayouts(t *testing.T) {
	for _, s := range structs {
		typ := reflect.TypeOf(s)
		if n := binary.Size(s); n != int(typ.Size()) {
			t.Errorf("%s: %d bytes encoded, %d in memory: make the padding explicit with _ fields", typ.Name(), n, typ.Size())
		}
	}
	for _, c := range []struct {
		v    any
		size int
	}{{SendWQE{}, SendWQESize}, {SGE{}, SGESize}, {RecvWQE{}, RecvWQESize}, {CQE{}, CQESize},
		{RingHeader{}, RingHeaderSize}, {CMEvent{}, CMEventSize}} {
		if got := int(reflect.TypeOf(c.v).Size()); got != c.size {
			t.Errorf("%T is %d bytes, its constant says %d", c.v, got, c.size)
		}
	}
	if got := int(reflect.TypeOf(SessionPage{}).Size()); got > SessionPageSize {
		t.Errorf("SessionPage is %d bytes, more than SessionPageSize %d", got, SessionPageSize)
	}
	if CMEventSize > 4096 {
		t.Error("a CMEvent must fit PIPE_BUF to reach the pipe whole")
	}
}

// TestCHeaderUpToDate checks that the C header the library builds with is
// the one CHeader writes now: run go generate in uverbs/abi after a change.
func TestCHeaderUpToDate(t *testing.T) {
	got, err := os.ReadFile("../../libgoroce/src/goroce_abi.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, CHeader()) {
		t.Fatal("libgoroce/src/goroce_abi.h is out of date: run go generate ./uverbs/abi")
	}
}

// TestOpNames checks that every operation has a name.
func TestOpNames(t *testing.T) {
	for o := OpHello; o < opEnd; o++ {
		if o.String() == "" || o.String()[:3] == "OP_" {
			t.Errorf("op %d has no name", o)
		}
	}
	if got := Op(999).String(); got != "OP_999" {
		t.Errorf("Op(999) = %q", got)
	}
}
