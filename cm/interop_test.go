//go:build interop && linux

package cm

// Interoperability with the Linux kernel's rdma_cm and soft-RoCE driver
// (rxe) in the lab VMs (shared/lab): librdmacm's rping in VM 1 against
// this package, both ways, and the refusals. Run it in the lab's
// namespace while nothing else holds UDP port 4791 there:
//
//	cd shared/lab && VMS=1 ./up.sh
//	GOROCE_INTEROP_VM=198.18.0.11 GOROCE_INTEROP_LAB=$PWD \
//	  ip netns exec rxelab go test -tags interop -run Interop -v ./cm/
//
// GOROCE_INTEROP_LOCAL (default 198.18.0.1) is the host side's address.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// interopLab returns the VM's and the host's addresses and the lab
// directory, or skips.
func interopLab(t *testing.T) (vm, local netip.Addr, lab string) {
	t.Helper()
	v := os.Getenv("GOROCE_INTEROP_VM")
	lab = os.Getenv("GOROCE_INTEROP_LAB")
	if v == "" || lab == "" {
		t.Skip("set GOROCE_INTEROP_VM (198.18.0.11) and GOROCE_INTEROP_LAB (shared/lab) to run against kernel rxe")
	}
	l := os.Getenv("GOROCE_INTEROP_LOCAL")
	if l == "" {
		l = "198.18.0.1"
	}
	return netip.MustParseAddr(v), netip.MustParseAddr(l), lab
}

// vmJob runs cmd in VM 1 in the background; wait returns its output.
func vmJob(t *testing.T, lab, cmd string) (wait func() string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(lab, "run.sh"), "-b", "-t", "90", "1", cmd+"; echo exit=$?").Output()
	if err != nil {
		t.Fatalf("run.sh: %v", err)
	}
	id := strings.TrimSpace(string(out))
	return func() string {
		out, _ := exec.Command(filepath.Join(lab, "run.sh"), "-w", id, "1").CombinedOutput()
		return string(out)
	}
}

func interopHost(t testing.TB, local netip.Addr) *host {
	t.Helper()
	d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: local}})
	if err != nil {
		t.Skipf("open %v:4791 (held by another program?): %v", local, err)
	}
	return newHostDev(t, d, nil, nil)
}

// rpingSide is rping's verbs setup: an RC QP with a 16-byte receive
// posted, a 16-byte send buffer and two data buffers.
type rpingSide struct {
	*side
	size int
}

