//go:build hwverbs && cgo && linux

package hwverbs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/verbs"
)

// TestCross runs every RC operation both ways between this process and a
// peer process, each with its own backend: goroce's engine over UDP
// ("soft", on the lab host inside `ip netns exec rxelab`) or libibverbs
// ("hw", kernel rxe in a lab VM). The two exchange QPN, PSN, GID, buffer
// address and rkey over TCP, one JSON object per line; hwverbs/README.md
// has the commands. Without -cross.role it skips.
var (
	crossRole   = flag.String("cross.role", "", "TestCross: this side's backend, soft or hw")
	crossListen = flag.String("cross.listen", "", "TestCross: wait for the peer on this TCP address")
	crossPeer   = flag.String("cross.peer", "", "TestCross: connect to the peer's TCP address")
	crossAddr   = flag.String("cross.addr", "198.18.0.1", "TestCross, soft: the local IP address")
	crossDev    = flag.String("cross.dev", "", "TestCross, hw: the device (default: the first)")
	crossMTU    = flag.Int("cross.mtu", 1024, "TestCross: path MTU")
	crossWait   = flag.Duration("cross.wait", 2*time.Minute, "TestCross: how long to wait for the peer")
)

// crossInfo is what each side tells the other.
type crossInfo struct {
	QPN  uint32
	PSN  uint32
	GID  [16]byte
	Addr uint64
	RKey uint32
	Len  int
	// Bounds: TestCrossMW's owner refuses accesses outside a window
	// (kernel rxe does not).
	Bounds bool `json:",omitempty"`
}

// crossMsg is one line of the exchange.
type crossMsg struct {
	Kind string // info, rts, ready, done, checked
	Info *crossInfo
	Err  string
}

// The layout of each side's 1 MiB buffer, as rocetest.EveryOperation
// uses it.
const (
	crossLen      = 5000 // five 1024-byte packets, or two of 4096
	crossWriteOff = 100000
	crossImmOff   = 200000
	crossReadOff  = 300000
	crossCounter  = 512000
	crossResult   = 600000
)

// crossPattern is the payload of a phase, different each way.
func crossPattern(phase int) []byte {
	b := make([]byte, crossLen)
	for i := range b {
		b[i] = byte(i*31 + phase*7)
	}
	return b
}

type crossLink struct {
	t    *testing.T
	conn net.Conn
	enc  *json.Encoder
	dec  *json.Decoder
}

func (l *crossLink) send(m crossMsg) {
	l.t.Helper()
	l.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := l.enc.Encode(m); err != nil {
		l.t.Fatalf("send %s: %v", m.Kind, err)
	}
}

func (l *crossLink) recv(kind string) crossMsg {
	l.t.Helper()
	l.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	var m crossMsg
	if err := l.dec.Decode(&m); err != nil {
		l.t.Fatalf("waiting for %s: %v", kind, err)
	}
	if m.Kind != kind {
		l.t.Fatalf("got %s, want %s (%s)", m.Kind, kind, m.Err)
	}
	if m.Err != "" {
		l.t.Fatalf("peer at %s: %s", kind, m.Err)
	}
	return m
}

func crossConn(t *testing.T) net.Conn {
	switch {
	case *crossListen != "":
		ln, err := net.Listen("tcp", *crossListen)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(*crossWait))
		t.Logf("waiting for the peer on %v", ln.Addr())
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	case *crossPeer != "":
		deadline := time.Now().Add(*crossWait)
		for {
			c, err := net.DialTimeout("tcp", *crossPeer, 5*time.Second)
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Fatal("TestCross needs -cross.listen or -cross.peer")
	return nil
}

func crossDevice(t *testing.T) (verbs.Device, []byte) {
	switch *crossRole {
	case "soft":
		d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr(*crossAddr)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d, make([]byte, 1<<20)
	case "hw":
		d, err := Open(*crossDev, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		buf, err := Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Free(buf) })
		return d, buf
	}
	t.Fatalf("-cross.role %q: want soft or hw", *crossRole)
	return nil, nil
}

func TestCross(t *testing.T) {
	if *crossRole == "" {
		t.Skip("a two-process test: run with -cross.role and -cross.listen or -cross.peer (see README.md)")
	}
	dev, buf := crossDevice(t)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	gid, err := dev.GID(0)
	if err != nil {
		t.Fatal(err)
	}
	mtu, ok := bth.MTUAtMost(*crossMTU)
	if !ok {
		t.Fatalf("-cross.mtu %d", *crossMTU)
	}
	listener := *crossListen != ""
	me := crossInfo{QPN: qp.QPN(), PSN: 0xFFFFF0, GID: gid, Addr: mr.Addr(), RKey: mr.RKey(), Len: mr.Len()}
	if listener {
		me.PSN = 0xFFFFFA // both sides cross the 24-bit wrap
	}
	conn := crossConn(t)
	defer conn.Close()
	l := &crossLink{t: t, conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}
	l.send(crossMsg{Kind: "info", Info: &me})
	peer := l.recv("info").Info
	t.Logf("%s %s QP %d GID %v <-> peer QP %d GID %v, MTU %v", *crossRole, dev.Name(), me.QPN,
		netip.AddrFrom16(me.GID).Unmap(), peer.QPN, netip.AddrFrom16(peer.GID).Unmap(), mtu)
	err = roce.Connect(qp, &roce.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID},
		&roce.ConnParams{MTU: mtu, PSN: me.PSN, MaxRDAtomic: 4, MaxDestRDAtomic: 4})
	if err != nil {
		t.Fatal(err)
	}
	l.send(crossMsg{Kind: "rts"})
	l.recv("rts")
	x := &crossSide{t: t, l: l, qp: qp, cq: cq, mr: mr, peer: peer}
	for phase := 1; phase <= 2; phase++ {
		if initiator := (phase == 1) != listener; initiator {
			x.initiate(phase)
		} else {
			x.respond(phase)
		}
		t.Logf("phase %d (%s): every operation checked", phase, map[bool]string{true: "we initiate", false: "peer initiates"}[(phase == 1) != listener])
	}
}

