package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/verbs"
)

// The lab's addresses: VM1 (.11) is always the server, VM2 (.12) the client.
var (
	serverAddr = netip.MustParseAddr("198.18.0.11")
	clientAddr = netip.MustParseAddr("198.18.0.12")
)

// roceFrame is what the tests need of one RoCE packet in a capture.
type roceFrame struct {
	src    netip.Addr
	opcode bth.Opcode
	destQP uint32
	psn    uint32
}

// oobCapture is the TCP 18515 exchange of a capture, reassembled, and its
// RoCE packets.
type oobCapture struct {
	name           string
	client, server []byte // the bytes each side sent, in order
	// clientSegs and serverSegs are the payload sizes of the TCP segments
	// each side sent, in sequence order.
	clientSegs, serverSegs []int
	roce                   []roceFrame
}

type tcpSegment struct {
	seq     uint32 // relative to the first data byte
	payload []byte
}

// loadOOBCapture reads testdata/captures/<name>.pcap.
func loadOOBCapture(tb testing.TB, name string) *oobCapture {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "captures", name+".pcap"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	if r.LinkType() != pcapfile.LinkTypeEthernet {
		tb.Fatalf("%s: link type %d", name, r.LinkType())
	}
	c := &oobCapture{name: name}
	var segs [2][]tcpSegment // [0] from the client, [1] from the server
	var isn [2]uint32
	var synSeen [2]bool
	for i := 1; i < 1e6; i++ {
		data, _, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		if seg, fromServer, syn, ok := parseTCP(data); ok {
			side := 0
			if fromServer {
				side = 1
			}
			if syn {
				isn[side], synSeen[side] = seg.seq+1, true
			} else if len(seg.payload) > 0 {
				segs[side] = append(segs[side], seg)
			}
			continue
		}
		var fr bth.Frame
		if err := bth.ParseFrame(&fr, data, bth.LinkEthernet); err != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		var p bth.Packet
		if err := p.Parse(fr.Payload); err != nil {
			tb.Fatalf("%s frame %d: %v", name, i, err)
		}
		c.roce = append(c.roce, roceFrame{
			src: fr.Flow.Src, opcode: p.BTH.Opcode(), destQP: p.BTH.DestQP(), psn: uint32(p.BTH.PSN()),
		})
	}
	for side := range segs {
		if !synSeen[side] {
			tb.Fatalf("%s: no SYN from side %d", name, side)
		}
		stream, sizes := reassemble(tb, name, segs[side], isn[side])
		if side == 0 {
			c.client, c.clientSegs = stream, sizes
		} else {
			c.server, c.serverSegs = stream, sizes
		}
	}
	return c
}

// parseTCP returns the TCP segment in an Ethernet/IPv4 frame to or from
// port 18515.
func parseTCP(b []byte) (seg tcpSegment, fromServer, syn, ok bool) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		return seg, false, false, false
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0F) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ip[9] != 6 || ihl < 20 || total > len(ip) || total < ihl+20 {
		return seg, false, false, false
	}
	tcp := ip[ihl:total]
	doff := int(tcp[12]>>4) * 4
	if doff < 20 || doff > len(tcp) {
		return seg, false, false, false
	}
	sport, dport := binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
	if sport != Port && dport != Port {
		return seg, false, false, false
	}
	seg = tcpSegment{seq: binary.BigEndian.Uint32(tcp[4:]), payload: tcp[doff:]}
	return seg, sport == Port, tcp[13]&0x02 != 0, true
}

// reassemble puts one direction's segments in sequence order, drops
// retransmitted copies, and fails on a gap.
func reassemble(tb testing.TB, name string, segs []tcpSegment, isn uint32) ([]byte, []int) {
	tb.Helper()
	for i := range segs {
		segs[i].seq -= isn
	}
	slices.SortStableFunc(segs, func(a, b tcpSegment) int { return int(int32(a.seq - b.seq)) })
	var out []byte
	var sizes []int
	for _, s := range segs {
		switch end := s.seq + uint32(len(s.payload)); {
		case end <= uint32(len(out)):
			continue // a retransmission of bytes we have
		case s.seq > uint32(len(out)):
			tb.Fatalf("%s: gap in the TCP stream at %d (next segment at %d)", name, len(out), s.seq)
		default:
			out = append(out, s.payload[uint32(len(out))-s.seq:]...)
			sizes = append(sizes, len(s.payload))
		}
	}
	return out, sizes
}

