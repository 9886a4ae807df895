//go:build linux

// Package netnstest makes network namespaces for goroce's tests: a
// namespace of its own with lo up, two joined by a veth pair, packet loss
// on a link with nftables, and running code with its sockets inside one.
// Everything is removed at the test's cleanup. Tests that use it skip
// unless they run as root with iproute2 (and nft, for loss) installed.
// Addresses are 198.18.0.0/15 and 2001:db8::/32, with no route out.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"golang.org/x/sys/unix"
)

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, raw sockets)")
	}
}

// Run runs a command and fails the test if it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

var seq atomic.Int32

// New creates a network namespace with lo up, removed at cleanup, and
// returns its name.
func New(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	name := fmt.Sprintf("goroce-test-%d-%d", os.Getpid(), seq.Add(1))
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Veth makes two namespaces joined by a veth pair: vA with
// 198.18.<subnet>.1/24 and 2001:db8:<subnet>::1/64, vB with .2 and ::2.
func Veth(t testing.TB, subnet byte) (nsA, nsB string) {
	t.Helper()
	nsA, nsB = New(t), New(t)
	Run(t, "ip", "link", "add", "vA", "netns", nsA, "type", "veth", "peer", "name", "vB", "netns", nsB)
	s := strconv.Itoa(int(subnet))
	for _, x := range []struct{ ns, dev, host string }{{nsA, "vA", "1"}, {nsB, "vB", "2"}} {
		Run(t, "ip", "-n", x.ns, "addr", "add", "198.18."+s+"."+x.host+"/24", "dev", x.dev)
		Run(t, "ip", "-n", x.ns, "addr", "add", "2001:db8:"+s+"::"+x.host+"/64", "dev", x.dev, "nodad")
		Run(t, "ip", "-n", x.ns, "link", "set", x.dev, "up")
	}
	return nsA, nsB
}

// Loss drops pct percent of the UDP datagrams to port 4791 that leave dev
// in namespace ns, at the device's egress hook, so that sockets and raw
// (AF_PACKET) senders lose them alike. Dropped reports how many it has
// dropped so far.
func Loss(t testing.TB, ns, dev string, pct int) (dropped func() int) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nftables")
	}
	rules := fmt.Sprintf(`table netdev goroce_loss {
	chain egress {
		type filter hook egress device %q priority 0; policy accept;
		udp dport %d numgen random mod 100 < %d counter drop
	}
}
`, dev, bth.UDPPort, pct)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("nftables egress hook unavailable: %v\n%s", err, out)
	}
	return func() int {
		out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "netdev", "goroce_loss").Output()
		if err != nil {
			t.Fatalf("nft list: %v", err)
		}
		f := strings.Fields(string(out))
		for i := range f {
			if f[i] == "packets" && i+1 < len(f) {
				n, _ := strconv.Atoi(f[i+1])
				return n
			}
		}
		return 0
	}
}

// In runs f on a thread switched into namespace ns: sockets f makes stay
// in it, whichever thread uses them later.
func In(t testing.TB, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("setns: %v", err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with the goroutine.
			t.Errorf("setns back: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// WaitMulticastRoute waits until dev in namespace ns has its IPv6
// multicast route (ff00::/8 in the local table), which the kernel adds
// once it sees the link up, a moment after `ip link set up`: before, a
// send to an IPv6 group fails with ENETUNREACH. It fails the test after
// 10 s.
func WaitMulticastRoute(t testing.TB, ns, dev string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", ns, "-6", "route", "show", "table", "local", "dev", dev).CombinedOutput()
		if err != nil {
			t.Fatalf("ip route: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "ff00::/8") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s has no IPv6 multicast route after 10 s:\n%s", dev, ns, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
