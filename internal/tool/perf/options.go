package perf

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/perfstat"
)

// check reads the test and the server from args, then applies perftest's
// defaults and dependencies and checks the values as its parser does.
func (o *options) check(fs *cli.FlagSet, args []string) error {
	if len(args) == 0 {
		return cli.Usagef("which test? write, read, send or atomic")
	}
	found := false
	for i, n := range verbNames {
		if args[0] == n {
			o.verb, found = verb(i), true
		}
	}
	if !found {
		return cli.Usagef("unknown test %q (want write, read, send or atomic)", args[0])
	}
	switch len(args) {
	case 1:
	case 2:
		o.server = args[1]
	default:
		return cli.Usagef("one SERVER at most, got %q", args[1:])
	}
	for _, step := range []func(*cli.FlagSet) error{o.checkSize, o.checkIters, o.checkRanges, o.checkDepths} {
		if err := step(fs); err != nil {
			return err
		}
	}
	o.force()
	if o.ipv6 && o.server != "" {
		if a, err := netip.ParseAddr(o.server); err == nil && a.Unmap().Is4() {
			return cli.Usagef("--ipv6-addr: %s is an IPv4 address; give the server's IPv6 address or name, or leave --ipv6-addr out", o.server)
		}
	}
	if err := o.checkMcast(fs); err != nil { // mcast.go
		return err
	}
	if o.rdmaCM && o.backend == "hw" {
		return cli.Usagef("-R needs --backend soft (a libibverbs device's rdma_cm belongs to librdmacm)")
	}
	if o.rdmaCM && o.server == "" && o.dev.Bind == "" {
		return cli.Usagef("a -R server needs --bind: no TCP connection tells it its address")
	}
	return nil
}

// checkSize applies -s and its defaults.
func (o *options) checkSize(*cli.FlagSet) error {
	if o.lat {
		o.size = defSizeLat
	} else {
		o.size = defSizeBW
	}
	if o.verb == verbAtomic {
		o.size = 8
	}
	if o.sizeStr != "" {
		n, err := parseSize(o.sizeStr)
		if err != nil || n < 1 || n > maxSize {
			return cli.Usagef("-s must be 1 to %d bytes (K and M suffixes allowed), not %q", maxSize, o.sizeStr)
		}
		if o.verb == verbAtomic && n != 8 {
			return cli.Usagef("message size cannot be changed for atomic tests")
		}
		o.size = n
	}
	return nil
}

// checkIters applies -n, -D and -f and their defaults, and the busy-poll
// mode of the write latency test.
func (o *options) checkIters(fs *cli.FlagSet) error {
	if !fs.IsSet("n") {
		o.iters = defIters
		if o.verb == verbWrite && !o.lat {
			o.iters = defItersWB
		}
	} else if o.iters < perfstat.MinIters || int64(o.iters) > maxIters {
		return cli.Usagef("-n should be between %d and %d", perfstat.MinIters, maxIters)
	}
	if o.lat && o.verb == verbWrite && o.backend == "soft" && !fs.IsSet("busy-poll") {
		// perftest's write latency test spins on the buffer the peer
		// writes; on the software device, spinning means busy-poll mode,
		// where the spinning thread receives too (--busy-poll 0: sleep).
		o.dev.BusyPoll = time.Millisecond
	}
	if !fs.IsSet("D") {
		if fs.IsSet("f") {
			return cli.Usagef("-f applies to -D only")
		}
		return nil
	}
	if fs.IsSet("n") {
		return cli.Usagef("-n and -D exclude each other")
	}
	if o.duration < 1 {
		return cli.Usagef("-D must be a positive number of seconds")
	}
	if o.margin < 0 {
		o.margin = o.duration / 4
	}
	if o.duration <= 2*o.margin {
		return cli.Usagef("-D must be more than twice the margin (-f %d)", o.margin)
	}
	return nil
}

