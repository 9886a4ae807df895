package diagram

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

const (
	hostA = "198.18.0.1"
	hostB = "198.18.0.2"
)

// arrows returns "FROM->TO" by participant name for each step.
func arrows(d *Diagram) []string {
	var out []string
	for _, s := range d.Steps {
		to := "-"
		if s.To >= 0 {
			to = d.Participants[s.To].Name
		}
		out = append(out, d.Participants[s.From].Name+"->"+to)
	}
	return out
}

func checkArrows(t *testing.T, d *Diagram, want ...string) {
	t.Helper()
	got := arrows(d)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("arrows:\n got  %q\n want %q", got, want)
	}
}

// TestSenderQP checks how the sending QP of a packet is found: the flow
// back with the same UDP source port, the only flow back, the CM, the
// DETH, or not at all.
func TestSenderQP(t *testing.T) {
	t.Run("same port", func(t *testing.T) {
		// A QP 5 <-> B QP 9 on port 50000, A QP 6 <-> B QP 8 on port 50001.
		d := diagramOf(t,
			rc(hostA, hostB, 50000, bth.RCSendOnly, 9, 100, 8),
			rc(hostA, hostB, 50001, bth.RCSendOnly, 8, 200, 8),
			ack(hostB, hostA, 50001, 6, 200, bth.ACKSyndrome(bth.NoCredits)),
			ack(hostB, hostA, 50000, 5, 100, bth.ACKSyndrome(bth.NoCredits)))
		checkArrows(t, d, hostA+" QP 5->"+hostB+" QP 9", hostA+" QP 6->"+hostB+" QP 8",
			hostB+" QP 8->"+hostA+" QP 6", hostB+" QP 9->"+hostA+" QP 5")
	})
	t.Run("only flow back", func(t *testing.T) {
		d := diagramOf(t,
			rc(hostA, hostB, bth.UDPPort, bth.RCSendOnly, 18, 100, 8),
			ack(hostB, hostA, 53760, 256, 100, bth.ACKSyndrome(bth.NoCredits)))
		checkArrows(t, d, hostA+" QP 256->"+hostB+" QP 18", hostB+" QP 18->"+hostA+" QP 256")
	})
	t.Run("ambiguous", func(t *testing.T) {
		// Two flows back, neither on the port of the flow out.
		d := diagramOf(t,
			rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8),
			rc(hostB, hostA, 2000, bth.RCSendOnly, 5, 300, 8),
			rc(hostB, hostA, 3000, bth.RCSendOnly, 6, 400, 8))
		checkArrows(t, d, hostA+" QP ?->"+hostB+" QP 9", hostB+" QP ?->"+hostA+" QP 5", hostB+" QP ?->"+hostA+" QP 6")
	})
	t.Run("one way", func(t *testing.T) {
		d := diagramOf(t, rc(hostA, hostB, 1000, bth.UCSendOnly, 9, 100, 8))
		checkArrows(t, d, hostA+" QP ?->"+hostB+" QP 9")
		if p := d.Participants[0]; p.Alias != "H1" || p.QPKnown {
			t.Errorf("participant %+v, want alias H1 and QP not known", p)
		}
	})
	t.Run("CM", func(t *testing.T) {
		// The REQ and REP name QPs 7 and 8; the ports would have paired
		// the flows otherwise (7 with 11).
		d := diagramOf(t,
			madPkt(hostA, hostB, cmMAD(t, &mad.REQ{LocalCommID: 1, LocalQPN: 7, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471)})),
			madPkt(hostB, hostA, cmMAD(t, &mad.REP{LocalCommID: 2, RemoteCommID: 1, LocalQPN: 8})),
			rc(hostA, hostB, 1000, bth.RCSendOnly, 8, 100, 8),
			rc(hostB, hostA, 1000, bth.RCSendOnly, 11, 100, 8),
			ack(hostB, hostA, 2000, 7, 100, bth.ACKSyndrome(bth.NoCredits)))
		checkArrows(t, d, hostA+" QP 1->"+hostB+" QP 1", hostB+" QP 1->"+hostA+" QP 1",
			hostA+" QP 7->"+hostB+" QP 8", hostB+" QP ?->"+hostA+" QP 11", hostB+" QP 8->"+hostA+" QP 7")
	})
	t.Run("UD", func(t *testing.T) {
		p := rc(hostA, hostB, 1000, bth.UDSendOnly, 9, 100, 8)
		p.deth = bth.DETHFields{QKey: 0x11111111, SrcQP: 42}
		d := diagramOf(t, p)
		checkArrows(t, d, hostA+" QP 42->"+hostB+" QP 9")
	})
}

