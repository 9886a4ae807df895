//go:build linux

package stress

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// soakLevel is one fault level of the soak: what both devices' links do
// to what they send.
type soakLevel struct {
	name   string
	faults transport.Faults
	paths  int // the links' receive and send paths (roce.UDP.Paths)
}

var soakLevels = []soakLevel{
	{"0%", transport.Faults{}, 0},
	{"1%", transport.Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01}, 0},
	{"5%", transport.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05}, 0},
	{"1%, 3 paths", transport.Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01}, 3},
}

const (
	soakConns = 64
	soakMax   = 1 << 20            // the largest message
	soakBuf   = soakMax + 16<<10   // a connection's buffer at each end: room for gaps between SGEs
	soakSlot  = soakBuf - 8        // the 8-byte atomic target at B, the result at A
	soakWait  = 60 * time.Second   // the longest a request may take before the soak gives up on it
	soakSGEs  = 4                  // at most so many SGEs a request
	soakOps   = int(opCmpSwap) + 1 // kinds of operation
)

// soakOp is the kind of an operation of the soak.
type soakOp int

const (
	opSend soakOp = iota
	opSendImm
	opWrite
	opWriteImm
	opRead
	opFetchAdd
	opCmpSwap
)

var soakOpNames = [soakOps]string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "FETCH_ADD", "CMP_SWAP"}

// soakConn is one connection of the soak, A requesting, B responding,
// with one operation in flight at a time so that every byte can be
// checked against a model: B's atomic slot holds slot.
type soakConn struct {
	t      *testing.T
	id     int
	a, b   *side
	qa, qb verbs.QP
	acq    verbs.CQ // qa's completions
	bcq    verbs.CQ // qb's
	abuf   verbs.MR
	bbuf   verbs.MR
	slot   uint64
	rng    *rand.Rand
	next   uint64 // the next work request ID at A, and receive ID at B
	ops    [soakOps]int
	bytes  int64
	lost   int // connections given up with RETRY_EXC_ERR and made again
	p      roce.ConnParams
	pool   []byte // random bytes fill copies from, shared, read only
}

func newSoakConn(t *testing.T, id int, a, b *side, seed uint64, pool []byte) *soakConn {
	// ACK timeout 16 (268 ms, eight tries 2.1 s): the process may be kept
	// from running for more than half a second on a loaded machine (the
	// soak measures it), longer than eight tries of 67 ms (timeout 14).
	c := &soakConn{t: t, id: id, a: a, b: b, rng: rand.New(rand.NewPCG(seed, uint64(id))),
		p:    roce.ConnParams{MTU: bth.MTU4096, MaxRDAtomic: 1, MaxDestRDAtomic: 1, Timeout: 16, RetryCnt: 7, RNRRetry: 7},
		pool: pool}
	c.abuf = a.reg(t, 2*soakBuf, verbs.LocalWrite)
	c.bbuf = b.reg(t, soakBuf, verbs.LocalWrite|verbs.RemoteAccess)
	c.connect()
	return c
}

// connect makes the connection's QPs and their CQs afresh.
func (c *soakConn) connect() {
	var err error
	if c.acq, err = c.a.dev.CreateCQ(16); err != nil {
		c.t.Fatal(err)
	}
	if c.bcq, err = c.b.dev.CreateCQ(16); err != nil {
		c.t.Fatal(err)
	}
	capa := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: soakSGEs, MaxRecvSGE: soakSGEs}
	if c.qa, err = c.a.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.acq, RecvCQ: c.acq, Cap: capa}); err != nil {
		c.t.Fatal(err)
	}
	if c.qb, err = c.b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.bcq, RecvCQ: c.bcq, Cap: capa}); err != nil {
		c.t.Fatal(err)
	}
	connect(c.t, c.a, c.b, c.qa, c.qb, c.p)
	binary.NativeEndian.PutUint64(c.bbuf.Bytes()[soakSlot:], c.slot)
	syncMR(c.bbuf)
}

// half returns where in A's buffer the next operation's bytes go: its
// two halves take turns, because the requester may still send from the
// last operation's bytes when its completion has come. (Go-back-N
// queues packets from registered memory; an ACK handled in the same
// batch completes the request before the batch goes out: the test would
// write the bytes the engine is reading, which the race detector
// reports, and the copies are duplicates the responder drops.)
func (c *soakConn) half() int {
	return soakBuf * int(c.next%2)
}

