//go:build linux

package ccbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// bulk is one bulk flow: the bytes it delivered (completed WRITEs, or
// bytes the TCP receiver read), and for TCP what it sent and sent again
// (filled by stop; goroce's come from its devices' counters).
type bulk struct {
	delivered     atomic.Uint64
	sent, retrans uint64
	stop          func()
	// qp is a goroce flow's sending QP, for its congestion control.
	qp verbs.QP
}

// msgSize and depth are the bulk flows' WRITEs (or TCP writes) and how
// many are outstanding, as roce perf write -s 65536 sends them.
const (
	msgSize = 64 << 10
	depth   = 16
)

// roceHosts is the goroce side of a run: one receiver device, one device
// per sender.
type roceHosts struct {
	recv  *roce.Device
	sends []*roce.Device
}

// openRoce opens the receiver and n sender devices in the namespaces.
func openRoce(n int, mode congestion.Mode, v6 bool, target time.Duration) (*roceHosts, error) {
	h := &roceHosts{}
	cc := &congestion.Config{Mode: mode, Delay: congestion.DelayConfig{Target: target}}
	err := inNS(nsB, func() error {
		d, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: addrB(v6), NoOffload: true}, Congestion: cc})
		h.recv = d
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range n {
		var d *roce.Device
		if err := inNS(nsA, func() error {
			var err error
			d, err = roce.Open(&roce.Config{Link: &roce.UDP{Addr: addrA(i, v6), NoOffload: true}, Congestion: cc})
			return err
		}); err != nil {
			h.close()
			return nil, err
		}
		h.sends = append(h.sends, d)
	}
	return h, nil
}

func (h *roceHosts) close() {
	for _, d := range h.sends {
		d.Close()
	}
	if h.recv != nil {
		h.recv.Close()
	}
}

// rcPair is a connected RC QP on a sender device and one on the receiver.
type rcPair struct {
	sq, rq   verbs.QP
	scq, rcq verbs.CQ
	smr, rmr verbs.MR
	spd, rpd verbs.PD
}

// connectPair makes an RC QP on s and one on r, connected, with a region
// of size bytes on each.
func connectPair(s, r *roce.Device, size int, maxRD uint8) (*rcPair, error) {
	p := &rcPair{}
	mk := func(d *roce.Device) (verbs.QP, verbs.CQ, verbs.MR, verbs.PD, error) {
		pd, err := d.AllocPD()
		if err != nil {
			return nil, nil, nil, nil, err
		}
		cq, err := d.CreateCQ(4 * depth)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 2 * depth, MaxRecvWR: 2 * depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		m, err := pd.RegMR(make([]byte, size), verbs.LocalWrite|verbs.RemoteAccess)
		return q, cq, m, pd, err
	}
	var err error
	if p.sq, p.scq, p.smr, p.spd, err = mk(s); err != nil {
		return nil, err
	}
	if p.rq, p.rcq, p.rmr, p.rpd, err = mk(r); err != nil {
		return nil, err
	}
	cp := &roce.ConnParams{MTU: bth.MTU1024, MaxRDAtomic: maxRD, MaxDestRDAtomic: maxRD}
	if err := roce.Connect(p.sq, &roce.Remote{QPN: p.rq.QPN(), GID: verbs.GIDFromAddr(r.Addr())}, cp); err != nil {
		return nil, err
	}
	if err := roce.Connect(p.rq, &roce.Remote{QPN: p.sq.QPN(), GID: verbs.GIDFromAddr(s.Addr())}, cp); err != nil {
		return nil, err
	}
	return p, nil
}

// startRoceBulk keeps depth WRITEs of msgSize going on p until ctx ends.
func startRoceBulk(ctx context.Context, p *rcPair, dev *roce.Device) *bulk {
	b := &bulk{qp: p.sq}
	wr := []verbs.SendWR{{Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: p.smr.Addr(), Length: msgSize, LKey: p.smr.LKey()}},
		RemoteAddr: p.rmr.Addr(), RKey: p.rmr.RKey()}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range depth {
			if p.sq.PostSend(wr) != nil {
				return
			}
		}
		for {
			wc, err := roce.PollOne(ctx, p.scq)
			if err != nil || wc.Status != verbs.Success {
				return
			}
			b.delivered.Add(msgSize)
			if p.sq.PostSend(wr) != nil {
				return
			}
		}
	})
	b.stop = wg.Wait
	return b
}

// tcpHost is the TCP side of a run: a listener in the receiver's
// namespace that reads and counts.
type tcpHost struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func listenTCP(v6 bool) (*tcpHost, error) {
	h := &tcpHost{}
	err := inNS(nsB, func() error {
		var err error
		h.ln, err = net.Listen("tcp", netip.AddrPortFrom(addrB(v6), 5201).String())
		return err
	})
	return h, err
}