// Message kinds of the scripts.
type msgKind uint8

const (
	kVersion msgKind = iota
	kSys
	kMTU
	kDest   // perftest 108-byte handshake
	kReport // one BW report field (8 bytes with a >= 5.33 peer)
	kDone
	kEntries // pingpong entries, n of them
)

// step is one message of an exchange: who sends it, what it is, how big.
type step struct {
	from Role
	kind msgKind
	size int
}

// op is one call of the perftest session API.
type op uint8

const (
	opVersions op = iota
	opSys
	opMTU
	opHandShake // HandShake of the first local entry
	opDests     // ExchangeDests of the local entries
	opBarrier
	opReports
	opClose
)

// perftestPlans lists the API calls each perftest capture's run made (one QP),
// from perftest v4.5-0.17's main loops.
var perftestPlans = map[string][]op{
	"rxe_write_bw":  {opVersions, opSys, opMTU, opDests, opDests, opBarrier, opBarrier, opReports, opClose},
	"rxe_read_bw":   {opVersions, opSys, opMTU, opDests, opDests, opBarrier, opBarrier, opReports, opClose},
	"rxe_atomic":    {opVersions, opSys, opMTU, opDests, opDests, opBarrier, opBarrier, opReports, opClose},
	"rxe_send_bw":   {opVersions, opSys, opMTU, opDests, opBarrier, opDests, opBarrier, opClose},
	"rxe_send_lat":  {opVersions, opSys, opMTU, opDests, opBarrier, opDests, opBarrier, opClose},
	"rxe_read_lat":  {opVersions, opSys, opMTU, opHandShake, opDests, opDests, opBarrier, opClose},
	"rxe_write_lat": {opVersions, opSys, opMTU, opHandShake, opDests, opDests, opBarrier},
}

// pingpongEntries is the entries per side of each pingpong capture.
var pingpongEntries = map[string]int{
	"rxe_rc_pingpong_send": 1,
	"rxe_uc_pingpong":      1,
	"rxe_ud_pingpong":      1,
	"rxe_srq_pingpong":     SRQEntries,
}

// perftestSteps turns a plan into the messages on the wire, for a peer of
// version >= 5.33 (as in every capture).
func perftestSteps(plan []op) []step {
	var kinds []msgKind
	for _, o := range plan {
		switch o {
		case opVersions:
			kinds = append(kinds, kVersion)
		case opSys:
			kinds = append(kinds, kSys, kSys)
		case opMTU:
			kinds = append(kinds, kMTU)
		case opHandShake, opDests, opBarrier:
			kinds = append(kinds, kDest)
		case opReports:
			kinds = append(kinds, kReport, kReport, kReport, kReport, kReport)
		case opClose:
			kinds = append(kinds, kDest, kDone)
		}
	}
	sizes := map[msgKind]int{kVersion: VersionLen, kSys: SysDataLen, kMTU: MTULen, kDest: PerftestDestLen, kReport: ReportFieldLen, kDone: DoneLen}
	var steps []step
	for _, k := range kinds {
		steps = append(steps, step{Client, k, sizes[k]}, step{Server, k, sizes[k]})
	}
	return steps
}

func pingpongSteps(entries int) []step {
	return []step{{Client, kEntries, entries * DestLen}, {Server, kEntries, entries * DestLen}, {Client, kDone, DoneLen}}
}

