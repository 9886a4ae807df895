package perf

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// session is one run of roce perf.
type session struct {
	o      *options
	errOut io.Writer // standard error: the connection requests the server refuses
	out    io.Writer
	log    *slog.Logger
	ctx    context.Context
	role   oob.Role

	dev    verbs.Device
	soft   *roce.Device // nil on a libibverbs device
	devNm  string
	pd     verbs.PD
	sendCQ verbs.CQ
	recvCQ verbs.CQ
	qps    []verbs.QP
	mr     verbs.MR
	buf    []byte
	bufSz  int // BUFF_SIZE: each QP's send area and receive area
	mtu    bth.MTU
	sys    oob.SysData
	gidIdx int
	spin   time.Duration
	// progress drives a busy-polled software device's receive path from
	// a thread that spins on memory (write latency); nil otherwise.
	progress func() int
	// progressWait does so outside busy-poll mode, over a link the
	// waiting thread can receive from: it blocks until packets came and
	// were handled on that thread.
	progressWait func(context.Context, time.Time) (int, error)

	local  []oob.PerftestDest
	remote []oob.PerftestDest
	pt     exchanger
	cm     *cmExchange // -R

	result *result
	// passive is what a side that posts nothing (a READ or atomic
	// latency server, a bandwidth server of WRITE or READ) used while its
	// peer's traffic ran.
	passive *usage

	ah       verbs.AH // --mcg: the client's, to the group (mcast.go)
	attached bool     // --mcg: the server's QP is attached to the group
}

// main runs the test within --timeout (and -D), and closes what it
// opened.
func (r *session) main(ctx context.Context) error {
	o := r.o
	if o.backend == "soft" {
		if _, err := o.dev.Config(""); err != nil {
			return err
		}
	} else if !hwverbs.Built {
		return fmt.Errorf("--backend hw: %w", hwverbs.ErrNotBuilt)
	}
	limit := o.timeout + time.Duration(o.duration)*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	r.ctx = ctx
	err := r.run()
	r.mcastLeave() // mcast.go
	r.closeCM()
	if r.dev != nil {
		r.dev.Close()
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (gave up after --timeout %v)", err, limit)
	}
	return err
}

func (r *session) print(format string, args ...any) {
	if !r.o.json {
		fmt.Fprintf(r.out, format, args...)
	}
}

func (r *session) oobConfig() *oob.Config {
	return &oob.Config{Timeout: r.o.timeout, Logger: r.log}
}

func (r *session) run() error {
	o := r.o
	var err error
	r.role = oob.Server
	if o.server != "" {
		r.role = oob.Client
	}
	if o.warnPeak {
		r.print(" WARNING: BW peak won't be measured in this run.\n")
	}
	if err := r.resolveIPv6(); err != nil {
		return err
	}
	closeConn, err := r.openExchange()
	if err != nil {
		return err
	}
	defer closeConn()
	if _, err := r.pt.ExchangeVersions(r.ctx); err != nil {
		return err
	}
	if r.sys, err = r.pt.CheckSysData(r.ctx, oob.DefaultSysData); err != nil {
		return err
	}
	mtu := r.dev.ActiveMTU()
	if o.mtu != 0 {
		if m, _ := bth.MTUAtMost(o.mtu); m < mtu {
			mtu = m
		}
	}
	agreed, err := r.pt.CheckMTU(r.ctx, mtu)
	if err != nil {
		return err
	}
	r.mtu = agreed
	if o.mcg && o.size > r.mtu.Bytes() {
		o.size = r.mtu.Bytes() // a UD message fits the MTU: perftest sends MTU-sized ones
	}
	if err := r.setup(); err != nil {
		return err
	}
	if o.rdmaCM {
		if err := r.connectCM(); err != nil {
			return err
		}
	}
	r.printHeader()
	switch {
	case !o.lat && o.verb != verbSend:
		return r.flowBW()
	case !o.lat:
		return r.flowSendBW()
	case o.verb == verbSend:
		return r.flowSendLat()
	case o.verb == verbWrite:
		return r.flowWriteLat()
	}
	return r.flowReadLat()
}

