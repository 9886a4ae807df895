package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// pingpongUsage is the synopsis of roce pingpong.
const pingpongUsage = "[--uc|--ud|--srq] [-s SIZE] [-n ITERS] [-m MTU] [-p PORT] [-g GIDIDX] [-r RXDEPTH] " +
	"[-q NUM_QP] [-l SL] [-e] [-c] [--bind ADDR] [--transport udp|afpacket] [--timeout D] [-v] [SERVER]"

// ppMode is which of rdma-core's example programs pingpong plays.
type ppMode int

const (
	ppRC ppMode = iota
	ppUC
	ppUD
	ppSRQ
)

func (m ppMode) tool() string {
	return [...]string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"}[m]
}

// Constants of libibverbs/examples (rdma-core v44).
const (
	ppRecvWRID   = 1
	ppSendWRID   = 2
	ppPort       = 18515
	ppMaxQP      = 256 // MAX_QP of ibv_srq_pingpong: entries on the wire
	ppUDQKey     = 0x11111111
	ppGRH        = 40 // the GRH area before a UD receive's payload
	ppHopLimit   = 1  // the examples' address vectors
	ppMinRNR     = 12
	ppTimeout    = 14
	ppRetries    = 7
	ppDefaultDep = 500
)

// ppOptions are pingpong's flags.
type ppOptions struct {
	mode     ppMode
	port     int
	ibDev    string
	ibPort   int
	size     int
	mtu      int
	rxDepth  int
	iters    int
	sl       int
	events   bool
	gidIdx   int
	chk      bool
	numQP    int
	timeout  time.Duration
	dev      devFlags
	server   string
	mtuValue roce.MTU
}

// runPingpong is the pingpong command: ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong or ibv_srq_pingpong in either role, over goroce's
// software device, speaking their TCP exchange (port 18515) and their
// traffic so that either end can be the real tool. Without SERVER it
// serves one client and exits.
func runPingpong(args []string, stdout, stderr io.Writer) int {
	oneProc()
	return pingpongMain(args, stdout, stderr, nil)
}

func pingpongMain(args []string, stdout, stderr io.Writer, env *toolEnv) int {
	return toolCommand("pingpong", pingpongUsage, pingpongHelp, parsePingpong, args, stdout, stderr, env)
}

const pingpongHelp = `Runs rdma-core's ibv_rc_pingpong (default), ibv_uc_pingpong (--uc), ibv_ud_pingpong
(--ud) or ibv_srq_pingpong (--srq), as server (no SERVER argument) or client, over
goroce's software RoCE device. Either end may be the real tool: the TCP exchange on
port 18515, the QP attributes and the order of sends and receives are theirs.
-g, -l and -d are accepted for compatibility and ignored (the device has one GID).
A server without --bind uses the address the client reached it at. Like the C
programs, it runs the Go scheduler on one processor unless GOMAXPROCS is set.`

