package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// rpinger runs one rping session.
type rpinger struct {
	o              *options
	stdout, stderr io.Writer

	dev   *roce.Device
	agent *cm.Agent
	conn  *cm.Conn
	pd    verbs.PD
	cq    verbs.CQ
	qp    verbs.QP
	recv  verbs.MR // the peer's rping_rdma_info arrives here
	send  verbs.MR // ours goes from here
	rdma  verbs.MR // the sink (client) or the READ destination (server)
	start verbs.MR // the client's ping data, READ by the server
	state int
	// the peer's buffer, from its last info message
	remoteAddr          uint64
	remoteRKey, remLen  uint32
	wcs                 []verbs.WC
	disconnectedPrinted bool
}

// setup makes rping's verbs objects: a PD, one CQ of 2 × 16 entries, an
// RC QP (16 sends, 2 receives, one SGE each) in INIT with a receive
// posted, and the buffers.
func (r *rpinger) setup() error {
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	if r.cq, err = r.dev.CreateCQ(sqDepth * 2); err != nil {
		return err
	}
	r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	if err := r.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	remote := verbs.LocalWrite | verbs.RemoteRead | verbs.RemoteWrite
	if r.recv, err = r.pd.RegMR(make([]byte, infoLen), verbs.LocalWrite); err != nil {
		return err
	}
	if r.send, err = r.pd.RegMR(make([]byte, infoLen), 0); err != nil {
		return err
	}
	if r.rdma, err = r.pd.RegMR(make([]byte, r.o.size), remote); err != nil {
		return err
	}
	if r.o.client {
		if r.start, err = r.pd.RegMR(make([]byte, r.o.size), remote); err != nil {
			return err
		}
	}
	// One completion at a time: each may move the state, as each of
	// rping's sem_posts does.
	r.wcs = make([]verbs.WC, 1)
	return r.postRecv()
}

func (r *rpinger) postRecv() error {
	return r.qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{{Addr: r.recv.Addr(), Length: infoLen, LKey: r.recv.LKey()}}}})
}

// postSend sends our rping_rdma_info (sq_wr).
func (r *rpinger) postSend() error {
	return r.post(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: r.send.Addr(), Length: infoLen, LKey: r.send.LKey()}}})
}

// postRDMA READs n bytes of the peer's advertised buffer into ours, or
// WRITEs n bytes of ours into it (rdma_sq_wr).
func (r *rpinger) postRDMA(op verbs.WROpcode, n uint32) error {
	return r.post(verbs.SendWR{Opcode: op, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: r.rdma.Addr(), Length: n, LKey: r.rdma.LKey()}},
		RemoteAddr: r.remoteAddr, RKey: r.remoteRKey})
}

// post posts one work request, failing as rping says it.
func (r *rpinger) post(wr verbs.SendWR) error {
	if err := r.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("post send error %w", err)
	}
	return nil
}

// formatSend puts a buffer's {addr, rkey, size} in the send buffer.
func (r *rpinger) formatSend(mr verbs.MR) {
	b := r.send.Bytes()
	binary.BigEndian.PutUint64(b[0:], mr.Addr())
	binary.BigEndian.PutUint32(b[8:], mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(r.o.size))
	if r.o.debug {
		fmt.Fprintf(r.stdout, "RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), r.o.size)
	}
}

func (r *rpinger) runServer(ctx context.Context, addr netip.Addr) error {
	ln := netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(r.o.port))
	if r.dev.Addr().Is6() {
		ln = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(r.o.port))
	}
	if addr.IsValid() && !addr.IsUnspecified() {
		ln = netip.AddrPortFrom(addr, uint16(r.o.port))
	}
	l, err := r.agent.Listen(ctx, ln, &cm.ListenConfig{Backlog: 3,
		OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
			return &cm.Params{QP: r.qp, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
				PathMTU: r.pathMTU()}, nil
		}})
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer l.Close()
	actx, cancel := context.WithTimeout(ctx, r.o.timeout)
	r.conn, err = l.Accept(actx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("connect error: no client connected to %v within %v (--timeout)", l.Addr(), r.o.timeout)
		}
		return fmt.Errorf("connect error: %w", err)
	}
	return r.runTest(ctx, "server", r.testServer)
}

