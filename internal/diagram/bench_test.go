package diagram

import (
	"bytes"
	"io"
	"sync"
	"testing"
)

// big100k returns a capture of 100,000 RoCE packets (see bigCapture),
// made once.
func big100k(tb testing.TB) []byte {
	bigOnce.Do(func() { bigOnce.capture = bigCapture(tb, 100000) })
	return bigOnce.capture
}

var bigOnce struct {
	sync.Once
	capture []byte
}

// BenchmarkFromCapture reads the 100,000-packet capture and builds its
// diagram.
func BenchmarkFromCapture(b *testing.B) {
	capture := big100k(b)
	b.SetBytes(int64(len(capture)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromCapture(bytes.NewReader(capture)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite draws the 100,000-packet diagram: the text form, the page
// with its default bound, and the page with every packet.
func BenchmarkWrite(b *testing.B) {
	d, err := FromCapture(bytes.NewReader(big100k(b)))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"text", d.WriteText},
		{"html", func(w io.Writer) error { return d.WriteHTML(w, nil) }},
		{"html-all", func(w io.Writer) error { return d.WriteHTML(w, &HTMLOptions{MaxPackets: -1}) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var n countWriter
			b.ReportAllocs()
			for b.Loop() {
				n = 0
				if err := c.write(&n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "bytes/op")
		})
	}
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
