package pingpong

import (
	"fmt"
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
	ppLocalLine  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	ppRemoteLine = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	ppBytesLine  = regexp.MustCompile(`(?m)^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d) Mbit/sec$`)
	ppItersLine  = regexp.MustCompile(`(?m)^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d) usec/iter$`)
)

func TestPingpong(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		size  int
		iters int
		qps   int
		mem   bool
		drop  float64 // of the mem network's packets
	}{
		{"rc", []string{"-n", "20"}, 4096, 20, 1, false, 0},
		{"rc small", []string{"-n", "50", "-s", "64", "-r", "8"}, 64, 50, 1, false, 0},
		{"rc mtu 4096 events", []string{"-n", "10", "-s", "10000", "-m", "4096", "-e"}, 10000, 10, 1, false, 0},
		{"rc validate", []string{"-n", "5", "-s", "9000", "-c"}, 9000, 5, 1, false, 0},
		{"uc", []string{"--uc", "-n", "20", "-s", "2048"}, 2048, 20, 1, false, 0},
		{"ud", []string{"--ud", "-n", "20"}, 1024, 20, 1, false, 0},
		{"ud validate", []string{"--ud", "-n", "5", "-s", "512", "-c"}, 512, 5, 1, false, 0},
		{"srq", []string{"--srq", "-n", "40", "-q", "4", "-s", "1024"}, 1024, 40, 4, false, 0},
		{"srq defaults", []string{"--srq", "-n", "100"}, 4096, 100, 16, false, 0},
		{"rc mem", []string{"-n", "20", "--transport", "mem"}, 4096, 20, 1, true, 0},
		{"srq mem", []string{"--srq", "-q", "3", "-n", "30", "--transport", "mem"}, 4096, 30, 3, true, 0},
		{"rc mem loss", []string{"-n", "30", "-s", "1024", "--transport", "mem"}, 1024, 30, 1, true, 0.05},
		{"srq mem loss", []string{"--srq", "-q", "2", "-n", "30", "-s", "1024", "--transport", "mem"}, 1024, 30, 2, true, 0.05},
	} {
		t.Run(c.name, func(t *testing.T) {
			tcp, udp := clitest.Ports(t)
			common := append([]string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp)}, c.args...)
			saddr, caddr := "127.0.0.1", "127.0.0.2"
			var memNet *mem.Network
			if c.mem {
				n := mem.NewNetwork(&mem.Config{Live: true, Faults: mem.Faults{Drop: c.drop}, Seed: 1})
				defer n.Close()
				memNet = n
				saddr, caddr = "198.18.0.1", "198.18.0.2"
			}
			sargs := append([]string{"--bind", saddr}, common...)
			cargs := append([]string{"127.0.0.1", "--bind", caddr}, common...) // SERVER first, as getopt allows
			srv, cl := clitest.RunPair(t, Cmd, "local address", sargs, cargs, memNet, time.Minute)
			for _, r := range []struct {
				who       string
				run       clitest.Result
				me, other string
			}{{"server", srv, saddr, caddr}, {"client", cl, caddr, saddr}} {
				if r.run.Code != cli.ExitOK {
					t.Fatalf("%s: exit %d\n%s%s", r.who, r.run.Code, r.run.Stdout, r.run.Stderr)
				}
				out := r.run.Stdout
				locals, remotes := ppLocalLine.FindAllStringSubmatch(out, -1), ppRemoteLine.FindAllStringSubmatch(out, -1)
				if len(locals) != c.qps || len(remotes) != c.qps {
					t.Fatalf("%s: %d local and %d remote lines, want %d:\n%s", r.who, len(locals), len(remotes), c.qps, out)
				}
				if locals[0][3] != "::ffff:"+r.me || remotes[0][3] != "::ffff:"+r.other {
					t.Errorf("%s: GIDs %s and %s, want ::ffff:%s and ::ffff:%s", r.who, locals[0][3], remotes[0][3], r.me, r.other)
				}
				b := ppBytesLine.FindStringSubmatch(out)
				it := ppItersLine.FindStringSubmatch(out)
				if b == nil || it == nil {
					t.Fatalf("%s: no result lines:\n%s", r.who, out)
				}
				if want := strconv.Itoa(2 * c.size * c.iters); b[1] != want {
					t.Errorf("%s: %s bytes, want %s", r.who, b[1], want)
				}
				if it[1] != strconv.Itoa(c.iters) {
					t.Errorf("%s: %s iters, want %d", r.who, it[1], c.iters)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: %s", r.who, out)
				}
			}
			// Each side's remote lines are the other's local lines.
			sl, cr := ppLocalLine.FindAllStringSubmatch(srv.Stdout, -1), ppRemoteLine.FindAllStringSubmatch(cl.Stdout, -1)
			for i := range sl {
				if sl[i][1] != cr[i][1] || sl[i][2] != cr[i][2] {
					t.Errorf("QP %d: server says QPN %s PSN %s, client heard %s %s", i, sl[i][1], sl[i][2], cr[i][1], cr[i][2])
				}
			}
		})
	}
}

