package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/verbs"
)

// ListenConfig configures a Listener. A nil *ListenConfig accepts every
// request with the zero Params (a QP the agent creates). It is plain
// data, copied by Listen; OnRequest may run on several Accept goroutines
// at once.
type ListenConfig struct {
	// Backlog bounds the requests waiting for Accept (rdma_listen's
	// backlog); 0 means 16. A REQ that finds the backlog full is dropped
	// and the peer sends it again, as the kernel's rdma_cm does.
	Backlog int
	// OnRequest decides each connection request, on Accept's goroutine:
	// it returns the Params to accept with (its QP, which may have
	// receives posted already, and the REP's private data, such as a
	// buffer's address and rkey), or an error to refuse it. An error made
	// by Reject sends a REJ "consumer defined" with that error's private
	// data (a *RejectError with another Reason and ARI sends those) and
	// Accept goes on to the next request; any other error sends
	// the same REJ without private data and Accept returns the error.
	// nil accepts every request with the zero Params.
	OnRequest func(ctx context.Context, r *Request) (*Params, error)
}

// Request is a connection request as OnRequest sees it. It is plain data.
type Request struct {
	// Local is the listener address the peer asked for; Remote the
	// peer's address and source port (from rdma_cm's header).
	Local, Remote netip.AddrPort
	// PrivateData is the peer's: the 56 bytes that follow rdma_cm's
	// header in the REQ, zero-padded.
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the peer's offer.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the peer's.
	RetryCount, RNRRetryCount uint8
	// PathMTU is the REQ's path MTU.
	PathMTU bth.MTU
	// RemoteQPN is the peer's QP number.
	RemoteQPN uint32
	// RemoteCAGUID is the peer's CA GUID.
	RemoteCAGUID uint64
	// Info is the connection as the REQ sets it up, the depths being the
	// peer's offer (Accept's Params may lower them): ConnInfo.QPAttr on
	// it gives what rdma_init_qp_attr gives on a connection request, for
	// a QP Accept leaves to its caller (Params.ManualQP).
	Info ConnInfo
}

// Listener accepts connections to one address and rdma_cm TCP port. Its
// methods are safe for concurrent use.
type Listener struct {
	a       *Agent
	addr    netip.AddrPort // unspecified address: any
	cfg     ListenConfig
	pending chan *Conn
	done    chan struct{}
	closed  bool // under a.mu
	// ended holds the handshakes whose REP went out and that ended,
	// either way, for Accept to return; inflight (under a.mu) those still
	// waiting for their RTU, oldest first, at most Config.MaxHalfOpen.
	ended    chan *Conn
	inflight []*Conn
	// shared and release are set by the package-level Listen: the agent
	// its accepted connections hold, and the listener's own hold on it.
	shared  *deviceAgent
	release func()
}

