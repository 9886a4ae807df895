package rawudp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// rawudpPair runs a rawudp server on 127.0.0.1 and a client with args
// (and the server's port) against it, and returns what each printed.
func rawudpPair(t *testing.T, args ...string) (clientOut, serverOut string) {
	t.Helper()
	port := strconv.Itoa(clitest.FreeTCPPort(t))
	srv, cl := clitest.RunPair(t, Cmd, "rawudp server on", []string{"-p", port, "--bind", "127.0.0.1"},
		append(append([]string{"-p", port}, args...), "127.0.0.1"), nil, time.Minute)
	if srv.Code != 0 {
		t.Fatalf("server exit %d: %s", srv.Code, srv.Stderr)
	}
	return cl.Stdout, srv.Stdout
}

// TestRawUDP runs the baseline's server and client over loopback, with
// and without GSO, and checks what the client reports: datagrams counted
// by the server, a rate from them.
func TestRawUDP(t *testing.T) {
	for _, tc := range []struct{ gso, first string }{{"15", "0"}, {"0", "0"}, {"15", "4128"}} {
		gso := tc.gso
		t.Run("gso"+gso+"/first"+tc.first, func(t *testing.T) {
			out, sout := rawudpPair(t, "--gso", gso, "--first", tc.first, "-D", "0.3", "--json")
			var r result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if r.Datagrams == 0 || r.Datagrams > r.Sent || r.Seconds <= 0 || r.GBps <= 0 ||
				tc.first == "0" && r.Bytes != r.Datagrams*4112 ||
				tc.first != "0" && (r.Bytes <= r.Datagrams*4112 || r.Bytes >= r.Datagrams*4128) {
				t.Errorf("implausible result %+v", r)
			}
			if !strings.Contains(sout, "rawudp: 4112-byte datagrams, gso "+gso) {
				t.Errorf("server printed %q", sout)
			}
		})
	}
}

// TestRawUDPLatency runs the ping-pong over loopback, blocking and busy
// polling, and checks the half round trips it reports.
func TestRawUDPLatency(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "blocking", true: "busy-poll"}[busy], func(t *testing.T) {
			args := []string{"--lat", "-n", "300", "--json"}
			if busy {
				args = append(args, "--busy-poll")
			}
			out, sout := rawudpPair(t, args...)
			var r latResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			lo, typ, hi := r.Results["t_min_us"], r.Results["t_typical_us"], r.Results["t_max_us"]
			if r.Size != latSize || r.Iters != 300 || r.BusyPoll != busy || lo <= 0 || typ < lo || hi < typ ||
				r.Results["p99_us"] < typ || r.Results["p99_9_us"] < r.Results["p99_us"] {
				t.Errorf("implausible result %+v", r)
			}
			// Both sides did the work of 400 round trips: CPU time, which
			// the server (in this process too) reports back.
			if r.CPU <= 0 || r.PeerCPU <= 0 {
				t.Errorf("CPU time: client %v us, server %v us", r.CPU, r.PeerCPU)
			}
			// 300 counted, 100 warm-up, and a lost one sent again.
			if want := fmt.Sprintf("rawudp: echoed %d 36-byte datagrams", 400+r.Lost); !strings.Contains(sout, want) {
				t.Errorf("server printed %q, want %q", sout, want)
			}
		})
	}
}

func TestRawUDPUsage(t *testing.T) {
	for _, args := range [][]string{{"--lat", "-s", "2"}, {"--busy-poll"}, {"--lat", "-n", "1"}, {"-s", "10"}, {"--gso", "65"}, {"-D", "0"}, {"-p", "0"}, {"a", "b"}, {"--gso", "20", "-s", "4112"}, {"--gso", "0", "--first", "4128"}, {"--first", "10"}} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errb, args...); code != cli.ExitUsage || !strings.Contains(errb.String(), "roce help rawudp") {
			t.Errorf("%v: exit %d, %q", args, code, errb.String())
		}
	}
}
