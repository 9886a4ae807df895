package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The device cases: unmodified C programs (perftest, librdmacm's rping)
// on two goroce devices (roce device: goroce0 on 127.0.0.1 and goroce1 on
// 127.0.0.2, each its own process, as two hosts' rxe0 would be) through
// libgoroce, against roce perf and roce rping between two processes in
// the same rounds: what running on the device costs a C program, beside
// the engine linked into a Go program. A latency case's CPU time counts
// the devices' processes too.

// devRocePort is the devices' RoCE port, away from the one roce perf's
// processes bind in the same rounds.
const devRocePort = "47932"

// tcpPortNum is tcpPort, the exchange's port.
var tcpPortNum, _ = strconv.Atoi(tcpPort)

// devices are the two devices and what programs need to reach them.
type devices struct {
	env  []string // LD_PRELOAD and GOROCE_DIR
	dir  string
	cmds []*exec.Cmd
}

// deviceCases runs the device cases, or says why they cannot run here
// (no perftest, no C compiler or headers for libgoroce).
func (b *bencher) deviceCases(ctx context.Context) error {
	d, err := b.startDevices(ctx)
	if err != nil {
		fmt.Fprintf(b.out, "\ndevice cases skipped: %v\n", err)
		return nil
	}
	defer d.stop()
	fmt.Fprintf(b.out, "\nunmodified C programs on two goroce devices (roce device, goroce0 on 127.0.0.1 and goroce1 on 127.0.0.2,\n"+
		"libgoroce preloaded), in rounds with their roce counterparts\n\n")
	fmt.Fprintf(b.out, "%-44s %14s   %-22s %s\n", "device case", "result", "ratio", "target")
	secs := strconv.Itoa(b.secs)
	bw := []bwCase{
		{name: "roce perf write 64 KiB, MTU 4096", pc: b.perf("write", "-s", "65536", "-m", "4096")},
		{name: "ib_write_bw 64 KiB on the device", pc: b.perftest(d, "ib_write_bw", "-s", "65536", "-D", secs),
			rt: &ratio{of: 0, name: "roce perf", min: 0.9}},
		{name: "ib_write_bw -R 64 KiB on the device", pc: b.perftest(d, "ib_write_bw", "-R", "-s", "65536", "-D", secs),
			rt: &ratio{of: 1, name: "without -R", min: 0.9}},
	}
	_, rstreamErr := exec.LookPath("rstream")
	if rstreamErr == nil {
		count := b.rstreamCount()
		bw = append(bw,
			bwCase{name: "roce rstream 64 KiB writes", pc: b.rstream("-S", "65536", "-C", count)},
			bwCase{name: "rstream 64 KiB writes on the device", pc: b.rstreamDev(d, "-S", "65536", "-C", count),
				rt: &ratio{of: len(bw), name: "roce rstream", min: 0.9}})
	}
	if err := b.bw(ctx, bw); err != nil {
		return err
	}
	n := strconv.Itoa(b.iters)
	lat := []latCase{
		{name: "roce perf send --lat 2 B", pc: b.perfLat("send"), msgs: 2},
		{name: "ib_send_lat 2 B on the device", pc: b.perftestLat(d, "ib_send_lat", "-s", "2", "-n", n), msgs: 2,
			rt: &latRatio{of: 0, name: "roce perf", max: 1.5}},
		{name: "roce perf write --lat 2 B", pc: b.perfLat("write"), msgs: 2},
		// ib_write_lat spins on the last byte of its buffer, which the
		// device writes: its polls never reach libgoroce, which cannot
		// give the device its turn, and on two cores two spinning
		// programs and two devices share them.
		{name: "ib_write_lat 2 B on the device", pc: b.perftestLat(d, "ib_write_lat", "-s", "2", "-n", n), msgs: 2,
			rt: &latRatio{of: 2, name: "roce perf", info: true}},
	}
	if err := b.lat(ctx, lat); err != nil {
		return err
	}
	count := strconv.Itoa(max(b.iters/10, 100))
	perPing := func(po pairOut) (float64, error) {
		return float64(po.wall.Microseconds()) / float64(max(b.iters/10, 100)), nil
	}
	rping := []rsLatCase{
		{name: "roce rping, per ping", pc: b.rping(nil, count), value: perPing, of: -1, short: "roce rping"},
		{name: "rping on the device, per ping", pc: b.rping(d, count), value: perPing, of: 0, max: 1.5},
	}
	if err := b.rsLatRounds(ctx, rping); err != nil {
		return err
	}
	if rstreamErr != nil {
		return nil
	}
	rs := []string{"-S", "64", "-C", "1", "-I", n}
	return b.rsLatRounds(ctx, []rsLatCase{
		{name: "roce rstream 64 B request/response", pc: b.rstream(rs...), value: rstreamAvg, of: -1, short: "roce rstream"},
		{name: "rstream 64 B req/resp on the device", pc: b.rstreamDev(d, rs...), value: rstreamAvg, of: 0, max: 1.3},
	})
}

// rstreamDev is librdmacm's rstream, a custom test on the devices: the
// server on goroce0, the client on goroce1. Its figures read as
// b.rstream's; it runs line-buffered (stdbuf), so that its header, which
// it prints once it listens, comes through at once.
func (b *bencher) rstreamDev(d *devices, args ...string) pairCmd {
	pc := b.rstream(args...)
	common := append(append([]string{"-oL", "rstream"}, args...), "-p", tcpPort)
	pc.bin, pc.env, pc.devs = "stdbuf", d.env, d
	pc.server = append(slices.Clone(common), "-b", "127.0.0.1")
	pc.client = append(slices.Clone(common), "-s", "127.0.0.1", "-b", "127.0.0.2")
	return pc
}

// startDevices starts goroce0 and goroce1 and builds libgoroce.
func (b *bencher) startDevices(ctx context.Context) (*devices, error) {
	for _, tool := range []string{"ib_write_bw", "ib_send_lat", "ib_write_lat", "rping", "stdbuf"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install perftest rdmacm-utils)", tool)
		}
	}
	lib, err := exec.CommandContext(ctx, b.roce, "device", "--lib").Output()
	if err != nil {
		return nil, fmt.Errorf("roce device --lib: %v (libgoroce needs gcc, libibverbs-dev and librdmacm-dev)", err)
	}
	dir, err := os.MkdirTemp("", "goroce-bench-")
	if err != nil {
		return nil, err
	}
	d := &devices{dir: dir, env: []string{"LD_PRELOAD=" + strings.TrimSpace(string(lib)), "GOROCE_DIR=" + dir}}
	for i, addr := range []string{"127.0.0.1", "127.0.0.2"} {
		if err := d.start(b.roce, "goroce"+strconv.Itoa(i), addr); err != nil {
			d.stop()
			return nil, err
		}
	}
	return d, nil
}