// Listen starts accepting connection requests for addr: the device's
// address, or an unspecified one (0.0.0.0, ::) for any, and an rdma_cm
// TCP port (the service ID 0x0000000001060000 | port). Port 0 picks a free
// ephemeral port. ctx only bounds the call; the listener lives until
// Close.
func (a *Agent) Listen(ctx context.Context, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	if err := a.ok(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ip := addr.Addr().Unmap()
	if err := a.checkLocal(ip); err != nil {
		return nil, err
	}
	l := &Listener{a: a, done: make(chan struct{})}
	if cfg != nil {
		l.cfg = *cfg
	}
	if l.cfg.Backlog <= 0 {
		l.cfg.Backlog = 16
	}
	l.pending = make(chan *Conn, l.cfg.Backlog)
	l.ended = make(chan *Conn, 2*a.maxHalfOpen)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	port := addr.Port()
	if port == 0 {
		port = a.newPort()
	}
	for _, o := range a.listeners[port] {
		if o.addr.Addr().IsUnspecified() || !ip.IsValid() || ip.IsUnspecified() || o.addr.Addr() == ip {
			return nil, fmt.Errorf("%w: port %d is already listened on (%v)", ErrAddr, port, o.addr)
		}
	}
	if !ip.IsValid() {
		ip = netip.IPv4Unspecified()
		if a.addr.Is6() {
			ip = netip.IPv6Unspecified()
		}
	}
	l.addr = netip.AddrPortFrom(ip, port)
	a.listeners[port] = append(a.listeners[port], l)
	a.log.Debug("cm: listen", "addr", l.addr)
	return l, nil
}

// Addr returns the listener's address and port.
func (l *Listener) Addr() netip.AddrPort {
	if l == nil {
		return netip.AddrPort{}
	}
	return l.addr
}

// ok returns the error of a method called on a Listener Listen did not
// make.
func (l *Listener) ok() error {
	if l == nil || l.a == nil {
		return invalid("nil Listener: make one with Listen or Agent.Listen")
	}
	return nil
}

// Close stops the listener: requests not yet accepted are rejected (REJ
// "consumer defined") and Accept returns ErrClosed. Connections accepted
// before are not affected.
func (l *Listener) Close() error {
	if err := l.ok(); err != nil {
		return err
	}
	l.a.mu.Lock()
	l.a.closeListenerLocked(l)
	l.a.mu.Unlock()
	if l.release != nil {
		l.release()
	}
	return nil
}

func (a *Agent) closeListenerLocked(l *Listener) {
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	port := l.addr.Port()
	ls := a.listeners[port]
	for i, o := range ls {
		if o == l {
			ls = append(ls[:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(a.listeners, port)
	} else {
		a.listeners[port] = ls
	}
	a.closeHandshakesLocked(l)
	for {
		select {
		case c := <-l.pending:
			if c.state == stREQRcvd || c.state == stMRAReqSent {
				a.send(c.peer, c.tid, &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
					MessageRejected: mad.RejectedREQ, Reason: mad.RejConsumerDefined})
				c.fail(ErrClosed)
				a.forget(c)
			}
		default:
			return
		}
	}
}

// Accept waits for a connection request, has ListenConfig.OnRequest
// decide it, and for an accepted one sends the REP and waits for the RTU.
// It returns the connection, or an error: ErrClosed once the listener is
// closed, ctx's error (the handshake it waited for is then rejected),
// OnRequest's own error, a *RejectError when the peer rejected the REP,
// ErrTimeout when the peer never answered it.
//
// A peer that never finishes its handshake cannot hold the listener up:
// when an RTU has not come within RTUPatience and another request waits,
// or at once while half the backlog waits, Accept leaves the handshake to
// finish in the background and takes the next request; a later Accept
// returns what became of it (the connection, or its error). Past Config.MaxHalfOpen such handshakes, the oldest is
// given up to make room (counted in Stats.Evicted; its QP goes to ERR,
// and one OnRequest gave is the program's again). A handshake's error
// says which request failed; a server goes on accepting after one.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if err := l.ok(); err != nil {
		return nil, err
	}
	for {
		select {
		case c := <-l.ended:
			return l.finish(c)
		default:
		}
		select {
		case c := <-l.ended:
			return l.finish(c)
		case c := <-l.pending:
			switch err := l.accept(ctx, c); {
			case err == errGone:
				continue
			case err != nil:
				return nil, err
			}
			if conn, err, done := l.await(ctx, c); done {
				return conn, err
			}
		case <-l.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("cm: accept on %v: %w", l.addr, ctx.Err())
		}
	}
}

// accept answers one request: it returns nil once the REP is sent,
// errGone when the request went away or OnRequest rejected it, and
// OnRequest's other errors.
func (l *Listener) accept(ctx context.Context, c *Conn) error {
	r, ok := l.request(c)
	if !ok {
		return errGone
	}
	p, err := l.decide(ctx, c, r)
	if err != nil {
		if _, err := l.refuse(c, err); err != nil {
			return err
		}
		return errGone
	}
	return l.sendREP(c, p)
}

// request returns the Request OnRequest sees for c, and false when c is no
// longer waiting for an answer.
func (l *Listener) request(c *Conn) (*Request, bool) {
	a := l.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.state != stREQRcvd && c.state != stMRAReqSent {
		return nil, false
	}
	m := c.req
	info := c.info
	info.ResponderResources, info.InitiatorDepth = m.InitiatorDepth, m.ResponderResources
	info.LocalACKTimeout = c.qpACKTimeout()
	p := &m.Primary
	info.AH = verbs.AHAttr{DGID: c.peerGID, FlowLabel: p.FlowLabel, HopLimit: p.HopLimit, TrafficClass: p.TrafficClass,
		SL: p.SL, Port: 1}
	return &Request{Local: c.local, Remote: c.remote, PrivateData: append([]byte(nil), m.PrivateData[mad.CMAHeaderLen:]...),
		ResponderResources: m.ResponderResources, InitiatorDepth: m.InitiatorDepth, RetryCount: m.RetryCount,
		RNRRetryCount: m.RNRRetryCount, PathMTU: m.PathMTU, RemoteQPN: m.LocalQPN, RemoteCAGUID: m.LocalCAGUID,
		Info: info}, true
}

// decide asks OnRequest about the request and readies the QP it gives (or
// one the agent makes) up to RTS. Until the REP goes out, c.qp and c.own
// are this goroutine's: the agent leaves the QP of a connection in
// REQ_RCVD alone.
func (l *Listener) decide(ctx context.Context, c *Conn, r *Request) (*Params, error) {
	var p *Params
	var err error
	if l.cfg.OnRequest != nil {
		p, err = l.cfg.OnRequest(ctx, r)
	}
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = &Params{}
	}
	if len(p.PrivateData) > mad.REPPrivateDataLen {
		return nil, fmt.Errorf("%w: %d bytes in a REP (at most %d)", ErrPrivateData, len(p.PrivateData), mad.REPPrivateDataLen)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.PathMTU != 0 && p.PathMTU < c.info.PathMTU {
		return nil, &rejectWith{mad.RejInvalidMTU, invalid("Params.PathMTU %d is below the path MTU %d the REQ asks "+
			"for, and the REP cannot lower it: dial with a lower PathMTU, or accept with PathMTU 0",
			p.PathMTU.Bytes(), c.info.PathMTU.Bytes())}
	}
	m := c.req
	rr := min(depth(p.ResponderResources), m.InitiatorDepth)
	id := min(depth(p.InitiatorDepth), m.ResponderResources)
	c.params = *p
	if err := c.setupQP(p, rr > 0); err != nil {
		return nil, err
	}
	l.a.mu.Lock()
	c.info.ResponderResources, c.info.InitiatorDepth, c.info.LocalQPN = rr, id, c.qp.QPN()
	c.info.LocalACKTimeout = c.qpACKTimeout()
	l.a.mu.Unlock()
	if err := c.toRTS(&m.Primary); err != nil {
		c.release()
		return nil, err
	}
	return p, nil
}

// refuse answers a request that OnRequest refused, or that could not be
// served, with a REJ. It returns nil, nil for a refusal made by Reject
// (Accept goes on to the next request), and the error otherwise.
func (l *Listener) refuse(c *Conn, err error) (*Conn, error) {
	a := l.a
	var rej *RejectError
	isRej := errors.As(err, &rej)
	a.mu.Lock()
	if c.state == stREQRcvd || c.state == stMRAReqSent {
		msg := &mad.REJ{LocalCommID: c.info.LocalCommID, RemoteCommID: c.info.RemoteCommID,
			MessageRejected: mad.RejectedREQ, Reason: mad.RejConsumerDefined}
		if rw := (*rejectWith)(nil); errors.As(err, &rw) {
			msg.Reason = rw.reason
		}
		if isRej {
			if rej.Reason != 0 {
				msg.Reason = rej.Reason
			}
			copy(msg.PrivateData[:], rej.PrivateData)
			msg.RejectInfoLength = uint8(copy(msg.ARI[:], rej.ARI))
		}
		a.log.Debug("cm: reject", "local_id", c.info.LocalCommID, "remote", c.remote, "reason", msg.Reason)
		a.send(c.peer, c.tid, msg)
		c.fail(err)
		a.forget(c)
	}
	a.mu.Unlock()
	if !isRej {
		return nil, fmt.Errorf("cm: accept from %v: %w", c.remote, err)
	}
	if len(rej.PrivateData) > mad.REJPrivateDataLen {
		return nil, fmt.Errorf("%w: %d bytes in a REJ (at most %d); sent the first %d", ErrPrivateData,
			len(rej.PrivateData), mad.REJPrivateDataLen, mad.REJPrivateDataLen)
	}
	return nil, nil
}

// sendREP accepts the request with a REP. It returns errGone when
// the peer gave up, or the agent closed, while OnRequest decided: the QP
// is then moved to ERR and what the agent made for it released.
func (l *Listener) sendREP(c *Conn, p *Params) error {
	a := l.a
	a.mu.Lock()
	if c.state != stREQRcvd && c.state != stMRAReqSent {
		err := c.hsErr
		a.mu.Unlock()
		if !c.params.ManualQP {
			a.qpToErr(c.qp)
		}
		c.release()
		if errors.Is(err, ErrClosed) {
			return err
		}
		return errGone
	}
	gone := l.makeRoomLocked()
	defer func() {
		a.mu.Unlock()
		for _, g := range gone {
			g.release()
		}
	}()
	m, i := c.req, &c.info
	rep := &mad.REP{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID, LocalQPN: i.LocalQPN,
		StartingPSN: i.RecvPSN, ResponderResources: i.ResponderResources, InitiatorDepth: i.InitiatorDepth,
		TargetACKDelay: caACKDelay, RNRRetryCount: count(p.RNRRetryCount), LocalCAGUID: a.guid}
	copy(rep.PrivateData[:], p.PrivateData)
	c.state = stREPSent
	// The REQ says how long to wait for the RTU, and how often to send
	// the REP again; a peer may ask for hours: the agent's own response
	// timeout and retries bound it (rdma_cm's values by default).
	c.maxTries = int(min(m.MaxCMRetries, a.maxRetries))
	a.qpns[remoteQP{c.peerGID, i.RemoteQPN}] = c
	c.inflight, c.awaited = true, true
	l.inflight = append(l.inflight, c)
	a.log.Debug("cm: send REP", "local_id", i.LocalCommID, "remote_id", i.RemoteCommID, "qpn", i.LocalQPN,
		"psn", i.RecvPSN)
	a.startExchange(c, a.send(c.peer, c.tid, rep), min(cmTimeout(m.LocalCMResponseTimeout), cmTimeout(a.respTimeout)))
	return nil
}

// errGone is sendREP's word for a request that went away; Accept goes on
// to the next one.
var errGone = errors.New("cm: the request went away")

// onREQ handles a REQ: a duplicate is answered from the connection's
// state; a new one goes to its listener's backlog, or is rejected.
func (a *Agent) onREQ(src netip.Addr, h *mad.Header, m *mad.REQ) {
	if c := a.remote[remoteID{m.LocalCommID, m.LocalCAGUID}]; c != nil && !c.active {
		a.dupREQ(c)
		return
	}
	l, cma, reason, ari := a.matchREQ(m)
	if reason == 0 && len(a.conns) >= a.maxConns {
		a.ctr.refused.Add(1)
		reason = mad.RejNoResources
	}
	if reason != 0 {
		a.rejectREQ(src, h, m, reason, ari)
		return
	}
	peerGID := m.Primary.LocalGID
	if !gidAddr(peerGID).IsValid() {
		peerGID = verbs.GIDFromAddr(src)
	}
	if old := a.qpns[remoteQP{peerGID, m.LocalQPN}]; old != nil {
		// A new REQ from a QP that has a connection here: the peer lost
		// it. Refuse as stale and tear the old one down.
		a.rejectREQ(src, h, m, mad.RejStaleConn, nil)
		a.staleLocked(old)
		return
	}
	c := a.newPassive(l, src, h, m, &cma)
	c.peerGID = peerGID
	select {
	case l.pending <- c:
	default:
		a.ctr.backlog.Add(1)
		return
	}
	a.conns[c.info.LocalCommID] = c
	a.remote[remoteID{m.LocalCommID, m.LocalCAGUID}] = c
	a.log.Debug("cm: REQ received", "local_id", c.info.LocalCommID, "remote_id", m.LocalCommID, "from", c.remote,
		"remote_qpn", m.LocalQPN, "psn", m.StartingPSN)
}

// matchREQ finds the listener of a new REQ, with the REQ's rdma_cm
// header. It returns the reason to reject it with instead (and the REJ's
// additional information), 0 when it is acceptable; the caller holds a.mu.
func (a *Agent) matchREQ(m *mad.REQ) (l *Listener, cma mad.CMAHeader, reason mad.RejectReason, ari []byte) {
	ps, port, ok := mad.ParseServiceID(m.ServiceID)
	if !ok || ps != mad.PortSpaceTCP || len(a.listeners[port]) == 0 {
		return nil, cma, mad.RejInvalidServiceID, nil
	}
	if err := cma.Unmarshal(m.PrivateData[:]); err != nil {
		return nil, cma, mad.RejConsumerDefined, nil
	}
	dst := cma.Dst.Unmap()
	local, ok := a.localFor(dst)
	if !ok {
		return nil, cma, mad.RejConsumerDefined, nil
	}
	for _, o := range a.listeners[port] {
		if o.addr.Addr() == dst || o.addr.Addr() == netip.IPv6Unspecified() ||
			o.addr.Addr() == netip.IPv4Unspecified() && dst.Is4() {
			l = o
			break
		}
	}
	switch {
	case l == nil:
		// rdma_cm finds no listener for the address: its handler fails
		// and the IB CM rejects for the consumer.
		return nil, cma, mad.RejConsumerDefined, nil
	case m.TransportServiceType != mad.TransportRC:
		return nil, cma, mad.RejInvalidTransportType, nil
	case !a.isLocal(netip.AddrFrom16(m.Primary.RemoteGID)):
		gid := verbs.GIDFromAddr(local)
		return nil, cma, mad.RejInvalidGID, gid[:]
	case m.PathMTU.Bytes() == 0:
		return nil, cma, mad.RejInvalidMTU, nil
	}
	return l, cma, 0, nil
}

// rejectREQ answers a REQ with a REJ; the caller holds a.mu.
func (a *Agent) rejectREQ(src netip.Addr, h *mad.Header, m *mad.REQ, reason mad.RejectReason, ari []byte) {
	r := &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.RejectedREQ, Reason: reason}
	r.RejectInfoLength = uint8(copy(r.ARI[:], ari))
	a.log.Debug("cm: reject REQ", "from", src, "service_id", fmt.Sprintf("%#x", m.ServiceID), "reason", reason)
	a.send(src, h.TID, r)
	if a.onReject != nil {
		rej := Rejection{From: src, ServiceID: m.ServiceID, Reason: reason}
		if ps, port, ok := mad.ParseServiceID(m.ServiceID); ok && ps == mad.PortSpaceTCP {
			rej.Port = port
		}
		for port, ls := range a.listeners {
			if len(ls) > 0 {
				rej.Listening = append(rej.Listening, port)
			}
		}
		slices.Sort(rej.Listening)
		a.rejected = append(a.rejected, rej)
	}
}