func parsePingpong(args []string) (*ppOptions, *flag.FlagSet, error) {
	o := &ppOptions{}
	fs := newFlagSet("pingpong")
	o.dev.register(fs)
	var uc, ud, srq bool
	fs.BoolVar(&uc, "uc", false, "play ibv_uc_pingpong (UC)")
	fs.BoolVar(&ud, "ud", false, "play ibv_ud_pingpong (UD)")
	fs.BoolVar(&srq, "srq", false, "play ibv_srq_pingpong (RC QPs on a shared receive queue)")
	toolIntFlag(fs, &o.port, ppPort, "TCP `port` of the exchange", "p", "port")
	toolStringFlag(fs, &o.ibDev, "", "IB device `name` (ignored: the software device)", "d", "ib-dev")
	toolIntFlag(fs, &o.ibPort, 1, "IB `port` (only 1)", "i", "ib-port")
	toolIntFlag(fs, &o.size, 4096, "message `size` (default 4096; 1024 with --ud)", "s", "size")
	toolIntFlag(fs, &o.mtu, 1024, "path `MTU`: 256, 512, 1024, 2048 or 4096 (not with --ud)", "m", "mtu")
	toolIntFlag(fs, &o.rxDepth, ppDefaultDep, "receives to post at a time", "r", "rx-depth")
	toolIntFlag(fs, &o.iters, 1000, "number of exchanges", "n", "iters")
	toolIntFlag(fs, &o.sl, 0, "service level (ignored)", "l", "sl")
	toolBoolFlag(fs, &o.events, "sleep on CQ events instead of polling", "e", "events")
	toolIntFlag(fs, &o.gidIdx, -1, "local GID `index` (ignored: the device has one GID)", "g", "gid-idx")
	toolBoolFlag(fs, &o.chk, "validate the received buffer", "c", "chk")
	toolIntFlag(fs, &o.numQP, 16, "number of QPs (--srq)", "q", "num-qp")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound on the whole run: waiting for a peer, the exchange, the traffic")
	if err := parseTool(fs, args); err != nil {
		return nil, fs, err
	}
	set := toolFlagsSet(fs)
	n := 0
	for _, b := range []bool{uc, ud, srq} {
		if b {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, fs, usageErr("--uc, --ud and --srq exclude each other")
	case uc:
		o.mode = ppUC
	case ud:
		o.mode = ppUD
	case srq:
		o.mode = ppSRQ
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.server = fs.Arg(0)
	default:
		return nil, fs, usageErr("one SERVER at most, got %q", fs.Args())
	}
	if o.mode == ppUD && !toolAnySet(set, "s", "size") {
		o.size = 1024
	}
	if o.mode == ppUD && toolAnySet(set, "m", "mtu") {
		return nil, fs, usageErr("-m does not apply to --ud (a UD message fits the port MTU)")
	}
	if o.mode != ppSRQ && toolAnySet(set, "q", "num-qp") {
		return nil, fs, usageErr("-q applies to --srq only")
	}
	m, ok := roce.MTUFromBytes(o.mtu)
	if !ok || m.Bytes() != o.mtu {
		return nil, fs, usageErr("-m must be 256, 512, 1024, 2048 or 4096, not %d", o.mtu)
	}
	o.mtuValue = m
	switch {
	case o.port < 1 || o.port > 65535:
		return nil, fs, usageErr("-p must be 1-65535")
	case o.ibPort != 1:
		return nil, fs, usageErr("-i: the software device has port 1 only")
	case o.size < 1 || o.size > 1<<30:
		return nil, fs, usageErr("-s must be 1 to 1 GiB")
	case o.iters < 1:
		return nil, fs, usageErr("-n must be at least 1")
	case o.rxDepth < 1 || o.rxDepth > 1<<15:
		return nil, fs, usageErr("-r must be 1 to 32768")
	case o.timeout <= 0:
		return nil, fs, usageErr("--timeout must be positive")
	}
	if o.mode == ppSRQ {
		if o.numQP < 1 {
			return nil, fs, usageErr("-q must be at least 1")
		}
		if o.numQP > o.rxDepth {
			return nil, fs, usageErr("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", o.rxDepth, o.numQP)
		}
		if o.numQP >= ppMaxQP {
			return nil, fs, usageErr("num_qp %d must be less than %d", o.numQP, ppMaxQP-1)
		}
	} else {
		o.numQP = 1
	}
	return o, fs, nil
}

// pingpong is one run of the command.
type pingpong struct {
	o    *ppOptions
	env  *toolEnv
	out  io.Writer
	log  *slog.Logger
	dev  roce.Device
	soft *roce.SoftDevice
	pd   roce.PD
	cq   roce.CQ
	srq  roce.SRQ
	qps  []roce.QP
	mr   roce.MR
	buf  []byte
	ah   roce.AH

	local   []oob.Dest
	remote  []oob.Dest
	pending []int
	routs   int
	recvWRs []roce.RecvWR
	sendWR  [1]roce.SendWR
	sendSGE []roce.SGE
	waiter  *cqWaiter
}

func (o *ppOptions) run(stdout, stderr io.Writer, env *toolEnv) error {
	if env != nil && env.memNet != nil {
		o.dev.memNet = env.memNet
	}
	if _, err := o.dev.config(""); err != nil { // bad --transport or --roce-port: say so before waiting
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	// Spinning on the CQ pays only when the transport spins too: the
	// engine's completions arrive through the Go scheduler, which an
	// idle-spinning goroutine starves of network readiness.
	p := &pingpong{o: o, env: env, out: stdout, waiter: newCQWaiter(o.dev.busyPoll)}
	if o.dev.trace {
		p.log = newStepLogger(stderr)
	}
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

func (p *pingpong) close() {
	if p.dev != nil {
		p.dev.Close()
	}
}

// oobConfig bounds every step of the TCP exchange by the run's context.
func (p *pingpong) oobConfig() *oob.Config { return &oob.Config{Timeout: p.o.timeout} }

func (p *pingpong) client(ctx context.Context) error {
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
		return fmt.Errorf("couldn't connect to %s: %w", hostPort, err)
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

func (p *pingpong) serve(ctx context.Context) error {
	o := p.o
	ln, err := listenTool(o.port)
	if err != nil {
		return err
	}
	defer ln.Close()
	if o.dev.bind != "" {
		addr, err := resolveAddr(o.dev.bind)
		if err != nil {
			return usageErr("--bind: %v", err)
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
		if err := p.setup(toolConnAddr(conn)); err != nil {
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
func (p *pingpong) localAddr() (netip.Addr, error) {
	if p.o.dev.bind != "" {
		a, err := resolveAddr(p.o.dev.bind)
		if err != nil {
			return a, usageErr("--bind: %v", err)
		}
		return a, nil
	}
	return toolRouteSource(p.o.server)
}

func (p *pingpong) entries() int {
	if p.o.mode == ppSRQ {
		return ppMaxQP
	}
	return 1
}

// setup makes what pp_init_ctx makes, posts rx_depth receives and draws
// the PSNs.
func (p *pingpong) setup(addr netip.Addr) error {
	o := p.o
	var err error
	p.dev, p.soft, err = toolDevice(&o.dev, p.env, addr, o.server != "", p.log)
	if err != nil {
		return err
	}
	if o.mode == ppUD {
		if mtu := p.dev.ActiveMTU().Bytes(); o.size > mtu {
			return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
	}
	if p.pd, err = p.dev.AllocPD(); err != nil {
		return err
	}
	// rc, uc and ud send from and receive into one buffer, as the
	// examples do; srq gives each QP its own send buffer after the shared
	// receive one, since its QPs send while others receive (what is sent
	// never matters but for -c, which only the client's data is checked for).
	n := o.size
	switch o.mode {
	case ppUD:
		n += ppGRH
	case ppSRQ:
		n *= 1 + o.numQP
	}
	p.buf = make([]byte, n)
	for i := range p.buf {
		p.buf[i] = 0x7b
	}
	if p.mr, err = p.pd.RegMR(p.buf, roce.LocalWrite); err != nil {
		return err
	}
	if p.cq, err = p.dev.CreateCQ(o.rxDepth + o.numQP); err != nil {
		return err
	}
	typ := roce.RC
	switch o.mode {
	case ppUC:
		typ = roce.UC
	case ppUD:
		typ = roce.UD
	}
	init := &roce.QPInitAttr{Type: typ, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if o.mode == ppSRQ {
		if p.srq, err = p.pd.CreateSRQ(roce.SRQAttr{MaxWR: uint32(o.rxDepth), MaxSGE: 1}); err != nil {
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
		p.local = append(p.local, oob.Dest{QPN: q.QPN(), PSN: toolPSN(), GID: gid})
	}
	p.pending = make([]int, o.numQP)
	// The receive work requests, all alike: rx_depth of them.
	sge := []roce.SGE{{Addr: p.mr.Addr(), Length: uint32(o.size), LKey: p.mr.LKey()}}
	if o.mode == ppUD {
		sge[0].Length += ppGRH
	}
	p.recvWRs = make([]roce.RecvWR, o.rxDepth)
	for i := range p.recvWRs {
		p.recvWRs[i] = roce.RecvWR{ID: ppRecvWRID, SGL: sge}
	}
	p.sendSGE = make([]roce.SGE, 1)
	if p.routs, err = p.postRecv(o.rxDepth); p.routs < o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d): %w", p.routs, err)
	}
	if o.events {
		p.cq.ReqNotify(false)
	}
	return nil
}

// params are the attributes pp_connect_ctx gives QP i.
func (p *pingpong) params(i int) *roce.ConnParams {
	c := &roce.ConnParams{MTU: p.o.mtuValue, NoAccess: true, Timeout: ppTimeout, RetryCnt: ppRetries,
		RNRRetry: ppRetries, MinRNRTimer: ppMinRNR, MaxRDAtomic: 1, MaxDestRDAtomic: 1, HopLimit: ppHopLimit}
	if p.o.mode == ppUD {
		c.QKey = ppUDQKey
	}
	if i < len(p.local) {
		c.PSN = p.local[i].PSN
	}
	return c
}

// connect moves the QPs to RTR and RTS towards the remote entries (and
// makes the UD address handle).
func (p *pingpong) connect() error {
	for i, q := range p.qps {
		r := &roce.Remote{QPN: p.remote[i].QPN, PSN: p.remote[i].PSN, GID: p.remote[0].GID}
		if err := roce.Connect(q, r, p.params(i)); err != nil {
			return err
		}
	}
	if p.o.mode == ppUD {
		var err error
		p.ah, err = p.pd.CreateAH(roce.AHAttr{DGID: p.remote[0].GID, HopLimit: ppHopLimit, Port: 1})
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
	}
	return nil
}

// postRecv posts n receives and returns how many went in.
func (p *pingpong) postRecv(n int) (int, error) {
	wrs := p.recvWRs[:n]
	var err error
	if p.srq != nil {
		err = p.srq.PostRecv(wrs)
	} else {
		err = p.qps[0].PostRecv(wrs)
	}
	if err != nil {
		var pe *roce.PostError
		if errors.As(err, &pe) {
			return pe.Index, err
		}
		return 0, err
	}
	return n, nil
}

// postSend posts one signaled SEND of size bytes on QP i.
func (p *pingpong) postSend(i int) error {
	o := p.o
	off := uint64(0)
	switch o.mode {
	case ppUD:
		off = ppGRH
	case ppSRQ:
		off = uint64((1 + i) * o.size)
	}
	p.sendSGE[0] = roce.SGE{Addr: p.mr.Addr() + off, Length: uint32(o.size), LKey: p.mr.LKey()}
	p.sendWR[0] = roce.SendWR{ID: ppSendWRID, Opcode: roce.OpSend, Flags: roce.Signaled, SGL: p.sendSGE}
	if o.mode == ppUD {
		w := &p.sendWR[0]
		w.AH, w.RemoteQPN, w.RemoteQKey = p.ah, p.remote[0].QPN, ppUDQKey
	}
	if err := p.qps[i].PostSend(p.sendWR[:]); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// traffic is the examples' main loop: the client sends first; each side
// sends again on a QP once both its last send and a receive have
// completed there, until iters sends and iters receives have completed.
func (p *pingpong) traffic(ctx context.Context) error {
	o := p.o
	for i := range p.pending {
		p.pending[i] = ppRecvWRID
	}
	if o.server != "" {
		for i := range p.qps {
			if o.chk {
				ppMarkPages(p.sendArea(i))
			}
			if err := p.postSend(i); err != nil {
				return err
			}
			p.pending[i] |= ppSendWRID
		}
	}
	start := time.Now()
	nwc := 2
	threshold := 1
	if o.mode == ppSRQ {
		nwc, threshold = o.numQP+o.rxDepth, o.numQP
	}
	wc := make([]roce.WC, nwc)
	rcnt, scnt := 0, 0
	for rcnt < o.iters || scnt < o.iters {
		var ne int
		var err error
		if o.events {
			if err = p.waiter.waitEvent(ctx, p.cq); err == nil {
				p.cq.ReqNotify(false)
				ne = p.cq.Poll(wc)
			}
		} else {
			ne, err = p.waiter.poll(ctx, p.cq, wc)
		}
		if err != nil {
			return fmt.Errorf("%d of %d sends and %d of %d receives completed: %w", scnt, o.iters, rcnt, o.iters, err)
		}
		for k := range wc[:ne] {
			w := &wc[k]
			if w.Status != roce.Success {
				return fmt.Errorf("failed status %s (%d) for wr_id %d", w.Status, int(w.Status), w.ID)
			}
			qi := p.findQP(w.QPN)
			if qi < 0 {
				return fmt.Errorf("couldn't find QPN %06x", w.QPN)
			}
			switch w.ID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				if p.routs--; p.routs <= threshold {
					n, err := p.postRecv(o.rxDepth - p.routs)
					p.routs += n
					if p.routs < o.rxDepth {
						return fmt.Errorf("couldn't post receive (%d): %w", p.routs, err)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", w.ID)
			}
			p.pending[qi] &^= int(w.ID)
			if scnt < o.iters && p.pending[qi] == 0 {
				if err := p.postSend(qi); err != nil {
					return err
				}
				p.pending[qi] = ppRecvWRID | ppSendWRID
			}
		}
	}
	elapsed := time.Since(start)
	// The examples keep microseconds in a float and divide in it.
	usec := float32(elapsed.Microseconds())
	if usec == 0 {
		usec = float32(elapsed.Nanoseconds()) / 1000
	}
	bytes := int64(o.size) * int64(o.iters) * 2
	toolPrintf(p.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	toolPrintf(p.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, float64(usec)/1e6, float64(usec/float32(o.iters)))
	if o.mode == ppRC || o.mode == ppSRQ {
		lingerAfterRun(ctx, p.soft)
	}
	if o.server == "" && o.chk {
		// The server checks what the client sent.
		b := p.recvArea()
		for i := 0; i < len(b); i += os.Getpagesize() {
			if b[i] != 0 {
				toolPrintf(p.out, "invalid data in page %d\n", i/os.Getpagesize())
			}
		}
	}
	return nil
}

// sendArea and recvArea are the payload bytes QP i sends and the bytes
// every receive lands in.
func (p *pingpong) sendArea(i int) []byte {
	switch p.o.mode {
	case ppUD:
		return p.buf[ppGRH:]
	case ppSRQ:
		return p.buf[(1+i)*p.o.size : (2+i)*p.o.size]
	}
	return p.buf
}

func (p *pingpong) recvArea() []byte {
	if p.o.mode == ppUD {
		return p.buf[ppGRH:]
	}
	return p.buf[:p.o.size]
}

// ppMarkPages writes the examples' -c pattern: i/page_size % sizeof(char),
// which is 0, at the start of every page.
func ppMarkPages(b []byte) {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 0
	}
}

func (p *pingpong) findQP(qpn uint32) int {
	for i, q := range p.qps {
		if q.QPN() == qpn {
			return i
		}
	}
	return -1
}

func (p *pingpong) printLocal() {
	sep := ","
	if p.o.mode == ppUD {
		sep = ":" // ibv_ud_pingpong's own spelling
	}
	for _, d := range p.local {
		toolPrintf(p.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			d.LID, d.QPN, d.PSN, sep, netip.AddrFrom16(d.GID))
	}
}

func (p *pingpong) printRemote() {
	for _, d := range p.remote {
		toolPrintf(p.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
	}
}

// toolYield gives the processor to other goroutines between empty polls.
func toolYield() { runtime.Gosched() }
