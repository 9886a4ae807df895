package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// smallLink is an in-memory network whose link from addr does not carry
// the READ response of --mode minimal at path MTU 4096, as a 1500-byte
// Ethernet link does not: the scenario's one READ is of 4096 bytes, which
// at path MTU 4096 comes back as one READ RESPONSE ONLY packet of 4096
// bytes, and at 1024 as FIRST, MIDDLE and LAST packets of 1024. (The
// network's filter sees the headers only, not the payload's length.)
func smallLink(addr string) *mem.Network {
	a := netip.MustParseAddr(addr)
	return mem.NewNetwork(&mem.Config{Live: true, DropIf: func(src, dst netip.Addr, pkt []byte) bool {
		return src == a && len(pkt) > 0 && bth.Opcode(pkt[0]) == bth.RCReadResponseOnly
	}})
}

// trapRun runs --mode minimal between two goroce ends over a link that
// carries path MTU 1024, with proto and the client's extra flags; it
// returns the client's standard error and error.
func trapRun(t *testing.T, n *mem.Network, proto []string, client ...string) (string, error) {
	t.Helper()
	port, rport := clitest.FreeTCPPort(t), clitest.LoopbackUDPPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mk := func(bind string, extra ...string) (*flags, *mode) {
		f, m := parseT(t, append(append([]string{"--mode", "minimal", "-p", fmt.Sprint(port), "--transport", "mem",
			"--bind", bind, "--roce-port", fmt.Sprint(rport), "--timeout", "10s"}, proto...), extra...)...)
		f.sc.dev.Net = n
		return f, m
	}
	sf, sm := mk(seedServerAddr)
	out := &lockedBuffer{b: &bytes.Buffer{}}
	errc := make(chan error, 1)
	done := make(chan struct{})
	errOut := &lockedBuffer{b: &bytes.Buffer{}}
	go func() { defer close(done); errc <- serve(ctx, sf, sm, strings.NewReader(""), out, errOut) }()
	waitFor(t, errOut, "listening on", done)
	cf, cm := mk(seedClientAddr, client...)
	server := "127.0.0.1"
	if cf.sc.cm == "rdmacm" {
		server = seedServerAddr
	}
	var cout, cerr bytes.Buffer
	err := dial(ctx, cf, cm, server, strings.NewReader(""), &cout, &cerr)
	cancel()
	<-errc
	return cerr.String(), err
}

// TestPathMTUTrap: a client that asks for path MTU 4096 where the link
// carries 1024 has its 4096-byte READ go unanswered; roce warns while it
// waits and fails with what to try. The default path MTU (1024) goes
// through the same link.
func TestPathMTUTrap(t *testing.T) {
	n := smallLink(seedServerAddr)
	defer n.Close()
	// goroce's TCP exchange: the QPs' ACK timeout is 67 ms, so that the
	// retries run out in well under a second.
	proto := []string{"--proto", "goroce", "--cm", "tcp"}
	start := time.Now()
	stderr, err := trapRun(t, n, proto, "--mtu", "4096")
	if !errors.Is(err, errPathMTU) || !errors.Is(err, verbs.RetryExcErr) {
		t.Fatalf("client: %v (network %+v)", err, n.Stats())
	}
	for _, want := range []string{"path MTU 4096: packets of more than 1024 bytes get no answer",
		"try --mtu 1024, or raise the peer's interface MTU"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("client error lacks %q: %v", want, err)
		}
	}
	for _, want := range []string{"RDMA_READ of 4096 bytes was sent again ", "the path MTU is 4096",
		"try --mtu 1024, or raise the peer's interface MTU"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("client warning lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.HasPrefix(stderr, "roce client: warning: the RDMA_READ of 4096 bytes") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("client warning:\n%s", stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failure took %v to surface", d)
	}
	if stderr, err := trapRun(t, n, proto); err != nil || stderr != "" {
		t.Fatalf("client at the default path MTU: %v\n%s", err, stderr)
	}
}

// TestPathMTUSymptom: what the counters must show for a watched request.
func TestPathMTUSymptom(t *testing.T) {
	for _, c := range []struct {
		read      bool
		rnr, retx uint64
		want      string
	}{
		{true, 0, 0, ""},
		{true, 7, 0, "was answered with 7 RNR NAKs and no data"},
		{true, 1, 0, "was answered with 1 RNR NAK and no data"},
		{false, 7, 0, ""}, // a SEND or WRITE_WITH_IMM may meet RNR NAKs for want of a receive
		{false, 0, 3, "was sent again 3 times without an answer"},
		{true, 0, 2, "was sent again 2 times without an answer"},
		{false, 0, 1, "was sent again 1 time without an answer"},
	} {
		w := &mtuWatch{read: c.read, rnr0: 10, retx0: 20}
		if got := w.symptom(10+c.rnr, 20+c.retx); got != c.want {
			t.Errorf("read %v, %d RNR NAKs, %d sent again: %q, want %q", c.read, c.rnr, c.retx, got, c.want)
		}
	}
}
