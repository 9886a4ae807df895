package perf

// The data paths of roce perf: perftest's run_iter_bw, run_iter_bw_server,
// run_iter_lat_send, run_iter_lat_write and run_iter_lat, with the
// same signaling, counting and timestamps, but posting every work request
// the send queue has room for in one PostSend and polling completions in
// batches. Nothing here allocates per message.

import (
	"fmt"
	"runtime"
	"time"

	"github.com/goroce/goroce/internal/cqwait"
	"github.com/goroce/goroce/internal/perfstat"
	"github.com/goroce/goroce/internal/yield"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/verbs"
)

// pollBatch is how many completions one poll takes (perftest: 16).
const pollBatch = 64

// phase is a duration run's state (perftest's START_STATE ...).
type phase int

const (
	phaseStart phase = iota // warming up: not counted
	phaseSample
	phaseStop // cooling down: not counted
	phaseEnd
)

// phases times a -D run: margin, sample, margin.
type phases struct {
	start          time.Duration // since the run's base time; < 0 until started
	margin, period time.Duration
}

func newPhases(o *options) phases {
	return phases{start: -1, margin: time.Duration(o.margin) * time.Second, period: time.Duration(o.duration) * time.Second}
}

func (p *phases) at(now time.Duration) phase {
	switch {
	case p.start < 0 || now < p.start+p.margin:
		return phaseStart
	case now < p.start+p.period-p.margin:
		return phaseSample
	case now < p.start+p.period:
		return phaseStop
	}
	return phaseEnd
}

// window returns the sample period's bounds.
func (p *phases) window() (time.Duration, time.Duration) {
	return p.start + p.margin, p.start + p.period - p.margin
}

// usage is what a run used: heap allocations and the process's CPU time.
type usage struct {
	allocs uint64
	cpu    perfstat.CPU
}

// sampler samples the allocator and the process's CPU time around the
// traffic.
type sampler struct {
	mallocs uint64
	cpu     perfstat.CPU
}

func (m *sampler) begin() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.mallocs = s.Mallocs
	m.cpu = perfstat.ProcessCPU()
}

func (m *sampler) end() usage {
	cpu := perfstat.ProcessCPU().Sub(m.cpu)
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return usage{allocs: s.Mallocs - m.mallocs, cpu: cpu}
}

// sendArea and recvArea are QP i's halves of the buffer: it sends (and
// reads into) the first, peers write into the second.
func (r *session) sendArea(i int) uint64 { return r.mr.Addr() + uint64(i*r.bufSz) }
func (r *session) recvArea(i int) uint64 { return r.mr.Addr() + uint64((r.o.qps+i)*r.bufSz) }

// sendWR returns the work request QP i posts over and over.
func (r *session) sendWR(i int, sge []verbs.SGE) verbs.SendWR {
	o := r.o
	sge[0] = verbs.SGE{Addr: r.sendArea(i), Length: uint32(o.size), LKey: r.mr.LKey()}
	w := verbs.SendWR{ID: uint64(i), SGL: sge[:1:1], RemoteAddr: r.remote[i].VAddr, RKey: r.remote[i].RKey}
	if o.mcg {
		w.AH, w.RemoteQPN, w.RemoteQKey = r.ah, r.remote[i].QPN, mcastQKey
	}
	switch o.verb {
	case verbSend:
		w.Opcode = verbs.OpSend
	case verbWrite:
		w.Opcode = verbs.OpWrite
	case verbRead:
		w.Opcode = verbs.OpRead
	case verbAtomic:
		w.Opcode = verbs.OpAtomicFetchAdd
		w.CompareAdd = atomicAddValue
		if o.atomic == atomicCAS {
			w.Opcode, w.CompareAdd, w.Swap = verbs.OpAtomicCmpSwp, 0, atomicSwapValue
		}
	}
	return w
}

// recvWRs returns n receive requests for QP i, all alike.
func (r *session) recvWRs(i, n int) []verbs.RecvWR {
	n0 := r.o.size
	if r.o.mcg {
		n0 += udAddition // a UD receive takes the GRH first
	}
	sge := []verbs.SGE{{Addr: r.recvArea(i), Length: uint32(n0), LKey: r.mr.LKey()}}
	wrs := make([]verbs.RecvWR, n)
	for k := range wrs {
		wrs[k] = verbs.RecvWR{ID: uint64(i), SGL: sge}
	}
	return wrs
}

