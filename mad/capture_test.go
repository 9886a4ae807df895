package mad

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
)

// The captures with rdma_cm connection setup (see shared/lab/README.md).
var cmCaptures = []string{"rxe_rping_rdmacm.pcap", "rxe_write_bw_rdmacm.pcap"}

// capturedMAD is one MAD from a capture, with the packet that carried it.
type capturedMAD struct {
	file  string
	index int // frame number, from 1
	flow  bth.Flow
	bth   bth.BTHFields
	deth  bth.DETHFields
	mad   []byte
}

// dataPacket is a non-MAD RoCE packet of a capture.
type dataPacket struct {
	index int
	flow  bth.Flow
	bth   bth.BTHFields
	op    bth.Operation
}

// captureContents holds the MADs and the other RoCE packets of a capture.
type captureContents struct {
	mads []capturedMAD
	data []dataPacket
}

// loadCapture reads a capture of testdata/captures and sorts its RoCE
// packets into MADs (UD SEND Only to QP 1) and the rest.
func loadCapture(tb testing.TB, name string) captureContents {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "captures", name))
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
	var cc captureContents
	for i := 1; i <= 100000; i++ {
		raw, _, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		var fr bth.Frame
		if err := bth.ParseFrame(&fr, raw, bth.LinkEthernet); err != nil {
			if errors.Is(err, bth.ErrNotUDP) {
				continue
			}
			tb.Fatalf("%s frame %d: %v", name, i, err)
		}
		if fr.Flow.DstPort != bth.UDPPort || fr.Truncated {
			continue
		}
		var p bth.Packet
		if err := p.Parse(fr.Payload); err != nil {
			tb.Fatalf("%s frame %d: %v", name, i, err)
		}
		if !fr.Flow.Verify(p.Raw) {
			tb.Fatalf("%s frame %d: bad ICRC", name, i)
		}
		bf := p.BTH.Fields()
		if bf.Opcode == bth.UDSendOnly && bf.DestQP == bth.GSIQPN {
			cc.mads = append(cc.mads, capturedMAD{
				file: name, index: i, flow: fr.Flow, bth: bf, deth: p.DETH.Fields(), mad: p.Payload,
			})
			continue
		}
		cc.data = append(cc.data, dataPacket{index: i, flow: fr.Flow, bth: bf, op: p.Info.Operation})
	}
	return cc
}

// allCaptureMADs returns the MADs of every rdma_cm capture.
func allCaptureMADs(tb testing.TB) []capturedMAD {
	var out []capturedMAD
	for _, name := range cmCaptures {
		out = append(out, loadCapture(tb, name).mads...)
	}
	return out
}

// connection is one rdma_cm connection seen in a capture: the MADs that set
// it up and tore it down, matched by communication IDs.
type connection struct {
	req        *REQ
	reqH       Header
	reqPkt     capturedMAD
	rep        *REP
	repH       Header
	rtu        *RTU
	rtuH       Header
	dreq, drep []capturedMAD
}

