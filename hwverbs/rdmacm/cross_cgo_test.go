//go:build hwverbs && cgo && linux

package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/verbs"
)

// TestCrossCM connects this process to a peer process over rdma_cm, each
// with its own connection manager: this package on a libibverbs device
// ("hw", kernel rxe in a lab VM) or package cm on goroce's software
// device over UDP ("soft", on the lab host inside its namespace). One
// side listens on an rdma_cm port (-cm.listen), the other dials it
// (-cm.peer), with each side's buffer described in the private data;
// then WRITE, SEND, READ both ways, checked, and the dialler's
// disconnect. Without -cm.role it skips. interop/hwverbs.sh runs it.
var (
	cmRole   = flag.String("cm.role", "", "TestCrossCM: this side's connection manager, hw (rdmacm) or soft (cm)")
	cmListen = flag.String("cm.listen", "", "TestCrossCM: listen on this address and rdma_cm port")
	cmPeer   = flag.String("cm.peer", "", "TestCrossCM: dial the peer's address and rdma_cm port")
	cmAddr   = flag.String("cm.addr", "198.18.0.1", "TestCrossCM, soft: the local IP address")
	cmWait   = flag.Duration("cm.wait", 90*time.Second, "TestCrossCM: how long to wait for the peer")
)

// crossConn is what the test uses of a cm.Conn or a Conn.
type crossConn interface {
	PrivateData() []byte
	Done() <-chan struct{}
	Err() error
	CloseContext(context.Context) error
	Close() error
}

// Offsets of the cross test's regions in each side's buffer (4000 bytes
// each: four packets at path MTU 1024).
const (
	xLen    = 4000
	xWrite  = 4096  // the dialler WRITEs here in the listener's buffer
	xRead   = 8192  // the listener READs the dialler's here
	xBack   = 16384 // the listener WRITEs here in the dialler's buffer
	xRead2  = 24576 // the dialler READs the listener's here
	xMsg    = 32768 // each side's SEND
	xRecv   = 0     // each side's receive
	xMsgLen = 4
)

func TestCrossCM(t *testing.T) {
	if *cmRole == "" {
		t.Skip("no -cm.role")
	}
	if (*cmListen == "") == (*cmPeer == "") {
		t.Fatal("give -cm.listen or -cm.peer")
	}
	noLeak(t)
	var dev verbs.Device
	var hw *hwverbs.Device
	switch *cmRole {
	case "hw":
		var err error
		if hw, err = hwverbs.Open("", nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hw.Close() })
		dev = hw
	case "soft":
		f := &cli.DeviceFlags{Transport: "udp", Bind: *cmAddr, Port: 4791}
		cfg, err := f.Config("")
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.Open(cfg, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		dev = d
	default:
		t.Fatalf("-cm.role %q: hw or soft", *cmRole)
	}
	e := newEP(t, dev, false)
	e.recv(xRecv, 64)
	listener := *cmListen != ""
	if listener {
		copy(e.mr.Bytes()[xRead2:], pattern(4, xLen))
	} else {
		copy(e.mr.Bytes()[xRead:], pattern(2, xLen))
	}
	var c crossConn
	if listener {
		c = crossAccept(t, dev, hw, e)
	} else {
		c = crossDial(t, dev, hw, e)
	}
	r := parseInfo(c.PrivateData())
	if listener {
		crossListener(t, e, r)
	} else {
		crossDialler(t, e, r, c)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end in 10 s")
	}
	if listener && !errors.Is(c.Err(), cm.ErrDisconnected) {
		t.Errorf("listener: Err %v, want the peer's disconnect", c.Err())
	}
	c.Close()
}

