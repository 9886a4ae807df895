//go:build linux

package ccbench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goroce/goroce/congestion"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// fairLineRate is the line rate of the fair case's devices.
const fairLineRate = 4e9

// The bottleneck of every case but cost and fair: issue 30's.
const (
	linkRate   = "1gbit"
	linkBps    = 1e9
	linkBuffer = 256 << 10
	markAt     = 0.95 // CE past 95 % of the rate, in the marking cases
)

func (b *bench) run(ctx context.Context) error {
	if err := checkHost(); err != nil {
		return err
	}
	defer teardown()
	for _, c := range []struct {
		name string
		f    func(context.Context) error
	}{{"incast", b.incast}, {"latency", b.latency}, {"share", b.share}, {"loss", b.loss}, {"cost", b.cost}, {"fair", b.fair}} {
		if !b.want(c.name) {
			continue
		}
		if err := c.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// startBulk starts n bulk flows of stack st from senders first.. on.
func startBulk(ctx context.Context, st stack, first, n int, v6 bool, hosts *roceHosts, tcp *tcpHost) ([]*bulk, error) {
	var out []*bulk
	for i := first; i < first+n; i++ {
		if st.roce {
			p, err := connectPair(hosts.sends[i], hosts.recv, msgSize, 1)
			if err != nil {
				return out, err
			}
			out = append(out, startRoceBulk(ctx, p, hosts.sends[i]))
			continue
		}
		f, err := startTCPBulk(ctx, tcp, i, st.tcpCC, v6)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// measure samples the flows every step for d, and returns each flow's
// bytes per step, and the queue at each step.
func measure(ctx context.Context, bulks []*bulk, d time.Duration) (perStep [][]uint64, queue []int) {
	last := make([]uint64, len(bulks))
	t := time.NewTicker(step)
	defer t.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		<-t.C
		row := make([]uint64, len(bulks))
		for i, f := range bulks {
			v := f.delivered.Load()
			row[i], last[i] = v-last[i], v
		}
		perStep = append(perStep, row)
		q, _ := backlog()
		queue = append(queue, q)
	}
	return perStep, queue
}

// bulkRun runs n bulk flows of st through the bottleneck c for the run's
// duration and returns their figures (and the series when keep).
func (b *bench) bulkRun(ctx context.Context, c netCfg, st stack, n int, keep bool) (result, *series, error) {
	r := result{Stack: st.name, Senders: n, Marking: c.mark > 0, Loss: c.loss}
	c.v6, c.tcpECN = b.v6, c.mark > 0
	if err := setup(c, n); err != nil {
		return r, nil, err
	}
	defer teardown()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var hosts *roceHosts
	var tcp *tcpHost
	var err error
	if st.roce {
		if hosts, err = openRoce(n, st.mode, b.v6, b.target); err != nil {
			return r, nil, err
		}
		defer hosts.close()
	} else {
		if tcp, err = listenTCP(b.v6); err != nil {
			return r, nil, err
		}
		defer tcp.close()
	}
	bulks, err := startBulk(rctx, st, 0, n, b.v6, hosts, tcp)
	defer func() {
		cancel()
		for _, f := range bulks {
			f.stop()
		}
	}()
	if err != nil {
		return r, nil, err
	}
	perStep, queue := measure(ctx, bulks, time.Duration(b.secs)*time.Second)
	r.Drops = qdiscDrops()
	if c.mark > 0 {
		r.Marked = marked()
	}
	r.Note = ccNote(bulks)
	cancel()
	var delivered, retrans float64
	for _, f := range bulks {
		f.stop()
		delivered += float64(f.delivered.Load())
		retrans += float64(f.retrans) // TCP's, filled by stop
	}
	bulks = nil
	r.SocketDrops = -1
	if st.roce {
		for _, d := range hosts.sends {
			retrans += float64(d.Stats().Engine.Counters.Retransmits) * 1024 // packets of the path MTU
		}
		r.SocketDrops = int(hosts.recv.Stats().Link.RxDropped)
	}
	if delivered > 0 {
		r.Retrans = retrans / delivered
	}
	r.Goodput, r.PerFlow, r.Jain = figures(perStep, b.secs)
	r.Link = r.Goodput / linkBps
	var s *series
	if keep {
		s = &series{Name: st.name, Step: step, Queue: queue}
		for _, row := range perStep {
			var t uint64
			for _, v := range row {
				t += v
			}
			s.Goodput = append(s.Goodput, float64(t)*8/step.Seconds())
		}
	}
	return r, s, nil
}

func (b *bench) incast(ctx context.Context) error {
	b.printf("Incast: N senders into one receiver through %s with a %d KiB buffer, %d s per run\n\n", linkRate, linkBuffer>>10, b.secs)
	b.printf("| senders | ECN marking | stack | goodput (of the link) | Jain (1 s windows) | sent again | qdisc drops | receiver socket drops | marked CE |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, mark := range []bool{false, true} {
		for _, n := range []int{1, 2, 4, 8} {
			if b.senders != 0 && n != b.senders {
				continue
			}
			for _, st := range allStacks {
				if !b.runs(st) {
					continue
				}
				c := netCfg{rate: linkRate, buffer: linkBuffer}
				if mark {
					c.mark, c.frame = markAt, frameSize(st, b.v6)
				}
				keep := n == 8 && !mark && (st.name == goroceCC.name || st.name == goroceOff.name)
				r, s, err := b.bulkRun(ctx, c, st, n, keep)
				if err != nil {
					return err
				}
				r.Case = "incast"
				b.results = append(b.results, r)
				if s != nil {
					b.series = append(b.series, *s)
				}
				b.printf("| %d | %v | %s | %.0f Mbit/s (%.2f) | %.3f | %.2f %% | %d | %s | %s |\n", n, mark, st.name, r.Goodput/1e6, r.Link,
					r.Jain, 100*r.Retrans, r.Drops, countCell(r.SocketDrops), markedCell(mark, r.Marked))
			}
		}
	}
	b.printf("\n")
	return nil
}

// countCell is n, or "-" for a count that does not apply (negative).
func countCell(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// markedCell is the marked CE column's cell.
func markedCell(mark bool, n int) string {
	if !mark {
		return "-"
	}
	return strconv.Itoa(n)
}

// frameSize is the size of st's data packets at the bottleneck's egress
// hook, Ethernet header included: goroce's at MTU 1024 (IP, UDP, BTH and
// ICRC around 1024 bytes of payload), TCP's at the veth's MTU of 1500.
func frameSize(st stack, v6 bool) int {
	if !st.roce {
		return 1514
	}
	if v6 {
		return 14 + 40 + 8 + 12 + 1024 + 4
	}
	return 14 + 20 + 8 + 12 + 1024 + 4
}

func (b *bench) latency(ctx context.Context) error {
	b.printf("Latency beside bulk: a 64-byte ping-pong alone, then beside 4 bulk flows of its stack, %d s each\n\n", b.secs)
	b.printf("| stack | idle p50 | idle p99 | beside bulk p50 | beside bulk p99 | p99 / idle p99 |\n|---|---|---|---|---|---|\n")
	for _, st := range allStacks {
		if !b.runs(st) {
			continue
		}
		r, err := b.latencyRun(ctx, st)
		if err != nil {
			return err
		}
		b.results = append(b.results, r)
		b.printf("| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.1f |\n", st.name, r.IdleP50, r.IdleP99, r.P50, r.P99, r.P99/r.IdleP99)
	}
	b.printf("\n")
	return nil
}

func (b *bench) latencyRun(ctx context.Context, st stack) (result, error) {
	r := result{Case: "latency", Stack: st.name, Senders: 4}
	if err := setup(netCfg{rate: linkRate, buffer: linkBuffer, v6: b.v6}, 5); err != nil {
		return r, err
	}
	defer teardown()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pp *pingPong
	var hosts *roceHosts
	var tcp *tcpHost
	var err error
	if st.roce {
		if hosts, err = openRoce(5, st.mode, b.v6, b.target); err != nil {
			return r, err
		}
		defer hosts.close()
		p, err := connectPair(hosts.sends[4], hosts.recv, 4096, 1)
		if err != nil {
			return r, err
		}
		pp = startRocePingPong(rctx, p)
	} else {
		if tcp, err = listenTCP(b.v6); err != nil {
			return r, err
		}
		defer tcp.close()
		if pp, err = startTCPPingPong(rctx, tcp, 4, st.tcpCC, b.v6); err != nil {
			return r, err
		}
	}
	defer pp.stop()
	half := time.Duration(b.secs) * time.Second / 2
	sleep(ctx, time.Second)
	pp.reset()
	sleep(ctx, half)
	p50, p99, _ := pp.stats()
	r.IdleP50, r.IdleP99 = us(p50), us(p99)
	bulks, err := startBulk(rctx, st, 0, 4, b.v6, hosts, tcp)
	defer func() {
		cancel()
		for _, f := range bulks {
			f.stop()
		}
	}()
	if err != nil {
		return r, err
	}
	sleep(ctx, time.Second)
	pp.reset()
	sleep(ctx, time.Duration(b.secs)*time.Second)
	p50, p99, _ = pp.stats()
	r.P50, r.P99 = us(p50), us(p99)
	return r, nil
}

func (b *bench) share(ctx context.Context) error {
	b.printf("Sharing with TCP: 2 goroce flows and 2 TCP flows on one bottleneck, %d s each; a kind's share is of its fair half\n\n", b.secs)
	b.printf("| goroce | TCP | goroce's share | TCP's share | total (of the link) |\n|---|---|---|---|---|\n")
	for _, g := range []stack{goroceCC, goroceDC, goroceOff} {
		for _, t := range []stack{tcpCubic, tcpBBR} {
			r, err := b.shareRun(ctx, g, t)
			if err != nil {
				return err
			}
			b.results = append(b.results, r)
			b.printf("| %s | %s | %.2f | %.2f | %.2f |\n", g.name, t.name, r.RoceShare, r.TCPShare, r.Link)
		}
	}
	b.printf("\n")
	return nil
}

func (b *bench) shareRun(ctx context.Context, g, t stack) (result, error) {
	r := result{Case: "share", Stack: g.name + "+" + t.name, Senders: 4}
	if err := setup(netCfg{rate: linkRate, buffer: linkBuffer, v6: b.v6}, 4); err != nil {
		return r, err
	}
	defer teardown()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hosts, err := openRoce(2, g.mode, b.v6, b.target)
	if err != nil {
		return r, err
	}
	defer hosts.close()
	tcp, err := listenTCP(b.v6)
	if err != nil {
		return r, err
	}
	defer tcp.close()
	rb, err := startBulk(rctx, g, 0, 2, b.v6, hosts, nil)
	if err != nil {
		return r, err
	}
	tb, err := startBulk(rctx, t, 2, 2, b.v6, nil, tcp)
	all := append(rb, tb...)
	defer func() {
		cancel()
		for _, f := range all {
			f.stop()
		}
	}()
	if err != nil {
		return r, err
	}
	perStep, _ := measure(ctx, all, time.Duration(b.secs)*time.Second)
	r.Goodput, r.PerFlow, r.Jain = figures(perStep, b.secs)
	r.Link = r.Goodput / linkBps
	if len(r.PerFlow) == 4 && r.Goodput > 0 {
		r.RoceShare = (r.PerFlow[0] + r.PerFlow[1]) / (r.Goodput / 2)
		r.TCPShare = (r.PerFlow[2] + r.PerFlow[3]) / (r.Goodput / 2)
	}
	return r, nil
}

func (b *bench) loss(ctx context.Context) error {
	b.printf("Random loss: one flow, %d s each; of its own loss-free goodput, and of TCP cubic's at the same loss\n\n", b.secs)
	b.printf("| loss | stack | goodput (of the link) | of loss-free | of cubic's | sent again |\n|---|---|---|---|---|---|\n")
	base := map[string]float64{}
	for _, l := range []float64{0, 0.001, 0.01, 0.05} {
		got := map[string]float64{}
		var rows []result
		for _, st := range allStacks {
			if !b.runs(st) {
				continue
			}
			r, _, err := b.bulkRun(ctx, netCfg{rate: linkRate, buffer: linkBuffer, loss: l}, st, 1, false)
			if err != nil {
				return err
			}
			r.Case = "loss"
			got[st.name] = r.Goodput
			if l == 0 {
				base[st.name] = r.Goodput
			}
			rows = append(rows, r)
		}
		for _, r := range rows {
			b.results = append(b.results, r)
			b.printf("| %.1f %% | %s | %.0f Mbit/s (%.2f) | %.2f | %.2f | %.2f %% |\n", 100*l, r.Stack, r.Goodput/1e6, r.Link,
				r.Goodput/base[r.Stack], r.Goodput/got[tcpCubic.name], 100*r.Retrans)
		}
	}
	b.printf("\n")
	return nil
}

// cost runs roce perf write between two processes on loopback with --cc
// off, dcqcn (the default) and auto, in alternate rounds, as roce bench
// runs its cases.
func (b *bench) cost(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b.printf("The engine's cost: roce perf write -s 65536 on loopback, %d s a run, 3 rounds each, alternating\n\n", b.secs)
	b.printf("| --cc | MB/s (median of 3) | runs |\n|---|---|---|\n")
	got := map[string][]float64{}
	for round := range 3 {
		for mi, m := range []string{"off", "dcqcn", "auto"} {
			v, err := perfRun(ctx, self, m, b.secs, 18515+round*3+mi)
			if err != nil {
				return err
			}
			got[m] = append(got[m], v)
		}
	}
	for _, m := range []string{"off", "dcqcn", "auto"} {
		v := slices.Clone(got[m])
		slices.Sort(v)
		b.results = append(b.results, result{Case: "cost", Stack: "goroce-" + m, Goodput: v[1] * 8e6, Note: fmt.Sprint(got[m])})
		b.printf("| %s | %.0f | %v |\n", m, v[1], got[m])
	}
	b.printf("\n")
	return nil
}

// perfRun runs one roce perf write with --cc mode, server on 127.0.0.1,
// client on 127.0.0.2, and returns the client's average MB/s.
func perfRun(ctx context.Context, self, mode string, secs, port int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	args := []string{"perf", "write", "-s", "65536", "-D", strconv.Itoa(secs), "-p", strconv.Itoa(port), "--cc", mode, "--json",
		"--roce-port", strconv.Itoa(port + 30000)}
	srv := exec.CommandContext(ctx, self, append(args, "--bind", "127.0.0.1")...)
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out []byte
	for try := 0; ; try++ {
		time.Sleep(time.Second) // the server's listener, on a loaded host
		var stderr strings.Builder
		cl := exec.CommandContext(ctx, self, append(args, "--bind", "127.0.0.2", "127.0.0.1")...)
		cl.Stderr = &stderr
		var err error
		if out, err = cl.Output(); err == nil {
			break
		}
		if try == 2 || ctx.Err() != nil {
			return 0, fmt.Errorf("roce perf --cc %s: %v: %s", mode, err, strings.TrimSpace(stderr.String()))
		}
	}
	var rep struct {
		Results map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, err
	}
	v, _ := rep.Results["bw_avg_mib_s"].(float64)
	return v * (1 << 20) / 1e6, nil
}

// fair runs a 64-byte ping-pong alone, then beside READs of fairSize on
// another QP of the same two devices, on loopback.
func (b *bench) fair(ctx context.Context) error {
	b.printf("Fair turns: a 64-byte ping-pong on one QP, alone and beside READs of %d MiB on another QP of the same devices (loopback, "+
		"line rate %.0f Gbit/s), %d s each\n\n", b.fairSize>>20, fairLineRate/1e9, b.secs)
	open := func(addr string) (*roce.Device, error) {
		// A line rate, as a NIC's port has: READ responses have no window
		// (the requester acknowledges none), and unpaced a 1 GiB READ's
		// responses overrun the requester's socket, on the loopback as on
		// a link; paced at the line rate, as a NIC sends them.
		return roce.Open(&roce.Config{Link: &roce.UDP{Addr: mustAddr(addr), Port: 47911, PeerPort: 47911},
			Congestion: &congestion.Config{LineRate: fairLineRate}})
	}
	a, err := open("127.0.0.1")
	if err != nil {
		return err
	}
	defer a.Close()
	z, err := open("127.0.0.2")
	if err != nil {
		return err
	}
	defer z.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pingP, err := connectPair(a, z, 4096, 1)
	if err != nil {
		return err
	}
	pp := startRocePingPong(rctx, pingP)
	defer pp.stop()
	sleep(ctx, time.Second)
	pp.reset()
	sleep(ctx, time.Duration(b.secs)*time.Second)
	aP50, aP99, an := pp.stats()
	// One buffer serves both ends: the READ's source at z and its sink at a.
	buf := make([]byte, b.fairSize)
	readP, err := connectPair(a, z, 4096, 1)
	if err != nil {
		return err
	}
	src, err := regOn(readP.rpd, buf)
	if err != nil {
		return err
	}
	dst, err := regOn(readP.spd, buf)
	if err != nil {
		return err
	}
	var reads sync.WaitGroup
	var moved uint64
	reads.Go(func() {
		wr := []verbs.SendWR{{Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: []verbs.SGE{{Addr: dst.Addr(), Length: uint32(b.fairSize),
			LKey: dst.LKey()}}, RemoteAddr: src.Addr(), RKey: src.RKey()}}
		for rctx.Err() == nil {
			if readP.sq.PostSend(wr) != nil {
				return
			}
			wc, err := roce.PollOne(rctx, readP.scq)
			if err != nil || wc.Status != verbs.Success {
				return
			}
			moved += uint64(b.fairSize)
		}
	})
	sleep(ctx, time.Second)
	pp.reset()
	start := time.Now()
	sleep(ctx, time.Duration(b.secs)*time.Second)
	bP50, bP99, bn := pp.stats()
	el := time.Since(start)
	cancel()
	reads.Wait()
	r := result{Case: "fair", Stack: "goroce-auto", IdleP50: us(aP50), IdleP99: us(aP99), P50: us(bP50), P99: us(bP99),
		Goodput: float64(moved) * 8 / el.Seconds(), Note: fmt.Sprintf("%d and %d round trips", an, bn)}
	b.results = append(b.results, r)
	b.printf("| | p50 | p99 | round trips |\n|---|---|---|---|\n| alone | %.0f µs | %.0f µs | %d |\n| beside READs | %.0f µs | %.0f µs | %d |\n\n",
		r.IdleP50, r.IdleP99, an, r.P50, r.P99, bn)
	b.printf("p99 beside READs / alone: %.2f; the READs moved %.0f MB/s\n\n", r.P99/r.IdleP99, r.Goodput/8e6)
	return nil
}

// regOn registers buf in pd with every right.
func regOn(pd verbs.PD, buf []byte) (verbs.MR, error) {
	return pd.RegMR(buf, verbs.LocalWrite|verbs.RemoteAccess)
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// ccNote describes the goroce flows' congestion control as the run ends:
// each sending QP's window, smoothed and smallest RTT, and DCQCN rate.
func ccNote(bulks []*bulk) string {
	var parts []string
	for _, f := range bulks {
		if f.qp == nil {
			continue
		}
		c, ok := roce.Congestion(f.qp)
		if !ok {
			continue
		}
		p := fmt.Sprintf("%v window %d rtt %v min %v", c.Mode, c.Window, c.RTT.Round(time.Microsecond), c.MinRTT.Round(time.Microsecond))
		if c.Rate.Active {
			p += fmt.Sprintf(" rate %.0f Mbit/s", c.Rate.Rate/1e6)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
