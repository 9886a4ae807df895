package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/cqwait"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// session is one run of the command.
type session struct {
	o   *options
	out io.Writer
	log *slog.Logger
	dev *roce.Device
	pd  verbs.PD
	cq  verbs.CQ
	srq verbs.SRQ
	qps []verbs.QP
	mr  verbs.MR
	buf []byte
	ah  verbs.AH

	local   []oob.Dest
	remote  []oob.Dest
	pending []int
	routs   int
	recvWRs []verbs.RecvWR
	sendWR  [1]verbs.SendWR
	sendSGE []verbs.SGE
	waiter  *cqwait.Waiter
}

// run plays the example in the role the options say, within --timeout.
func (o *options) run(ctx context.Context, env *cli.Env) error {
	o.dev.Net = env.MemNet
	if _, err := o.dev.Config(""); err != nil { // bad --transport or --roce-port: say so before waiting
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// Spinning on the CQ pays only when the transport spins too: the
	// engine's completions arrive through the Go scheduler, which an
	// idle-spinning goroutine starves of network readiness.
	p := &session{o: o, out: env.Stdout, waiter: cqwait.New(o.dev.BusyPoll), log: o.dev.TraceLogger(env.Stderr)}
	defer p.close()
	var err error
	if o.server != "" {
		err = p.client(ctx)
	} else {
		err = p.serve(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (gave up after --timeout %v)", err, o.timeout)
	}
	return err
}

func (p *session) close() {
	if p.dev != nil {
		p.dev.Close()
	}
}

// oobConfig bounds every step of the TCP exchange by the run's context.
func (p *session) oobConfig() *oob.Config { return &oob.Config{Timeout: p.o.timeout} }

func (p *session) client(ctx context.Context) error {
	o := p.o
	addr, err := p.localAddr()
	if err != nil {
		return err
	}
	if err := p.setup(addr); err != nil {
		return err
	}
	p.printLocal()
	hostPort := net.JoinHostPort(o.server, strconv.Itoa(o.port))
	conn, err := oob.Dial(ctx, hostPort, p.oobConfig())
	if err != nil {
		return cli.DialError(hostPort, "roce pingpong with no address, or ibv_rc_pingpong", err)
	}
	remote, err := oob.PingpongClient(ctx, conn, p.local, p.entries(), p.oobConfig())
	conn.Close()
	if err != nil {
		return fmt.Errorf("couldn't read/write remote address: %w", err)
	}
	p.remote = remote[:o.numQP]
	p.printRemote()
	if err := p.connect(); err != nil {
		return err
	}
	return p.traffic(ctx)
}

func (p *session) serve(ctx context.Context) error {
	o := p.o
	ln, err := cli.ListenTCP(o.port)
	if err != nil {
		return err
	}
	defer ln.Close()
	if o.dev.Bind != "" {
		addr, err := cli.ResolveAddr(o.dev.Bind)
		if err != nil {
			return cli.Usagef("--bind: %w", err)
		}
		if err := p.setup(addr); err != nil {
			return err
		}
		p.printLocal()
	}
	conn, err := oob.Accept(ctx, ln, p.oobConfig())
	if err != nil {
		return fmt.Errorf("no client connected: %w", err)
	}
	defer conn.Close()
	ln.Close()
	if p.dev == nil {
		if err := p.setup(cli.LocalAddr(conn)); err != nil {
			return err
		}
		p.printLocal()
	}
	srv := oob.NewPingpongServer(conn, p.entries(), p.oobConfig())
	remote, err := srv.ReadDests(ctx)
	if err != nil {
		return fmt.Errorf("couldn't read remote address: %w", err)
	}
	p.remote = remote[:o.numQP]
	if err := p.connect(); err != nil {
		return fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if err := srv.Reply(ctx, p.local); err != nil {
		return fmt.Errorf("couldn't send/recv local address: %w", err)
	}
	conn.Close()
	p.printRemote()
	return p.traffic(ctx)
}

// localAddr is the client's device address: --bind, or the source address
// of the route to the server.
func (p *session) localAddr() (netip.Addr, error) {
	if p.o.dev.Bind != "" {
		a, err := cli.ResolveAddr(p.o.dev.Bind)
		if err != nil {
			return a, cli.Usagef("--bind: %w", err)
		}
		return a, nil
	}
	return cli.RouteSourceOf(p.o.server)
}

func (p *session) entries() int {
	if p.o.mode == modeSRQ {
		return maxQP
	}
	return 1
}

// setup makes what pp_init_ctx makes, posts rx_depth receives and draws
// the PSNs.
func (p *session) setup(addr netip.Addr) error {
	o := p.o
	cfg, err := o.dev.Config(addr.String())
	if err != nil {
		return err
	}
	if p.dev, err = o.dev.Open(cfg, o.server != "", p.log); err != nil {
		return err
	}
	if o.mode == modeUD {
		if mtu := p.dev.ActiveMTU().Bytes(); o.size > mtu {
			return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
	}
	if p.pd, err = p.dev.AllocPD(); err != nil {
		return err
	}
	if err := p.setupMemory(); err != nil {
		return err
	}
	if p.cq, err = p.dev.CreateCQ(o.rxDepth + o.numQP); err != nil {
		return err
	}
	if err := p.setupQPs(); err != nil {
		return err
	}
	p.pending = make([]int, o.numQP)
	// The receive work requests, all alike: rx_depth of them.
	sge := []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(o.size), LKey: p.mr.LKey()}}
	if o.mode == modeUD {
		sge[0].Length += grhLen
	}
	p.recvWRs = make([]verbs.RecvWR, o.rxDepth)
	for i := range p.recvWRs {
		p.recvWRs[i] = verbs.RecvWR{ID: recvWRID, SGL: sge}
	}
	p.sendSGE = make([]verbs.SGE, 1)
	if p.routs, err = p.postRecv(o.rxDepth); p.routs < o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d): %w", p.routs, err)
	}
	if o.events {
		p.cq.ReqNotify(false)
	}
	return nil
}

