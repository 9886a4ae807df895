package oob

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/verbs"
)

// cmMessage is one 56-byte handshake of perftest -R, as an RC SEND.
type cmMessage struct {
	src  netip.Addr
	data []byte
}

// cmCapture returns the 56-byte SEND payloads of rxe_write_bw_rdmacm.pcap
// (perftest's -R handshakes) and the RoCE packets of the capture.
func cmCapture(tb testing.TB) ([]cmMessage, []roceFrame) {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "captures", "rxe_write_bw_rdmacm.pcap"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var msgs []cmMessage
	var frames []roceFrame
	for i := 0; i < 1e6; i++ {
		data, _, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		var fr bth.Frame
		if bth.ParseFrame(&fr, data, bth.LinkEthernet) != nil || fr.Flow.DstPort != bth.UDPPort {
			continue
		}
		var p bth.Packet
		if err := p.Parse(fr.Payload); err != nil {
			tb.Fatal(err)
		}
		frames = append(frames, roceFrame{src: fr.Flow.Src, opcode: p.BTH.Opcode(), destQP: p.BTH.DestQP(), psn: uint32(p.BTH.PSN())})
		if p.BTH.Opcode() == bth.RCSendOnly && len(p.Payload) == PerftestDestCMLen {
			msgs = append(msgs, cmMessage{src: fr.Flow.Src, data: p.Payload})
		}
	}
	return msgs, frames
}

func cmHandshakes(tb testing.TB) [][]byte {
	msgs, _ := cmCapture(tb)
	var out [][]byte
	for _, m := range msgs {
		out = append(out, m.data)
	}
	return out
}

// TestCapturePerftestCM decodes the binary handshakes perftest -R sends
// over its rdma_cm connection.
func TestCapturePerftestCM(t *testing.T) {
	msgs, frames := cmCapture(t)
	var qpn [2][]uint32
	zeros := 0
	for i, m := range msgs {
		d, gidIndex, err := ParsePerftestDestCM(m.data)
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if d == (PerftestDest{}) && gidIndex == 0 {
			// create_rdma_cm_connection shakes hands twice with my_dest[0]
			// before the QP exists: all zeros.
			zeros++
			continue
		}
		side, want := 0, clientAddr
		if m.src == serverAddr {
			side, want = 1, serverAddr
		}
		if verbs.AddrFromGID(d.GID) != want || gidIndex != 1 || d.OutReads != 1 || d.LID != 0 || d.QPN == 0 || d.RKey == 0 || d.VAddr == 0 {
			t.Errorf("handshake %d from %v: %+v gid index %d", i, m.src, d, gidIndex)
		}
		if !slices.Contains(qpn[side], d.QPN) {
			qpn[side] = append(qpn[side], d.QPN)
		}
		var out [PerftestDestCMLen]byte
		if err := d.EncodeCM(out[:], gidIndex); err != nil {
			t.Fatal(err)
		}
		want2 := slices.Clone(m.data)
		clear(want2[20:24])
		if string(out[:]) != string(want2) {
			t.Errorf("handshake %d: re-encoded % x, want % x", i, out, want2)
		}
	}
	if zeros != 4 || len(msgs)-zeros < 8 {
		t.Errorf("%d handshakes, %d of them zero; want 4 zero ones (2 per side) and at least 8 others", len(msgs), zeros)
	}
	// Each side announced its data QP: the other side's RDMA traffic goes to it.
	for side, qs := range qpn {
		from := serverAddr
		if side == 1 {
			from = clientAddr
		}
		for _, q := range qs {
			n := 0
			for _, f := range frames {
				if f.src == from && f.destQP == q {
					n++
				}
			}
			if n == 0 {
				t.Errorf("no packet from %v to announced QP %#x", from, q)
			}
		}
	}
}