// checkRanges checks the values that have a range or a test of their own.
func (o *options) checkRanges(fs *cli.FlagSet) error {
	switch {
	case o.port < 1 || o.port > 65535:
		return cli.Usagef("-p must be 1-65535")
	case o.qps < 1 || o.qps > maxQPs:
		return cli.Usagef("-q must be 1 to %d", maxQPs)
	case o.lat && o.qps != 1:
		return cli.Usagef("multiple QPs only available on bw tests")
	case o.backend != "soft" && o.backend != "hw":
		return cli.Usagef("--backend must be soft or hw, not %q", o.backend)
	case o.timeout <= 0:
		return cli.Usagef("--timeout must be positive")
	case fs.IsSet("A") && o.verb != verbAtomic:
		return cli.Usagef("-A applies to the atomic test only")
	case o.atomic != atomicCAS && o.atomic != atomicFetchAdd:
		return cli.Usagef("invalid atomic type %q: choose CMP_AND_SWAP or FETCH_AND_ADD", o.atomic)
	case fs.IsSet("o") && o.verb != verbRead && o.verb != verbAtomic:
		return cli.Usagef("-o applies to the read and atomic tests only")
	case fs.IsSet("o") && (o.outReads < 1 || o.outReads > 255):
		return cli.Usagef("-o must be 1 to 255")
	case fs.IsSet("x") && (o.gidIdx < 0 || o.gidIdx > 64):
		return cli.Usagef("-x should be between 0 and 64")
	}
	if o.mtu != 0 {
		if _, ok := bth.MTUFromBytes(o.mtu); !ok {
			return cli.Usagef("-m must be 256, 512, 1024, 2048 or 4096, not %d", o.mtu)
		}
	}
	return nil
}

// checkDepths applies -t, -r and -Q and their defaults.
func (o *options) checkDepths(fs *cli.FlagSet) error {
	if !fs.IsSet("t") {
		o.txDepth = defTxBW
		if o.lat {
			o.txDepth = defTxLat
		}
	} else if o.txDepth < 1 || o.txDepth > maxTx {
		return cli.Usagef("-t should be between 1 and %d", maxTx)
	}
	if !fs.IsSet("r") {
		o.rxDepth = 1
		if o.verb == verbSend {
			o.rxDepth = defRxSend
		}
	} else if o.rxDepth < 1 || o.rxDepth > maxRx {
		return cli.Usagef("-r should be between 1 and %d", maxRx)
	} else if o.verb != verbSend && o.verb != verbWrite && o.rxDepth > 1 {
		// perftest 25 takes -r for the write tests (their write-with-
		// immediate variant posts receives) and then sets it to 1; 4.5
		// refused it there too.
		return cli.Usagef("on RDMA verbs rx depth can be only 1")
	}
	o.cqModSet = fs.IsSet("Q")
	if !o.cqModSet {
		o.cqMod = defCQMod
	} else if o.cqMod < 1 || o.cqMod > maxCQMod {
		return cli.Usagef("-Q should be between 1 and %d", maxCQMod)
	}
	return nil
}

// force is perftest's force_dependecies. It notes in warnPeak that a
// bandwidth test will not measure its peak, where perftest 25 prints a
// warning of it.
func (o *options) force() {
	if o.verb == verbWrite {
		o.rxDepth = 1
	}
	if o.duration == 0 {
		o.txDepth = min(o.txDepth, o.iters)
		if o.verb == verbSend {
			o.rxDepth = min(o.rxDepth, o.iters)
		}
	} else {
		o.iters = 0
		o.warnPeak = !o.lat
		o.noPeak = true
	}
	if o.size > cqModLimit && !o.cqModSet {
		o.cqMod = 1
	}
	o.cqMod = min(o.cqMod, o.txDepth)
	if o.verb == verbSend && !o.lat && o.server == "" {
		o.warnPeak = o.warnPeak || !o.noPeak
		o.noPeak = true
	}
}