// sgl returns SGEs of m, at most soakSGEs and in a random order, whose
// bytes add up to n, at random places with random gaps from base, and
// the ranges they cover, in SGL order.
func (c *soakConn) sgl(m verbs.MR, n, base int) ([]verbs.SGE, [][2]int) {
	if n == 0 {
		return nil, nil
	}
	k := 1 + c.rng.IntN(soakSGEs)
	cuts := []int{0, n}
	for range k - 1 {
		cuts = append(cuts, c.rng.IntN(n+1))
	}
	sortInts(cuts)
	slack := soakSlot - n
	var ranges [][2]int
	off := base
	for i := 1; i < len(cuts); i++ {
		l := cuts[i] - cuts[i-1]
		if l == 0 {
			continue
		}
		gap := c.rng.IntN(slack/k + 1)
		slack -= gap
		off += gap
		ranges = append(ranges, [2]int{off, off + l})
		off += l
	}
	c.rng.Shuffle(len(ranges), func(i, j int) { ranges[i], ranges[j] = ranges[j], ranges[i] })
	sges := make([]verbs.SGE, len(ranges))
	for i, r := range ranges {
		sges[i] = verbs.SGE{Addr: m.Addr() + uint64(r[0]), Length: uint32(r[1] - r[0]), LKey: m.LKey()}
	}
	return sges, ranges
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// differs counts, without copying, the bytes in which the first n bytes
// of a's ranges and of b's ranges, each taken in order, differ.
func differs(a []byte, ar [][2]int, b []byte, br [][2]int, n int) int {
	bad, i, j, oi, oj := 0, 0, 0, 0, 0
	for n > 0 {
		x, y := a[ar[i][0]+oi:ar[i][1]], b[br[j][0]+oj:br[j][1]]
		k := min(len(x), len(y), n)
		if !bytes.Equal(x[:k], y[:k]) {
			bad += differ(x[:k], y[:k])
		}
		n -= k
		if oi += k; ar[i][0]+oi == ar[i][1] {
			i, oi = i+1, 0
		}
		if oj += k; br[j][0]+oj == br[j][1] {
			j, oj = j+1, 0
		}
	}
	return bad
}

// fill writes fresh bytes into b's ranges: random bytes from the
// connection's pool, from a random place, with the operation's number
// every 512 bytes, so that no two operations write the same bytes (a
// stale message cannot pass for the next) at the cost of a copy.
func (c *soakConn) fill(b []byte, ranges [][2]int) {
	from := c.rng.IntN(len(c.pool) - soakBuf)
	k := 0
	for _, r := range ranges {
		copy(b[r[0]:r[1]], c.pool[from+k:])
		var id [8]byte
		binary.LittleEndian.PutUint64(id[:], c.next)
		for i := r[0]; i < r[1]; i += 512 {
			copy(b[i:r[1]], id[:])
		}
		k += r[1] - r[0]
	}
}

// wait returns the next completion of cq, or an error after soakWait.
func (c *soakConn) wait(cq verbs.CQ, what string) (verbs.WC, error) {
	wc, ok := waitWC(c.t, cq, soakWait)
	if !ok {
		return wc, fmt.Errorf("connection %d: no completion of the %s in %v (QPs in %v and %v)", c.id, what, soakWait,
			stateOf(c.qa), stateOf(c.qb))
	}
	return wc, nil
}

func stateOf(q verbs.QP) verbs.QPState {
	a, err := q.Query()
	if err != nil {
		return verbs.StateErr
	}
	return a.State
}

// one runs one operation of a random kind and size and checks it: its
// completions (each once, in order, with the right fields) and the bytes
// that land. It returns errRetryExc when the connection ran out of
// retries (the caller may make it again), another error for any other
// failure.
func (c *soakConn) one() error {
	// The last operation's checks read both buffers, which the engines
	// write next (through the kernel's sockets, which the race detector
	// does not see): order the two (mr.MR.Sync).
	syncMR(c.abuf)
	syncMR(c.bbuf)
	op := soakOp(c.rng.IntN(soakOps))
	n := c.rng.IntN(soakMax + 1)
	id := c.next
	c.next++
	var err error
	switch op {
	case opSend, opSendImm:
		err = c.send(op, id, n)
	case opWrite, opWriteImm:
		err = c.write(op, id, n)
	case opRead:
		err = c.read(id, n)
	default:
		n = 8
		err = c.atomic(op, id)
	}
	if err == nil {
		c.ops[op]++
		c.bytes += int64(n)
	}
	return err
}

// errRetryExc is a request that completed RETRY_EXC_ERR.
var errRetryExc = fmt.Errorf("RETRY_EXC_ERR")

// sent checks the requester's completion of request id.
func (c *soakConn) sent(id uint64, want verbs.WCOpcode) error {
	wc, err := c.wait(c.acq, "request")
	if err != nil {
		return err
	}
	if wc.Status == verbs.RetryExcErr && wc.ID == id {
		return errRetryExc
	}
	if wc.Status != verbs.Success || wc.ID != id || wc.Opcode != want {
		return fmt.Errorf("connection %d: request %d (%v) completed %v", c.id, id, want, &wc)
	}
	return nil
}

func (c *soakConn) send(op soakOp, id uint64, n int) error {
	sgl, ranges := c.sgl(c.abuf, n, c.half())
	c.fill(c.abuf.Bytes(), ranges)
	syncMR(c.abuf)
	rsgl, rranges := c.sgl(c.bbuf, n+c.rng.IntN(4096), 0)
	if err := c.qb.PostRecv([]verbs.RecvWR{{ID: id, SGL: rsgl}}); err != nil {
		return err
	}
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: sgl}
	if op == opSendImm {
		wr.Opcode, wr.Imm = verbs.OpSendImm, uint32(id)
	}
	if err := c.qa.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	if err := c.sent(id, verbs.WCSend); err != nil {
		return err
	}
	wc, err := c.wait(c.bcq, "receive")
	if err != nil {
		return err
	}
	if wc.Status != verbs.Success || wc.ID != id || wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(n) ||
		(op == opSendImm) != (wc.Flags&verbs.WithImm != 0) || op == opSendImm && wc.Imm != uint32(id) {
		return fmt.Errorf("connection %d: receive of %v %d (%d bytes) completed %v", c.id, soakOpNames[op], id, n, &wc)
	}
	syncMR(c.bbuf)
	if bad := differs(c.abuf.Bytes(), ranges, c.bbuf.Bytes(), rranges, n); bad != 0 {
		return fmt.Errorf("connection %d: %v %d of %d bytes: %d bytes differ", c.id, soakOpNames[op], id, n, bad)
	}
	return nil
}