// postRecvs posts rx_depth receives on every QP (ctx_set_recv_wqes).
func (r *session) postRecvs() error {
	for i, q := range r.qps {
		if err := q.PostRecv(r.recvWRs(i, r.o.rxDepth)); err != nil {
			return fmt.Errorf("couldn't post recv QP %d: %w", i, err)
		}
	}
	return nil
}

func wcError(side string, w *verbs.WC, done, total uint64) error {
	return fmt.Errorf("completion with error at %s: status %s (%d), wr_id %d, vendor error %#x (%d of %d done)",
		side, w.Status, int(w.Status), w.ID, w.VendorErr, done, total)
}

// bwClient is one run of run_iter_bw, perftest's bandwidth client. Times
// are since start.
type bwClient struct {
	r            *session
	dur          bool   // a duration run (-D)
	iters, tot   uint64 // messages per QP, and in all
	cqMod, depth uint64
	peak         bool             // posted and completed are kept for the peak
	posted       []time.Duration  // when each message was posted
	completed    []time.Duration  // when each signaled message completed
	scnt, ccnt   []uint64         // messages posted and completed per QP
	batch        [][]verbs.SendWR // each QP's work requests
	wcs          []verbs.WC
	w            *cqwait.Waiter
	ph           phases
	totS, totC   uint64 // messages posted and completed in all
	sampled      uint64 // completed in the sample period (-D)
	firstPost    time.Duration
	lastDone     time.Duration
	start        time.Time
}

// runBWClient is run_iter_bw: keep tx_depth requests in flight on every
// QP, signal every cq_mod-th (and the last), count cq_mod per completion.
func (r *session) runBWClient() (*result, error) {
	o := r.o
	nq := len(r.qps)
	c := &bwClient{r: r, dur: o.duration > 0, iters: uint64(o.iters), cqMod: uint64(o.cqMod), depth: uint64(o.txDepth),
		scnt: make([]uint64, nq), ccnt: make([]uint64, nq), batch: make([][]verbs.SendWR, nq),
		wcs: make([]verbs.WC, pollBatch), w: cqwait.New(r.spin), ph: newPhases(o)}
	c.tot = c.iters * uint64(nq)
	c.peak = !o.noPeak && c.tot <= 1<<24
	if c.peak {
		c.posted, c.completed = make([]time.Duration, c.tot), make([]time.Duration, c.tot)
	}
	for i := range c.batch {
		c.batch[i] = make([]verbs.SendWR, o.txDepth)
		sges := make([]verbs.SGE, o.txDepth)
		for k := range c.batch[i] {
			c.batch[i][k] = r.sendWR(i, sges[k:])
		}
	}
	var mem sampler
	mem.begin()
	c.start = time.Now()
	c.ph.start = 0
	for c.totS < c.tot || c.totC < c.tot || c.dur {
		if c.dur && c.ph.at(time.Since(c.start)) == phaseEnd {
			break
		}
		postedNow, err := c.post()
		if err != nil {
			return nil, err
		}
		if c.totC < c.tot || c.dur && c.totC < c.totS {
			if err := c.complete(postedNow); err != nil {
				return nil, err
			}
		}
	}
	res := &result{messages: c.totS, usage: mem.end(), elapsed: time.Since(c.start)}
	res.bw = r.bwFigures(c.tot, c.lastDone-c.firstPost, c.sampled, &c.ph)
	if c.peak { // never in a duration run (noPeak)
		res.bw.peak = perfstat.BWPeak(o.size, c.posted, c.completed, c.cqMod)
	}
	return res, nil
}

// post posts, on every QP, as many requests as its send queue has room
// for, in one PostSend, and reports whether it posted any.
func (c *bwClient) post() (bool, error) {
	postedNow := false
	for i := range c.batch {
		k := 0
		for (c.dur || c.scnt[i] < c.iters) && c.scnt[i]-c.ccnt[i]+1 <= c.depth {
			s := c.scnt[i]
			wr := &c.batch[i][k]
			wr.Flags = 0
			if c.cqMod == 1 || s%c.cqMod == c.cqMod-1 || !c.dur && s == c.iters-1 {
				wr.Flags = verbs.Signaled
			}
			c.scnt[i]++
			k++
		}
		if k == 0 {
			continue
		}
		t := time.Since(c.start)
		if c.totS == 0 {
			c.firstPost = t
		}
		if c.peak {
			for j := range uint64(k) {
				c.posted[c.totS+j] = t
			}
		}
		if err := c.r.qps[i].PostSend(c.batch[i][:k]); err != nil {
			return false, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, c.scnt[i], err)
		}
		c.totS += uint64(k)
		postedNow = true
	}
	return postedNow, nil
}

