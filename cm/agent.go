package cm

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// Config configures an Agent. A nil *Config or zero fields mean the
// values rdma_cm uses. It is plain data, read once by NewAgent.
type Config struct {
	// Logger receives state changes at Debug level; nil discards.
	Logger *slog.Logger
	// Clock runs the retransmission and time-wait timers; nil is the
	// device's clock.
	Clock clock.Clock
	// ResponseTimeout is the CM response timeout exponent this side
	// announces (4.096 µs × 2^t); 0 means DefaultResponseTimeout (20).
	ResponseTimeout uint8
	// MaxRetries is how many times the agent sends a REQ, DREQ or
	// SIDR_REQ again before giving up; 0 means DefaultMaxRetries (15).
	// The passive side follows the REQ's max CM retries for its REP.
	MaxRetries uint8
	// PacketLifeTime is the path's packet life time exponent; 0 means
	// DefaultPacketLifeTime (18). It sets the REQ's local ACK timeout
	// and adds twice its duration to the REQ's response timeout.
	PacketLifeTime uint8
	// CAGUID is the local CA GUID of the messages; 0 derives one from
	// the device's address.
	CAGUID uint64
	// AgentID is the high 32 bits of the transaction IDs the agent
	// makes, as the kernel's MAD agent number; 0 means 1.
	AgentID uint32
	// Receives is how many MADs the agent can hold between two passes
	// of its receive loop; 0 means 64.
	Receives int
	// ConnectTimeout bounds how long Dial and ResolveDatagram wait for
	// an answer when nothing answers at all, sending the request again
	// every CM response timeout meanwhile (a REQ every 6.4 s with the
	// defaults); 0 means DefaultConnectTimeout (25 s). It bounds the
	// local wait only: the REQ still announces MaxRetries to the peer.
	// An ICMP error, a REJ or the context end the wait sooner.
	ConnectTimeout time.Duration
	// CloseWait is how long Conn.Close waits for the peer's DREP before
	// it returns, leaving the agent to send the DREQ again in the
	// background (as rdma_disconnect does not wait at all); 0 means
	// DefaultCloseWait, a negative value not to wait.
	CloseWait time.Duration
	// MaxConns bounds the connections the agent tracks at once, in every
	// state from the REQ to the end of the time-wait; past it Dial fails
	// with ErrLimit and a peer's REQ is rejected ("no resources"), both
	// counted in Stats.Refused. 0 means DefaultMaxConns.
	MaxConns int
	// MaxHalfOpen bounds, per listener, the handshakes whose REP went out
	// and whose RTU has not come (with those ended that Accept has not
	// returned yet); past it Accept gives the oldest up (REJ "timeout",
	// counted in Stats.Evicted), so that peers that never finish their
	// handshakes cannot keep others out. 0 means DefaultMaxHalfOpen.
	MaxHalfOpen int
	// OnReject, when set, is told of each connection request the agent
	// refuses itself, before any listener's OnRequest sees it: no
	// listener on the port asked for (a peer whose rdma_connect then
	// fails with ECONNREFUSED), no listener on the address, a request it
	// cannot serve, no resources left, a stale connection. It runs on
	// the agent's receive goroutine, with no lock held: it must not
	// block for long.
	OnReject func(Rejection)
}

// Rejection is a connection request the agent refused itself, for
// Config.OnReject: who asked, for what, and why. It is plain data.
type Rejection struct {
	From      netip.Addr       // the requester's address
	ServiceID uint64           // the service ID of its REQ
	Port      uint16           // the rdma_cm TCP port the service ID names (0: not one)
	Reason    mad.RejectReason // the REJ's reason
	Listening []uint16         // the ports the agent listened on then, in order
}

