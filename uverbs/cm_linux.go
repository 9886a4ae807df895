package uverbs

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// The connection manager: librdmacm's ids, carried out by the server's
// cm.Agent on the device's QP 1. Handlers run under s.mu, as every
// control request does; what waits on the network (a Dial, a listener's
// Accept, a Close) runs in goroutines of the id's, which take s.mu only
// to look at the session's tables and never while they wait.

// agent returns the server's connection manager, starting it at its
// first use.
func (s *Server) agent() (*cm.Agent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cm != nil {
		return s.cm, nil
	}
	a, err := cm.NewAgent(s.dev, &cm.Config{Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.cm = a
	return a, nil
}

// cmChannel is an event channel of the session: the write end of the
// program's pipe, and the events waiting for room in it.
type cmChannel struct {
	h    uint32
	tag  uint32
	f    *os.File
	mu   sync.Mutex
	q    [][]byte
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// push queues an event; the channel's goroutine writes it. A CM event is
// never dropped: the queue grows while the program does not read.
func (c *cmChannel) push(e *abi.CMEvent) {
	b, _ := binary.Append(make([]byte, 0, abi.CMEventSize), binary.NativeEndian, e)
	c.mu.Lock()
	c.q = append(c.q, b)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run writes the queued events, in order, until the channel closes.
func (c *cmChannel) run() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		q := c.q
		c.q = nil
		c.mu.Unlock()
		for _, b := range q {
			if _, err := c.f.Write(b); err != nil {
				return // the program closed its end
			}
		}
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
	}
}

func (c *cmChannel) close() {
	close(c.done)
	c.f.Close()
	c.wg.Wait()
}

// cmID is an rdma_cm id of the session.
type cmID struct {
	s      *session
	h      uint32
	cookie uint64
	ch     *cmChannel
	ps     uint32
	qpType uint32
	src    netip.AddrPort
	dst    netip.AddrPort

	// Set as the id is used; under s.mu.
	listening    bool
	lr           *listenRec // a listening id's, or a request id's listener
	dln          *cm.DatagramListener
	conn         *cm.Conn
	peer         *cm.DatagramPeer
	request      chan decision // a connection request's id: the program's answer to come
	parent       *cmID
	reqInfo      *cm.Request
	ctx          context.Context
	cancel       context.CancelFunc
	destroyed    bool
	pathMTU      bth.MTU
	accepted     verbs.QP            // the QP rdma_accept gave the request
	sidr         *cm.DatagramRequest // a datagram request's, until answered
	rejected     bool
	connecting   bool
	closing      bool
	disconnected bool
	manual       bool                  // a connection of the program's own QP, to rdma_establish
	mcasts       map[uint64]netip.Addr // multicast joins, by the library's name for them
}

// decision is a program's answer to a connection request: the Params to
// accept it with, or the error to reject it with.
type decision struct {
	p   *cm.Params
	err error
}

func (s *session) cmRegisterChannel(body []byte, fd int) (any, []int, uint32) {
	var req abi.CMRegisterChannelReq
	var st unix.Stat_t
	if !decode(body, &req) || unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO ||
		unix.SetNonblock(fd, true) != nil {
		unix.Close(fd)
		return nil, nil, abi.EINVAL
	}
	h, ok := s.handle32()
	if !ok {
		unix.Close(fd)
		return nil, nil, abi.ENOMEM
	}
	c := &cmChannel{h: h, tag: req.Tag, f: os.NewFile(uintptr(fd), "cm-channel"), kick: make(chan struct{}, 1),
		done: make(chan struct{})}
	c.wg.Add(1)
	go c.run()
	s.cmChans[h] = c
	return &abi.HandleReply{Handle: h}, nil, 0
}

func (s *session) cmUnregisterChannel(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	c := s.cmChans[req.Handle]
	if c == nil {
		return abi.EINVAL
	}
	for _, id := range s.cmIDs {
		if id.ch == c {
			return abi.EBUSY
		}
	}
	delete(s.cmChans, req.Handle)
	c.close()
	return 0
}

func (s *session) cmCreateID(body []byte) (any, uint32) {
	var req abi.CMCreateIDReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	c := s.cmChans[req.Channel]
	switch {
	case c == nil:
		return nil, abi.EINVAL
	case req.PS != abi.PSTCP && req.PS != abi.PSUDP:
		return nil, abi.EOPNOTSUPP // RDMA_PS_IPOIB, RDMA_PS_IB: not on RoCE here
	}
	if _, err := s.srv.agent(); err != nil {
		return nil, errno(err)
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	id := &cmID{s: s, h: h, cookie: req.Cookie, ch: c, ps: req.PS, qpType: req.QPType}
	id.ctx, id.cancel = context.WithCancel(context.Background())
	s.cmIDs[h] = id
	return &abi.CMNewIDReply{ID: h}, 0
}

// sockaddr decodes a struct sockaddr_in or sockaddr_in6.
func sockaddr(b [abi.SockaddrSize]byte) (netip.AddrPort, bool) {
	switch binary.NativeEndian.Uint16(b[0:]) {
	case syscall.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), true
	case syscall.AF_INET6:
		a := netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:])), true
	case 0:
		return netip.AddrPort{}, true
	}
	return netip.AddrPort{}, false
}

