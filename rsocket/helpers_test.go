package rsocket

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/transport/udp"
)

// hosts are two software devices that reach each other, with an agent
// each whose CM timers are short (a lost MAD is retried in milliseconds).
type hosts struct {
	a, b    *roce.Device
	aa, ab  *cm.Agent
	addrA   netip.Addr
	addrB   netip.Addr
	backend string
	// cut, when set, makes the in-memory network lose every packet;
	// mute, every packet one address sends.
	cut  atomic.Bool
	mute atomic.Pointer[netip.Addr]
}

// backend is a way to join two devices.
type backend struct {
	name string
	open func(t testing.TB, f transport.Faults) *hosts
}

// backends are the links the end-to-end tests run over: the in-memory
// network (live mode) and UDP sockets on 127.0.0.1 and 127.0.0.2.
var backends = []backend{{"mem", memHosts}, {"udp", udpHosts}}

func fastCM() *cm.Config { return &cm.Config{ResponseTimeout: 12, PacketLifeTime: 8, MaxRetries: 6} }

func memHosts(t testing.TB, f transport.Faults) *hosts {
	t.Helper()
	return memHostsAt(t, f, netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"))
}

// memHostsAt is memHosts with the devices at a and b.
func memHostsAt(t testing.TB, f transport.Faults, a, b netip.Addr) *hosts {
	t.Helper()
	return memHostsMax(t, f, a, b, 0)
}

// memHostsMax is memHostsAt with devices that hold at most maxQPs queue
// pairs each (0: the default).
func memHostsMax(t testing.TB, f transport.Faults, a, b netip.Addr, maxQPs int) *hosts {
	t.Helper()
	h := &hosts{backend: "mem", addrA: a, addrB: b}
	n := mem.NewNetwork(&mem.Config{Live: true, Faults: f, Seed: 1,
		DropIf: func(src, _ netip.Addr, _ []byte) bool {
			m := h.mute.Load()
			return h.cut.Load() || m != nil && *m == src
		}})
	t.Cleanup(n.Close)
	h.a = openDev(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: h.addrA}, MaxQPs: maxQPs})
	h.b = openDev(t, &roce.Config{Link: &roce.Mem{Network: n, Addr: h.addrB}, MaxQPs: maxQPs})
	h.agents(t)
	return h
}

func udpHosts(t testing.TB, f transport.Faults) *hosts {
	t.Helper()
	return udpHostsBusy(t, f, 0)
}

// udpHostsBusy is udpHosts with the devices in busy-poll mode when busy
// is positive (roce.Config.BusyPoll).
func udpHostsBusy(t testing.TB, f transport.Faults, busy time.Duration) *hosts {
	t.Helper()
	port := freePort(t)
	h := &hosts{backend: "udp", addrA: netip.MustParseAddr("127.0.0.1"), addrB: netip.MustParseAddr("127.0.0.2")}
	if !f.Any() {
		h.a = openDev(t, &roce.Config{Link: &roce.UDP{Addr: h.addrA, Port: port, PeerPort: port}, BusyPoll: busy})
		h.b = openDev(t, &roce.Config{Link: &roce.UDP{Addr: h.addrB, Port: port, PeerPort: port}, BusyPoll: busy})
		h.agents(t)
		return h
	}
	if f != (transport.Faults{Drop: f.Drop}) || busy > 0 {
		t.Fatal("udpHosts: only loss, and no busy polling, on a faulty link")
	}
	for i, addr := range []netip.Addr{h.addrA, h.addrB} {
		u, err := udp.New(&udp.Config{Addr: netip.AddrPortFrom(addr, port), PeerPort: port})
		if err != nil {
			t.Skipf("udp transport: %v", err)
		}
		d := openDev(t, &roce.Config{Transport: newLossyLink(u, f.Drop, uint64(i+1))})
		if i == 0 {
			h.a = d
		} else {
			h.b = d
		}
	}
	h.agents(t)
	return h
}

// lossyLink drops a share of the packets a transport sends, from a seeded
// source. roce.Config.Faults would do it with transport.Faulty, whose Send
// shares one slice between concurrent calls (a data race; see the
// report): this one keeps nothing between calls.
type lossyLink struct {
	transport.Transport
	mu   sync.Mutex
	rng  *rand.Rand
	drop float64
}

func newLossyLink(t transport.Transport, drop float64, seed uint64) *lossyLink {
	return &lossyLink{Transport: t, drop: drop, rng: rand.New(rand.NewPCG(seed, seed))}
}

// SendsPayload says what the wrapped transport says.
func (l *lossyLink) SendsPayload() bool { return transport.SendsPayload(l.Transport) }

func (l *lossyLink) Send(pkts []transport.Packet) error {
	out := make([]transport.Packet, 0, len(pkts))
	l.mu.Lock()
	for _, p := range pkts {
		if l.rng.Float64() >= l.drop {
			out = append(out, p)
		}
	}
	l.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	return l.Transport.Send(out)
}

func (h *hosts) agents(t testing.TB) {
	t.Helper()
	var err error
	if h.aa, err = cm.NewAgent(h.a, fastCM()); err != nil {
		t.Fatal(err)
	}
	if h.ab, err = cm.NewAgent(h.b, fastCM()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.aa.Close()
		h.ab.Close()
	})
}

func openDev(t testing.TB, c *roce.Config) *roce.Device {
	t.Helper()
	d, err := roce.Open(c)
	if err != nil {
		t.Skipf("open device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
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

// pair connects a client on h.a to a listener on h.b (port 7471), with
// the given options on each side (nil: defaults); the test's end closes
// them.
func (h *hosts) pair(t testing.TB, co, so *Options) (client, server *Conn, ln *Listener) {
	t.Helper()
	c, s, ln, err := h.connect(7471, co, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
		ln.Close()
	})
	return c, s, ln
}

// connect connects a client on h.a to a new listener on h.b at port.
func (h *hosts) connect(port uint16, co, so *Options) (client, server *Conn, ln *Listener, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lc := &ListenConfig{}
	if so != nil {
		lc.Options = *so
	}
	lc.Agent = h.ab
	ln, err = lc.Listen(ctx, h.b, netip.AddrPortFrom(h.addrB, port))
	if err != nil {
		return nil, nil, nil, err
	}
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptContext(ctx)
		ch <- res{c, err}
	}()
	d := &Dialer{}
	if co != nil {
		d.Options = *co
	}
	d.Agent = h.aa
	client, err = d.Dial(ctx, h.a, netip.AddrPortFrom(h.addrB, port))
	r := <-ch
	if err == nil {
		err = r.err
	}
	if err != nil {
		if client != nil {
			client.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
		ln.Close()
		return nil, nil, nil, err
	}
	return client, r.c, ln, nil
}

// checkNoLeak fails the test if goroutines started during it are still
// running a while after it ends.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// transportNoFaults is a link that loses nothing.
var transportNoFaults transport.Faults

// writeRead writes want on c and reads it whole on s, and fails the test
// unless both succeed and the bytes match.
func writeRead(t *testing.T, c, s *Conn, want []byte) {
	t.Helper()
	errc := writeAsync(c, want)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFull: %v; equal prefix %d of %d", err, commonPrefix(got, want), len(want))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// writeAsync writes p on c in a goroutine of its own; the channel gets
// Write's error.
func writeAsync(c *Conn, p []byte) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(p)
		errc <- err
	}()
	return errc
}