func (c *soakConn) write(op soakOp, id uint64, n int) error {
	sgl, ranges := c.sgl(c.abuf, n, c.half())
	c.fill(c.abuf.Bytes(), ranges)
	syncMR(c.abuf)
	off := c.rng.IntN(soakSlot - n + 1)
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpWrite, Flags: verbs.Signaled, SGL: sgl,
		RemoteAddr: c.bbuf.Addr() + uint64(off), RKey: c.bbuf.RKey()}
	if op == opWriteImm {
		wr.Opcode, wr.Imm = verbs.OpWriteImm, uint32(id)
		if err := c.qb.PostRecv([]verbs.RecvWR{{ID: id}}); err != nil {
			return err
		}
	}
	if err := c.qa.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	if err := c.sent(id, verbs.WCWrite); err != nil {
		return err
	}
	if op == opWriteImm {
		wc, err := c.wait(c.bcq, "receive")
		if err != nil {
			return err
		}
		if wc.Status != verbs.Success || wc.ID != id || wc.Opcode != verbs.WCRecvRDMAWithIm || wc.Imm != uint32(id) ||
			wc.ByteLen != uint32(n) {
			return fmt.Errorf("connection %d: receive of WRITE_IMM %d (%d bytes) completed %v", c.id, id, n, &wc)
		}
	}
	syncMR(c.bbuf)
	if bad := differs(c.abuf.Bytes(), ranges, c.bbuf.Bytes(), [][2]int{{off, off + n}}, n); bad != 0 {
		return fmt.Errorf("connection %d: %v %d of %d bytes: %d bytes differ", c.id, soakOpNames[op], id, n, bad)
	}
	return nil
}

// read READs n bytes of B's buffer, which holds what earlier WRITEs and
// SENDs left there. (The soak does not write B's memory itself: a READ
// the responder answers again, for a request sent again, reads it after
// the READ completed, sending from the region in place, and a write by
// the test then would race with it.)
func (c *soakConn) read(id uint64, n int) error {
	off := c.rng.IntN(soakSlot - n + 1)
	sgl, ranges := c.sgl(c.abuf, n, c.half())
	if err := c.qa.PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.OpRead, Flags: verbs.Signaled, SGL: sgl,
		RemoteAddr: c.bbuf.Addr() + uint64(off), RKey: c.bbuf.RKey()}}); err != nil {
		return err
	}
	if err := c.sent(id, verbs.WCRead); err != nil {
		return err
	}
	syncMR(c.abuf)
	if bad := differs(c.abuf.Bytes(), ranges, c.bbuf.Bytes(), [][2]int{{off, off + n}}, n); bad != 0 {
		return fmt.Errorf("connection %d: READ %d of %d bytes: %d bytes differ", c.id, id, n, bad)
	}
	return nil
}

