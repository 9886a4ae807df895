package rsocket

import (
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
	w := rec.stop()
	if len(w) != 17 {
		ops := make([]bth.Opcode, len(w))
		for i := range w {
			ops[i] = w[i].op
		}
		t.Fatalf("%d WRITE packets sent (%v), want 17: 16 of 65,532 bytes and one of 4", len(w), ops)
	}
	for i := 1; i < 16; i++ {
		if w[i].size != mid {
			t.Errorf("packet %d (%v) is %d bytes, want %d as a middle one", i, w[i].op, w[i].size, mid)
		}
	}
	if w[15].op != bth.RCWriteLastImm || w[16].op != bth.RCWriteOnlyImm ||
		w[16].size != bth.BTHLen+bth.RETHLen+bth.ImmDtLen+4+bth.ICRCLen {
		t.Errorf("last two packets: %v of %d bytes, %v of %d; want %v of %d, %v of 4 bytes' payload",
			w[15].op, w[15].size, w[16].op, w[16].size, bth.Opcode(bth.RCWriteLastImm), mid, bth.Opcode(bth.RCWriteOnlyImm))
	}
	if w[15].call != w[16].call {
		t.Error("the 4-byte message went in a later send than the message before it")
	}
}

// sendRecorder notes the RC WRITE packets a transport sends between
// start and stop: opcode, size and which Send call took them.
type sendRecorder struct {
	transport.Transport
	mu    sync.Mutex
	on    bool
	calls int
	sent  []sentWrite
	seen  map[uint32]bool // PSNs recorded: a packet sent again (a loss probe on a slow host) is not
}

type sentWrite struct {
	op         bth.Opcode
	size, call int
}

func (r *sendRecorder) SendsPayload() bool { return transport.SendsPayload(r.Transport) }

func (r *sendRecorder) Send(pkts []transport.Packet) error {
	r.mu.Lock()
	if r.on {
		r.calls++
		for i := range pkts {
			switch op := bth.Opcode(pkts[i].Data[0]); op {
			case bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm, bth.RCWriteOnlyImm:
				psn := uint32(bth.BTH(pkts[i].Data).PSN())
				if r.seen == nil {
					r.seen = map[uint32]bool{}
				}
				if !r.seen[psn] {
					r.seen[psn] = true
					r.sent = append(r.sent, sentWrite{op, pkts[i].Len(), r.calls})
				}
			}
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

func (r *sendRecorder) stop() []sentWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.sent
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