// String says what was refused and why, for a server's log: "connection
// request from 198.18.0.2 for rdma_cm port 7471 rejected: invalid service
// ID (reason 8): nothing listens on port 7471 (listening on 7472)".
func (r Rejection) String() string {
	asked := fmt.Sprintf("service ID %#x", r.ServiceID)
	if r.Port != 0 {
		asked = fmt.Sprintf("rdma_cm port %d", r.Port)
	}
	s := fmt.Sprintf("connection request from %v for %s rejected: %v (reason %d)", r.From, asked, r.Reason, uint16(r.Reason))
	if r.Reason == mad.RejInvalidServiceID {
		ports := make([]string, len(r.Listening))
		for i, p := range r.Listening {
			ports[i] = strconv.Itoa(int(p))
		}
		listening := "nothing"
		if len(ports) > 0 {
			listening = strings.Join(ports, ", ")
		}
		if r.Port != 0 {
			s += fmt.Sprintf(": nothing listens on port %d (listening on %s)", r.Port, listening)
		}
	}
	return s
}

// Stats counts what an agent did. Fields are cumulative. It is a copy,
// owned by the caller.
type Stats struct {
	// Sent and Received count MADs by attribute (REQ, REP, ...); Sent
	// includes those the GSI QP then failed to send (see SendErrors).
	Sent, Received map[string]uint64
	// Retransmits counts REQs, REPs, DREQs and SIDR_REQs sent again
	// after a timeout.
	Retransmits uint64
	// Duplicates counts duplicate REQs, REPs and DREQs answered.
	Duplicates uint64
	// Timeouts counts exchanges given up after every retry.
	Timeouts uint64
	// Malformed counts receives that were not a CM MAD of class
	// version 2 (wrong length, class or attribute, bad header).
	Malformed uint64
	// Unmatched counts messages for no known connection (dropped, or
	// answered as the IB CM does: DREP for a DREQ).
	Unmatched uint64
	// BacklogFull counts REQs dropped because the listener's backlog was
	// full; the peer retries them.
	BacklogFull uint64
	// SendErrors counts MADs the GSI QP refused or failed to send.
	SendErrors uint64
	// Refused counts REQs rejected and Dials failed because the agent
	// tracked Config.MaxConns connections; Evicted counts handshakes
	// given up for newer ones (Config.MaxHalfOpen).
	Refused, Evicted uint64
	// Conns is how many connections the agent tracks now, in every state
	// (not cumulative).
	Conns int
}

// Agent is the connection manager of one device: it owns the device's GSI
// QP (QP 1) and runs every listener and connection made through it. It is
// safe for concurrent use. It stops with Close, or when its device closes.
type Agent struct {
	dev   verbs.Device // the device as NewAgent (or Listen, Dial) got it
	key   *roce.Device // the device as roce.Open made it, under any view
	addr  netip.Addr   // the device's first address: Addr, and the CA GUID's
	addrs []netip.Addr // all of them (an IPv4 and an IPv6 one on a Multi link)
	guid  uint64
	clk   clock.Clock
	log   *slog.Logger
	mtu   bth.MTU

	respTimeout    uint8
	maxRetries     uint8
	maxConns       int
	maxHalfOpen    int
	lifeTime       uint8
	agentID        uint32
	closeWait      time.Duration
	connectTimeout time.Duration

	pd   verbs.PD
	cq   verbs.CQ
	gsi  verbs.QP
	rmr  verbs.MR
	nrcv int

	onReject func(Rejection)

	mu         sync.Mutex
	closed     bool
	rejected   []Rejection // requests refused during one dispatch
	ahs        map[netip.Addr]verbs.AH
	conns      map[uint32]*Conn   // by local communication ID
	remote     map[remoteID]*Conn // by the peer's communication ID and CA GUID
	qpns       map[remoteQP]*Conn // by the peer's GID and QPN
	ports      map[uint16]int     // source ports of active connections
	listeners  map[uint16][]*Listener
	dlisteners map[uint16][]*DatagramListener
	sidrLater  map[sidrKey]*DatagramRequest // SIDR_REQs OnRequest left for later
	sidr       map[uint32]*sidrQuery
	buf        [mad.Len]byte

	unreach chan transport.Unreachable // the device's notices, for loop
	unwatch func()                     // stops them
	unhook  func() bool                // stops the device's closing from closing the agent
	done    chan struct{}
	wg      sync.WaitGroup
	ctr     counters
}

