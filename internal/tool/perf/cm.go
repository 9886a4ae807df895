package perf

// roce perf -R: perftest's rdma_cm mode. The exchange that travels over
// TCP otherwise goes, one message per RC SEND, over a first rdma_cm
// connection (the "comm" QP, with one 56-byte receive posted at a time);
// the per-QP handshake is then perftest's 56-byte binary struct and the
// closing exchange has no "done". The data QPs get their own rdma_cm
// connections, one per QP on the same port, bracketed by two handshakes
// of an empty entry (perftest_communication.c, create_rdma_cm_connection;
// rxe_write_bw_rdmacm.pcap).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/cqwait"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// exchanger is the out-of-band session a test's flow uses: perftest's
// TCP exchange (oob.Perftest) or its rdma_cm one (cmExchange).
type exchanger interface {
	ExchangeVersions(ctx context.Context) (oob.Compat, error)
	CheckSysData(ctx context.Context, local oob.SysData) (oob.SysData, error)
	CheckMTU(ctx context.Context, local bth.MTU) (bth.MTU, error)
	HandShake(ctx context.Context, local oob.PerftestDest) (oob.PerftestDest, error)
	ExchangeDests(ctx context.Context, local []oob.PerftestDest) ([]oob.PerftestDest, error)
	Barrier(ctx context.Context) error
	ExchangeBWReports(ctx context.Context, local oob.BWReport) (oob.BWReport, error)
	CloseConnection(ctx context.Context) error
}

var _ exchanger = (*oob.Perftest)(nil)

// Sizes of the comm QP's buffer: one receive of sizeof(struct
// pingpong_dest), as perftest posts, and the message being sent.
const (
	cmRecvLen = oob.PerftestDestCMLen
	cmMsgMax  = 64
	// The client retries a refused data connection every cmDialGap,
	// as perftest's rdma_cm_client_connection does: the server starts
	// listening for them only after the handshake before them. perftest
	// gives up after 10 tries; goroce goes on for cmDialFor, because
	// a server whose handshake answer lost its ACK starts listening only
	// after its retransmission timer, 2 s or more under rdma_cm.
	cmDialGap = 100 * time.Millisecond
	cmDialFor = 10 * time.Second
)

// cmCloseWait bounds closeCM: the disconnects, and the wait for the
// peer's (a variable for the tests).
var cmCloseWait = 5 * time.Second

// cmExchange is perftest's exchange over an rdma_cm connection. It is used by
// one goroutine.
type cmExchange struct {
	role     oob.Role
	gidIndex int32
	agent    *cm.Agent
	comm     *cm.Conn
	qp       verbs.QP
	scq, rcq verbs.CQ
	mr       verbs.MR
	buf      []byte // [0:56] the receive, [64:128] the send
	sendWR   []verbs.SendWR
	recvWR   []verbs.RecvWR
	wc       []verbs.WC
	waiter   *cqwait.Waiter
	compat   oob.Compat
	first    oob.PerftestDest
	hasFirst bool
	data     []*cm.Conn
}

// openCM starts the device's connection manager and makes the comm
// connection: the client dials the server's rdma_cm port, the server
// accepts one connection on it.
func (r *session) openCM() error {
	o := r.o
	if o.backend == "hw" {
		return errors.New("-R needs --backend soft: a libibverbs device's rdma_cm belongs to librdmacm")
	}
	cfg := &cm.Config{Logger: r.log}
	if r.errOut != nil {
		cfg.OnReject = func(rej cm.Rejection) { fmt.Fprintf(r.errOut, "roce perf: %v\n", rej) }
	}
	a, err := cm.NewAgent(r.dev, cfg)
	if err != nil {
		return err
	}
	c, err := newCMExchange(r.dev, r.role, r.spin)
	if err != nil {
		a.Close()
		return err
	}
	c.gidIndex, c.agent = int32(r.gidIdx), a
	r.cm = c
	p := r.cmParams(c.qp)
	if r.role == oob.Client {
		addr, err := r.cmServer()
		if err != nil {
			return err
		}
		if c.comm, err = a.Dial(r.ctx, addr, p); err != nil {
			return fmt.Errorf("couldn't connect to %v with rdma_cm: %w", addr, err)
		}
		return nil
	}
	ln, err := a.Listen(r.ctx, netip.AddrPortFrom(a.Addr(), uint16(o.port)), &cm.ListenConfig{
		OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) { return p, nil }})
	if err != nil {
		return err
	}
	r.print("\n************************************\n* Waiting for client to connect... *\n************************************\n")
	c.comm, err = ln.Accept(r.ctx)
	ln.Close()
	if err != nil {
		return fmt.Errorf("no client connected: %w", err)
	}
	return nil
}

