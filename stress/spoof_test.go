//go:build linux

package stress

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// pairRig is two devices, A and B, and an attacker's address C that can
// pose as either.
type pairRig struct {
	ips  []netip.Addr
	port uint16
	a, b *side
}

func newPairRig(t *testing.T, mod func(*roce.Config)) *pairRig {
	r := &pairRig{ips: loopbacks(3)}
	r.port = freePort(t, r.ips...)
	r.a = newSide(t, openDev(t, r.ips[0], r.port, mod), 4096)
	r.b = newSide(t, openDev(t, r.ips[1], r.port, mod), 4096)
	return r
}

// TestSpoofedNAK: NAKs of every code, spoofed from the peer's address,
// for the PSN before the first an idle requester sent, must not break its
// connection: they answer no request. (One broke it until 02a9444.)
func TestSpoofedNAK(t *testing.T) {
	r := newPairRig(t, nil)
	c := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, qb := r.a.qp(t, c), r.b.qp(t, c)
	psnA, _ := connect(t, r.a, r.b, qa, qb, roce.ConnParams{MTU: bth.MTU1024})
	h := newHostile(t, netip.AddrPortFrom(r.ips[1], 0), netip.AddrPortFrom(r.ips[0], r.port))
	for _, code := range []bth.NAKCode{bth.NAKRemoteAccessError, bth.NAKInvalidRequest, bth.NAKRemoteOpError,
		bth.NAKPSNSequenceError} {
		h.send(h.build(pkt{op: bth.RCAcknowledge, qpn: qa.QPN(), psn: bth.PSN(psnA).Add(bth.PSNMask),
			aeth: &bth.AETHFields{Syndrome: bth.NAKSyndrome(code)}}))
	}
	time.Sleep(200 * time.Millisecond)
	if st := state(t, qa); st != verbs.StateRTS {
		ctr := qa.(*qp.QP).Counters()
		t.Fatalf("a spoofed NAK moved an idle QP to %v (counters %v)", st, ctr.String())
	}
}

// TestSpoofedPSNAhead: requests spoofed from a requester's address with
// PSNs far ahead of the one its responder expects, a few thousand a
// second, must not make the requester send again what was not lost. The
// IBTA (and rxe) answer each, when the last packet taken was in sequence,
// with a PSN sequence error NAK, and the requester goes back N and halves
// its window: 2,000 such packets in a second drew 1,906 NAKs and 90,296
// packets sent again (14 %), with none lost. That stays the default; a
// device exposed to spoofing sets roce.Config.SeqNAKWindow, and then
// drops them in silence.
func TestSpoofedPSNAhead(t *testing.T) {
	r := newPairRig(t, func(c *roce.Config) { c.SeqNAKWindow = 1 << 16 })
	c := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, qb := r.a.qp(t, c), r.b.qp(t, c)
	p := roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 16, MaxDestRDAtomic: 16}
	psnA, _ := connect(t, r.a, r.b, qa, qb, p)
	st := newStream(t, r.a, qa, r.b.reg(t, 4<<20, verbs.LocalWrite|verbs.RemoteWrite), 64<<10, 16, p.MTU)
	victim := netip.AddrPortFrom(r.ips[1], r.port)
	h := newHostile(t, netip.AddrPortFrom(r.ips[0], 0), victim)
	drops0 := socketDrops(victim)
	st.start()
	const n = 2000
	for i := range n {
		now := bth.PSN(psnA).Add(uint32(st.posted.Load()) * st.pkts)
		h.send(h.build(pkt{op: bth.RCWriteOnly, qpn: qb.QPN(), psn: now.Add(1<<21 + uint32(i)), payload: 64,
			reth: &bth.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 64}}))
		time.Sleep(500 * time.Microsecond)
	}
	st.finish()
	drops := socketDrops(victim) - drops0
	ca, cb := qa.(*qp.QP).Counters(), qb.(*qp.QP).Counters()
	t.Logf("requester: %v", ca.String())
	t.Logf("responder: %v; %d datagrams dropped at its socket", cb.String(), drops)
	// Each datagram the kernel dropped (a train of up to 16 packets) may
	// cost one NAK and the packets of the window after it.
	if ca.RcvdSeqErr > uint64(drops) {
		t.Errorf("%d spoofed packets far ahead drew %d sequence NAKs, and %d packets were sent again, "+
			"with %d lost", n, ca.RcvdSeqErr, ca.Retransmits, drops)
	}
	if cb.DropFarPSN > n || cb.DropFarPSN+uint64(drops)*16 < n {
		t.Errorf("the responder counted %d requests far ahead of %d sent (%d datagrams lost)", cb.DropFarPSN, n, drops)
	}
}
