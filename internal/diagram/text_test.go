package diagram

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCaptures are the captures whose text form is kept in testdata,
// each read and checked by hand: the CM handshake and teardown of rping,
// an RNR NAK and its retries, go-back-N after loss (WRITE and READ), and
// a ping-pong of WRITEs.
var goldenCaptures = []string{
	"rxe_rping_rdmacm.pcap",
	"rxe_imm_rnr.pcap",
	"rxe_write_bw_loss.pcap",
	"rxe_read_bw_loss.pcap",
	"rxe_write_lat.pcap",
}

func TestTextGolden(t *testing.T) {
	for _, name := range goldenCaptures {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := captureDiagram(t, name).WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", strings.TrimSuffix(name, ".pcap")+".txt")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it, then read it)", err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("text form differs from %s:\n%s", golden, firstDiff(got, string(want)))
			}
		})
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n got  " + gl + "\n want " + wl
		}
	}
	return "(same lines)"
}

// arrowLine matches an arrow of the text form and its frame reference.
var arrowLine = regexp.MustCompile(`^(H\d+(?:Q\d+)?)(-->|->)(H\d+(?:Q\d+)?): (.*) \(frames? (\d+)(?:-(\d+))?\)$`)

// TestTextFrames checks, for every rxe capture, that the text form is
// made of the lines of the seed's dialect only, that its arrows name
// declared participants, and that their frame references cover every RoCE
// frame of the capture once, in order.
func TestTextFrames(t *testing.T) {
	for _, name := range allCaptures(t) {
		t.Run(name, func(t *testing.T) {
			d := captureDiagram(t, name)
			var buf bytes.Buffer
			if err := d.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			var want []int
			for _, r := range d.Records {
				want = append(want, r.Frame)
			}
			got := checkTextLines(t, buf.String())
			if !equalInts(got, want) {
				t.Errorf("arrows cover frames %v, want %v", got, want)
			}
		})
	}
}

// checkTextLines checks each line of a text form and returns the frames
// its arrows cover.
func checkTextLines(t *testing.T, text string) []int {
	t.Helper()
	declared := map[string]bool{}
	var frames []int
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case line == "" || line == "autonumber" || strings.HasPrefix(line, "title "):
		case strings.HasPrefix(line, "participant \""):
			f := strings.Fields(line)
			declared[f[len(f)-1]] = true
		case strings.HasPrefix(line, "note over "):
			over, _, ok := strings.Cut(strings.TrimPrefix(line, "note over "), ": ")
			for _, p := range strings.Split(over, ", ") {
				if !ok || !declared[p] {
					t.Errorf("line %d: note over an undeclared participant: %s", n+1, line)
				}
			}
		default:
			m := arrowLine.FindStringSubmatch(line)
			if m == nil || !declared[m[1]] || !declared[m[3]] {
				t.Errorf("line %d: not an arrow between declared participants: %s", n+1, line)
				continue
			}
			first, _ := strconv.Atoi(m[5])
			last := first
			if m[6] != "" {
				last, _ = strconv.Atoi(m[6])
			}
			for f := first; f <= last; f++ {
				frames = append(frames, f)
			}
		}
	}
	return frames
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRNRWaits checks the RNR NAKs of rxe_imm_rnr.pcap: rxe refuses the
// SEND of PSN 15667820 three times with an RNR NAK of timer 19 (7.68 ms),
// and the requester retries after 12.313, 8.618 and 11.504 ms (frames 22
// to 27 of `roce decode`: 0.070009 -> 0.082322, 0.082974 -> 0.091592,
// 0.092106 -> 0.103610 s).
func TestRNRWaits(t *testing.T) {
	d := captureDiagram(t, "rxe_imm_rnr.pcap")
	var got []string
	for _, s := range d.Steps {
		for _, n := range s.Notes {
			if n.Kind == NoteRNR {
				got = append(got, n.Text)
			}
		}
	}
	waits := []string{"12.313ms (frame 23)", "8.618ms (frame 25)", "11.504ms (frame 27)"}
	if len(got) != len(waits) {
		t.Fatalf("RNR notes: %q, want %d", got, len(waits))
	}
	for i, w := range waits {
		want := "RNR NAK for PSN 15667820: 198.18.0.11 QP 17 is not ready to receive; wait at least 7.68ms; retried after " + w
		if got[i] != want {
			t.Errorf("RNR note %d:\n got  %s\n want %s", i, got[i], want)
		}
	}
}

