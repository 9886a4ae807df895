package diagram

import (
	"bufio"
	"html"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
)

// DefaultHTMLPackets is how many arrows WriteHTML draws unless told
// otherwise: a page of 2.7 MB, six SVG elements an arrow, which headless
// Chromium loads and lays out in about a second on two cores. Past it the
// page draws the first ones and says how many it left out.
const DefaultHTMLPackets = 5000

// HTMLOptions tune WriteHTML. A nil *HTMLOptions means the defaults.
type HTMLOptions struct {
	// MaxPackets bounds the arrows drawn: 0 means DefaultHTMLPackets, a
	// negative number no bound.
	MaxPackets int
}

// Geometry of the ladder, in pixels.
const (
	rowH     = 20  // one arrow or note
	laneW    = 300 // between two lifelines, at least: wider when a label needs it
	gutterW  = 140 // frame number and time, left of the first lifeline
	headerH  = 34  // the participants' boxes
	charW    = 6.7 // a character of the 11 px monospace font, about
	notePad  = 6
	labelPad = 24 // room between an arrow's label and the lifelines it joins, each side
	selfLoop = 36 // width of an arrow from a participant to itself
)

// row is one line of the ladder: a packet's arrow, or a note.
type row struct {
	step int   // the step of an arrow, or -1
	note *Note // the note, when step is -1
}

// htmlRows lays out the steps: an arrow per packet, the notes of a burst
// after its last packet (as in the text form), at most limit arrows. It
// returns the rows and how many packets it left out.
func (d *Diagram) htmlRows(limit int) (rows []row, left int) {
	drawn := 0
	for i := 0; i < len(d.Steps); {
		j := d.burstEnd(i)
		all := limit < 0 || drawn < limit // every arrow of the burst drawn
		for k := i; k <= j; k++ {
			if d.Steps[k].To < 0 {
				continue
			}
			if limit >= 0 && drawn >= limit {
				left++
				all = false
				continue
			}
			rows = append(rows, row{step: k})
			drawn++
		}
		if all {
			if d.Steps[i].Retransmit {
				n := d.retransmitNote(i, j)
				rows = append(rows, row{step: -1, note: &n})
			}
			for n := range d.Steps[j].Notes {
				rows = append(rows, row{step: -1, note: &d.Steps[j].Notes[n]})
			}
		}
		i = j + 1
	}
	return rows, left + d.Omitted
}

// geometry is the width of the lanes of one page: laneW, or what the
// longest label of an arrow needs to stay between the lifelines it joins
// (an RC READ RESPONSE MIDDLE with its PSN and length is wider than
// laneW).
type geometry struct{ lane float64 }

// geometry returns the page's lane width for the arrows of rows.
func (d *Diagram) geometry(rows []row) geometry {
	g := geometry{lane: laneW}
	for _, r := range rows {
		if r.note != nil {
			continue
		}
		s := &d.Steps[r.step]
		span := s.To - s.From
		if span < 0 {
			span = -span
		}
		if span == 0 {
			continue // a self-loop's label runs to the right of its loop
		}
		need := (charW*float64(len([]rune(label(&d.Records[s.Record])))) + 2*labelPad) / float64(span)
		g.lane = max(g.lane, math.Ceil(need))
	}
	return g
}

// laneX returns the x of participant p's lifeline.
func (g geometry) laneX(p int) float64 { return gutterW + g.lane*float64(p) + g.lane/2 }

// noteBox returns the left edge and width of a note's box: across the
// lanes it is over, and wider when its text needs it.
func (g geometry) noteBox(n *Note) (x, w float64) {
	span := noteSpan(*n)
	x = g.laneX(span[0]) - g.lane/2 + notePad
	w = g.laneX(span[len(span)-1]) + g.lane/2 - notePad - x
	return x, max(w, charW*float64(len([]rune(n.Text)))+2*notePad)
}