// TestParticipantOrder checks the lanes: hosts in order of appearance,
// the last host's QPs mirrored so that each connection's QPs face each
// other.
func TestParticipantOrder(t *testing.T) {
	d := diagramOf(t,
		rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8),
		rc(hostA, hostB, 2000, bth.RCSendOnly, 8, 100, 8),
		rc(hostB, hostA, 1000, bth.RCSendOnly, 5, 100, 8),
		rc(hostB, hostA, 2000, bth.RCSendOnly, 6, 100, 8))
	var got []string
	for _, p := range d.Participants {
		got = append(got, p.Alias+" "+p.Name)
	}
	want := []string{"H1Q5 " + hostA + " QP 5", "H1Q6 " + hostA + " QP 6", "H2Q8 " + hostB + " QP 8", "H2Q9 " + hostB + " QP 9"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("participants %q, want %q", got, want)
	}
}

// notesOf returns the notes of the steps, one string per step.
func notesOf(d *Diagram) []string {
	var out []string
	for _, s := range d.Steps {
		var texts []string
		for _, n := range s.Notes {
			texts = append(texts, n.Text)
		}
		out = append(out, strings.Join(texts, " | "))
	}
	return out
}

func checkNotes(t *testing.T, d *Diagram, want ...string) {
	t.Helper()
	got := notesOf(d)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n got  %q\n want %q", got, want)
	}
}

// TestNotes checks the notes the captures of rxe do not have: a bad ICRC,
// a truncated packet (no note), a malformed frame, a NAK other than a
// sequence error (fatal), a NAK never retried, a rejected connection, an
// MRA, and
// frames that are not RoCE (skipped, but counted in frame numbers).
func TestNotes(t *testing.T) {
	bad := rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8)
	bad.badICRC = true
	short := rc(hostA, hostB, 1000, bth.RCWriteOnly, 9, 101, 1024)
	short.truncateTo = 100
	broken := rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 102, 8)
	broken.badOpcode = true
	dns := rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 103, 8)
	dns.notRoCE = true
	d := diagramOf(t,
		madPkt(hostA, hostB, cmMAD(t, &mad.REQ{LocalCommID: 1, LocalQPN: 5, ServiceID: 0x1234, StartingPSN: 77})),
		madPkt(hostB, hostA, cmMAD(t, &mad.MRA{LocalCommID: 2, RemoteCommID: 1, MessageMRAed: mad.MRAedREQ})),
		madPkt(hostB, hostA, cmMAD(t, &mad.REJ{LocalCommID: 2, RemoteCommID: 1, Reason: mad.RejInvalidServiceID})),
		bad, short, broken, dns,
		ack(hostB, hostA, 1000, 5, 100, bth.NAKSyndrome(bth.NAKRemoteAccessError)),
		ack(hostB, hostA, 1000, 5, 104, bth.NAKSyndrome(bth.NAKPSNSequenceError)))
	checkNotes(t, d,
		"CM REQ: "+hostA+" QP 5 asks "+hostB+" to connect to service ID 0x1234; "+hostB+" is to send from PSN 77",
		"CM MRA: "+hostB+" needs more time to answer the REQ",
		"CM REJ: "+hostB+" rejects the REQ: invalid service ID (reason 8); no connection for "+hostA+" QP 5",
		"bad ICRC: "+hostB+" drops frame 4",
		"",
		"frame 6 does not decode: bth: unknown opcode",
		"NAK remote access error for PSN 100: the request fails and "+hostA+" QP 5 goes to the error state",
		"NAK PSN sequence error: "+hostB+" QP 9 expects PSN 104; not retried in the capture")
	if got := d.Records[7].Frame; got != 9 {
		t.Errorf("the last NAK is frame %d, want 9 (frame 7 is not RoCE)", got)
	}
	if d.Steps[5].To != -1 {
		t.Errorf("the malformed frame has an arrow to %d", d.Steps[5].To)
	}
}

// TestBurstLabels checks how packets are coalesced in the text form: a
// message's packets with consecutive PSNs in one arrow, broken by a packet
// of another flow, by a note, and by a retransmission.
func TestBurstLabels(t *testing.T) {
	first := rc(hostA, hostB, 1000, bth.RCWriteFirst, 9, 10, 1024)
	first.reth = bth.RETHFields{VA: 0x1000, RKey: 7, DMALen: 3000}
	bad := rc(hostA, hostB, 1000, bth.RCWriteMiddle, 9, 12, 1024)
	bad.badICRC = true
	d := diagramOf(t,
		first,
		rc(hostA, hostB, 1000, bth.RCWriteMiddle, 9, 11, 1024),
		bad,
		rc(hostA, hostB, 1000, bth.RCWriteLast, 9, 13, 952),
		ack(hostB, hostA, 1000, 5, 13, bth.ACKSyndrome(bth.NoCredits)),
		rc(hostA, hostB, 1000, bth.RCWriteMiddle, 9, 11, 1024),
		rc(hostA, hostB, 1000, bth.RCWriteMiddle, 9, 12, 1024),
		rc(hostA, hostB, 1000, bth.RCWriteLast, 9, 13, 952))
	var b strings.Builder
	if err := d.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `title RoCEv2 capture

autonumber

participant "198.18.0.1 QP 5" as H1Q5
participant "198.18.0.2 QP 9" as H2Q9

H1Q5->H2Q9: RDMA WRITE FIRST..MIDDLE ×3, PSN 10..12, 3072 B (frames 1-3)
note over H2Q9: bad ICRC: 198.18.0.2 drops frame 3
H1Q5->H2Q9: RDMA WRITE LAST, PSN 13, 952 B (frame 4)
H2Q9-->H1Q5: ACK, PSN 13, MSN 1 (frame 5)
H1Q5->H2Q9: RDMA WRITE MIDDLE..LAST ×3, PSN 11..13, 3000 B (frames 6-8)
note over H1Q5: retransmission: PSNs 11..13 were sent before
`
	if b.String() != want {
		t.Errorf("text form:\n%s\nwant:\n%s\n%s", b.String(), want, firstDiff(b.String(), want))
	}
}