// TestCMConnection checks the notes of rping's rdma_cm exchange: the REQ
// of 198.18.0.12 QP 30 to port 7174, the REP of 198.18.0.11 QP 30, the
// RTU, and the DREQ and DREP that close the connection; the starting PSNs
// they carry are those of each side's first request.
func TestCMConnection(t *testing.T) {
	d := captureDiagram(t, "rxe_rping_rdmacm.pcap")
	want := map[int]string{
		1:  "CM REQ: 198.18.0.12 QP 30 asks 198.18.0.11 to connect to port 7174; 198.18.0.11 is to send from PSN 4956138",
		2:  "CM REP: 198.18.0.11 QP 30 accepts 198.18.0.12 QP 30; 198.18.0.12 is to send from PSN 7345254",
		3:  "CM RTU: 198.18.0.12 QP 30 and 198.18.0.11 QP 30 are connected",
		64: "CM DREQ: 198.18.0.12 QP 30 and 198.18.0.11 QP 30 are disconnecting",
		65: "CM DREP: 198.18.0.12 QP 30 and 198.18.0.11 QP 30 are disconnected",
	}
	firstPSN := map[string]bth.PSN{} // the first request's PSN by sender
	for _, s := range d.Steps {
		r := &d.Records[s.Record]
		if op := r.BTH.Opcode.Info(); op.Transport == bth.TransportRC && isRequest(op.Operation) {
			if _, ok := firstPSN[r.Src.String()]; !ok {
				firstPSN[r.Src.String()] = r.BTH.PSN
			}
		}
		if w, ok := want[r.Frame]; ok {
			if len(s.Notes) != 1 || s.Notes[0].Text != w || s.Notes[0].Kind != NoteCM {
				t.Errorf("frame %d notes %+v, want %q", r.Frame, s.Notes, w)
			}
			delete(want, r.Frame)
		} else if len(s.Notes) > 0 {
			t.Errorf("frame %d has notes %+v", r.Frame, s.Notes)
		}
	}
	if len(want) > 0 {
		t.Errorf("frames without their CM note: %v", want)
	}
	if firstPSN["198.18.0.11"] != 4956138 || firstPSN["198.18.0.12"] != 7345254 {
		t.Errorf("first request PSNs %v, want those of the REQ and REP", firstPSN)
	}
}

// TestRetransmitReference checks the retransmission marks of every rxe
// capture against a slow reference: an RC request is a retransmission when
// its flow sent that PSN before, or the READ responses to the flow carried
// it; a READ response is resent when its flow carried that PSN before.
func TestRetransmitReference(t *testing.T) {
	for _, name := range allCaptures(t) {
		t.Run(name, func(t *testing.T) {
			d := captureDiagram(t, name)
			type key struct {
				src, dst string
				qp       uint32
			}
			used := map[key]map[bth.PSN]bool{} // PSNs of the requester flow key
			mark := func(k key, psn bth.PSN) bool {
				if used[k] == nil {
					used[k] = map[bth.PSN]bool{}
				}
				seen := used[k][psn]
				used[k][psn] = true
				return seen
			}
			n := 0
			for i, s := range d.Steps {
				r := &d.Records[s.Record]
				info := r.BTH.Opcode.Info()
				var want bool
				switch {
				case info.Operation == bth.OpReadResponse:
					resp := key{"resp " + r.Src.String(), r.Dst.String(), r.BTH.DestQP}
					want = mark(resp, r.BTH.PSN)
					// The requester's flow goes the other way, to the QP that sent this.
					mark(key{r.Dst.String(), r.Src.String(), d.Participants[s.From].QP}, r.BTH.PSN)
				case isRequest(info.Operation) && info.Transport == bth.TransportRC:
					want = mark(key{r.Src.String(), r.Dst.String(), r.BTH.DestQP}, r.BTH.PSN)
				}
				if s.Retransmit != want {
					t.Errorf("step %d (frame %d %s psn %d): Retransmit %v, reference %v", i, r.Frame,
						r.BTH.Opcode, r.BTH.PSN, s.Retransmit, want)
				}
				if want {
					n++
				}
			}
			t.Logf("%d packets sent again", n)
		})
	}
}
