package decode

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/internal/cli"
)

// FuzzDecodeCapture feeds whole capture files to roce decode in each mode:
// nothing may panic, the exit code is 0 or 1, and a failure is one line
// on stderr.
func FuzzDecodeCapture(f *testing.F) {
	for _, name := range []string{"rxe_host_rc_pingpong", "rxe_imm_rnr", "rxe_rping_rdmacm", "rxe_atomic_cas"} {
		data, err := os.ReadFile(filepath.Join(capturesDir, name+".pcap"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	// The same packets as pcapng, Linux SLL2 and raw IP, from the test
	// helpers of TestDecodeLinkTypes.
	cis, frames := readCapture(f, filepath.Join(capturesDir, "rxe_host_rc_pingpong.pcap"))
	f.Add(writeCapture(f, gplayers.LinkTypeEthernet, true, cis, frames))
	sll2 := func(et []byte) []byte {
		return append(append([]byte(nil), et...), 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 1, 2, 3, 4, 5, 6, 0, 0)
	}
	fr, ci := relink(frames, cis, sll2)
	f.Add(writeCapture(f, gplayers.LinkTypeLinuxSLL2, false, ci, fr))
	fr, ci = relink(frames, cis, func([]byte) []byte { return nil })
	f.Add(writeCapture(f, gplayers.LinkTypeRaw, true, ci, fr))
	f.Add([]byte{})
	f.Add([]byte{0xd4, 0xc3, 0xb2, 0xa1})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, args := range [][]string{{"-"}, {"--json", "-"}, {"--flows", "-"}} {
			var errb bytes.Buffer
			code := cli.Run(context.Background(), Cmd, &cli.Env{Stdin: bytes.NewReader(data), Stdout: io.Discard, Stderr: &errb}, args)
			switch code {
			case cli.ExitOK:
				if errb.Len() != 0 {
					t.Fatalf("%v: exit 0 with stderr %q", args, errb.String())
				}
			case cli.ExitFailure:
				msg := errb.String()
				if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "roce decode: <stdin>: ") ||
					len(msg) < len("roce decode: <stdin>: x\n") {
					t.Fatalf("%v: error is not one clear line: %q", args, msg)
				}
			default:
				t.Fatalf("%v: exit %d", args, code)
			}
		}
	})
}