// sockaddrOf encodes a as a struct sockaddr_in (IPv4) or sockaddr_in6.
func sockaddrOf(a netip.AddrPort) (b [abi.SockaddrSize]byte) {
	if !a.IsValid() {
		return b
	}
	if a.Addr().Is4() {
		binary.NativeEndian.PutUint16(b[0:], syscall.AF_INET)
		binary.BigEndian.PutUint16(b[2:], a.Port())
		a4 := a.Addr().As4()
		copy(b[4:8], a4[:])
		return b
	}
	binary.NativeEndian.PutUint16(b[0:], syscall.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], a.Port())
	a16 := a.Addr().As16()
	copy(b[8:24], a16[:])
	return b
}

// local reports whether a is one of the device's addresses.
func (s *session) local(a netip.Addr) bool {
	for _, g := range s.srv.gids {
		if verbs.AddrFromGID(g.GID) == a.Unmap() {
			return true
		}
	}
	return false
}

// event sends an event of id to its channel.
func (id *cmID) event(e abi.CMEvent) {
	e.ID, e.Cookie, e.Tag = id.h, id.cookie, id.ch.tag
	id.ch.push(&e)
}

func (s *session) cmID(h uint32) *cmID {
	id := s.cmIDs[h]
	if id == nil || id.destroyed {
		return nil
	}
	return id
}

func (s *session) cmBind(body []byte) uint32 {
	var req abi.CMAddrReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	src, ok := sockaddr(req.Src)
	switch {
	case id == nil || !ok || !src.IsValid():
		return abi.EINVAL
	case id.src.IsValid() || id.listening:
		return abi.EINVAL // bound already
	case !src.Addr().IsUnspecified() && !s.local(src.Addr()):
		return abi.EADDRNOTAVAIL // not an address of this device
	}
	id.src = src
	return 0
}

func (s *session) cmResolveAddr(body []byte) uint32 {
	var req abi.CMAddrReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	src, ok1 := sockaddr(req.Src)
	dst, ok2 := sockaddr(req.Dst)
	if id == nil || !ok1 || !ok2 || !dst.IsValid() || id.listening || id.conn != nil {
		return abi.EINVAL
	}
	if src.IsValid() && !src.Addr().IsUnspecified() {
		if !s.local(src.Addr()) {
			return abi.EADDRNOTAVAIL
		}
		id.src = src
	}
	if !id.src.IsValid() || id.src.Addr().IsUnspecified() {
		// The device's address of the destination's family.
		for _, g := range s.srv.gids {
			if a := verbs.AddrFromGID(g.GID); a.Is4() == dst.Addr().Is4() {
				id.src = netip.AddrPortFrom(a, id.src.Port())
				break
			}
		}
	}
	id.dst = dst
	if !id.src.IsValid() || id.src.Addr().Is4() != dst.Addr().Is4() {
		id.event(abi.CMEvent{Type: abi.CMEventAddrError, Status: -int32(abi.ENODEV)})
		return 0
	}
	id.event(abi.CMEvent{Type: abi.CMEventAddrResolved})
	return 0
}

func (s *session) cmResolveRoute(body []byte) uint32 {
	var req abi.CMAddrReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id == nil || !id.dst.IsValid() {
		return abi.EINVAL
	}
	id.pathMTU = s.srv.dev.ActiveMTU()
	id.event(abi.CMEvent{Type: abi.CMEventRouteResolved, PathMTU: uint32(id.pathMTU)})
	return 0
}