func (c *soakConn) atomic(op soakOp, id uint64) error {
	wr := verbs.SendWR{ID: id, Flags: verbs.Signaled, RemoteAddr: c.bbuf.Addr() + soakSlot, RKey: c.bbuf.RKey(),
		SGL: []verbs.SGE{{Addr: c.abuf.Addr() + soakSlot, Length: 8, LKey: c.abuf.LKey()}}}
	want := c.slot
	next := c.slot
	wcop := verbs.WCFetchAdd
	if op == opFetchAdd {
		wr.Opcode, wr.CompareAdd = verbs.OpAtomicFetchAdd, c.rng.Uint64()
		next += wr.CompareAdd
	} else {
		wr.Opcode, wr.Swap, wr.CompareAdd, wcop = verbs.OpAtomicCmpSwp, c.rng.Uint64(), c.slot, verbs.WCCompSwap
		if c.rng.IntN(4) == 0 {
			wr.CompareAdd = c.slot + 1 // a compare that fails: no swap
		} else {
			next = wr.Swap
		}
	}
	if err := c.qa.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	if err := c.sent(id, wcop); err != nil {
		return err
	}
	c.slot = next
	syncMR(c.abuf)
	syncMR(c.bbuf)
	got, mem := binary.NativeEndian.Uint64(c.abuf.Bytes()[soakSlot:]), binary.NativeEndian.Uint64(c.bbuf.Bytes()[soakSlot:])
	if got != want || mem != next {
		return fmt.Errorf("connection %d: %v %d found %#x (want %#x) and left %#x (want %#x)", c.id, soakOpNames[op], id,
			got, want, mem, next)
	}
	return nil
}

// recover makes a connection that ran out of retries again, after
// checking that its outstanding work completes once: the receive B may
// have posted completes (or is flushed) exactly once. The atomic slot is
// read back: whether an atomic whose answer was lost ran is not known.
func (c *soakConn) recover() error {
	c.lost++
	if err := c.qb.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
		return err
	}
	wcs := make([]verbs.WC, 8)
	time.Sleep(10 * time.Millisecond)
	if n := c.acq.Poll(wcs); n != 0 {
		return fmt.Errorf("connection %d: %d completions after RETRY_EXC_ERR with nothing else posted: %v", c.id, n, &wcs[0])
	}
	if n := c.bcq.Poll(wcs); n > 1 {
		return fmt.Errorf("connection %d: %d receive completions for one receive", c.id, n)
	}
	c.qa.Destroy()
	c.qb.Destroy()
	c.acq.Destroy()
	c.bcq.Destroy()
	syncMR(c.bbuf)
	c.slot = binary.NativeEndian.Uint64(c.bbuf.Bytes()[soakSlot:])
	c.connect()
	return nil
}

// soakSample is one look at the process.
type soakSample struct {
	at         time.Duration
	rss, heap  int64
	goroutines int
}

// TestSoak runs 64 RC connections between two devices over UDP loopback
// at each fault level in turn (0 %, then 1 % and 5 % loss, duplication
// and reordering each way, then 1 % again over links of three paths),
// every connection doing one operation after another, of every kind, of random sizes up to 1 MiB with random
// scatter/gather lists, and checks every completion and every byte;
// resident memory, the heap and goroutines must stay flat once warm, and
// no QP may be left in error. A connection that runs out of retries
// (eight tries of a packet in a row lost, which at 5 % loss each way
// happens about once in 10^8 retries: see RELIABILITY.md) is made again
// and counted; at 0 % and 1 % that is a failure. GOROCE_SOAK sets the
// whole run's length (2 minutes 40 without it).
func TestSoak(t *testing.T) {
	total := soakFor(t, 160*time.Second)
	for _, lv := range soakLevels {
		t.Run(lv.name, func(t *testing.T) { soakLevelRun(t, lv, total/time.Duration(len(soakLevels))) })
	}
}