type crossSide struct {
	t    *testing.T
	l    *crossLink
	qp   verbs.QP
	cq   verbs.CQ
	mr   verbs.MR
	peer *crossInfo
}

// The operations of a phase and the receives they consume (SEND, SEND
// with immediate, WRITE with immediate go to receive slots 0, 1 and 3).
var crossOps = []verbs.SendWR{
	{Opcode: verbs.OpSend},
	{Opcode: verbs.OpSendImm, Imm: 0xC0FFEE},
	{Opcode: verbs.OpWrite, RemoteAddr: crossWriteOff},
	{Opcode: verbs.OpWriteImm, RemoteAddr: crossImmOff, Imm: 7},
}

// respond prepares the receives and the counter, lets the peer run every
// operation on this side, and checks what arrived.
func (x *crossSide) respond(phase int) {
	t, b := x.t, x.mr.Bytes()
	clear(b)
	binary.NativeEndian.PutUint64(b[crossCounter:], 40)
	for i, op := range crossOps {
		if op.Opcode == verbs.OpWrite {
			continue
		}
		if err := x.qp.PostRecv([]verbs.RecvWR{{ID: 100 + uint64(i),
			SGL: []verbs.SGE{{Addr: x.mr.Addr() + uint64(i)*8192, Length: 8192, LKey: x.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	x.l.send(crossMsg{Kind: "ready"})
	x.l.recv("done")
	err := func() error {
		want := crossPattern(phase)
		for i, op := range crossOps {
			off := int(op.RemoteAddr)
			if op.Opcode != verbs.OpWrite {
				wc := rocetest.Wait(t, x.cq)
				if wc.Status != verbs.Success || wc.ID != 100+uint64(i) || wc.ByteLen != crossLen ||
					op.Imm != 0 && (wc.Flags&verbs.WithImm == 0 || wc.Imm != op.Imm) {
					return fmt.Errorf("%v: receive %v", op.Opcode, &wc)
				}
				if op.Opcode != verbs.OpWriteImm {
					off = i * 8192
				}
			}
			if !bytes.Equal(b[off:off+crossLen], want) {
				return fmt.Errorf("%v: data differs", op.Opcode)
			}
		}
		if got := binary.NativeEndian.Uint64(b[crossCounter:]); got != 99 {
			return fmt.Errorf("the counter is %d, want 99", got)
		}
		return nil
	}()
	m := crossMsg{Kind: "checked"}
	if err != nil {
		m.Err = err.Error()
	}
	x.l.send(m)
	if err != nil {
		t.Fatalf("phase %d: %v", phase, err)
	}
}

// initiate runs every operation on the peer's memory and checks the
// completions, the READ and the atomics' results here.
func (x *crossSide) initiate(phase int) {
	t, b := x.t, x.mr.Bytes()
	clear(b)
	src := crossPattern(phase)
	copy(b, src)
	x.l.recv("ready")
	err := func() error {
		sgl := []verbs.SGE{{Addr: x.mr.Addr(), Length: crossLen, LKey: x.mr.LKey()}}
		for i, wr := range crossOps {
			wr.ID, wr.Flags, wr.SGL, wr.RKey = uint64(i), verbs.Signaled, sgl, x.peer.RKey
			if wr.RemoteAddr != 0 {
				wr.RemoteAddr += x.peer.Addr
			}
			if err := x.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return err
			}
			if wc := rocetest.Wait(t, x.cq); wc.Status != verbs.Success || wc.ID != uint64(i) {
				return fmt.Errorf("%v: %v", wr.Opcode, &wc)
			}
		}
		if err := x.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.OpRead, Flags: verbs.Signaled,
			SGL:        []verbs.SGE{{Addr: x.mr.Addr() + crossReadOff, Length: crossLen, LKey: x.mr.LKey()}},
			RemoteAddr: x.peer.Addr + crossWriteOff, RKey: x.peer.RKey}}); err != nil {
			return err
		}
		if wc := rocetest.Wait(t, x.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCRead {
			return fmt.Errorf("READ: %v", &wc)
		}
		if !bytes.Equal(b[crossReadOff:crossReadOff+crossLen], src) {
			return errors.New("READ: data differs")
		}
		res := []verbs.SGE{{Addr: x.mr.Addr() + crossResult, Length: 8, LKey: x.mr.LKey()}}
		for i, wr := range []verbs.SendWR{
			{Opcode: verbs.OpAtomicFetchAdd, CompareAdd: 2},
			{Opcode: verbs.OpAtomicCmpSwp, CompareAdd: 42, Swap: 99},
		} {
			wr.ID, wr.Flags, wr.SGL, wr.RemoteAddr, wr.RKey = 20+uint64(i), verbs.Signaled, res, x.peer.Addr+crossCounter, x.peer.RKey
			if err := x.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return err
			}
			if wc := rocetest.Wait(t, x.cq); wc.Status != verbs.Success {
				return fmt.Errorf("%v: %v", wr.Opcode, &wc)
			}
			if got, want := binary.NativeEndian.Uint64(b[crossResult:]), []uint64{40, 42}[i]; got != want {
				return fmt.Errorf("%v returned %d, want %d", wr.Opcode, got, want)
			}
		}
		return nil
	}()
	m := crossMsg{Kind: "done"}
	if err != nil {
		m.Err = err.Error()
	}
	x.l.send(m)
	if err != nil {
		t.Fatalf("phase %d: %v", phase, err)
	}
	x.l.recv("checked")
}