// openExchange opens the device and the out-of-band exchange: rdma_cm's
// comm connection (-R), or perftest's TCP connection, which tells the
// device's address. closeConn closes the latter.
func (r *session) openExchange() (closeConn func(), err error) {
	o := r.o
	if o.rdmaCM {
		if err := r.openDevice(nil); err != nil {
			return nil, err
		}
		if err := r.openCM(); err != nil {
			return nil, err
		}
		r.pt = r.cm
		return func() {}, nil
	}
	var conn net.Conn
	if r.role == oob.Client {
		hostPort := net.JoinHostPort(o.server, strconv.Itoa(o.port))
		if conn, err = oob.Dial(r.ctx, hostPort, r.oobConfig()); err != nil {
			return nil, cli.DialError(hostPort, perfServer(o), err)
		}
	} else {
		ln, err := cli.ListenTCP(o.port)
		if err != nil {
			return nil, err
		}
		r.print("\n************************************\n* Waiting for client to connect... *\n************************************\n")
		conn, err = oob.Accept(r.ctx, ln, r.oobConfig())
		ln.Close()
		if err != nil {
			return nil, fmt.Errorf("no client connected: %w", err)
		}
	}
	if err := r.openDevice(conn); err != nil {
		conn.Close()
		return nil, err
	}
	r.pt = oob.NewPerftest(conn, r.role, r.oobConfig())
	return func() { conn.Close() }, nil
}

// resolveIPv6 puts the IPv6 address of a SERVER name in its place, with
// --ipv6-addr, as perftest 25 resolves it (getaddrinfo with AF_INET6);
// the checks have refused an IPv4 address.
func (r *session) resolveIPv6() error {
	o := r.o
	if !o.ipv6 || o.server == "" {
		return nil
	}
	if _, err := netip.ParseAddr(o.server); err == nil {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(r.ctx, "ip6", o.server)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("--ipv6-addr: %q has no IPv6 address (leave --ipv6-addr out for IPv4)", o.server)
	}
	o.server = ips[0].String()
	return nil
}

// psn returns a random 24-bit PSN, as lrand48() & 0xffffff does.
func psn() uint32 { return rand.Uint32() & 0xFFFFFF }

// openDevice opens the backend's device: at --bind, or else the address
// routing to the server (client) or the one the client reached (server).
func (r *session) openDevice(conn net.Conn) error {
	o := r.o
	var addr netip.Addr
	var err error
	switch {
	case o.dev.Bind != "":
		if addr, err = cli.ResolveAddr(o.dev.Bind); err != nil {
			return cli.Usagef("--bind: %w", err)
		}
	case o.backend == "hw":
	case r.role == oob.Client:
		if addr, err = cli.RouteSourceOf(o.server); err != nil {
			return err
		}
	case conn != nil:
		addr = cli.LocalAddr(conn)
	}
	if o.backend == "hw" {
		dev, hw, err := o.dev.OpenHW(o.devName, o.gidIdx, addr, r.log)
		if err != nil {
			return err
		}
		r.dev, r.devNm, r.gidIdx, r.spin = dev, hw.Name(), hw.GIDIndex(), -1
		return nil
	}
	cfg, err := o.dev.Config(addr.String())
	if err != nil {
		return err
	}
	soft, err := o.dev.Open(cfg, r.role == oob.Client, r.log)
	if err != nil {
		return err
	}
	r.dev, r.soft, r.devNm, r.spin = soft, soft, soft.Name(), o.dev.BusyPoll
	if r.spin != 0 {
		r.progress = soft.Progress
	} else if _, udp := cfg.Link.(*roce.UDP); (udp || cfg.Link == nil) && cfg.Transport == nil {
		r.progressWait = soft.ProgressWait
	}
	r.gidIdx = max(o.gidIdx, 0)
	return nil
}

