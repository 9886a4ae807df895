package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/mem"
)

// link is how a test joins two devices.
type link struct {
	name string
	open func(t *testing.T) (a, b roce.Device)
}

var links = []link{
	{"mem", func(t *testing.T) (roce.Device, roce.Device) {
		n := mem.NewNetwork(&mem.Config{Live: true})
		t.Cleanup(n.Close)
		a := openT(t, &roce.Config{Transport: "mem", Network: n, Addr: netip.MustParseAddr("198.18.0.1")})
		b := openT(t, &roce.Config{Transport: "mem", Network: n, Addr: netip.MustParseAddr("198.18.0.2")})
		return a, b
	}},
	{"udp", func(t *testing.T) (roce.Device, roce.Device) {
		port := freePort(t)
		a := openT(t, &roce.Config{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port})
		b := openT(t, &roce.Config{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port})
		return a, b
	}},
}

func openT(t *testing.T, c *roce.Config) roce.Device {
	t.Helper()
	d, err := roce.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// freePort returns a UDP port free on both 127.0.0.1 and 127.0.0.2.
func freePort(t *testing.T) uint16 {
	for range 20 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err == nil {
			c2.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free port")
	return 0
}

// side is one end of a connection made through the public API.
type side struct {
	dev roce.Device
	pd  roce.PD
	cq  roce.CQ
	qp  roce.QP
	buf roce.MR
}

func newSide(t *testing.T, d roce.Device, typ roce.QPType) *side {
	t.Helper()
	s := &side{dev: d}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(&roce.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: roce.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}}); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = s.pd.RegMR(make([]byte, 1<<20), roce.LocalWrite|roce.RemoteAccess); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) remote(t *testing.T, psn uint32) *roce.Remote {
	gid, err := s.dev.GID(0)
	if err != nil {
		t.Fatal(err)
	}
	return &roce.Remote{QPN: s.qp.QPN(), PSN: psn, GID: gid}
}

// wait polls cq until a completion arrives, for up to 10 s.
func wait(t *testing.T, cq roce.CQ) roce.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]roce.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// TestEveryOperation runs SEND, SEND with immediate, WRITE, WRITE with
// immediate, READ and both atomics between two devices over each link,
// checking data and completions. One side is traced.
func TestEveryOperation(t *testing.T) {
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			da, db := l.open(t)
			var logBuf bytes.Buffer
			da = roce.Trace(da, slog.New(slog.NewTextHandler(&logBuf, nil)))
			a, b := newSide(t, da, roce.RC), newSide(t, db, roce.RC)
			p := &roce.ConnParams{MTU: roce.MTU1024, MaxRDAtomic: 4, MaxDestRDAtomic: 4, PSN: 0xFFFFFE}
			if err := roce.Connect(a.qp, b.remote(t, 0xFFFFFE), p); err != nil {
				t.Fatal(err)
			}
			if err := roce.Connect(b.qp, a.remote(t, 0xFFFFFE), p); err != nil {
				t.Fatal(err)
			}
			const n = 5000
			src := a.buf.Bytes()[:n]
			for i := range src {
				src[i] = byte(i * 31)
			}
			rb := b.buf
			sgl := []roce.SGE{{Addr: a.buf.Addr(), Length: n, LKey: a.buf.LKey()}}
			ops := []roce.SendWR{
				{Opcode: roce.OpSend},
				{Opcode: roce.OpSendImm, Imm: 0xC0FFEE},
				{Opcode: roce.OpWrite, RemoteAddr: rb.Addr() + 100000, RKey: rb.RKey()},
				{Opcode: roce.OpWriteImm, RemoteAddr: rb.Addr() + 200000, RKey: rb.RKey(), Imm: 7},
			}
			for i, wr := range ops {
				wr.ID, wr.Flags, wr.SGL = uint64(i), roce.Signaled, sgl
				recv := wr.Opcode != roce.OpWrite
				if recv {
					if err := b.qp.PostRecv([]roce.RecvWR{{ID: 100 + uint64(i),
						SGL: []roce.SGE{{Addr: rb.Addr() + uint64(i)*8192, Length: 8192, LKey: rb.LKey()}}}}); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.qp.PostSend([]roce.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				if wc := wait(t, a.cq); wc.Status != roce.Success || wc.ID != uint64(i) {
					t.Fatalf("%v: %v", wr.Opcode, &wc)
				}
				off := wr.RemoteAddr - rb.Addr()
				if recv {
					wc := wait(t, b.cq)
					if wc.Status != roce.Success || wc.ByteLen != n || wc.ID != 100+uint64(i) {
						t.Fatalf("%v: receive %v", wr.Opcode, &wc)
					}
					if wr.Imm != 0 && (wc.Flags&roce.WithImm == 0 || wc.Imm != wr.Imm) {
						t.Fatalf("%v: immediate %v", wr.Opcode, &wc)
					}
					if wr.Opcode != roce.OpWriteImm {
						off = uint64(i) * 8192
					}
				}
				if !bytes.Equal(rb.Bytes()[off:off+n], src) {
					t.Fatalf("%v: data differs", wr.Opcode)
				}
			}
			// READ back what the WRITE put there.
			dst := a.buf.Bytes()[n : 2*n]
			if err := a.qp.PostSend([]roce.SendWR{{ID: 9, Opcode: roce.OpRead, Flags: roce.Signaled,
				SGL:        []roce.SGE{{Addr: a.buf.Addr() + n, Length: n, LKey: a.buf.LKey()}},
				RemoteAddr: rb.Addr() + 100000, RKey: rb.RKey()}}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a.cq); wc.Status != roce.Success || wc.Opcode != roce.WCRead || !bytes.Equal(dst, src) {
				t.Fatalf("READ: %v", &wc)
			}
			// Atomics on an 8-byte counter.
			binary.NativeEndian.PutUint64(rb.Bytes()[512000:], 40)
			res := []roce.SGE{{Addr: a.buf.Addr() + 600000, Length: 8, LKey: a.buf.LKey()}}
			for _, wr := range []roce.SendWR{
				{Opcode: roce.OpAtomicFetchAdd, CompareAdd: 2},
				{Opcode: roce.OpAtomicCmpSwp, CompareAdd: 42, Swap: 99},
			} {
				wr.Flags, wr.SGL, wr.RemoteAddr, wr.RKey = roce.Signaled, res, rb.Addr()+512000, rb.RKey()
				if err := a.qp.PostSend([]roce.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				if wc := wait(t, a.cq); wc.Status != roce.Success {
					t.Fatalf("%v: %v", wr.Opcode, &wc)
				}
			}
			if got := binary.NativeEndian.Uint64(a.buf.Bytes()[600000:]); got != 42 {
				t.Fatalf("compare-and-swap found %d", got)
			}
			if got := binary.NativeEndian.Uint64(rb.Bytes()[512000:]); got != 99 {
				t.Fatalf("counter is %d", got)
			}
			// The trace narrates the run.
			log := logBuf.String()
			for _, want := range []string{"create RC QP", "modify QP", "RESET -> INIT", "-> RTS", "QP dump:",
				"post RDMA_WRITE len=5000", "SGE(RDMA_WRITE)", "WC: wr_id=9 status=SUCCESS opcode=RDMA_READ",
				"kind=DATA", "kind=SLOW"} {
				if !strings.Contains(log, want) {
					t.Errorf("trace lacks %q:\n%s", want, log)
				}
			}
		})
	}
}