func (r *rpinger) pathMTU() bth.MTU {
	m, _ := bth.MTUAtMost(r.o.dev.MTU)
	return m
}

// testServer is rping_test_server: READ the client's buffer, say go
// ahead, WRITE it back into the client's sink, say go ahead; until the
// client disconnects.
func (r *rpinger) testServer(ctx context.Context) error {
	for {
		if err := r.await(ctx, stateReadAdv); err != nil {
			return err
		}
		if r.o.debug {
			fmt.Fprintln(r.stdout, "server received sink adv")
		}
		if err := r.postRDMA(verbs.OpRead, r.remLen); err != nil {
			return err
		}
		if err := r.await(ctx, stateReadComplete); err != nil {
			return err
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "server ping data: %s\n", cString(r.rdma.Bytes()))
		}
		if err := r.postSend(); err != nil {
			return err
		}
		if err := r.await(ctx, stateWriteAdv); err != nil {
			return err
		}
		n := len(cString(r.rdma.Bytes())) + 1
		if n > len(r.rdma.Bytes()) {
			n = len(r.rdma.Bytes())
		}
		if err := r.postRDMA(verbs.OpWrite, uint32(n)); err != nil {
			return err
		}
		if err := r.await(ctx, stateWriteComplete); err != nil {
			return err
		}
		if err := r.postSend(); err != nil {
			return err
		}
	}
}

// await is one sem_wait after which the state must be want. Otherwise it
// prints rping's "wait for X state N" and fails, with errPeerGone
// when the peer disconnected.
func (r *rpinger) await(ctx context.Context, want int) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	if r.state == want {
		return nil
	}
	name := stateNames[want]
	fmt.Fprintf(r.stderr, "wait for %s state %d\n", name, r.state)
	if r.state == stateDisconnected {
		return errPeerGone
	}
	return fmt.Errorf("wait for %s: state %d", name, r.state)
}

func (r *rpinger) runClient(ctx context.Context, addr netip.Addr) error {
	dctx, cancel := context.WithTimeout(ctx, r.o.timeout)
	var err error
	r.conn, err = r.agent.Dial(dctx, netip.AddrPortFrom(addr, uint16(r.o.port)), &cm.Params{QP: r.qp,
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PathMTU: r.pathMTU()})
	cancel()
	if err != nil {
		var rej *cm.RejectError
		switch {
		case errors.As(err, &rej):
			fmt.Fprintf(r.stderr, "cma event RDMA_CM_EVENT_REJECTED, error %d\n", rej.Reason)
		case errors.Is(err, cm.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, cm.ErrUnreachable):
			// A kernel's CM does not act on ICMP errors: where goroce
			// hears one at once, rping on a kernel device waits for its
			// REQ to time out, and prints this line.
			fmt.Fprintf(r.stderr, "cma event RDMA_CM_EVENT_UNREACHABLE, error -110\n")
		}
		return fmt.Errorf("connect error: %w", err)
	}
	return r.runTest(ctx, "client", r.testClient)
}

// errPeerGone is the peer disconnecting while a test waits: the
// normal end of rping's test.
var errPeerGone = errors.New("the peer disconnected")

// runTest runs side's test (rping_test_server or rping_test_client) on
// the connection just made, then disconnects.
func (r *rpinger) runTest(ctx context.Context, side string, test func(context.Context) error) error {
	r.state = stateConnected
	err := test(ctx)
	r.disconnect()
	if err != nil && !errors.Is(err, errPeerGone) {
		return fmt.Errorf("rping %s failed: %w", side, err)
	}
	return nil
}