func TestCaptureConnections(t *testing.T) {
	tests := []struct {
		file      string
		conns     int
		serviceID uint64
		port      uint16
		active    netip.Addr // the client, which sends the REQ
		passive   netip.Addr
		respRes   uint8 // responder resources and initiator depth rdma_cm asked for
	}{
		{"rxe_rping_rdmacm.pcap", 1, 0x0000000001061c06, 7174, addr("198.18.0.12"), addr("198.18.0.11"), 1},
		{"rxe_write_bw_rdmacm.pcap", 2, 0x0000000001064853, 18515, addr("198.18.0.12"), addr("198.18.0.11"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cc := loadCapture(t, tt.file)
			conns := map[uint32]*connection{} // by the active side's comm ID
			var order []uint32
			for _, cm := range cc.mads {
				// The GSI framing of every MAD.
				if cm.bth.PKey != 0xFFFF || cm.deth.QKey != bth.GSIQKey || cm.deth.SrcQP != bth.GSIQPN || len(cm.mad) != Len {
					t.Errorf("frame %d: P_Key %#x Q_Key %#x source QP %d length %d", cm.index, cm.bth.PKey, cm.deth.QKey, cm.deth.SrcQP, len(cm.mad))
				}
				h, m, err := Decode(cm.mad)
				if err != nil {
					t.Fatalf("frame %d: %v", cm.index, err)
				}
				if h.MgmtClass != ClassCM || h.ClassVersion != CMClassVersion || h.Method != MethodSend || h.Status != 0 {
					t.Errorf("frame %d: header %+v", cm.index, h)
				}
				if m.AttrID() != h.AttrID {
					t.Errorf("frame %d: %s decoded for attribute %s", cm.index, AttrName(m.AttrID()), AttrName(h.AttrID))
				}
				fromActive := cm.flow.Src == tt.active && cm.flow.Dst == tt.passive
				fromPassive := cm.flow.Src == tt.passive && cm.flow.Dst == tt.active
				if !fromActive && !fromPassive {
					t.Fatalf("frame %d: %v -> %v", cm.index, cm.flow.Src, cm.flow.Dst)
				}
				switch m := m.(type) {
				case *REQ:
					if !fromActive {
						t.Errorf("frame %d: REQ from the passive side", cm.index)
					}
					conns[m.LocalCommID] = &connection{req: m, reqH: h, reqPkt: cm}
					order = append(order, m.LocalCommID)
				case *REP:
					c := conns[m.RemoteCommID]
					if c == nil || !fromPassive {
						t.Fatalf("frame %d: REP for unknown comm ID %#x", cm.index, m.RemoteCommID)
					}
					c.rep, c.repH = m, h
				case *RTU:
					c := conns[m.LocalCommID]
					if c == nil || c.rep == nil || m.RemoteCommID != c.rep.LocalCommID || !fromActive {
						t.Fatalf("frame %d: RTU %#x/%#x does not match a REQ and REP", cm.index, m.LocalCommID, m.RemoteCommID)
					}
					c.rtu, c.rtuH = m, h
				case *DREQ:
					// Either side may disconnect first.
					c := findConn(conns, m.LocalCommID, m.RemoteCommID)
					if c == nil {
						t.Fatalf("frame %d: DREQ for unknown comm IDs %#x/%#x", cm.index, m.LocalCommID, m.RemoteCommID)
					}
					// The remote QPN is the receiver's QPN.
					want := c.rep.LocalQPN
					if fromPassive {
						want = c.req.LocalQPN
					}
					if m.RemoteQPN != want {
						t.Errorf("frame %d: DREQ remote QPN %#x, want %#x", cm.index, m.RemoteQPN, want)
					}
					c.dreq = append(c.dreq, cm)
				case *DREP:
					c := findConn(conns, m.LocalCommID, m.RemoteCommID)
					if c == nil {
						t.Fatalf("frame %d: DREP for unknown comm IDs %#x/%#x", cm.index, m.LocalCommID, m.RemoteCommID)
					}
					c.drep = append(c.drep, cm)
				default:
					t.Errorf("frame %d: unexpected %s", cm.index, AttrName(m.AttrID()))
				}
			}
			if len(order) != tt.conns {
				t.Fatalf("%d connections, want %d", len(order), tt.conns)
			}
			qps := map[uint32]bool{}
			passiveChecked := false
			for _, id := range order {
				c := conns[id]
				if checkConnection(t, cc, c, tt.serviceID, tt.port, tt.active, tt.passive, tt.respRes) {
					passiveChecked = true
				}
				qps[c.req.LocalQPN], qps[c.rep.LocalQPN] = true, true
			}
			if !passiveChecked {
				t.Error("the passive side sent no requests: REQ starting PSN unchecked")
			}
			// Every data packet goes to a QP some REQ or REP announced.
			for _, d := range cc.data {
				if !qps[d.bth.DestQP] {
					t.Errorf("frame %d: %v -> QP %#x, not one of the connections'", d.index, d.flow.Src, d.bth.DestQP)
				}
			}
		})
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// findConn finds the connection a DREQ or DREP with these comm IDs (sent by
// either side) belongs to.
func findConn(conns map[uint32]*connection, local, remote uint32) *connection {
	if c := conns[local]; c != nil && c.rep != nil && c.rep.LocalCommID == remote {
		return c
	}
	if c := conns[remote]; c != nil && c.rep != nil && c.rep.LocalCommID == local {
		return c
	}
	return nil
}

// checkConnection checks one connection's MADs against rdma_cm's known
// settings and against the data packets of the capture.
// It reports whether the passive side sent requests on the connection.
func checkConnection(t *testing.T, cc captureContents, c *connection, serviceID uint64, port uint16, active, passive netip.Addr, respRes uint8) bool {
	t.Helper()
	req, rep := c.req, c.rep
	if rep == nil || c.rtu == nil || len(c.dreq) != 1 || len(c.drep) != 1 {
		t.Fatalf("REQ %#x: incomplete exchange: REP %v RTU %v DREQ %d DREP %d", req.LocalCommID, rep != nil, c.rtu != nil, len(c.dreq), len(c.drep))
	}
	if c.repH.TID != c.reqH.TID || c.rtuH.TID != c.reqH.TID {
		t.Errorf("REQ/REP/RTU transaction IDs %#x %#x %#x differ", c.reqH.TID, c.repH.TID, c.rtuH.TID)
	}
	if req.ServiceID != serviceID || ServiceID(PortSpaceTCP, port) != serviceID {
		t.Errorf("service ID %#016x, want %#016x", req.ServiceID, serviceID)
	}
	if ps, p, ok := ParseServiceID(req.ServiceID); !ok || ps != PortSpaceTCP || p != port {
		t.Errorf("ParseServiceID(%#x) = %v %d %v", req.ServiceID, ps, p, ok)
	}
	// What rdma_cm over rxe asks for (cma.c, cm.c): RC, CM timeouts 20,
	// 15 CM retries, retry and RNR retry counts 7, LIDs 0xFFFF, IPv4-mapped
	// GIDs, path MTU 1024 on a 1500-byte link, P_Key 0xFFFF.
	if req.TransportServiceType != TransportRC || req.RemoteCMResponseTimeout != 20 || req.LocalCMResponseTimeout != 20 ||
		req.MaxCMRetries != 15 || req.RetryCount != 7 || req.RNRRetryCount != 7 || req.PathMTU != bth.MTU1024 ||
		req.PKey != 0xFFFF || req.ResponderResources != respRes || req.InitiatorDepth != respRes {
		t.Errorf("REQ settings: %+v", req)
	}
	if Timeout(req.RemoteCMResponseTimeout) != 4294967296*time.Nanosecond {
		t.Errorf("Timeout(20) = %v", Timeout(req.RemoteCMResponseTimeout))
	}
	p := req.Primary
	if p.LocalLID != 0xFFFF || p.RemoteLID != 0xFFFF || p.LocalGID != active.As16() && p.LocalGID != mapped(active) ||
		p.RemoteGID != mapped(passive) || p.HopLimit != 64 {
		t.Errorf("REQ primary path: %+v", p)
	}
	if req.Alternate != (Path{}) || req.SAPSupported {
		t.Errorf("REQ alternate path: %+v", req.Alternate)
	}
	// The REQ travels between the addresses of its GIDs.
	if c.reqPkt.flow.Src != active || c.reqPkt.flow.Dst != passive {
		t.Errorf("REQ sent %v -> %v", c.reqPkt.flow.Src, c.reqPkt.flow.Dst)
	}
	var ch CMAHeader
	if err := ch.Unmarshal(req.PrivateData[:]); err != nil {
		t.Fatalf("CMA header: %v", err)
	}
	if ch.Src != active || ch.Dst != passive || ch.SrcPort == 0 {
		t.Errorf("CMA header %+v", ch)
	}
	if user := req.PrivateData[CMAHeaderLen:]; len(user) != MaxREQUserData {
		t.Errorf("user private data %d bytes", len(user))
	}
	if rep.RemoteCommID != req.LocalCommID || rep.RNRRetryCount != 7 || rep.FailoverAccepted != 0 ||
		rep.ResponderResources != respRes || rep.InitiatorDepth != respRes {
		t.Errorf("REP %+v", rep)
	}
	if req.LocalCAGUID == rep.LocalCAGUID {
		t.Errorf("both sides have CA GUID %#x", req.LocalCAGUID)
	}
	// Data packets: the active side sends to the REP's QPN starting at the
	// REP's starting PSN (cm.c: the REP's starting PSN is the passive
	// side's receive PSN), and the passive side to the REQ's QPN starting
	// at the REQ's.
	firstReq := func(src netip.Addr, qpn uint32) (dataPacket, bool) {
		for _, d := range cc.data {
			if d.flow.Src == src && d.bth.DestQP == qpn && d.op != bth.OpAcknowledge && d.op != bth.OpReadResponse {
				return d, true
			}
		}
		return dataPacket{}, false
	}
	d, ok := firstReq(active, rep.LocalQPN)
	if !ok {
		t.Fatalf("no requests from %v to QP %#x", active, rep.LocalQPN)
	}
	if uint32(d.bth.PSN) != rep.StartingPSN {
		t.Errorf("first request to QP %#x (frame %d) has PSN %#x, REP starting PSN %#x", rep.LocalQPN, d.index, d.bth.PSN, rep.StartingPSN)
	}
	// perftest's data connection only carries the client's WRITEs.
	d, ok = firstReq(passive, req.LocalQPN)
	if ok && uint32(d.bth.PSN) != req.StartingPSN {
		t.Errorf("first request to QP %#x (frame %d) has PSN %#x, REQ starting PSN %#x", req.LocalQPN, d.index, d.bth.PSN, req.StartingPSN)
	}
	dreqH, dreqM, _ := Decode(c.dreq[0].mad)
	drepH, drepM, _ := Decode(c.drep[0].mad)
	if dreqH.TID != drepH.TID {
		t.Errorf("DREQ/DREP transaction IDs %#x %#x", dreqH.TID, drepH.TID)
	}
	dq, dp := dreqM.(*DREQ), drepM.(*DREP)
	if dp.LocalCommID != dq.RemoteCommID || dp.RemoteCommID != dq.LocalCommID {
		t.Errorf("DREP %#x/%#x answers DREQ %#x/%#x", dp.LocalCommID, dp.RemoteCommID, dq.LocalCommID, dq.RemoteCommID)
	}
	return ok
}

// mapped returns the IPv4-mapped GID of an IPv4 address.
func mapped(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// TestCaptureRoundTrip re-encodes every captured MAD byte for byte.
func TestCaptureRoundTrip(t *testing.T) {
	mads := allCaptureMADs(t)
	if len(mads) != 15 {
		t.Fatalf("%d MADs in the captures, want 15", len(mads))
	}
	seen := map[uint16]int{}
	for _, cm := range mads {
		h, m, err := Decode(cm.mad)
		if err != nil {
			t.Fatalf("%s frame %d: %v", cm.file, cm.index, err)
		}
		seen[h.AttrID]++
		var b [Len]byte
		if err := Encode(h, m, b[:]); err != nil {
			t.Fatalf("%s frame %d: Encode: %v", cm.file, cm.index, err)
		}
		if !bytes.Equal(b[:], cm.mad) {
			t.Errorf("%s frame %d: %s re-encoded differs\n got %x\nwant %x", cm.file, cm.index, AttrName(h.AttrID), b[:], cm.mad)
		}
		// The concrete type's Unmarshal alone gives the same message.
		m2 := NewMessage(h.AttrID)
		if err := m2.Unmarshal(cm.mad[HeaderLen:]); err != nil || !reflect.DeepEqual(m, m2) {
			t.Errorf("%s frame %d: Unmarshal differs from Decode: %v", cm.file, cm.index, err)
		}
	}
	want := map[uint16]int{AttrREQ: 3, AttrREP: 3, AttrRTU: 3, AttrDREQ: 3, AttrDREP: 3}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("attributes seen %v, want %v", seen, want)
	}
}