// TestInconsistent checks that a diagram whose indexes were changed, or a
// nil one, is an error and not a panic.
func TestInconsistent(t *testing.T) {
	d := diagramOf(t, rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8))
	cases := map[string]func(*Diagram) *Diagram{
		"nil":         func(*Diagram) *Diagram { return nil },
		"record":      func(d *Diagram) *Diagram { d.Steps[0].Record = 1; return d },
		"participant": func(d *Diagram) *Diagram { d.Steps[0].To = 7; return d },
		"note": func(d *Diagram) *Diagram {
			d.Steps[0].Notes = []Note{{Over: []int{0, -1}}}
			return d
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			c := *d
			c.Steps = append([]Step(nil), d.Steps...)
			var b strings.Builder
			if err := change(&c).WriteText(&b); !errors.Is(err, ErrInconsistent) {
				t.Errorf("WriteText: %v, want ErrInconsistent", err)
			}
		})
	}
}

// TestOddRecords checks that records a decoder may build from frames
// without addresses or with an undefined opcode, and no records at all,
// draw without a panic, hosts without an address as "?".
func TestOddRecords(t *testing.T) {
	cases := map[string][]Record{
		"none":             nil,
		"zero":             {{}},
		"malformed no IP":  {{Frame: 1, Malformed: "IPv4 header cut"}},
		"undefined opcode": {{Frame: 1, BTH: bth.BTHFields{Opcode: 0xFF, DestQP: 1 << 24}}},
		"MAD without CM":   {{Frame: 1, BTH: bth.BTHFields{Opcode: bth.UDSendOnly, DestQP: 1}, ICRCOK: true, MAD: &MAD{Class: mad.ClassCM, AttrID: mad.AttrRTU}}},
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			d := New(recs)
			var b strings.Builder
			if err := d.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if err := d.WriteHTML(&b, nil); err != nil {
				t.Fatal(err)
			}
			if len(d.Steps) != len(recs) {
				t.Errorf("%d steps for %d records", len(d.Steps), len(recs))
			}
			if name == "MAD without CM" && len(d.Steps[0].Notes) > 0 {
				t.Errorf("a CM MAD without its message or an error has notes %+v", d.Steps[0].Notes)
			}
			if strings.Contains(b.String(), "invalid IP") {
				t.Errorf("a host without an address is named \"invalid IP\", not \"?\":\n%s", b.String())
			}
		})
	}
}

// TestFormat checks the flag values and Write's dispatch.
func TestFormat(t *testing.T) {
	var f Format
	for _, c := range []struct {
		in   string
		want Format
		err  bool
	}{{"true", FormatText, false}, {"text", FormatText, false}, {"html", FormatHTML, false},
		{"false", FormatNone, false}, {"svg", FormatNone, true}} {
		f = FormatNone
		if err := f.Set(c.in); f != c.want || (err != nil) != c.err || c.err && !errors.Is(err, ErrFormat) {
			t.Errorf("Set(%q): %v, %v; want %v", c.in, f, err, c.want)
		}
	}
	d := diagramOf(t, rc(hostA, hostB, 1000, bth.RCSendOnly, 9, 100, 8))
	var text, page strings.Builder
	if err := d.Write(&text, FormatText); err != nil || !strings.HasPrefix(text.String(), "title ") {
		t.Errorf("Write text: %v, %.20q", err, text.String())
	}
	if err := d.Write(&page, FormatHTML); err != nil || !strings.HasPrefix(page.String(), "<!DOCTYPE html>") {
		t.Errorf("Write html: %v, %.20q", err, page.String())
	}
	if err := d.Write(&text, FormatNone); !errors.Is(err, ErrFormat) {
		t.Errorf("Write none: %v, want ErrFormat", err)
	}
}
