package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
)

// rpingUsage and rpingSummary are rping's entry in roce help.
const (
	rpingUsage = "-s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d] [-I ADDR] [--bind ADDR]\n" +
		"            [--transport udp|afpacket] [--dev IFACE] [--pcap FILE] [--roce-port PORT] [--mtu BYTES] [--timeout D]"
	rpingSummary = "ping an rdma_cm peer as librdmacm's rping does: RDMA READ and WRITE over a CM connection"
)

// rping's constants (librdmacm/examples/rping.c).
const (
	rpingDefaultPort = 7174
	rpingMinSize     = 26 // sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	rpingMaxSize     = 64*1024 - 1
	rpingSQDepth     = 16
	rpingInfoLen     = 16 // struct rping_rdma_info: be64 buf, be32 rkey, be32 size
	// rpingExitFailure is rping's exit status on failure: it returns -1.
	rpingExitFailure = 255
	// rpingExitInterrupted is the status of an interrupted run, as a
	// shell reports a program killed by SIGINT.
	rpingExitInterrupted = 130
)

// rping's states (enum test_state), whose numbers its messages print.
const (
	rpingConnected     = 5
	rpingReadAdv       = 6
	rpingReadComplete  = 7
	rpingWriteAdv      = 8
	rpingWriteComplete = 9
	rpingDisconnected  = 10
	rpingErrorState    = 11
)

// rpingStateNames are the names rping's messages give the states a test
// waits for.
var rpingStateNames = map[int]string{
	rpingReadAdv:       "RDMA_READ_ADV",
	rpingReadComplete:  "RDMA_READ_COMPLETE",
	rpingWriteAdv:      "RDMA_WRITE_ADV",
	rpingWriteComplete: "RDMA_WRITE_COMPLETE",
}

// rpingOptions are rping's flags and goroce's additions.
type rpingOptions struct {
	server, client   bool
	addr             string // -a: the server's address (client), the address to listen on (server)
	bind             string // --bind / -I: the local address
	port             int
	count, size      int
	verbose, valid   bool
	debug            bool
	transport, iface string
	pcap             string
	rocePort         int
	mtu              int
	timeout          time.Duration
}

// runRping is the rping command: librdmacm's rping in either role, over
// goroce's software device and rdma_cm-compatible connection manager, so
// that it interoperates with rping on Linux (kernel rxe or an RNIC).
//
// The client connects to the server's port (default 7174) and, COUNT times
// (-C, 0 = until interrupted), fills a SIZE-byte buffer (-S, default 64)
// with "rdma-ping-N: " and a rotating alphabet, sends the server its
// {addr, rkey, size} (16 bytes, big-endian) with a SEND, waits for the
// server to RDMA READ it and say go ahead, sends the {addr, rkey, size} of
// a second buffer, and waits for the server to RDMA WRITE the data back
// into it; -V compares the two buffers, -v prints each ping's data. The
// server does the READs and WRITEs and prints "server ping data: ..." with
// -v. Either side ends the connection with a DREQ; rping's messages go to
// standard error as rping prints them.
//
// Exit status: 0 on success, 255 (rping's -1) when the connection or a
// ping fails (a refused connection included), 2 for bad flags (rping
// itself exits 22 there), 130 when interrupted (SIGINT; with -C 0 that is
// how a client stops, after its DREQ). Every wait is bounded by --timeout (default 2m):
// rping would wait forever for a client or a completion.
func runRping(args []string, stdout, stderr io.Writer) int {
	o, err := rpingParse(args)
	if errors.Is(err, errRpingHelp) {
		rpingHelp(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "roce rping: %v\n", err)
		fmt.Fprintf(stderr, "usage: roce rping %s\nRun 'roce rping -h' for details.\n", rpingUsage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r := &rpinger{o: o, stdout: stdout, stderr: stderr}
	err = r.run(ctx)
	var ue *rpingUsageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "roce rping: %v\nusage: roce rping %s\nRun 'roce rping -h' for details.\n", err, rpingUsage)
		return exitUsage
	case err != nil && ctx.Err() != nil:
		// Interrupted (rping -C 0 runs until then): disconnected already.
		fmt.Fprintln(stderr, "roce rping: interrupted")
		return rpingExitInterrupted
	case err != nil:
		fmt.Fprintf(stderr, "roce rping: %v\n", err)
		return rpingExitFailure
	}
	return exitOK
}

