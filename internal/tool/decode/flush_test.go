package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// flushCapture records what goroce's engine sends and receives for a
// WRITE, an ATOMIC_WRITE and a FLUSH of each level from one device to
// another, with their empty READ responses, into a pcap file in dir.
func flushCapture(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "flush.pcap")
	n := mem.NewNetwork(&mem.Config{Live: true})
	t.Cleanup(func() { n.Close() })
	open := func(addr, pcap string) verbs.Device {
		d, err := roce.Open(&roce.Config{Link: &roce.Mem{Network: n, Addr: netip.MustParseAddr(addr)}, Pcap: pcap})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	a, b := open("198.18.0.1", path), open("198.18.0.2", "")
	access := verbs.LocalWrite | verbs.RemoteAccess | verbs.FlushGlobal
	side := func(d verbs.Device) (verbs.QP, verbs.CQ, verbs.MR) {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, 4096), access)
		if err != nil {
			t.Fatal(err)
		}
		return qp, cq, m
	}
	qa, cqa, ma := side(a)
	qb, _, mb := side(b)
	ga, _ := a.GID(0)
	gb, _ := b.GID(0)
	pa, pb := &roce.ConnParams{Access: access, PSN: 0x200}, &roce.ConnParams{Access: access, PSN: 0x100}
	if err := roce.Connect(qa, &roce.Remote{QPN: qb.QPN(), PSN: pb.PSN, GID: gb}, pa); err != nil {
		t.Fatal(err)
	}
	if err := roce.Connect(qb, &roce.Remote{QPN: qa.QPN(), PSN: pa.PSN, GID: ga}, pb); err != nil {
		t.Fatal(err)
	}
	for i, wr := range []verbs.SendWR{
		{Opcode: verbs.OpWrite, SGL: []verbs.SGE{{Addr: ma.Addr(), Length: 64, LKey: ma.LKey()}}, RemoteAddr: mb.Addr() + 256},
		{Opcode: verbs.OpAtomicWrite, RemoteAddr: mb.Addr() + 1024, CompareAdd: 0x1122334455667788},
		{Opcode: verbs.OpFlush, RemoteAddr: mb.Addr() + 256, Flush: verbs.FlushWR{Len: 64, Type: verbs.PlaceGlobal}},
		{Opcode: verbs.OpFlush, Flush: verbs.FlushWR{Type: verbs.PlaceGlobal, Level: verbs.FlushMR}},
	} {
		wr.ID, wr.Flags, wr.RKey = uint64(i), verbs.Signaled, mb.RKey()
		if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := rocetest.Wait(t, cqa); wc.Status != verbs.Success {
			t.Fatalf("%v", &wc)
		}
	}
	if got := binary.NativeEndian.Uint64(mb.Bytes()[1024:]); got != 0x1122334455667788 {
		t.Fatalf("ATOMIC_WRITE left %#x", got)
	}
	a.Close() // flushes the capture
	return path
}

