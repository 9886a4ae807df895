package roce

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
)

// Step kinds of a trace, as the minimal RDMA sample's logs name them.
const (
	// StepControl is a control-path step: setup and teardown.
	StepControl = "SLOW"
	// StepData is a data-path step: posting work, polling completions.
	StepData = "DATA"
	// StepDetail is a dump that goes with a step: a QP's attributes, a
	// work request's SGEs, a completion.
	StepDetail = "INFO"
)

// Trace returns d with every verb the program calls on it, and every
// completion it polls, logged to log at Info level, numbered, with the
// attributes "step" (the number) and "kind" (StepControl, StepData or
// StepDetail). Objects made through the result are traced too; they work
// with the backend as the originals do. An empty poll is not logged. A
// nil log discards.
//
// Trace of goroce's *Device is a *Device (roce.Trace(dev, log).(*Device)):
// another view of the same device, with all it offers, whose steps are
// logged; Config.Trace opens a device traced from the start. Any other
// verbs.Device (hwverbs's) is wrapped. Trace of a nil Device is nil.
func Trace(d verbs.Device, log *slog.Logger) verbs.Device {
	if d == nil {
		return nil
	}
	if rd, ok := d.(*Device); ok {
		if !rd.ok() {
			return rd
		}
		return rd.traced(log)
	}
	return &traceDevice{Device: d, t: newTracer(log)}
}

// Untrace returns the device under Trace: for a *Device, the untraced
// view Open made (the same pointer for every view of one device); for a
// wrapped device, the one wrapped; otherwise d itself.
func Untrace(d verbs.Device) verbs.Device {
	switch t := d.(type) {
	case *Device:
		if t.ok() {
			return t.dev.self
		}
	case *traceDevice:
		return t.Device
	}
	return d
}

type tracer struct {
	log  *slog.Logger
	step atomic.Uint64
}

// newTracer returns a tracer that logs to log (nil: discards).
func newTracer(log *slog.Logger) *tracer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &tracer{log: log}
}

func (t *tracer) logf(kind, format string, args ...any) {
	if !t.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	t.log.LogAttrs(context.Background(), slog.LevelInfo, fmt.Sprintf(format, args...),
		slog.Uint64("step", t.step.Add(1)), slog.String("kind", kind))
}

// allocPD allocates a PD on d and traces it.
func (t *tracer) allocPD(d verbs.Device) (verbs.PD, error) {
	t.logf(StepControl, "alloc PD on %s", d.Name())
	pd, err := d.AllocPD()
	if err != nil {
		t.logf(StepDetail, "alloc PD failed: %v", err)
		return nil, err
	}
	return &tracePD{PD: pd, t: t}, nil
}

// createCQ creates a CQ on d and traces it.
func (t *tracer) createCQ(d verbs.Device, cqe int) (verbs.CQ, error) {
	t.logf(StepControl, "create CQ cqe=%d", cqe)
	cq, err := d.CreateCQ(cqe)
	if err != nil {
		t.logf(StepDetail, "create CQ failed: %v", err)
		return nil, err
	}
	return &traceCQ{CQ: cq, t: t}, nil
}

// traceDevice traces a verbs.Device of another backend than goroce's.
type traceDevice struct {
	verbs.Device
	t *tracer
}

func (d *traceDevice) AllocPD() (verbs.PD, error) { return d.t.allocPD(d.Device) }

func (d *traceDevice) CreateCQ(cqe int) (verbs.CQ, error) { return d.t.createCQ(d.Device, cqe) }

func (d *traceDevice) Close() error {
	d.t.logf(StepControl, "close device %s", d.Name())
	return d.Device.Close()
}

type tracePD struct {
	verbs.PD
	t *tracer
}

func (p *tracePD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	mr, err := p.PD.RegMR(buf, access)
	if err != nil {
		p.t.logf(StepControl, "register MR len=%d access=%v failed: %v", len(buf), access, err)
		return nil, err
	}
	p.t.logf(StepControl, "register MR addr=%#x len=%d lkey=%#x rkey=%#x access=%v",
		mr.Addr(), mr.Len(), mr.LKey(), mr.RKey(), access)
	return mr, nil
}

func (p *tracePD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	if attr == nil {
		return p.PD.CreateQP(nil) // the backend's error
	}
	a := *attr
	a.SendCQ, a.RecvCQ, a.SRQ = untraceCQ(a.SendCQ), untraceCQ(a.RecvCQ), untraceSRQ(a.SRQ)
	p.t.logf(StepControl, "create %v QP", a.Type)
	q, err := p.PD.CreateQP(&a)
	if err != nil {
		p.t.logf(StepDetail, "create QP failed: %v", err)
		return nil, err
	}
	c := a.Cap
	p.t.logf(StepDetail, "QP caps: qpn=%d max_send_wr=%d max_recv_wr=%d max_sge={s=%d,r=%d} max_inline=%d",
		q.QPN(), c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData)
	tq := &traceQP{QP: q, t: p.t}
	tq.dump()
	return tq, nil
}

func (p *tracePD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	p.t.logf(StepControl, "create SRQ max_wr=%d max_sge=%d limit=%d", attr.MaxWR, attr.MaxSGE, attr.Limit)
	s, err := p.PD.CreateSRQ(attr)
	if err != nil {
		return nil, err
	}
	return &traceSRQ{SRQ: s, t: p.t}, nil
}

func (p *tracePD) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	p.t.logf(StepControl, "create AH dest=%v", attr.DestAddr())
	return p.PD.CreateAH(attr)
}

func untraceCQ(c verbs.CQ) verbs.CQ {
	if tc, ok := c.(*traceCQ); ok {
		return tc.CQ
	}
	return c
}