// start starts device name on addr and waits until it serves.
func (d *devices) start(roce, name, addr string) error {
	cmd := exec.Command(roce, "device", "--bind", addr, "--name", name, "--dir", d.dir, "--roce-port", devRocePort)
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("roce device %s: %w", name, err)
	}
	d.cmds = append(d.cmds, cmd)
	ready := make(chan error, 1)
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		var said []string
		for sc.Scan() {
			if strings.Contains(sc.Text(), ", socket ") { // its line once it serves
				ready <- nil
				for sc.Scan() {
				}
				return
			}
			said = append(said, sc.Text())
		}
		ready <- fmt.Errorf("roce device %s ended: %s", name, strings.Join(said, "\n"))
	}()
	select {
	case err := <-ready:
		return err
	case <-time.After(20 * time.Second):
		return fmt.Errorf("roce device %s did not serve within 20 s", name)
	}
}

// stop ends the devices and removes their directory.
func (d *devices) stop() {
	for _, c := range d.cmds {
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(d.dir)
}

// cpu returns the CPU time the devices' processes have used so far, in
// microseconds.
func (d *devices) cpu() float64 {
	var us float64
	for _, c := range d.cmds {
		us += procCPU(c.Process.Pid)
	}
	return us
}

// procCPU is the user and system time of process pid, in microseconds
// (/proc's clock ticks, USER_HZ 100 on Linux).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The fields after the command's name, which may hold blanks:
	// utime and stime are the 14th and 15th of the line.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) * 1e6 / 100
}