// complete polls the send CQ (and waits a little for it when nothing was
// posted) and counts what completed.
func (c *bwClient) complete(postedNow bool) error {
	r := c.r
	ne := r.sendCQ.Poll(c.wcs)
	if ne == 0 && !postedNow {
		var err error
		if ne, err = c.w.PollFor(r.ctx, r.sendCQ, c.wcs, 10*time.Millisecond); err != nil {
			return fmt.Errorf("%d of %d sends completed: %w", c.totC, c.tot, err)
		}
	}
	t := time.Since(c.start)
	for k := range c.wcs[:ne] {
		wc := &c.wcs[k]
		if wc.Status != verbs.Success {
			return wcError("send", wc, c.totC, c.tot)
		}
		c.ccnt[wc.ID] += c.cqMod
		c.totC += c.cqMod
		if c.peak {
			c.completed[min(c.totC, c.tot)-1] = t
		}
		if c.dur && c.ph.at(t) == phaseSample {
			c.sampled += c.cqMod
		}
	}
	if ne > 0 {
		c.lastDone = t
	}
	return nil
}

// runBWServer is run_iter_bw_server: receive and repost until every
// message is in, timed from the first one.
func (r *session) runBWServer() (*result, error) {
	o := r.o
	nq := len(r.qps)
	dur := o.duration > 0
	iters := uint64(o.iters)
	tot := iters * uint64(nq)
	wrs := make([][]verbs.RecvWR, nq)
	for i := range wrs {
		wrs[i] = r.recvWRs(i, o.rxDepth)
	}
	postedQP := make([]uint64, nq)
	for i := range postedQP {
		postedQP[i] = uint64(o.rxDepth)
	}
	repost := make([]int, nq)
	wcs := make([]verbs.WC, pollBatch)
	w := cqwait.New(r.spin)
	ph := newPhases(o)
	var rcnt, sampled uint64
	var first, last time.Duration
	started := false
	var mem sampler
	mem.begin()
	base := time.Now()
	for rcnt < tot || dur {
		now := time.Since(base)
		if dur && ph.at(now) == phaseEnd {
			break
		}
		ne, err := w.PollFor(r.ctx, r.recvCQ, wcs, 10*time.Millisecond)
		if err != nil {
			return nil, fmt.Errorf("%d of %d messages received: %w", rcnt, tot, err)
		}
		if ne == 0 {
			continue
		}
		t := time.Since(base)
		if !started {
			started, first = true, t
			ph.start = t
		}
		for k := range wcs[:ne] {
			wc := &wcs[k]
			if wc.Status != verbs.Success {
				return nil, wcError("receive", wc, rcnt, tot)
			}
			i := wc.ID
			rcnt++
			if dur && ph.at(t) == phaseSample {
				sampled++
			}
			if dur || postedQP[i]+1 <= iters {
				repost[i]++
				postedQP[i]++
			}
		}
		for i, n := range repost {
			if n > 0 {
				if err := r.qps[i].PostRecv(wrs[i][:n]); err != nil {
					return nil, fmt.Errorf("couldn't post recv QP %d: %w", i, err)
				}
				repost[i] = 0
			}
		}
		last = t
	}
	res := &result{messages: rcnt, usage: mem.end(), elapsed: time.Since(base)}
	res.bw = r.bwFigures(tot, last-first, sampled, &ph)
	return res, nil
}

// bwFigures are a bandwidth test's averages as print_report_bw computes
// them: over the tot messages and their span (iterations), or over the
// messages sampled in the sample period (duration).
func (r *session) bwFigures(tot uint64, span time.Duration, sampled uint64, ph *phases) *bwResult {
	size := r.o.size
	b := &bwResult{size: uint64(size)}
	if r.o.duration > 0 {
		from, to := ph.window()
		b.iters = sampled
		b.avg, b.rate = perfstat.BWAverage(size, sampled, to-from)
	} else {
		b.iters = tot
		b.avg, b.rate = perfstat.BWAverage(size, tot, span)
	}
	return b
}