// newCMExchange makes the comm QP of perftest's rdma_cm mode, in INIT
// with its first receive posted, as perftest's post_one_recv_wqe does
// before the connection exists.
func newCMExchange(dev verbs.Device, role oob.Role, spin time.Duration) (*cmExchange, error) {
	c := &cmExchange{role: role, waiter: cqwait.New(spin), wc: make([]verbs.WC, 1)}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	c.buf = make([]byte, 2*cmMsgMax)
	if c.mr, err = pd.RegMR(c.buf, verbs.LocalWrite); err != nil {
		return nil, err
	}
	if c.scq, err = dev.CreateCQ(2); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(2); err != nil {
		return nil, err
	}
	if c.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	c.sendWR = []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled,
		SGL: []verbs.SGE{{Addr: c.mr.Addr() + cmMsgMax, LKey: c.mr.LKey()}}}}
	c.recvWR = []verbs.RecvWR{{SGL: []verbs.SGE{{Addr: c.mr.Addr(), Length: cmRecvLen, LKey: c.mr.LKey()}}}}
	if err := roce.ModifyToInit(c.qp, nil); err != nil {
		return nil, err
	}
	if err := c.qp.PostRecv(c.recvWR); err != nil {
		return nil, err
	}
	return c, nil
}

// retryRefused calls dial until it connects, fails other than by a
// refusal, or has been refused for limit, calling reset and waiting gap
// between tries. A refusal (cm.ErrConnRefused: the server's CM answered,
// but does not listen on the data port yet) is worth waiting out; an
// unreachable server (cm.ErrUnreachable: an ICMP error, its address no
// longer receives RoCEv2 or has no route) is not: the comm connection to
// the same device has just worked, so the server has gone, and the error
// is returned at once with what to check.
func retryRefused(ctx context.Context, gap, limit time.Duration, dial func() (*cm.Conn, error), reset func() error) (*cm.Conn, error) {
	giveUp := time.Now().Add(limit)
	for {
		conn, err := dial()
		if err == nil || !errors.Is(err, cm.ErrConnRefused) || time.Now().After(giveUp) {
			return conn, err
		}
		if err := reset(); err != nil {
			return nil, err
		}
		t := time.NewTimer(gap)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// cmServer resolves the server's address and rdma_cm port.
func (r *session) cmServer() (netip.AddrPort, error) {
	a, err := cli.ResolveAddr(r.o.server)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(r.o.port)), nil
}

// cmParams are the connection parameters perftest gives rdma_connect and
// rdma_accept: the READ/atomic depths for those tests, 7 retries, 7 RNR
// retries, the min RNR timer it sets after accepting, and the QP timeout
// of its TCP mode, which it sets with RDMA_OPTION_ID_ACK_TIMEOUT.
func (r *session) cmParams(q verbs.QP) *cm.Params {
	p := &cm.Params{QP: q, RetryCount: 7, RNRRetryCount: 7, MinRNRTimer: minRNRTimer, PathMTU: r.mtu,
		ACKTimeout: qpTimeout}
	if r.o.verb == verbRead || r.o.verb == verbAtomic {
		n := uint8(softOutReads)
		if r.o.outReads > 0 {
			n = uint8(r.o.outReads)
		}
		p.ResponderResources, p.InitiatorDepth = n, n
	}
	return p
}

// connectCM connects the data QPs (create_rdma_cm_connection): an empty
// handshake, one rdma_cm connection per QP, another empty handshake.
func (r *session) connectCM() error {
	c := r.cm
	var zero oob.PerftestDest
	if _, err := c.handShake(r.ctx, "hand_shake (before rdma_cm)", zero); err != nil {
		return err
	}
	c.hasFirst = false
	if r.role == oob.Client {
		addr, err := r.cmServer()
		if err != nil {
			return err
		}
		for i, q := range r.qps {
			conn, err := retryRefused(r.ctx, cmDialGap, cmDialFor,
				func() (*cm.Conn, error) { return c.agent.Dial(r.ctx, addr, r.cmParams(q)) },
				func() error {
					// The refusal left the QP in ERR: back to RESET for the
					// next try (perftest makes a new cm_id and QP).
					if err := q.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState); err != nil {
						return fmt.Errorf("QP %d to RESET after a refused connection: %w", q.QPN(), err)
					}
					return nil
				})
			if err != nil {
				return fmt.Errorf("failed to connect QP %d through rdma_cm: %w", i, err)
			}
			c.data = append(c.data, conn)
		}
	} else {
		next := 0
		ln, err := c.agent.Listen(r.ctx, netip.AddrPortFrom(c.agent.Addr(), uint16(r.o.port)), &cm.ListenConfig{
			Backlog: len(r.qps),
			OnRequest: func(context.Context, *cm.Request) (*cm.Params, error) {
				if next == len(r.qps) {
					return nil, cm.Reject(nil)
				}
				next++
				return r.cmParams(r.qps[next-1]), nil
			}})
		if err != nil {
			return err
		}
		for range r.qps {
			conn, err := ln.Accept(r.ctx)
			if err != nil {
				ln.Close()
				return fmt.Errorf("failed to accept a data QP through rdma_cm: %w", err)
			}
			c.data = append(c.data, conn)
		}
		ln.Close()
	}
	for i := range r.local {
		// The PSN the connection gave the QP, where perftest shows a number
		// it drew and never used.
		r.local[i].PSN = c.data[i].Info().SendPSN
	}
	if _, err := c.handShake(r.ctx, "hand_shake (after rdma_cm)", zero); err != nil {
		return err
	}
	c.hasFirst = false
	return nil
}

