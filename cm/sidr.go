package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/verbs"
)

// MaxSIDRUserData is the most private data a SIDR_REQ carries after
// rdma_cm's header.
const MaxSIDRUserData = mad.SIDRREQPrivateDataLen - mad.CMAHeaderLen

// DatagramListenConfig configures a DatagramListener. It is plain data,
// copied by ListenDatagram.
type DatagramListenConfig struct {
	// QP is the UD QP that serves the port: its number goes in the
	// SIDR_REP. Required.
	QP verbs.QP
	// QKey is the Q_Key the SIDR_REP announces; 0 means
	// verbs.DefaultQKey, rdma_cm's RDMA_UDP_QKEY.
	QKey uint32
	// OnRequest decides each request, on the agent's goroutine, so it
	// must not block: it returns the SIDR_REP's private data (at most
	// 136 bytes), or an error to refuse (status "rejected", with the
	// private data of an error made by Reject), or ErrAnswerLater to
	// answer later with the request's Answer or Refuse (the QP of
	// librdmacm's rdma_accept, made once the program has seen the
	// request). nil answers every request with no private data.
	OnRequest func(r *DatagramRequest) ([]byte, error)
}

// ErrAnswerLater, returned by a DatagramListenConfig.OnRequest, leaves
// the SIDR_REQ unanswered for now: the request's Answer or Refuse answers
// it, and the peer's repeats of it that come meanwhile are dropped.
var ErrAnswerLater = errors.New("cm: SIDR_REQ to be answered later")

// DatagramRequest is a SIDR_REQ as OnRequest sees it. Its fields are
// plain data; Answer and Refuse are safe for concurrent use.
type DatagramRequest struct {
	// Local is the address the peer asked for, Remote the peer's.
	Local, Remote netip.AddrPort
	// PrivateData is the peer's: the 180 bytes after rdma_cm's header.
	PrivateData []byte

	a   *Agent
	src netip.Addr
	tid uint64
	rep mad.SIDRREP
	key sidrKey
}

// sidrKey names a SIDR_REQ answered later: its sender and request ID.
type sidrKey struct {
	src netip.Addr
	id  uint32
}

// Answer answers a request OnRequest left for later (ErrAnswerLater)
// with a SIDR_REP "valid": qp's number, the Q_Key (0: verbs.DefaultQKey)
// and up to 136 bytes of private data.
func (r *DatagramRequest) Answer(qp verbs.QP, qkey uint32, privateData []byte) error {
	if r == nil || r.a == nil {
		return invalid("Answer of a DatagramRequest that OnRequest did not leave for later")
	}
	if isNil(qp) || qp.Type() != verbs.UD {
		return invalid("Answer needs a UD QP")
	}
	if len(privateData) > len(r.rep.PrivateData) {
		return fmt.Errorf("%w: %d bytes in a SIDR_REP: at most %d", ErrPrivateData, len(privateData), len(r.rep.PrivateData))
	}
	if qkey == 0 {
		qkey = verbs.DefaultQKey
	}
	rep := r.rep
	rep.Status, rep.QPN, rep.QKey = mad.SIDRValid, qp.QPN(), qkey
	copy(rep.PrivateData[:], privateData)
	return r.answer(&rep)
}

// Refuse answers a request OnRequest left for later with a SIDR_REP
// "rejected", carrying privateData (at most 136 bytes).
func (r *DatagramRequest) Refuse(privateData []byte) error {
	if r == nil || r.a == nil {
		return invalid("Refuse of a DatagramRequest that OnRequest did not leave for later")
	}
	rep := r.rep
	rep.Status = mad.SIDRRejected
	copy(rep.PrivateData[:], privateData)
	return r.answer(&rep)
}

func (r *DatagramRequest) answer(rep *mad.SIDRREP) error {
	a := r.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sidrLater[r.key] != r {
		return invalid("the SIDR_REQ was answered already")
	}
	delete(a.sidrLater, r.key)
	if !a.closed {
		a.send(r.src, r.tid, rep)
	}
	return nil
}

