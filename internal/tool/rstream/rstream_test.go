package rstream

import (
	"context"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

// TestReportFormat checks the helpers and the result line against what
// rstream prints for the same figures (its common.c's size_str and
// cnt_str, and show_perf's format).
func TestReportFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 64: "64", 1000: "1000", 1024: "1k", 1536: "1.5k", 6144: "6k",
		98304: "96k", 1 << 20: "1m", 1<<20 + 1<<19: "1.5m", 250 << 20: "250m", 3 << 30: "3g", 1<<30 + 1<<29: "1.5g"} {
		if got := sizeStr(n); got != want {
			t.Errorf("sizeStr(%d) = %q, want %q", n, got, want)
		}
	}
	for size, want := range map[int]int{64: 100000, 1000: 100000, 1024: 10000, 4096: 10000, 65536: 1000, 1 << 20: 100, 6 << 20: 100} {
		if got := sizeToCount(size); got != want {
			t.Errorf("sizeToCount(%d) = %d, want %d", size, got, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1k", 100000: "100k", 2500000: "2m", 7e9: "7b"} {
		if got := cntStr(n); got != want {
			t.Errorf("cntStr(%d) = %q, want %q", n, got, want)
		}
	}
	var names []string
	for _, s := range seriesSizes {
		if !s.all {
			names = append(names, seriesName(s.size, "lat"))
		}
	}
	if got := strings.Join(names, " "); got != "64_lat 4k_lat 64k_lat 1m_lat" {
		t.Errorf("the default series: %s", got)
	}
	if n := len(seriesSizes); n != 33 || seriesSizes[n-1].size != 6<<20 || seriesName(1536, "bw") != "1.5k_bw" ||
		seriesName(98304, "bw") != "96k_bw" {
		t.Errorf("the -S all series: %d sizes, the last %d", n, seriesSizes[n-1].size)
	}
	if header != "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n" {
		t.Errorf("header %q", header)
	}
	// 64-byte latency test of 20000 iterations in 0.335441 s: 64 * 20000 *
	// 2 bytes; 2560000 * 8 / 335441 / 1000 Gb/s; 335441 / 20000 / 2 us.
	r := newResult("custom", 64, 1, 20000, 335441*time.Microsecond)
	var b strings.Builder
	r.print(&b)
	if want := "custom    64      1       20k     2.4m        0.34s      0.06       8.39\n"; b.String() != want {
		t.Errorf("result line\n%q, want\n%q", b.String(), want)
	}
}

// runCmd runs cmd (roce rstream or roce riostream), the server with sargs
// and then the client with cargs (common added to both), over UDP
// loopback or the in-memory network, and returns their outcomes.
func runCmd(t *testing.T, cmd *cli.Command, useMem bool, common, sargs, cargs []string) (srv, client clitest.Result) {
	t.Helper()
	saddr, caddr := "127.0.0.1", "127.0.0.2"
	var n *mem.Network
	common = slices.Clone(common)
	if useMem {
		n = mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(n.Close)
		saddr, caddr = "198.18.0.1", "198.18.0.2"
		common = append(common, "--transport", "mem")
	} else {
		common = append(common, "--roce-port", strconv.Itoa(clitest.LoopbackUDPPort(t)))
	}
	common = append(common, "-p", strconv.Itoa(clitest.FreeTCPPort(t)), "--timeout", "30s")
	return clitest.RunPair(t, cmd, "name ", append(append([]string{"-b", saddr}, common...), sargs...),
		append(append([]string{"-s", saddr, "--bind", caddr}, common...), cargs...), n, 2*time.Minute)
}

// lineRE is a result line: name, size, transfers, iterations, total,
// seconds, Gb/sec, usec/xfer.
var lineRE = regexp.MustCompile(`^(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +[0-9]+\.[0-9]{2}s +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}$`)

// checkLines checks that out is rstream's header and then lines whose
// first five fields are want's.
func checkLines(t *testing.T, who, out string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want)+1 || lines[0]+"\n" != header {
		t.Fatalf("%s printed\n%s\nwant the header and %d lines", who, out, len(want))
	}
	for i, w := range want {
		m := lineRE.FindStringSubmatch(lines[i+1])
		if m == nil || strings.Join(m[1:6], " ") != w {
			t.Errorf("%s line %q, want the fields %q", who, lines[i+1], w)
		}
	}
}

