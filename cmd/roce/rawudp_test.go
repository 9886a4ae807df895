package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawudpPair runs a rawudp server on 127.0.0.1 and a client with args
// (and the server's port) against it, and returns what each printed.
func rawudpPair(t *testing.T, args ...string) (client, server string) {
	t.Helper()
	port := strconv.Itoa(freeTCPPort(t))
	var sout, serr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runRawUDP([]string{"-p", port, "--bind", "127.0.0.1"}, &sout, &serr) }()
	args = append(append([]string{"-p", port}, args...), "127.0.0.1")
	var out, errb bytes.Buffer
	var code int
	for try := 0; try < 50; try++ { // the server needs a moment to listen
		out.Reset()
		errb.Reset()
		code = runRawUDP(args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "cannot reach") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("client exit %d: %s", code, errb.String())
	}
	if c := <-done; c != 0 {
		t.Fatalf("server exit %d: %s", c, serr.String())
	}
	return out.String(), sout.String()
}

// TestRawUDP runs the baseline's server and client over loopback, with
// and without GSO, and checks what the client reports: datagrams counted
// by the server, a rate from them.
func TestRawUDP(t *testing.T) {
	for _, tc := range []struct{ gso, first string }{{"15", "0"}, {"0", "0"}, {"15", "4128"}} {
		gso := tc.gso
		t.Run("gso"+gso+"/first"+tc.first, func(t *testing.T) {
			out, sout := rawudpPair(t, "--gso", gso, "--first", tc.first, "-D", "0.3", "--json")
			var r rawudpResult
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
			var r rawudpLatResult
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			lo, typ, hi := r.Results["t_min_us"], r.Results["t_typical_us"], r.Results["t_max_us"]
			if r.Size != rawudpLatSize || r.Iters != 300 || r.BusyPoll != busy || lo <= 0 || typ < lo || hi < typ {
				t.Errorf("implausible result %+v", r)
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
		var out, errb bytes.Buffer
		if code := runRawUDP(args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "roce help rawudp") {
			t.Errorf("%v: exit %d, %q", args, code, errb.String())
		}
	}
}
