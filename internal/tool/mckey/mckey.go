// Package mckey is roce mckey: librdmacm's mckey, UD multicast over
// goroce's software device, with mckey's flags and lines. Each of -c
// connections makes a UD QP, joins the group with cm.JoinMulticast (which
// attaches the QP), and then the sender (-s) sends -C messages of -S bytes
// to the group and the receiver waits for as many.
package mckey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Cmd is roce mckey.
var Cmd = &cli.Command{
	UsageLine: "mckey -m ADDR | -M GID -b ADDR [-s] [-b ADDR] [-c N] [-C N] [-S BYTES] [-p PS] [-o]\n" +
		"            [--transport udp|afpacket] [--dev IFACE] [--pcap FILE] [--roce-port PORT] [--pause D] [--timeout D]",
	Short: summary,
	Long: summary + ", either role, its flags and lines.\n\n" +
		"Each of -c connections makes a UD QP and joins the multicast group -m (an IPv4 or IPv6\n" +
		"multicast address; with -M, the group's GID given as an IPv6 address, which needs -b):\n" +
		"over RoCE there is no subnet administrator, so the join attaches the QP to the group and\n" +
		"the device joins the group's address on its link (not for a send-only join, -o). After a\n" +
		"pause of 3 s, as mckey's for the fabric's switches, the sender (-s) sends -C messages of\n" +
		"-S bytes to the group (SEND with immediate, QPN 0xFFFFFF, rdma_cm's Q_Key) and the\n" +
		"receiver waits for as many on each connection; both leave the group. Datagrams are\n" +
		"unreliable and mckey waits for ever: --timeout bounds the wait. Unlike rxe, goroce joins\n" +
		"IPv6 groups too (the kernel's rdma_cm refuses them on RoCEv2). Arguments after the flags\n" +
		"are ignored, as mckey ignores them.\n\n",
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(args); err != nil {
				return err
			}
			return o.main(ctx, env)
		}
	},
}

const summary = "UD multicast as librdmacm's mckey sends and receives it"

// rdma_cm's port spaces (rdma_cma.h).
const (
	psUDP   = 0x0111
	psIPoIB = 0x0002
)

// options are mckey's flags and goroce's additions.
type options struct {
	group, unmapped, bind string
	sender, sendOnly      bool
	noLoopback            bool
	conns, count, size    int
	portSpace             string
	dev                   cli.ToolDevice
	pause, timeout        time.Duration

	addr  netip.Addr // the group's, from -m or -M
	extra []string   // arguments after the flags, which mckey ignores
}

func (o *options) register(fs *cli.FlagSet) {
	fs.SetLayout(cli.FlagTable)
	fs.String(&o.group, "", "multicast address to join (IPv4 224.0.0.0/4 or IPv6 ff00::/8)", "m").Arg("ADDR")
	fs.String(&o.unmapped, "", "the group's GID as an IPv6 address (::ffff:239.255.0.1, ff15::1): replaces -m,\n"+
		"needs -b", "M").Arg("GID")
	fs.Bool(&o.sender, false, "send the messages (default: receive them)", "s")
	fs.String(&o.bind, "", "local address: the RoCE device's (default: the route's to the group)", "b").Arg("ADDR")
	fs.Int(&o.conns, 1, "connections: QPs that each join the group (default 1)", "c").Arg("N")
	fs.Int(&o.count, 10, "messages each connection sends or receives (default 10)", "C").Arg("N")
	fs.Int(&o.size, 100, "message size, at most the device's active MTU (default 100)", "S").Arg("BYTES")
	fs.String(&o.portSpace, "0x111", "rdma_cm port space: 0x111 (UDP, the default; 0x2, IPoIB, is not RoCE's)", "p").Arg("PS")
	fs.Bool(&o.sendOnly, false, "join as a send-only full member: the QP is not attached", "o")
	fs.Bool(&o.noLoopback, false, "join without multicast loopback (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB):\n"+
		"refused: goroce's QPs have no such flag", "l")
	fs.Section("goroce's additions:")
	fs.String(&o.bind, "", "the local address (as -b)", "bind").Arg("ADDR")
	o.dev.Register(fs)
	fs.Duration(&o.pause, 3*time.Second, "pause between the join and the data (mckey's 3 s)", "pause").Arg("D")
	fs.Duration(&o.timeout, time.Minute, "the receiver fails when the messages have not all come after this\n"+
		"long (mckey waits for ever; default 1m)", "timeout").Arg("D")
	fs.Section("Exit status: 0 success, 2 bad flags, 1 other failures.")
}

