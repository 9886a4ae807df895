package rstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/rsocket"
)

// Udpong is roce udpong: librdmacm's udpong, the datagram rsocket
// ping-pong, in either role over rsocket.PacketConn.
var Udpong = &cli.Command{
	UsageLine: "udpong [-s SERVER] [-b ADDR] [-B BYTES] [-C N] [-S BYTES] [-p PORT] [-T s|a|b|n|e]...\n" +
		"            [--transport udp|afpacket] [--dev IFACE] [--pcap FILE] [--roce-port PORT] [--timeout D] [--idle D]",
	Short: udpSummary,
	Long: udpSummary + ", either role, its flags and result lines.\n\n" +
		"Without -s it is the server: it answers every client's messages on -b's address and UDP port\n" +
		"-p (default 7174), printing a line per login, until interrupted (or --idle). With -s SERVER\n" +
		"the client: it logs in, then runs udpong's series, a latency test (each message echoed) of\n" +
		"each size from 64 to 1536 bytes, then a bandwidth test (messages one way, the server counting\n" +
		"them) of each; -S or -C run one custom test instead, a bandwidth test unless -T e. Datagrams\n" +
		"are unreliable: a message not answered within udpong's wait (1 s, 1 ms during a test) is sent\n" +
		"again, and a bandwidth test counts the messages the server received.\n\n",
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &pongOptions{}
		o.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(fs, args); err != nil {
				return err
			}
			return o.main(ctx, env)
		}
	},
}

const udpSummary = "datagram ping-pong over datagram rsockets as librdmacm's udpong does"

// udpong's defaults and message (librdmacm/examples/udpong.c): a message
// is an op, the client's id, a sequence number, a reserved byte and a
// 32-bit big-endian count, then up to 2048 bytes.
const (
	pongPort    = 7174
	pongHdr     = 8
	pongMax     = pongHdr + 2048
	pongCtrl    = 16 // CTRL_MSG_SIZE: login, start and end messages
	pongSockBuf = 1 << 19
)

// udpong's ops.
const (
	pongLogin = iota
	pongStart
	pongData
	pongEcho
	pongEnd
)

// pongSizes are udpong's series sizes.
var pongSizes = []int{1 << 6, 1 << 7, 1<<7 + 1<<6, 1 << 8, 1<<8 + 1<<7, 1 << 9, 1<<9 + 1<<8, 1 << 10, 1<<10 + 1<<9}

// pongHeader is udpong's header line.
var pongHeader = fmt.Sprintf("%-10s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "total", "time", "Gb/sec", "usec/xfer")

// pongOptions are udpong's flags and goroce's additions.
type pongOptions struct {
	server, bind   string
	bufSize, count int
	size, port     int
	sockets, echo  bool
	custom         bool
	dev            cli.ToolDevice
	timeout, idle  time.Duration
	tests          []string
}

func (o *pongOptions) register(fs *cli.FlagSet) {
	fs.SetLayout(cli.FlagTable)
	fs.String(&o.server, "", "the server's address: run as the client (default: the server)", "s").Arg("ADDR")
	fs.String(&o.bind, "", "local address: the server's to serve on, the client's RoCE device's", "b").Arg("ADDR")
	fs.Int(&o.bufSize, 0, "send and receive buffer size, doubled as by setsockopt (default 512 KiB)", "B").Arg("BYTES")
	fs.Int(&o.count, 1000, "messages of a custom test (default 1000)", "C").Arg("N")
	fs.Int(&o.size, 1000, "message size of a custom test, 16 to 2056 (default 1000)", "S").Arg("BYTES")
	fs.Int(&o.port, pongPort, "UDP port (default 7174)", "p").Arg("PORT")
	fs.Var(pongTests{o}, "test option, repeatable: s|socket (kernel UDP sockets), e|echo (a custom\n"+
		"test echoes each message); a|async, b|blocking, n|nonblocking are accepted (Go's calls block)", "T").Arg("OPT")
	fs.Section("goroce's additions:")
	fs.String(&o.bind, "", "the local address (as -b)", "bind").Arg("ADDR")
	o.dev.Register(fs)
	fs.Duration(&o.timeout, 2*time.Minute, "the client fails when a message gets no answer for this long\n"+
		"(udpong sends it again for ever; default 2m)", "timeout").Arg("D")
	fs.Duration(&o.idle, 0, "the server exits after this long without a message (default: never)", "idle").Arg("D")
	fs.Section("Exit status: 0 success, 255 the client could not log in, 2 bad flags, 1 other failures.")
}

// pongTests is -T.
type pongTests struct{ o *pongOptions }

func (t pongTests) String() string {
	if t.o == nil {
		return ""
	}
	return strings.Join(t.o.tests, ",")
}

// Set takes one -T value: a letter or its long name, as udpong does.
func (t pongTests) Set(v string) error {
	t.o.tests = append(t.o.tests, v)
	is := testOption(v)
	switch {
	case is("s", "socket"):
		t.o.sockets = true
	case is("e", "echo"):
		t.o.echo = true
	case is("a", "async"), is("b", "block"), is("n", "nonblock"):
	default:
		return fmt.Errorf("unknown test option %q (want s, a, b, n or e)", v)
	}
	return nil
}

func (o *pongOptions) check(fs *cli.FlagSet, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected argument %q", args[0])
	}
	o.custom = fs.IsSet("C") || fs.IsSet("S")
	switch {
	case o.size < pongCtrl:
		return cli.Usagef("-S %d: size must be at least %d bytes", o.size, pongCtrl)
	case o.size > pongMax:
		return cli.Usagef("-S %d: udpong's messages hold at most %d bytes", o.size, pongMax)
	case o.count < 1:
		return cli.Usagef("-C %d: want 1 or more messages", o.count)
	case o.bufSize < 0 || o.bufSize > maxBuffer:
		return cli.Usagef("-B %d: want 0 (the default) to %d bytes", o.bufSize, maxBuffer)
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p %d: want a port from 1 to 65535", o.port)
	case o.timeout <= 0 || o.idle < 0:
		return cli.Usagef("--timeout takes a positive duration, --idle one of 0 or more")
	case o.server == "" && o.bind == "" && !o.sockets && o.dev.Transport != "afpacket":
		return cli.Usagef("the server needs the address to serve on: -b ADDR")
	}
	return o.dev.Check()
}

