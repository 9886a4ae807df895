package diagram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
)

// ethFrame is a frame of an Ethernet capture and its time.
type ethFrame struct {
	data []byte
	t    time.Time
}

// readEthernet reads the frames of one of the rxe captures (all Ethernet).
func readEthernet(t *testing.T, name string) []ethFrame {
	t.Helper()
	f, err := os.Open(filepath.Join(capturesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != pcapfile.LinkTypeEthernet {
		t.Fatalf("%s: link type %d, want Ethernet", name, r.LinkType())
	}
	var frames []ethFrame
	for {
		data, ci, err := r.ReadPacket()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, ethFrame{data, ci.Time})
	}
}

// relink rewrites Ethernet frames for another link type: the IP packet
// behind the link header lt has.
func relink(t *testing.T, lt gplayers.LinkType, eth []byte) []byte {
	t.Helper()
	etherType, ip := eth[12:14], eth[bth.EthernetLen:]
	var head []byte
	switch lt {
	case gplayers.LinkTypeRaw:
	case gplayers.LinkTypeLinuxSLL: // packet type, ARPHRD, address length, address (8), protocol
		head = append([]byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}, etherType...)
	case gplayers.LinkTypeLinuxSLL2: // protocol, reserved, interface index, ARPHRD, packet type, address length, address (8)
		head = append(append([]byte{}, etherType...), 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0)
	case gplayers.LinkTypeNull: // address family in host byte order: AF_INET
		head = binary.NativeEndian.AppendUint32(nil, 2)
	default:
		t.Fatalf("no rewrite for %v", lt)
	}
	return append(head, ip...)
}

// TestCaptureFormats checks that a capture reads the same as pcapng and
// with the link types of tcpdump -i any (Linux SLL, SLL2), of raw IP and of
// BSD loopback, as the Ethernet pcap it was made from.
func TestCaptureFormats(t *testing.T) {
	const name = "rxe_rping_rdmacm.pcap"
	want := textOf(t, captureDiagram(t, name))
	frames := readEthernet(t, name)
	t.Run("pcapng", func(t *testing.T) {
		var buf bytes.Buffer
		w, err := pcapgo.NewNgWriter(&buf, gplayers.LinkTypeEthernet)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			ci := captureInfo(f.t, f.data)
			if err := w.WritePacket(ci, f.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		checkSameText(t, buf.Bytes(), want)
	})
	for _, lt := range []gplayers.LinkType{gplayers.LinkTypeLinuxSLL, gplayers.LinkTypeLinuxSLL2, gplayers.LinkTypeRaw,
		gplayers.LinkTypeNull} {
		t.Run(lt.String(), func(t *testing.T) {
			var buf bytes.Buffer
			w := pcapgo.NewWriterNanos(&buf)
			if err := w.WriteFileHeader(65536, lt); err != nil {
				t.Fatal(err)
			}
			for _, f := range frames {
				data := relink(t, lt, f.data)
				if err := w.WritePacket(captureInfo(f.t, data), data); err != nil {
					t.Fatal(err)
				}
			}
			checkSameText(t, buf.Bytes(), want)
		})
	}
}

func captureInfo(t time.Time, data []byte) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(data), Length: len(data)}
}

func textOf(t *testing.T, d *Diagram) string {
	t.Helper()
	var b strings.Builder
	if err := d.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func checkSameText(t *testing.T, capture []byte, want string) {
	t.Helper()
	d, err := FromCapture(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	d.Title = "rxe_rping_rdmacm.pcap"
	if got := textOf(t, d); got != want {
		t.Errorf("text form differs from the Ethernet pcap's:\n%s", firstDiff(got, want))
	}
}

// TestCaptureErrors checks what is wrong with a file that is not a capture
// that can be drawn.
func TestCaptureErrors(t *testing.T) {
	good := pcapOf(t, frame(t, rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8)))
	var otherLink bytes.Buffer
	w := pcapgo.NewWriter(&otherLink)
	if err := w.WriteFileHeader(65536, gplayers.LinkTypeIEEE802_11); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   io.Reader
		want error
	}{
		{"nil", nil, ErrNotCapture},
		{"empty", bytes.NewReader(nil), ErrNotCapture},
		{"text", strings.NewReader("hello, this is not a capture\n"), ErrNotCapture},
		{"pcapng header cut", bytes.NewReader([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0, 0}), ErrNotCapture},
		{"record cut", bytes.NewReader(good[:len(good)-5]), ErrTruncatedFile},
		{"Wi-Fi", bytes.NewReader(otherLink.Bytes()), ErrLinkType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := FromCapture(c.in)
			if !errors.Is(err, c.want) || d != nil {
				t.Errorf("FromCapture: %v, %v; want %v", d, err, c.want)
			}
		})
	}
}

// TestReadCaptureLimit checks that past the limit packets are counted,
// not kept, and that both forms say so.
func TestReadCaptureLimit(t *testing.T) {
	f, err := os.Open(filepath.Join(capturesDir, "rxe_imm_rnr.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, omitted, err := ReadCapture(f, 10)
	if err != nil || len(recs) != 10 || omitted != 6 {
		t.Fatalf("ReadCapture: %d records, %d omitted, %v; want 10 and 6", len(recs), omitted, err)
	}
	d := New(recs)
	d.Omitted = omitted
	text := textOf(t, d)
	if !strings.HasSuffix(text, "note over H1Q17, H2Q17: 6 more RoCE packets are not drawn\n") {
		t.Errorf("text form ends:\n%s", text[max(0, len(text)-200):])
	}
	var page bytes.Buffer
	if err := d.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	if p := parsePage(t, page.Bytes()); len(p.arrows) != 10 || !strings.HasPrefix(p.cut, "6 more RoCE packets") {
		t.Errorf("page: %d arrows, %q", len(p.arrows), p.cut)
	}
}
