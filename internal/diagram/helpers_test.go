package diagram

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/pcapfile"
)

// capturesDir holds the rxe captures the repository's tests share.
const capturesDir = "../../testdata/captures"

// captureDiagram reads one of the rxe captures.
func captureDiagram(tb testing.TB, name string) *Diagram {
	tb.Helper()
	f, err := os.Open(filepath.Join(capturesDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	d, err := FromCapture(f)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	d.Title = name
	return d
}

// allCaptures lists the rxe captures.
func allCaptures(tb testing.TB) []string {
	tb.Helper()
	names, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	if err != nil || len(names) == 0 {
		tb.Fatalf("no captures in %s: %v", capturesDir, err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

// pkt describes a synthetic packet for frame.
type pkt struct {
	src, dst   string // IPv4 addresses
	sport      uint16 // UDP source port; 0 means 4791
	bth        bth.BTHFields
	payload    int
	aeth       bth.AETHFields
	reth       bth.RETHFields
	deth       bth.DETHFields
	mad        []byte // payload of a UD SEND to QP 1
	badICRC    bool
	truncateTo int  // cut the frame to this many bytes
	notRoCE    bool // send to another UDP port, with no ICRC that verifies: another protocol's datagram
	badOpcode  bool // overwrite the opcode with an undefined one
}

// frame builds the Ethernet frame of p, with a right ICRC unless badICRC.
func frame(tb testing.TB, p pkt) []byte {
	tb.Helper()
	payload := p.payload
	if p.mad != nil {
		payload = len(p.mad)
	}
	n := bth.Len(p.bth.Opcode, payload)
	ff := bth.FrameFields{Ethernet: true, Flow: bth.Flow{Src: netip.MustParseAddr(p.src), Dst: netip.MustParseAddr(p.dst),
		SrcPort: p.sport, DstPort: bth.UDPPort, DF: true}}
	if ff.Flow.SrcPort == 0 {
		ff.Flow.SrcPort = bth.UDPPort
	}
	if p.notRoCE {
		ff.Flow.DstPort = 53
	}
	hl := ff.HeaderLen()
	b := make([]byte, hl+n)
	var pk bth.Packet
	pk.Build(b[hl:], &p.bth, payload)
	if pk.AETH != nil {
		pk.AETH.Encode(&p.aeth)
	}
	if pk.RETH != nil {
		pk.RETH.Encode(&p.reth)
	}
	if pk.DETH != nil {
		pk.DETH.Encode(&p.deth)
	}
	copy(pk.Payload, p.mad)
	ff.Flow.Seal(b[hl:])
	if p.badICRC || p.notRoCE {
		b[len(b)-1] ^= 0xFF
	}
	bth.EncodeFrame(b, &ff)
	if p.badOpcode {
		b[hl] = 0xFE // an undefined opcode
	}
	if p.truncateTo > 0 {
		b = b[:p.truncateTo]
	}
	return b
}

// pcapOf writes frames as an Ethernet pcap file, a millisecond apart.
func pcapOf(tb testing.TB, frames ...[]byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := pcapfile.NewWriter(&buf, pcapfile.LinkTypeEthernet)
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	for i, f := range frames {
		if err := w.WritePacket(t0.Add(time.Duration(i)*time.Millisecond), f); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// diagramOf builds the diagram of synthetic packets through a pcap file.
func diagramOf(tb testing.TB, pkts ...pkt) *Diagram {
	tb.Helper()
	frames := make([][]byte, len(pkts))
	for i, p := range pkts {
		frames[i] = frame(tb, p)
	}
	d, err := FromCapture(bytes.NewReader(pcapOf(tb, frames...)))
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// cmMAD encodes a CM message in a MAD.
func cmMAD(tb testing.TB, m mad.Message) []byte {
	tb.Helper()
	b := make([]byte, mad.Len)
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, 0x1234), m, b); err != nil {
		tb.Fatal(err)
	}
	return b
}

// madPkt is a UD SEND to QP 1 carrying m.
func madPkt(src, dst string, m []byte) pkt {
	return pkt{src: src, dst: dst, bth: bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: 1, AckReq: true},
		deth: bth.DETHFields{QKey: bth.GSIQKey, SrcQP: 1}, mad: m}
}

// rc is an RC packet of opcode op from src to dst's QP qp.
func rc(src, dst string, sport uint16, op bth.Opcode, qp uint32, psn bth.PSN, payload int) pkt {
	return pkt{src: src, dst: dst, sport: sport, payload: payload,
		bth: bth.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qp, PSN: psn, AckReq: true}}
}

// ack is an RC ACKNOWLEDGE with syndrome syn.
func ack(src, dst string, sport uint16, qp uint32, psn bth.PSN, syn bth.Syndrome) pkt {
	p := rc(src, dst, sport, bth.RCAcknowledge, qp, psn, 0)
	p.bth.AckReq = false
	p.aeth = bth.AETHFields{Syndrome: syn, MSN: 1}
	return p
}

// bigCapture returns a pcap of about n RoCE packets: RDMA WRITEs of four
// 256-byte packets, each ACKed, and every 100th message lost once, NAKed
// and sent again, as go-back-N does.
func bigCapture(tb testing.TB, n int) []byte {
	tb.Helper()
	frames := make([][]byte, 0, n+8)
	psn := bth.PSN(1000)
	ops := [4]bth.Opcode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteMiddle, bth.RCWriteLast}
	write := func(first bth.PSN) {
		for i, op := range ops {
			p := rc(hostA, hostB, 50000, op, 17, first.Add(uint32(i)), 256)
			p.bth.AckReq = op == bth.RCWriteLast
			frames = append(frames, frame(tb, p))
		}
	}
	for msg := 0; len(frames) < n; msg++ {
		write(psn)
		if msg%100 == 99 {
			frames = append(frames, frame(tb, ack(hostB, hostA, 50000, 18, psn, bth.NAKSyndrome(bth.NAKPSNSequenceError))))
			write(psn)
		}
		psn = psn.Add(4)
		frames = append(frames, frame(tb, ack(hostB, hostA, 50000, 18, psn.Add(^uint32(0)), bth.ACKSyndrome(bth.NoCredits))))
	}
	return pcapOf(tb, frames...)
}