// TestPingpongServerFromConnection checks that a server without --bind
// takes its address from the client's connection.
func TestPingpongServerFromConnection(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	common := []string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "-n", "3"}
	sout, serr := clitest.NewBuffer(""), clitest.NewBuffer("")
	done := make(chan int, 1)
	go func() { done <- clitest.Run(Cmd, nil, sout, serr, common...) }()
	// No ready line before the client comes: retry the client until the
	// server listens.
	var cl clitest.Result
	deadline := time.Now().Add(20 * time.Second)
	for {
		cout, cerr := clitest.NewBuffer(""), clitest.NewBuffer("")
		cl.Code = clitest.Run(Cmd, nil, cout, cerr, append([]string{"--bind", "127.0.0.2", "127.0.0.1"}, common...)...)
		cl.Stdout, cl.Stderr = cout.String(), cerr.String()
		if cl.Code == cli.ExitOK || !strings.Contains(cl.Stderr, "connection refused") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cl.Code != cli.ExitOK {
		t.Fatalf("client: exit %d\n%s%s", cl.Code, cl.Stdout, cl.Stderr)
	}
	select {
	case code := <-done:
		if code != cli.ExitOK || !strings.Contains(sout.String(), "GID ::ffff:127.0.0.1\n") {
			t.Fatalf("server: exit %d\n%s%s", code, sout.String(), serr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end")
	}
}

func TestPingpongNoServer(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	start := time.Now()
	code := clitest.Run(Cmd, nil, out, errb, []string{"--bind", "127.0.0.2", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"127.0.0.1"}...)
	if code != cli.ExitFailure || !strings.Contains(errb.String(), "couldn't connect to 127.0.0.1:"+strconv.Itoa(tcp)) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestPingpongServerTimeout: a server nobody connects to gives up at
// --timeout with a clear error.
func TestPingpongServerTimeout(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	code := clitest.Run(Cmd, nil, out, errb, []string{"--bind", "127.0.0.1", "-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp),
		"--timeout", "300ms"}...)
	if code != cli.ExitFailure || !strings.Contains(errb.String(), "no client connected") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestPingpongUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--uc", "--ud"}, {"-m", "1000"}, {"--ud", "-m", "1024"}, {"-q", "4"}, {"--srq", "-q", "300"},
		{"--srq", "-q", "8", "-r", "4"}, {"-n", "0"}, {"-s", "0"}, {"-p", "70000"}, {"a", "b"},
		{"--no-such-flag"}, {"-i", "2"}, {"--transport", "x", "host"},
	} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errb, args...); code != cli.ExitUsage {
			t.Errorf("pingpong %v: exit %d, want %d (%s)", args, code, cli.ExitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), "roce help pingpong") {
			t.Errorf("pingpong %v: no hint in %q", args, errb.String())
		}
	}
	out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errb, "-h"); code != cli.ExitOK || !strings.Contains(out.String(), "usage: roce pingpong") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
	// A flag that needs a value, last: the getopt shim over package flag
	// used to give it the "--" it put before the arguments.
	out, errb = clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errb, "host", "-n"); code != cli.ExitUsage ||
		!strings.HasPrefix(errb.String(), "roce pingpong: flag needs an argument: -n\n") {
		t.Errorf("-n without a value: exit %d, %q", code, errb.String())
	}
}

func TestPingpongGetopt(t *testing.T) {
	o := &options{}
	fs := cli.NewFlagSet(cli.Getopt)
	o.register(fs)
	err := fs.Parse([]string{"host", "-n5", "--size=100", "-e", "-r", "7", "--srq", "-q3"})
	if err == nil {
		err = o.check(fs, fs.Args())
	}
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(o.server, o.iters, o.size, o.events, o.rxDepth, o.mode, o.numQP)
	if want := fmt.Sprint("host", 5, 100, true, 7, modeSRQ, 3); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestPingpongTrace: -v narrates the verbs on stderr.
func TestPingpongTrace(t *testing.T) {
	tcp, udp := clitest.Ports(t)
	common := []string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "-n", "2", "-s", "100"}
	srv, cl := clitest.RunPair(t, Cmd, "local address", append([]string{"--bind", "127.0.0.1"}, common...),
		append([]string{"--bind", "127.0.0.2", "-v", "127.0.0.1"}, common...), nil, time.Minute)
	if srv.Code != cli.ExitOK || cl.Code != cli.ExitOK {
		t.Fatalf("exit %d/%d\n%s%s", srv.Code, cl.Code, srv.Stderr, cl.Stderr)
	}
	for _, want := range []string{"SLOW  create RC QP", "DATA  post SEND len=100", "WC: wr_id=2 status=SUCCESS opcode=SEND"} {
		if !strings.Contains(cl.Stderr, want) {
			t.Errorf("trace lacks %q:\n%s", want, cl.Stderr)
		}
	}
	if srv.Stderr != "" {
		t.Errorf("server without -v wrote %q", srv.Stderr)
	}
}
