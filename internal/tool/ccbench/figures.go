package ccbench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// figures computes a run's goodput, per-flow rates and fairness over 1 s
// windows, leaving out the first second.
func figures(perStep [][]uint64, secs int) (goodput float64, perFlow []float64, jain float64) {
	per := int(time.Second / step)
	skip := per
	if len(perStep) <= skip {
		return 0, nil, 0
	}
	n := len(perStep[0])
	perFlow = make([]float64, n)
	var total uint64
	windows, jsum := 0, 0.0
	for w := skip; w+per <= len(perStep); w += per {
		win := make([]float64, n)
		for _, row := range perStep[w : w+per] {
			for i, v := range row {
				win[i] += float64(v)
			}
		}
		var s, s2 float64
		for _, x := range win {
			s, s2 = s+x, s2+x*x
		}
		if s2 > 0 {
			jsum += s * s / (float64(n) * s2)
			windows++
		}
	}
	for _, row := range perStep[skip:] {
		for i, v := range row {
			perFlow[i] += float64(v)
			total += v
		}
	}
	dur := float64(len(perStep)-skip) * step.Seconds()
	for i := range perFlow {
		perFlow[i] = perFlow[i] * 8 / dur
	}
	if windows > 0 {
		jain = jsum / float64(windows)
	}
	return float64(total) * 8 / dur, perFlow, jain
}

// parseRate reads tc's rate ("1gbit", "100mbit") in bits per second.
func parseRate(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.mult, err
		}
	}
	return 0, fmt.Errorf("rate %q: want NNgbit, NNmbit or NNkbit", s)
}