var errRpingHelp = errors.New("help")

// rpingUsageError is a flag combination found wrong only once the
// addresses are known: exit status 2.
type rpingUsageError struct{ msg string }

func (e *rpingUsageError) Error() string { return e.msg }

func rpingHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: roce rping %s\n\n%s.\n\n", rpingUsage, rpingSummary)
	fmt.Fprint(w, `  -s              server side
  -c              client side
  -a ADDR         the server's address (client); the address to listen on (server, default any)
  -p PORT         rdma_cm TCP port (default 7174)
  -C COUNT        ping count (default 0: until interrupted)
  -S SIZE         ping data size, 26 to 65535 (default 64)
  -v              print ping data
  -V              validate ping data
  -d              debug: log the connection manager's and the device's steps
  -I ADDR         source address (as --bind)
  -q              accepted for compatibility (the QP is always the program's own)
goroce's additions:
  --bind ADDR     local IP address of the RoCE device (default: the server's -a, or the
                  address that routes to the server for a client; else 127.0.0.1)
  --transport T   udp (default; no privileges) or afpacket (raw frames, CAP_NET_RAW)
  --dev IFACE     network interface of the afpacket transport
  --pcap FILE     record every RoCE packet sent and received
  --roce-port N   UDP port of RoCEv2 on both sides (default 4791)
  --mtu BYTES     largest path MTU to ask for (default: the device's)
  --timeout D     bound on every wait: for a client, a connection, a completion (default 2m)
Exit status: 0 success, 255 failure (as rping), 2 bad flags, 130 interrupted.
`)
}

// rpingParse reads rping's getopt-style flags ("-vV", "-C5", "-C 5") and
// goroce's long ones ("--bind ADDR", "--bind=ADDR").
func rpingParse(args []string) (*rpingOptions, error) {
	o := &rpingOptions{port: rpingDefaultPort, size: 64, transport: "udp", rocePort: 4791, timeout: 2 * time.Minute}
	takesArg := map[byte]bool{'a': true, 'I': true, 'p': true, 'C': true, 'S': true}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case strings.HasPrefix(arg, "--"):
			name, val, hasVal := strings.Cut(arg[2:], "=")
			if name == "help" {
				return nil, errRpingHelp
			}
			known := map[string]*string{"bind": &o.bind, "transport": &o.transport, "dev": &o.iface, "pcap": &o.pcap}
			var dst *string
			var num *int
			switch name {
			case "roce-port":
				num = &o.rocePort
			case "mtu":
				num = &o.mtu
			case "timeout":
			default:
				dst = known[name]
				if dst == nil {
					return nil, fmt.Errorf("unknown flag --%s", name)
				}
			}
			if !hasVal {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("flag --%s needs a value", name)
				}
				i++
				val = args[i]
			}
			switch {
			case dst != nil:
				*dst = val
			case num != nil:
				n, err := strconv.Atoi(val)
				if err != nil {
					return nil, fmt.Errorf("--%s %q: not a number", name, val)
				}
				*num = n
			default:
				d, err := time.ParseDuration(val)
				if err != nil || d <= 0 {
					return nil, fmt.Errorf("--timeout %q: want a positive duration such as 30s", val)
				}
				o.timeout = d
			}
		case len(arg) > 1 && arg[0] == '-':
			for j := 1; j < len(arg); j++ {
				c := arg[j]
				if takesArg[c] {
					val := arg[j+1:]
					if val == "" {
						if i+1 >= len(args) {
							return nil, fmt.Errorf("flag -%c needs a value", c)
						}
						i++
						val = args[i]
					}
					if err := o.setShort(c, val); err != nil {
						return nil, err
					}
					break
				}
				switch c {
				case 's':
					o.server = true
				case 'c':
					o.client = true
				case 'v':
					o.verbose = true
				case 'V':
					o.valid = true
				case 'd':
					o.debug = true
				case 'q':
				case 'h':
					return nil, errRpingHelp
				case 'P':
					return nil, errors.New("-P (persistent server) is not supported; run one server per connection")
				default:
					return nil, fmt.Errorf("unknown flag -%c", c)
				}
			}
		default:
			return nil, fmt.Errorf("unexpected argument %q", arg)
		}
	}
	switch {
	case o.server == o.client:
		return nil, errors.New("choose one side: -s (server) or -c (client)")
	case o.client && o.addr == "":
		return nil, errors.New("the client needs the server's address: -a ADDR")
	case o.transport != "udp" && o.transport != "afpacket":
		return nil, fmt.Errorf("--transport %q: want udp or afpacket", o.transport)
	case o.rocePort < 1 || o.rocePort > 65535:
		return nil, fmt.Errorf("--roce-port %d: want 1 to 65535", o.rocePort)
	case o.mtu != 0:
		if _, ok := mad.MTUFromBytes(o.mtu); !ok {
			return nil, fmt.Errorf("--mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
		}
	}
	return o, nil
}

