package decode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"

	"github.com/goroce/goroce/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/decode")

const (
	capturesDir = "../../../testdata/captures"
	goldenDir   = "../../../testdata/decode"
)

// captureFiles returns the paths of the captures in testdata/captures.
func captureFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no captures: %v", err)
	}
	return files
}

// decodeRun runs roce decode in-process with args and returns its output
// and exit code.
func decodeRun(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = cli.Run(context.Background(), Cmd, &cli.Env{Stdin: stdin, Stdout: &out, Stderr: &errb}, args)
	return out.String(), errb.String(), code
}

// decodeJSON runs roce decode --json on path and parses its lines.
func decodeJSON(t *testing.T, stdin io.Reader, path string) []map[string]any {
	t.Helper()
	out, errs, code := decodeRun(stdin, "--json", path)
	if code != 0 {
		t.Fatalf("decode --json %s: exit %d: %s", path, code, errs)
	}
	return parseJSONLines(t, out)
}

func parseJSONLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d := json.NewDecoder(strings.NewReader(sc.Text()))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	return recs
}

// TestDecodeGolden compares the three outputs of every capture with the
// files in testdata/decode; go test -update rewrites them.
func TestDecodeGolden(t *testing.T) {
	modes := []struct {
		ext  string
		args []string
	}{{"txt", nil}, {"json", []string{"--json"}}, {"flows", []string{"--flows"}}}
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range captureFiles(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		for _, m := range modes {
			t.Run(name+"."+m.ext, func(t *testing.T) {
				out, errs, code := decodeRun(nil, append(m.args, path)...)
				if code != 0 || errs != "" {
					t.Fatalf("exit %d, stderr %q", code, errs)
				}
				golden := filepath.Join(goldenDir, name+"."+m.ext)
				if *update {
					if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if out != string(want) {
					t.Errorf("output differs from %s (go test -update rewrites it)\n%s", golden, firstDiff(out, string(want)))
				}
			})
		}
	}
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + itoa(i+1) + ":\n got " + gl + "\nwant " + wl
		}
	}
	return ""
}

// captureInventory is the lab README's table: RoCE packets per capture and
// how many of them have their ICRC (the others were cut by the capture).
var captureInventory = map[string][2]int{
	"rxe_rc_pingpong_send": {50, 50}, "rxe_uc_pingpong": {20, 20}, "rxe_ud_pingpong": {10, 10},
	"rxe_srq_pingpong": {24, 24}, "rxe_write_bw": {100, 100}, "rxe_read_bw": {100, 100},
	"rxe_send_bw": {100, 100}, "rxe_atomic": {40, 40}, "rxe_atomic_cas": {40, 40},
	"rxe_write_lat": {80, 80}, "rxe_send_lat": {80, 80}, "rxe_read_lat": {40, 40},
	"rxe_rping_rdmacm": {65, 65}, "rxe_write_bw_uc": {80, 80}, "rxe_send_bw_ud": {20, 20},
	"rxe_write_bw_rdmacm": {174, 174}, "rxe_write_bw_loss": {431, 27}, "rxe_read_bw_loss": {350, 77},
	"rxe_rnr_send_bw": {148, 148}, "rxe_imm_rnr": {16, 16}, "rxe_host_rc_pingpong": {4, 4},
	"rxe_write_bw_64k_mtu4096": {85, 85},
}

// TestDecodeCaptures checks every capture: no malformed packet, no unknown
// opcode, and every untruncated RoCE packet's ICRC verifies; the counts
// are those of the lab README.
func TestDecodeCaptures(t *testing.T) {
	files := captureFiles(t)
	if len(files) != len(captureInventory) {
		t.Errorf("%d captures, the inventory lists %d", len(files), len(captureInventory))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		t.Run(name, func(t *testing.T) {
			var roce, verified int
			for _, r := range decodeJSON(t, nil, path) {
				if m, ok := r["malformed"]; ok {
					t.Errorf("frame %v malformed: %v", r["frame"], m)
					continue
				}
				roce++
				if n, _ := r["opcode_name"].(string); n == "" || strings.HasPrefix(n, "0x") {
					t.Errorf("frame %v: unknown opcode %v", r["frame"], r["opcode"])
				}
				switch r["icrc_ok"] {
				case true:
					verified++
				case false:
					t.Errorf("frame %v: ICRC %v does not verify", r["frame"], r["icrc"])
				case nil:
					if r["truncated"] != true {
						t.Errorf("frame %v: no ICRC verdict on a whole packet", r["frame"])
					}
				}
			}
			if inv := captureInventory[name]; roce != inv[0] || verified != inv[1] {
				t.Errorf("%d RoCE packets, %d ICRCs verified; the inventory says %d and %d", roce, verified, inv[0], inv[1])
			}
		})
	}
}

