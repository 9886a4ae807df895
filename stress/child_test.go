//go:build linux

package stress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// childEnv marks the test binary run as the hostile sender: a process of
// its own, as an attacker is, so that it competes with the devices for the
// machine's CPUs as another program does, not for the Go scheduler's.
const childEnv = "GOROCE_STRESS_ATTACKER"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(attackerMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// floodJob is what the attacker process is told to send. Its sockets
// are the parent's, passed as files 3, 4, ... (the ICRCs of the packets,
// built in the parent, cover their ports).
type floodJob struct {
	Sockets int
	To      netip.AddrPort
	// Packets are sent round-robin, each from socket From[i].
	Packets [][]byte
	From    []int
	For     time.Duration
	// Rate, when positive, paces the sending at so many packets a
	// second; 0 is as fast as the thread goes.
	Rate int
}

// floodResult is what it reports: packets sent, per packet.
type floodResult struct {
	Sent    []int
	Errors  int
	Elapsed time.Duration
}

// attackerMain runs in the attacker process: it reads a floodJob, says
// "ready" once its sockets are open, sends, and writes a floodResult.
func attackerMain(in io.Reader, out io.Writer) int {
	runtime.GOMAXPROCS(1)
	var job floodJob
	if err := json.NewDecoder(in).Decode(&job); err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		return 2
	}
	conns := make([]*net.UDPConn, job.Sockets)
	for i := range conns {
		c, err := net.FilePacketConn(os.NewFile(uintptr(3+i), "socket"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "attacker:", err)
			return 2
		}
		conns[i] = c.(*net.UDPConn)
	}
	fmt.Fprintln(out, "ready")
	res := floodResult{Sent: make([]int, len(job.Packets))}
	start := time.Now()
	end := start.Add(job.For)
	for i := 0; len(job.Packets) > 0; i++ {
		if i%64 == 0 {
			now := time.Now()
			if now.After(end) {
				break
			}
			if job.Rate > 0 {
				if due := start.Add(time.Duration(i) * time.Second / time.Duration(job.Rate)); due.After(now) {
					time.Sleep(due.Sub(now))
				}
			}
		}
		k := i % len(job.Packets)
		if _, err := conns[job.From[k]].WriteToUDPAddrPort(job.Packets[k], job.To); err == nil {
			res.Sent[k]++
		} else if res.Errors++; res.Errors == 1 {
			fmt.Fprintln(os.Stderr, "attacker:", err)
		}
	}
	res.Elapsed = time.Since(start)
	if err := json.NewEncoder(out).Encode(&res); err != nil {
		return 2
	}
	return 0
}

// runAttacker starts the attacker process with job and the sockets of
// socks, and returns once it is ready to send; wait returns its result.
func runAttacker(t testing.TB, job *floodJob, socks []*hostile) (wait func() floodResult) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	job.Sockets = len(socks)
	for _, h := range socks {
		f, err := h.conn.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			cmd.Process.Kill() // by the PID this test started
			cmd.Wait()
		}
	})
	if err := json.NewEncoder(stdin).Encode(job); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the attacker process did not start: %q %v", line, err)
	}
	return func() floodResult {
		var res floodResult
		err := json.NewDecoder(r).Decode(&res)
		done = true
		if werr := cmd.Wait(); err != nil || werr != nil {
			t.Fatalf("the attacker process failed: %v %v", err, werr)
		}
		return res
	}
}
