//go:build linux

package stress

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// soakEnv names the environment variable that selects the long versions:
// a duration (make soak sets 1h), the soak's length.
const soakEnv = "GOROCE_SOAK"

// soakFor returns how long the soak runs: GOROCE_SOAK, or short.
func soakFor(t testing.TB, short time.Duration) time.Duration {
	v := os.Getenv(soakEnv)
	if v == "" {
		return short
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 1h", soakEnv, v)
	}
	return d
}

// long reports whether the long versions run.
func long() bool { return os.Getenv(soakEnv) != "" }

// nextNet numbers the loopback addresses tests take, so that tests (and
// other test binaries, through the process ID) do not share one.
var nextNet atomic.Uint32

// loopbacks returns n fresh loopback addresses, 127.X.Y.1 to 127.X.Y.n,
// where X.Y belong to this test alone.
func loopbacks(n int) []netip.Addr {
	k := nextNet.Add(1)
	x := byte(100 + os.Getpid()%100)
	y := byte(k)
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, x, y, byte(i + 1)})
	}
	return out
}

// freePort returns a UDP port free on every one of addrs.
func freePort(t testing.TB, addrs ...netip.Addr) uint16 {
	t.Helper()
	for range 50 {
		port := uint16(20000 + rand.IntN(30000))
		var open []*net.UDPConn
		ok := true
		for _, a := range addrs {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
			if err != nil {
				ok = false
				break
			}
			open = append(open, c)
		}
		for _, c := range open {
			c.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no UDP port free on all of", addrs)
	return 0
}

// openDev opens a device over UDP on addr:port, whose peers listen on the
// same port; mod, if set, changes the configuration first.
func openDev(t testing.TB, addr netip.Addr, port uint16, mod func(*roce.Config)) *roce.Device {
	t.Helper()
	c := &roce.Config{Link: &roce.UDP{Addr: addr, Port: port, PeerPort: port}}
	if mod != nil {
		mod(c)
	}
	d, err := roce.Open(c)
	if err != nil {
		t.Fatalf("open %v: %v", addr, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// side is one device's half of a test: a PD and a CQ.
type side struct {
	dev *roce.Device
	pd  verbs.PD
	cq  verbs.CQ
}

func newSide(t testing.TB, d *roce.Device, cqe int) *side {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(cqe)
	if err != nil {
		t.Fatal(err)
	}
	return &side{dev: d, pd: pd, cq: cq}
}

// reg registers n bytes with the given rights.
func (s *side) reg(t testing.TB, n int, access verbs.Access) verbs.MR {
	t.Helper()
	m, err := s.pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// qp creates an RC QP on the side's CQ.
func (s *side) qp(t testing.TB, c verbs.QPCap) verbs.QP {
	t.Helper()
	q, err := s.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq, Cap: c})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// gid returns the side's GID.
func (s *side) gid() [16]byte { return verbs.GIDFromAddr(s.dev.Addr()) }

// connect connects qa (on a) and qb (on b) with p, each sending from
// its own random PSN; it returns the PSNs a and b start with.
func connect(t testing.TB, a, b *side, qa, qb verbs.QP, p roce.ConnParams) (psnA, psnB uint32) {
	t.Helper()
	psnA, psnB = rand.Uint32()&0xFFFFFF, rand.Uint32()&0xFFFFFF
	pa, pb := p, p
	pa.PSN, pb.PSN = psnA, psnB
	if err := roce.Connect(qa, &roce.Remote{QPN: qb.QPN(), PSN: psnB, GID: b.gid()}, &pa); err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(qb, &roce.Remote{QPN: qa.QPN(), PSN: psnA, GID: a.gid()}, &pb); err != nil {
		t.Fatal(err)
	}
	return psnA, psnB
}

// state returns q's state.
func state(t testing.TB, q verbs.QP) verbs.QPState {
	t.Helper()
	a, err := q.Query()
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

// waitWC polls cq for one completion for up to d.
func waitWC(t testing.TB, cq verbs.CQ, d time.Duration) (verbs.WC, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			return wc[0], true
		}
		if cq.Wait(ctx) != nil {
			return verbs.WC{}, false
		}
	}
}

// syncMR orders the engine's accesses to m and the test's (mr.MR.Sync).
func syncMR(m verbs.MR) {
	if s, ok := m.(interface{ Sync() }); ok {
		s.Sync()
	}
}

// rss returns the process's resident memory in bytes, from
// /proc/self/statm.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// socketDrops returns the kernel's count of datagrams dropped at the UDP
// sockets bound to ap (their receive buffers were full), from
// /proc/net/udp: the sum over a device's receive paths (roce.UDP.Paths);
// -1 where it cannot tell.
func socketDrops(ap netip.AddrPort) int64 {
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		return -1
	}
	defer f.Close()
	a := ap.Addr().As4()
	// /proc/net/udp prints the address as the host-order uint32.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	sc := bufio.NewScanner(f)
	sum, found := int64(0), false
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 13 && fs[1] == want {
			n, err := strconv.ParseInt(fs[len(fs)-1], 10, 64)
			if err != nil {
				return -1
			}
			sum, found = sum+n, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// slope fits y = a + b·x by least squares and returns b.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// summary logs one line that sums a case up, for RELIABILITY.md.
func summary(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("SUMMARY %s: "+format, append([]any{t.Name()}, args...)...)
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