// setShort sets a short flag that takes a value.
func (o *rpingOptions) setShort(c byte, val string) error {
	num := func() (int, error) {
		n, err := strconv.Atoi(val)
		if err != nil {
			return 0, fmt.Errorf("-%c %q: not a number", c, val)
		}
		return n, nil
	}
	var err error
	switch c {
	case 'a':
		o.addr = val
	case 'I':
		o.bind = val
	case 'p':
		if o.port, err = num(); err == nil && (o.port < 1 || o.port > 65535) {
			err = fmt.Errorf("-p %d: want a port from 1 to 65535", o.port)
		}
	case 'C':
		if o.count, err = num(); err == nil && o.count < 0 {
			err = fmt.Errorf("-C %d: invalid count (want 0 or more)", o.count)
		}
	case 'S':
		if o.size, err = num(); err == nil && (o.size < rpingMinSize || o.size > rpingMaxSize) {
			err = fmt.Errorf("-S %d: invalid size (valid range is %d to %d)", o.size, rpingMinSize, rpingMaxSize)
		}
	}
	return err
}

// rpinger runs one rping session.
type rpinger struct {
	o              *rpingOptions
	stdout, stderr io.Writer

	dev   *roce.SoftDevice
	agent *cm.Agent
	conn  *cm.Conn
	pd    roce.PD
	cq    roce.CQ
	qp    roce.QP
	recv  roce.MR // the peer's rping_rdma_info arrives here
	send  roce.MR // ours goes from here
	rdma  roce.MR // the sink (client) or the READ destination (server)
	start roce.MR // the client's ping data, READ by the server
	state int
	// the peer's buffer, from its last info message
	remoteAddr          uint64
	remoteRKey, remLen  uint32
	wcs                 []roce.WC
	disconnectedPrinted bool
}

// resolve parses an address flag; an empty one is invalid.
func rpingAddr(flag, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		ips, lerr := net.LookupIP(s)
		if lerr != nil || len(ips) == 0 {
			return netip.Addr{}, fmt.Errorf("%s %q: not an IP address or a known host name", flag, s)
		}
		a, _ = netip.AddrFromSlice(ips[0])
	}
	return a.Unmap(), nil
}