// writeCapture writes frames as a pcap file (or pcapng when ng) of link
// type lt and returns its bytes.
func writeCapture(t testing.TB, lt gplayers.LinkType, ng bool, cis []gopacket.CaptureInfo, frames [][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if ng {
		w, err := pcapgo.NewNgWriter(&buf, lt)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range frames {
			if err := w.WritePacket(cis[i], f); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(262144, lt); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WritePacket(cis[i], f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// readCapture returns the frames and capture infos of a pcap file.
func readCapture(t testing.TB, path string) ([]gopacket.CaptureInfo, [][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var cis []gopacket.CaptureInfo
	var frames [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return cis, frames
		}
		if err != nil {
			t.Fatal(err)
		}
		cis, frames = append(cis, ci), append(frames, data)
	}
}

// relink replaces the 14-byte Ethernet header of each frame with the
// header that header returns for the frame's EtherType.
func relink(frames [][]byte, cis []gopacket.CaptureInfo, header func(etherType []byte) []byte) ([][]byte, []gopacket.CaptureInfo) {
	out := make([][]byte, len(frames))
	outCI := append([]gopacket.CaptureInfo(nil), cis...)
	for i, f := range frames {
		h := header(f[12:14])
		out[i] = append(append([]byte(nil), h...), f[14:]...)
		outCI[i].CaptureLength = len(out[i])
		outCI[i].Length += len(h) - 14
	}
	return out, outCI
}

// TestDecodeLinkTypes writes the frames of two captures again with every
// link type and file format roce decode reads, and expects the same
// packets decoded from each.
func TestDecodeLinkTypes(t *testing.T) {
	for _, name := range []string{"rxe_rping_rdmacm", "rxe_read_bw_loss"} {
		path := filepath.Join(capturesDir, name+".pcap")
		want := decodeJSON(t, nil, path)
		cis, frames := readCapture(t, path)
		sll := func(et []byte) []byte {
			h := []byte{0, 4, 0, 1, 0, 6, 0x52, 0x54, 0, 0x18, 0, 0x0c, 0, 0}
			return append(h, et...)
		}
		sll2 := func(et []byte) []byte {
			h := append([]byte(nil), et...)
			h = append(h, 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 0x52, 0x54, 0, 0x18, 0, 0x0c, 0, 0)
			return h
		}
		raw := func([]byte) []byte { return nil }
		vlan := func(et []byte) []byte {
			h := []byte{0x52, 0x54, 0, 0x18, 0, 0x0b, 0x52, 0x54, 0, 0x18, 0, 0x0c, 0x81, 0, 0, 7}
			return append(h, et...)
		}
		for _, tc := range []struct {
			name string
			lt   gplayers.LinkType
			ng   bool
			hdr  func([]byte) []byte
		}{
			{"pcapng-Ethernet", gplayers.LinkTypeEthernet, true, nil},
			{"pcap-LinuxSLL", gplayers.LinkTypeLinuxSLL, false, sll},
			{"pcap-LinuxSLL2", gplayers.LinkTypeLinuxSLL2, false, sll2},
			{"pcapng-LinuxSLL2", gplayers.LinkTypeLinuxSLL2, true, sll2},
			{"pcap-Raw", gplayers.LinkTypeRaw, false, raw},
			{"pcap-IPv4", gplayers.LinkTypeIPv4, false, raw},
			{"pcap-Ethernet-VLAN", gplayers.LinkTypeEthernet, false, vlan},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				fr, ci := frames, cis
				if tc.hdr != nil {
					fr, ci = relink(frames, cis, tc.hdr)
				}
				data := writeCapture(t, tc.lt, tc.ng, ci, fr)
				got := decodeJSON(t, bytes.NewReader(data), "-")
				compareRecords(t, got, want)
			})
		}
	}
}

// compareRecords compares two decodes record by record.
func compareRecords(t *testing.T, got, want []map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, _ := json.Marshal(got[i])
		w, _ := json.Marshal(want[i])
		if !bytes.Equal(g, w) {
			t.Fatalf("record %d\n got %s\nwant %s", i, g, w)
		}
	}
}

// TestDecodeIPv6 moves the RoCE packets of a capture to IPv6 (raw IPv6
// link type 229 and Ethernet), sealing each with the ICRC of its new IP
// header, and expects the same packets with IPv6 addresses.
func TestDecodeIPv6(t *testing.T) {
	path := filepath.Join(capturesDir, "rxe_rping_rdmacm.pcap")
	want := decodeJSON(t, nil, path)
	cis, frames := readCapture(t, path)
	src, dst := netip.MustParseAddr("2001:db8::c612:c"), netip.MustParseAddr("2001:db8::c612:b")
	var ethFrames, ipFrames [][]byte
	var ethCIs, ipCIs []gopacket.CaptureInfo
	for i, f := range frames {
		var fr bth.Frame
		if err := bth.ParseFrame(&fr, f, bth.LinkEthernet); err != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		fl := fr.Flow
		fl.Src, fl.Dst = dst, src
		if fr.Flow.Src == netip.MustParseAddr("198.18.0.12") {
			fl.Src, fl.Dst = src, dst
		}
		ff := bth.FrameFields{Ethernet: true, Flow: fl, TOS: fr.IPv4.TOS(), TTL: fr.IPv4.TTL()}
		copy(ff.DstMAC[:], f[0:6])
		copy(ff.SrcMAC[:], f[6:12])
		hl := ff.HeaderLen()
		out := make([]byte, hl+len(fr.Payload))
		copy(out[hl:], fr.Payload)
		fl.Seal(out[hl:])
		bth.EncodeFrame(out, &ff)
		ci := cis[i]
		ci.CaptureLength, ci.Length = len(out), len(out)
		ethFrames, ethCIs = append(ethFrames, out), append(ethCIs, ci)
		ci.CaptureLength, ci.Length = len(out)-bth.EthernetLen, len(out)-bth.EthernetLen
		ipFrames, ipCIs = append(ipFrames, out[bth.EthernetLen:]), append(ipCIs, ci)
	}
	for _, tc := range []struct {
		name   string
		lt     gplayers.LinkType
		frames [][]byte
		cis    []gopacket.CaptureInfo
	}{
		{"Ethernet", gplayers.LinkTypeEthernet, ethFrames, ethCIs},
		{"IPv6", gplayers.LinkTypeIPv6, ipFrames, ipCIs},
		{"Raw", gplayers.LinkTypeRaw, ipFrames, ipCIs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeJSON(t, bytes.NewReader(writeCapture(t, tc.lt, false, tc.cis, tc.frames)), "-")
			if len(got) != len(want) {
				t.Fatalf("%d records, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i]["icrc_ok"] != true {
					t.Errorf("record %d: ICRC over IPv6 does not verify", i)
				}
				if s := got[i]["src"].(string); !netip.MustParseAddr(s).Is6() {
					t.Errorf("record %d: src %s", i, s)
				}
				// Everything but the addresses, the frame numbers (the TCP
				// frames are gone) and the ICRC is the same.
				for _, k := range []string{"src", "dst", "frame", "icrc"} {
					delete(got[i], k)
					delete(want[i], k)
				}
			}
			compareRecords(t, got, want)
		})
	}
}

// errLines returns the non-empty lines of s.
func errLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestDecodeBadInput checks that input that is not a readable capture
// gives exit code 1 and one line on stderr that says what is wrong.
func TestDecodeBadInput(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(capturesDir, "rxe_imm_rnr.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	unknownLink := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(unknownLink[20:], 105) // IEEE 802.11
	badVersion := append([]byte(nil), good...)
	binary.LittleEndian.PutUint16(badVersion[4:], 9)
	for _, tc := range []struct {
		name  string
		data  []byte
		want  string
		lines int // lines on stdout before the error
	}{
		{"Text", []byte("this is not a capture, it is a sentence\n"), "not a pcap or pcapng capture", 0},
		{"Empty", nil, "not a pcap or pcapng capture: only 0 bytes", 0},
		{"ShortHeader", good[:20], "bad pcap file header", 0},
		{"BadVersion", badVersion, "bad pcap file header", 0},
		{"UnknownLinkType", unknownLink, "unsupported link type 105", 0},
		{"TruncatedRecordHeader", good[:capOffset(t, good, 2)+8], "capture file ends in the middle of a record (after frame 1)", 0},
		// Frame 11 is the first RoCE packet; cut the file in frame 12.
		{"TruncatedRecord", good[:capOffset(t, good, 12)+30], "capture file ends in the middle of a record (after frame 11)", 1},
		{"PcapngGarbage", append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, make([]byte, 40)...), "bad pcapng file", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := decodeRun(bytes.NewReader(tc.data), "-")
			if code != cli.ExitFailure {
				t.Errorf("exit %d, want %d", code, cli.ExitFailure)
			}
			lines := errLines(errs)
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.HasPrefix(lines[0], "roce decode: <stdin>: ") {
				t.Errorf("stderr %q, want one line with %q", errs, tc.want)
			}
			if n := len(errLines(out)); n != tc.lines {
				t.Errorf("%d lines on stdout, want %d:\n%s", n, tc.lines, out)
			}
		})
	}
	t.Run("PcapngUnknownLinkType", func(t *testing.T) {
		cis, frames := readCapture(t, filepath.Join(capturesDir, "rxe_host_rc_pingpong.pcap"))
		data := writeCapture(t, gplayers.LinkType(105), true, cis, frames)
		_, errs, code := decodeRun(bytes.NewReader(data), "-")
		if code != cli.ExitFailure || len(errLines(errs)) != 1 || !strings.Contains(errs, "frame 1: unsupported link type 105") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("MissingFile", func(t *testing.T) {
		_, errs, code := decodeRun(nil, filepath.Join(t.TempDir(), "nope.pcap"))
		if code != cli.ExitFailure || len(errLines(errs)) != 1 || !strings.Contains(errs, "no such file") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("OneBadOfTwo", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.pcap")
		if err := os.WriteFile(bad, []byte("garbage!"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := decodeRun(nil, bad, filepath.Join(capturesDir, "rxe_imm_rnr.pcap"))
		if code != cli.ExitFailure || len(errLines(errs)) != 1 || !strings.Contains(out, "# rxe_imm_rnr.pcap\n11 ") {
			t.Errorf("exit %d, stderr %q, stdout %q", code, errs, out)
		}
	})
}

// capOffset returns the offset of the record of frame n in a pcap file.
func capOffset(t *testing.T, file []byte, n int) int {
	t.Helper()
	off := 24
	for i := 1; i < n; i++ {
		if off+16 > len(file) {
			t.Fatalf("no frame %d", n)
		}
		off += 16 + int(binary.LittleEndian.Uint32(file[off+8:]))
	}
	return off
}

func TestDecodeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"NoFile", nil, cli.ExitUsage, "no capture file given"},
		{"JSONAndFlows", []string{"--json", "--flows", "x.pcap"}, cli.ExitUsage, "cannot be used together"},
		{"DiagramAndJSON", []string{"--diagram", "--json", "x.pcap"}, cli.ExitUsage, "--diagram cannot be used with"},
		{"DiagramTwoFiles", []string{"--diagram", "x.pcap", "y.pcap"}, cli.ExitUsage, "one capture at a time"},
		{"DiagramBadForm", []string{"--diagram=svg", "x.pcap"}, cli.ExitUsage, "diagram"},
		{"BadFlag", []string{"--nope", "x.pcap"}, cli.ExitUsage, "flag provided but not defined"},
		{"Help", []string{"-h"}, cli.ExitOK, "usage: roce decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := decodeRun(nil, tc.args...)
			if code == cli.ExitOK {
				errs, out = out, errs // the help asked for goes to stdout
			}
			if code != tc.code || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errs, tc.code, tc.want)
			}
			if code == cli.ExitUsage && !strings.Contains(errs, "Run 'roce help decode' for usage.") {
				t.Errorf("no hint in %q", errs)
			}
		})
	}
}