func (s *session) cmListen(body []byte) uint32 {
	var req abi.CMListenReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id == nil || id.listening || id.conn != nil || id.parent != nil {
		return abi.EINVAL
	}
	a, err := s.srv.agent()
	if err != nil {
		return errno(err)
	}
	addr := id.src
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	// The agent drops a REQ that finds the backlog full, and the peer
	// sends it again only after its CM timeout: rdma_listen's backlog is
	// taken as a floor, as the kernel's rdma_cm does not drop a burst of
	// requests a program answers at once (cmtime's fifty).
	backlog := min(max(int(req.Backlog), 256), 4096)
	if id.ps == abi.PSUDP {
		return s.cmListenDatagram(a, id, addr)
	}
	// A listener a program destroyed lingers on its port (linger): a new
	// listening id of the same program takes it over, one of another
	// closes it unless its accepted requests are still finishing their
	// handshakes, as the kernel's port is free again at once.
	if lr := s.srv.lingerer(addr); lr != nil {
		if lr.s == s {
			lr.owner = id
			id.listening, id.lr, id.src = true, lr, lr.ln.Addr()
			return 0
		}
		if !lr.busy.Load() {
			lr.ln.Close()
			lr.cancel()
		}
	}
	lr := &listenRec{s: s, owner: id}
	lr.ctx, lr.cancel = context.WithCancel(context.Background())
	ln, err := a.Listen(lr.ctx, addr, &cm.ListenConfig{Backlog: backlog, OnRequest: lr.onRequest(s)})
	if err != nil {
		lr.cancel()
		s.log.Debug("cm: listen", "addr", addr, "err", err)
		if errors.Is(err, cm.ErrAddr) && strings.Contains(err.Error(), "already listened") {
			return 98 // EADDRINUSE
		}
		return errno(err)
	}
	lr.ln = ln
	id.listening, id.lr, id.src = true, lr, ln.Addr()
	// Several accepts at once, so that a program that answers its
	// requests in another order than they came (or collects a few first)
	// sees the next ones meanwhile.
	for range acceptors {
		go lr.accept(s)
	}
	return 0
}

// listenRec is a listener of the agent's and the id it serves, which
// changes when the program listens again on its port before it closed.
type listenRec struct {
	s      *session
	ln     *cm.Listener
	owner  *cmID // under s.mu; nil while it lingers
	ctx    context.Context
	cancel context.CancelFunc
	busy   atomic.Bool // lingering with handshakes to finish
}

// acceptors is how many requests of one listener may wait for the
// program's answer at once.
const acceptors = 64

// onRequest returns a listener's OnRequest: it makes the request's id,
// tells the program, and waits for its rdma_accept or rdma_reject.
func (lr *listenRec) onRequest(s *session) func(ctx context.Context, r *cm.Request) (*cm.Params, error) {
	return func(ctx context.Context, r *cm.Request) (*cm.Params, error) {
		s.mu.Lock()
		id := lr.owner
		for id == nil {
			// The program destroyed the listening id: a request waits
			// for it to listen on the port again (perftest -R listens
			// anew right after a handshake its peer follows with a
			// REQ), and is refused as one to a port nobody listens on
			// once the listener closes.
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, &cm.RejectError{Reason: mad.RejInvalidServiceID}
			case <-lr.ctx.Done():
				return nil, &cm.RejectError{Reason: mad.RejInvalidServiceID}
			case <-time.After(2 * time.Millisecond):
			}
			s.mu.Lock()
			id = lr.owner
		}
		if id.destroyed {
			s.mu.Unlock()
			return nil, cm.Reject(nil)
		}
		h, ok := s.handle32()
		if !ok {
			s.mu.Unlock()
			return nil, cm.Reject(nil)
		}
		child := &cmID{s: s, h: h, ch: id.ch, ps: id.ps, qpType: id.qpType, src: r.Local, dst: r.Remote, parent: id, lr: lr,
			request: make(chan decision, 1), reqInfo: r, pathMTU: r.PathMTU}
		// The request's id lives on when the listener goes (rdma_destroy_id
		// of a listening id leaves the ids of its requests alone).
		child.ctx, child.cancel = context.WithCancel(context.Background())
		s.cmIDs[h] = child
		e := abi.CMEvent{Type: abi.CMEventConnectRequest, ListenID: id.h, Src: sockaddrOf(r.Local), Dst: sockaddrOf(r.Remote),
			PathMTU: uint32(r.PathMTU)}
		e.Param = connParam(r.PrivateData, r.ResponderResources, r.InitiatorDepth, r.RetryCount, r.RNRRetryCount, r.RemoteQPN)
		child.event(e)
		s.mu.Unlock()
		select {
		case d := <-child.request:
			return d.p, d.err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-child.ctx.Done():
			return nil, cm.Reject(nil)
		}
	}
}