// remoteID names a connection by what the peer calls it.
type remoteID struct {
	commID uint32
	guid   uint64
}

// remoteQP names a connection by the peer's queue pair.
type remoteQP struct {
	gid [16]byte
	qpn uint32
}

// counters are the agent's statistics, updated atomically.
type counters struct {
	sent, recv                  [mad.AttrAPR + 1]atomic.Uint64
	retransmits, duplicates     atomic.Uint64
	timeouts, malformed         atomic.Uint64
	unmatched, backlog, sendErr atomic.Uint64
	refused, evicted            atomic.Uint64
}

// NewAgent starts the connection manager of dev, which must be goroce's
// software device (roce.Open's, or a view of it from roce.Trace): it
// creates the device's GSI QP and a goroutine that serves it until Close,
// or until the device closes. A device has one agent: the package-level
// Listen and Dial use this one too, and NewAgent fails (with an error
// matching verbs.ErrGSIExists) on a device that has one already, whether
// NewAgent made it or Listen or Dial started it.
func NewAgent(dev verbs.Device, cfg *Config) (*Agent, error) {
	sd, err := checkDevice(dev)
	if err != nil {
		return nil, err
	}
	agents.mu.Lock()
	defer agents.mu.Unlock()
	if agents.m[sd] != nil {
		return nil, fmt.Errorf("cm: device %s already has a CM agent (its own, or the one cm.Listen or cm.Dial started; "+
			"they use the device's own agent, so make it before them): %w", dev.Name(), verbs.ErrGSIExists)
	}
	a, err := newAgent(dev, sd, cfg)
	if err != nil {
		return nil, err
	}
	register(sd, a, true)
	return a, nil
}

// newAgent makes and starts an agent on dev, whose device as Open made it
// is sd; the caller holds agents.mu and registers it.
func newAgent(dev verbs.Device, sd *roce.Device, cfg *Config) (*Agent, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	a := &Agent{
		dev: dev, key: sd, addr: sd.Addr(), addrs: sd.GIDs(), clk: c.Clock, log: c.Logger, mtu: dev.ActiveMTU(),
		respTimeout: c.ResponseTimeout, maxRetries: c.MaxRetries, lifeTime: c.PacketLifeTime,
		agentID: c.AgentID, guid: c.CAGUID, nrcv: c.Receives, closeWait: c.CloseWait, connectTimeout: c.ConnectTimeout,
		maxConns: c.MaxConns, maxHalfOpen: c.MaxHalfOpen, onReject: c.OnReject,
		ahs: make(map[netip.Addr]verbs.AH), conns: make(map[uint32]*Conn), remote: make(map[remoteID]*Conn),
		qpns: make(map[remoteQP]*Conn), ports: make(map[uint16]int), listeners: make(map[uint16][]*Listener),
		dlisteners: make(map[uint16][]*DatagramListener), sidr: make(map[uint32]*sidrQuery),
		sidrLater: make(map[sidrKey]*DatagramRequest),
		done:      make(chan struct{}), unreach: make(chan transport.Unreachable, 16),
	}
	if len(a.addrs) == 0 {
		a.addrs = []netip.Addr{a.addr}
	}
	if a.clk == nil {
		a.clk = sd.Clock()
	}
	if err := a.setDefaults(); err != nil {
		return nil, err
	}
	if err := a.openGSI(); err != nil {
		a.release()
		return nil, err
	}
	a.unwatch = a.watchUnreachable(sd)
	a.wg.Add(1)
	go a.loop()
	// The agent goes with the device (at once, in its own goroutine,
	// when the device closed meanwhile).
	a.unhook = sd.OnClose(func() { a.Close() })
	a.log.Debug("cm agent started", "dev", dev.Name(), "addrs", a.addrs, "guid", fmt.Sprintf("%#016x", a.guid))
	return a, nil
}