func untraceSRQ(s verbs.SRQ) verbs.SRQ {
	if ts, ok := s.(*traceSRQ); ok {
		return ts.SRQ
	}
	return s
}

type traceQP struct {
	verbs.QP
	t *tracer
}

// dump logs the QP's attributes the way the minimal sample's dump_qp does.
func (q *traceQP) dump() {
	a, err := q.QP.Query()
	if err != nil {
		return
	}
	q.t.logf(StepDetail, "QP dump: qpn=%d state=%v mtu=%v sq_psn=%d rq_psn=%d max_rd_atomic=%d "+
		"max_dest_rd_atomic=%d retry=%d rnr_retry=%d timeout=%d dest_qpn=%d dest=%v",
		q.QPN(), a.State, a.PathMTU, a.SQPSN, a.RQPSN, a.MaxRDAtomic, a.MaxDestRDAtomic,
		a.RetryCnt, a.RNRRetry, a.Timeout, a.DestQPN, a.AH.DestAddr())
}

func (q *traceQP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	before, _ := q.QP.Query()
	to := before.State
	if mask&verbs.AttrState != 0 && attr != nil {
		to = attr.State
	}
	q.t.logf(StepControl, "modify QP %d %v -> %v (%v)", q.QPN(), before.State, to, mask)
	if err := q.QP.Modify(attr, mask); err != nil {
		q.t.logf(StepDetail, "modify QP %d failed: %v", q.QPN(), err)
		return err
	}
	q.dump()
	return nil
}

func (q *traceQP) PostSend(wrs []verbs.SendWR) error {
	for i := range wrs {
		w := &wrs[i]
		var n uint64
		for _, s := range w.SGL {
			n += uint64(s.Length)
		}
		if w.Flags&verbs.Inline != 0 {
			n = uint64(len(w.InlineData))
		}
		q.t.logf(StepData, "post %v len=%d on QP %d", w.Opcode, n, q.QPN())
		for _, s := range w.SGL {
			q.t.logf(StepDetail, "SGE(%v): addr=%#x len=%d lkey=%#x", w.Opcode, s.Addr, s.Length, s.LKey)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "WR: wr_id=%d opcode=%v signaled=%d num_sge=%d", w.ID, w.Opcode,
			btoi(w.Flags&verbs.Signaled != 0), len(w.SGL))
		switch w.Opcode {
		case verbs.OpWrite, verbs.OpWriteImm, verbs.OpRead:
			fmt.Fprintf(&b, " remote_addr=%#x rkey=%#x", w.RemoteAddr, w.RKey)
		case verbs.OpAtomicCmpSwp, verbs.OpAtomicFetchAdd:
			fmt.Fprintf(&b, " remote_addr=%#x rkey=%#x compare_add=%d swap=%d", w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap)
		}
		if w.Opcode == verbs.OpSendImm || w.Opcode == verbs.OpWriteImm {
			fmt.Fprintf(&b, " imm=%#x", w.Imm)
		}
		if w.Flags&verbs.Fence != 0 {
			b.WriteString(" fence=1")
		}
		if w.AH != nil {
			fmt.Fprintf(&b, " dest=%v remote_qpn=%d qkey=%#x", w.AH.Attr().DestAddr(), w.RemoteQPN, w.RemoteQKey)
		}
		q.t.logf(StepDetail, "%s", b.String())
	}
	err := q.QP.PostSend(wrs)
	if err != nil {
		q.t.logf(StepDetail, "post send failed: %v", err)
	}
	return err
}

func (q *traceQP) PostRecv(wrs []verbs.RecvWR) error {
	for i := range wrs {
		w := &wrs[i]
		q.t.logf(StepData, "post RECV wr_id=%d num_sge=%d on QP %d", w.ID, len(w.SGL), q.QPN())
		for _, s := range w.SGL {
			q.t.logf(StepDetail, "SGE(RECV): addr=%#x len=%d lkey=%#x", s.Addr, s.Length, s.LKey)
		}
	}
	err := q.QP.PostRecv(wrs)
	if err != nil {
		q.t.logf(StepDetail, "post recv failed: %v", err)
	}
	return err
}

func (q *traceQP) Destroy() error {
	q.t.logf(StepControl, "destroy QP %d", q.QPN())
	return q.QP.Destroy()
}

type traceCQ struct {
	verbs.CQ
	t *tracer
}

func (c *traceCQ) Poll(wc []verbs.WC) int {
	n := c.CQ.Poll(wc)
	for i := range n {
		w := &wc[i]
		c.t.logf(StepDetail, "WC: wr_id=%d status=%v opcode=%v byte_len=%d qp_num=%d%s",
			w.ID, w.Status, w.Opcode, w.ByteLen, w.QPN, wcExtra(w))
	}
	return n
}

func wcExtra(w *verbs.WC) string {
	var b strings.Builder
	if w.Flags&verbs.WithImm != 0 {
		fmt.Fprintf(&b, " imm=%#x", w.Imm)
	}
	if w.Flags&verbs.WithInv != 0 {
		fmt.Fprintf(&b, " invalidated_rkey=%#x", w.Imm)
	}
	if w.Flags&verbs.WithGRH != 0 {
		fmt.Fprintf(&b, " src_qp=%d", w.SrcQP)
	}
	return b.String()
}

type traceSRQ struct {
	verbs.SRQ
	t *tracer
}

func (s *traceSRQ) PostRecv(wrs []verbs.RecvWR) error {
	for i := range wrs {
		s.t.logf(StepData, "post SRQ RECV wr_id=%d num_sge=%d", wrs[i].ID, len(wrs[i].SGL))
	}
	return s.SRQ.PostRecv(wrs)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