// accept takes a listener's connections until it closes, and tells the
// program of each.
func (lr *listenRec) accept(s *session) {
	for {
		c, err := lr.ln.Accept(lr.ctx)
		if err != nil {
			if errors.Is(err, cm.ErrClosed) || lr.ctx.Err() != nil {
				return
			}
			continue // a handshake that failed: the next
		}
		s.established(c)
	}
}

// established finds the id a connection was accepted on, and tells the
// program.
func (s *session) established(c *cm.Conn) {
	s.mu.Lock()
	var child *cmID
	for _, x := range s.cmIDs {
		if x.parent != nil && x.conn == nil && !x.destroyed && x.accepted != nil && x.accepted == c.QP() {
			child = x
			break
		}
	}
	if child == nil {
		s.mu.Unlock()
		s.log.Debug("cm: a connection of no id", "qpn", c.QP().QPN())
		c.Close()
		return
	}
	child.conn = c
	s.log.Debug("cm: established", "id", child.h, "qpn", c.QP().QPN())
	child.event(abi.CMEvent{Type: abi.CMEventEstablished, Param: connInfo(c), PathMTU: uint32(c.Info().PathMTU)})
	s.mu.Unlock()
	go child.watch(c)
}

// watch tells the program when a connection ends.
func (id *cmID) watch(c *cm.Conn) {
	select {
	case <-c.Done():
	case <-id.ctx.Done():
		return
	}
	id.s.mu.Lock()
	defer id.s.mu.Unlock()
	if !id.destroyed && id.conn == c && !id.disconnected {
		// One DISCONNECTED, whichever side ended it: rdma_disconnect's
		// own (cmDisconnect) may have come first.
		id.event(abi.CMEvent{Type: abi.CMEventDisconnected})
		id.disconnected = true
	}
}

func connParam(pd []byte, rr, id, retry, rnr uint8, qpn uint32) abi.CMConnParam {
	p := abi.CMConnParam{ResponderResources: rr, InitiatorDepth: id, RetryCount: retry, RNRRetryCount: rnr, QPNum: qpn}
	p.PrivateDataLen = uint8(copy(p.PrivateData[:], pd))
	return p
}

func connInfo(c *cm.Conn) abi.CMConnParam {
	i := c.Info()
	return connParam(c.PrivateData(), i.ResponderResources, i.InitiatorDepth, i.RetryCount, i.RNRRetryCount, i.RemoteQPN)
}

// params turns a program's rdma_conn_param into the agent's.
// An id with no QP (rdma_create_qp's) names the program's own by its
// number (rdma_conn_param's qp_num): the agent leaves it to the program
// (cm.Params.ManualQP), which moves it with rdma_init_qp_attr.
func (s *session) params(req *abi.CMConnectReq) (*cm.Params, uint32) {
	var q verbs.QP
	manual := req.QP == 0
	if manual {
		s.srv.mu.Lock()
		if o := s.srv.byQPN[req.Param.QPNum]; o != nil && o.typ == verbs.RC {
			q = o.qp
		}
		s.srv.mu.Unlock()
	} else if o := s.qps[req.QP]; o != nil {
		q = o.qp
	}
	if q == nil {
		return nil, abi.EINVAL
	}
	n := int(req.Param.PrivateDataLen)
	p := &cm.Params{QP: q, ManualQP: manual, ResponderResources: req.Param.ResponderResources,
		InitiatorDepth: req.Param.InitiatorDepth, RetryCount: min(req.Param.RetryCount, 7),
		RNRRetryCount: min(req.Param.RNRRetryCount, 7), ACKTimeout: req.ACKTimeout,
		PrivateData: append([]byte(nil), req.Param.PrivateData[:n]...)}
	return p, 0
}