// setDefaults fills the settings Config left zero with rdma_cm's values,
// and checks the others.
func (a *Agent) setDefaults() error {
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.respTimeout == 0 {
		a.respTimeout = DefaultResponseTimeout
	}
	if a.maxRetries == 0 {
		a.maxRetries = DefaultMaxRetries
	}
	if a.lifeTime == 0 {
		a.lifeTime = DefaultPacketLifeTime
	}
	if a.agentID == 0 {
		a.agentID = 1
	}
	if a.guid == 0 {
		a.guid = guidFromAddr(a.addr)
	}
	if a.nrcv <= 0 {
		a.nrcv = 64
	}
	if a.closeWait == 0 {
		a.closeWait = DefaultCloseWait
	}
	if a.connectTimeout <= 0 {
		a.connectTimeout = DefaultConnectTimeout
	}
	if a.maxConns <= 0 {
		a.maxConns = DefaultMaxConns
	}
	if a.maxHalfOpen <= 0 {
		a.maxHalfOpen = DefaultMaxHalfOpen
	}
	if a.respTimeout > mad.MaxTimeout || a.lifeTime > mad.MaxTimeout || a.maxRetries > 15 {
		return invalid("config out of range: response timeout %d, packet life time %d (at most 31), max retries %d (at most 15)",
			a.respTimeout, a.lifeTime, a.maxRetries)
	}
	return nil
}

// checkDevice returns dev as the software device the agent needs, or why
// it cannot serve.
func checkDevice(dev verbs.Device) (*roce.Device, error) {
	if isNil(dev) || isNil(roce.Untrace(dev)) {
		return nil, invalid("nil device: open one with roce.Open")
	}
	sd, ok := roce.Untrace(dev).(*roce.Device)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotSoftware, dev.Name())
	}
	if !sd.Addr().IsValid() {
		return nil, invalid("a roce.Device that roce.Open did not make")
	}
	return sd, nil
}

// isNil reports whether v is nil or an interface holding a nil pointer
// (map, slice, channel, function).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// ok returns the error of a method called on an Agent NewAgent did not
// make.
func (a *Agent) ok() error {
	if a == nil || a.done == nil {
		return invalid("nil Agent: make one with NewAgent")
	}
	return nil
}

// openGSI creates QP 1 with its CQ and receive buffers, brings it to RTS
// and posts the receives.
// gsiSendDepth is how many MADs the agent's QP 1 may have in flight.
const gsiSendDepth = 64

func (a *Agent) openGSI() error {
	var err error
	if a.pd, err = a.dev.AllocPD(); err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	// Room for a completion of every receive and send the QP can hold:
	// a CQ that overflows fails the QP (and the agent with it).
	if a.cq, err = a.dev.CreateCQ(a.nrcv + gsiSendDepth); err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	a.gsi, err = a.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.GSI, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: gsiSendDepth, MaxRecvWR: uint32(a.nrcv), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: mad.Len}})
	if err != nil {
		if errors.Is(err, verbs.ErrGSIExists) {
			return fmt.Errorf("cm: device %s already has a CM agent: %w", a.dev.Name(), err)
		}
		return fmt.Errorf("cm: GSI QP: %w", err)
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, QKey: bth.GSIQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	}
	for _, s := range steps {
		if err := a.gsi.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("cm: GSI QP to %v: %w", s.attr.State, err)
		}
	}
	if a.rmr, err = a.pd.RegMR(make([]byte, a.nrcv*recvLen), verbs.LocalWrite); err != nil {
		return fmt.Errorf("cm: %w", err)
	}
	for i := range a.nrcv {
		if err := a.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) postRecv(slot int) error {
	err := a.gsi.PostRecv([]verbs.RecvWR{{ID: uint64(slot),
		SGL: []verbs.SGE{{Addr: a.rmr.Addr() + uint64(slot*recvLen), Length: recvLen, LKey: a.rmr.LKey()}}}})
	if err != nil {
		return fmt.Errorf("cm: post GSI receive: %w", err)
	}
	return nil
}