func (o *options) check(args []string) error {
	o.extra = args
	ps, err := strconv.ParseInt(o.portSpace, 0, 32)
	switch {
	case err != nil:
		return cli.Usagef("-p %q: want a port space number (0x111)", o.portSpace)
	case ps == psIPoIB:
		return cli.Usagef("-p %#x: the IPoIB port space is InfiniBand's; RoCE joins in the UDP one (0x111)", ps)
	case ps != psUDP:
		return cli.Usagef("-p %#x: want the UDP port space, 0x111", ps)
	case o.noLoopback:
		return cli.Usagef("-l: goroce's QPs have no IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: every QP attached " +
			"to the group receives its device's sends to it, the sender's own included")
	case o.conns < 1 || o.conns > 64:
		return cli.Usagef("-c %d: want 1 to 64 connections", o.conns)
	case o.count < 0 || o.count > 1<<15:
		return cli.Usagef("-C %d: want 0 to %d messages", o.count, 1<<15)
	case o.size < 0 || o.size > 4096:
		return cli.Usagef("-S %d: want 0 to 4096 bytes", o.size)
	case o.pause < 0 || o.timeout <= 0:
		return cli.Usagef("--pause takes a duration of 0 or more, --timeout a positive one")
	case o.group == "" && o.unmapped == "":
		return cli.Usagef("the group to join: -m ADDR (or -M GID)")
	case o.unmapped != "" && o.bind == "":
		return cli.Usagef("unmapped multicast address requires binding to source address")
	}
	if o.unmapped != "" {
		g, err := netip.ParseAddr(o.unmapped)
		if err != nil || !g.Is6() {
			return cli.Usagef("-M %q: want a GID as an IPv6 address", o.unmapped)
		}
		o.addr = verbs.AddrFromGID(g.As16())
	} else if o.addr, err = cli.ResolveAddr(o.group); err != nil {
		return cli.Usagef("-m: %w", err)
	}
	if !o.addr.IsMulticast() {
		return cli.Usagef("%v is not a multicast address (224.0.0.0/4 or ff00::/8)", o.addr)
	}
	return o.dev.Check()
}

// node is one connection: mckey's cmatest_node.
type node struct {
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	ah   verbs.AH
	join *cm.Multicast
}

// main runs mckey: open, join, pause, the data, leave.
func (o *options) main(ctx context.Context, env *cli.Env) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	out := env.Stdout
	if len(o.extra) > 0 {
		fmt.Fprintf(env.Stderr, "roce mckey: ignoring %q: mckey takes no arguments besides its flags\n", o.extra)
	}
	role := "server"
	if o.sender {
		role = "client"
	}
	fmt.Fprintf(out, "mckey: starting %s\n", role)
	dev, err := o.open(env)
	if err != nil {
		return err
	}
	defer dev.Close()
	fmt.Fprintln(out, "mckey: joining")
	nodes := make([]*node, o.conns)
	defer func() {
		for _, n := range nodes {
			n.destroy()
		}
	}()
	for i := range nodes {
		if nodes[i], err = o.join(dev, out); err != nil {
			return err
		}
	}
	if o.pause > 0 {
		select {
		case <-time.After(o.pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var runErr error
	if o.count > 0 {
		if o.sender {
			fmt.Fprintln(out, "initiating data transfers")
			runErr = o.sendAll(ctx, nodes)
		} else {
			fmt.Fprintln(out, "receiving data transfers")
			runErr = o.receiveAll(ctx, nodes)
		}
		if runErr == nil {
			fmt.Fprintln(out, "data transfers complete")
		}
	}
	for _, n := range nodes {
		if err := n.join.Leave(); err != nil {
			fmt.Fprintf(env.Stderr, "mckey: failure leaving: %v\n", err)
			runErr = errors.Join(runErr, err)
		}
	}
	fmt.Fprintln(out, "test complete")
	status := 0
	if runErr != nil {
		status = 1
	}
	fmt.Fprintf(out, "return status %d\n", status)
	return runErr
}

// open opens the RoCE device at -b, or at the route's source towards the
// group.
func (o *options) open(env *cli.Env) (*roce.Device, error) {
	def := ""
	if o.bind == "" {
		if a, err := cli.RouteSource(o.addr); err == nil {
			def = a.String()
		}
	}
	df := o.dev.Flags(o.bind)
	df.Net = env.MemNet
	cfg, err := df.Config(def)
	if err != nil {
		return nil, err
	}
	dev, err := df.Open(cfg, false, nil)
	if err != nil {
		return nil, fmt.Errorf("open the RoCE device: %w", err)
	}
	if mtu := dev.ActiveMTU().Bytes(); o.count > 0 && o.size > mtu {
		dev.Close()
		return nil, fmt.Errorf("mckey: message_size %d is larger than active mtu %d", o.size, mtu)
	}
	return dev, nil
}

// join makes one connection's QP and joins it to the group, printing the
// join as mckey's join_handler does; receivers post their receives first.
func (o *options) join(dev *roce.Device, out io.Writer) (*node, error) {
	n := &node{}
	var err error
	if n.pd, err = dev.AllocPD(); err != nil {
		return n, fmt.Errorf("mckey: unable to allocate PD: %w", err)
	}
	depth := max(o.count, 1)
	if n.cq, err = dev.CreateCQ(2 * depth); err != nil {
		return n, fmt.Errorf("mckey: unable to create CQ: %w", err)
	}
	if n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return n, fmt.Errorf("mckey: unable to create QP: %w", err)
	}
	for _, step := range []func() error{
		func() error { return roce.ModifyToInit(n.qp, nil) },
		func() error { return roce.ModifyToRTR(n.qp, nil, nil) },
		func() error { return roce.ModifyToRTS(n.qp, nil) },
	} {
		if err := step(); err != nil {
			return n, fmt.Errorf("mckey: unable to create QP: %w", err)
		}
	}
	if n.mr, err = n.pd.RegMR(make([]byte, o.size+qpGRH), verbs.LocalWrite); err != nil {
		return n, fmt.Errorf("failed to reg MR: %w", err)
	}
	if !o.sender && o.count > 0 {
		wrs := make([]verbs.RecvWR, o.count)
		for i := range wrs {
			wrs[i] = verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: n.mr.Addr(), Length: uint32(o.size + qpGRH), LKey: n.mr.LKey()}}}
		}
		if err := n.qp.PostRecv(wrs); err != nil {
			return n, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	if n.join, err = cm.JoinMulticast(dev, o.addr, &cm.MulticastConfig{QP: n.qp, SendOnly: o.sendOnly}); err != nil {
		return n, fmt.Errorf("mckey: failure joining: %w", err)
	}
	fmt.Fprintf(out, "mckey: joined dgid: %s mlid 0x%x sl %d\n", netip.AddrFrom16(n.join.AH.DGID), 0, n.join.AH.SL)
	if n.ah, err = n.pd.CreateAH(n.join.AH); err != nil {
		return n, fmt.Errorf("mckey: failure creating address handle: %w", err)
	}
	return n, nil
}