// testClient is rping_test_client.
func (r *rpinger) testClient(ctx context.Context) error {
	start := byte(65)
	buf := r.start.Bytes()
	for ping := 0; r.o.count == 0 || ping < r.o.count; ping++ {
		r.state = stateReadAdv
		head := fmt.Sprintf("rdma-ping-%d: ", ping)
		cc := copy(buf[:len(buf)-1], head)
		c := start
		for i := cc; i < len(buf); i++ {
			buf[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		buf[len(buf)-1] = 0
		r.formatSend(r.start)
		if err := r.postSend(); err != nil {
			return err
		}
		if err := r.await(ctx, stateWriteAdv); err != nil {
			return err
		}
		r.formatSend(r.rdma)
		if err := r.postSend(); err != nil {
			return err
		}
		if err := r.await(ctx, stateWriteComplete); err != nil {
			return err
		}
		if r.o.valid && !bytes.Equal(r.start.Bytes(), r.rdma.Bytes()) {
			fmt.Fprintln(r.stderr, "data mismatch!")
			return errors.New("data mismatch")
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "ping data: %s\n", cString(r.rdma.Bytes()))
		}
	}
	return nil
}

// disconnect ends the connection: a DREQ from this side, or the release
// of a connection the peer ended.
func (r *rpinger) disconnect() {
	if r.conn == nil {
		return
	}
	peerFirst := r.conn.Err() != nil
	ctx, cancel := context.WithTimeout(context.Background(), r.o.timeout)
	defer cancel()
	err := r.conn.CloseContext(ctx)
	if !peerFirst && err == nil {
		r.printDisconnect()
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "roce rping: disconnect: %v\n", err)
	}
}

func (r *rpinger) printDisconnect() {
	if r.disconnectedPrinted {
		return
	}
	r.disconnectedPrinted = true
	side := "client"
	if r.o.server {
		side = "server"
	}
	fmt.Fprintf(r.stderr, "%s DISCONNECT EVENT...\n", side)
}

// wait is one sem_wait of rping: it handles completions until one moves
// the state (a receive, a READ or WRITE completion), the peer
// disconnects, or --timeout passes.
func (r *rpinger) wait(ctx context.Context) error {
	timer := time.NewTimer(r.o.timeout)
	defer timer.Stop()
	for {
		moved, err := r.poll()
		if err != nil || moved {
			return err
		}
		r.cq.ReqNotify(false)
		if moved, err = r.poll(); err != nil || moved {
			return err
		}
		select {
		case <-r.cq.C():
		case <-r.conn.Done():
			if moved, err = r.poll(); err != nil || moved {
				return err
			}
			r.state = stateDisconnected
			r.printDisconnect()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("no completion in %v (state %d)", r.o.timeout, r.state)
		}
	}
}

// poll handles the completions waiting, as rping_cq_event_handler does,
// until one moves the state (it reports true) or none is left.
func (r *rpinger) poll() (bool, error) {
	for r.cq.Poll(r.wcs) == 1 {
		wc := r.wcs[0]
		if wc.Status != verbs.Success {
			if wc.Status == verbs.WRFlushErr {
				continue
			}
			fmt.Fprintf(r.stderr, "cq completion failed status %d\n", wc.Status)
			r.state = stateError
			return true, fmt.Errorf("completion failed: %v", wc.Status)
		}
		switch wc.Opcode {
		case verbs.WCSend:
		case verbs.WCWrite:
			r.state = stateWriteComplete
			return true, nil
		case verbs.WCRead:
			r.state = stateReadComplete
			return true, nil
		case verbs.WCRecv:
			if wc.ByteLen != infoLen {
				fmt.Fprintf(r.stderr, "Received bogus data, size %d\n", wc.ByteLen)
				r.state = stateError
				return true, fmt.Errorf("received bogus data, size %d", wc.ByteLen)
			}
			if r.o.server {
				b := r.recv.Bytes()
				r.remoteAddr = binary.BigEndian.Uint64(b[0:])
				r.remoteRKey = binary.BigEndian.Uint32(b[8:])
				r.remLen = binary.BigEndian.Uint32(b[12:])
				if r.o.debug {
					fmt.Fprintf(r.stdout, "Received rkey %x addr %x len %d from peer\n", r.remoteRKey, r.remoteAddr, r.remLen)
				}
				if r.state <= stateConnected || r.state == stateWriteComplete {
					r.state = stateReadAdv
				} else {
					r.state = stateWriteAdv
				}
			} else if r.state == stateReadAdv {
				r.state = stateWriteAdv
			} else {
				r.state = stateWriteComplete
			}
			if err := r.postRecv(); err != nil {
				return true, fmt.Errorf("post recv error: %w", err)
			}
			return true, nil
		}
	}
	return false, nil
}

// cString returns b up to its first NUL, as printf's %s prints it.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