// Addr returns the device's IP address, the first of its addresses on a
// Multi link; a connection uses the device's address of its peer's IP
// version.
func (a *Agent) Addr() netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	return a.addr
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	if a == nil {
		return Stats{}
	}
	s := Stats{Sent: map[string]uint64{}, Received: map[string]uint64{},
		Retransmits: a.ctr.retransmits.Load(), Duplicates: a.ctr.duplicates.Load(), Timeouts: a.ctr.timeouts.Load(),
		Malformed: a.ctr.malformed.Load(), Unmatched: a.ctr.unmatched.Load(), BacklogFull: a.ctr.backlog.Load(),
		SendErrors: a.ctr.sendErr.Load(), Refused: a.ctr.refused.Load(), Evicted: a.ctr.evicted.Load()}
	a.mu.Lock()
	s.Conns = len(a.conns)
	a.mu.Unlock()
	for id := range a.ctr.sent {
		if n := a.ctr.sent[id].Load(); n != 0 {
			s.Sent[mad.AttrName(uint16(id))] = n
		}
		if n := a.ctr.recv[id].Load(); n != 0 {
			s.Received[mad.AttrName(uint16(id))] = n
		}
	}
	return s
}

// Close stops the agent: listeners are closed (requests waiting for
// Accept are rejected), connections still up get a DREQ (not waited for)
// and end with ErrClosed, waits in progress return ErrClosed, and the GSI
// QP is destroyed. It waits for the agent's goroutine.
func (a *Agent) Close() error {
	if err := a.ok(); err != nil {
		return err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	for _, ls := range a.listeners {
		for _, l := range ls {
			a.closeListenerLocked(l)
		}
	}
	for _, ls := range a.dlisteners {
		for _, l := range ls {
			l.closed = true
		}
	}
	clear(a.dlisteners)
	// A connection still being decided belongs to its Accept, which
	// releases it when it finds the agent closed.
	release := make([]*Conn, 0, len(a.conns))
	for _, c := range a.conns {
		if c.state != stREQRcvd && c.state != stMRAReqSent {
			release = append(release, c)
		}
		a.shutdownLocked(c)
	}
	for _, q := range a.sidr {
		q.finish(nil, ErrClosed)
		if q.timer != nil {
			q.timer.Stop()
		}
	}
	clear(a.sidr)
	a.closed = true
	close(a.done)
	a.mu.Unlock()
	a.wg.Wait()
	a.unwatch()
	if a.unhook != nil {
		a.unhook()
	}
	unregister(a)
	a.mu.Lock()
	clear(a.conns)
	clear(a.remote)
	clear(a.qpns)
	a.mu.Unlock()
	for _, c := range release {
		c.release()
	}
	return a.release()
}

// release frees the GSI QP and what goes with it.
func (a *Agent) release() error {
	var errs []error
	if a.gsi != nil {
		if err := a.gsi.Destroy(); err != nil && !errors.Is(err, verbs.ErrDestroyed) {
			errs = append(errs, err)
		}
	}
	for _, ah := range a.ahs {
		ah.Destroy()
	}
	if a.rmr != nil {
		a.rmr.Dereg()
	}
	if a.cq != nil {
		a.cq.Destroy()
	}
	if a.pd != nil {
		a.pd.Dealloc()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cm: close: %w", err)
	}
	return nil
}

// loop serves the GSI QP's completions until Close.
func (a *Agent) loop() {
	defer a.wg.Done()
	wcs := make([]verbs.WC, 16)
	for {
		a.cq.ReqNotify(false)
		for n := a.cq.Poll(wcs); n > 0; n = a.cq.Poll(wcs) {
			for i := range wcs[:n] {
				a.completion(&wcs[i])
			}
		}
		select {
		case <-a.cq.C():
		case u := <-a.unreach:
			a.unreachable(u)
		case <-a.done:
			return
		}
	}
}

// completion handles one GSI completion: a received MAD is processed and
// its buffer posted again.
func (a *Agent) completion(wc *verbs.WC) {
	if wc.Opcode != verbs.WCRecv {
		if wc.Status != verbs.Success {
			a.ctr.sendErr.Add(1)
		}
		return
	}
	if wc.Status != verbs.Success {
		if wc.Status != verbs.WRFlushErr {
			a.ctr.malformed.Add(1)
			a.postRecv(int(wc.ID))
		}
		return
	}
	slot := int(wc.ID)
	if slot < 0 || slot >= a.nrcv {
		return
	}
	buf := a.rmr.Bytes()[slot*recvLen : (slot+1)*recvLen]
	if wc.ByteLen != recvLen || wc.SrcQP != bth.GSIQPN {
		a.ctr.malformed.Add(1)
	} else {
		a.receive(srcFromGRH(buf[:grhLen]), buf[grhLen:])
	}
	if err := a.postRecv(slot); err != nil {
		a.log.Debug("cm: repost receive", "err", err)
	}
}

// receive decodes and dispatches one MAD from src.
func (a *Agent) receive(src netip.Addr, b []byte) {
	h, m, err := mad.Decode(b)
	if _, ok := a.localFor(src); err != nil || !ok {
		a.ctr.malformed.Add(1)
		return
	}
	if h.AttrID < uint16(len(a.ctr.recv)) {
		a.ctr.recv[h.AttrID].Add(1)
	}
	if h.Method != mad.MethodSend {
		a.ctr.malformed.Add(1)
		return
	}
	for _, r := range a.dispatch(src, &h, m) {
		a.onReject(r)
	}
}

// dispatch hands one decoded MAD to its handler under a.mu and returns the
// requests refused meanwhile, for Config.OnReject.
func (a *Agent) dispatch(src netip.Addr, hp *mad.Header, m mad.Message) []Rejection {
	h := *hp
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() { a.rejected = a.rejected[:0] }()
	if a.closed {
		return nil
	}
	a.dispatchLocked(src, &h, m)
	if len(a.rejected) == 0 || a.onReject == nil {
		return nil
	}
	return slices.Clone(a.rejected)
}

// dispatchLocked calls the handler of m; the caller holds a.mu.
func (a *Agent) dispatchLocked(src netip.Addr, hp *mad.Header, m mad.Message) {
	h := *hp
	switch m := m.(type) {
	case *mad.REQ:
		a.onREQ(src, &h, m)
	case *mad.MRA:
		a.onMRA(m)
	case *mad.REJ:
		a.onREJ(m)
	case *mad.REP:
		a.onREP(src, m)
	case *mad.RTU:
		a.onRTU(m)
	case *mad.DREQ:
		a.onDREQ(src, &h, m)
	case *mad.DREP:
		a.onDREP(m)
	case *mad.SIDRREQ:
		a.onSIDRREQ(src, &h, m)
	case *mad.SIDRREP:
		a.onSIDRREP(m)
	default:
		a.ctr.unmatched.Add(1)
	}
}

// send encodes a CM MAD and sends it to QP 1 of dst; the caller holds
// a.mu. It returns the encoded bytes (valid until the next send) for a
// caller that keeps them to retransmit.
func (a *Agent) send(dst netip.Addr, tid uint64, m mad.Message) []byte {
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, tid), m, a.buf[:]); err != nil {
		// Every message is built from checked values; this is a bug.
		a.log.Error("cm: encode", "attr", mad.AttrName(m.AttrID()), "err", err)
		a.ctr.sendErr.Add(1)
		return nil
	}
	a.sendRaw(dst, a.buf[:])
	return a.buf[:]
}

