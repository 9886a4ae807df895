package rawudp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
	for _, tc := range []struct {
		gso, first string
		work       bool
	}{{"15", "0", false}, {"0", "0", false}, {"15", "4128", false}, {"15", "0", true}, {"15", "4128", true}} {
		gso := tc.gso
		t.Run(fmt.Sprintf("gso%s/first%s/work=%v", gso, tc.first, tc.work), func(t *testing.T) {
			args := []string{"--gso", gso, "--first", tc.first, "-D", "0.3", "--json"}
			if tc.work {
				args = append(args, "--work")
			}
			out, sout := rawudpPair(t, args...)
			var r result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			// --work's receiver checked every datagram's ICRC: the
			// sender's, over the same flow.
			if r.Work != tc.work || r.ICRCErrors != 0 {
				t.Errorf("work %v, %d bad ICRCs", r.Work, r.ICRCErrors)
			}
			if r.Datagrams == 0 || r.Datagrams > r.Sent || r.Seconds <= 0 || r.GBps <= 0 ||
				tc.first == "0" && r.Bytes != r.Datagrams*4112 ||
				tc.first != "0" && (r.Bytes <= r.Datagrams*4112 || r.Bytes >= r.Datagrams*4128) {
				t.Errorf("implausible result %+v", r)
			}
			if !strings.Contains(sout, "rawudp: 4112-byte datagrams, gso "+gso) || tc.work != strings.Contains(sout, "ICRC and placement (0 bad ICRCs)") {
				t.Errorf("server printed %q", sout)
			}
		})
	}
}

// TestRawUDPLatency runs the ping-pong over loopback, blocking and busy
// polling, and checks the half round trips it reports.
func TestRawUDPLatency(t *testing.T) {
	for _, tc := range []struct{ busy, ack, calls bool }{{false, false, false}, {true, false, false}, {false, true, false},
		{true, true, false}, {true, false, true}, {false, true, true}, {true, true, true}} {
		busy := tc.busy
		t.Run(fmt.Sprintf("busy=%v/ack=%v/calls=%v", busy, tc.ack, tc.calls), func(t *testing.T) {
			args := []string{"--lat", "-n", "300", "--json"}
			if busy {
				args = append(args, "--busy-poll")
			}
			if tc.ack {
				args = append(args, "--ack")
			}
			if tc.calls {
				args = append(args, "--calls")
			}
			out, sout := rawudpPair(t, args...)
			var r latResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			lo, typ, hi := r.Results["t_min_us"], r.Results["t_typical_us"], r.Results["t_max_us"]
			if r.Size != latSize || r.Iters != 300 || r.BusyPoll != busy || r.Ack != tc.ack || r.Calls != tc.calls || lo <= 0 || typ < lo || hi < typ ||
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
	for _, args := range [][]string{{"--lat", "-s", "2"}, {"--busy-poll"}, {"--lat", "-n", "1"}, {"-s", "10"}, {"--gso", "65"}, {"-D", "0"}, {"-p", "0"}, {"a", "b"}, {"--gso", "20", "-s", "4112"}, {"--gso", "0", "--first", "4128"}, {"--first", "10"},
		{"--ack"}, {"--lat", "--ack", "-s", "19"}, {"--calls"}, {"--work", "--lat"}, {"--work", "--gso", "0"}} {
		out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errb, args...); code != cli.ExitUsage || !strings.Contains(errb.String(), "roce help rawudp") {
			t.Errorf("%v: exit %d, %q", args, code, errb.String())
		}
	}
}

// TestPlacer checks --work's receiver on datagrams sealed by its sender:
// a run of two middle packets and a first packet land one payload after
// the other; a datagram with a changed byte or too short is counted, not
// placed.
func TestPlacer(t *testing.T) {
	const size, first = 64, 80
	run := make([]byte, 2*size)
	head := make([]byte, first)
	for i := range run {
		run[i] = byte(i)
	}
	for i := range head {
		head[i] = byte(200 + i)
	}
	seal(run, size)
	seal(head, first)
	var p placer
	p.place(run, size, first)
	p.place(head, size, first)
	want := append(append(slices.Clone(run[12:60]), run[76:124]...), head[28:76]...)
	if p.bad != 0 || p.off != len(want) || !bytes.Equal(p.region[:p.off], want) {
		t.Fatalf("placed %d bytes (%d bad): %x, want %x", p.off, p.bad, p.region[:p.off], want)
	}
	run[20] ^= 1
	p.place(run[:size], size, first)
	p.place(run[:10], size, first)
	if p.bad != 2 || p.off != len(want) {
		t.Errorf("a changed and a short datagram: %d bad, %d bytes placed", p.bad, p.off)
	}
}