// setupMemory registers the buffer. rc, uc and ud send from and receive
// into one buffer, as the examples do; srq gives each QP its own send
// buffer after the shared receive one, since its QPs send while others
// receive (what is sent never matters but for -c, which only the
// client's data is checked for).
func (p *session) setupMemory() error {
	o := p.o
	n := o.size
	switch o.mode {
	case modeUD:
		n += grhLen
	case modeSRQ:
		n *= 1 + o.numQP
	}
	p.buf = make([]byte, n)
	for i := range p.buf {
		p.buf[i] = 0x7b
	}
	var err error
	p.mr, err = p.pd.RegMR(p.buf, verbs.LocalWrite)
	return err
}

// setupQPs makes the QPs (on an SRQ for --srq) in INIT and their local
// entries.
func (p *session) setupQPs() error {
	o := p.o
	typ := verbs.RC
	switch o.mode {
	case modeUC:
		typ = verbs.UC
	case modeUD:
		typ = verbs.UD
	}
	init := &verbs.QPInitAttr{Type: typ, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	var err error
	if o.mode == modeSRQ {
		if p.srq, err = p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(o.rxDepth), MaxSGE: 1}); err != nil {
			return err
		}
		init.SRQ, init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = p.srq, 0, 0
	}
	gid, err := p.dev.GID(0)
	if err != nil {
		return err
	}
	params := p.params(0)
	for range o.numQP {
		q, err := p.pd.CreateQP(init)
		if err != nil {
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		if err := roce.ModifyToInit(q, params); err != nil {
			return err
		}
		p.qps = append(p.qps, q)
		// A random 24-bit PSN, as lrand48() & 0xffffff draws it.
		p.local = append(p.local, oob.Dest{QPN: q.QPN(), PSN: rand.Uint32() & 0xFFFFFF, GID: gid})
	}
	return nil
}

// params are the attributes pp_connect_ctx gives QP i.
func (p *session) params(i int) *roce.ConnParams {
	c := &roce.ConnParams{MTU: p.o.mtuValue, NoAccess: true, Timeout: qpTimeout, RetryCnt: retries,
		RNRRetry: retries, MinRNRTimer: minRNR, MaxRDAtomic: 1, MaxDestRDAtomic: 1, HopLimit: hopLimit}
	if p.o.mode == modeUD {
		c.QKey = udQKey
	}
	if i < len(p.local) {
		c.PSN = p.local[i].PSN
	}
	return c
}

// connect moves the QPs to RTR and RTS towards the remote entries (and
// makes the UD address handle).
func (p *session) connect() error {
	for i, q := range p.qps {
		r := &roce.Remote{QPN: p.remote[i].QPN, PSN: p.remote[i].PSN, GID: p.remote[0].GID}
		if err := roce.Connect(q, r, p.params(i)); err != nil {
			return err
		}
	}
	if p.o.mode == modeUD {
		var err error
		p.ah, err = p.pd.CreateAH(verbs.AHAttr{DGID: p.remote[0].GID, HopLimit: hopLimit, Port: 1})
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
	}
	return nil
}

// postRecv posts n receives and returns how many went in.
func (p *session) postRecv(n int) (int, error) {
	wrs := p.recvWRs[:n]
	var err error
	if p.srq != nil {
		err = p.srq.PostRecv(wrs)
	} else {
		err = p.qps[0].PostRecv(wrs)
	}
	if err != nil {
		var pe *verbs.PostError
		if errors.As(err, &pe) {
			return pe.Index, err
		}
		return 0, err
	}
	return n, nil
}