// split cuts the two recorded streams into the messages of steps, failing
// unless they fit exactly.
func (c *oobCapture) split(tb testing.TB, steps []step) [][]byte {
	tb.Helper()
	var off [3]int // by Role
	msgs := make([][]byte, len(steps))
	for i, s := range steps {
		src := c.client
		if s.from == Server {
			src = c.server
		}
		if off[s.from]+s.size > len(src) {
			tb.Fatalf("%s: step %d (%v %d bytes) runs past the %v's %d bytes", c.name, i, s.from, s.size, s.from, len(src))
		}
		msgs[i] = src[off[s.from] : off[s.from]+s.size]
		off[s.from] += s.size
	}
	if off[Client] != len(c.client) || off[Server] != len(c.server) {
		tb.Fatalf("%s: the script covers %d/%d client and %d/%d server bytes", c.name, off[Client], len(c.client), off[Server], len(c.server))
	}
	return msgs
}

// decoded holds the values one side sent, as the session API takes them.
type decoded struct {
	sys     SysData
	mtu     bth.MTU
	dests   []PerftestDest // every 108-byte message, in order
	report  BWReport
	entries []Dest
}

// decodeSide parses every message one side sent.
func decodeSide(tb testing.TB, name string, steps []step, msgs [][]byte, from Role) decoded {
	tb.Helper()
	var d decoded
	var sys [8]byte
	nsys := 0
	var report []byte
	for i, s := range steps {
		if s.from != from {
			continue
		}
		m := msgs[i]
		switch s.kind {
		case kVersion:
			v, err := ParseVersion(m)
			if err != nil || v != PerftestVersion {
				tb.Errorf("%s %v version: %q, %v", name, from, v, err)
			}
			if !bytes.Equal(m, append([]byte("6.06"), make([]byte, 12)...)) {
				tb.Errorf("%s %v version bytes % x", name, from, m)
			}
		case kSys:
			copy(sys[4*nsys:], m)
			nsys++
			if nsys == 2 {
				sd, err := ParseSysData(sys[:])
				if err != nil {
					tb.Fatal(err)
				}
				d.sys = sd
			}
		case kMTU:
			mtu, err := ParseMTU(m)
			if err != nil {
				tb.Errorf("%s %v MTU: %v", name, from, err)
			}
			d.mtu = mtu
		case kDest:
			pd, err := ParsePerftestDest(m)
			if err != nil {
				tb.Fatalf("%s %v handshake: %v", name, from, err)
			}
			d.dests = append(d.dests, pd)
		case kReport:
			report = append(report, m...)
		case kDone:
			if err := ParseDone(m); err != nil {
				tb.Errorf("%s %v: %v", name, from, err)
			}
		case kEntries:
			for j := 0; j < len(m); j += DestLen {
				e, err := ParseDest(m[j : j+DestLen])
				if err != nil {
					tb.Fatalf("%s %v entry %d: %v", name, from, j/DestLen, err)
				}
				d.entries = append(d.entries, e)
			}
		}
	}
	if report != nil {
		r, err := ParseBWReport(report, CompatFor(PerftestVersion), false)
		if err != nil {
			tb.Fatalf("%s %v report: %v", name, from, err)
		}
		d.report = r
	}
	return d
}

// isRequest reports whether op starts a transaction (so its PSN is the
// sender's own).
func isRequest(op bth.Opcode) bool {
	switch op.Info().Operation {
	case bth.OpSend, bth.OpWrite, bth.OpReadRequest, bth.OpCompareSwap, bth.OpFetchAdd:
		return true
	}
	return false
}

