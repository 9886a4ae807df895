package perf

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// TestPerfMulticast runs ib_send_bw --mcg between two roce perf, on the
// in-memory link and over UDP on loopback: the server's UD QP attached
// to the group, the client sending to the QPN and MGID of the server's
// entry; both print the multicast header, the entries as perftest does
// (the MGID for the server's own and the client's remote one) and the
// result line.
func TestPerfMulticast(t *testing.T) {
	for _, useMem := range []bool{true, false} {
		name := map[bool]string{true: "mem", false: "udp"}[useMem]
		t.Run(name, func(t *testing.T) {
			srv, cl := perfPair(t, useMem, "send", "--mcg", "-M", "0:0:0:0:0:0:0:0:0:0:255:255:239:255:50:1",
				"-s", "512", "-n", "100")
			if srv.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit %d and %d\nserver:\n%s%s\nclient:\n%s%s", srv.Code, cl.Code, srv.Stdout, srv.Stderr,
					cl.Stdout, cl.Stderr)
			}
			const mgid = " MGID: 00:00:00:00:00:00:00:00:00:00:255:255:239:255:50:01"
			for who, out := range map[string]string{"server": srv.Stdout, "client": cl.Stdout} {
				for _, want := range []string{"                    Send BW Multicast Test\n MultiCast runs on UD!\n",
					" Connection type : UD\t", mgid + "\n"} {
					if !strings.Contains(out, want) {
						t.Errorf("%s lacks %q:\n%s", who, want, out)
					}
				}
				m := perfBWLine.FindStringSubmatch(out)
				if m == nil || m[1] != "512" || m[2] != "100" {
					t.Errorf("%s's result line: %q\n%s", who, m, out)
				}
			}
			if !strings.Contains(srv.Stdout, " local address: LID 0000 QPN 0xffffff") ||
				!strings.Contains(cl.Stdout, " remote address: LID 0000 QPN 0xffffff") {
				t.Errorf("the server's entry is not the group's (QPN 0xffffff):\nserver:\n%s\nclient:\n%s", srv.Stdout, cl.Stdout)
			}
		})
	}
}

// TestPerfMulticastFlags: what --mcg refuses, as perftest does.
func TestPerfMulticastFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write", "--mcg"}, "only available on SEND verb"},
		{[]string{"send", "--mcg", "-q", "2"}, "Only 1 QP supported in multicast"},
		{[]string{"send", "--mcg", "-R"}, "doesn't support Multicast with rdma_cm"},
		{[]string{"send", "--mcg", "--lat"}, "bandwidth test only"},
		{[]string{"send", "-M", "1:2"}, "-M applies to multicast"},
		{[]string{"send", "--mcg", "-M", "1:2"}, "16 bytes"},
		{[]string{"send", "--mcg", "-M", "0:0:0:0:0:0:0:0:0:0:255:255:198:18:0:300"}, "byte 15"},
		{[]string{"send", "--mcg", "-M", "0:0:0:0:0:0:0:0:0:0:255:255:198:18:0:1"}, "not a multicast GID"},
	} {
		out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errs, c.args...); code != cli.ExitUsage || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want a usage error saying %q", c.args, code, errs.String(), c.want)
		}
	}
}