// runLatSend is run_iter_lat_send: the client sends first; each side
// waits for the other's message before sending the next.
func (r *session) runLatSend() (*result, error) {
	o := r.o
	dur := o.duration > 0
	iters := uint64(o.iters)
	client := r.role == oob.Client
	q := r.qps[0]
	wr := r.latWR()
	rwr := r.recvWRs(0, 1)
	wc := make([]verbs.WC, 1)
	w := cqwait.New(r.latSpin())
	tposted := r.postTimes()
	ph := newPhases(o)
	var scnt, rcnt, sampled uint64
	var mem sampler
	mem.begin()
	base := time.Now()
	for scnt < iters || rcnt < iters || dur && ph.at(time.Since(base)) != phaseEnd {
		if (rcnt < iters || dur) && !(scnt < 1 && client) {
			ne, err := r.waitOne(w, r.recvCQ, wc, dur, &ph, base)
			if err != nil {
				return nil, fmt.Errorf("%d of %d messages received: %w", rcnt, iters, err)
			}
			if ne == 0 { // the run's time is up
				break
			}
			if ph.start < 0 {
				ph.start = time.Since(base)
			}
			if wc[0].Status != verbs.Success {
				return nil, wcError("receive", &wc[0], rcnt, iters)
			}
			rcnt++
			if dur && ph.at(time.Since(base)) == phaseSample {
				sampled++
			}
			if dur || rcnt+uint64(o.rxDepth) <= iters {
				if err := q.PostRecv(rwr); err != nil {
					return nil, fmt.Errorf("couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if scnt < iters || dur && ph.at(time.Since(base)) != phaseEnd {
			if !dur {
				tposted[scnt] = time.Since(base)
			}
			scnt++
			poll := scnt%uint64(o.cqMod) == 0 || !dur && scnt == iters
			wr[0].Flags = 0
			if poll {
				wr[0].Flags = verbs.Signaled
			}
			if err := q.PostSend(wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if poll {
				ne, err := r.waitOne(w, r.sendCQ, wc, false, &ph, base)
				if err != nil {
					return nil, fmt.Errorf("send %d of %d: %w", scnt, iters, err)
				}
				if ne > 0 && wc[0].Status != verbs.Success {
					return nil, wcError("send", &wc[0], scnt, iters)
				}
			}
		}
	}
	return r.latResult(tposted, sampled, &ph, scnt, mem.end(), time.Since(base), 2), nil
}

// runLatWrite is run_iter_lat_write: each side RDMA WRITEs into the
// other's buffer, whose last byte carries the iteration number, and
// spins on its own buffer for the peer's; the server writes first.
func (r *session) runLatWrite() (*result, error) {
	o := r.o
	dur := o.duration > 0
	iters := uint64(o.iters)
	server := r.role == oob.Server
	q := r.qps[0]
	wr := r.latWR()
	wr[0].Flags = verbs.Signaled
	postByte := &r.buf[o.size-1]               // the last byte of what this side writes
	pollByte := &r.buf[o.qps*r.bufSz+o.size-1] // the last byte the peer writes here
	wc := make([]verbs.WC, 1)
	w := cqwait.New(r.latSpin())
	tposted := r.postTimes()
	ph := newPhases(o)
	var scnt, ccnt, rcnt, sampled uint64
	var mem sampler
	mem.begin()
	base := time.Now()
	ph.start = 0
	for scnt < iters || ccnt < iters || rcnt < iters || dur && ph.at(time.Since(base)) != phaseEnd {
		if (rcnt < iters || dur) && !(scnt < 1 && server) {
			rcnt++
			if err := r.waitByte(pollByte, byte(rcnt), dur, &ph, base); err != nil {
				return nil, fmt.Errorf("write %d of %d from the peer: %w", rcnt, iters, err)
			}
		}
		if dur && ph.at(time.Since(base)) == phaseEnd {
			break
		}
		if scnt < iters || dur {
			if !dur {
				tposted[scnt] = time.Since(base)
			}
			scnt++
			*postByte = byte(scnt) // the previous WRITE has completed: nobody reads it
			if err := q.PostSend(wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if ccnt < iters || dur {
			ne, err := r.waitOne(w, r.sendCQ, wc, false, &ph, base)
			if err != nil {
				return nil, fmt.Errorf("write %d of %d: %w", scnt, iters, err)
			}
			if ne > 0 {
				if wc[0].Status != verbs.Success {
					return nil, wcError("send", &wc[0], ccnt, iters)
				}
				ccnt++
				if dur && ph.at(time.Since(base)) == phaseSample {
					sampled++
				}
			}
		}
	}
	return r.latResult(tposted, sampled, &ph, scnt, mem.end(), time.Since(base), 2), nil
}

// runLatRead is run_iter_lat for READ and atomics: post one, wait for
// its completion, again.
func (r *session) runLatRead() (*result, error) {
	o := r.o
	dur := o.duration > 0
	iters := uint64(o.iters)
	q := r.qps[0]
	wr := r.latWR()
	wr[0].Flags = verbs.Signaled
	wc := make([]verbs.WC, 1)
	w := cqwait.New(r.latSpin())
	tposted := r.postTimes()
	ph := newPhases(o)
	var scnt, sampled uint64
	var mem sampler
	mem.begin()
	base := time.Now()
	ph.start = 0
	for scnt < iters || dur && ph.at(time.Since(base)) != phaseEnd {
		if !dur {
			tposted[scnt] = time.Since(base)
		}
		scnt++
		if err := q.PostSend(wr); err != nil {
			return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		ne, err := r.waitOne(w, r.sendCQ, wc, false, &ph, base)
		if err != nil {
			return nil, fmt.Errorf("request %d of %d: %w", scnt, iters, err)
		}
		if ne > 0 {
			if wc[0].Status != verbs.Success {
				return nil, wcError("send", &wc[0], scnt-1, iters)
			}
			if dur && ph.at(time.Since(base)) == phaseSample {
				sampled++
			}
		}
	}
	return r.latResult(tposted, sampled, &ph, scnt, mem.end(), time.Since(base), 1), nil
}

// latWR returns the one work request a latency test posts on QP 0, over
// and over.
func (r *session) latWR() []verbs.SendWR {
	return []verbs.SendWR{r.sendWR(0, make([]verbs.SGE, 1))}
}

// postTimes returns room for a latency test's posting times: one per
// iteration; none in a duration run.
func (r *session) postTimes() []time.Duration {
	if r.o.duration > 0 {
		return nil
	}
	return make([]time.Duration, r.o.iters)
}

// latSpin is how a latency test waits: it busy-polls where that pays
// (libibverbs, or a transport that busy-polls too).
func (r *session) latSpin() time.Duration {
	if r.spin != 0 {
		return -1
	}
	return 0
}

// waitOne waits for one completion on cq. In a duration run that may
// end while waiting (untilEnd), it returns 0 once the run's time is up.
func (r *session) waitOne(w *cqwait.Waiter, cq verbs.CQ, wc []verbs.WC, untilEnd bool, ph *phases, base time.Time) (int, error) {
	for {
		ne, err := w.PollFor(r.ctx, cq, wc, 10*time.Millisecond)
		if ne > 0 || err != nil {
			return ne, err
		}
		if untilEnd && ph.at(time.Since(base)) == phaseEnd {
			return 0, nil
		}
	}
}

// waitByte spins until the byte at p is want, the run's time is up (in a
// duration run), or the deadline passes. A busy-polled software device's
// receive path runs on this thread between looks; otherwise this thread
// waits on the software device for the link between looks
// (ProgressWait), and on another device sleeps a little between them.
func (r *session) waitByte(p *byte, want byte, dur bool, ph *phases, base time.Time) error {
	for i := 1; ; i++ {
		if loadByte(p) == want {
			return nil
		}
		if r.progress != nil && r.progress() > 0 {
			continue
		}
		if r.progressWait != nil {
			if _, err := r.progressWait(r.ctx, time.Now().Add(10*time.Millisecond)); err != nil {
				return err
			}
			if dur && ph.at(time.Since(base)) == phaseEnd {
				return nil
			}
			continue
		}
		if i&63 == 0 {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if dur && ph.at(time.Since(base)) == phaseEnd {
				return nil
			}
			if r.spin == 0 {
				time.Sleep(time.Microsecond)
				continue
			}
		}
		if i&7 == 0 {
			yield.CPU() // now and then, the threads waiting for this core
		} else {
			runtime.Gosched()
		}
	}
}

// loadByte reads a byte that the RDMA device writes behind the program's
// back, as perftest's volatile poll does: the software engine writes it
// from its own goroutine, a NIC by DMA. It is kept out of the race
// detector's view (the write is a remote peer's, ordered by the
// protocol, not by Go synchronisation) and out of line, so that every
// call loads the byte again.
//
//go:norace
//go:noinline
func loadByte(p *byte) byte { return *p }
