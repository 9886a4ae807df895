package diagram

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
)

// burstEnd returns the last step of the burst that starts at step i: the
// packets that follow each other in the capture with the next PSN of the
// same message, between the same two participants, and that are all new
// or all sent again. Notes end a burst, so they stay after the packet
// they are about.
func (d *Diagram) burstEnd(i int) int {
	j := i
	for j+1 < len(d.Steps) && d.continues(&d.Steps[j], &d.Steps[j+1]) {
		j++
	}
	return j
}

// continues reports whether step t continues the burst that step s ends.
func (d *Diagram) continues(s, t *Step) bool {
	if s.To < 0 || t.To < 0 || s.From != t.From || s.To != t.To || len(s.Notes) > 0 || s.Retransmit != t.Retransmit {
		return false
	}
	a, b := &d.Records[s.Record], &d.Records[t.Record]
	if a.MAD != nil || b.MAD != nil {
		return false
	}
	ia, ib := a.BTH.Opcode.Info(), b.BTH.Opcode.Info()
	return (ia.Position == bth.PosFirst || ia.Position == bth.PosMiddle) &&
		(ib.Position == bth.PosMiddle || ib.Position == bth.PosLast) &&
		ia.Operation == ib.Operation && ia.Transport == ib.Transport && b.BTH.PSN == a.BTH.PSN.Next()
}

// burstLabel describes steps i..j as one arrow: the opcodes, how many
// packets, their PSNs and payload bytes.
func (d *Diagram) burstLabel(i, j int) string {
	if i == j {
		return label(&d.Records[d.Steps[i].Record])
	}
	first, last := &d.Records[d.Steps[i].Record], &d.Records[d.Steps[j].Record]
	total := 0
	for k := i; k <= j; k++ {
		total += d.Records[d.Steps[k].Record].PayloadLen
	}
	return opRange(first.BTH.Opcode, last.BTH.Opcode) + " ×" + strconv.Itoa(j-i+1) +
		", PSN " + uitoa(uint64(first.BTH.PSN)) + ".." + uitoa(uint64(last.BTH.PSN)) +
		", " + strconv.Itoa(total) + " B" + extras(last) + ecn(&last.BTH)
}

// retransmitNote returns the note on steps i..j when they were sent
// before.
func (d *Diagram) retransmitNote(i, j int) Note {
	first, last := &d.Records[d.Steps[i].Record], &d.Records[d.Steps[j].Record]
	psns := "PSN " + uitoa(uint64(first.BTH.PSN)) + " was"
	if i != j {
		psns = "PSNs " + uitoa(uint64(first.BTH.PSN)) + ".." + uitoa(uint64(last.BTH.PSN)) + " were"
	}
	text := "retransmission: " + psns + " sent before"
	if first.BTH.Opcode.Info().Operation == bth.OpReadResponse {
		text = "resent: " + psns + " answered before"
	}
	return Note{Over: []int{d.Steps[i].From}, Kind: NoteRetransmit, Text: text}
}

// WriteText writes the diagram in the text dialect of the project's seed
// diagrams (sequencediagram.org's, which PlantUML also reads): a title,
// autonumber, a participant line per host and QP, an arrow per burst of
// packets ("->" for requests, "-->" for replies) with the frames it
// stands for, and the notes after the arrow they are about. It returns
// the first error writing to w, or ErrInconsistent for a diagram changed
// after it was built.
func (d *Diagram) WriteText(w io.Writer) error {
	if err := d.check(); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("title " + oneLine(d.Title) + "\n\nautonumber\n\n")
	for _, p := range d.Participants {
		bw.WriteString("participant \"" + oneLine(p.Name) + "\" as " + p.Alias + "\n")
	}
	if len(d.Participants) > 0 {
		bw.WriteString("\n")
	}
	for i := 0; i < len(d.Steps); {
		j := d.burstEnd(i)
		d.writeTextBurst(bw, i, j)
		i = j + 1
	}
	if d.Omitted > 0 && len(d.Participants) > 0 {
		d.writeNote(bw, Note{Over: []int{0, len(d.Participants) - 1},
			Text: strconv.Itoa(d.Omitted) + " more RoCE packets are not drawn"})
	}
	return bw.Flush()
}

// writeTextBurst writes the arrow of steps i..j and their notes.
func (d *Diagram) writeTextBurst(bw *bufio.Writer, i, j int) {
	s, last := &d.Steps[i], &d.Steps[j]
	if s.To >= 0 {
		arrow := "->"
		if s.Reply {
			arrow = "-->"
		}
		ref := frames(&d.Records[s.Record], &d.Records[last.Record])
		bw.WriteString(d.Participants[s.From].Alias + arrow + d.Participants[s.To].Alias + ": " +
			oneLine(d.burstLabel(i, j)) + " (" + ref + ")\n")
	}
	if s.Retransmit {
		d.writeNote(bw, d.retransmitNote(i, j))
	}
	for _, n := range last.Notes {
		d.writeNote(bw, n)
	}
}

// writeNote writes a note line, over the leftmost participant it names
// first.
func (d *Diagram) writeNote(bw *bufio.Writer, n Note) {
	bw.WriteString("note over ")
	for k, p := range noteSpan(n) {
		if k > 0 {
			bw.WriteString(", ")
		}
		bw.WriteString(d.Participants[p].Alias)
	}
	bw.WriteString(": " + oneLine(n.Text) + "\n")
}

// noteSpan returns the participants a note is over, left to right, each
// once.
func noteSpan(n Note) []int {
	if len(n.Over) < 2 {
		return n.Over
	}
	lo, hi := min(n.Over[0], n.Over[1]), max(n.Over[0], n.Over[1])
	if lo == hi {
		return []int{lo}
	}
	return []int{lo, hi}
}

// oneLine keeps s on one line of the text form.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	}
	return s
}