// checkAgainstRoCE checks announced QPNs and PSNs against the RoCE packets:
// packets to a side's QPN come from the other side, and the first request a
// side sends to the peer QP has the PSN it announced.
func checkAgainstRoCE(t *testing.T, c *oobCapture, client, server []uint32, clientPSN, serverPSN []uint32, serverSends bool) {
	t.Helper()
	if len(c.roce) == 0 {
		t.Fatalf("%s: no RoCE packets", c.name)
	}
	for i := range client {
		var toServer, toClient, reqFromClient, reqFromServer int
		for _, f := range c.roce {
			switch {
			case f.src == clientAddr && f.destQP == server[i]:
				toServer++
				if isRequest(f.opcode) && reqFromClient == 0 {
					reqFromClient++
					if f.psn != clientPSN[i] {
						t.Errorf("%s QP %d: first client request PSN %#06x, announced %#06x", c.name, i, f.psn, clientPSN[i])
					}
				}
			case f.src == serverAddr && f.destQP == client[i]:
				toClient++
				if isRequest(f.opcode) && reqFromServer == 0 {
					reqFromServer++
					if f.psn != serverPSN[i] {
						t.Errorf("%s QP %d: first server request PSN %#06x, announced %#06x", c.name, i, f.psn, serverPSN[i])
					}
				}
			case f.src == clientAddr || f.src == serverAddr:
				if !slices.Contains(server, f.destQP) && !slices.Contains(client, f.destQP) {
					t.Errorf("%s: packet from %v to QP %#x, which neither side announced", c.name, f.src, f.destQP)
				}
			}
		}
		if toServer == 0 || toClient == 0 || reqFromClient == 0 {
			t.Errorf("%s QP %d: %d packets to the server's QP %#x, %d to the client's %#x, %d client requests",
				c.name, i, toServer, server[i], toClient, client[i], reqFromClient)
		}
		if serverSends && reqFromServer == 0 {
			t.Errorf("%s QP %d: the server sent no request", c.name, i)
		}
	}
}

func TestCapturePerftestDecode(t *testing.T) {
	for name, plan := range perftestPlans {
		t.Run(name, func(t *testing.T) {
			c := loadOOBCapture(t, name)
			steps := perftestSteps(plan)
			msgs := c.split(t, steps)
			// perftest writes each message with one write(): the TCP
			// segments must be the messages.
			var want [3][]int
			for _, s := range steps {
				want[s.from] = append(want[s.from], s.size)
			}
			if !slices.Equal(c.clientSegs, want[Client]) || !slices.Equal(c.serverSegs, want[Server]) {
				t.Errorf("segment sizes client %v server %v, script %v / %v", c.clientSegs, c.serverSegs, want[Client], want[Server])
			}
			cl := decodeSide(t, name, steps, msgs, Client)
			sv := decodeSide(t, name, steps, msgs, Server)
			for _, d := range []decoded{cl, sv} {
				if d.sys != DefaultSysData {
					t.Errorf("sys data %+v", d.sys)
				}
				if d.mtu != bth.MTU1024 {
					t.Errorf("MTU %v", d.mtu)
				}
				// Every handshake, barrier and close repeats the one QP's entry.
				for i, pd := range d.dests {
					if pd != d.dests[0] {
						t.Errorf("handshake %d %+v differs from the first %+v", i, pd, d.dests[0])
					}
				}
			}
			c0, s0 := cl.dests[0], sv.dests[0]
			if verbs.AddrFromGID(c0.GID) != clientAddr || verbs.AddrFromGID(s0.GID) != serverAddr {
				t.Errorf("GIDs client %v server %v", verbs.AddrFromGID(c0.GID), verbs.AddrFromGID(s0.GID))
			}
			wantReads := uint16(1)
			if name == "rxe_read_bw" || name == "rxe_atomic" || name == "rxe_read_lat" {
				wantReads = 0x80
			}
			if c0.OutReads != wantReads || s0.OutReads != wantReads {
				t.Errorf("out_reads %#x/%#x, want %#x", c0.OutReads, s0.OutReads, wantReads)
			}
			if c0.LID != 0 || s0.LID != 0 || c0.SRQN != 0 || s0.SRQN != 0 {
				t.Errorf("LID %d/%d SRQN %d/%d, want 0 (RoCE, no XRC)", c0.LID, s0.LID, c0.SRQN, s0.SRQN)
			}
			serverSends := name == "rxe_write_lat" || name == "rxe_send_lat"
			checkAgainstRoCE(t, c, []uint32{c0.QPN}, []uint32{s0.QPN}, []uint32{c0.PSN}, []uint32{s0.PSN}, serverSends)
			if slices.Contains(plan, opReports) {
				r := cl.report
				wantSize := uint64(4096)
				if name == "rxe_atomic" {
					wantSize = 8
				}
				if r.Size != wantSize || r.Iters != 20 {
					t.Errorf("client report size %d iters %d, want %d 20", r.Size, r.Iters, wantSize)
				}
				for _, v := range []float64{r.BWPeak, r.BWAvg, r.MsgRateAvg} {
					if !(v > 0 && v < 1e5) || math.IsInf(v, 0) {
						t.Errorf("client report %+v: implausible rate %v", r, v)
					}
				}
				// A MiB/s figure and the Mpps rate agree: BW = rate * size.
				if got := r.MsgRateAvg * 1e6 * float64(r.Size) / (1 << 20); math.Abs(got-r.BWAvg) > 0.01*r.BWAvg {
					t.Errorf("client report: msg rate %v Mpps * %d B = %v MiB/s, BW avg %v", r.MsgRateAvg, r.Size, got, r.BWAvg)
				}
			}
		})
	}
}

