package qp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
)

// connectXCNP is a CNP a ConnectX NIC sent, from BTH to ICRC, as NVIDIA's
// knowledge article "RoCEv2 CNP Packet Format Example" (2018) shows it
// from its capture: opcode 0x81, P_Key 0xFFFF, BECN (0x40), destination
// QP 0xD2, PSN 0, 16 reserved bytes, the ICRC (of that capture's IP
// header, which the article does not show).
var connectXCNP = []byte{
	0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0xe4, 0x2d, 0xad, 0x81,
}

// takeCNPs returns the CNPs among the packets the adversary's goroce sent
// since the last take, and how many others it sent.
func takeCNPs(a *adversary) (cnps []transport.Packet, others int) {
	for _, p := range a.link.take() {
		if len(p.Data) > 0 && bth.Opcode(p.Data[0]) == bth.CNP {
			cnps = append(cnps, p)
		} else {
			others++
		}
	}
	return cnps, others
}

// TestCNPNotificationPoint: a CE-marked request draws a CNP to the peer's
// QP, built as ConnectX builds it, with DSCP 48 and not ECN-capable; CE
// marks within MinTimeBetweenCNPs draw no more; a mode without ECN sends
// none, but counts the marks.
func TestCNPNotificationPoint(t *testing.T) {
	a := newAdversary(t, advOpts{})
	write := func(psn int) *wire { return a.req(bth.RCWriteOnly, psn, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack() }
	a.inject(write(0).withTOS(0x03))
	cnps, others := takeCNPs(a)
	if len(cnps) != 1 || others != 1 {
		t.Fatalf("a CE-marked WRITE drew %d CNPs and %d other packets, want one CNP and the ACK", len(cnps), others)
	}
	c := cnps[0]
	want := bytes.Clone(connectXCNP[:bth.BTHLen+bth.CNPPadLen])
	binary.BigEndian.PutUint32(want[4:], 0x40<<24|advPeerQPN) // the flow's QP in place of the article's 0xD2
	if got := c.Data[:len(c.Data)-bth.ICRCLen]; !bytes.Equal(got, want) || len(c.Data) != len(connectXCNP) {
		t.Errorf("CNP\n% x\nwant (ConnectX's, with the peer's QPN)\n% x", c.Data, want)
	}
	if c.TOS != 48<<2 || c.Dst != advPeer {
		t.Errorf("CNP TOS %#x to %v, want DSCP 48 (%#x), not ECN-capable, to the peer", c.TOS, c.Dst, 48<<2)
	}
	// Within 50 µs, more marks draw nothing; after, one more.
	for i := 1; i < 5; i++ {
		a.clk.Advance(10 * time.Microsecond)
		a.inject(write(i).withTOS(0x03))
	}
	if cnps, _ := takeCNPs(a); len(cnps) != 0 {
		t.Fatalf("%d CNPs within MinTimeBetweenCNPs of the first", len(cnps))
	}
	a.clk.Advance(10 * time.Microsecond)
	a.inject(write(5).withTOS(0x02 | 0x01)) // CE, again
	if cnps, _ := takeCNPs(a); len(cnps) != 1 {
		t.Fatalf("%d CNPs 50 µs after the first, want 1", len(cnps))
	}
	a.inject(write(6).withTOS(0x02)) // ECT(0), not marked
	if cnps, _ := takeCNPs(a); len(cnps) != 0 {
		t.Fatal("a CNP for an ECT(0) packet")
	}
	if ctr := a.qp.Counters(); ctr.NPECNMarked != 6 || ctr.NPCNPSent != 2 {
		t.Errorf("counters %s: want 6 marks, 2 CNPs", &ctr)
	}
	for _, m := range []congestion.Mode{congestion.Off, congestion.Delay} {
		a := newAdversary(t, advOpts{cc: &congestion.Config{Mode: m}})
		a.inject(a.req(bth.RCWriteOnly, 0, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack().withTOS(0x03))
		if cnps, _ := takeCNPs(a); len(cnps) != 0 || a.qp.Counters().NPECNMarked != 1 {
			t.Errorf("mode %v: %d CNPs, %d marks counted; want none sent, the mark counted", m, len(cnps),
				a.qp.Counters().NPECNMarked)
		}
	}
}

// TestCNPReactionPoint: a CNP to a QP starts DCQCN's pacing: with a first
// rate of 8 Mbit/s (1,000 bytes a millisecond) a QP's WRITEs of 1 KiB go
// one by one, a packet time apart, where unpaced they all go at once; a
// mode without DCQCN ignores CNPs.
func TestCNPReactionPoint(t *testing.T) {
	cc := &congestion.Config{Mode: congestion.DCQCN, DCQCN: congestion.DCQCNConfig{RateOnFirstCNP: 8e6, MinDecFac: 100}}
	a := newAdversary(t, advOpts{mtu: bth.MTU1024, cc: cc})
	a.inject(a.req(bth.CNP, 0, 0))
	if ctr := a.qp.Counters(); ctr.RPCNPHandled != 1 || a.qp.Congestion().Rate.Rate != 8e6 {
		t.Fatalf("after a CNP: %s, %+v", &ctr, a.qp.Congestion())
	}
	a.post(a.write(1, 0, 1024), a.write(2, 1024, 1024), a.write(3, 2048, 1024))
	// The burst the pacer allows an idle QP (200 µs, 200 bytes at this
	// rate) is less than a packet: one goes, and the next only after its
	// time at the rate, (1024+12+16+4+28)·8/8e6 s.
	if got := a.sent(); len(got) != 1 {
		t.Fatalf("sent %q at once, want one packet", got)
	}
	per := time.Duration(float64(1024+bth.BTHLen+bth.RETHLen+bth.ICRCLen+28) * 8 / 8e6 * float64(time.Second))
	start := a.clk.Now()
	a.fire() // the pacing timer
	if got, at := a.sent(), a.clk.Now().Sub(start); len(got) != 1 || at > per {
		t.Fatalf("after the pacing timer: sent %q %v after the first, want one more within %v", got, at, per)
	}
	if a.qp.Counters().CCPaced == 0 {
		t.Error("cc_paced not counted")
	}
	for _, m := range []congestion.Mode{congestion.Off, congestion.Delay} {
		a := newAdversary(t, advOpts{cc: &congestion.Config{Mode: m}})
		a.inject(a.req(bth.CNP, 0, 0))
		a.post(a.write(1, 0, 8), a.write(2, 0, 8))
		if got := a.sent(); len(got) != 2 || a.qp.Counters().RPCNPIgnored != 1 {
			t.Errorf("mode %v: sent %q after a CNP, counters %s: want both, the CNP ignored", m, got, ptr(a.qp.Counters()))
		}
	}
}

// TestECT: in a mode with ECN, requests, READ responses and ACKs go out
// ECT(0), with the QP's DSCP; a traffic class that sets ECN bits itself
// keeps them; without ECN nothing is ECN-capable.
func TestECT(t *testing.T) {
	tosOf := func(a *adversary) map[string]uint8 {
		m := map[string]uint8{}
		for _, p := range a.link.take() {
			m[bth.Opcode(p.Data[0]).Info().Operation.String()] = p.TOS
		}
		return m
	}
	for _, c := range []struct {
		mode           congestion.Mode
		tclass         uint8
		data, ack      uint8
		name, dataName string
	}{
		{congestion.Auto, 0, 0x02, 0x02, "auto", "ECT(0)"},
		{congestion.DCQCN, 0xB8, 0xBA, 0xBA, "dcqcn, DSCP 46", "DSCP 46 and ECT(0)"},
		{congestion.Auto, 0x01, 0x01, 0x01, "auto, ECT(1) by traffic class", "ECT(1)"},
		{congestion.Off, 0, 0, 0, "off", "not ECN-capable"},
		{congestion.Delay, 0, 0, 0, "delay", "not ECN-capable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAdversary(t, advOpts{cc: &congestion.Config{Mode: c.mode}})
			a.qp.mu.Lock() // the traffic class the address vector would have given at RTR
			a.qp.attr.AH.TrafficClass = c.tclass
			a.qp.mu.Unlock()
			a.post(a.write(1, 0, 8), a.read(2, 0, 8))
			a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 8))
			a.inject(a.req(bth.RCWriteOnly, 1, 8).rethOf(a.mr.Addr(), a.mr.RKey(), 8).ack())
			got := tosOf(a)
			for op, want := range map[string]uint8{"RDMA_WRITE": c.data, "RDMA_READ_REQUEST": c.data,
				"RDMA_READ_RESPONSE": c.data, "ACKNOWLEDGE": c.ack} {
				if tos, ok := got[op]; !ok || tos != want {
					t.Errorf("%s: TOS %#x (sent: %v), want %#x (%s)", op, tos, ok, want, c.dataName)
				}
			}
		})
	}
}

