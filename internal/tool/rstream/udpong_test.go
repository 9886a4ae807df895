package rstream

import (
	"encoding/binary"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// pongLineRE is a udpong result line: name, size, transfers, total,
// seconds, Gb/sec, usec/xfer.
var pongLineRE = regexp.MustCompile(`^(\S+) +(\S+) +(\S+) +(\S+) +[0-9]+\.[0-9]{2}s +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}$`)

// runPong runs roce udpong, a server that exits once idle and a client,
// over UDP on loopback (a RoCE device each, or with -T s kernel sockets).
func runPong(t *testing.T, sargs, cargs []string) (srv, client clitest.Result) {
	t.Helper()
	common := []string{"-p", strconv.Itoa(clitest.LoopbackUDPPort(t)), "--roce-port", strconv.Itoa(clitest.LoopbackUDPPort(t))}
	return clitest.RunPair(t, Udpong, "", append(append([]string{"-b", "127.0.0.1", "--idle", "3s"}, common...), sargs...),
		append(append([]string{"-s", "127.0.0.1", "--bind", "127.0.0.2", "--timeout", "20s"}, common...), cargs...), nil, time.Minute)
}

// TestUdpongCustom runs custom tests, goroce against goroce and kernel
// UDP against kernel UDP: the client prints udpong's header and line, the
// server a login line.
func TestUdpongCustom(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"bandwidth", []string{"-S", "1000", "-C", "50"}, "custom 1000 50 48k"},
		{"latency", []string{"-S", "64", "-C", "30", "-T", "e"}, "custom 64 60 3.7k"},
		{"largest", []string{"-S", "2000", "-C", "5", "-T", "echo"}, "custom 1.9k 10 19k"},
		{"sockets", []string{"-S", "2056", "-C", "10", "-T", "e", "-T", "s"}, "custom 2k 20 40k"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sargs []string
			if strings.Contains(strings.Join(c.args, " "), "-T s") {
				sargs = []string{"-T", "s"}
			}
			srv, client := runPong(t, sargs, c.args)
			if srv.Code != 0 || client.Code != 0 {
				t.Fatalf("exit %d and %d\nserver:\n%s%s\nclient:\n%s%s", srv.Code, client.Code, srv.Stdout, srv.Stderr, client.Stdout, client.Stderr)
			}
			if srv.Stdout != "client login from 127.0.0.2\n" {
				t.Errorf("server printed %q", srv.Stdout)
			}
			lines := strings.Split(strings.TrimSuffix(client.Stdout, "\n"), "\n")
			if len(lines) != 2 || lines[0]+"\n" != pongHeader {
				t.Fatalf("client printed\n%s%s", client.Stdout, client.Stderr)
			}
			if m := pongLineRE.FindStringSubmatch(lines[1]); m == nil || strings.Join(m[1:5], " ") != c.want {
				t.Errorf("result line %q, want the fields %q", lines[1], c.want)
			}
		})
	}
}

// TestPongLine checks the header and a result line against udpong's
// show_perf for the same figures.
func TestPongLine(t *testing.T) {
	if pongHeader != "name      bytes   xfers   total       time     Gb/sec    usec/xfer\n" {
		t.Errorf("header %q", pongHeader)
	}
	var b strings.Builder
	p := &pong{env: &cli.Env{Stdout: &b}}
	// 20000 transfers of 64 bytes in 0.26 s: 1280000 * 8 / 264615 / 1000
	// Gb/s, 264615 / 20000 us.
	p.printResult("64_lat", 64, 20000, 264615*time.Microsecond)
	if want := "64_lat    64      20k     1.2m        0.26s      0.04      13.23\n"; b.String() != want {
		t.Errorf("result line\n%q, want\n%q", b.String(), want)
	}
}

// recorder is a net.PacketConn that records what is written to it.
type recorder struct {
	net.PacketConn
	sent [][]byte
}

func (r *recorder) WriteTo(p []byte, _ net.Addr) (int, error) {
	r.sent = append(r.sent, append([]byte(nil), p...))
	return len(p), nil
}

// TestPongServer drives the server's process with udpong's messages.
func TestPongServer(t *testing.T) {
	var out strings.Builder
	rec := &recorder{}
	p := &pong{env: &cli.Env{Stdout: &out}, c: rec}
	from := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("198.18.0.2:5000"))
	msg := func(op, id byte) []byte {
		m := make([]byte, pongCtrl)
		m[0], m[1] = op, id
		return m
	}
	steps := []struct {
		m       []byte
		answers int
	}{
		{msg(pongLogin, 9), 1}, {msg(pongLogin, 9), 1}, // ids 0 and 1
		{msg(pongStart, 1), 1}, {msg(pongEcho, 1), 1}, {msg(pongData, 1), 0}, {msg(pongData, 1), 0},
		{msg(7, 1), 0},             // unknown ops count as data
		{[]byte{pongEnd, 1, 0}, 0}, // too short: ignored
		{msg(pongEnd, 1), 1},
	}
	for i, s := range steps {
		before := len(rec.sent)
		if err := p.process(s.m, from); err != nil {
			t.Fatal(err)
		}
		if got := len(rec.sent) - before; got != s.answers {
			t.Fatalf("step %d (op %d): %d answers, want %d", i, s.m[0], got, s.answers)
		}
	}
	if rec.sent[0][1] != 0 || rec.sent[1][1] != 1 {
		t.Errorf("logins got ids %d and %d, want 0 and 1", rec.sent[0][1], rec.sent[1][1])
	}
	if n := binary.BigEndian.Uint32(rec.sent[len(rec.sent)-1][4:8]); n != 4 {
		t.Errorf("end answered with count %d, want 4 (one echo, three data)", n)
	}
	if out.String() != "client login from 198.18.0.2\nclient login from 198.18.0.2\n" {
		t.Errorf("server printed %q", out.String())
	}
}

func TestUdpongFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "127.0.0.1", "-S", "8"}, "size must be at least 16 bytes"},
		{[]string{"-s", "127.0.0.1", "-S", "3000"}, "at most 2056"},
		{[]string{"-s", "127.0.0.1", "-C", "0"}, "-C 0"},
		{[]string{"-s", "127.0.0.1", "-T", "x"}, `unknown test option "x"`},
		{[]string{"-s", "127.0.0.1", "-p", "0"}, "-p 0"},
		{[]string{}, "-b ADDR"},
		{[]string{"-s", "127.0.0.1", "extra"}, `unexpected argument "extra"`},
	} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Udpong, nil, out, errb, tc.args...); code != cli.ExitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), cli.ExitUsage, tc.want)
		}
	}
}
