package rsocket

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// waitStats waits until c's stats satisfy ok, failing the test after 5 s.
func waitStats(t *testing.T, c *PacketConn, what string, ok func(PacketStats) bool) {
	t.Helper()
	for range 500 {
		if ok(c.Stats()) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: stats %+v", what, c.Stats())
}

// TestPacketHostileUDP sends malformed datagrams to a datagram rsocket's
// UDP socket: each is counted and dropped; a good one after them is read,
// and answered with a control message naming the rsocket's QPN.
func TestPacketHostileUDP(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	s := listenPacketT(t, h.b, h.addrB)
	raw, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	hdr := func(op uint8, qpn uint32) []byte {
		b := make([]byte, dsUDPHdrLen6)
		return b[:(&udpHeader{op: op, qpn: qpn, addr: h.addrA}).put(b)]
	}
	v6 := make([]byte, dsUDPHdrLen6)
	(&udpHeader{op: opData, qpn: 99, addr: netip.IPv6Loopback()}).put(v6)
	badTag, badVersion := hdr(opData, 99), hdr(opData, 99)
	badTag[0]++
	badVersion[4] = 5
	for _, b := range [][]byte{
		{0x55, 0x55}, badTag, badVersion, v6, hdr(3, 99), append(hdr(opData, 99), make([]byte, dsSlot)...), // bad header
		hdr(opData, 0), hdr(opCtrl, 1), // reserved QPNs
	} {
		if _, err := raw.WriteToUDPAddrPort(b, s.local); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, s, "after 8 malformed datagrams", func(st PacketStats) bool { return st.BadHeader == 6 && st.UnknownSender == 2 })
	if _, err := raw.WriteToUDPAddrPort(append(hdr(opData, 99), "good"...), s.local); err != nil {
		t.Fatal(err)
	}
	got, from := readWithin(t, s, 5*time.Second)
	if string(got) != "good" || from != raw.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Fatalf("read %q from %v, want \"good\" from %v", got, from, raw.LocalAddr())
	}
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _, err := raw.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("no control message: %v", err)
	}
	want := make([]byte, dsUDPHdrLen6)
	want = want[:(&udpHeader{op: opCtrl, qpn: s.ep.qp.QPN(), addr: h.addrB}).put(want)]
	if !bytes.Equal(buf[:n], want) {
		t.Fatalf("control message %x, want %x", buf[:n], want)
	}
	if st := s.Stats(); st.Received != 1 {
		t.Fatalf("stats %+v: want one datagram received", st)
	}
}

// rawUD is a UD QP of a test's own, sending whatever it is given.
type rawUD struct {
	qp  verbs.QP
	ah  verbs.AH
	cq  verbs.CQ
	mr  verbs.MR
	buf []byte
}

func newRawUD(t *testing.T, dev *roce.Device, to netip.Addr) *rawUD {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	r := &rawUD{buf: make([]byte, 4096)}
	if r.cq, err = dev.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if r.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: r.cq, RecvCQ: r.cq, SignalAll: true,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if err = roce.Connect(r.qp, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r.mr, err = pd.RegMR(r.buf, 0); err != nil {
		t.Fatal(err)
	}
	if r.ah, err = pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(to), HopLimit: 64, Port: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.qp.Destroy()
		r.ah.Destroy()
		r.mr.Dereg()
		r.cq.Destroy()
		pd.Dealloc()
	})
	return r
}

// send sends p to QP qpn and waits for its completion.
func (r *rawUD) send(t *testing.T, p []byte, qpn uint32) {
	t.Helper()
	copy(r.buf, p)
	err := r.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, AH: r.ah, RemoteQPN: qpn, RemoteQKey: verbs.DefaultQKey,
		SGL: []verbs.SGE{{Addr: r.mr.Addr(), Length: uint32(len(p)), LKey: r.mr.LKey()}}}})
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for range 500 {
		if r.cq.Poll(wc) == 1 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("raw UD send did not complete")
}

// TestPacketHostileUD sends malformed datagrams to a datagram rsocket's
// UD QP: short ones, bad headers, a header naming another address than
// the packet's, one from a QP other than the one its address uses. Each
// is counted and dropped; a good one after them is read.
func TestPacketHostileUD(t *testing.T) {
	checkNoLeak(t)
	h := udpHosts(t, transport.Faults{})
	a, s := listenPacketT(t, h.a, h.addrA), listenPacketT(t, h.b, h.addrB)
	sendDatagram(t, a, s, []byte("teach s the QPN of a"))
	r := newRawUD(t, h.a, h.addrB)
	qpn := s.ep.qp.QPN()
	hdr := func(from netip.AddrPort) []byte {
		b := make([]byte, dsHdrLen6)
		return b[:putDSHeader(b, from)]
	}
	spoofed := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.9"), 4000)
	for _, p := range [][]byte{{}, {4, 8, 0}, append([]byte{5}, hdr(a.local)[1:]...), append([]byte{4, 24}, hdr(a.local)[2:]...)} {
		r.send(t, p, qpn)
	}
	waitStats(t, s, "after 4 malformed datagrams", func(st PacketStats) bool { return st.BadHeader == 4 })
	r.send(t, append(hdr(spoofed), "spoofed"...), qpn)
	r.send(t, append(hdr(a.local), "not a's QP"...), qpn)
	waitStats(t, s, "after 2 datagrams of the wrong sender", func(st PacketStats) bool { return st.UnknownSender == 2 })
	other := netip.AddrPortFrom(h.addrA, 4001)
	r.send(t, append(hdr(other), "from a new address"...), qpn)
	got, from := readWithin(t, s, 5*time.Second)
	if string(got) != "from a new address" || from != other {
		t.Fatalf("read %q from %v, want the last datagram from %v", got, from, other)
	}
	if st := s.Stats(); st.Received != 2 || st.BadHeader != 4 || st.UnknownSender != 2 {
		t.Fatalf("stats %+v", st)
	}
}