// pong is one run of roce udpong: its device (none with -T s), its
// socket, udpong's message buffer (g_msg: answers are read into it, so
// the client keeps the id the server gave it) and the server's counts.
type pong struct {
	o      *pongOptions
	env    *cli.Env
	dev    *roce.Device
	c      net.PacketConn
	server netip.AddrPort
	msg    []byte
	seqno  byte
	id     byte
	counts [256]uint64
}

// main opens the socket and runs the role the flags ask for.
func (o *pongOptions) main(ctx context.Context, env *cli.Env) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	p := &pong{o: o, env: env, msg: make([]byte, pongMax)}
	if err := p.open(ctx); err != nil {
		return err
	}
	defer p.close()
	go func() {
		<-ctx.Done()
		p.c.Close() // ends a read or write under way
	}()
	if o.server == "" {
		return p.serve(ctx)
	}
	return p.client(ctx)
}

// open resolves the addresses and opens the socket: a datagram rsocket
// on the RoCE device, or with -T s a kernel UDP socket.
func (p *pong) open(ctx context.Context) error {
	o := p.o
	local := netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(o.port))
	if o.bind != "" {
		a, err := cli.ResolveAddr(o.bind)
		if err != nil {
			return fmt.Errorf("-b: %w", err)
		}
		local = netip.AddrPortFrom(a, local.Port())
	}
	if o.server != "" {
		a, err := cli.ResolveAddr(o.server)
		if err != nil {
			return fmt.Errorf("-s: %w", err)
		}
		p.server, local = netip.AddrPortFrom(a, uint16(o.port)), netip.AddrPortFrom(local.Addr(), 0)
	}
	if o.sockets {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		p.c = c
		return nil
	}
	dev, err := openDevice(&o.dev, o.bind, o.server != "", p.server.Addr(), 0, p.env)
	if err != nil {
		return err
	}
	p.dev = dev
	buf := 2 * pongSockBuf
	if o.bufSize > 0 {
		buf = max(2*o.bufSize, 4096)
	}
	lc := &rsocket.ListenConfig{Options: rsocket.Options{SendBuffer: buf, RecvBuffer: buf}}
	if p.c, err = lc.ListenPacket(ctx, dev, local); err != nil {
		return fmt.Errorf("rbind: %w", err)
	}
	return nil
}

func (p *pong) close() {
	if p.c != nil {
		p.c.Close()
	}
	if p.dev != nil {
		p.dev.Close()
	}
}

// serve is udpong's svr_run: it answers each message as svr_process does,
// until a send fails, the run is interrupted or --idle passes.
func (p *pong) serve(ctx context.Context) error {
	for {
		if p.o.idle > 0 {
			p.c.SetReadDeadline(time.Now().Add(p.o.idle))
		}
		n, from, err := p.c.ReadFrom(p.msg)
		switch {
		case ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
			return nil
		case err != nil:
			return fmt.Errorf("rrecv: %w", err)
		}
		if err := p.process(p.msg[:n], from); err != nil {
			return err
		}
	}
}

// process handles one message of a client: login (the client gets the
// next id), start (its count is reset), echo (counted and echoed), end
// (answered with its count); data is counted only. A message too short
// for udpong's header is ignored.
func (p *pong) process(m []byte, from net.Addr) error {
	if len(m) < pongHdr {
		return nil
	}
	switch m[0] {
	case pongLogin:
		ip := from.String()
		if u, ok := from.(*net.UDPAddr); ok {
			ip = u.AddrPort().Addr().Unmap().String()
		}
		fmt.Fprintf(p.env.Stdout, "client login from %s\n", ip)
		m[1] = p.id
		p.id++
		p.counts[m[1]] = 0
	case pongStart:
		p.counts[m[1]] = 0
	case pongEcho:
		p.counts[m[1]]++
	case pongEnd:
		binary.BigEndian.PutUint32(m[4:8], uint32(p.counts[m[1]]))
	default:
		p.counts[m[1]]++
		return nil
	}
	if _, err := p.c.WriteTo(m, from); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}