// closeCM ends the rdma_cm connections as perftest does. The client
// disconnects the data QPs and waits (briefly) for the server to
// disconnect the comm QP. The server disconnects the data QPs, then the
// comm QP. perftest's rdma_cm_disconnect_nodes changed twice: in 4.5 the
// client disconnects the data QPs and the server does not; from 23.04 both
// do; from 24.04 (Debian 13's 25.01) only the server does, and the client
// waits for it. A server that left them to the client would wait for
// a 25 client that waits for it; against 4.5's client the two DREQs
// cross, which the CM answers.
func (r *session) closeCM() {
	c := r.cm
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmCloseWait)
	defer cancel()
	mine, theirs := c.data, []*cm.Conn{c.comm}
	if r.role == oob.Server {
		mine, theirs = append(append([]*cm.Conn{}, c.data...), c.comm), nil
	}
	for _, conn := range mine {
		if conn != nil {
			conn.CloseContext(ctx)
		}
	}
	for _, conn := range theirs {
		if conn == nil {
			continue
		}
		select {
		case <-conn.Done():
		case <-ctx.Done():
		}
		conn.CloseContext(ctx)
	}
	c.agent.Close()
}

// send sends one message and waits for its completion.
func (c *cmExchange) send(ctx context.Context, step string, b []byte) error {
	copy(c.buf[cmMsgMax:], b)
	c.sendWR[0].SGL[0].Length = uint32(len(b))
	if err := c.qp.PostSend(c.sendWR); err != nil {
		return fmt.Errorf("perftest rdma_cm %s: post send: %w", step, err)
	}
	n, err := c.waiter.Poll(ctx, c.scq, c.wc)
	if err != nil {
		return fmt.Errorf("perftest rdma_cm %s: send: %w", step, err)
	}
	if n != 1 || c.wc[0].Status != verbs.Success {
		return fmt.Errorf("perftest rdma_cm %s: send completed with %v", step, c.wc[0].Status)
	}
	return nil
}

// recv waits for one message of len(b) bytes, copies it and posts the
// next receive.
func (c *cmExchange) recv(ctx context.Context, step string, b []byte) error {
	n, err := c.waiter.Poll(ctx, c.rcq, c.wc)
	if err != nil {
		return fmt.Errorf("perftest rdma_cm %s: receive: %w", step, err)
	}
	w := &c.wc[0]
	if n != 1 || w.Status != verbs.Success {
		return fmt.Errorf("perftest rdma_cm %s: receive completed with %v", step, w.Status)
	}
	if int(w.ByteLen) != len(b) {
		return fmt.Errorf("perftest rdma_cm %s: expected a %d-byte message, got %d bytes", step, len(b), w.ByteLen)
	}
	copy(b, c.buf[:len(b)])
	if err := c.qp.PostRecv(c.recvWR); err != nil {
		return fmt.Errorf("perftest rdma_cm %s: post receive: %w", step, err)
	}
	return nil
}

// answered reports whether the server's answer to a send that failed has
// arrived, and takes it into b. The server answers only what it has
// read, so an answer means the send arrived and only its ACK was lost.
// After the close handshake the server then disconnects at once, and
// its DREQ flushes the send before a retry could be ACKed.
func (c *cmExchange) answered(b []byte) bool {
	if c.rcq.Poll(c.wc) != 1 {
		return false
	}
	w := &c.wc[0]
	if w.Status != verbs.Success || int(w.ByteLen) != len(b) {
		return false
	}
	copy(b, c.buf[:len(b)])
	return true
}

// exchange moves one message each way: the client sends first.
func (c *cmExchange) exchange(ctx context.Context, step string, out, in []byte) error {
	if c.role == oob.Client {
		if err := c.send(ctx, step, out); err != nil {
			if c.answered(in) {
				return nil
			}
			return err
		}
		return c.recv(ctx, step, in)
	}
	if err := c.recv(ctx, step, in); err != nil {
		return err
	}
	return c.send(ctx, step, out)
}