func soakLevelRun(t *testing.T, lv soakLevel, d time.Duration) {
	seed := rand.Uint64()
	t.Logf("fault seed %#x", seed)
	ips := loopbacks(2)
	port := freePort(t, ips...)
	mod := func(c *roce.Config) {
		c.Faults, c.FaultSeed = lv.faults, seed
		c.Link.(*roce.UDP).Paths = lv.paths
	}
	da, db := openDev(t, ips[0], port, mod), openDev(t, ips[1], port, mod)
	a, b := newSide(t, da, 16), newSide(t, db, 16)
	pool := make([]byte, 2*soakBuf)
	for i := 0; i < len(pool); i += 8 {
		binary.LittleEndian.PutUint64(pool[i:], rand.Uint64())
	}
	conns := make([]*soakConn, soakConns)
	for i := range conns {
		conns[i] = newSoakConn(t, i, a, b, seed, pool)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	lag := watchLag()
	defer lag.stop()
	start := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && time.Since(start) < d {
				err := c.one()
				if err == errRetryExc && lv.faults.Drop >= 0.05 {
					t.Logf("connection %d ran out of retries at %v (%s); made again", c.id,
						time.Since(start).Round(time.Second), c.diagnose(lag))
					err = c.recover()
				}
				if err != nil {
					t.Errorf("seed %#x: %v (%s)", seed, err, c.diagnose(lag))
					stop.Store(true)
					return
				}
			}
		}()
	}
	samples := sampleUntil(&wg, d)
	soakReport(t, lv, conns, a, b, port, samples, time.Since(start), lag)
}

// sampleUntil looks at the process every d/40 while the connections run
// (not as they stop, at d), and returns once wg is done.
func sampleUntil(wg *sync.WaitGroup, d time.Duration) []soakSample {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	every := max(d/40, time.Second)
	start := time.Now()
	var out []soakSample
	for {
		select {
		case <-done:
			return out
		case <-time.After(every):
			if time.Since(start) < d-every {
				out = append(out, soakSample{at: time.Since(start), rss: rss(), heap: int64(heap()),
					goroutines: runtime.NumGoroutine()})
			}
		}
	}
}

// soakReport checks the end state of a level and sums it up.
func soakReport(t *testing.T, lv soakLevel, conns []*soakConn, a, b *side, port uint16, samples []soakSample,
	el time.Duration, lag *lagWatch) {
	var ops [soakOps]int
	var bytes int64
	var ctr qp.Counters
	lost := 0
	for _, c := range conns {
		for k, n := range c.ops {
			ops[k] += n
		}
		bytes += c.bytes
		lost += c.lost
		for _, q := range []verbs.QP{c.qa, c.qb} {
			if st := stateOf(q); st != verbs.StateRTS {
				t.Errorf("connection %d: QP %d is in %v", c.id, q.QPN(), st)
			}
			x := q.(*qp.QP).Counters()
			ctr.Add(&x)
		}
		wcs := make([]verbs.WC, 4)
		if n := c.acq.Poll(wcs) + c.bcq.Poll(wcs); n != 0 && !t.Failed() {
			t.Errorf("connection %d: %d completions more than its work requests, the first %v", c.id, n, &wcs[0])
		}
		syncMR(c.bbuf)
		if got := binary.NativeEndian.Uint64(c.bbuf.Bytes()[soakSlot:]); got != c.slot && !t.Failed() {
			t.Errorf("connection %d: the atomic slot holds %#x, want %#x", c.id, got, c.slot)
		}
	}
	if lost > 0 && lv.faults.Drop < 0.05 {
		t.Errorf("%d connections ran out of retries at %s loss", lost, lv.name)
	}
	flat := checkFlat(t, samples)
	var opsLine string
	for k, n := range ops {
		opsLine += fmt.Sprintf(" %s %d", soakOpNames[k], n)
	}
	fa, fb := a.dev.Stats().Faults, b.dev.Stats().Faults
	summary(t, "%d connections, %v: %d operations (%s), %.1f GB, %.0f MB/s; every byte and completion checked; "+
		"%d packets retransmitted, %d retries, %d connections out of retries and made again; faults A->B %+v, "+
		"B->A %+v; datagrams the kernel dropped at the sockets of A and B: %d, %d; the process's longest stall "+
		"(a 10 ms sleep that took longer): %v; %s", soakConns, el.Round(time.Second), sum(ops[:]), opsLine[1:],
		float64(bytes)/1e9, float64(bytes)/el.Seconds()/1e6, ctr.Retransmits, ctr.CompleterRetryErr, lost, fa, fb,
		socketDrops(netip.AddrPortFrom(a.dev.Addr(), port)), socketDrops(netip.AddrPortFrom(b.dev.Addr(), port)),
		lag.worst(0).Round(time.Millisecond), flat)
}