// DatagramListener answers service ID resolution requests (SIDR_REQ) for
// one port of rdma_cm's UDP port space with a UD QP's number and Q_Key.
// Its methods are safe for concurrent use.
type DatagramListener struct {
	a      *Agent
	addr   netip.AddrPort
	cfg    DatagramListenConfig
	closed bool // under a.mu
}

// DatagramPeer is the answer to ResolveDatagram: where to send UD
// messages for the service. It is plain data.
type DatagramPeer struct {
	Addr        netip.AddrPort
	QPN         uint32
	QKey        uint32
	PrivateData []byte // the SIDR_REP's 136 bytes
}

// SIDRError is a SIDR_REP whose status is not "valid". It matches
// ErrRejected, and ErrConnRefused for "service ID not supported" (nobody
// listens). It is not modified after it is returned.
type SIDRError struct {
	Remote      netip.AddrPort
	Status      mad.SIDRStatus
	PrivateData []byte
}

// Error describes the failure.
func (e *SIDRError) Error() string {
	if e == nil {
		return "cm: <nil SIDRError>"
	}
	return fmt.Sprintf("cm: resolve %v: %v (SIDR_REP status %d)", e.Remote, e.Status, uint8(e.Status))
}

// Is reports whether target is ErrRejected, or ErrConnRefused for an
// unsupported service ID.
func (e *SIDRError) Is(target error) bool {
	return e != nil && target == ErrRejected || target == ErrConnRefused && e.Status == mad.SIDRServiceUnsupported
}