func TestCapturePingpongDecode(t *testing.T) {
	for name, entries := range pingpongEntries {
		t.Run(name, func(t *testing.T) {
			c := loadOOBCapture(t, name)
			steps := pingpongSteps(entries)
			msgs := c.split(t, steps)
			cl := decodeSide(t, name, steps, msgs, Client)
			sv := decodeSide(t, name, steps, msgs, Server)
			if len(cl.entries) != entries || len(sv.entries) != entries {
				t.Fatalf("%d/%d entries, want %d", len(cl.entries), len(sv.entries), entries)
			}
			used := 1
			if entries == SRQEntries {
				used = 2 // ibv_srq_pingpong -q 2
			}
			var cq, sq, cp, sp []uint32
			for i := range entries {
				ce, se := cl.entries[i], sv.entries[i]
				if i >= used {
					if ce != (Dest{}) || se != (Dest{}) {
						t.Errorf("entry %d: %+v / %+v, want zero entries after the used ones", i, ce, se)
					}
					if want := "0000:000000:000000:" + string(bytes.Repeat([]byte("0"), 32)) + "\x00"; string(msgs[0][i*DestLen:(i+1)*DestLen]) != want {
						t.Errorf("entry %d is %q, want the text of a zero entry", i, msgs[0][i*DestLen:(i+1)*DestLen])
					}
					continue
				}
				if verbs.AddrFromGID(ce.GID) != clientAddr || verbs.AddrFromGID(se.GID) != serverAddr {
					t.Errorf("entry %d GIDs %v / %v", i, verbs.AddrFromGID(ce.GID), verbs.AddrFromGID(se.GID))
				}
				if ce.LID != 0 || se.LID != 0 {
					t.Errorf("entry %d LIDs %d / %d", i, ce.LID, se.LID)
				}
				cq, sq = append(cq, ce.QPN), append(sq, se.QPN)
				cp, sp = append(cp, ce.PSN), append(sp, se.PSN)
			}
			checkAgainstRoCE(t, c, cq, sq, cp, sp, true)
		})
	}
}

func TestReassembleRetransmission(t *testing.T) {
	segs := []tcpSegment{
		{seq: 1001 + 4, payload: []byte("efgh")},
		{seq: 1001, payload: []byte("abcd")},
		{seq: 1001 + 2, payload: []byte("cdef")}, // overlaps both
		{seq: 1001 + 4, payload: []byte("efgh")}, // a copy
		{seq: 1001 + 8, payload: []byte("ij")},
	}
	got, sizes := reassemble(t, "synthetic", segs, 1001)
	if string(got) != "abcdefghij" || !slices.Equal(sizes, []int{4, 4, 4, 2}) {
		t.Fatalf("got %q sizes %v", got, sizes)
	}
}

// String names a message kind, for test messages.
func (k msgKind) String() string {
	names := [...]string{"version", "sys", "mtu", "dest", "report", "done", "entries"}
	if int(k) < len(names) {
		return names[k]
	}
	return "kind" + strconv.Itoa(int(k))
}
