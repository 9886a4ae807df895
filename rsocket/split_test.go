package rsocket

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/udp"
)

func TestTailSplit(t *testing.T) {
	s := &stream{gsoMTU: 4096, sqeAvail: 8, sseqNo: 1, sseqComp: 9}
	for _, c := range []struct{ n, want int }{
		{65536, 4},   // the last packet: 4,096 bytes and the immediate
		{65535, 3},   // 4,095 and the immediate: 3 bytes too long
		{65533, 1},   // 4,093
		{65532, 0},   // 4,092 and the immediate: a full packet
		{61441, 0},   // 1 byte in the last packet
		{8192, 4},    // two packets
		{4096, 0},    // one packet: no run to join
		{100, 0},     // one short packet
		{1 << 20, 4}, // what a larger MaxMessage allows
		{4096 + 4092, 0},
		{4096 + 4093, 1},
	} {
		if got := s.tailSplit(c.n); got != c.want {
			t.Errorf("tailSplit(%d) at MTU 4096 = %d, want %d", c.n, got, c.want)
		}
	}
	s.gsoMTU = 1024
	if got := s.tailSplit(65536); got != 4 {
		t.Errorf("tailSplit(65536) at MTU 1024 = %d, want 4", got)
	}
	for _, c := range []struct {
		name string
		s    stream
	}{
		{"a device that segments itself", stream{sqeAvail: 8, sseqNo: 1, sseqComp: 9}},
		{"one send queue entry", stream{gsoMTU: 4096, sqeAvail: 1, sseqNo: 1, sseqComp: 9}},
		{"one sequence credit", stream{gsoMTU: 4096, sqeAvail: 8, sseqNo: 8, sseqComp: 9}},
		{"one sequence credit, wrapping", stream{gsoMTU: 4096, sqeAvail: 8, sseqNo: 0xffff, sseqComp: 0}},
	} {
		if got := c.s.tailSplit(65536); got != 0 {
			t.Errorf("%s: tailSplit(65536) = %d, want 0", c.name, got)
		}
	}
}

// TestWriteFramedForGSO: over the UDP transport a 64 KiB Write leaves as
// a data message whose packets all have a middle packet's size but its
// first (which carries the RETH), followed at once by a one-packet
// message of its last 4 bytes, and the reader gets the 64 KiB whole.
func TestWriteFramedForGSO(t *testing.T) {
	rec := &sendRecorder{}
	h := udpHostsWrapped(t, func(tr transport.Transport) transport.Transport {
		rec.Transport = tr
		return rec
	})
	c, s, _ := h.pair(t, nil, nil)
	want := pattern(64<<10, 3)
	before := c.Stats().MessagesSent
	rec.start()
	writeRead(t, c, s, want)
	if n := c.Stats().MessagesSent - before; n != 2 {
		t.Errorf("the 64 KiB Write sent %d data messages, want 2", n)
	}
	mid := bth.BTHLen + 4096 + bth.ICRCLen
	var ops []string
	var sizes []int
	for _, p := range rec.stop() {
		op := bth.Opcode(p.Data[0])
		switch op {
		case bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm, bth.RCWriteOnlyImm:
			ops, sizes = append(ops, op.String()), append(sizes, p.Len())
		}
	}
	if len(ops) != 17 {
		t.Fatalf("%d WRITE packets sent (%v), want 17: 16 of 65,532 bytes and one of 4", len(ops), ops)
	}
	for i := 1; i < 16; i++ {
		if sizes[i] != mid {
			t.Errorf("packet %d (%s) is %d bytes, want %d as a middle one", i, ops[i], sizes[i], mid)
		}
	}
	last, only := bth.Opcode(bth.RCWriteLastImm).String(), bth.Opcode(bth.RCWriteOnlyImm).String()
	if ops[15] != last || ops[16] != only || sizes[16] != bth.BTHLen+bth.RETHLen+bth.ImmDtLen+4+bth.ICRCLen {
		t.Errorf("last two packets: %s of %d bytes, %s of %d; want %s of %d, %s of 4 bytes' payload",
			ops[15], sizes[15], ops[16], sizes[16], last, mid, only)
	}
	if !rec.together(15, 16) {
		t.Error("the 4-byte message went in a later send than the message before it")
	}
}

// sendRecorder keeps the RoCE packets a transport sends between start and
// stop, each with the index of its Send call.
type sendRecorder struct {
	transport.Transport
	mu    sync.Mutex
	on    bool
	calls int
	pkts  []transport.Packet
	call  []int
}

func (r *sendRecorder) SendsPayload() bool { return transport.SendsPayload(r.Transport) }

func (r *sendRecorder) Send(pkts []transport.Packet) error {
	r.mu.Lock()
	if r.on {
		r.calls++
		for _, p := range pkts {
			c := p
			c.Data = bytes.Clone(p.Data)
			c.Payload = bytes.Clone(p.Payload)
			r.pkts = append(r.pkts, c)
			r.call = append(r.call, r.calls)
		}
	}
	r.mu.Unlock()
	return r.Transport.Send(pkts)
}

func (r *sendRecorder) start() {
	r.mu.Lock()
	r.on = true
	r.mu.Unlock()
}

func (r *sendRecorder) stop() []transport.Packet {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.pkts
}

// together reports whether the WRITE packets i and j (counted as
// TestWriteFramedForGSO counts them) went in one Send call.
func (r *sendRecorder) together(i, j int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var calls []int
	for k, p := range r.pkts {
		switch bth.Opcode(p.Data[0]) {
		case bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm, bth.RCWriteOnlyImm:
			calls = append(calls, r.call[k])
		}
	}
	return i < len(calls) && j < len(calls) && calls[i] == calls[j]
}

// udpHostsWrapped is udpHosts with the client's (a's) UDP transport
// wrapped by wrap.
func udpHostsWrapped(t testing.TB, wrap func(transport.Transport) transport.Transport) *hosts {
	t.Helper()
	port := freePort(t)
	h := &hosts{backend: "udp", addrA: netip.MustParseAddr("127.0.0.1"), addrB: netip.MustParseAddr("127.0.0.2")}
	u, err := udp.New(&udp.Config{Addr: netip.AddrPortFrom(h.addrA, port), PeerPort: port})
	if err != nil {
		t.Skipf("udp transport: %v", err)
	}
	h.a = openDev(t, &roce.Config{Transport: wrap(u)})
	h.b = openDev(t, &roce.Config{Link: &roce.UDP{Addr: h.addrB, Port: port, PeerPort: port}})
	h.agents(t)
	return h
}
