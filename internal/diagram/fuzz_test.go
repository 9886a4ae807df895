package diagram

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// FuzzFromCapture feeds capture files to FromCapture and draws what it
// returns: neither may panic, and a capture that reads must draw.
func FuzzFromCapture(f *testing.F) {
	for _, name := range []string{"rxe_imm_rnr.pcap", "rxe_host_rc_pingpong.pcap"} {
		b, err := os.ReadFile(filepath.Join(capturesDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	bad := rc(hostA, hostB, 1000, bth.RCWriteFirst, 9, 100, 64)
	bad.badICRC = true
	f.Add(pcapOf(f,
		frame(f, madPkt(hostA, hostB, cmMAD(f, &mad.REQ{LocalCommID: 1, LocalQPN: 5}))),
		frame(f, madPkt(hostB, hostA, cmMAD(f, &mad.REP{LocalCommID: 2, RemoteCommID: 1, LocalQPN: 6}))),
		frame(f, bad),
		frame(f, ack(hostB, hostA, 1000, 5, 100, bth.RNRNAKSyndrome(3)))))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := FromCapture(bytes.NewReader(b))
		if err != nil {
			return
		}
		if err := d.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
		if err := d.WriteHTML(io.Discard, &HTMLOptions{MaxPackets: 50}); err != nil {
			t.Fatal(err)
		}
	})
}