// qpGRH is the room for the GRH at the head of a UD receive.
const qpGRH = 40

// sendAll sends -C messages to the group on each connection, SENDs with
// the QP's number as immediate as mckey's, and waits for them to leave
// (mckey's are unsignaled; goroce waits so that the QP is not destroyed
// with sends still queued).
func (o *options) sendAll(ctx context.Context, nodes []*node) error {
	for _, n := range nodes {
		wr := verbs.SendWR{Opcode: verbs.OpSendImm, Flags: verbs.Signaled, Imm: n.qp.QPN(), AH: n.ah,
			RemoteQPN: n.join.QPN, RemoteQKey: n.join.QKey}
		if o.size > 0 {
			wr.SGL = []verbs.SGE{{Addr: n.mr.Addr(), Length: uint32(o.size), LKey: n.mr.LKey()}}
		}
		wrs := make([]verbs.SendWR, o.count)
		for i := range wrs {
			wrs[i] = wr
			wrs[i].ID = uint64(i)
		}
		if err := n.qp.PostSend(wrs); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return o.poll(ctx, nodes, verbs.WCSend, "send")
}

// receiveAll waits for -C messages on each connection.
func (o *options) receiveAll(ctx context.Context, nodes []*node) error {
	return o.poll(ctx, nodes, verbs.WCRecv, "receive")
}

// poll waits for -C completions of kind on each connection, within
// --timeout.
func (o *options) poll(ctx context.Context, nodes []*node, kind verbs.WCOpcode, what string) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	wcs := make([]verbs.WC, 8)
	for i, n := range nodes {
		for done := 0; done < o.count; {
			k := n.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.Success {
					return fmt.Errorf("mckey: failed polling CQ: a %s completed %v", what, wc.Status)
				}
				if wc.Opcode == kind {
					done++
				}
			}
			if k > 0 {
				continue
			}
			if err := n.cq.Wait(ctx); err != nil {
				return fmt.Errorf("mckey: connection %d: %d of %d messages %sd in %v: %w", i, done, o.count,
					what, o.timeout, err)
			}
		}
	}
	return nil
}

// destroy frees what the connection made, the join's QP after the join.
func (n *node) destroy() {
	if n == nil {
		return
	}
	if n.ah != nil {
		n.ah.Destroy()
	}
	if n.qp != nil {
		n.qp.Destroy()
	}
	if n.cq != nil {
		n.cq.Destroy()
	}
	if n.mr != nil {
		n.mr.Dereg()
	}
	if n.pd != nil {
		n.pd.Dealloc()
	}
}
