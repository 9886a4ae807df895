package oob

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// The example message of the lab notes, decoded.
func TestLabExamples(t *testing.T) {
	d, err := ParseDest([]byte("0000:000012:af812e:00000000000000000000ffffc612000c\x00"))
	if err != nil || d.QPN != 0x12 || d.PSN != 0xaf812e || verbs.AddrFromGID(d.GID) != clientAddr {
		t.Errorf("pingpong example: %+v, %v", d, err)
	}
	pd, err := ParsePerftestDest([]byte("0000:0001:00002d:8e97c0:00001f73:0000557572c0e000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0c:00000000:\x00"))
	want := PerftestDest{OutReads: 1, QPN: 0x2d, PSN: 0x8e97c0, RKey: 0x1f73, VAddr: 0x557572c0e000, GID: verbs.GIDFromAddr(clientAddr)}
	if err != nil || pd != want {
		t.Errorf("perftest example: %+v, %v; want %+v", pd, err, want)
	}
}
