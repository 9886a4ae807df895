package mckey

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

// lines returns mckey's lines for a role ("server" or "client") joined to
// dgid, the data phase's line, as mckey prints them.
func lines(role, dgid, data string, conns int) string {
	s := "mckey: starting " + role + "\nmckey: joining\n" +
		strings.Repeat("mckey: joined dgid: "+dgid+" mlid 0x0 sl 0\n", conns)
	return s + data + "\ndata transfers complete\ntest complete\nreturn status 0\n"
}

// TestMckey runs a receiver and a sender of roce mckey, on the in-memory
// network and over UDP on loopback, with one or two connections and a
// send-only sender: each connection of the receiver gets every message,
// and both print mckey's lines.
func TestMckey(t *testing.T) {
	for _, c := range []struct {
		name         string
		udp          bool
		sargs, cargs []string
		conns        int
	}{
		{"mem", false, nil, nil, 1},
		{"mem two connections, send-only sender", false, []string{"-c", "2"}, []string{"-o", "-c", "2"}, 2},
		{"udp loopback", true, []string{"-S", "1024"}, []string{"-S", "1024"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			group, s, cl := "239.255.49.1", []string{"--bind", "198.18.0.1"}, []string{"--bind", "198.18.0.2"}
			var n *mem.Network
			if c.udp {
				port := strconv.Itoa(clitest.LoopbackUDPPort(t))
				s, cl = []string{"-b", "127.0.0.1", "--roce-port", port}, []string{"-b", "127.0.0.2", "--roce-port", port}
			} else {
				n = mem.NewNetwork(&mem.Config{Live: true})
				defer n.Close()
				s, cl = append(s, "--transport", "mem"), append(cl, "--transport", "mem")
			}
			sargs := append(append([]string{"-m", group, "-C", "20", "--pause", "0", "--timeout", "20s"}, s...), c.sargs...)
			// mckey ignores arguments after its flags, as the interop harness's
			// appended server address.
			cargs := append(append([]string{"-m", group, "-C", "20", "-s", "--pause", "0"}, cl...), append(c.cargs, "198.18.0.1")...)
			srv, client := clitest.RunPair(t, Cmd, "receiving data transfers", sargs, cargs, n, time.Minute)
			if srv.Code != 0 || client.Code != 0 {
				t.Fatalf("exit %d and %d\nreceiver:\n%s%s\nsender:\n%s%s", srv.Code, client.Code, srv.Stdout, srv.Stderr,
					client.Stdout, client.Stderr)
			}
			dgid := "::ffff:" + group
			if want := lines("server", dgid, "receiving data transfers", c.conns); srv.Stdout != want {
				t.Errorf("receiver printed\n%s\nwant\n%s", srv.Stdout, want)
			}
			if want := lines("client", dgid, "initiating data transfers", c.conns); client.Stdout != want {
				t.Errorf("sender printed\n%s\nwant\n%s", client.Stdout, want)
			}
			if !strings.Contains(client.Stderr, `ignoring ["198.18.0.1"]`) {
				t.Errorf("sender did not say it ignores its argument: %q", client.Stderr)
			}
		})
	}
}

// TestMckeyTimeout: a receiver that gets nothing (nobody sends) fails
// once --timeout passes, saying how many came.
func TestMckeyTimeout(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	defer n.Close()
	out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
	code := clitest.Run(Cmd, n, out, errs, "-m", "239.255.49.2", "-C", "3", "--pause", "0", "--timeout", "200ms",
		"--transport", "mem", "--bind", "198.18.0.1")
	if code != 1 || !strings.Contains(errs.String(), "0 of 3 messages received") ||
		!strings.HasSuffix(out.String(), "test complete\nreturn status 1\n") {
		t.Errorf("exit %d\n%s%s", code, out.String(), errs.String())
	}
}

// TestMckeyFlags: what roce mckey refuses, as a usage error.
func TestMckeyFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-m ADDR"},
		{[]string{"-m", "198.18.0.9"}, "not a multicast address"},
		{[]string{"-M", "ff15::1"}, "requires binding to source address"},
		{[]string{"-m", "239.255.0.1", "-l"}, "BLOCK_SELF_MCAST_LB"},
		{[]string{"-m", "239.255.0.1", "-p", "0x2"}, "IPoIB"},
		{[]string{"-m", "239.255.0.1", "-p", "x"}, "port space"},
		{[]string{"-m", "239.255.0.1", "-c", "0"}, "-c 0"},
		{[]string{"-m", "239.255.0.1", "-S", "5000"}, "-S 5000"},
	} {
		out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errs, c.args...); code != 2 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errs.String(), c.want)
		}
	}
}