// sendRaw sends an encoded MAD to QP 1 of dst; the caller holds a.mu.
func (a *Agent) sendRaw(dst netip.Addr, b []byte) {
	if len(b) != mad.Len {
		return
	}
	// Counted first: the answer may come back before PostSend returns.
	if id := uint16(b[16])<<8 | uint16(b[17]); id < uint16(len(a.ctr.sent)) {
		a.ctr.sent[id].Add(1)
	}
	ah, err := a.ah(dst)
	if err == nil {
		err = a.gsi.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Inline, InlineData: b,
			AH: ah, RemoteQPN: bth.GSIQPN, RemoteQKey: bth.GSIQKey}})
	}
	if err != nil {
		a.ctr.sendErr.Add(1)
		a.log.Debug("cm: send", "dst", dst, "err", err)
	}
}

// ah returns the address handle of dst, made once; the caller holds a.mu.
func (a *Agent) ah(dst netip.Addr) (verbs.AH, error) {
	if ah := a.ahs[dst]; ah != nil {
		return ah, nil
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(dst), HopLimit: hopLimit, Port: 1})
	if err != nil {
		return nil, err
	}
	if len(a.ahs) >= 4096 {
		for k, v := range a.ahs {
			v.Destroy()
			delete(a.ahs, k)
			break
		}
	}
	a.ahs[dst] = ah
	return ah, nil
}

