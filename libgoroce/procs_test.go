package libgoroce_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
	"github.com/goroce/goroce/uverbs"
)

// procs builds testdata/procs.c.
func procs(t *testing.T) string {
	t.Helper()
	return devicetest.CC(t, "procs", []string{"testdata/procs.c"})
}

// TestProcs runs the modes of testdata/procs.c that check themselves:
// fork after opening the device and before, wild addresses in work
// requests, and a deregistered region's keys.
func TestProcs(t *testing.T) {
	h := devicetest.NewHost(t)
	d := h.Start("goroce0", "127.0.0.1")
	exe := procs(t)
	for _, mode := range []string{"fork-after", "fork-before", "wild", "deregkey"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := h.Run(ctx, exe, mode, "goroce0")
			if r.Err != nil || !strings.Contains(r.Out, "procs "+mode+": ") || strings.Contains(r.Out, "FAIL") {
				t.Fatalf("procs %s: %s", mode, r)
			}
			waitSessions(t, d.Srv, 0)
		})
	}
}

// waitSessions waits until srv has n sessions, or fails t after a few
// seconds.
func waitSessions(t *testing.T, srv *uverbs.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Sessions() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the device has %d sessions, want %d", srv.Sessions(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memViews counts the device's mappings of programs' registered memory
// (the device runs in this process).
func memViews(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:goroce-mem")
}

// TestKillMidTransfer kills a process with SIGKILL while its WRITEs and
// its peer's are in flight: the device ends its session (its QPs gone, so
// the peer's packets find no QP, and its regions unmapped), and the peer
// sees RETRY_EXC_ERR within seconds, as a dead rxe process's peer does.
func TestKillMidTransfer(t *testing.T) {
	h := devicetest.NewHost(t)
	d := h.Start("goroce0", "127.0.0.1")
	exe := procs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memViews(t)
	cmd := h.Command(ctx, exe, "kill", "goroce0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- cmd.Wait()
		pw.Close()
	}()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out []string
	waitLine := func(prefix string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("procs kill ended before %q:\n%s", prefix, strings.Join(out, "\n"))
				}
				out = append(out, l)
				if strings.HasPrefix(l, prefix) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q from procs kill:\n%s", prefix, strings.Join(out, "\n"))
			}
		}
	}
	waitLine("RUNNING")
	if n := d.Srv.Sessions(); n != 2 {
		t.Errorf("%d sessions while both run, want 2", n)
	}
	if n := memViews(t) - base; n != 2 {
		t.Errorf("%d regions mapped while both run, want 2", n)
	}
	noQP := d.Dev.Stats().Engine.DropNoQP
	waitLine("PEER-ERR")
	waitSessions(t, d.Srv, 1)
	if n := memViews(t) - base; n != 1 {
		t.Errorf("%d regions mapped after the kill, want the peer's 1", n)
	}
	if d.Dev.Stats().Engine.DropNoQP == noQP {
		t.Errorf("the peer's packets after the kill found the victim's QP")
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	for l := range lines {
		out = append(out, l)
	}
	err = <-waited
	all := strings.Join(out, "\n")
	if err != nil || !strings.Contains(all, "procs kill: ") || strings.Contains(all, "FAIL") {
		t.Fatalf("procs kill: %v:\n%s", err, all)
	}
	waitSessions(t, d.Srv, 0)
	if n := memViews(t) - base; n != 0 {
		t.Errorf("%d regions mapped after the peer ended", n)
	}
	t.Log(all)
}

// TestSignals runs a program whose plain signal(SIGALRM) handler fires
// every 2 ms during RDMA, then whose SIGINT handler tears down its
// resources when the test interrupts it.
func TestSignals(t *testing.T) {
	h := devicetest.NewHost(t)
	d := h.Start("goroce0", "127.0.0.1")
	exe := procs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := h.Go(ctx, exe, "signals", "goroce0")
	p.WaitFor(t, "READY", 30*time.Second)
	time.Sleep(100 * time.Millisecond)
	pr, err := os.FindProcess(p.Pid())
	if err == nil {
		err = pr.Signal(os.Interrupt)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := p.Wait()
	if r.Err != nil || !strings.Contains(r.Out, "torn down after") || strings.Contains(r.Out, "FAIL") {
		t.Fatalf("procs signals: %s", r)
	}
	waitSessions(t, d.Srv, 0)
	t.Log(strings.TrimSpace(r.Out))
}