// perftest is a perftest bandwidth pair on the devices: the server on
// goroce0, the client on goroce1, reaching the server's exchange at
// 127.0.0.1. Its figure is BW average (MiB/s) in GB/s. The server runs
// line-buffered (stdbuf), so that its "Waiting for client" comes through
// the pipe; it listens after it says so, on TCP or with -R on rdma_cm,
// which the bench cannot see: a -R server is given a moment (perftest
// 4.5's client retries a refused rdma_cm connection into a freed id).
func (b *bencher) perftest(d *devices, tool string, args ...string) pairCmd {
	common := append([]string{"-p", tcpPort}, args...)
	pc := pairCmd{
		bin: "stdbuf", env: d.env, devs: d,
		server: append([]string{"-oL", tool, "-d", "goroce0"}, common...),
		client: append(append([]string{"-oL", tool, "-d", "goroce1"}, common...), "127.0.0.1"),
		ready:  "Waiting for client",
		listen: tcpPortNum,
		parse: func(out []byte) (float64, string, error) {
			f, err := perftestRow(out, 4)
			if err != nil {
				return 0, "", err
			}
			return f[3] * (1 << 20) / 1e9, "", nil
		},
	}
	if slices.Contains(args, "-R") {
		pc.listen, pc.settle = 0, 300*time.Millisecond
	}
	return pc
}

// perftestLat is a perftest latency pair on the devices: its figures are
// t_typical, t_avg and the 99th percentile.
func (b *bencher) perftestLat(d *devices, tool string, args ...string) pairCmd {
	pc := b.perftest(d, tool, args...)
	pc.parse = nil
	pc.lat = func(out []byte) (typ, avg, p99 float64, err error) {
		f, err := perftestRow(out, 8)
		if err != nil {
			return 0, 0, 0, err
		}
		return f[4], f[5], f[7], nil
	}
	return pc
}

// perftestRow returns the numbers of perftest's result row, the first
// line of n or more numbers after its column header (#bytes ...), as
// perftest 4.5 and 25 print it.
func perftestRow(out []byte, n int) ([]float64, error) {
	lines := strings.Split(string(out), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "#bytes") })
	if i < 0 {
		return nil, fmt.Errorf("perftest output has no result table: %s", out)
	}
	for _, l := range lines[i+1:] {
		f := strings.Fields(l)
		if len(f) < n {
			continue
		}
		v := make([]float64, len(f))
		for k, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				v = nil
				break
			}
			v[k] = x
		}
		if v != nil {
			return v, nil
		}
	}
	return nil, fmt.Errorf("perftest output has no result row: %s", out)
}

// rping is a ping-pong of count pings of librdmacm's rping on the
// devices (d), or of roce rping (d nil), timed whole: the figure is the
// client's wall time per ping.
func (b *bencher) rping(d *devices, count string) pairCmd {
	port := tcpPort
	pc := pairCmd{
		server: []string{"-s", "-a", "127.0.0.1", "-p", port, "-C", count},
		client: []string{"-c", "-a", "127.0.0.1", "-I", "127.0.0.2", "-p", port, "-C", count},
		retry:  "RDMA_CM_EVENT_REJECTED",
	}
	if d == nil {
		pc.server = append([]string{"rping"}, append(pc.server, "--roce-port", rocePort)...)
		pc.client = append([]string{"rping"}, append(pc.client, "--roce-port", rocePort)...)
		return pc
	}
	pc.bin, pc.env, pc.devs = "rping", d.env, d
	return pc
}
