package roce_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// link is how a test joins two devices.
type link struct {
	name string
	open func(t *testing.T) (a, b *roce.Device)
}

var links = []link{
	{"mem", func(t *testing.T) (*roce.Device, *roce.Device) {
		n := mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(n.Close)
		a := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
		b := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.2")}})
		return a, b
	}},
	{"udp", func(t *testing.T) (*roce.Device, *roce.Device) {
		port := freePort(t)
		a := openT(t, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}})
		b := openT(t, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port}})
		return a, b
	}},
}

func openT(t *testing.T, c *roce.Config) *roce.Device {
	t.Helper()
	d, err := roce.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// freePort returns a UDP port free on both 127.0.0.1 and 127.0.0.2.
func freePort(t *testing.T) uint16 {
	for range 20 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err == nil {
			c2.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestEveryOperation runs SEND, SEND with immediate, WRITE, WRITE with
// immediate, READ and both atomics between two devices over each link,
// checking data and completions. One side is traced.
func TestEveryOperation(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			da, db := l.open(t)
			var logBuf bytes.Buffer
			ta := roce.Trace(da, slog.New(slog.NewTextHandler(&logBuf, nil)))
			rocetest.EveryOperation(t, ta, db)
			// The trace narrates the run.
			log := logBuf.String()
			for _, want := range []string{"create RC QP", "modify QP", "RESET -> INIT", "-> RTS", "QP dump:",
				"post RDMA_WRITE len=5000", "SGE(RDMA_WRITE)", "WC: wr_id=9 status=SUCCESS opcode=RDMA_READ",
				"kind=DATA", "kind=SLOW"} {
				if !strings.Contains(log, want) {
					t.Errorf("trace lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

// TestClosedDevice checks that what a closed device refuses says so in
// the terms of Go's network packages: verbs.ErrClosed, which matches
// net.ErrClosed.
func TestClosedDevice(t *testing.T) {
	n := mem.NewNetwork(nil)
	t.Cleanup(n.Close)
	d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = d.AllocPD()
	if !errors.Is(err, verbs.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("AllocPD on a closed device: %v, want verbs.ErrClosed and net.ErrClosed", err)
	}
	_, err = d.CreateCQ(1)
	if !errors.Is(err, verbs.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("CreateCQ on a closed device: %v, want verbs.ErrClosed and net.ErrClosed", err)
	}
}

// TestTraceKeepsDevice checks that tracing goroce's device keeps what it
// offers: the traced device is a *Device of the same engine (the same
// address, counters and Close), Untrace gives back the one Open made, and
// Config.Trace opens a device traced from the start.
func TestTraceKeepsDevice(t *testing.T) {
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	var logA, logB bytes.Buffer
	a := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
	b := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.2")},
		Trace: slog.New(slog.NewTextHandler(&logB, nil))})
	ta, ok := roce.Trace(a, slog.New(slog.NewTextHandler(&logA, nil))).(*roce.Device)
	if !ok {
		t.Fatalf("Trace of a *roce.Device is a %T", roce.Trace(a, nil))
	}
	if ta == a || ta.Addr() != a.Addr() || ta.Name() != a.Name() {
		t.Errorf("traced view %p at %v (%s), device %p at %v (%s)", ta, ta.Addr(), ta.Name(), a, a.Addr(), a.Name())
	}
	if roce.Untrace(ta) != verbs.Device(a) || roce.Untrace(a) != verbs.Device(a) {
		t.Error("Untrace does not give back the device Open made")
	}
	rocetest.EveryOperation(t, ta, b)
	if sa, st := a.Stats(), ta.Stats(); sa.Engine.SentPkts == 0 || sa != st {
		t.Errorf("counters of the device %+v and of its traced view %+v", sa.Engine, st.Engine)
	}
	for name, log := range map[string]string{"Trace": logA.String(), "Config.Trace": logB.String()} {
		if !strings.Contains(log, "create RC QP") || !strings.Contains(log, "status=SUCCESS") {
			t.Errorf("%s: the trace lacks the QP and its completions:\n%s", name, log)
		}
	}
	if err := ta.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logA.String(), "close device goroce:198.18.0.1") {
		t.Error("the traced view's Close is not traced")
	}
	if _, err := a.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("the device after its traced view closed: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("a second Close, through the other view: %v", err)
	}
}

// TestOnClose checks that the functions OnClose arranged run once when
// the device closes, through any view, while the device still works; that
// one stopped does not; and that one arranged too late runs at once.
func TestOnClose(t *testing.T) {
	n := mem.NewNetwork(nil)
	t.Cleanup(n.Close)
	d := openT(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
	var calls []string
	d.OnClose(func() {
		_, err := d.AllocPD()
		calls = append(calls, fmt.Sprintf("first, AllocPD: %v", err))
	})
	stop := d.OnClose(func() { calls = append(calls, "stopped") })
	if !stop() || stop() {
		t.Error("stop does not report the first stop only")
	}
	late := d.OnClose(func() { calls = append(calls, "late") })
	if err := roce.Trace(d, nil).Close(); err != nil {
		t.Fatal(err)
	}
	if late() {
		t.Error("stop after Close reports a stop")
	}
	d.Close()
	slices.Sort(calls)
	if want := []string{"first, AllocPD: <nil>", "late"}; !slices.Equal(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	// On a closed device, f runs at once, in its own goroutine.
	after := make(chan struct{})
	if d.OnClose(func() { close(after) })() {
		t.Error("stop of a function arranged after Close reports a stop")
	}
	select {
	case <-after:
	case <-time.After(5 * time.Second):
		t.Error("a function arranged after Close was not called")
	}
}