func (s *session) cmConnect(body []byte) uint32 {
	var req abi.CMConnectReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id == nil || !id.dst.IsValid() || id.listening || id.conn != nil || id.parent != nil || id.connecting {
		return abi.EINVAL
	}
	if id.ps == abi.PSUDP {
		a, err := s.srv.agent()
		if err != nil {
			return errno(err)
		}
		n := int(req.Param.PrivateDataLen)
		if n > cm.MaxSIDRUserData {
			return abi.EINVAL
		}
		id.connecting = true
		go id.resolve(a, append([]byte(nil), req.Param.PrivateData[:n]...))
		return 0
	}
	p, e := s.params(&req)
	if e != 0 {
		return e
	}
	if len(p.PrivateData) > 56 {
		return abi.EINVAL
	}
	a, err := s.srv.agent()
	if err != nil {
		return errno(err)
	}
	id.connecting = true
	go id.dial(a, p)
	return 0
}

// dial connects id and tells the program how it went.
func (id *cmID) dial(a *cm.Agent, p *cm.Params) {
	c, err := a.Dial(id.ctx, id.dst, p)
	s := id.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id.connecting = false
	if id.destroyed {
		if c != nil {
			go c.Close()
		}
		return
	}
	if err != nil {
		id.event(failure(err))
		return
	}
	id.conn = c
	typ := uint32(abi.CMEventEstablished)
	if p.ManualQP {
		typ = abi.CMEventConnectResp // rdma_establish sends the RTU
		id.manual = true
	}
	id.event(abi.CMEvent{Type: typ, Param: connInfo(c), PathMTU: uint32(c.Info().PathMTU)})
	go id.watch(c)
}

// failure is the event of a Dial that failed: REJECTED with the REJ's
// reason and private data, UNREACHABLE otherwise, as librdmacm reports
// them.
func failure(err error) abi.CMEvent {
	var rej *cm.RejectError
	if errors.As(err, &rej) {
		e := abi.CMEvent{Type: abi.CMEventRejected, Status: int32(rej.Reason)}
		e.Param.PrivateDataLen = uint8(copy(e.Param.PrivateData[:], rej.PrivateData))
		return e
	}
	st := -int32(110) // ETIMEDOUT
	if errors.Is(err, cm.ErrUnreachable) {
		st = -int32(113) // EHOSTUNREACH
	}
	return abi.CMEvent{Type: abi.CMEventUnreachable, Status: st}
}

func (s *session) cmAccept(body []byte) uint32 {
	var req abi.CMConnectReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id != nil && id.sidr != nil {
		return s.cmAcceptDatagram(id, &req)
	}
	if id == nil || id.request == nil || id.accepted != nil {
		return abi.EINVAL
	}
	p, e := s.params(&req)
	if e != 0 {
		return e
	}
	id.accepted = p.QP
	id.request <- decision{p: p}
	if p.ManualQP {
		return 0 // the program's to move
	}
	// As librdmacm's rdma_accept, return once the QP is in RTS, the REP
	// on its way: a program posts sends as soon as it returns. The agent
	// moves the QP without the session's lock.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		a, err := p.QP.Query()
		if err != nil || a.State == verbs.StateRTS {
			break
		}
		if a.State == verbs.StateErr {
			return abi.EINVAL // refused: the agent rejected the request after all (its path MTU, ...)
		}
	}
	return 0
}

func (s *session) cmReject(body []byte) uint32 {
	var req abi.CMRejectReq
	if !decode(body, &req) || req.PrivateDataLen > 148 {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id != nil && id.sidr != nil {
		r := id.sidr
		id.sidr = nil
		if err := r.Refuse(append([]byte(nil), req.PrivateData[:req.PrivateDataLen]...)); err != nil {
			return abi.EINVAL
		}
		return 0
	}
	if id == nil || id.request == nil || id.accepted != nil || id.rejected {
		return abi.EINVAL
	}
	id.rejected = true
	id.request <- decision{err: cm.Reject(append([]byte(nil), req.PrivateData[:req.PrivateDataLen]...))}
	return 0
}

func (s *session) cmDisconnect(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.Handle)
	if id == nil || id.conn == nil {
		return abi.EINVAL
	}
	c := id.conn
	if id.closing {
		return 0
	}
	id.closing = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.CloseContext(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !id.destroyed && !id.disconnected {
			id.disconnected = true
			id.event(abi.CMEvent{Type: abi.CMEventDisconnected})
		}
	}()
	return 0
}

func (s *session) cmEstablish(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.Handle)
	if id == nil || id.conn == nil || !id.manual {
		return abi.EINVAL // an id with a QP: the agent sent the RTU already
	}
	if err := id.conn.Establish(); err != nil {
		return abi.EINVAL
	}
	return 0
}