// ExchangeVersions is exchange_versions over the comm connection.
func (c *cmExchange) ExchangeVersions(ctx context.Context) (oob.Compat, error) {
	var out, in [oob.VersionLen]byte
	if err := oob.EncodeVersion(out[:], oob.PerftestVersion); err != nil {
		return oob.Compat{}, err
	}
	if err := c.exchange(ctx, "exchange_versions", out[:], in[:]); err != nil {
		return oob.Compat{}, err
	}
	v, err := oob.ParseVersion(in[:])
	if err != nil {
		return oob.Compat{}, err
	}
	c.compat = oob.CompatFor(v)
	if c.compat.Number < oob.MinPeerVersion {
		return c.compat, fmt.Errorf("%w: peer version %q, want %v or later", oob.ErrVersion, v, oob.MinPeerVersion)
	}
	return c.compat, nil
}

// CheckSysData is check_sys_data over the comm connection.
func (c *cmExchange) CheckSysData(ctx context.Context, local oob.SysData) (oob.SysData, error) {
	if !c.compat.SysData {
		return local, nil
	}
	var out, in [2 * oob.SysDataLen]byte
	if err := local.Encode(out[:]); err != nil {
		return oob.SysData{}, err
	}
	if err := c.exchange(ctx, "check_sys_data", out[:4], in[:4]); err != nil {
		return oob.SysData{}, err
	}
	if err := c.exchange(ctx, "check_sys_data", out[4:], in[4:]); err != nil {
		return oob.SysData{}, err
	}
	remote, err := oob.ParseSysData(in[:])
	if err != nil {
		return oob.SysData{}, err
	}
	return local.Agree(remote), nil
}

// CheckMTU is check_mtu over the comm connection.
func (c *cmExchange) CheckMTU(ctx context.Context, local bth.MTU) (bth.MTU, error) {
	n := c.compat.MTULen
	if n == 0 {
		return local, nil
	}
	var out, in [oob.MTULenOld]byte
	if err := oob.EncodeMTU(out[:n], local); err != nil {
		return 0, err
	}
	if err := c.exchange(ctx, "check_mtu", out[:n], in[:n]); err != nil {
		return 0, err
	}
	remote, err := oob.ParseMTU(in[:n])
	if err != nil {
		return 0, err
	}
	return oob.AgreeMTU(local, remote), nil
}

// HandShake is one hand_shake of perftest's 56-byte entries.
func (c *cmExchange) HandShake(ctx context.Context, local oob.PerftestDest) (oob.PerftestDest, error) {
	return c.handShake(ctx, "hand_shake", local)
}

func (c *cmExchange) handShake(ctx context.Context, step string, local oob.PerftestDest) (oob.PerftestDest, error) {
	var out, in [oob.PerftestDestCMLen]byte
	if err := local.EncodeCM(out[:], c.gidIndex); err != nil {
		return oob.PerftestDest{}, err
	}
	if err := c.exchange(ctx, step, out[:], in[:]); err != nil {
		return oob.PerftestDest{}, err
	}
	d, _, err := oob.ParsePerftestDestCM(in[:])
	if err != nil {
		return oob.PerftestDest{}, err
	}
	if !c.hasFirst {
		c.first, c.hasFirst = local, true
	}
	return d, nil
}

// ExchangeDests hand-shakes each QP's entry in turn.
func (c *cmExchange) ExchangeDests(ctx context.Context, local []oob.PerftestDest) ([]oob.PerftestDest, error) {
	remote := make([]oob.PerftestDest, len(local))
	for i := range local {
		d, err := c.handShake(ctx, "hand_shake (QP "+strconv.Itoa(i)+")", local[i])
		if err != nil {
			return nil, err
		}
		remote[i] = d
	}
	c.first, c.hasFirst = local[0], true
	return remote, nil
}

// Barrier is perftest's barrier: a handshake of the first entry.
func (c *cmExchange) Barrier(ctx context.Context) error {
	_, err := c.handShake(ctx, "barrier", c.first)
	return err
}

// ExchangeBWReports is xchg_bw_reports, field by field.
func (c *cmExchange) ExchangeBWReports(ctx context.Context, local oob.BWReport) (oob.BWReport, error) {
	var out, in [9 * oob.ReportFieldLen]byte
	n, err := local.Encode(out[:], c.compat, false)
	if err != nil {
		return oob.BWReport{}, err
	}
	off := 0
	for _, size := range oob.BWReportFields(c.compat, false) {
		if err := c.exchange(ctx, "xchg_bw_reports", out[off:off+size], in[off:off+size]); err != nil {
			return oob.BWReport{}, err
		}
		off += size
	}
	return oob.ParseBWReport(in[:n], c.compat, false)
}

// CloseConnection is ctx_close_connection over rdma_cm: a handshake and
// no "done".
func (c *cmExchange) CloseConnection(ctx context.Context) error {
	_, err := c.handShake(ctx, "close_connection handshake", c.first)
	return err
}
