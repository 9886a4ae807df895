// Package pingpong is roce pingpong: rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong in either role,
// over goroce's software device, speaking their TCP exchange (port 18515)
// and their traffic so that either end can be the real tool. Without
// SERVER it serves one client and exits.
package pingpong

import (
	"context"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
)

// Cmd is roce pingpong.
var Cmd = &cli.Command{
	UsageLine: "pingpong [--uc|--ud|--srq] [-s SIZE] [-n ITERS] [-m MTU] [-p PORT] [-g GIDIDX] [-r RXDEPTH] " +
		"[-q NUM_QP] [-l SL] [-e] [-c] [--bind ADDR] [--transport udp|afpacket] [--timeout D] [-v] [SERVER]",
	Short: "play rdma-core's ibv_{rc,uc,ud,srq}_pingpong, against them or another roce",
	Long: `Runs rdma-core's ibv_rc_pingpong (default), ibv_uc_pingpong (--uc), ibv_ud_pingpong
(--ud) or ibv_srq_pingpong (--srq), as server (no SERVER argument) or client, over
goroce's software RoCE device. Either end may be the real tool: the TCP exchange on
port 18515, the QP attributes and the order of sends and receives are theirs.
-g, -l and -d are accepted for compatibility and ignored (the device has one GID).
A server without --bind uses the address the client reached it at. Like the C
programs, it runs the Go scheduler on one processor unless GOMAXPROCS is set.

`,
	Style:   cli.Getopt,
	OneProc: true,
	Flags: func(fs *cli.FlagSet) cli.Runner {
		o := &options{}
		o.register(fs)
		return func(ctx context.Context, env *cli.Env, args []string) error {
			if err := o.check(fs, args); err != nil {
				return err
			}
			return o.run(ctx, env)
		}
	},
}

// mode is which of rdma-core's example programs pingpong plays.
type mode int

const (
	modeRC mode = iota
	modeUC
	modeUD
	modeSRQ
)

// Constants of libibverbs/examples (rdma-core v44).
const (
	recvWRID   = 1
	sendWRID   = 2
	defPort    = 18515
	maxQP      = 256 // MAX_QP of ibv_srq_pingpong: entries on the wire
	udQKey     = 0x11111111
	grhLen     = 40 // the GRH area before a UD receive's payload
	hopLimit   = 1  // the examples' address vectors
	minRNR     = 12
	qpTimeout  = 14
	retries    = 7
	defRxDepth = 500
)

// options are pingpong's flags.
type options struct {
	mode     mode
	uc       bool
	ud       bool
	srq      bool
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
	dev      cli.DeviceFlags
	server   string
	mtuValue bth.MTU
}

func (o *options) register(fs *cli.FlagSet) {
	o.dev.Register(fs)
	fs.Bool(&o.uc, false, "play ibv_uc_pingpong (UC)", "uc")
	fs.Bool(&o.ud, false, "play ibv_ud_pingpong (UD)", "ud")
	fs.Bool(&o.srq, false, "play ibv_srq_pingpong (RC QPs on a shared receive queue)", "srq")
	fs.Int(&o.port, defPort, "TCP `port` of the exchange", "p", "port")
	fs.String(&o.ibDev, "", "IB device `name` (ignored: the software device)", "d", "ib-dev")
	fs.Int(&o.ibPort, 1, "IB `port` (only 1)", "i", "ib-port")
	fs.Int(&o.size, 4096, "message `size` (default 4096; 1024 with --ud)", "s", "size")
	fs.Int(&o.mtu, 1024, "path `MTU`: 256, 512, 1024, 2048 or 4096 (not with --ud)", "m", "mtu")
	fs.Int(&o.rxDepth, defRxDepth, "receives to post at a time", "r", "rx-depth")
	fs.Int(&o.iters, 1000, "number of exchanges", "n", "iters")
	fs.Int(&o.sl, 0, "service level (ignored)", "l", "sl")
	fs.Bool(&o.events, false, "sleep on CQ events instead of polling", "e", "events")
	fs.Int(&o.gidIdx, -1, "local GID `index` (ignored: the device has one GID)", "g", "gid-idx")
	fs.Bool(&o.chk, false, "validate the received buffer", "c", "chk")
	fs.Int(&o.numQP, 16, "number of QPs (--srq)", "q", "num-qp")
	fs.Duration(&o.timeout, 2*time.Minute, "bound on the whole run: waiting for a peer, the exchange, the traffic", "timeout")
}

// check reads the mode and the server, applies the defaults that depend
// on the mode and checks the values as the examples do.
func (o *options) check(fs *cli.FlagSet, args []string) error {
	if err := o.checkMode(fs, args); err != nil {
		return err
	}
	m, ok := bth.MTUAtMost(o.mtu)
	if !ok || m.Bytes() != o.mtu {
		return cli.Usagef("-m must be 256, 512, 1024, 2048 or 4096, not %d", o.mtu)
	}
	o.mtuValue = m
	switch {
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p must be 1-65535")
	case o.ibPort != 1:
		return cli.Usagef("-i: the software device has port 1 only")
	case o.size < 1 || o.size > 1<<30:
		return cli.Usagef("-s must be 1 to 1 GiB")
	case o.iters < 1:
		return cli.Usagef("-n must be at least 1")
	case o.rxDepth < 1 || o.rxDepth > 1<<15:
		return cli.Usagef("-r must be 1 to 32768")
	case o.timeout <= 0:
		return cli.Usagef("--timeout must be positive")
	}
	if o.mode != modeSRQ {
		o.numQP = 1
		return nil
	}
	switch {
	case o.numQP < 1:
		return cli.Usagef("-q must be at least 1")
	case o.numQP > o.rxDepth:
		return cli.Usagef("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", o.rxDepth, o.numQP)
	case o.numQP >= maxQP:
		return cli.Usagef("num_qp %d must be less than %d", o.numQP, maxQP-1)
	}
	return nil
}

// checkMode reads --uc, --ud and --srq and the SERVER argument.
func (o *options) checkMode(fs *cli.FlagSet, args []string) error {
	n := 0
	for _, b := range []bool{o.uc, o.ud, o.srq} {
		if b {
			n++
		}
	}
	switch {
	case n > 1:
		return cli.Usagef("--uc, --ud and --srq exclude each other")
	case o.uc:
		o.mode = modeUC
	case o.ud:
		o.mode = modeUD
	case o.srq:
		o.mode = modeSRQ
	}
	switch len(args) {
	case 0:
	case 1:
		o.server = args[0]
	default:
		return cli.Usagef("one SERVER at most, got %q", args)
	}
	if o.mode == modeUD && !fs.IsSet("s") {
		o.size = 1024
	}
	if o.mode == modeUD && fs.IsSet("m") {
		return cli.Usagef("-m does not apply to --ud (a UD message fits the port MTU)")
	}
	if o.mode != modeSRQ && fs.IsSet("q") {
		return cli.Usagef("-q applies to --srq only")
	}
	return nil
}
