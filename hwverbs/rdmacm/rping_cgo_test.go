//go:build hwverbs && cgo && linux

package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// rping's protocol (librdmacm/examples/rping.c; internal/tool/rping
// speaks it too): the client SENDs {addr, rkey, size} of its ping
// buffer, the server RDMA READs it and SENDs a go-ahead, the client SENDs
// the description of its sink, the server RDMA WRITEs the data into it
// and SENDs a go-ahead; COUNT times, then the client disconnects.
// Offsets in an endpoint's buffer:
const (
	rpRecv  = 0    // the peer's 16-byte message
	rpSend  = 64   // ours
	rpStart = 4096 // the client's ping data; the server's READ target
	rpSink  = 8192 // the client's sink
	rpSize  = 64   // rping's default -S
)

// rpingCmd starts rping with args, its output collected, ended by its
// own -C or by the test's end (within 60 s at most).
func rpingCmd(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	path, err := exec.LookPath("rping")
	if err != nil {
		t.Skip("no rping (rdmacm-utils) on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, path, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started rping %s (pid %d)", strings.Join(args, " "), cmd.Process.Pid)
	return cmd, &out
}

func rpingWait(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, want string) {
	t.Helper()
	err := cmd.Wait()
	t.Logf("rping said:\n%s", out)
	if err != nil {
		t.Fatalf("rping: %v", err)
	}
	if !strings.Contains(out.String(), want) {
		t.Errorf("rping's output lacks %q", want)
	}
}

// freePort returns a port no listener of dev holds now.
func freePort(t *testing.T, dev *hwverbs.Device) uint16 {
	t.Helper()
	l, err := Listen(t.Context(), dev, netip.AddrPortFrom(dev.Addr(), 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().Port()
}

// TestRping connects to the system's rping in both roles on the same
// device: rping -s against a Dial, rping -c against an Accept.
func TestRping(t *testing.T) {
	t.Run("rping server", func(t *testing.T) {
		noLeak(t)
		dev := openT(t)
		port := freePort(t, dev)
		cmd, out := rpingCmd(t, "-s", "-a", dev.Addr().String(), "-p", strconv.Itoa(int(port)), "-v")
		e := newEP(t, dev, false)
		c := dialRetry(t, dev, netip.AddrPortFrom(dev.Addr(), port), &Params{QP: e.qp})
		// rping's server sends nothing before the client's first
		// message: the receive may follow the connection.
		e.recv(rpRecv, 16)
		rpingClient(t, e, 3)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := c.CloseContext(ctx); err != nil {
			t.Errorf("CloseContext: %v", err)
		}
		rpingWait(t, cmd, out, "server ping data: rdma-ping-2: ")
	})
	t.Run("rping client", func(t *testing.T) {
		noLeak(t)
		dev := openT(t)
		e := newEP(t, dev, false)
		e.recv(rpRecv, 16)
		l := listenT(t, dev, &ListenConfig{OnRequest: func(context.Context, *Request) (*Params, error) {
			return &Params{QP: e.qp}, nil
		}})
		acc := serve(t, l)
		cmd, out := rpingCmd(t, "-c", "-a", dev.Addr().String(), "-p", strconv.Itoa(int(l.Addr().Port())),
			"-C", "3", "-v", "-V")
		c := next(t, acc)
		n := rpingServer(t, e)
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Error("no disconnect")
		}
		if !errors.Is(c.Err(), cm.ErrDisconnected) || n != 3 {
			t.Errorf("%d pings served; Err %v", n, c.Err())
		}
		rpingWait(t, cmd, out, "ping data: rdma-ping-2: ")
	})
}

// dialRetry dials addr until its listener is up (refused meanwhile), for
// up to 20 s.
func dialRetry(t *testing.T, dev *hwverbs.Device, addr netip.AddrPort, p *Params) *Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := Dial(dialCtx(t), dev, addr, p)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if !errors.Is(err, cm.ErrConnRefused) || time.Now().After(deadline) {
			t.Fatalf("Dial %v: %v", addr, err)
		}
		if p != nil && p.QP != nil {
			// The REJ left the QP in ERR: back to RESET.
			if err := p.QP.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rpingMsg puts the description of the buffer at off in e's send buffer
// and SENDs it.
func rpingMsg(e *ep, off int) {
	b := e.mr.Bytes()[rpSend:]
	putInfo(b, e.mr.Addr()+uint64(off), e.mr.RKey(), rpSize)
	e.post(verbs.OpSend, rpSend, 16, remote{}, 0)
}

func putInfo(b []byte, addr uint64, rkey, size uint32) {
	for i := range 8 {
		b[i] = byte(addr >> (56 - 8*i))
	}
	for i := range 4 {
		b[8+i] = byte(rkey >> (24 - 8*i))
		b[12+i] = byte(size >> (24 - 8*i))
	}
}

// awaitRecv waits for the next receive, passing over send completions,
// and posts the receive again; it returns false when the receive was
// flushed (the peer is gone).
func awaitRecv(e *ep) bool {
	e.t.Helper()
	for {
		wc := e.wait()
		switch {
		case wc.Status == verbs.WRFlushErr:
			return false
		case wc.Status != verbs.Success:
			e.t.Fatalf("completion: %v", wc)
		case wc.Opcode == verbs.WCRecv:
			if wc.ByteLen != 16 {
				e.t.Fatalf("rping message of %d bytes", wc.ByteLen)
			}
			e.recv(rpRecv, 16)
			return true
		}
	}
}

// awaitOp waits for the successful completion of op, passing over those
// of earlier SENDs: the client's rxe may pass its next message to the
// application before it acknowledges our last SEND (6.12's responder
// completes a receive before it sends the ACK, in a preemptible work
// item), so the SEND's completion can follow the next request's. rping
// itself takes completions in any order.
func awaitOp(e *ep, op verbs.WCOpcode) {
	e.t.Helper()
	for {
		wc := e.wait()
		if wc.Status == verbs.Success && wc.Opcode == verbs.WCSend && op != verbs.WCSend {
			continue
		}
		if wc.Status != verbs.Success || wc.Opcode != op {
			e.t.Fatalf("completion %v, want %v: %v", wc.Opcode, op, wc)
		}
		return
	}
}

// rpingClient is rping's client for count pings on e (a receive posted).
func rpingClient(t *testing.T, e *ep, count int) {
	buf := e.mr.Bytes()
	for i := range count {
		start := buf[rpStart : rpStart+rpSize]
		n := copy(start, fmt.Sprintf("rdma-ping-%d: ", i))
		for j := n; j < rpSize-1; j++ {
			start[j] = byte('A' + (i+j)%58)
		}
		start[rpSize-1] = 0
		rpingMsg(e, rpStart)
		if !awaitRecv(e) {
			t.Fatalf("ping %d: the server went away", i)
		}
		rpingMsg(e, rpSink)
		if !awaitRecv(e) {
			t.Fatalf("ping %d: the server went away", i)
		}
		if got := buf[rpSink : rpSink+rpSize]; !bytes.Equal(got, start) {
			t.Fatalf("ping %d: sink %q, want %q", i, got, start)
		}
	}
}

// rpingServer is rping's server on e (a receive posted) until the client
// goes away; it returns the pings served.
func rpingServer(t *testing.T, e *ep) int {
	buf := e.mr.Bytes()
	for n := 0; ; n++ {
		if !awaitRecv(e) {
			return n
		}
		r := parseInfo(buf[rpRecv:])
		e.post(verbs.OpRead, rpStart, int(r.len), r, 0)
		awaitOp(e, verbs.WCRead)
		if !bytes.HasPrefix(buf[rpStart:], []byte(fmt.Sprintf("rdma-ping-%d: ", n))) {
			t.Errorf("ping %d: read %q", n, buf[rpStart:rpStart+int(r.len)])
		}
		e.post(verbs.OpSend, rpSend, 16, remote{}, 0)
		if !awaitRecv(e) {
			t.Fatalf("ping %d: the client went away", n)
		}
		r = parseInfo(buf[rpRecv:])
		e.post(verbs.OpWrite, rpStart, int(r.len), r, 0)
		awaitOp(e, verbs.WCWrite)
		e.post(verbs.OpSend, rpSend, 16, remote{}, 0)
	}
}