// TestCustom runs custom tests of several sizes and shapes, goroce
// against goroce, with the data verified on both sides.
func TestCustom(t *testing.T) {
	checkCustom(t, Cmd, []customCase{
		{"latency 64", false, []string{"-S", "64", "-C", "1", "-I", "500"}, "custom 64 1 500 62k"},
		{"bandwidth 64K", false, []string{"-S", "65536", "-C", "100"}, "custom 64k 100 1 12m"},
		{"small buffers 100K", false, []string{"-S", "100000", "-C", "20", "-I", "2", "-B", "8192"}, "custom 97k 20 2 7.6m"},
		{"defaults", false, []string{"-C", "1000"}, "custom 1000 1k 1 1.9m"},
		{"odd sizes over mem", true, []string{"-S", "3001", "-C", "7", "-I", "30"}, "custom 2.9k 7 30 1.2m"},
		{"sockets", false, []string{"-T", "s", "-S", "4096", "-C", "50", "-I", "3"}, "custom 4k 50 3 1.1m"},
	})
}

// customCase is a custom test: its arguments, over the in-memory network
// or not, and the result line both sides must print.
type customCase struct {
	name string
	mem  bool
	args []string
	want string
}

// checkCustom runs cmd's custom tests with the data verified (-T v),
// server and client, and checks both sides' result lines.
func checkCustom(t *testing.T, cmd *cli.Command, cases []customCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, cl := runCmd(t, cmd, c.mem, append([]string{"-T", "v"}, c.args...), nil, nil)
			if srv.Code != 0 || cl.Code != 0 {
				t.Fatalf("server exit %d: %s%s\nclient exit %d: %s%s", srv.Code, srv.Stdout, srv.Stderr, cl.Code, cl.Stdout, cl.Stderr)
			}
			checkLines(t, "server", srv.Stdout, c.want)
			checkLines(t, "client", cl.Stdout, c.want)
		})
	}
}

// TestVerifyFails: a client that verifies against a server that does not
// fill its buffers with the pattern finds the first wrong byte.
func TestVerifyFails(t *testing.T) {
	args := []string{"-S", "1000", "-C", "3"}
	srv, cl := runNoFatal(t, args, append([]string{"-T", "v"}, args...))
	// The server echoes what it received last: the 16 bytes of the
	// first exchange pass, then the client wants byte 16 (0x10) of the
	// pattern and gets byte 2016 (0xe0), the last of the three transfers
	// the server received.
	if want := "data verification failed byte 16: 0xe0, want 0x10"; cl.Code != exitFailure || !strings.Contains(cl.Stderr, want) {
		t.Errorf("client exit %d, %q; want %d and %q", cl.Code, cl.Stderr, exitFailure, want)
	}
	if srv.Code != 0 {
		t.Errorf("server exit %d, %q; want 0: its sends completed", srv.Code, srv.Stderr)
	}
}

// runNoFatal runs a server with sargs and a client with cargs over UDP
// loopback, not failing when the client does.
func runNoFatal(t *testing.T, sargs, cargs []string) (srv, client clitest.Result) {
	t.Helper()
	common := []string{"--roce-port", strconv.Itoa(clitest.LoopbackUDPPort(t)), "-p", "7471", "--timeout", "20s"}
	sout, serr := clitest.NewBuffer("name "), clitest.NewBuffer("")
	done := make(chan int, 1)
	go func() {
		done <- clitest.Run(Cmd, nil, sout, serr, append(append([]string{"-b", "127.0.0.1"}, common...), sargs...)...)
	}()
	select {
	case <-sout.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("server not ready")
	}
	cout, cerr := clitest.NewBuffer(""), clitest.NewBuffer("")
	client.Code = clitest.Run(Cmd, nil, cout, cerr, append(append([]string{"-s", "127.0.0.1", "--bind", "127.0.0.2"}, common...), cargs...)...)
	select {
	case srv.Code = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("server did not end")
	}
	srv.Stdout, srv.Stderr, client.Stdout, client.Stderr = sout.String(), serr.String(), cout.String(), cerr.String()
	return srv, client
}