// ListenDatagram answers SIDR_REQs for addr (the device's address or an
// unspecified one, and a port of rdma_cm's UDP port space, service ID
// 0x0000000001110000 | port) with cfg.QP's number and Q_Key.
func (a *Agent) ListenDatagram(ctx context.Context, addr netip.AddrPort, cfg *DatagramListenConfig) (*DatagramListener, error) {
	if err := a.ok(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg == nil || isNil(cfg.QP) && cfg.OnRequest == nil {
		return nil, invalid("ListenDatagram needs a UD QP in DatagramListenConfig.QP (or an OnRequest that answers later)")
	}
	if !isNil(cfg.QP) && cfg.QP.Type() != verbs.UD {
		return nil, fmt.Errorf("cm: %w: ListenDatagram needs a UD QP, not %v", verbs.ErrInvalidAttr, cfg.QP.Type())
	}
	ip := addr.Addr().Unmap()
	if err := a.checkLocal(ip); err != nil {
		return nil, err
	}
	if addr.Port() == 0 {
		return nil, fmt.Errorf("%w: port 0", ErrAddr)
	}
	l := &DatagramListener{a: a, addr: netip.AddrPortFrom(ip, addr.Port()), cfg: *cfg}
	if l.cfg.QKey == 0 {
		l.cfg.QKey = verbs.DefaultQKey
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	for _, o := range a.dlisteners[addr.Port()] {
		if !o.addr.Addr().IsValid() || o.addr.Addr().IsUnspecified() || !ip.IsValid() || ip.IsUnspecified() ||
			o.addr.Addr() == ip {
			return nil, fmt.Errorf("%w: UDP port %d is already listened on", ErrAddr, addr.Port())
		}
	}
	a.dlisteners[addr.Port()] = append(a.dlisteners[addr.Port()], l)
	return l, nil
}

// Addr returns the listener's address and port.
func (l *DatagramListener) Addr() netip.AddrPort {
	if l == nil {
		return netip.AddrPort{}
	}
	return l.addr
}

// Close stops answering; later SIDR_REQs get "service ID not supported".
func (l *DatagramListener) Close() error {
	if l == nil || l.a == nil {
		return invalid("nil DatagramListener: make one with Agent.ListenDatagram")
	}
	a := l.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	port := l.addr.Port()
	ls := a.dlisteners[port]
	for i, o := range ls {
		if o == l {
			ls = append(ls[:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(a.dlisteners, port)
	} else {
		a.dlisteners[port] = ls
	}
	return nil
}

// sidrQuery is a SIDR_REQ waiting for its SIDR_REP.
type sidrQuery struct {
	id       uint32
	dst      netip.AddrPort
	msg      []byte
	tries    int
	timer    clock.Timer
	gen      uint64
	done     chan struct{}
	peer     *DatagramPeer
	err      error
	closed   bool
	deadline time.Time // Config.ConnectTimeout
}

// finish ends the query; the caller holds a.mu.
func (q *sidrQuery) finish(p *DatagramPeer, err error) {
	if q.closed {
		return
	}
	q.closed = true
	q.peer, q.err = p, err
	close(q.done)
}

// ResolveDatagram asks the peer at addr (its IP address and a port of
// rdma_cm's UDP port space) which UD QP serves the port, with a SIDR_REQ
// carrying privateData (at most 180 bytes) after rdma_cm's header. It
// fails with a *SIDRError when the peer answers with another status than
// "valid", with ErrUnreachable when the network reports the peer
// unreachable, with ErrTimeout when it never answers (within
// Config.ConnectTimeout at most), or with ctx's error.
func (a *Agent) ResolveDatagram(ctx context.Context, addr netip.AddrPort, privateData []byte) (*DatagramPeer, error) {
	if err := a.ok(); err != nil {
		return nil, err
	}
	dst := addr.Addr().Unmap()
	if err := a.checkAddr(dst); err != nil {
		return nil, err
	}
	if addr.Port() == 0 {
		return nil, fmt.Errorf("%w: port 0", ErrAddr)
	}
	if len(privateData) > MaxSIDRUserData {
		return nil, fmt.Errorf("%w: %d bytes in a SIDR_REQ (at most %d)", ErrPrivateData, len(privateData), MaxSIDRUserData)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	q := &sidrQuery{id: a.newLocalID(), dst: netip.AddrPortFrom(dst, addr.Port()), done: make(chan struct{}),
		deadline: a.clk.Now().Add(a.connectTimeout)}
	m := &mad.SIDRREQ{RequestID: q.id, PKey: defaultPKey, ServiceID: mad.ServiceID(mad.PortSpaceUDP, addr.Port())}
	local, _ := a.localFor(dst) // checked above
	cma := mad.CMAHeader{SrcPort: a.newPort(), Src: local, Dst: dst}
	if err := cma.Marshal(m.PrivateData[:]); err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("cm: %w", err)
	}
	copy(m.PrivateData[mad.CMAHeaderLen:], privateData)
	a.sidr[q.id] = q
	q.msg = append([]byte(nil), a.send(dst, formTID(a.agentID, q.id), m)...)
	a.armSIDR(q)
	a.mu.Unlock()

	select {
	case <-q.done:
	case <-ctx.Done():
		a.mu.Lock()
		q.finish(nil, fmt.Errorf("cm: resolve %v: %w", q.dst, ctx.Err()))
		a.dropSIDR(q)
		a.mu.Unlock()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return q.peer, q.err
}

// sidrTimeout is how long a SIDR_REQ waits for its answer.
func (a *Agent) sidrTimeout() time.Duration { return cmTimeout(a.respTimeout) }

func (a *Agent) armSIDR(q *sidrQuery) {
	q.gen++
	gen := q.gen
	if q.timer != nil {
		q.timer.Stop()
	}
	d := max(min(a.sidrTimeout(), q.deadline.Sub(a.clk.Now())), 0)
	q.timer = a.clk.AfterFunc(d, func() { a.fireSIDR(q, gen) })
}

func (a *Agent) fireSIDR(q *sidrQuery, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || q.closed || q.gen != gen {
		return
	}
	if q.tries < int(a.maxRetries) && a.clk.Now().Before(q.deadline) {
		q.tries++
		a.ctr.retransmits.Add(1)
		a.sendRaw(q.dst.Addr(), q.msg)
		a.armSIDR(q)
		return
	}
	a.ctr.timeouts.Add(1)
	q.finish(nil, fmt.Errorf("cm: resolve %v: %w", q.dst, inner{ErrTimeout}))
	a.dropSIDR(q)
}

func (a *Agent) dropSIDR(q *sidrQuery) {
	q.gen++
	if q.timer != nil {
		q.timer.Stop()
	}
	if a.sidr[q.id] == q {
		delete(a.sidr, q.id)
	}
}

// onSIDRREP handles the answer to a SIDR_REQ.
func (a *Agent) onSIDRREP(m *mad.SIDRREP) {
	q := a.sidr[m.RequestID]
	if q == nil || m.ServiceID != mad.ServiceID(mad.PortSpaceUDP, q.dst.Port()) {
		a.ctr.unmatched.Add(1)
		return
	}
	pd := append([]byte(nil), m.PrivateData[:]...)
	if m.Status != mad.SIDRValid {
		q.finish(nil, &SIDRError{Remote: q.dst, Status: m.Status, PrivateData: pd})
	} else {
		q.finish(&DatagramPeer{Addr: q.dst, QPN: m.QPN, QKey: m.QKey, PrivateData: pd}, nil)
	}
	a.dropSIDR(q)
}

// onSIDRREQ answers a SIDR_REQ from its listener, or with "service ID not
// supported" when there is none.
func (a *Agent) onSIDRREQ(src netip.Addr, h *mad.Header, m *mad.SIDRREQ) {
	rep := &mad.SIDRREP{RequestID: m.RequestID, ServiceID: m.ServiceID, Status: mad.SIDRServiceUnsupported}
	key := sidrKey{src, m.RequestID}
	if a.sidrLater[key] != nil {
		return // a repeat of a request to be answered later
	}
	later := false
	defer func() {
		if !later {
			a.send(src, h.TID, rep)
		}
	}()
	ps, port, ok := mad.ParseServiceID(m.ServiceID)
	if !ok || ps != mad.PortSpaceUDP {
		return
	}
	var cma mad.CMAHeader
	if err := cma.Unmarshal(m.PrivateData[:]); err != nil {
		rep.Status = mad.SIDRRejected
		return
	}
	dst := cma.Dst.Unmap()
	local, ok := a.localFor(src)
	if a.isLocal(dst) {
		local = dst
	}
	var l *DatagramListener
	for _, o := range a.dlisteners[port] {
		if ip := o.addr.Addr(); !ip.IsValid() || ip == dst || ip == netip.IPv6Unspecified() ||
			ip == netip.IPv4Unspecified() && dst.Is4() {
			l = o
			break
		}
	}
	if l == nil || !ok {
		return
	}
	var data []byte
	var err error
	if l.cfg.OnRequest != nil {
		r := &DatagramRequest{Local: netip.AddrPortFrom(local, port),
			Remote:      netip.AddrPortFrom(cma.Src.Unmap(), cma.SrcPort),
			PrivateData: append([]byte(nil), m.PrivateData[mad.CMAHeaderLen:]...),
			a:           a, src: src, tid: h.TID, rep: *rep, key: key}
		data, err = l.cfg.OnRequest(r)
		if errors.Is(err, ErrAnswerLater) {
			later = true
			a.sidrLater[key] = r
			return
		}
	}
	if err == nil && isNil(l.cfg.QP) {
		err = invalid("no QP to answer with")
	}
	if err != nil {
		rep.Status = mad.SIDRRejected
		var rej *RejectError
		if errors.As(err, &rej) {
			copy(rep.PrivateData[:], rej.PrivateData)
		}
		return
	}
	rep.Status, rep.QPN, rep.QKey = mad.SIDRValid, l.cfg.QP.QPN(), l.cfg.QKey
	copy(rep.PrivateData[:], data)
}
