package diagram

import (
	"bytes"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// page is what the tests read of an HTML page.
type page struct {
	arrows  []*html.Node // <g class="pkt ...">
	notes   int          // <g class="note ...">
	scripts int
	title   string
	cut     string // the text of <p class="cut">, if any
	// external lists attributes that would load something: src, href,
	// and url() references other than to the page's own markers.
	external []string
}

func hasClass(n *html.Node, class string) bool {
	for _, a := range n.Attr {
		if a.Key == "class" {
			for _, c := range strings.Fields(a.Val) {
				if c == class {
					return true
				}
			}
		}
	}
	return false
}

func text(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		} else {
			b.WriteString(text(c))
		}
	}
	return b.String()
}

// parsePage parses an HTML page as a browser does (golang.org/x/net/html
// implements the HTML5 parsing algorithm, SVG included).
func parsePage(t *testing.T, b []byte) *page {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	p := &page{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "g" && hasClass(n, "pkt"):
				p.arrows = append(p.arrows, n)
			case n.Data == "g" && hasClass(n, "note"):
				p.notes++
			case n.Data == "script":
				p.scripts++
			case n.Data == "title" && n.Parent.Data == "head":
				p.title = text(n)
			case n.Data == "p" && hasClass(n, "cut"):
				p.cut = text(n)
			}
			for _, a := range n.Attr {
				if a.Key == "src" || a.Key == "href" || a.Key == "xlink:href" ||
					strings.Contains(a.Val, "url(") && !strings.HasPrefix(a.Val, "url(#") {
					p.external = append(p.external, n.Data+" "+a.Key+"="+a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return p
}

// TestHTMLArrows checks, for every rxe capture, that the page draws one
// arrow per RoCE packet, in capture order, each with the packet's fields
// in its SVG title, the same notes as the text form, and nothing that
// would load a resource.
func TestHTMLArrows(t *testing.T) {
	for _, name := range allCaptures(t) {
		t.Run(name, func(t *testing.T) {
			d := captureDiagram(t, name)
			var page, txt bytes.Buffer
			if err := d.WriteHTML(&page, nil); err != nil {
				t.Fatal(err)
			}
			if err := d.WriteText(&txt); err != nil {
				t.Fatal(err)
			}
			p := parsePage(t, page.Bytes())
			if len(p.arrows) != len(d.Records) {
				t.Errorf("%d arrows, want one per RoCE packet: %d", len(p.arrows), len(d.Records))
			}
			for i, g := range p.arrows {
				if i >= len(d.Records) {
					break
				}
				want := "frame " + strconv.Itoa(d.Records[i].Frame) + " at "
				if c := g.FirstChild; c == nil || c.Data != "title" || !strings.HasPrefix(text(c), want) {
					t.Errorf("arrow %d: its first child is not a title starting %q", i, want)
				}
			}
			if want := strings.Count(txt.String(), "\nnote over "); p.notes != want {
				t.Errorf("%d notes, the text form has %d", p.notes, want)
			}
			if len(p.external) > 0 || p.scripts != 1 {
				t.Errorf("external references %q, %d scripts (want none and 1)", p.external, p.scripts)
			}
		})
	}
}

// TestHTMLEscapes checks that text from outside (the title: a file name)
// cannot add markup.
func TestHTMLEscapes(t *testing.T) {
	d := captureDiagram(t, "rxe_imm_rnr.pcap")
	d.Title = `<script>alert("x")</script> & "q"`
	var b bytes.Buffer
	if err := d.WriteHTML(&b, nil); err != nil {
		t.Fatal(err)
	}
	p := parsePage(t, b.Bytes())
	if p.title != d.Title || p.scripts != 1 {
		t.Errorf("title %q, %d scripts; want the title as text and the page's one script", p.title, p.scripts)
	}
}

// TestHTMLCap checks the bound on arrows: the page draws the first
// packets, the notes of the bursts it drew whole (as the text form has
// them), and says how many packets it left out; a negative bound draws
// all.
func TestHTMLCap(t *testing.T) {
	d := captureDiagram(t, "rxe_write_bw_loss.pcap")
	var txt bytes.Buffer
	if err := d.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{70, -1} {
		var b bytes.Buffer
		if err := d.WriteHTML(&b, &HTMLOptions{MaxPackets: limit}); err != nil {
			t.Fatal(err)
		}
		p := parsePage(t, b.Bytes())
		want, cut := len(d.Records), ""
		if limit > 0 {
			want, cut = limit, strconv.Itoa(len(d.Records)-limit)+" more RoCE packets are not drawn"
		}
		if len(p.arrows) != want || !strings.HasPrefix(p.cut, cut) || (cut == "") != (p.cut == "") {
			t.Errorf("MaxPackets %d: %d arrows and %q, want %d and %q", limit, len(p.arrows), p.cut, want, cut)
		}
		for i, g := range p.arrows {
			if id := "f" + strconv.Itoa(d.Records[i].Frame); !hasAttr(g, "id", id) {
				t.Errorf("MaxPackets %d: arrow %d is not frame %s", limit, i, id)
			}
		}
		if n := notesUpTo(txt.String(), d.Records[want-1].Frame); p.notes != n {
			t.Errorf("MaxPackets %d: %d notes, want the %d of the bursts drawn", limit, p.notes, n)
		}
	}
}

func hasAttr(n *html.Node, key, val string) bool {
	for _, a := range n.Attr {
		if a.Key == key && a.Val == val {
			return true
		}
	}
	return false
}

// notesUpTo counts the notes of a text form that follow arrows whose
// frames all come at or before frame last.
func notesUpTo(text string, last int) int {
	n, in := 0, true
	for _, line := range strings.Split(text, "\n") {
		if m := arrowLine.FindStringSubmatch(line); m != nil {
			end := m[5]
			if m[6] != "" {
				end = m[6]
			}
			f, _ := strconv.Atoi(end)
			in = f <= last
		} else if strings.HasPrefix(line, "note over ") && in {
			n++
		}
	}
	return n
}

// TestHTMLLabelsFit checks, on every rxe capture, that each arrow's label
// fits between the lifelines it joins (READ RESPONSE MIDDLE with its PSN
// and length is the longest), and that the page has a legend of the
// arrows' kinds.
func TestHTMLLabelsFit(t *testing.T) {
	arrowRE := regexp.MustCompile(`<line x1="([0-9.]+)" y1="[0-9.]+" x2="([0-9.]+)" y2="[0-9.]+" marker-end="[^"]*"/><text [^>]*>([^<]*)</text>`)
	for _, name := range allCaptures(t) {
		var b bytes.Buffer
		if err := captureDiagram(t, filepath.Base(name)).WriteHTML(&b, nil); err != nil {
			t.Fatal(err)
		}
		page := b.String()
		for _, kind := range []string{"request", "response or ACK", "NAK", "connection manager", "retransmitted", "bad ICRC"} {
			if !strings.Contains(page, `<p class="legend">`) || !strings.Contains(page, "</svg> "+kind) {
				t.Errorf("%s: the legend lacks %q", name, kind)
			}
		}
		arrows := arrowRE.FindAllStringSubmatch(page, -1)
		if len(arrows) == 0 {
			t.Fatalf("%s: no arrows", name)
		}
		for _, a := range arrows {
			x1, _ := strconv.ParseFloat(a[1], 64)
			x2, _ := strconv.ParseFloat(a[2], 64)
			label := html.UnescapeString(a[3])
			if w := charW * float64(len([]rune(label))); w > math.Abs(x2-x1) {
				t.Errorf("%s: the label %q (%.0f px) is wider than its arrow (%.0f px)", name, label, w, math.Abs(x2-x1))
				break
			}
		}
	}
}