func crossAccept(t *testing.T, dev verbs.Device, hw *hwverbs.Device, e *ep) crossConn {
	addr := netip.MustParseAddrPort(*cmListen)
	ctx, cancel := context.WithTimeout(t.Context(), *cmWait)
	defer cancel()
	var c crossConn
	if hw != nil {
		l, err := Listen(ctx, hw, addr, &ListenConfig{OnRequest: func(context.Context, *Request) (*Params, error) {
			return &Params{QP: e.qp, PrivateData: e.info()}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		t.Logf("listening on %v (rdmacm, %s)", l.Addr(), hw.Name())
		conn, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("connected: %+v", conn.Info())
		c = conn
	} else {
		l, err := cm.Listen(ctx, dev, addr, &cm.ListenConfig{OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			return &cm.Params{QP: e.qp, PrivateData: e.info()}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		t.Logf("listening on %v (cm, %s)", l.Addr(), dev.Name())
		conn, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("connected: %+v", conn.Info())
		c = conn
	}
	return c
}

// crossDial dials the peer until its listener is up.
func crossDial(t *testing.T, dev verbs.Device, hw *hwverbs.Device, e *ep) crossConn {
	addr := netip.MustParseAddrPort(*cmPeer)
	deadline := time.Now().Add(*cmWait)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var c crossConn
		var err error
		if hw != nil {
			var conn *Conn
			if conn, err = Dial(ctx, hw, addr, &Params{QP: e.qp, PrivateData: e.info()}); err == nil {
				t.Logf("connected (rdmacm): %+v", conn.Info())
				c = conn
			}
		} else {
			var conn *cm.Conn
			if conn, err = cm.Dial(ctx, dev, addr, &cm.Params{QP: e.qp, PrivateData: e.info()}); err == nil {
				t.Logf("connected (cm): %+v", conn.Info())
				c = conn
			}
		}
		cancel()
		if err == nil {
			return c
		}
		if !errors.Is(err, cm.ErrConnRefused) || time.Now().After(deadline) {
			t.Fatalf("dial %v: %v", addr, err)
		}
		// Nobody listens yet. The REJ left the QP in ERR with its
		// receive flushed: start again from RESET, then INIT with a
		// receive.
		time.Sleep(300 * time.Millisecond)
		for e.cq.Poll(e.wcs) > 0 {
		}
		if err := e.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
		crossInit(t, e)
	}
}

// crossInit moves e's QP to INIT and posts its receive.
func crossInit(t *testing.T, e *ep) {
	toInit(t, e.qp)
	e.recv(xRecv, 64)
}

// crossMsg SENDs a 4-byte message.
func crossMsg(e *ep, m string) {
	copy(e.mr.Bytes()[xMsg:], m)
	e.post(verbs.OpSend, xMsg, xMsgLen, remote{}, 0)
	e.done(verbs.WCSend)
}

// crossRecv waits for the peer's message m.
func crossRecv(t *testing.T, e *ep, m string) {
	wc := e.done(verbs.WCRecv)
	syncMR(e.mr)
	if got := e.mr.Bytes()[xRecv : xRecv+wc.ByteLen]; string(got) != m {
		t.Fatalf("message %q, want %q", got, m)
	}
}

func check(t *testing.T, e *ep, off, seed int, what string) {
	t.Helper()
	syncMR(e.mr)
	if !bytes.Equal(e.mr.Bytes()[off:off+xLen], pattern(seed, xLen)) {
		t.Errorf("%s: the bytes differ", what)
	}
}

func crossDialler(t *testing.T, e *ep, r remote, c crossConn) {
	copy(e.mr.Bytes()[xWrite:], pattern(1, xLen))
	e.post(verbs.OpWrite, xWrite, xLen, r, xWrite)
	e.done(verbs.WCWrite)
	crossMsg(e, "one.")
	crossRecv(t, e, "two.")
	check(t, e, xBack, 3, "the listener's WRITE")
	e.post(verbs.OpRead, xRead2, xLen, r, xRead2)
	e.done(verbs.WCRead)
	check(t, e, xRead2, 4, "READ of the listener's buffer")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.CloseContext(ctx); err != nil {
		t.Errorf("CloseContext: %v", err)
	}
}

func crossListener(t *testing.T, e *ep, r remote) {
	crossRecv(t, e, "one.")
	check(t, e, xWrite, 1, "the dialler's WRITE")
	e.post(verbs.OpRead, xRead, xLen, r, xRead)
	e.done(verbs.WCRead)
	check(t, e, xRead, 2, "READ of the dialler's buffer")
	copy(e.mr.Bytes()[xBack:], pattern(3, xLen))
	e.post(verbs.OpWrite, xBack, xLen, r, xBack)
	e.done(verbs.WCWrite)
	crossMsg(e, "two.")
}
