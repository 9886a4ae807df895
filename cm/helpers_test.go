package cm

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// fastConfig makes the CM's timers short so that retry tests take a
// fraction of a second: REQs and REPs are retried after about 70 ms, and
// five tries last long enough for a handshake on a loaded machine (with
// 17 ms, TestACKTimeout's accept gave up once while other test binaries
// ran).
func fastConfig() *Config {
	return &Config{ResponseTimeout: 14, PacketLifeTime: 8, MaxRetries: 4}
}

// host is one side of a test: a software device and its agent.
type host struct {
	dev   *roce.Device
	agent *Agent
	link  *faultLink
}

// backend makes two hosts that can reach each other.
type backend struct {
	name string
	open func(t testing.TB) (a, b *host)
}

// backends lists the transports the end-to-end tests run over: the
// in-memory network (live mode) and UDP sockets on 127.0.0.1/127.0.0.2.
var backends = []backend{
	{"mem", func(t testing.TB) (*host, *host) { return memPair(t, fastConfig(), fastConfig()) }},
	{"udp", func(t testing.TB) (*host, *host) { return udpPair(t, fastConfig(), fastConfig()) }},
}

// memPair returns two hosts on a live in-memory network, 198.18.0.1 and
// 198.18.0.2, each behind a faultLink.
func memPair(t testing.TB, ca, cb *Config) (*host, *host) {
	t.Helper()
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(n.Close)
	mk := func(addr string, cfg *Config) *host {
		ep, err := n.Endpoint(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		return newHost(t, ep, cfg)
	}
	return mk("198.18.0.1", ca), mk("198.18.0.2", cb)
}

// udpPair returns two hosts on UDP loopback sockets, 127.0.0.1 and
// 127.0.0.2, on a port free on both.
func udpPair(t testing.TB, ca, cb *Config) (*host, *host) {
	t.Helper()
	port := freePort(t)
	mk := func(addr string, cfg *Config) *host {
		d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr(addr), Port: port, PeerPort: port}})
		if err != nil {
			t.Skipf("udp transport: %v", err)
		}
		return newHostDev(t, d, nil, cfg)
	}
	return mk("127.0.0.1", ca), mk("127.0.0.2", cb)
}

func newHost(t testing.TB, tr transport.Transport, cfg *Config) *host {
	t.Helper()
	fl := &faultLink{Transport: tr}
	d, err := roce.Open(&roce.Config{Transport: fl})
	if err != nil {
		t.Fatal(err)
	}
	return newHostDev(t, d, fl, cfg)
}

func newHostDev(t testing.TB, d *roce.Device, fl *faultLink, cfg *Config) *host {
	t.Helper()
	a, err := NewAgent(d, cfg)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	h := &host{dev: d, agent: a, link: fl}
	t.Cleanup(func() {
		a.Close()
		d.Close()
	})
	return h
}

// freePort finds a UDP port free on both 127.0.0.1 and 127.0.0.2.
func freePort(t testing.TB) uint16 {
	t.Helper()
	for range 100 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Skipf("no UDP on loopback: %v", err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err == nil {
			c2.Close()
			return uint16(port)
		}
	}
	t.Skip("no UDP port free on both 127.0.0.1 and 127.0.0.2")
	return 0
}

// faultLink wraps a transport and drops or duplicates chosen MADs on
// their way out, by attribute, deterministically.
type faultLink struct {
	transport.Transport
	mu   sync.Mutex
	drop map[uint16]int // attribute -> how many more to drop
	dup  map[uint16]int // attribute -> how many more to send twice
	sent map[uint16]int // attribute -> MADs that left (not dropped)
	log  [][]byte       // every MAD that left, when recording
	rec  bool
}

// record starts keeping a copy of every MAD sent.
func (f *faultLink) record() {
	f.mu.Lock()
	f.rec = true
	f.mu.Unlock()
}

// recorded returns the MADs sent since record.
func (f *faultLink) recorded() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log
}

// dropNext drops the next n MADs of attribute attr that this side sends.
func (f *faultLink) dropNext(attr uint16, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drop == nil {
		f.drop = map[uint16]int{}
	}
	f.drop[attr] += n
}

// dupNext sends the next n MADs of attribute attr twice.
func (f *faultLink) dupNext(attr uint16, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dup == nil {
		f.dup = map[uint16]int{}
	}
	f.dup[attr] += n
}

// count returns how many MADs of attr left this side.
func (f *faultLink) count(attr uint16) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[attr]
}

// madAttr returns the CM attribute of a RoCE packet that carries a MAD to
// QP 1, and false for other packets.
func madAttr(data []byte) (uint16, bool) {
	var p bth.Packet
	if p.Parse(data) != nil || p.BTH.Opcode() != bth.UDSendOnly || p.BTH.DestQP() != bth.GSIQPN ||
		len(p.Payload) != mad.Len || p.Payload[1] != mad.ClassCM {
		return 0, false
	}
	return uint16(p.Payload[16])<<8 | uint16(p.Payload[17]), true
}

// NotifyUnreachable passes the link's notices on (the embedded interface
// would hide them).
func (f *faultLink) NotifyUnreachable(fn func(transport.Unreachable)) func() {
	if n, ok := f.Transport.(transport.UnreachableNotifier); ok {
		return n.NotifyUnreachable(fn)
	}
	return func() {}
}

func (f *faultLink) Send(pkts []transport.Packet) error {
	out := make([]transport.Packet, 0, len(pkts)+1)
	f.mu.Lock()
	for _, p := range pkts {
		attr, ok := madAttr(p.Data)
		if ok && f.drop[attr] > 0 {
			f.drop[attr]--
			continue
		}
		out = append(out, p)
		if ok && f.rec {
			var bp bth.Packet
			bp.Parse(p.Data)
			f.log = append(f.log, append([]byte(nil), bp.Payload...))
		}
		if ok {
			if f.sent == nil {
				f.sent = map[uint16]int{}
			}
			f.sent[attr]++
			if f.dup[attr] > 0 {
				f.dup[attr]--
				out = append(out, p)
				f.sent[attr]++
			}
		}
	}
	f.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	return f.Transport.Send(out)
}

// ctxT returns a context bounded by d, cancelled at the end of the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitWC waits up to 10 s for one completion on cq.
func waitWC(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// eventually polls cond every millisecond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkNoLeak fails if goroutines started during the test outlive it.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines before the test, %d after:\n%s", before, n, leaked(string(buf)))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// leaked keeps the goroutine dumps that mention goroce.
func leaked(dump string) string {
	var out []string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "goroce") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