// newLocalID returns an unused, non-zero communication ID; the caller
// holds a.mu.
func (a *Agent) newLocalID() uint32 {
	for {
		id := rand.Uint32()
		if id != 0 && a.conns[id] == nil && a.sidr[id] == nil {
			return id
		}
	}
}

// newPort returns an unused ephemeral source port; the caller holds a.mu.
func (a *Agent) newPort() uint16 {
	for range 1 << 16 {
		p := uint16(ephemeralLow + rand.IntN(ephemeralHigh-ephemeralLow+1))
		if a.ports[p] == 0 && len(a.listeners[p]) == 0 {
			return p
		}
	}
	return uint16(ephemeralLow + rand.IntN(ephemeralHigh-ephemeralLow+1))
}

// reqTimeout is how long the active side waits for an answer to its REQ:
// twice the packet life time and the response timeout it announced, as
// the IB CM computes it.
func (a *Agent) reqTimeout() time.Duration {
	return 2*cmTimeout(a.lifeTime) + cmTimeout(a.respTimeout)
}

// checkAddr checks that addr is usable as a local or remote address of
// this agent.
func (a *Agent) checkAddr(ip netip.Addr) error {
	if _, ok := a.localFor(ip); !ok {
		return fmt.Errorf("%w: %v is not of an IP version the device has (%v)", ErrAddr, ip, a.addrs)
	}
	return nil
}

// localFor returns the device's address of peer's IP version, the one a
// connection to peer uses.
func (a *Agent) localFor(peer netip.Addr) (netip.Addr, bool) {
	if !peer.IsValid() {
		return netip.Addr{}, false
	}
	four := peer.Unmap().Is4()
	for _, ip := range a.addrs {
		if ip.Is4() == four {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// isLocal reports whether ip is one of the device's addresses.
func (a *Agent) isLocal(ip netip.Addr) bool {
	return slices.Contains(a.addrs, ip.Unmap())
}

// checkLocal checks that ip, an address to listen on, is one of the
// device's or the unspecified address of an IP version it has.
func (a *Agent) checkLocal(ip netip.Addr) error {
	switch {
	case !ip.IsValid():
		return nil
	case ip.IsUnspecified():
		return a.checkAddr(ip)
	case !a.isLocal(ip):
		return fmt.Errorf("%w: %v is not an address of the device (%v)", ErrAddr, ip, a.addrs)
	}
	return nil
}