// startTCPBulk dials from sender i with congestion control cc and writes
// until ctx ends; the receiver side counts what it reads into the flow.
func startTCPBulk(ctx context.Context, h *tcpHost, i int, cc string, v6 bool) (*bulk, error) {
	b := &bulk{}
	var c net.Conn
	err := inNS(nsA, func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addrA(i, v6), 0)),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				rc.Control(func(fd uintptr) { serr = setCC(fd, cc) })
				return serr
			}}
		var err error
		c, err = d.Dial("tcp", netip.AddrPortFrom(addrB(v6), 5201).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tcp %s: %w", cc, err)
	}
	sc, err := h.ln.Accept()
	if err != nil {
		c.Close()
		return nil, err
	}
	h.mu.Lock()
	h.conns = append(h.conns, c, sc)
	h.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, msgSize)
		for {
			n, err := sc.Read(buf)
			b.delivered.Add(uint64(n))
			if err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		buf := make([]byte, msgSize)
		for ctx.Err() == nil {
			c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Write(buf); err != nil && !errors.Is(err, errTimeout) && !isTimeout(err) {
				return
			}
		}
	})
	b.stop = func() {
		if rc, err := c.(*net.TCPConn).SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { b.sent, b.retrans = tcpRetrans(fd) })
		}
		c.Close()
		sc.Close()
		wg.Wait()
	}
	return b, nil
}

var errTimeout = errors.New("timeout")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (h *tcpHost) close() {
	h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
}

// pingPong measures round trips of 64-byte messages.
type pingPong struct {
	mu   sync.Mutex
	rtts []time.Duration
	stop func()
}

// p99 returns the 99th percentile (and the median) of the round trips.
func (p *pingPong) stats() (p50, p99 time.Duration, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := slices.Clone(p.rtts)
	slices.Sort(r)
	if len(r) == 0 {
		return 0, 0, 0
	}
	return r[len(r)/2], r[len(r)*99/100], len(r)
}

func (p *pingPong) reset() {
	p.mu.Lock()
	p.rtts = p.rtts[:0]
	p.mu.Unlock()
}

// startRocePingPong runs 64-byte SENDs on p one way and answers back, as
// ibv_rc_pingpong does, until ctx ends.
func startRocePingPong(ctx context.Context, p *rcPair) *pingPong {
	pp := &pingPong{}
	const n = 64
	sendS := []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: p.smr.Addr(), Length: n, LKey: p.smr.LKey()}}}}
	sendR := []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: p.rmr.Addr(), Length: n, LKey: p.rmr.LKey()}}}}
	recvS := []verbs.RecvWR{{SGL: []verbs.SGE{{Addr: p.smr.Addr() + n, Length: n, LKey: p.smr.LKey()}}}}
	recvR := []verbs.RecvWR{{SGL: []verbs.SGE{{Addr: p.rmr.Addr() + n, Length: n, LKey: p.rmr.LKey()}}}}
	var wg sync.WaitGroup
	// The echo side.
	wg.Go(func() {
		if p.rq.PostRecv(recvR) != nil {
			return
		}
		for {
			wc, err := roce.PollOne(ctx, p.rcq)
			if err != nil || wc.Status != verbs.Success {
				return
			}
			if wc.Opcode == verbs.WCRecv {
				if p.rq.PostRecv(recvR) != nil || p.rq.PostSend(sendR) != nil {
					return
				}
			}
		}
	})
	wg.Go(func() {
		if p.sq.PostRecv(recvS) != nil {
			return
		}
		for ctx.Err() == nil {
			start := time.Now()
			if p.sq.PostSend(sendS) != nil {
				return
			}
			for got := false; !got; {
				wc, err := roce.PollOne(ctx, p.scq)
				if err != nil || wc.Status != verbs.Success {
					return
				}
				got = wc.Opcode == verbs.WCRecv
			}
			rtt := time.Since(start)
			pp.mu.Lock()
			pp.rtts = append(pp.rtts, rtt)
			pp.mu.Unlock()
			if p.sq.PostRecv(recvS) != nil {
				return
			}
		}
	})
	pp.stop = wg.Wait
	return pp
}

// startTCPPingPong runs 64-byte messages over TCP from sender i and back.
func startTCPPingPong(ctx context.Context, h *tcpHost, i int, cc string, v6 bool) (*pingPong, error) {
	pp := &pingPong{}
	var c net.Conn
	err := inNS(nsA, func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addrA(i, v6), 0)),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				rc.Control(func(fd uintptr) { serr = setCC(fd, cc) })
				return serr
			}}
		var err error
		c, err = d.Dial("tcp", netip.AddrPortFrom(addrB(v6), 5201).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	sc, err := h.ln.Accept()
	if err != nil {
		c.Close()
		return nil, err
	}
	c.(*net.TCPConn).SetNoDelay(true)
	sc.(*net.TCPConn).SetNoDelay(true)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(sc, buf); err != nil {
				return
			}
			if _, err := sc.Write(buf); err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		buf := make([]byte, 64)
		for ctx.Err() == nil {
			start := time.Now()
			if _, err := c.Write(buf); err != nil {
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			rtt := time.Since(start)
			pp.mu.Lock()
			pp.rtts = append(pp.rtts, rtt)
			pp.mu.Unlock()
		}
	})
	pp.stop = func() {
		c.Close()
		sc.Close()
		wg.Wait()
	}
	return pp, nil
}
