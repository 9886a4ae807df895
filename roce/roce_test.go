package roce_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// link is how a test joins two devices.
type link struct {
	name string
	open func(t *testing.T) (a, b verbs.Device)
}

var links = []link{
	{"mem", func(t *testing.T) (verbs.Device, verbs.Device) {
		n := mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(n.Close)
		a := openT(t, &roce.Config{Transport: "mem", Network: n, Addr: netip.MustParseAddr("198.18.0.1")})
		b := openT(t, &roce.Config{Transport: "mem", Network: n, Addr: netip.MustParseAddr("198.18.0.2")})
		return a, b
	}},
	{"udp", func(t *testing.T) (verbs.Device, verbs.Device) {
		port := freePort(t)
		a := openT(t, &roce.Config{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port})
		b := openT(t, &roce.Config{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port})
		return a, b
	}},
}

func openT(t *testing.T, c *roce.Config) verbs.Device {
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
			da = roce.Trace(da, slog.New(slog.NewTextHandler(&logBuf, nil)))
			rocetest.EveryOperation(t, da, db)
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
	d, err := roce.Open(&roce.Config{Transport: "mem", Network: n, Addr: netip.MustParseAddr("198.18.0.1")})
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
