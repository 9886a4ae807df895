package ccbench

import (
	"fmt"
	"strings"
	"time"
)

// drawIncast draws the incast runs' goodput and queue over time as an SVG
// image, one line per run (goroce with and without congestion control),
// goodput above, the bottleneck's queue below.
func drawIncast(runs []series) []byte {
	const (
		w, h         = 760, 520
		left, right  = 70, 20
		top, gap     = 40, 60
		panelH       = 180
		plotW        = w - left - right
		maxQueueKB   = 256
		maxGoodputGb = 1.0
	)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">8 senders into one receiver through 1 Gbit/s, a 256 KiB buffer</text>`+"\n", left)
	steps := 0
	for _, r := range runs {
		steps = max(steps, len(r.Goodput))
	}
	if steps < 2 {
		steps = 2
	}
	var stepDur time.Duration = step
	if len(runs) > 0 && runs[0].Step > 0 {
		stepDur = runs[0].Step
	}
	x := func(i int) float64 { return left + float64(i)*plotW/float64(steps-1) }
	panel := func(y0 int, title, unit string, maxV float64, ticks int, val func(r series, i int) (float64, bool)) {
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left, y0-8, title)
		for t := 0; t <= ticks; t++ {
			v := maxV * float64(t) / float64(ticks)
			y := float64(y0+panelH) - float64(panelH)*float64(t)/float64(ticks)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, w-right, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g%s</text>`+"\n", left-6, y+4, v, unit)
		}
		for ri, r := range runs {
			var pts []string
			for i := range r.Goodput {
				v, ok := val(r, i)
				if !ok {
					continue
				}
				v = min(v, maxV)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), float64(y0+panelH)-float64(panelH)*v/maxV))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[ri%len(colors)],
				strings.Join(pts, " "))
		}
	}
	panel(top+20, "goodput, all senders", " Gbit/s", maxGoodputGb, 4, func(r series, i int) (float64, bool) {
		return r.Goodput[i] / 1e9, true
	})
	panel(top+20+panelH+gap, "queue at the bottleneck (tbf backlog)", " KiB", maxQueueKB, 4, func(r series, i int) (float64, bool) {
		if i >= len(r.Queue) {
			return 0, false
		}
		return float64(r.Queue[i]) / 1024, true
	})
	yAxis := top + 20 + 2*panelH + gap
	secs := float64(steps-1) * stepDur.Seconds()
	for s := 0; float64(s) <= secs; s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", left+float64(s)/secs*plotW, yAxis+18, s)
	}
	for ri, r := range runs {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left+ri*180, h-15, colors[ri%len(colors)], left+ri*180+18, h-5, r.Name)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}