func sum(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// checkFlat checks that the samples after the first quarter (the warm-up)
// show no growth beyond noise, and describes their slopes.
func checkFlat(t *testing.T, s []soakSample) string {
	if len(s) < 8 {
		return fmt.Sprintf("%d samples, too few for slopes", len(s))
	}
	// The heap after a collection holds the connections' buffers and the
	// copies the checks make of messages in flight (up to 2 MiB a
	// connection), so it moves by tens of MiB from one look to the next:
	// what must not happen is that the second half of the run needs more
	// than the first quarter did.
	warm := s[len(s)/4:]
	var xs, rs, hs []float64
	gmin, gmax := warm[0].goroutines, warm[0].goroutines
	// Goroutines come and go (a timer's callback runs on one of its own):
	// a leak raises the floor, so the last quarter's fewest must not
	// pass the warm-up's most.
	gwarm, glate := 0, s[len(s)*3/4].goroutines
	for _, x := range s[:len(s)/4] {
		gwarm = max(gwarm, x.goroutines)
	}
	for _, x := range s[len(s)*3/4:] {
		glate = min(glate, x.goroutines)
	}
	var hwarm, rwarm, hlate, rlate int64
	for _, x := range s[:len(s)/4] {
		hwarm, rwarm = max(hwarm, x.heap), max(rwarm, x.rss)
	}
	for _, x := range s[len(s)/2:] {
		hlate, rlate = max(hlate, x.heap), max(rlate, x.rss)
	}
	for _, x := range warm {
		xs = append(xs, x.at.Minutes())
		rs = append(rs, float64(x.rss))
		hs = append(hs, float64(x.heap))
		gmin, gmax = min(gmin, x.goroutines), max(gmax, x.goroutines)
	}
	last := warm[len(warm)-1]
	if glate > gwarm+2 {
		t.Errorf("goroutines: at least %d in the last quarter, at most %d in the warm-up", glate, gwarm)
	}
	if hlate > hwarm+hwarm/4+32<<20 || rlate > rwarm+rwarm/4+64<<20 {
		t.Errorf("the heap reached %d B and resident memory %d B in the second half, from at most %d B and %d B "+
			"in the first quarter", hlate, rlate, hwarm, rwarm)
	}
	return fmt.Sprintf("after the warm-up, resident memory %.1f MiB (slope %+.2f MiB/min), heap %.1f MiB "+
		"(slope %+.2f MiB/min), goroutines %d to %d", float64(last.rss)/(1<<20), slope(xs, rs)/(1<<20),
		float64(last.heap)/(1<<20), slope(xs, hs)/(1<<20), gmin, gmax)
}

// diagnose says what a failed connection's QPs and the process looked like.
func (c *soakConn) diagnose(lag *lagWatch) string {
	ca, cb := c.qa.(*qp.QP).Counters(), c.qb.(*qp.QP).Counters()
	return fmt.Sprintf("A's QP %d in %v: %v; B's QP %d in %v: %v; the process's longest stall in the last 5 s: %v",
		c.qa.QPN(), stateOf(c.qa), ca.String(), c.qb.QPN(), stateOf(c.qb), cb.String(),
		lag.worst(5*time.Second).Round(time.Millisecond))
}

// lagWatch measures how late a goroutine that sleeps 10 ms at a time
// wakes: how long the process, or the Go scheduler, was kept from
// running.
type lagWatch struct {
	mu    sync.Mutex
	lags  []lagMark // the lates of more than 50 ms, and when
	most  time.Duration
	quit  chan struct{}
	ended chan struct{}
}

type lagMark struct {
	at  time.Time
	lag time.Duration
}

func watchLag() *lagWatch {
	w := &lagWatch{quit: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for {
			t0 := time.Now()
			select {
			case <-w.quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			late := time.Since(t0) - 10*time.Millisecond
			w.mu.Lock()
			w.most = max(w.most, late)
			if late > 50*time.Millisecond {
				w.lags = append(w.lags, lagMark{time.Now(), late})
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *lagWatch) stop() {
	close(w.quit)
	<-w.ended
}

// worst returns the longest late in the last d, or ever when d is 0.
func (w *lagWatch) worst(d time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d == 0 {
		return w.most
	}
	var m time.Duration
	for _, l := range w.lags {
		if time.Since(l.at) < d {
			m = max(m, l.lag)
		}
	}
	return m
}