// TestDecodeMalformed damages packets of a good capture: each damaged
// packet is reported (malformed, or with a bad ICRC) and decoding goes on.
func TestDecodeMalformed(t *testing.T) {
	path := filepath.Join(capturesDir, "rxe_imm_rnr.pcap")
	cis, frames := readCapture(t, path)
	const bthOff = 42 // Ethernet, IPv4 and UDP
	damage := func(frame int, f func(b []byte) []byte) [][]byte {
		out := append([][]byte(nil), frames...)
		out[frame-1] = f(append([]byte(nil), frames[frame-1]...))
		return out
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		frame  int
		text   string // in the damaged frame's line
	}{
		{"UnknownOpcode", damage(13, func(b []byte) []byte { b[bthOff] = 0x1F; return b }), 13,
			"malformed: RoCE: bth: unknown opcode"},
		{"PadCount", damage(12, func(b []byte) []byte { b[bthOff+1] |= 0x30; return b }), 12,
			"malformed: RoCE: bth: pad count longer than the payload"},
		{"ShortUDP", damage(14, func(b []byte) []byte { binary.BigEndian.PutUint16(b[38:], 20); return b }), 14,
			"malformed: RoCE: "},
		{"ICRC", damage(14, func(b []byte) []byte { b[100] ^= 1; return b }), 14, "payload=1024 icrc=BAD"},
		{"ShortMAD", shortMAD(t), 1, "malformed: MAD: layers: MAD shorter than its 24-byte header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr, ci := tc.frames, cis
			if tc.name == "ShortMAD" {
				ci = fixCIs(tc.frames)
			}
			data := writeCapture(t, gplayers.LinkTypeEthernet, false, ci, fr)
			out, errs, code := decodeRun(bytes.NewReader(data), "-")
			if code != cli.ExitOK || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			var line string
			for _, l := range errLines(out) {
				if strings.HasPrefix(l, itoa(tc.frame)+" ") {
					line = l
				}
			}
			if !strings.Contains(line, tc.text) {
				t.Errorf("frame %d: %q, want %q\n%s", tc.frame, line, tc.text, out)
			}
			if tc.name != "ShortMAD" && !strings.Contains(out, "\n28 ") {
				t.Errorf("decoding stopped:\n%s", out)
			}
			flows, _, _ := decodeRun(bytes.NewReader(data), "--flows", "-")
			want := "1 malformed\n"
			if tc.name == "ICRC" {
				want = "(0 truncated, 1 ICRC failures), 18 non-RoCE packets, 0 malformed\n"
			}
			if !strings.HasSuffix(flows, want) {
				t.Errorf("flows footer %q, want suffix %q", flows[strings.LastIndex(flows[:len(flows)-1], "\n")+1:], want)
			}
		})
	}
}