func (s *session) cmMigrate(body []byte) uint32 {
	var req abi.CMMigrateReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id, c := s.cmID(req.ID), s.cmChans[req.Channel]
	if id == nil || c == nil {
		return abi.EINVAL
	}
	id.ch = c
	return 0
}

func (s *session) cmQuery(body []byte) (any, uint32) {
	var req abi.HandleReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	id := s.cmID(req.Handle)
	if id == nil {
		return nil, abi.EINVAL
	}
	r := &abi.CMQueryReply{Src: sockaddrOf(id.src), Dst: sockaddrOf(id.dst), PathMTU: uint32(id.pathMTU), Port: 1}
	if id.src.IsValid() {
		r.SGID = verbs.GIDFromAddr(id.src.Addr())
		for i, g := range s.srv.gids {
			if g.GID == r.SGID {
				r.SGIDIndex = uint32(i)
			}
		}
	}
	if id.dst.IsValid() {
		r.DGID = verbs.GIDFromAddr(id.dst.Addr())
	}
	return r, 0
}

func (s *session) cmInitQPAttr(body []byte) (any, uint32) {
	var req abi.CMInitQPAttrReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id == nil {
		return nil, abi.EINVAL
	}
	r := &abi.CMInitQPAttrReply{}
	st := verbs.QPState(req.State)
	var info *cm.ConnInfo
	switch {
	case id.ps == abi.PSUDP:
	case id.conn != nil:
		i := id.conn.Info()
		info = &i
	case id.reqInfo != nil:
		info = &id.reqInfo.Info
	}
	if info != nil {
		// A connection's QP, or a request's: what the agent gives its
		// own QPs.
		a, mask, err := info.QPAttr(st)
		if err != nil {
			return nil, abi.EINVAL
		}
		r.Attr = abi.QPAttr{State: uint32(a.State), PathMTU: uint32(a.PathMTU), RQPSN: uint32(a.RQPSN),
			SQPSN: uint32(a.SQPSN), DestQPN: a.DestQPN, Access: uint32(a.Access), PKeyIndex: a.PKeyIndex,
			MaxRdAtomic: a.MaxRDAtomic, MaxDestRdAtomic: a.MaxDestRDAtomic, MinRNRTimer: a.MinRNRTimer, Port: 1,
			Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry}
		if mask&verbs.AttrAV != 0 {
			r.Attr.AH = abi.AHAttr{DGID: a.AH.DGID, FlowLabel: a.AH.FlowLabel, HopLimit: a.AH.HopLimit,
				TrafficClass: a.AH.TrafficClass, SL: a.AH.SL, IsGlobal: 1, Port: 1, SGIDIndex: s.gidIndex(id.src.Addr())}
		}
		r.Mask = uint32(mask)
		return r, 0
	}
	switch st {
	case verbs.StateInit:
		r.Attr = abi.QPAttr{State: uint32(verbs.StateInit), Port: 1}
		r.Mask = uint32(verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort)
		if id.ps == abi.PSUDP {
			r.Attr.QKey = verbs.DefaultQKey
			r.Mask |= uint32(verbs.AttrQKey)
		} else {
			r.Attr.Access = uint32(verbs.LocalWrite | verbs.RemoteRead | verbs.RemoteWrite)
			r.Mask |= uint32(verbs.AttrAccessFlags)
		}
	default:
		return nil, abi.EINVAL // no connection yet: nothing to move a QP to RTR or RTS with
	}
	return r, 0
}

// gidIndex returns the index of addr in the device's GID table, as rxe
// numbers it (its last entry of addr: IPv4 at 1, not 0).
func (s *session) gidIndex(addr netip.Addr) uint8 {
	g := verbs.GIDFromAddr(addr)
	var idx uint8
	for i, e := range s.srv.gids {
		if e.GID == g {
			idx = uint8(i)
		}
	}
	return idx
}

func (s *session) cmDestroyID(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.Handle)
	if id == nil {
		return abi.EINVAL
	}
	s.freeCMID(id)
	return 0
}

// handshaking reports whether a request of listener lr was accepted and
// its connection is not yet established; the caller holds s.mu.
func (s *session) handshaking(lr *listenRec) bool {
	for _, x := range s.cmIDs {
		if x.lr == lr && x.parent != nil && x.accepted != nil && x.conn == nil && !x.destroyed {
			return true
		}
	}
	return false
}

