package perf

import (
	"encoding/json"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

var (
	perfBWLine = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d) *\t\t     (\d+\.\d{6})$`)
	perfLatRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+` +
		`(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d) *$`)
	perfLatDurRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d) *$`)
	perfAddrLine  = regexp.MustCompile(`(?m)^ (local|remote) address: LID 0000 QPN (0x[0-9a-f]{4,}) PSN (0x[0-9a-f]+|000000)` +
		`( OUT 0x80)?( RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,})?\n GID: (\d{2,3}(:\d{2,3}){15})$`)
)

// perfPair runs a roce perf server and client over loopback UDP (or the
// in-memory link) with the same test arguments.
func perfPair(t *testing.T, useMem bool, args ...string) (srv, cl clitest.Result) {
	t.Helper()
	ready := "Waiting for client to connect..."
	for _, a := range args {
		if a == "--json" {
			ready = "" // nothing but the JSON object
		}
	}
	t.Helper()
	tcp, udp := clitest.Ports(t)
	common := append([]string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "--timeout", "30s"}, args...)
	saddr, caddr := "127.0.0.1", "127.0.0.2"
	var memNet *mem.Network
	if useMem {
		n := mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(func() { n.Close() })
		memNet = n
		saddr, caddr = "198.18.0.1", "198.18.0.2"
		common = append(common, "--transport", "mem")
	}
	server := "127.0.0.1" // where the TCP exchange goes
	for _, a := range args {
		if a == "-R" {
			server = saddr // rdma_cm reaches the server's device
		}
	}
	return clitest.RunPair(t, Cmd, ready, append([]string{"--bind", saddr}, common...),
		append(append([]string{"--bind", caddr}, common...), server), memNet, 2*time.Minute)
}

func TestPerf(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		mem  bool
		// what each side prints: a BW line, a latency line, nothing
		server, client string
		size, iters    int
	}{
		{"write bw", []string{"write", "-s", "4096", "-n", "200"}, false, "bw", "bw", 4096, 200},
		{"write bw 4 qps", []string{"write", "-s", "1024", "-n", "100", "-q", "4"}, false, "bw", "bw", 1024, 400},
		{"write bw 64K", []string{"write", "-n", "20", "-m", "1024"}, false, "bw", "bw", 65536, 20},
		{"read bw", []string{"read", "-s", "8192", "-n", "100"}, false, "bw", "bw", 8192, 100},
		{"send bw", []string{"send", "-s", "2048", "-n", "300"}, false, "bw", "bw", 2048, 300},
		{"send bw 2 qps small rx", []string{"send", "-s", "100", "-n", "200", "-q", "2", "-r", "16"}, false, "bw", "bw", 100, 400},
		{"atomic bw", []string{"atomic", "-n", "100"}, false, "bw", "bw", 8, 100},
		{"atomic bw cas", []string{"atomic", "-n", "100", "-A", "CMP_AND_SWAP"}, false, "bw", "bw", 8, 100},
		{"write lat", []string{"write", "--lat", "-n", "50"}, false, "lat", "lat", 2, 50},
		{"write lat 4K", []string{"write", "--lat", "-n", "20", "-s", "4096"}, false, "lat", "lat", 4096, 20},
		{"send lat", []string{"send", "--lat", "-n", "50"}, false, "lat", "lat", 2, 50},
		{"read lat", []string{"read", "--lat", "-n", "50", "-s", "64"}, false, "", "lat", 64, 50},
		{"atomic lat", []string{"atomic", "--lat", "-n", "30", "-A", "CMP_AND_SWAP"}, false, "", "lat", 8, 30},
		{"write bw mem", []string{"write", "-s", "4096", "-n", "100"}, true, "bw", "bw", 4096, 100},
		{"send lat mem", []string{"send", "--lat", "-n", "20"}, true, "lat", "lat", 2, 20},
		{"read bw mem", []string{"read", "-s", "3000", "-n", "50", "-q", "2"}, true, "bw", "bw", 3000, 100},
		{"write bw rdma_cm", []string{"write", "-R", "-s", "4096", "-n", "100", "-q", "2"}, false, "bw", "bw", 4096, 200},
		{"send bw rdma_cm", []string{"send", "-R", "-s", "1000", "-n", "100"}, false, "bw", "bw", 1000, 100},
		{"read lat rdma_cm", []string{"read", "-R", "--lat", "-n", "20"}, false, "", "lat", 2, 20},
		{"send lat rdma_cm mem", []string{"send", "-R", "--lat", "-n", "20"}, true, "lat", "lat", 2, 20},
		{"atomic bw rdma_cm", []string{"atomic", "-R", "-n", "50"}, false, "bw", "bw", 8, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cl := perfPair(t, c.mem, c.args...)
			for _, r := range []struct {
				who  string
				run  clitest.Result
				want string
			}{{"server", srv, c.server}, {"client", cl, c.client}} {
				if r.run.Code != cli.ExitOK {
					t.Fatalf("%s: exit %d\n%s%s", r.who, r.run.Code, r.run.Stdout, r.run.Stderr)
				}
				out := r.run.Stdout
				addrs := perfAddrLine.FindAllStringSubmatch(out, -1)
				if len(addrs) != 2*max(1, strings.Count(out, " local address")) || len(addrs) < 2 {
					t.Errorf("%s: %d address lines:\n%s", r.who, len(addrs), out)
				}
				for _, a := range addrs {
					if verb := c.args[0]; (a[5] != "") != (verb == "read" || verb == "write") || (a[4] != "") != (verb == "read") {
						t.Errorf("%s: address line %q for %s", r.who, a[0], verb)
					}
				}
				switch r.want {
				case "bw":
					m := perfBWLine.FindStringSubmatch(out)
					if m == nil {
						t.Fatalf("%s: no BW line:\n%s", r.who, out)
					}
					if m[1] != strconv.Itoa(c.size) || m[2] != strconv.Itoa(c.iters) {
						t.Errorf("%s: %s bytes x %s iterations, want %d x %d", r.who, m[1], m[2], c.size, c.iters)
					}
					if avg, _ := strconv.ParseFloat(m[4], 64); avg <= 0 {
						t.Errorf("%s: average %s", r.who, m[4])
					}
				case "lat":
					m := perfLatRow.FindStringSubmatch(out)
					if m == nil {
						t.Fatalf("%s: no latency line:\n%s", r.who, out)
					}
					if m[1] != strconv.Itoa(c.size) || m[2] != strconv.Itoa(c.iters) {
						t.Errorf("%s: %s bytes x %s iterations, want %d x %d", r.who, m[1], m[2], c.size, c.iters)
					}
					var v [7]float64
					for i := range v {
						v[i], _ = strconv.ParseFloat(m[3+i], 64)
					}
					// t_min <= t_typical <= t_max, t_min <= t_avg <= t_max, percentiles within.
					if !(v[0] > 0 && v[0] <= v[2] && v[2] <= v[1] && v[0] <= v[3] && v[3] <= v[1] && v[5] <= v[1]) {
						t.Errorf("%s: inconsistent latencies %v", r.who, v)
					}
				default:
					if perfBWLine.MatchString(out) || perfLatRow.MatchString(out) {
						t.Errorf("%s: a result line where perftest prints none:\n%s", r.who, out)
					}
				}
			}
			// The client's local entry is what the server heard.
			sl := perfAddrLine.FindAllStringSubmatch(srv.Stdout, -1)
			ca := perfAddrLine.FindAllStringSubmatch(cl.Stdout, -1)
			if len(sl) > 0 && len(ca) > 0 {
				n := len(ca) / 2
				if ca[0][2] != sl[n][2] || ca[0][3] != sl[n][3] {
					t.Errorf("client QPN %s PSN %s, server heard %s %s", ca[0][2], ca[0][3], sl[n][2], sl[n][3])
				}
			}
		})
	}
}

// TestPerfHeader compares the header with perftest 25's, line by line,
// where it does not depend on the device.
func TestPerfHeader(t *testing.T) {
	srv, cl := perfPair(t, false, "read", "-s", "4096", "-n", "20")
	wantClient := "---------------------------------------------------------------------------------------\n" +
		"                    RDMA_Read BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : goroce:127.0.0.2\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n" +
		" ibv_wr* API     : OFF\t\tUsing DDP      : OFF\n" +
		" TX depth        : 20\n" +
		" CQ Moderation   : 20\n"
	if !strings.HasPrefix(cl.Stdout, wantClient) {
		t.Errorf("client header:\n%s\nwant it to start with\n%s", cl.Stdout, wantClient)
	}
	for _, want := range []string{" Outstand reads  : 128\n", " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n",
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01\n",
		" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"} {
		if !strings.Contains(cl.Stdout, want) || !strings.Contains(srv.Stdout, want) {
			t.Errorf("no %q in\n%s\n%s", want, cl.Stdout, srv.Stdout)
		}
	}
	if !strings.HasPrefix(srv.Stdout, "\n************************************\n* Waiting for client to connect... *\n") ||
		strings.Contains(srv.Stdout, "TX depth") {
		t.Errorf("server header:\n%s", srv.Stdout)
	}
	// The server prints the client's figures.
	if a, b := perfBWLine.FindString(srv.Stdout), perfBWLine.FindString(cl.Stdout); a != b || a == "" {
		t.Errorf("server line %q, client line %q", a, b)
	}
}

func TestPerfDuration(t *testing.T) {
	for _, c := range []struct {
		args   []string
		server bool // the server measures too
		lat    bool
	}{
		{[]string{"write", "-s", "1024", "-D", "2"}, true, false},
		{[]string{"send", "-s", "512", "-D", "2"}, true, false},
		{[]string{"read", "--lat", "-D", "2"}, false, true},
		{[]string{"send", "--lat", "-D", "2"}, true, true},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			srv, cl := perfPair(t, false, c.args...)
			for _, r := range []clitest.Result{srv, cl} {
				if r.Code != cli.ExitOK {
					t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
				}
			}
			re := perfBWLine
			if c.lat {
				re = perfLatDurRow
			}
			m := re.FindStringSubmatch(cl.Stdout)
			if m == nil {
				t.Fatalf("no result line:\n%s", cl.Stdout)
			}
			if n, _ := strconv.Atoi(m[2]); n < 1 {
				t.Errorf("%s iterations in the sample", m[2])
			}
			if !c.lat && m[3] != "0.00" {
				t.Errorf("peak %s in duration mode, perftest prints 0.00", m[3])
			}
			if c.server && re.FindString(srv.Stdout) == "" {
				t.Errorf("server printed no result:\n%s", srv.Stdout)
			}
		})
	}
}

func TestPerfJSON(t *testing.T) {
	srv, cl := perfPair(t, false, "write", "-s", "4096", "-n", "100", "--json")
	var js [2]jsonReport
	for i, r := range []clitest.Result{srv, cl} {
		if r.Code != cli.ExitOK {
			t.Fatalf("exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
		if strings.Count(r.Stdout, "\n") != 1 {
			t.Fatalf("want one line of JSON, got\n%s", r.Stdout)
		}
		if err := json.Unmarshal([]byte(r.Stdout), &js[i]); err != nil {
			t.Fatalf("%v: %s", err, r.Stdout)
		}
	}
	s, c := js[0], js[1]
	if s.Test != "ib_write_bw" || s.Role != "server" || c.Role != "client" || s.Source != "peer" || c.Source != "local" {
		t.Errorf("server %+v\nclient %+v", s, c)
	}
	if c.Results["iterations"] != float64(100) || c.Results["bytes"] != float64(4096) || c.Messages != 100 {
		t.Errorf("client results %v, %d messages", c.Results, c.Messages)
	}
	if c.Results["bw_avg_mib_s"] != s.Results["bw_avg_mib_s"] {
		t.Errorf("the server reports %v, the client %v", s.Results, c.Results)
	}
	if c.AllocsMsg == nil || c.Allocs == nil || s.Allocs != nil {
		t.Errorf("allocation figures: client %v/%v, server %v", c.Allocs, c.AllocsMsg, s.Allocs)
	}
	// The client's CPU time over the traffic, and per message; the
	// server prints its client's figures, and the CPU time its device
	// took meanwhile, with no messages of its own to divide it by.
	if c.CPUUser == nil || c.CPUSys == nil || c.CPUPerMsg == nil || *c.CPUUser+*c.CPUSys <= 0 ||
		math.Abs(*c.CPUPerMsg-(*c.CPUUser+*c.CPUSys)/100) > 0.01 {
		t.Errorf("client CPU figures: %v %v %v", c.CPUUser, c.CPUSys, c.CPUPerMsg)
	}
	if s.CPUUser == nil || s.CPUSys == nil || *s.CPUUser+*s.CPUSys <= 0 || s.CPUPerMsg != nil {
		t.Errorf("server CPU figures: %v %v %v", s.CPUUser, s.CPUSys, s.CPUPerMsg)
	}
	if len(c.Local) != 1 || c.Local[0].QPN != s.Remote[0].QPN || c.Local[0].PSN != s.Remote[0].PSN {
		t.Errorf("client local %+v, server remote %+v", c.Local, s.Remote)
	}
}

func TestPerfNoServer(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	start := time.Now()
	code := clitest.Run(Cmd, nil, out, errb, []string{"write", "--bind", "127.0.0.2", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"127.0.0.1"}...)
	if code != cli.ExitFailure || !strings.Contains(errb.String(), "couldn't connect to 127.0.0.1:"+strconv.Itoa(tcp)) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestPerfServerTimeout: nobody comes; the server says so at --timeout.
func TestPerfServerTimeout(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	code := clitest.Run(Cmd, nil, out, errb, []string{"send", "--bind", "127.0.0.1", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"--timeout", "300ms"}...)
	if code != cli.ExitFailure || !strings.Contains(errb.String(), "no client connected") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestPerfPeerGone: the client goes away in the middle of the exchange;
// the server reports it instead of waiting.
func TestPerfPeerGone(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	sout, serr := clitest.NewBuffer("Waiting for client"), clitest.NewBuffer("")
	done := make(chan int, 1)
	go func() {
		done <- clitest.Run(Cmd, nil, sout, serr, "write", "--bind", "127.0.0.1", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp))
	}()
	select {
	case <-sout.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(tcp))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	c.Close()
	select {
	case code := <-done:
		if code != cli.ExitFailure || !strings.Contains(serr.String(), "oob:") {
			t.Errorf("exit %d, stderr %q", code, serr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server still waiting")
	}
}

func TestPerfUsage(t *testing.T) {
	for _, args := range [][]string{
		nil, {"nope"}, {"write", "a", "b"}, {"write", "-n", "3"}, {"write", "-s", "0"}, {"write", "-s", "12X"},
		{"atomic", "-s", "16"}, {"write", "-A", "CMP_AND_SWAP"}, {"atomic", "-A", "SWAP"}, {"write", "-m", "1000"},
		{"write", "--lat", "-q", "2"}, {"write", "-n", "10", "-D", "2"}, {"write", "-D", "2", "-f", "1"},
		{"read", "-r", "8"}, {"atomic", "-r", "2"}, {"write", "-o", "4"}, {"write", "-n", "4294967297"},
		{"write", "--ipv6-addr", "198.18.0.11"}, {"write", "--ipv6-addr", "::ffff:198.18.0.11"}, {"write", "-t", "0"}, {"write", "-Q", "5000"},
		{"write", "--backend", "gpu"}, {"write", "--transport", "x"}, {"write", "--no-such-flag"},
		{"write", "-x", "99"}, {"write", "-p", "0"}, {"write", "-R"}, {"write", "-R", "--backend", "hw", "h"},
	} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errb, args...); code != cli.ExitUsage {
			t.Errorf("perf %v: exit %d, want %d (%s)", args, code, cli.ExitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), "roce help perf") {
			t.Errorf("perf %v: no hint in %q", args, errb.String())
		}
	}
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errb, []string{"--help"}...); code != cli.ExitOK || !strings.Contains(out.String(), "usage: roce perf") {
		t.Errorf("--help: exit %d, %q", code, out.String())
	}
}

// TestPerfNotAvailable: a hw backend without the build tag gives its
// clear error, exit 1.
func TestPerfNotAvailable(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write", "--backend", "hw", "--dev-name", "rxe0", "127.0.0.1"}, "libibverbs"},
	} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		code := clitest.Run(Cmd, nil, out, errb, c.args...)
		if code != cli.ExitFailure || !strings.Contains(errb.String(), c.want) {
			t.Errorf("perf %v: exit %d, stderr %q", c.args, code, errb.String())
		}
	}
}

// TestPerfDefaults checks perftest's defaults and dependencies.
func TestPerfDefaults(t *testing.T) {
	for _, c := range []struct {
		args                                 []string
		size, iters, tx, cqMod, rx, duration int
		noPeak                               bool
	}{
		{[]string{"write", "h"}, 65536, 5000, 128, 1, 1, 0, false},
		{[]string{"write", "-s", "4096", "h"}, 4096, 5000, 128, 100, 1, 0, false},
		{[]string{"write", "-s", "4096", "-n", "20", "h"}, 4096, 20, 20, 20, 1, 0, false},
		{[]string{"read", "-s", "64K", "-Q", "10", "h"}, 65536, 1000, 128, 10, 1, 0, false},
		{[]string{"send", "h"}, 65536, 1000, 128, 1, 512, 0, false},
		{[]string{"send", "-s", "64", "-n", "100"}, 64, 100, 100, 100, 100, 0, true},
		{[]string{"send", "--lat", "h"}, 2, 1000, 1, 1, 512, 0, false},
		{[]string{"atomic", "h"}, 8, 1000, 128, 100, 1, 0, false},
		{[]string{"write", "-D", "4", "-s", "1K", "h"}, 1024, 0, 128, 100, 1, 4, true},
		// perftest 25 takes -r for the write tests and sets it to 1
		{[]string{"write", "-r", "64", "h"}, 65536, 5000, 128, 1, 1, 0, false},
		{[]string{"write", "--lat", "-r", "8", "h"}, 2, 1000, 1, 1, 1, 0, false},
		// -n up to 2^32 (MAX_ITER of perftest 25; 4.5 stopped at 10^8)
		{[]string{"write", "-n", "4294967296", "-s", "8", "h"}, 8, 1 << 32, 128, 100, 1, 0, false},
	} {
		o, err := parseT(c.args...)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		got := []int{o.size, o.iters, o.txDepth, o.cqMod, o.rxDepth, o.duration}
		want := []int{c.size, c.iters, c.tx, c.cqMod, c.rx, c.duration}
		if !perfIntsEqual(got, want) || o.noPeak != c.noPeak {
			t.Errorf("%v: size, iters, tx, cq_mod, rx, duration = %v noPeak %v, want %v %v", c.args, got, o.noPeak, want, c.noPeak)
		}
	}
	if o, _ := parseT("write", "-D", "4", "h"); o.margin != 1 {
		t.Errorf("margin %d, want D/4 = 1", o.margin)
	}
}

// TestPerfPeakWarning: perftest 25 warns when a bandwidth test will not
// measure its peak, in the cases roce perf leaves it out too: a duration
// run, a send server.
func TestPerfPeakWarning(t *testing.T) {
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"write", "-D", "4", "h"}, true},
		{[]string{"send", "-D", "4"}, true},
		{[]string{"send"}, true},
		{[]string{"send", "h"}, false},
		{[]string{"write"}, false},
		{[]string{"write", "--lat", "-D", "4", "h"}, false},
		{[]string{"send", "--lat"}, false},
	} {
		o, err := parseT(c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if o.warnPeak != c.warn || c.warn && !o.noPeak {
			t.Errorf("%v: warn %v noPeak %v, want a warning %v", c.args, o.warnPeak, o.noPeak, c.warn)
		}
	}
	srv, cl := perfPair(t, false, "send", "-s", "1024", "-n", "20")
	const warning = " WARNING: BW peak won't be measured in this run.\n"
	if !strings.HasPrefix(srv.Stdout, warning+"\n****") {
		t.Errorf("the send server does not start with the warning:\n%s", srv.Stdout)
	}
	if strings.Contains(cl.Stdout, warning) {
		t.Errorf("the send client warns:\n%s", cl.Stdout)
	}
}

// TestPerfIPv6Exchange: with --ipv6-addr (perftest 25's), the client
// reaches the server's TCP exchange at its IPv6 address; the RoCE traffic
// goes where --bind says, as before.
func TestPerfIPv6Exchange(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	tcp, udp := clitest.Ports(t)
	common := []string{"write", "-s", "4096", "-n", "50", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "--timeout", "30s"}
	srv, cl := clitest.RunPair(t, Cmd, "Waiting for client to connect...",
		append([]string{"--bind", "127.0.0.1", "--ipv6-addr"}, common...),
		append([]string{"--bind", "127.0.0.2", "--ipv6-addr"}, append(common, "::1")...), nil, 2*time.Minute)
	for _, r := range []clitest.Result{srv, cl} {
		if r.Code != cli.ExitOK || perfBWLine.FindString(r.Stdout) == "" {
			t.Fatalf("exit %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
	}
}

// parseT parses and checks a command line of roce perf.
func parseT(args ...string) (*options, error) {
	o := &options{}
	fs := cli.NewFlagSet(cli.Getopt)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check(fs, fs.Args())
}

func perfIntsEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPerfHex(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		w    int
		want string
	}{{0, 4, "0000"}, {0x11, 6, "0x0011"}, {0x6c2eec, 6, "0x6c2eec"}, {0xc6fe2, 6, "0xc6fe2"}, {0x229, 8, "0x000229"},
		{0x557ab7ee3000, 16, "0x00557ab7ee3000"}, {0x80, 4, "0x80"}} {
		if got := cHex(c.v, c.w); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.w, got, c.want)
		}
	}
}