// shortMAD returns a one-frame capture: a UD SEND to QP1 whose payload is
// too short for a MAD header, with a right ICRC.
func shortMAD(t *testing.T) [][]byte {
	_, frames := readCapture(t, filepath.Join(capturesDir, "rxe_rping_rdmacm.pcap"))
	var fr bth.Frame
	if err := bth.ParseFrame(&fr, frames[0], bth.LinkEthernet); err != nil {
		t.Fatal(err)
	}
	// BTH, DETH and 8 bytes of MAD, then the ICRC.
	pkt := append(append([]byte(nil), fr.Payload[:bth.BTHLen+bth.DETHLen+8]...), 0, 0, 0, 0)
	ff := bth.FrameFields{Ethernet: true, Flow: fr.Flow, TOS: fr.IPv4.TOS(), TTL: fr.IPv4.TTL()}
	hl := ff.HeaderLen()
	out := make([]byte, hl+len(pkt))
	copy(out[hl:], pkt)
	fr.Flow.Seal(out[hl:])
	bth.EncodeFrame(out, &ff)
	return [][]byte{out}
}

func fixCIs(frames [][]byte) []gopacket.CaptureInfo {
	cis := make([]gopacket.CaptureInfo, len(frames))
	for i, f := range frames {
		cis[i] = gopacket.CaptureInfo{CaptureLength: len(f), Length: len(f)}
	}
	return cis
}