// lingerGrace is how long a destroyed listening id's listener stays
// open after its last handshake, for the program to listen on the port
// again without refusing a request that comes meanwhile.
const lingerGrace = 500 * time.Millisecond

// linger closes a destroyed listening id's listener once the requests
// its program accepted have finished their handshakes (the listener
// carries them) and lingerGrace has passed, unless a new listening id
// took it over meanwhile.
func (s *session) linger(lr *listenRec) {
	idle := time.Now()
	for i := 0; ; i++ {
		s.mu.Lock()
		if lr.owner != nil {
			s.mu.Unlock()
			return // taken over
		}
		busy := s.handshaking(lr)
		lr.busy.Store(busy)
		if busy {
			idle = time.Now()
		}
		if time.Since(idle) >= lingerGrace || i == 3000 || s.closed || lr.ctx.Err() != nil {
			s.srv.unlinger(lr)
			s.mu.Unlock()
			lr.ln.Close()
			lr.cancel()
			return
		}
		s.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// freeCMID ends what id does (a listener closes, a connection gets its
// DREQ, a request not answered yet its REJ) and forgets it.
func (s *session) freeCMID(id *cmID) {
	id.destroyed = true
	id.cancel()
	if id.listening && id.lr != nil && id.lr.owner == id {
		// The listener stops taking requests now (onRequest refuses
		// them), and closes once the requests its program accepted have
		// finished their handshakes.
		id.lr.owner = nil
		id.lr.busy.Store(true)
		s.srv.linger(id.lr)
		go s.linger(id.lr)
	}
	if id.conn != nil && !id.closing {
		c := id.conn
		go c.Close()
	}
	if id.dln != nil {
		id.dln.Close()
	}
	if id.sidr != nil {
		id.sidr.Refuse(nil)
		id.sidr = nil
	}
	delete(s.cmIDs, id.h)
}

// cmListenDatagram listens for SIDR_REQs on a UDP id: each is a request
// id the program answers with rdma_accept (its UD QP) or rdma_reject.
func (s *session) cmListenDatagram(a *cm.Agent, id *cmID, addr netip.AddrPort) uint32 {
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), uint16(32768+id.h%28000)) // a port of its own, as the kernel picks one
	}
	dln, err := a.ListenDatagram(id.ctx, addr, &cm.DatagramListenConfig{OnRequest: func(r *cm.DatagramRequest) ([]byte, error) {
		// On the agent's goroutine, which must not block: s.mu is
		// taken in a goroutine of its own.
		go s.datagramRequest(id, r)
		return nil, cm.ErrAnswerLater
	}})
	if err != nil {
		if errors.Is(err, cm.ErrAddr) && strings.Contains(err.Error(), "already listened") {
			return 98 // EADDRINUSE
		}
		return errno(err)
	}
	id.listening, id.dln, id.src = true, dln, dln.Addr()
	return 0
}

// datagramRequest makes a SIDR_REQ's id and tells the program.
func (s *session) datagramRequest(l *cmID, r *cm.DatagramRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.handle32()
	if l.destroyed || !ok {
		r.Refuse(nil)
		return
	}
	child := &cmID{s: s, h: h, ch: l.ch, ps: l.ps, qpType: l.qpType, src: r.Local, dst: r.Remote, parent: l, sidr: r}
	child.ctx, child.cancel = context.WithCancel(context.Background())
	s.cmIDs[h] = child
	e := abi.CMEvent{Type: abi.CMEventConnectRequest, ListenID: l.h, Src: sockaddrOf(r.Local), Dst: sockaddrOf(r.Remote)}
	e.Param.PrivateDataLen = uint8(copy(e.Param.PrivateData[:], r.PrivateData))
	child.event(e)
}

// cmAcceptDatagram answers a SIDR_REQ with the id's UD QP.
func (s *session) cmAcceptDatagram(id *cmID, req *abi.CMConnectReq) uint32 {
	q := s.qps[req.QP]
	if q == nil || q.typ != verbs.UD {
		return abi.EINVAL
	}
	r := id.sidr
	n := min(int(req.Param.PrivateDataLen), 136)
	if err := r.Answer(q.qp, req.Param.QKey, req.Param.PrivateData[:n]); err != nil {
		return abi.EINVAL
	}
	id.sidr = nil
	id.event(abi.CMEvent{Type: abi.CMEventEstablished})
	return 0
}