// newPassive makes the passive side's connection for a new REQ to l; the
// caller holds a.mu.
func (a *Agent) newPassive(l *Listener, src netip.Addr, h *mad.Header, m *mad.REQ, cma *mad.CMAHeader) *Conn {
	c := newConn(a, false)
	c.listener = l
	c.req = m
	c.tid = h.TID
	c.peer = src
	c.local = netip.AddrPortFrom(netip.AddrFrom16(m.Primary.RemoteGID).Unmap(), l.addr.Port())
	c.remote = netip.AddrPortFrom(cma.Src.Unmap(), cma.SrcPort)
	c.peerData = append([]byte(nil), m.PrivateData[mad.CMAHeaderLen:]...)
	mtu := min(m.PathMTU, a.mtu)
	c.info = ConnInfo{
		LocalCommID: a.newLocalID(), RemoteCommID: m.LocalCommID, RemoteQPN: m.LocalQPN,
		SendPSN: m.StartingPSN, RecvPSN: rand.Uint32() & bth.PSNMask, PathMTU: mtu,
		RetryCount: min(m.RetryCount, maxCount), RNRRetryCount: min(m.RNRRetryCount, maxCount),
		LocalACKTimeout: m.Primary.LocalACKTimeout, RemoteCAGUID: m.LocalCAGUID, ServiceID: m.ServiceID,
	}
	c.pathACK = m.Primary.LocalACKTimeout
	c.timeout = cmTimeout(m.LocalCMResponseTimeout)
	c.state = stREQRcvd
	return c
}

// dupREQ answers a REQ the passive side has seen already; the caller
// holds a.mu.
func (a *Agent) dupREQ(c *Conn) {
	a.ctr.duplicates.Add(1)
	i := &c.info
	switch c.state {
	case stREQRcvd, stMRAReqSent:
		// The application is still deciding: ask for more time.
		c.state = stMRAReqSent
		a.send(c.peer, c.tid, &mad.MRA{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID,
			MessageMRAed: mad.MRAedREQ, ServiceTimeout: a.respTimeout})
	case stREPSent, stMRARepRcvd:
		// The REP was lost, or crossed the REQ: send it again now.
		a.sendRaw(c.peer, c.pending)
	case stTimeWait:
		a.send(c.peer, c.tid, &mad.REJ{LocalCommID: i.LocalCommID, RemoteCommID: i.RemoteCommID,
			MessageRejected: mad.RejectedREQ, Reason: mad.RejStaleConn})
	}
}

// ariGUID returns the CA GUID a REJ "timeout" carries in its ARI, or 0.
func ariGUID(ari []byte) uint64 {
	if len(ari) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(ari)
}