// TestDecodeStdinMatchesFile reads a capture through "-" and by name.
func TestDecodeStdinMatchesFile(t *testing.T) {
	path := filepath.Join(capturesDir, "rxe_atomic.pcap")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := decodeRun(nil, "--flows", path)
	b, _, _ := decodeRun(bytes.NewReader(data), "--flows", "-")
	if a != b || !strings.Contains(a, "FETCH_ADD 20") {
		t.Errorf("stdin and file differ:\n%s\n%s", a, b)
	}
}

// TestDecodeMultipleFiles checks the per-file headers and the file key.
func TestDecodeMultipleFiles(t *testing.T) {
	a, b := filepath.Join(capturesDir, "rxe_imm_rnr.pcap"), filepath.Join(capturesDir, "rxe_host_rc_pingpong.pcap")
	out, _, code := decodeRun(nil, a, b)
	if code != 0 || !strings.HasPrefix(out, "# rxe_imm_rnr.pcap\n") || !strings.Contains(out, "\n# rxe_host_rc_pingpong.pcap\n") {
		t.Errorf("text output:\n%s", out)
	}
	out, _, _ = decodeRun(nil, "--json", a, b)
	recs := parseJSONLines(t, out)
	if len(recs) != 16+4 || recs[0]["file"] != a || recs[19]["file"] != b {
		t.Errorf("%d records, files %v and %v", len(recs), recs[0]["file"], recs[len(recs)-1]["file"])
	}
}