// resolve resolves a UD id's service (SIDR) and tells the program.
func (id *cmID) resolve(a *cm.Agent, pd []byte) {
	p, err := a.ResolveDatagram(id.ctx, id.dst, pd)
	s := id.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id.connecting = false
	if id.destroyed {
		return
	}
	if err != nil {
		var se *cm.SIDRError
		if errors.As(err, &se) {
			e := abi.CMEvent{Type: abi.CMEventRejected, Status: int32(se.Status)}
			e.Param.PrivateDataLen = uint8(copy(e.Param.PrivateData[:], se.PrivateData))
			id.event(e)
			return
		}
		id.event(failure(err))
		return
	}
	id.peer = p
	e := abi.CMEvent{Type: abi.CMEventEstablished, UDQPN: p.QPN, UDQKey: p.QKey,
		UD: abi.AHAttr{DGID: verbs.GIDFromAddr(p.Addr.Addr()), HopLimit: 64, IsGlobal: 1, Port: 1}}
	for i, g := range s.srv.gids {
		if verbs.AddrFromGID(g.GID).Is4() == p.Addr.Addr().Is4() {
			e.UD.SGIDIndex = uint8(i)
			break
		}
	}
	e.Param.PrivateDataLen = uint8(copy(e.Param.PrivateData[:], p.PrivateData))
	id.event(e)
}

// linger records lr, a listener of a destroyed id, as its port's.
func (s *Server) linger(lr *listenRec) {
	s.mu.Lock()
	s.lingering[lr.ln.Addr()] = lr
	s.mu.Unlock()
}

// lingerer returns the lingering listener on addr, if any, and forgets it:
// the caller takes it over or closes it.
func (s *Server) lingerer(addr netip.AddrPort) *listenRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	lr := s.lingering[addr]
	delete(s.lingering, addr)
	return lr
}

// unlinger forgets lr if it still lingers.
func (s *Server) unlinger(lr *listenRec) {
	s.mu.Lock()
	if s.lingering[lr.ln.Addr()] == lr {
		delete(s.lingering, lr.ln.Addr())
	}
	s.mu.Unlock()
}

// cmJoinMcast joins a UD id to a multicast group, as the kernel's rdma_cm
// does on RoCE: there is no subnet administrator to ask, so the join
// answers at once with RDMA_CM_EVENT_MULTICAST_JOIN and the group's
// address vector (cm.JoinMulticast's), and the library attaches the id's
// QP then (ibv_attach_mcast, which joins the group's address on the
// link). The kernel refuses IPv6 groups on RoCEv2; goroce joins them.
func (s *session) cmJoinMcast(body []byte) uint32 {
	var req abi.CMJoinMcastReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	group, ok := sockaddr(req.Addr)
	switch {
	case id == nil || !ok || id.ps != abi.PSUDP || !id.src.IsValid():
		return abi.EINVAL // a UD id, bound or resolved
	case !group.Addr().IsMulticast():
		return abi.EINVAL
	}
	g := group.Addr()
	var local netip.Addr
	for _, e := range s.srv.gids {
		if a := verbs.AddrFromGID(e.GID); a.Is4() == g.Is4() {
			local = a
			break
		}
	}
	if !local.IsValid() {
		return abi.EINVAL // no address of the group's IP version
	}
	if id.mcasts == nil {
		id.mcasts = map[uint64]netip.Addr{}
	}
	id.mcasts[req.UID] = g
	e := abi.CMEvent{Type: abi.CMEventMulticastJoin, UID: req.UID, Dst: sockaddrOf(group),
		UD: abi.AHAttr{DGID: verbs.MulticastGID(g), SGIDIndex: s.gidIndex(local), HopLimit: cm.MulticastHopLimit,
			IsGlobal: 1, Port: 1},
		UDQPN: verbs.MulticastQPN, UDQKey: verbs.DefaultQKey}
	id.event(e)
	return 0
}

// cmLeaveMcast forgets a join; the library has detached the id's QP.
func (s *session) cmLeaveMcast(body []byte) uint32 {
	var req abi.CMLeaveMcastReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	id := s.cmID(req.ID)
	if id == nil {
		return abi.EINVAL
	}
	if _, ok := id.mcasts[req.UID]; !ok {
		return abi.EADDRNOTAVAIL
	}
	delete(id.mcasts, req.UID)
	return 0
}
