package roce

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// cmRejecter answers for QP 1 of a device that has none, as the kernel's
// CM does for a port where no application listens: a connection request
// (REQ) gets a REJ "invalid service ID" at once, a DREQ a DREP, a SIDR_REQ
// a SIDR_REP "service ID not supported". Without it a peer that dials a
// goroce program that has no CM agent (no cm.Listen, no cm.NewAgent) would
// send its REQ again for the CM's whole retry budget, 103 s with rdma_cm's
// values, before it gave up.
//
// It sits between the device and its transport and steps aside while the
// device has a GSI QP, whoever made it: an agent takes QP 1 over by
// creating it, and the rejections come back once it is destroyed. Its only
// cost on the data path is a look at each received packet's opcode while
// the device has no GSI QP. It is safe for concurrent use.
type cmRejecter struct {
	transport.Transport
	dev atomic.Pointer[qp.Device]
	log *slog.Logger

	mu  sync.Mutex // guards buf and psn
	buf [bth.BTHLen + bth.DETHLen + mad.Len + bth.ICRCLen]byte
	psn bth.PSN
}

// pollingRejecter is a cmRejecter over a transport that can receive on the
// caller's goroutine (transport.Poller), which the device's busy-poll mode
// looks for.
type pollingRejecter struct {
	*cmRejecter
	p transport.Poller
}

// Poll receives on the caller's goroutine (transport.Poller).
func (r pollingRejecter) Poll() int { return r.p.Poll() }

// waitingRejecter is a cmRejecter over a transport that lets a goroutine
// wait for packets and receive them itself (transport.Waiter), which the
// device's waits look for.
type waitingRejecter struct {
	*cmRejecter
	w transport.Waiter
}

// Poll receives on the caller's goroutine (transport.Poller).
func (r waitingRejecter) Poll() int { return r.w.Poll() }

// Wait waits for packets and receives them on the caller's goroutine
// (transport.Waiter).
func (r waitingRejecter) Wait(deadline time.Time, ready func() bool) (int, error) {
	return r.w.Wait(deadline, ready)
}

// Wake ends the Wait in progress (transport.Waiter).
func (r waitingRejecter) Wake() { r.w.Wake() }

// rejectNoAgent wraps t in a cmRejecter that logs its answers to log (at
// Debug; nil discards); serve tells it the device.
func rejectNoAgent(t transport.Transport, log *slog.Logger) (transport.Transport, *cmRejecter) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &cmRejecter{Transport: t, log: log}
	if w, ok := t.(transport.Waiter); ok {
		return waitingRejecter{r, w}, r
	}
	if p, ok := t.(transport.Poller); ok {
		return pollingRejecter{r, p}, r
	}
	return r, r
}

// serve gives the rejecter the device whose QP 1 it stands in for.
func (r *cmRejecter) serve(d *qp.Device) { r.dev.Store(d) }

// SendsPayload reports whether the transport underneath takes packets with
// their payload apart.
func (r *cmRejecter) SendsPayload() bool { return transport.SendsPayload(r.Transport) }

// Start starts the transport underneath with a handler that hands every
// packet to h and then answers the CM requests among them when the
// device has no GSI QP.
func (r *cmRejecter) Start(h transport.Handler) error {
	if h == nil {
		return fmt.Errorf("roce: %w: Start needs a Handler", verbs.ErrNil)
	}
	return r.Transport.Start(func(pkts []transport.Packet) {
		h(pkts)
		if d := r.dev.Load(); d != nil && d.HasGSI() {
			return
		}
		for i := range pkts {
			if p := &pkts[i]; len(p.Data) > bth.BTHLen && bth.Opcode(p.Data[0]) == bth.UDSendOnly {
				r.answer(p)
			}
		}
	})
}

// answer replies to p when it is a CM request to QP 1.
func (r *cmRejecter) answer(p *transport.Packet) {
	var pkt bth.Packet
	if pkt.Parse(p.Data) != nil || pkt.BTH.DestQP() != bth.GSIQPN || pkt.DETH.QKey() != bth.GSIQKey ||
		len(pkt.Payload) != mad.Len || !p.Src.IsValid() {
		return
	}
	h, m, err := mad.Decode(pkt.Payload)
	if err != nil || h.Method != mad.MethodSend {
		return
	}
	var reply mad.Message
	switch m := m.(type) {
	case *mad.REQ:
		reply = &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.RejectedREQ, Reason: mad.RejInvalidServiceID}
	case *mad.DREQ:
		reply = &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}
	case *mad.SIDRREQ:
		reply = &mad.SIDRREP{RequestID: m.RequestID, ServiceID: m.ServiceID, Status: mad.SIDRServiceUnsupported}
	default:
		return
	}
	r.log.Debug("roce: no CM agent on QP 1: answered", "from", p.Src, "attr", mad.AttrName(h.AttrID),
		"answer", mad.AttrName(reply.AttrID()))
	r.send(p.Dst, p.Src, mad.CMHeader(mad.MethodSend, h.TID), reply)
}

// send sends m to QP 1 of dst from QP 1, as a GSI QP does.
func (r *cmRejecter) send(src, dst netip.Addr, h mad.Header, m mad.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var pkt bth.Packet
	n := pkt.Build(r.buf[:], &bth.BTHFields{Opcode: bth.UDSendOnly, PKey: bth.DefaultPKey, DestQP: bth.GSIQPN,
		PSN: r.psn, AckReq: true}, mad.Len)
	r.psn = r.psn.Add(1)
	pkt.DETH.Encode(&bth.DETHFields{QKey: bth.GSIQKey, SrcQP: bth.GSIQPN})
	if mad.Encode(h, m, pkt.Payload) != nil {
		return
	}
	if src.IsUnspecified() || !src.IsValid() {
		src = r.LocalAddr()
	}
	r.Transport.Send([]transport.Packet{{Data: r.buf[:n], Src: src, Dst: dst, SrcPort: gsiSourcePort}})
}

// gsiSourcePort is the UDP source port rxe gives QP 1's packets (0xC000
// plus a 14-bit hash of the QPN), which raw transports follow.
const gsiSourcePort = 0xC000 | uint16(bth.GSIQPN*0x61C88647>>18)