// WriteHTML writes the diagram as one self-contained HTML page (no
// external resources, no network): an SVG ladder where time runs down and
// the participants are across, one arrow per packet with its frame number
// and time on the left, the notes of the text form, and the decoded fields
// of a packet on hover (its SVG title) or in a panel when clicked. It
// returns the first error writing to w, or ErrInconsistent for a diagram
// changed after it was built.
func (d *Diagram) WriteHTML(w io.Writer, opts *HTMLOptions) error {
	if err := d.check(); err != nil {
		return err
	}
	limit := DefaultHTMLPackets
	if opts != nil && opts.MaxPackets != 0 {
		limit = opts.MaxPackets
	}
	rows, left := d.htmlRows(limit)
	g := d.geometry(rows)
	width := gutterW + g.lane*float64(max(len(d.Participants), 1))
	for _, r := range rows {
		if r.note != nil {
			x, w := g.noteBox(r.note)
			width = max(width, x+w+notePad)
		}
	}
	height := float64(len(rows)*rowH + rowH)
	bw := bufio.NewWriterSize(w, 64<<10)
	d.writeHead(bw, g, len(rows)-countNotes(rows), left, width)
	bw.WriteString(`<svg id="ladder" xmlns="http://www.w3.org/2000/svg" width="` + px(width) + `" height="` + px(height) + `">` + "\n")
	bw.WriteString(markers)
	for p := range d.Participants {
		x := px(g.laneX(p))
		bw.WriteString(`<line class="life" x1="` + x + `" y1="0" x2="` + x + `" y2="` + px(height) + `"/>` + "\n")
	}
	for n, r := range rows {
		y := float64(n*rowH + rowH)
		if r.note != nil {
			d.writeHTMLNote(bw, g, r.note, y)
		} else {
			d.writeHTMLArrow(bw, g, r.step, y, width)
		}
	}
	bw.WriteString("</svg>\n" + pageEnd)
	return bw.Flush()
}

func countNotes(rows []row) int {
	n := 0
	for _, r := range rows {
		if r.note != nil {
			n++
		}
	}
	return n
}

// px formats a coordinate.
func px(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// esc escapes text for HTML and SVG, in text and attributes.
func esc(s string) string { return html.EscapeString(s) }

// writeHead writes the page up to the ladder: the title, what the page
// shows, and the participants' boxes in a header that stays in view.
func (d *Diagram) writeHead(bw *bufio.Writer, g geometry, drawn, left int, width float64) {
	bw.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" +
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" + esc(d.Title) + "</title>\n" +
		pageStyle + "</head>\n<body>\n<header>\n<h1>" + esc(d.Title) + "</h1>\n<p>" +
		strconv.Itoa(drawn) + " RoCE packets between " + strconv.Itoa(len(d.Participants)) +
		" queue pairs, time running down. Hover over a packet for its fields; click it to keep them in the panel.</p>\n")
	bw.WriteString(legend)
	if left > 0 {
		bw.WriteString(`<p class="cut">` + strconv.Itoa(left) + " more RoCE packets are not drawn: the page stops at " +
			strconv.Itoa(drawn) + ". The text form (roce decode --diagram) has them all.</p>\n")
	}
	bw.WriteString("</header>\n<div id=\"lanes\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(width) +
		"\" height=\"" + px(headerH) + "\">\n")
	bw.WriteString(`<text class="gut" x="4" y="21">frame  time (s)</text>` + "\n")
	for p, pt := range d.Participants {
		x := g.laneX(p)
		bw.WriteString(`<rect class="who" x="` + px(x-g.lane/2+8) + `" y="4" width="` + px(g.lane-16) + `" height="26" rx="4"/>` +
			`<text class="who" x="` + px(x) + `" y="21" text-anchor="middle">` + esc(pt.Name) + "</text>\n")
	}
	bw.WriteString("</svg></div>\n")
}