// TestSeries runs rstream's default series (latency tests, then
// bandwidth tests on a second connection) between two runners over an
// in-process pipe, the way run runs them after connecting.
func TestSeries(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var cout, sout strings.Builder
	runners := []*runner{
		{o: &options{server: "x", timeout: 30 * time.Second, tests: testOpts{verify: true}}, env: &cli.Env{Stdout: &cout}},
		{o: &options{timeout: 30 * time.Second, tests: testOpts{verify: true}}, env: &cli.Env{Stdout: &sout}},
	}
	errs := make(chan error, 2)
	for i, conn := range []net.Conn{c, s} {
		r := runners[i]
		r.buf = make([]byte, 6<<20)
		// A fiftieth of rstream's counts: its whole series moves 800 MB.
		r.countOf = func(size int) int { return sizeToCount(size) / 50 }
		go func() {
			err := r.runSeries(context.Background(), conn, "lat")
			if err == nil {
				err = r.runSeries(context.Background(), conn, "bw")
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"64_lat 64 1 2k 250k", "4k_lat 4k 1 200 1.5m", "64k_lat 64k 1 20 2.5m", "1m_lat 1m 1 2 4m",
		"64_bw 64 2k 1 250k", "4k_bw 4k 200 1 1.5m", "64k_bw 64k 20 1 2.5m", "1m_bw 1m 2 1 4m"}
	checkLines(t, "client", header+cout.String(), want...)
	checkLines(t, "server", header+sout.String(), want...)
}

// flagCase is a command line and the exit code and the words of the
// error it must draw.
type flagCase struct {
	args   []string
	code   int
	stderr string
}

// checkFlags runs cmd with each case's arguments.
func checkFlags(t *testing.T, cmd *cli.Command, cases []flagCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
			code := clitest.Run(cmd, nil, out, errb, tc.args...)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.stderr)
			}
		})
	}
}

// TestFlags checks how the command line is read and refused.
func TestFlags(t *testing.T) {
	checkFlags(t, Cmd, []flagCase{
		{[]string{"-S", "0", "-b", "127.0.0.1"}, cli.ExitUsage, `-S "0": want a size from 1`},
		{[]string{"-S", "big"}, cli.ExitUsage, `-S "big"`},
		{[]string{"-C", "0"}, cli.ExitUsage, "-C 0: want 1 or more transfers"},
		{[]string{"-I", "-1"}, cli.ExitUsage, "-I -1"},
		{[]string{"-B", "-5"}, cli.ExitUsage, "-B -5"},
		{[]string{"-i", "1000"}, cli.ExitUsage, "-i 1000"},
		{[]string{"-p", "70000"}, cli.ExitUsage, "-p 70000"},
		{[]string{"-T", "f"}, cli.ExitUsage, "f|fork is not supported"},
		{[]string{"-T", "x"}, cli.ExitUsage, `unknown test option "x"`},
		{[]string{"-f", "gid"}, cli.ExitUsage, "-f gid (AF_IB addresses) is not supported"},
		{[]string{"--transport", "tcp"}, cli.ExitUsage, `--transport "tcp"`},
		{[]string{"--mtu", "1500"}, cli.ExitUsage, "--mtu 1500"},
		{[]string{"--timeout", "0s"}, cli.ExitUsage, "--timeout"},
		{[]string{"extra"}, cli.ExitUsage, `unexpected argument "extra"`},
		{nil, cli.ExitUsage, "the server needs the address to serve on: -b ADDR"},
		{[]string{"-s", "not an address!"}, cli.ExitFailure, "not an IP address"},
		{[]string{"-s", "localhost", "-f", "ip"}, cli.ExitFailure, `"localhost" is not a numeric address (-f ip)`},
	})
	o := &options{}
	fs := cli.NewFlagSet(cli.Getopt)
	o.register(fs, "rstream")
	err := fs.Parse([]string{"-s127.0.0.1", "-Tv", "-T", "b", "-T", "socket", "-Sall", "-B", "65536", "-k5", "--spin=1ms"})
	if err == nil {
		err = o.check(fs, fs.Args())
	}
	if err != nil || o.server != "127.0.0.1" || !o.tests.verify || !o.tests.sockets || !o.sizeAll || o.custom ||
		o.bufSize != 65536 || o.keepalive != 5 || o.spin != time.Millisecond {
		t.Errorf("parse: %+v, %v", o, err)
	}
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errb, "-h"); code != 0 || !strings.Contains(out.String(), "-T OPT") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
}