// TestFlushCaptureMatchesTshark: roce decode and tshark agree on the
// packets of FLUSH and ATOMIC_WRITE as goroce's engine sends them, and
// on their empty READ responses: the BTH of every packet, and the RETH,
// the FETH and the 8 bytes an ATOMIC_WRITE carries. tshark 4.0
// (Debian 12) knows neither opcode ("Unknown (28)", "(29)") and shows
// what follows their BTH as raw bytes: those bytes are compared with what
// roce decode makes of them. A tshark that dissects them (Wireshark 4.2
// and later) is compared field for field.
func TestFlushCaptureMatchesTshark(t *testing.T) {
	path := flushCapture(t, t.TempDir())
	recs := decodeJSON(t, nil, path)
	ops := map[uint64]int{}
	for _, rec := range recs {
		op, _ := jsonUint(t, rec, "opcode")
		ops[op]++
	}
	if ops[0x1C] != 2 || ops[0x1D] != 1 || ops[0x10] < 3 {
		t.Fatalf("opcodes %v: want two FLUSHes (0x1c), an ATOMIC_WRITE (0x1d) and their READ responses (0x10)", ops)
	}
	text, errs, code := decodeRun(nil, path)
	if code != 0 {
		t.Fatalf("decode: exit %d: %s", code, errs)
	}
	for _, want := range []string{"RC_FLUSH", "FETH sel=1 placement=1", "FETH sel=0 placement=1", "RC_ATOMIC_WRITE"} {
		if !strings.Contains(text, want) {
			t.Errorf("roce decode's text has no %q:\n%s", want, text)
		}
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark is not on PATH")
	}
	ts := runTshark(t, path)
	raw := tsharkVendorBytes(t, path)
	if len(ts) != len(recs) {
		t.Errorf("roce decode has %d RoCE packets, tshark %d", len(recs), len(ts))
	}
	for _, rec := range recs {
		frame, _ := jsonUint(t, rec, "frame")
		row := ts[frame]
		for _, p := range [][2]string{{"infiniband.bth.opcode", "opcode"}, {"infiniband.bth.destqp", "dest_qp"},
			{"infiniband.bth.psn", "psn"}, {"infiniband.bth.a", "ack_req"}, {"infiniband.bth.padcnt", "pad"}} {
			got, _ := jsonUint(t, rec, p[1])
			if want, ok := row[p[0]]; !ok || got != want {
				t.Errorf("frame %d: %s: tshark %d (present %v), roce decode %d", frame, p[0], want, ok, got)
			}
		}
		op, _ := jsonUint(t, rec, "opcode")
		_, dissected := row["infiniband.reth.va"]
		if (op == 0x1C || op == 0x1D) && !dissected {
			compareRaw(t, frame, rec, raw[frame], op)
			continue
		}
		for _, p := range [][3]string{{"infiniband.reth.va", "reth", "va"}, {"infiniband.reth.r_key", "reth", "rkey"},
			{"infiniband.reth.dmalen", "reth", "dma_len"}, {"infiniband.aeth.syndrome", "aeth", "syndrome"},
			{"infiniband.aeth.msn", "aeth", "msn"}, {"infiniband.invariant.crc", "icrc", ""}} {
			want, inTshark := row[p[0]]
			path := []string{p[1], p[2]}
			if p[2] == "" {
				path = path[:1]
			}
			got, inJSON := jsonUint(t, rec, path...)
			if inTshark != inJSON || got != want {
				t.Errorf("frame %d (opcode %#x): %s: tshark %d (present %v), roce decode %d (present %v)", frame, op,
					p[0], want, inTshark, got, inJSON)
			}
		}
	}
}

// tsharkVendorBytes returns, by frame, the bytes tshark shows after a
// BTH it has no dissector for (infiniband.vendor, its last occurrence:
// the whole rest of the packet).
func tsharkVendorBytes(t *testing.T, path string) map[uint64][]byte {
	t.Helper()
	out, err := exec.Command("tshark", "-r", path, "-n", "-Y", "infiniband", "-T", "fields", "-E", "occurrence=l",
		"-e", "frame.number", "-e", "infiniband.vendor").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	m := map[uint64][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 2 || f[1] == "" {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		b, err := hex.DecodeString(strings.ReplaceAll(f[1], ":", ""))
		if err != nil {
			t.Fatalf("frame %s: tshark bytes %q: %v", f[0], f[1], err)
		}
		m[n] = b
	}
	return m
}

// compareRaw checks the bytes tshark shows after the BTH of a FLUSH or
// ATOMIC_WRITE against roce decode's record: the FETH (a FLUSH's), the
// RETH, the 8 bytes of the ATOMIC_WRITE flushCapture sent, and the ICRC.
func compareRaw(t *testing.T, frame uint64, rec map[string]any, b []byte, op uint64) {
	t.Helper()
	var want []byte
	if op == 0x1C {
		sel, _ := jsonUint(t, rec, "feth", "selectivity")
		plt, _ := jsonUint(t, rec, "feth", "placement")
		want = append(want, 0, 0, 0, byte(sel<<4|plt))
	}
	va, _ := jsonUint(t, rec, "reth", "va")
	key, _ := jsonUint(t, rec, "reth", "rkey")
	n, _ := jsonUint(t, rec, "reth", "dma_len")
	want = binary.BigEndian.AppendUint64(want, va)
	want = binary.BigEndian.AppendUint32(want, uint32(key))
	want = binary.BigEndian.AppendUint32(want, uint32(n))
	if op == 0x1D {
		want = binary.NativeEndian.AppendUint64(want, 0x1122334455667788)
	}
	icrc, _ := jsonUint(t, rec, "icrc")
	want = binary.BigEndian.AppendUint32(want, uint32(icrc))
	if !bytes.Equal(b, want) {
		t.Errorf("frame %d (opcode %#x): tshark shows % x after the BTH, roce decode % x", frame, op, b, want)
	}
}
