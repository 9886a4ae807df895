package ccbench

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
	"time"
)

// TestFigures checks goodput and Jain's fairness over 1 s windows: the
// first second is left out, two flows of 3:1 give 0.8, equal ones 1.
func TestFigures(t *testing.T) {
	per := int(time.Second / step)
	var rows [][]uint64
	for i := range 3 * per {
		if i < per {
			rows = append(rows, []uint64{1000, 0}) // the first second: left out
			continue
		}
		rows = append(rows, []uint64{3000, 1000})
	}
	g, perFlow, jain := figures(rows, 3)
	if want := 4000 * 8 / step.Seconds(); math.Abs(g-want) > 1e-6 {
		t.Errorf("goodput %v, want %v", g, want)
	}
	if math.Abs(jain-0.8) > 1e-9 || math.Abs(perFlow[0]-3*perFlow[1]) > 1e-6 {
		t.Errorf("Jain %v, per flow %v: want 0.8 and 3:1", jain, perFlow)
	}
	if _, _, j := figures(rows[:per], 1); j != 0 {
		t.Errorf("Jain %v of a run no longer than its warm-up", j)
	}
}

func TestParseRate(t *testing.T) {
	for s, want := range map[string]float64{"1gbit": 1e9, "100mbit": 1e8, "64kbit": 64e3} {
		if v, err := parseRate(s); err != nil || v != want {
			t.Errorf("parseRate(%q) = %v, %v", s, v, err)
		}
	}
	if _, err := parseRate("1gbps"); err == nil {
		t.Error("parseRate took 1gbps")
	}
}

// TestDrawIncast checks that the figure is well-formed SVG with a line per
// run in each panel and the runs' names.
func TestDrawIncast(t *testing.T) {
	runs := []series{{Name: "goroce-auto", Step: step, Goodput: []float64{5e8, 9e8, 9.4e8}, Queue: []int{1000, 20000, 30000}},
		{Name: "goroce-off", Step: step, Goodput: []float64{9e8, 3e8, 8e8}, Queue: []int{262144, 262144, 100000}}}
	svg := drawIncast(runs)
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	lines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v\n%s", err, svg)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 || !strings.Contains(string(svg), "goroce-off") {
		t.Errorf("%d polylines, want 2 runs × 2 panels", lines)
	}
}