// postSend posts one signaled SEND of size bytes on QP i.
func (p *session) postSend(i int) error {
	o := p.o
	off := uint64(0)
	switch o.mode {
	case modeUD:
		off = grhLen
	case modeSRQ:
		off = uint64((1 + i) * o.size)
	}
	p.sendSGE[0] = verbs.SGE{Addr: p.mr.Addr() + off, Length: uint32(o.size), LKey: p.mr.LKey()}
	p.sendWR[0] = verbs.SendWR{ID: sendWRID, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: p.sendSGE}
	if o.mode == modeUD {
		w := &p.sendWR[0]
		w.AH, w.RemoteQPN, w.RemoteQKey = p.ah, p.remote[0].QPN, udQKey
	}
	if err := p.qps[i].PostSend(p.sendWR[:]); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// traffic is the examples' main loop: the client sends first; each side
// sends again on a QP once both its last send and a receive have
// completed there, until iters sends and iters receives have completed.
func (p *session) traffic(ctx context.Context) error {
	o := p.o
	for i := range p.pending {
		p.pending[i] = recvWRID
	}
	if o.server != "" {
		for i := range p.qps {
			if o.chk {
				markPages(p.sendArea(i))
			}
			if err := p.postSend(i); err != nil {
				return err
			}
			p.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	nwc, threshold := 2, 1
	if o.mode == modeSRQ {
		nwc, threshold = o.numQP+o.rxDepth, o.numQP
	}
	wc := make([]verbs.WC, nwc)
	var rcnt, scnt int
	for rcnt < o.iters || scnt < o.iters {
		ne, err := p.poll(ctx, wc)
		if err != nil {
			return fmt.Errorf("%d of %d sends and %d of %d receives completed: %w", scnt, o.iters, rcnt, o.iters, err)
		}
		for k := range wc[:ne] {
			if err := p.complete(&wc[k], threshold, &scnt, &rcnt); err != nil {
				return err
			}
		}
	}
	p.report(time.Since(start))
	if o.mode == modeRC || o.mode == modeSRQ {
		cli.Linger(ctx, p.dev)
	}
	if o.server == "" && o.chk {
		// The server checks what the client sent.
		b := p.recvArea()
		for i := 0; i < len(b); i += os.Getpagesize() {
			if b[i] != 0 {
				fmt.Fprintf(p.out, "invalid data in page %d\n", i/os.Getpagesize())
			}
		}
	}
	return nil
}

// poll waits for completions: by polling, or by sleeping on CQ events
// (-e).
func (p *session) poll(ctx context.Context, wc []verbs.WC) (int, error) {
	if !p.o.events {
		return p.waiter.Poll(ctx, p.cq, wc)
	}
	if err := p.waiter.WaitEvent(ctx, p.cq); err != nil {
		return 0, err
	}
	p.cq.ReqNotify(false)
	return p.cq.Poll(wc), nil
}

// complete handles one completion: a receive reposts receives when few
// are left; a QP whose send and receive have both completed sends again.
func (p *session) complete(w *verbs.WC, threshold int, scnt, rcnt *int) error {
	o := p.o
	if w.Status != verbs.Success {
		return fmt.Errorf("failed status %s (%d) for wr_id %d", w.Status, int(w.Status), w.ID)
	}
	qi := p.findQP(w.QPN)
	if qi < 0 {
		return fmt.Errorf("couldn't find QPN %06x", w.QPN)
	}
	switch w.ID {
	case sendWRID:
		*scnt++
	case recvWRID:
		if p.routs--; p.routs <= threshold {
			n, err := p.postRecv(o.rxDepth - p.routs)
			p.routs += n
			if p.routs < o.rxDepth {
				return fmt.Errorf("couldn't post receive (%d): %w", p.routs, err)
			}
		}
		*rcnt++
	default:
		return fmt.Errorf("completion for unknown wr_id %d", w.ID)
	}
	p.pending[qi] &^= int(w.ID)
	if *scnt < o.iters && p.pending[qi] == 0 {
		if err := p.postSend(qi); err != nil {
			return err
		}
		p.pending[qi] = recvWRID | sendWRID
	}
	return nil
}

// report prints the examples' two summary lines.
func (p *session) report(elapsed time.Duration) {
	o := p.o
	// The examples keep microseconds in a float and divide in it.
	usec := float32(elapsed.Microseconds())
	if usec == 0 {
		usec = float32(elapsed.Nanoseconds()) / 1000
	}
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(p.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(p.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, float64(usec)/1e6, float64(usec/float32(o.iters)))
}

// sendArea and recvArea are the payload bytes QP i sends and the bytes
// every receive lands in.
func (p *session) sendArea(i int) []byte {
	switch p.o.mode {
	case modeUD:
		return p.buf[grhLen:]
	case modeSRQ:
		return p.buf[(1+i)*p.o.size : (2+i)*p.o.size]
	}
	return p.buf
}

func (p *session) recvArea() []byte {
	if p.o.mode == modeUD {
		return p.buf[grhLen:]
	}
	return p.buf[:p.o.size]
}

// markPages writes the examples' -c pattern: i/page_size % sizeof(char),
// which is 0, at the start of every page.
func markPages(b []byte) {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 0
	}
}

func (p *session) findQP(qpn uint32) int {
	for i, q := range p.qps {
		if q.QPN() == qpn {
			return i
		}
	}
	return -1
}

func (p *session) printLocal() {
	sep := ","
	if p.o.mode == modeUD {
		sep = ":" // ibv_ud_pingpong's own spelling
	}
	for _, d := range p.local {
		fmt.Fprintf(p.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			d.LID, d.QPN, d.PSN, sep, netip.AddrFrom16(d.GID))
	}
}

func (p *session) printRemote() {
	for _, d := range p.remote {
		fmt.Fprintf(p.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
	}
}