// setup makes ctx_init's resources: a PD, the CQs, the QPs in INIT, one
// buffer with a send area and a receive area per QP, registered once,
// and the local handshake entries.
func (r *session) setup() error {
	o := r.o
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	cycle := int(max(r.sys.CycleBuffer, 64))
	r.bufSz = max(o.size, cycle)
	if o.mcg {
		r.bufSz = max(o.size+udAddition, cycle)
	}
	r.buf = make([]byte, 2*o.qps*r.bufSz)
	access := verbs.LocalWrite | verbs.RemoteWrite | verbs.RemoteRead | verbs.RemoteAtomic
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return err
	}
	if r.sendCQ, err = r.dev.CreateCQ(o.txDepth * o.qps); err != nil {
		return err
	}
	r.recvCQ = r.sendCQ
	if o.verb == verbSend {
		if r.recvCQ, err = r.dev.CreateCQ(o.rxDepth * o.qps); err != nil {
			return err
		}
	}
	outReads := 1
	if o.verb == verbRead || o.verb == verbAtomic {
		outReads = softOutReads
		if o.backend == "hw" {
			outReads = hwOutReads
		}
		if o.outReads > 0 {
			outReads = o.outReads
		}
	}
	gid, err := r.dev.GID(0)
	if err != nil {
		return err
	}
	typ := verbs.RC
	if o.mcg {
		typ = verbs.UD
	}
	for i := range o.qps {
		q, err := r.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: r.sendCQ, RecvCQ: r.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: uint32(o.txDepth), MaxRecvWR: uint32(o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		if err := roce.ModifyToInit(q, r.params(nil)); err != nil {
			return err
		}
		r.qps = append(r.qps, q)
		r.local = append(r.local, oob.PerftestDest{OutReads: uint16(outReads), QPN: q.QPN(), PSN: psn(),
			RKey: r.mr.RKey(), VAddr: r.mr.Addr() + uint64((o.qps+i)*r.bufSz), GID: gid})
	}
	if o.mcg {
		return r.mcastSetup()
	}
	return nil
}

// params are the attributes perftest gives its QPs (ctx_modify_qp_to_*):
// remote rights by test, min RNR timer 12, timeout 14, 7 retries, hop
// limit 0xFF, READ/atomic depths from the handshakes.
func (r *session) params(peer *oob.PerftestDest) *roce.ConnParams {
	o := r.o
	c := &roce.ConnParams{MTU: r.mtu, Timeout: qpTimeout, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: minRNRTimer,
		HopLimit: hopLimit, SGIDIndex: 0, MaxRDAtomic: 1, MaxDestRDAtomic: 1}
	switch o.verb {
	case verbWrite:
		c.Access = verbs.RemoteWrite | verbs.LocalWrite
	case verbRead:
		c.Access = verbs.RemoteRead | verbs.LocalWrite
	case verbAtomic:
		c.Access = verbs.RemoteAtomic | verbs.LocalWrite
	case verbSend:
		c.Access = verbs.RemoteWrite | verbs.LocalWrite
	}
	if len(r.local) > 0 {
		c.MaxDestRDAtomic = uint8(max(r.local[0].OutReads, 1))
	}
	if o.mcg {
		c.QKey = mcastQKey
	}
	if peer != nil {
		c.MaxRDAtomic = uint8(max(min(peer.OutReads, 255), 1))
	}
	return c
}

// connect trades the QPs' entries with the peer, then moves QP i to RTR
// towards the peer's entry, and on to RTS for a side that sends
// (ctx_connect: a bandwidth server stays in RTR).
func (r *session) connect() error {
	var err error
	if r.remote, err = r.pt.ExchangeDests(r.ctx, r.local); err != nil {
		return err
	}
	if r.o.rdmaCM { // rdma_cm has connected them
		return nil
	}
	if r.o.mcg {
		return r.mcastConnect()
	}
	rts := r.o.lat || r.role == oob.Client
	for i, q := range r.qps {
		d := &r.remote[i]
		p := r.params(d)
		p.PSN = r.local[i].PSN
		rem := &roce.Remote{QPN: d.QPN, PSN: d.PSN, GID: d.GID}
		if err := roce.ModifyToRTR(q, rem, p); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTR: %w", q.QPN(), err)
		}
		if rts {
			if err := roce.ModifyToRTS(q, p); err != nil {
				return fmt.Errorf("failed to modify QP %d to RTS: %w", q.QPN(), err)
			}
		}
	}
	return nil
}

// perfServer is the command that runs the server a perf client needs.
func perfServer(o *options) string {
	lat := ""
	if o.lat {
		lat = " --lat"
	}
	return "roce perf " + verbNames[o.verb] + lat + " with no address, or " + o.tool()
}