// kindClass returns the CSS class of a step's arrow.
func (d *Diagram) kindClass(s *Step) string {
	r := &d.Records[s.Record]
	switch {
	case !r.Truncated && !r.ICRCOK:
		return "bad"
	case s.Retransmit:
		return "rexmit"
	case r.MAD != nil:
		return "cm"
	case r.BTH.Opcode.Info().Has(bth.HdrAETH) && r.AETH.Syndrome.Kind() != bth.KindACK:
		return "nak"
	case s.Reply:
		return "reply"
	}
	return "req"
}

// writeHTMLArrow writes the arrow of step i at height y: a group with the
// packet's fields as its title, a row-wide hover target, the frame and
// time, the arrow and its label.
func (d *Diagram) writeHTMLArrow(bw *bufio.Writer, g geometry, i int, y, width float64) {
	s := &d.Steps[i]
	r := &d.Records[s.Record]
	class := d.kindClass(s)
	if s.Reply {
		class += " dash"
	}
	bw.WriteString(`<g class="pkt ` + class + `" id="f` + strconv.Itoa(r.Frame) + `"><title>` + esc(fields(r)) + "</title>")
	bw.WriteString(`<rect class="hit" x="0" y="` + px(y-rowH+4) + `" width="` + px(width) + `" height="` + px(rowH) + `"/>`)
	bw.WriteString(`<text class="gut" x="4" y="` + px(y) + `">` + strconv.Itoa(r.Frame) + "  " + seconds(r.Time) + "</text>")
	x1, x2 := g.laneX(s.From), g.laneX(s.To)
	mid := (x1 + x2) / 2
	if s.From == s.To {
		bw.WriteString(`<path d="M` + px(x1) + " " + px(y-6) + "h" + px(selfLoop) + "v8h-" + px(selfLoop-2) +
			`" fill="none" marker-end="url(#h-` + strings.Fields(class)[0] + `)"/>`)
		mid = x1 + selfLoop + 4
		bw.WriteString(`<text x="` + px(mid) + `" y="` + px(y-8) + `">` + esc(label(r)) + "</text></g>\n")
		return
	}
	bw.WriteString(`<line x1="` + px(x1) + `" y1="` + px(y) + `" x2="` + px(x2) + `" y2="` + px(y) +
		`" marker-end="url(#h-` + strings.Fields(class)[0] + `)"/>`)
	bw.WriteString(`<text x="` + px(mid) + `" y="` + px(y-4) + `" text-anchor="middle">` + esc(label(r)) + "</text></g>\n")
}

// noteClass is the CSS class of each kind of note.
var noteClass = [...]string{NoteCM: "cm", NoteNAK: "nak", NoteRNR: "rnr", NoteRetransmit: "rexmit",
	NoteBadICRC: "bad", NoteMalformed: "bad"}

// writeHTMLNote writes a note as a box across the lanes it is over.
func (d *Diagram) writeHTMLNote(bw *bufio.Writer, g geometry, n *Note, y float64) {
	x, w := g.noteBox(n)
	class := "cm"
	if int(n.Kind) < len(noteClass) {
		class = noteClass[n.Kind]
	}
	bw.WriteString(`<g class="note ` + class + `"><rect x="` + px(x) + `" y="` + px(y-rowH+5) + `" width="` + px(w) +
		`" height="` + px(rowH-2) + `" rx="3"/><text x="` + px(x+notePad) + `" y="` + px(y) + `">` + esc(n.Text) + "</text></g>\n")
}

// legend says what the arrows' colours and dashes and the notes' boxes
// mean.
const legend = `<p class="legend">` +
	`<span class="req"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> request</span>` +
	`<span class="reply dash"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> response or ACK</span>` +
	`<span class="nak"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> NAK</span>` +
	`<span class="cm"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> connection manager (QP 1)</span>` +
	`<span class="rexmit"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> retransmitted</span>` +
	`<span class="bad"><svg width="30" height="8"><line x1="0" y1="4" x2="30" y2="4"/></svg> bad ICRC or malformed (dropped)</span>` +
	`<span class="note"><svg width="18" height="10"><rect x="1" y="1" width="16" height="8" rx="2"/></svg> note: ` +
	`what the packets above it mean</span></p>` + "\n"

