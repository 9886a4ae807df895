package decode

import (
	"strings"
	"testing"
)

// TestDecodeRXEFlush decodes testdata/rxe_flush.pcap, kernel rxe against
// kernel rxe (a Debian 13 guest's, 6.12) running interop/peers'
// flush_client: its FLUSHes carry the ICRC rxe gives FLUSH and say
// icrc=rxe; its ATOMIC_WRITE and every other packet carry the IBTA's.
func TestDecodeRXEFlush(t *testing.T) {
	out, errs, code := decodeRun(nil, "testdata/rxe_flush.pcap")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var flushes, atomicWrites int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.Contains(line, "icrc=BAD"):
			t.Errorf("an ICRC that does not verify: %s", line)
		case strings.Contains(line, " RC_FLUSH "):
			flushes++
			if !strings.HasSuffix(line, "icrc=rxe") {
				t.Errorf("a FLUSH without rxe's ICRC: %s", line)
			}
		case strings.Contains(line, " RC_ATOMIC_WRITE "):
			atomicWrites++
			if !strings.HasSuffix(line, "icrc=ok") {
				t.Errorf("an ATOMIC_WRITE without the IBTA's ICRC: %s", line)
			}
		}
	}
	if flushes != 3 || atomicWrites != 1 {
		t.Errorf("%d FLUSHes and %d ATOMIC_WRITEs, want 3 and 1:\n%s", flushes, atomicWrites, out)
	}
}
