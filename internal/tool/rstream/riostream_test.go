package rstream

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

// TestRiostreamCustom runs custom riostream tests, goroce against
// goroce, with the data verified on both sides: latency and bandwidth
// shapes, inline and larger transfers, buffers smaller than a transfer.
func TestRiostreamCustom(t *testing.T) {
	checkCustom(t, Riostream, []customCase{
		{"latency 64", false, []string{"-S", "64", "-C", "1", "-I", "300"}, "custom 64 1 300 37k"},
		{"bandwidth 64K", false, []string{"-S", "65536", "-C", "50"}, "custom 64k 50 1 6.2m"},
		{"small buffers 100K", false, []string{"-S", "100000", "-C", "10", "-I", "2", "-B", "8192"}, "custom 97k 10 2 3.8m"},
		{"odd sizes over mem", true, []string{"-S", "3001", "-C", "7", "-I", "30"}, "custom 2.9k 7 30 1.2m"},
		{"one byte over mem", true, []string{"-S", "1", "-C", "3", "-I", "20"}, "custom 1 3 20 120"},
	})
}

// TestRiostreamSeries runs riostream's default series (latency tests,
// then bandwidth tests on a second connection), with a fiftieth of its
// counts, between two runners over the in-memory network, the data
// verified.
func TestRiostreamSeries(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	port := strconv.Itoa(clitest.FreeTCPPort(t))
	var outs [2]strings.Builder
	var runners [2]*runner
	for i, args := range [][]string{{"-b", "198.18.0.1"}, {"-s", "198.18.0.1", "--bind", "198.18.0.2"}} {
		o := &options{}
		fs := cli.NewFlagSet(cli.Getopt)
		o.register(fs, "riostream")
		must(t, fs.Parse(append(args, "-T", "v", "--transport", "mem", "-p", port, "--timeout", "30s")))
		must(t, o.check(fs, fs.Args()))
		r, err := newRunner(o, &cli.Env{Stdout: &outs[i], MemNet: n})
		must(t, err)
		t.Cleanup(r.close)
		r.countOf = func(size int) int { return sizeToCount(size) / 50 }
		runners[i] = r
	}
	errs := make(chan error, 2)
	for _, r := range runners {
		go func() { errs <- r.run(context.Background()) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"64_lat 64 1 2k 250k", "4k_lat 4k 1 200 1.5m", "64k_lat 64k 1 20 2.5m", "1m_lat 1m 1 2 4m",
		"64_bw 64 2k 1 250k", "4k_bw 4k 200 1 1.5m", "64k_bw 64k 20 1 2.5m", "1m_bw 1m 2 1 4m"}
	checkLines(t, "server", header+outs[0].String(), want...)
	checkLines(t, "client", header+outs[1].String(), want...)
	// Each latency iteration and each bandwidth test ends with a transfer
	// checked but for its poll byte.
	var want64 int64
	for _, size := range []int{64, 4096, 65536, 1 << 20} {
		want64 += int64(sizeToCount(size)/50+1) * int64(size-1)
	}
	if got := runners[1].verified; got != want64 {
		t.Errorf("the client verified %d bytes, want %d", got, want64)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRiostreamFlags checks riostream's flags: rstream's without -k, and
// -T without s, r and f.
func TestRiostreamFlags(t *testing.T) {
	checkFlags(t, Riostream, []flagCase{
		{[]string{"-T", "s"}, cli.ExitUsage, `unknown test option "s" (want a, b, n or v)`},
		{[]string{"-T", "resolve"}, cli.ExitUsage, `unknown test option "resolve"`},
		{[]string{"-k", "5"}, cli.ExitUsage, "-k"},
		{[]string{"-S", "0", "-b", "127.0.0.1"}, cli.ExitUsage, `-S "0": want a size from 1`},
		{nil, cli.ExitUsage, "the server needs the address to serve on: -b ADDR"},
	})
	o := &options{}
	fs := cli.NewFlagSet(cli.Getopt)
	o.register(fs, "riostream")
	err := fs.Parse([]string{"-s127.0.0.1", "-Tv", "-T", "nonblock", "-Sall", "-B", "65536", "-i", "32"})
	if err == nil {
		err = o.check(fs, fs.Args())
	}
	if err != nil || !o.io || o.server != "127.0.0.1" || !o.tests.verify || o.tests.sockets || !o.sizeAll || o.bufSize != 65536 || o.inline != 32 {
		t.Errorf("parse: %+v, %v", o, err)
	}
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Riostream, nil, out, errb, "-h"); code != 0 || !strings.Contains(out.String(), "riowrite") ||
		strings.Contains(out.String(), "-k ") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
}