// markers are the arrowheads, one per colour.
const markers = `<defs>
<marker id="h-req" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#1f5fbf"/></marker>
<marker id="h-reply" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#2e7d32"/></marker>
<marker id="h-nak" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#c62828"/></marker>
<marker id="h-cm" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#6a1b9a"/></marker>
<marker id="h-rexmit" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#e65100"/></marker>
<marker id="h-bad" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#b71c1c"/></marker>
</defs>
`

// pageStyle is the page's style sheet.
const pageStyle = `<style>
body{margin:0;font:13px system-ui,sans-serif;color:#222;background:#fff}
header{padding:6px 12px}
h1{font-size:18px;margin:4px 0}
p{margin:4px 0}
p.cut{color:#b71c1c}
#lanes{position:sticky;top:0;background:#fff;border-bottom:1px solid #bbb;z-index:1}
svg text{font:11px ui-monospace,Menlo,Consolas,monospace;fill:#222;white-space:pre}
rect.who{fill:#eef3fb;stroke:#1f5fbf}
text.who{font-weight:bold}
text.gut{fill:#777}
line.life{stroke:#bbb;stroke-dasharray:4 4}
.pkt line,.pkt path{stroke-width:1.4}
.pkt text{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.pkt rect.hit{fill:transparent}
.pkt:hover rect.hit,.pkt.pinned rect.hit{fill:#fff6cc}
.req line,.req path{stroke:#1f5fbf}.req text{fill:#1f5fbf}
.reply line,.reply path{stroke:#2e7d32}.reply text{fill:#2e7d32}
.nak line,.nak path{stroke:#c62828}.nak text{fill:#c62828}
.cm line,.cm path{stroke:#6a1b9a}.cm text{fill:#6a1b9a}
.rexmit line,.rexmit path{stroke:#e65100}.rexmit text{fill:#e65100}
.bad line,.bad path{stroke:#b71c1c;stroke-dasharray:2 2}.bad text{fill:#b71c1c}
.dash line,.dash path{stroke-dasharray:6 3}
.pkt text.gut{fill:#777}
.legend span{margin-right:14px;white-space:nowrap}
.legend svg{vertical-align:middle}
.legend line{stroke-width:1.6}
.note rect{fill:#fff8dc;stroke:#c9b458}
.note.nak rect,.note.bad rect{fill:#fdecea;stroke:#c62828}
.note.rnr rect{fill:#fff3e0;stroke:#ef6c00}
.note.rexmit rect{fill:#fff3e0;stroke:#e65100}
.note.cm rect{fill:#f3e5f5;stroke:#6a1b9a}
#fields{position:fixed;right:8px;bottom:8px;max-width:60em;margin:0;padding:6px 8px;background:#fffbe6;
border:1px solid #c9b458;font:12px ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;z-index:2}
#fields:empty{display:none}
</style>
`

// pageEnd is the fields panel and the script that fills it; the script
// marks the body with the number of packets when it has run.
const pageEnd = `<pre id="fields"></pre>
<script>
(function () {
  var panel = document.getElementById("fields");
  var ladder = document.getElementById("ladder");
  var pinned = null;
  function show(g) {
    var t = g.querySelector("title");
    panel.textContent = t ? t.textContent : "";
  }
  ladder.addEventListener("mouseover", function (e) {
    var g = e.target.closest(".pkt");
    if (g && !pinned) show(g);
  });
  ladder.addEventListener("click", function (e) {
    var g = e.target.closest(".pkt");
    if (pinned) pinned.classList.remove("pinned");
    if (!g || g === pinned) { pinned = null; panel.textContent = ""; return; }
    pinned = g;
    g.classList.add("pinned");
    show(g);
  });
  document.body.setAttribute("data-packets", String(ladder.querySelectorAll("g.pkt").length));
})();
</script>
</body>
</html>
`