// TestDecodeDiagram draws a capture with --diagram and --diagram=html:
// the text form is the diagram package's, titled with the file's name,
// one arrow line per coalesced burst; the page has an arrow per packet.
func TestDecodeDiagram(t *testing.T) {
	path := filepath.Join("..", "..", "..", "testdata", "captures", "rxe_imm_rnr.pcap")
	out, errs, code := decodeRun(nil, "--diagram", path)
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"title rxe_imm_rnr.pcap\n", "autonumber\n", "participant \"198.18.0.12 QP 17\" as H1Q17\n",
		"RNR NAK 7.68ms, PSN 15667820 (frame 22)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text diagram has no %q:\n%s", want, out)
		}
	}
	stdin, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	page, errs, code := decodeRun(stdin, "--diagram=html", "-")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("html: exit %d, stderr %q", code, errs)
	}
	// One arrow per RoCE packet of the capture, as the default output
	// has one line per packet.
	lines, _, _ := decodeRun(nil, path)
	packets := strings.Count(lines, "\n")
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || strings.Count(page, `<g class="pkt`) != packets {
		t.Errorf("the page has %d arrows for %d packets", strings.Count(page, `<g class="pkt`), packets)
	}
}

// reported moves every RoCE packet of the rxe capture to UDP destination
// port 5000, with the ICRC made again for the new port (sealed) or left
// as it was (so that none verifies), the first one's damaged if asked,
// and returns the capture.
func reported(t *testing.T, sealed, damageFirst bool) []byte {
	t.Helper()
	cis, frames := readCapture(t, filepath.Join(capturesDir, "rxe_write_bw.pcap"))
	var fr bth.Frame
	n := 0
	for _, f := range frames {
		if bth.ParseFrame(&fr, f, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		binary.BigEndian.PutUint16(fr.UDP[2:], 5000)
		icrc := fr.Payload[len(fr.Payload)-bth.ICRCLen:]
		if sealed {
			binary.LittleEndian.PutUint32(icrc, bth.FrameICRC(fr.IP))
		}
		if n++; n == 1 && damageFirst {
			icrc[0] ^= 1
		}
	}
	return writeCapture(t, gplayers.LinkTypeEthernet, false, cis, frames)
}

// TestDecodeOtherPort decodes a capture whose RoCE traffic is on UDP port
// 5000: found by its ICRCs, or by --roce-port, and when neither finds it,
// a hint that names the port.
func TestDecodeOtherPort(t *testing.T) {
	want, _, _ := decodeRun(nil, filepath.Join(capturesDir, "rxe_write_bw.pcap"))
	want = strings.ReplaceAll(want, ":4791 ", ":5000 ")
	got, errs, code := decodeRun(bytes.NewReader(reported(t, true, false)), "-")
	if code != cli.ExitOK || errs != "" || got != want {
		t.Errorf("port 5000: exit %d, stderr %q, %s", code, errs, firstDiff(got, want))
	}

	// The first packet's ICRC damaged: it is not taken until --roce-port
	// says the port is RoCE's.
	b := reported(t, true, true)
	got, errs, _ = decodeRun(bytes.NewReader(b), "-")
	if strings.Count(got, "\n") != strings.Count(want, "\n")-1 || !strings.Contains(errs, "try --roce-port 5000") {
		t.Errorf("a bad first ICRC: %d packets (want %d), stderr %q", strings.Count(got, "\n"), strings.Count(want, "\n")-1, errs)
	}
	got, errs, _ = decodeRun(bytes.NewReader(b), "--roce-port", "5000", "-")
	if strings.Count(got, "\n") != strings.Count(want, "\n") || strings.Count(got, "icrc=BAD") != 1 || errs != "" {
		t.Errorf("--roce-port 5000: %d packets (want %d), %d bad ICRCs (want 1), stderr %q",
			strings.Count(got, "\n"), strings.Count(want, "\n"), strings.Count(got, "icrc=BAD"), errs)
	}

	// No ICRC verifies: nothing is RoCE, and the hint says what to try;
	// the diagram, likewise.
	got, errs, code = decodeRun(bytes.NewReader(reported(t, false, false)), "-")
	if code != cli.ExitOK || got != "" || !strings.Contains(errs, "UDP packets not on port 4791") ||
		!strings.Contains(errs, "try --roce-port 5000") {
		t.Errorf("bad ICRCs: exit %d, stdout %q, stderr %q", code, got, errs)
	}
	_, errs, _ = decodeRun(bytes.NewReader(reported(t, false, false)), "--diagram", "-")
	if !strings.Contains(errs, "try --roce-port 5000") {
		t.Errorf("--diagram, bad ICRCs: stderr %q", errs)
	}
	got, _, _ = decodeRun(bytes.NewReader(reported(t, false, false)), "--roce-port=5000", "--json", "-")
	if n := strings.Count(got, `"icrc_ok":false`); n != strings.Count(want, "\n") {
		t.Errorf("--roce-port, bad ICRCs: %d packets with a bad ICRC, want %d", n, strings.Count(want, "\n"))
	}
}

// TestDecodeDiagramSpace takes --diagram html, the format after a space,
// as --diagram=html, unless a file is named html.
func TestDecodeDiagramSpace(t *testing.T) {
	path := filepath.Join(capturesDir, "rxe_imm_rnr.pcap")
	page, errs, code := decodeRun(nil, "--diagram", "html", path)
	if code != cli.ExitOK || errs != "" || !strings.HasPrefix(page, "<!DOCTYPE html>") {
		t.Errorf("--diagram html FILE: exit %d, stderr %q, output %.40q", code, errs, page)
	}
	_, errs, code = decodeRun(nil, "--diagram", path, path)
	if code != cli.ExitUsage || !strings.Contains(errs, "--diagram=html") {
		t.Errorf("--diagram FILE FILE: exit %d, stderr %q", code, errs)
	}
}