func (r *rpinger) run(ctx context.Context) error {
	o := r.o
	remote, err := rpingAddr("-a", o.addr)
	if err != nil {
		return err
	}
	local, err := rpingAddr("--bind", o.bind)
	if err != nil {
		return err
	}
	if !local.IsValid() {
		switch {
		case o.server && remote.IsValid() && !remote.IsUnspecified():
			local = remote
		case o.client:
			local, _ = routeSource(remote)
		case o.transport == "udp":
			// A software device has one address; afpacket takes the
			// interface's.
			return &rpingUsageError{"the server needs the address to serve on: -a ADDR or --bind ADDR"}
		}
	}
	var log *slog.Logger
	if o.debug {
		log = slog.New(slog.NewTextHandler(r.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	open := func(a netip.Addr) (*roce.SoftDevice, error) {
		local = a
		return roce.Open(&roce.Config{Transport: o.transport, Addr: a, Interface: o.iface,
			Port: uint16(o.rocePort), PeerPort: uint16(o.rocePort), Pcap: o.pcap, Logger: log})
	}
	if o.client {
		r.dev, err = openClientAt(o.transport, o.bind, local, open)
	} else {
		r.dev, err = open(local)
	}
	if err != nil {
		hint := ""
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			hint = fmt.Sprintf(" (UDP port %d on %v is taken by another RoCE stack or goroce program: try --roce-port)", o.rocePort, local)
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			hint = fmt.Sprintf(" (%v is not an address of this host: see --bind)", local)
		}
		return fmt.Errorf("open the RoCE device: %w%s", err, hint)
	}
	defer r.dev.Close()
	r.agent, err = cm.NewAgent(r.dev, &cm.Config{Logger: log})
	if err != nil {
		return err
	}
	defer r.agent.Close()
	if err := r.setup(); err != nil {
		return err
	}
	if o.server {
		return r.runServer(ctx, remote)
	}
	return r.runClient(ctx, remote)
}

// setup makes rping's verbs objects: a PD, one CQ of 2 × 16 entries, an
// RC QP (16 sends, 2 receives, one SGE each) in INIT with a receive
// posted, and the buffers.
func (r *rpinger) setup() error {
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	if r.cq, err = r.dev.CreateCQ(rpingSQDepth * 2); err != nil {
		return err
	}
	r.qp, err = r.pd.CreateQP(&roce.QPInitAttr{Type: roce.RC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: roce.QPCap{MaxSendWR: rpingSQDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	if err := r.qp.Modify(&roce.QPAttr{State: roce.StateInit, Port: 1},
		roce.AttrState|roce.AttrPKeyIndex|roce.AttrPort|roce.AttrAccessFlags); err != nil {
		return err
	}
	remote := roce.LocalWrite | roce.RemoteRead | roce.RemoteWrite
	if r.recv, err = r.pd.RegMR(make([]byte, rpingInfoLen), roce.LocalWrite); err != nil {
		return err
	}
	if r.send, err = r.pd.RegMR(make([]byte, rpingInfoLen), 0); err != nil {
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
	r.wcs = make([]roce.WC, 1)
	return r.postRecv()
}

func (r *rpinger) postRecv() error {
	return r.qp.PostRecv([]roce.RecvWR{{SGL: []roce.SGE{{Addr: r.recv.Addr(), Length: rpingInfoLen, LKey: r.recv.LKey()}}}})
}

// postSend sends our rping_rdma_info (sq_wr).
func (r *rpinger) postSend() error {
	return r.post(roce.SendWR{Opcode: roce.OpSend, Flags: roce.Signaled,
		SGL: []roce.SGE{{Addr: r.send.Addr(), Length: rpingInfoLen, LKey: r.send.LKey()}}})
}

// postRDMA READs n bytes of the peer's advertised buffer into ours, or
// WRITEs n bytes of ours into it (rdma_sq_wr).
func (r *rpinger) postRDMA(op roce.WROpcode, n uint32) error {
	return r.post(roce.SendWR{Opcode: op, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: r.rdma.Addr(), Length: n, LKey: r.rdma.LKey()}},
		RemoteAddr: r.remoteAddr, RKey: r.remoteRKey})
}

// post posts one work request, failing as rping says it.
func (r *rpinger) post(wr roce.SendWR) error {
	if err := r.qp.PostSend([]roce.SendWR{wr}); err != nil {
		return fmt.Errorf("post send error %w", err)
	}
	return nil
}

// formatSend puts a buffer's {addr, rkey, size} in the send buffer.
func (r *rpinger) formatSend(mr roce.MR) {
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

func (r *rpinger) pathMTU() roce.MTU {
	m, _ := roce.MTUFromBytes(r.o.mtu)
	return m
}

// testServer is rping_test_server: READ the client's buffer, say go
// ahead, WRITE it back into the client's sink, say go ahead; until the
// client disconnects.
func (r *rpinger) testServer(ctx context.Context) error {
	for {
		if err := r.await(ctx, rpingReadAdv); err != nil {
			return err
		}
		if r.o.debug {
			fmt.Fprintln(r.stdout, "server received sink adv")
		}
		if err := r.postRDMA(roce.OpRead, r.remLen); err != nil {
			return err
		}
		if err := r.await(ctx, rpingReadComplete); err != nil {
			return err
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "server ping data: %s\n", rpingCString(r.rdma.Bytes()))
		}
		if err := r.postSend(); err != nil {
			return err
		}
		if err := r.await(ctx, rpingWriteAdv); err != nil {
			return err
		}
		n := len(rpingCString(r.rdma.Bytes())) + 1
		if n > len(r.rdma.Bytes()) {
			n = len(r.rdma.Bytes())
		}
		if err := r.postRDMA(roce.OpWrite, uint32(n)); err != nil {
			return err
		}
		if err := r.await(ctx, rpingWriteComplete); err != nil {
			return err
		}
		if err := r.postSend(); err != nil {
			return err
		}
	}
}

// await is one sem_wait after which the state must be want. Otherwise it
// prints rping's "wait for X state N" and fails, with errRpingPeerGone
// when the peer disconnected.
func (r *rpinger) await(ctx context.Context, want int) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	if r.state == want {
		return nil
	}
	name := rpingStateNames[want]
	fmt.Fprintf(r.stderr, "wait for %s state %d\n", name, r.state)
	if r.state == rpingDisconnected {
		return errRpingPeerGone
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
		case errors.Is(err, cm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(r.stderr, "cma event RDMA_CM_EVENT_UNREACHABLE, error -110\n")
		}
		return fmt.Errorf("connect error: %w", err)
	}
	return r.runTest(ctx, "client", r.testClient)
}

// errRpingPeerGone is the peer disconnecting while a test waits: the
// normal end of rping's test.
var errRpingPeerGone = errors.New("the peer disconnected")

// runTest runs side's test (rping_test_server or rping_test_client) on
// the connection just made, then disconnects.
func (r *rpinger) runTest(ctx context.Context, side string, test func(context.Context) error) error {
	r.state = rpingConnected
	err := test(ctx)
	r.disconnect()
	if err != nil && !errors.Is(err, errRpingPeerGone) {
		return fmt.Errorf("rping %s failed: %w", side, err)
	}
	return nil
}

// testClient is rping_test_client.
func (r *rpinger) testClient(ctx context.Context) error {
	start := byte(65)
	buf := r.start.Bytes()
	for ping := 0; r.o.count == 0 || ping < r.o.count; ping++ {
		r.state = rpingReadAdv
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
		if err := r.await(ctx, rpingWriteAdv); err != nil {
			return err
		}
		r.formatSend(r.rdma)
		if err := r.postSend(); err != nil {
			return err
		}
		if err := r.await(ctx, rpingWriteComplete); err != nil {
			return err
		}
		if r.o.valid && !bytes.Equal(r.start.Bytes(), r.rdma.Bytes()) {
			fmt.Fprintln(r.stderr, "data mismatch!")
			return errors.New("data mismatch")
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "ping data: %s\n", rpingCString(r.rdma.Bytes()))
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
			r.state = rpingDisconnected
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
		if wc.Status != roce.Success {
			if wc.Status == roce.WRFlushErr {
				continue
			}
			fmt.Fprintf(r.stderr, "cq completion failed status %d\n", wc.Status)
			r.state = rpingErrorState
			return true, fmt.Errorf("completion failed: %v", wc.Status)
		}
		switch wc.Opcode {
		case roce.WCSend:
		case roce.WCWrite:
			r.state = rpingWriteComplete
			return true, nil
		case roce.WCRead:
			r.state = rpingReadComplete
			return true, nil
		case roce.WCRecv:
			if wc.ByteLen != rpingInfoLen {
				fmt.Fprintf(r.stderr, "Received bogus data, size %d\n", wc.ByteLen)
				r.state = rpingErrorState
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
				if r.state <= rpingConnected || r.state == rpingWriteComplete {
					r.state = rpingReadAdv
				} else {
					r.state = rpingWriteAdv
				}
			} else if r.state == rpingReadAdv {
				r.state = rpingWriteAdv
			} else {
				r.state = rpingWriteComplete
			}
			if err := r.postRecv(); err != nil {
				return true, fmt.Errorf("post recv error: %w", err)
			}
			return true, nil
		}
	}
	return false, nil
}

// rpingCString returns b up to its first NUL, as printf's %s prints it.
func rpingCString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