// TestCNPTshark runs a WRITE stream through a switch port that marks
// every ECN-capable packet: the receiver answers with CNPs, the sender's
// reaction point takes them, and tshark decodes the CNPs the receiver
// recorded (--pcap's Sniff) as RoCEv2 CNPs to the sender's QP, PSN 0,
// DSCP 48 and no ECN (tshark 4.0 shows no BECN field; TestCNPNotificationPoint
// checks the bit against ConnectX's bytes).
func TestCNPTshark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cnp.pcap")
	f, err := os.Create(path)
	must(t, err)
	w, err := pcapfile.NewWriter(f, pcapfile.LinkTypeRaw)
	must(t, err)
	p := newPair(t, pairOpts{wrapB: func(tr transport.Transport) transport.Transport { return transport.Sniff(tr, w) }})
	must(t, p.net.SetPort(addrB, &mem.Port{Rate: 1e9, KMax: 1})) // every ECN-capable packet past an empty queue: CE
	_, _ = streamAll(t, p, []*end{&p.a}, 32, 8192)
	p.poll(&p.a, 32)
	p.drain()
	must(t, w.Flush())
	must(t, f.Close())
	ca, cb := p.a.qp.Counters(), p.b.qp.Counters()
	if cb.NPCNPSent == 0 || ca.RPCNPHandled != cb.NPCNPSent || cb.NPECNMarked < cb.NPCNPSent {
		t.Fatalf("receiver %s\nsender %s\nwant CNPs sent for the marks, each handled", &cb, &ca)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	out, err := exec.Command(tshark, "-r", path, "-Y", "infiniband.bth.opcode == 0x81", "-T", "fields", "-E", "separator=,",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
		"-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	if uint64(len(lines)) != cb.NPCNPSent {
		t.Fatalf("tshark decoded %d CNPs, the receiver sent %d:\n%s", len(lines), cb.NPCNPSent, out)
	}
	want := fmt.Sprintf("129,0x%06x,0,48,0", p.a.qp.QPN())
	for _, l := range lines {
		if l != want {
			t.Errorf("tshark: %s, want %s (opcode, destination QP, PSN, DSCP, ECN)", l, want)
		}
	}
}

// TestCNPNotForACKs: a CE-marked ACK draws no CNP: the mark says nothing
// of the data the QP sends.
func TestCNPNotForACKs(t *testing.T) {
	a := newAdversary(t, advOpts{})
	a.post(a.write(1, 0, 8))
	a.link.take()
	a.inject(a.ackAt(0, bth.ACKSyndrome(bth.NoCredits)).withTOS(0x03))
	if cnps, _ := takeCNPs(a); len(cnps) != 0 || a.qp.Counters().NPECNMarked != 0 {
		t.Errorf("a CE-marked ACK: %d CNPs, counters %s", len(cnps), ptr(a.qp.Counters()))
	}
}
