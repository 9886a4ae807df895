package rsocket

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// endpoint is a connection's verbs resources, as rsocket.c's
// rs_create_ep makes them: a PD, a CQ, an RC QP that signals every send,
// and three registered buffers. It is owned by one connection (or by the
// Dial or Accept making it). As in rsocket.c, one CQ takes the sends'
// and the receives' completions: the call that waits on it, of either
// direction, wakes for whatever moves the connection on.
type endpoint struct {
	pd verbs.PD
	cq cqOf // send and receive completions
	qp verbs.QP
	// smr is the send buffer, followed by ctrlSlots target SGL entries
	// for the credit messages that cannot go inline.
	smr  verbs.MR
	sbuf []byte
	// rmr is the receive buffer the peer writes into.
	rmr  verbs.MR
	rbuf []byte
	// tmr is this side's target SGL: sglEntries entries the peer writes
	// to publish its receive buffers, followed by its iomap table
	// (tiomap, Options.IOMapSize entries), where the peer publishes the
	// buffers it maps.
	tmr    verbs.MR
	tsgl   []byte
	tiomap []byte
	recv   int // receives posted: credits plus extraRecvs
	// maps are the buffers this side mapped for the peer (Conn.Map),
	// deregistered by close; under Conn.mu once the Conn exists.
	maps []*mapping
}

// recvFlag marks a receive's work request ID (rsocket.c's
// RS_WR_ID_FLAG_RECV); a send's ID is its immediate.
const recvFlag = 1 << 63

// newEndpoint makes the resources on dev for options o, moves the QP to
// INIT and posts its receives, so that the connection manager can take
// it to RTS and the peer can send at once.
func newEndpoint(dev verbs.Device, o *Options) (e *endpoint, err error) {
	e = &endpoint{recv: o.RecvQueue + extraRecvs}
	defer func() {
		if err != nil {
			e.close()
			e = nil
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("rsocket: protection domain: %w", err)
	}
	if e.cq, err = newCQ(dev, o.SendQueue+e.recv); err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq.CQ, RecvCQ: e.cq.CQ, SignalAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(o.SendQueue), MaxRecvWR: uint32(e.recv), MaxSendSGE: 2, MaxRecvSGE: 1,
			MaxInlineData: uint32(o.Inline)}})
	if err != nil {
		return nil, fmt.Errorf("rsocket: queue pair (send queue %d, receive queue %d, inline %d; lower Options.SendQueue, RecvQueue or Inline): %w",
			o.SendQueue, e.recv, o.Inline, err)
	}
	e.sbuf = make([]byte, o.SendBuffer+ctrlSlots*sgeLen)
	if e.smr, err = e.pd.RegMR(e.sbuf, 0); err != nil {
		return nil, fmt.Errorf("rsocket: send buffer: %w", err)
	}
	e.rbuf = make([]byte, o.RecvBuffer)
	if e.rmr, err = e.pd.RegMR(e.rbuf, verbs.LocalWrite|verbs.RemoteWrite); err != nil {
		return nil, fmt.Errorf("rsocket: receive buffer: %w", err)
	}
	tbuf := make([]byte, sglEntries*sgeLen+o.IOMapSize*iomapEntryLen)
	e.tsgl, e.tiomap = tbuf[:sglEntries*sgeLen], tbuf[sglEntries*sgeLen:]
	if e.tmr, err = e.pd.RegMR(tbuf, verbs.LocalWrite|verbs.RemoteWrite); err != nil {
		return nil, fmt.Errorf("rsocket: target SGL: %w", err)
	}
	if err = roce.ModifyToInit(e.qp, &roce.ConnParams{Access: verbs.LocalWrite | verbs.RemoteWrite}); err != nil {
		return nil, fmt.Errorf("rsocket: %w", err)
	}
	wrs := make([]verbs.RecvWR, e.recv)
	for i := range wrs {
		wrs[i].ID = recvFlag
	}
	if err = e.qp.PostRecv(wrs); err != nil {
		return nil, fmt.Errorf("rsocket: posting %d receives: %w", e.recv, err)
	}
	return e, nil
}

// connData returns this side's rs_conn_data: its credits, its target SGL
// and iomap table and the first half of its receive buffer. Target SGL
// and iomap entries are little-endian whatever the host, so flagNet is
// never set.
func (e *endpoint) connData(credits int) *connData {
	return &connData{
		version: connVersion, flags: flagIomap, credits: uint16(credits),
		iomapSize: iomapScale(len(e.tiomap) / iomapEntryLen),
		targetSGL: sge{addr: e.tmr.Addr(), key: e.tmr.RKey(), length: sglEntries},
		dataBuf:   sge{addr: e.rmr.Addr(), key: e.rmr.RKey(), length: uint32(len(e.rbuf) / 2)},
	}
}

// close destroys what newEndpoint made, QP first so that no access to
// the buffers is under way when they are deregistered.
func (e *endpoint) close() {
	if e.qp != nil {
		e.qp.Destroy()
	}
	for _, m := range e.maps {
		m.mr.Dereg()
	}
	e.maps = nil
	for _, m := range []verbs.MR{e.smr, e.rmr, e.tmr} {
		if m != nil {
			m.Dereg()
		}
	}
	if e.cq.CQ != nil {
		e.cq.Destroy()
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
}

// cqOf is a CQ and, when it can say (the software device's can), how
// many completions it holds: an empty one is not polled, as polling it
// yields the processor; and, when it has them (the software device's
// does), a wait that receives from the link itself and a way to end it.
type cqOf struct {
	verbs.CQ
	len  interface{ Len() int }
	wait cqWaiter
}

// cqWaiter is a CQ a goroutine can wait on while receiving for the device
// itself (qp.CQ: the waiter leads), and wake with Interrupt.
type cqWaiter interface {
	WaitUntil(ctx context.Context, deadline time.Time) (bool, error)
	Interrupt()
}

func newCQ(dev verbs.Device, n int) (cqOf, error) {
	q, err := dev.CreateCQ(n)
	if err != nil {
		return cqOf{}, fmt.Errorf("rsocket: completion queue of %d: %w", n, err)
	}
	l, _ := q.(interface{ Len() int })
	w, _ := q.(cqWaiter)
	return cqOf{CQ: q, len: l, wait: w}, nil
}

// empty reports whether the CQ is known to hold no completion.
func (q *cqOf) empty() bool { return q.len != nil && q.len.Len() == 0 }