func newRpingSide(t testing.TB, d verbs.Device, size int) *rpingSide {
	s := &rpingSide{side: newSide(t, d), size: size}
	if err := s.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: 16, LKey: s.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Buffers in the side's 64 KiB region: info received at 0, info sent at
// 16, data at 1024 (the client's start buffer, the server's READ target)
// and 1024+size (the client's sink).
func (s *rpingSide) data() []byte { return s.mr.Bytes()[1024 : 1024+s.size] }
func (s *rpingSide) sink() []byte { return s.mr.Bytes()[1024+s.size : 1024+2*s.size] }

func (s *rpingSide) sendInfo(t *testing.T, addr uint64) {
	t.Helper()
	b := s.mr.Bytes()[16:32]
	binary.BigEndian.PutUint64(b, addr)
	binary.BigEndian.PutUint32(b[8:], s.mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(s.size))
	if err := s.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: s.mr.Addr() + 16, Length: 16, LKey: s.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// next waits for the next receive, READ or WRITE completion (skipping
// SEND completions) and posts the receive again.
func (s *rpingSide) next(t *testing.T) verbs.WC {
	t.Helper()
	for {
		wc := waitWC(t, s.cq)
		if wc.Status != verbs.Success {
			t.Fatalf("completion %v", &wc)
		}
		switch wc.Opcode {
		case verbs.WCSend:
			continue
		case verbs.WCRecv:
			if err := s.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: 16, LKey: s.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		}
		return wc
	}
}

func TestInteropDialRping(t *testing.T) {
	vm, local, lab := interopLab(t)
	const size, count = 100, 3
	wait := vmJob(t, lab, fmt.Sprintf("rping -s -V -v -S %d -a %v -p 7292", size, vm))
	time.Sleep(3 * time.Second)
	h := interopHost(t, local)
	s := newRpingSide(t, h.dev, size)
	ctx := ctxT(t, 60*time.Second)
	c, err := h.agent.Dial(ctx, netip.AddrPortFrom(vm, 7292), &Params{QP: s.qp, PathMTU: bth.MTU1024})
	if err != nil {
		t.Fatalf("dial: %v\nVM: %s", err, wait())
	}
	if i := c.Info(); i.PathMTU != bth.MTU1024 || i.ResponderResources != 1 || i.InitiatorDepth != 1 {
		t.Errorf("negotiated %+v", i)
	}
	for ping := range count {
		d := s.data()
		n := copy(d, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i := n; i < size-1; i++ {
			d[i] = byte('A' + (ping+i-n)%58)
		}
		d[size-1] = 0
		s.sendInfo(t, s.mr.Addr()+1024)
		if wc := s.next(t); wc.Opcode != verbs.WCRecv {
			t.Fatalf("ping %d: %v", ping, &wc)
		}
		s.sendInfo(t, s.mr.Addr()+1024+uint64(size))
		if wc := s.next(t); wc.Opcode != verbs.WCRecv {
			t.Fatalf("ping %d: %v", ping, &wc)
		}
		if !bytes.Equal(s.data(), s.sink()) {
			t.Fatalf("ping %d: the server wrote back %q", ping, s.sink())
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	out := wait()
	t.Logf("VM rping -s:\n%s", out)
	if !strings.Contains(out, "server DISCONNECT EVENT") || !strings.Contains(out, "exit=0") ||
		strings.Count(out, "server ping data: rdma-ping-") != count {
		t.Errorf("VM server output:\n%s", out)
	}
}

func TestInteropAcceptRping(t *testing.T) {
	vm, local, lab := interopLab(t)
	const size, count = 200, 4
	h := interopHost(t, local)
	s := newRpingSide(t, h.dev, size)
	ctx := ctxT(t, 60*time.Second)
	l, err := h.agent.Listen(ctx, netip.AddrPortFrom(local, 7293), &ListenConfig{
		OnRequest: func(_ context.Context, r *Request) (*Params, error) {
			if r.Remote.Addr() != vm || r.PathMTU != bth.MTU1024 {
				t.Errorf("request %+v", r)
			}
			return &Params{QP: s.qp}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wait := vmJob(t, lab, fmt.Sprintf("rping -c -V -v -C %d -S %d -a %v -p 7293", count, size, local))
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v\nVM: %s", err, wait())
	}
	for ping := 0; ; ping++ {
		wc := waitOrDone(t, s, c)
		if wc == nil {
			break
		}
		info := s.mr.Bytes()[:16]
		raddr, rkey, rlen := binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:]), binary.BigEndian.Uint32(info[12:])
		if err := s.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpRead, Flags: verbs.Signaled,
			SGL: []verbs.SGE{{Addr: s.mr.Addr() + 1024, Length: rlen, LKey: s.mr.LKey()}}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := s.next(t); wc.Opcode != verbs.WCRead {
			t.Fatalf("ping %d: %v", ping, wc)
		}
		if !strings.HasPrefix(string(s.data()), fmt.Sprintf("rdma-ping-%d: ", ping)) {
			t.Errorf("ping %d read %q", ping, s.data())
		}
		s.sendInfo(t, 0)
		if wc := s.next(t); wc.Opcode != verbs.WCRecv {
			t.Fatalf("ping %d: %v", ping, &wc)
		}
		raddr, rkey = binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:])
		if err := s.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{{Addr: s.mr.Addr() + 1024, Length: size, LKey: s.mr.LKey()}}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := s.next(t); wc.Opcode != verbs.WCWrite {
			t.Fatalf("ping %d: %v", ping, &wc)
		}
		s.sendInfo(t, 0)
	}
	if !errors.Is(c.Err(), ErrDisconnected) {
		t.Errorf("ended with %v", c.Err())
	}
	c.Close()
	out := wait()
	t.Logf("VM rping -c:\n%s", out)
	if !strings.Contains(out, "exit=0") || strings.Count(out, "ping data: rdma-ping-") != count {
		t.Errorf("VM client output:\n%s", out)
	}
}

// waitOrDone waits for the client's first info of a ping, or the end of
// the connection (nil).
func waitOrDone(t *testing.T, s *rpingSide, c *Conn) *verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.After(30 * time.Second)
	for {
		if s.cq.Poll(wc) == 1 {
			if wc[0].Status == verbs.WRFlushErr {
				return nil
			}
			if wc[0].Opcode == verbs.WCSend {
				continue
			}
			if err := s.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: 16, LKey: s.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
			return &wc[0]
		}
		s.cq.ReqNotify(false)
		if s.cq.Poll(wc) == 1 {
			if wc[0].Status == verbs.WRFlushErr {
				return nil
			}
			if wc[0].Opcode == verbs.WCSend {
				continue
			}
			if err := s.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: 16, LKey: s.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
			return &wc[0]
		}
		select {
		case <-s.cq.C():
		case <-c.Done():
			return nil
		case <-deadline:
			t.Fatal("no ping from the VM")
		}
	}
}

func TestInteropRefused(t *testing.T) {
	vm, local, lab := interopLab(t)
	h := interopHost(t, local)
	ctx := ctxT(t, 60*time.Second)
	// Nobody listens on the VM's port 7294: rxe's CM answers REJ 8.
	_, err := h.agent.Dial(ctx, netip.AddrPortFrom(vm, 7294), nil)
	var rej *RejectError
	if !errors.As(err, &rej) || !errors.Is(err, ErrConnRefused) || rej.Reason != mad.RejInvalidServiceID {
		t.Errorf("dial to a closed port: %v", err)
	}
	t.Log(err)
	// The VM connects to our ports: nobody on 7294, and a listener that
	// refuses with private data on 7295.
	l, err := h.agent.Listen(ctx, netip.AddrPortFrom(local, 7295), &ListenConfig{
		OnRequest: func(context.Context, *Request) (*Params, error) { return nil, Reject([]byte("go away")) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go l.Accept(ctx)
	for _, tc := range []struct {
		port uint16
		want string
	}{{7294, "RDMA_CM_EVENT_REJECTED, error 8"}, {7295, "RDMA_CM_EVENT_REJECTED, error 28"}} {
		out := vmJob(t, lab, fmt.Sprintf("rping -c -C 1 -a %v -p %d", local, tc.port))()
		t.Logf("VM rping -c -p %d:\n%s", tc.port, out)
		if !strings.Contains(out, tc.want) {
			t.Errorf("VM output lacks %q:\n%s", tc.want, out)
		}
	}
}
