//go:build hwverbs && cgo && linux

package rdmacm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <stdlib.h>
#include "rdmacm.h"
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
	"github.com/goroce/goroce/verbs"
)

// resolveTimeout bounds rdma_resolve_addr and rdma_resolve_route (rping's
// 2 s): an address that answers no ARP fails within it.
const resolveTimeout = 2 * time.Second

// cmID is an rdma_cm id (struct rdma_cm_id).
type cmID struct{ p *C.struct_rdma_cm_id }

// event is an rdma_cm event as the package reads it, copied out of
// librdmacm's before that is acknowledged.
type event struct {
	typ    eventType
	status int32
	id     cmID // the new id of a connection request
	// The connection parameters (rdma_conn_param) of a request or a
	// response.
	qpn                                uint32
	responderResources, initiatorDepth uint8
	retryCount, rnrRetryCount          uint8
	pdata                              []byte
}

// rdmaErr is the error of a failed librdmacm call.
func rdmaErr(op string, rc C.int, detail string) error {
	e := &hwverbs.Error{Op: op, Errno: syscall.Errno(rc), Detail: detail}
	switch e.Errno {
	case syscall.EADDRINUSE, syscall.EADDRNOTAVAIL, syscall.ENODEV, syscall.EAFNOSUPPORT:
		e.Kind = cm.ErrAddr
	case syscall.EINVAL:
		e.Kind = cm.ErrInvalid
	}
	return e
}

// channel is one rdma_event_channel, its descriptor in Go's poller, and
// the goroutine that reads its events and hands each to a handler.
type channel struct {
	ch   *C.struct_rdma_event_channel
	f    *os.File // a duplicate of ch's descriptor, for the poller
	done chan struct{}
	log  *slog.Logger
}

// newChannel makes an event channel whose goroutine calls handle for
// each event, in order.
func newChannel(log *slog.Logger, handle func(event)) (*channel, error) {
	ch, err := C.gc_create_channel()
	if ch == nil {
		return nil, rdmaErr("rdma_create_event_channel", C.int(errnoOf(err)),
			"is the rdma_ucm module loaded (/dev/infiniband/rdma_cm)?")
	}
	fd := int(C.gc_channel_fd(ch))
	dup := -1
	if err = unix.SetNonblock(fd, true); err == nil {
		dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	}
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("rdmacm: event channel descriptor: %w", err)
	}
	c := &channel{ch: ch, f: os.NewFile(uintptr(dup), "rdma_cm"), done: make(chan struct{}), log: log}
	rc, err := c.f.SyscallConn()
	if err != nil {
		c.f.Close()
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("rdmacm: event channel descriptor: %w", err)
	}
	go c.run(rc, handle)
	return c, nil
}

func errnoOf(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return syscall.EIO
}

// run is the channel's goroutine: it waits in Go's poller until the
// descriptor is readable, then takes every waiting event.
func (c *channel) run(rc syscall.RawConn, handle func(event)) {
	defer close(c.done)
	var cev C.gc_event
	for {
		var failed C.int
		err := rc.Read(func(uintptr) bool {
			for {
				r := C.gc_get_event(c.ch, &cev)
				switch r {
				case 0:
					handle(toEvent(&cev))
				case C.EAGAIN, C.EINTR:
					return r == C.EINTR
				default:
					failed = r
					return true
				}
			}
		})
		if err != nil {
			return // stopped
		}
		if failed != 0 {
			c.log.Warn("rdmacm: rdma_get_cm_event failed; no more events on this channel", "err", syscall.Errno(failed))
			return
		}
	}
}

func toEvent(c *C.gc_event) event {
	ev := event{typ: eventType(c.event), status: int32(c.status), id: cmID{c.id}, qpn: uint32(c.qp_num),
		responderResources: uint8(c.responder_resources), initiatorDepth: uint8(c.initiator_depth),
		retryCount: uint8(c.retry_count), rnrRetryCount: uint8(c.rnr_retry_count)}
	if c.pdata_len > 0 {
		ev.pdata = C.GoBytes(unsafe.Pointer(&c.pdata[0]), C.int(c.pdata_len))
	}
	return ev
}

// stopReader stops the goroutine and waits for it; the channel stays
// open for the ids on it to be destroyed.
func (c *channel) stopReader() {
	c.f.Close()
	<-c.done
}

// destroy closes the channel; its goroutine must have stopped.
func (c *channel) destroy() { C.rdma_destroy_event_channel(c.ch) }

func toGCAddr(a netip.AddrPort) C.gc_addr {
	var g C.gc_addr
	ip := a.Addr()
	b := ip.As16()
	for i := range b {
		g.ip[i] = C.uint8_t(b[i])
	}
	g.port = C.uint16_t(a.Port())
	if ip.Unmap().Is4() {
		g.v4 = 1
	}
	return g
}

func fromGCAddr(g *C.gc_addr) netip.AddrPort {
	var b [16]byte
	for i := range b {
		b[i] = byte(g.ip[i])
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), uint16(g.port))
}

// deviceOf returns the RDMA device and port an id is bound to ("" when
// none yet).
func deviceOf(id cmID) (string, uint8) {
	var name [64]C.char
	port := C.gc_device(id.p, &name[0], C.size_t(len(name)))
	return C.GoString(&name[0]), uint8(port)
}

// checkBound reports an id bound to another device than dev.
func checkBound(dev device, id cmID, what string) error {
	name, port := deviceOf(id)
	if name == "" || name == dev.Name() && port == dev.Port() {
		return nil
	}
	return fmt.Errorf("rdmacm: %w: %s is on RDMA device %s port %d, not on %s port %d: open %s with hwverbs.Open",
		cm.ErrAddr, what, name, port, dev.Name(), dev.Port(), name)
}

// initAttrs asks rdma_cm for the QP attributes of state.
func (c *Conn) initAttrs(state verbs.QPState) (qpAttrs, error) {
	var g C.gc_qpattr
	if rc := C.gc_init_qp_attr(c.id.p, C.int(state), &g); rc != 0 {
		return qpAttrs{}, rdmaErr("rdma_init_qp_attr", rc, fmt.Sprintf("state %v", state))
	}
	a := qpAttrs{mask: verbs.AttrMask(g.mask), sgidTable: int(g.sgid_index)}
	a.attr = verbs.QPAttr{State: verbs.QPState(g.state), PathMTU: bth.MTU(g.path_mtu),
		RQPSN: bth.PSN(g.rq_psn), SQPSN: bth.PSN(g.sq_psn), DestQPN: uint32(g.dest_qpn),
		Access: verbs.Access(g.access), PKeyIndex: uint16(g.pkey_index), Port: uint8(g.port),
		Timeout: uint8(g.timeout), RetryCnt: uint8(g.retry_cnt), RNRRetry: uint8(g.rnr_retry),
		MinRNRTimer: uint8(g.min_rnr_timer), MaxRDAtomic: uint8(g.max_rd_atomic),
		MaxDestRDAtomic: uint8(g.max_dest_rd_atomic)}
	for i := range a.attr.AH.DGID {
		a.attr.AH.DGID[i] = byte(g.dgid[i])
	}
	a.attr.AH.FlowLabel, a.attr.AH.HopLimit = uint32(g.flow_label), uint8(g.hop_limit)
	a.attr.AH.TrafficClass, a.attr.AH.SL, a.attr.AH.Port = uint8(g.traffic_class), uint8(g.sl), uint8(g.ah_port)
	return a, nil
}

// initQP moves the QP to INIT with rdma_cm's attributes.
func (c *Conn) initQP() error {
	a, err := c.initAttrs(verbs.StateInit)
	if err != nil {
		return err
	}
	return c.move(&a)
}

// ready moves the QP from INIT (again, now with the connection's access
// rights) through RTR to RTS, with rdma_cm's attributes and this side's
// choices (keep for the depths the kernel already negotiated).
func (c *Conn) ready(responderResources, initiatorDepth int) error {
	var as [3]qpAttrs
	for i, st := range [3]verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		var err error
		if as[i], err = c.initAttrs(st); err != nil {
			return err
		}
	}
	as[1].setRTR(&c.params, responderResources)
	as[2].setRTS(&c.params, initiatorDepth)
	for i := range as {
		if err := c.move(&as[i]); err != nil {
			return err
		}
	}
	c.info = connInfo(c.qp.QPN(), &as[1], &as[2])
	return nil
}

// connParam is the rdma_conn_param of a REQ or REP for c's QP.
func (c *Conn) connParam(responderResources, initiatorDepth uint8) C.gc_conn {
	p := &c.params
	return C.gc_conn{qp_num: C.uint32_t(c.qp.QPN()), responder_resources: C.uint8_t(responderResources),
		initiator_depth: C.uint8_t(initiatorDepth), retry_count: C.uint8_t(count(p.RetryCount)),
		rnr_retry_count: C.uint8_t(count(p.RNRRetryCount))}
}

// pdata returns a pointer to b for a C call that copies it, and its
// length.
func pdata(b []byte) (unsafe.Pointer, C.uint8_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), C.uint8_t(len(b))
}

// open makes the connection's event channel and rdma_cm id.
func (c *Conn) open() error {
	ch, err := newChannel(c.log, c.onEvent)
	if err != nil {
		return err
	}
	c.ch = ch
	id, err := C.gc_create_id(ch.ch)
	if id == nil {
		return rdmaErr("rdma_create_id", C.int(errnoOf(err)), "")
	}
	c.id = cmID{id}
	return nil
}

// onEvent is the handler of the connection's channel.
func (c *Conn) onEvent(ev event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onEventLocked(ev)
}

// msTimeout is resolveTimeout, or what is left of ctx if less, in
// milliseconds.
func msTimeout(ctx context.Context) C.int {
	d := resolveTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return C.int(max(d.Milliseconds(), 1))
}

// resolve resolves the peer's address and the route to it
// (ADDR_RESOLVED, ROUTE_RESOLVED), from dev's address when it is of the
// same IP version, and checks that the route leaves through dev.
func (c *Conn) resolve(ctx context.Context) error {
	dst := toGCAddr(c.remote)
	var srcp *C.gc_addr
	if a := c.dev.Addr(); a.IsValid() && a.Is4() == c.remote.Addr().Is4() {
		src := toGCAddr(netip.AddrPortFrom(a, 0))
		srcp = &src
	}
	if rc := C.gc_resolve_addr(c.id.p, srcp, &dst, msTimeout(ctx)); rc != 0 {
		return rdmaErr("rdma_resolve_addr", rc, c.remote.Addr().String())
	}
	if _, err := c.expect(ctx, evAddrResolved, "resolving the address"); err != nil {
		return err
	}
	if err := checkBound(c.dev, c.id, "the route to "+c.remote.Addr().String()); err != nil {
		return err
	}
	if rc := C.gc_resolve_route(c.id.p, msTimeout(ctx)); rc != 0 {
		return rdmaErr("rdma_resolve_route", rc, c.remote.Addr().String())
	}
	if _, err := c.expect(ctx, evRouteResolved, "resolving the route"); err != nil {
		return err
	}
	var l C.gc_addr
	C.gc_local(c.id.p, &l)
	c.local = fromGCAddr(&l)
	return nil
}

// dial is Dial's exchange: resolve, QP to INIT, REQ, then on the REP the
// QP to RTS and the RTU. On error the caller tears c down.
func (c *Conn) dial(ctx context.Context, p *Params) error {
	if err := c.open(); err != nil {
		return err
	}
	if err := c.resolve(ctx); err != nil {
		return err
	}
	if err := c.setupQP(p); err != nil {
		return err
	}
	if err := c.initQP(); err != nil {
		return err
	}
	cp := c.connParam(depth(p.ResponderResources), depth(p.InitiatorDepth))
	ptr, n := pdata(p.PrivateData)
	if rc := C.gc_connect(c.id.p, &cp, ptr, n); rc != 0 {
		return rdmaErr("rdma_connect", rc, "")
	}
	c.log.Debug("rdmacm: REQ sent", "remote", c.remote, "qpn", c.qp.QPN())
	ev, err := c.expect(ctx, evConnectResponse, "waiting for the REP")
	if err != nil {
		return err
	}
	c.peerData = ev.pdata
	if err := c.ready(keep, keep); err != nil {
		c.reject(nil)
		return err
	}
	if rc := C.gc_establish(c.id.p); rc != 0 {
		return rdmaErr("rdma_establish", rc, "")
	}
	c.mu.Lock()
	c.establishLocked()
	c.mu.Unlock()
	c.log.Debug("rdmacm: connected", "remote", c.remote, "qpn", c.qp.QPN(), "remote_qpn", c.info.RemoteQPN,
		"psn", c.info.SendPSN)
	return nil
}

// acceptReq is Accept's exchange for one request OnRequest accepted with
// p: QP to RTS, REP, then the RTU. On error the caller tears c down.
func (c *Conn) acceptReq(ctx context.Context, p *Params) error {
	err := c.setupQP(p)
	if err == nil {
		err = c.initQP()
	}
	rr := min(depth(p.ResponderResources), c.req.InitiatorDepth)
	id := min(depth(p.InitiatorDepth), c.req.ResponderResources)
	if err == nil {
		err = c.ready(int(rr), int(id))
	}
	if err != nil {
		c.reject(nil)
		return err
	}
	cp := c.connParam(rr, id)
	ptr, n := pdata(p.PrivateData)
	if rc := C.gc_accept(c.id.p, &cp, ptr, n); rc != 0 {
		c.reject(nil)
		return rdmaErr("rdma_accept", rc, "")
	}
	c.log.Debug("rdmacm: REP sent", "remote", c.remote, "qpn", c.qp.QPN(), "psn", c.info.SendPSN)
	if _, err := c.expect(ctx, evEstablished, "waiting for the RTU"); err != nil {
		return err
	}
	c.log.Debug("rdmacm: connected", "remote", c.remote, "qpn", c.qp.QPN(), "remote_qpn", c.info.RemoteQPN)
	return nil
}

// reject answers the peer with a REJ "consumer defined" carrying data.
func (c *Conn) reject(data []byte) {
	if c.id.p == nil {
		return
	}
	ptr, n := pdata(data)
	if rc := C.gc_reject(c.id.p, ptr, n); rc != 0 {
		c.log.Debug("rdmacm: rdma_reject failed", "remote", c.remote, "err", syscall.Errno(rc))
	}
}

// disconnect sends the DREQ, or the DREP to the peer's.
func (c *Conn) disconnect() {
	if c.id.p == nil {
		return
	}
	if rc := C.gc_disconnect(c.id.p); rc != 0 {
		c.log.Debug("rdmacm: rdma_disconnect failed", "remote", c.remote, "err", syscall.Errno(rc))
	}
}

// close is Close and CloseContext: with wait, it waits for the end of
// the disconnect exchange as long as ctx lets it.
func (c *Conn) close(ctx context.Context, wait bool) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	wasUp := c.up && !c.ended
	c.endLocked(cm.ErrClosed)
	c.toErr()
	c.mu.Unlock()
	var err error
	if wasUp {
		c.disconnect()
		if wait {
			select {
			case <-c.disc:
			case <-ctx.Done():
				err = fmt.Errorf("rdmacm: close %v: %w", c.remote, ctx.Err())
			}
		}
	}
	c.teardown()
	c.log.Debug("rdmacm: closed", "remote", c.remote)
	return err
}

// teardown releases everything the connection holds, once: its QP to
// ERR, its goroutine, its id and event channel, what it created.
func (c *Conn) teardown() {
	c.mu.Lock()
	if c.torn {
		c.mu.Unlock()
		return
	}
	c.torn, c.closed = true, true
	c.endLocked(cm.ErrClosed)
	c.overLocked()
	c.toErr()
	c.mu.Unlock()
	if c.ch != nil {
		c.ch.stopReader()
	}
	if c.id.p != nil {
		if rc := C.gc_destroy_id(c.id.p); rc != 0 {
			c.log.Warn("rdmacm: rdma_destroy_id failed", "remote", c.remote, "err", syscall.Errno(rc))
		}
		c.id.p = nil
	}
	if c.ch != nil {
		c.ch.destroy()
	}
	c.own.release()
}

// listen makes the listener's channel and id, binds and listens.
func (l *Listener) listen(a netip.AddrPort) error {
	ch, err := newChannel(l.log, l.onEvent)
	if err != nil {
		return err
	}
	l.ch = ch
	id, err := C.gc_create_id(ch.ch)
	if id == nil {
		l.teardown()
		return rdmaErr("rdma_create_id", C.int(errnoOf(err)), "")
	}
	l.id = cmID{id}
	ga := toGCAddr(a)
	if rc := C.gc_bind(id, &ga); rc != 0 {
		l.teardown()
		detail := a.String()
		if syscall.Errno(rc) == syscall.ENODEV || syscall.Errno(rc) == syscall.EADDRNOTAVAIL {
			detail += ": no RDMA device has that address (rdma link show)"
		}
		return rdmaErr("rdma_bind_addr", rc, detail)
	}
	if err := checkBound(l.dev, l.id, a.Addr().String()); err != nil {
		l.teardown()
		return err
	}
	if rc := C.gc_listen(id, C.int(l.cfg.Backlog)); rc != 0 {
		l.teardown()
		return rdmaErr("rdma_listen", rc, a.String())
	}
	var g C.gc_addr
	C.gc_local(id, &g)
	l.addr = fromGCAddr(&g)
	return nil
}

// onEvent is the handler of the listener's channel.
func (l *Listener) onEvent(ev event) {
	switch ev.typ {
	case evConnectRequest:
		l.request(ev)
	case evDeviceRemoval:
		l.mu.Lock()
		l.failLocked(eventError(ev.typ, ev.status, nil, l.addr, false))
		l.mu.Unlock()
	default:
		l.log.Debug("rdmacm: listener event", "addr", l.addr, "event", ev.typ, "status", ev.status)
	}
}

// request takes a connection request: its new id moves to a channel of
// its own, and it waits for Accept (or is rejected when the backlog is
// full or it came through another device).
func (l *Listener) request(ev event) {
	c := newConn(l.dev, false, l.log)
	c.id = ev.id
	var g C.gc_addr
	C.gc_local(c.id.p, &g)
	c.local = fromGCAddr(&g)
	C.gc_peer(c.id.p, &g)
	c.remote = fromGCAddr(&g)
	ch, err := newChannel(c.log, c.onEvent)
	if err != nil {
		l.log.Warn("rdmacm: connection request dropped", "err", err)
		c.reject(nil)
		c.teardown()
		return
	}
	c.ch = ch
	if rc := C.gc_migrate(c.id.p, ch.ch); rc != 0 {
		l.log.Warn("rdmacm: connection request dropped: rdma_migrate_id failed", "err", syscall.Errno(rc))
		c.reject(nil)
		c.teardown()
		return
	}
	c.peerData = ev.pdata
	c.req = Request{Local: c.local, Remote: c.remote, PrivateData: ev.pdata,
		ResponderResources: ev.responderResources, InitiatorDepth: ev.initiatorDepth,
		RetryCount: ev.retryCount, RNRRetryCount: ev.rnrRetryCount,
		PathMTU: bth.MTU(C.gc_path_mtu(c.id.p)), RemoteQPN: ev.qpn}
	if err := checkBound(l.dev, c.id, "a request to "+c.local.String()); err != nil {
		l.log.Debug("rdmacm: request rejected", "from", c.remote, "err", err)
		c.reject(nil)
		c.teardown()
		return
	}
	select {
	case l.pending <- c:
		l.log.Debug("rdmacm: connection request", "from", c.remote, "to", c.local, "remote_qpn", ev.qpn)
	default:
		l.log.Debug("rdmacm: request rejected: backlog full", "from", c.remote, "backlog", l.cfg.Backlog)
		c.reject(nil)
		c.teardown()
	}
}

// teardown stops the listener's goroutine and destroys its id and
// channel.
func (l *Listener) teardown() {
	if l.ch == nil {
		return
	}
	l.ch.stopReader()
	if l.id.p != nil {
		C.gc_destroy_id(l.id.p)
		l.id.p = nil
	}
	l.ch.destroy()
	l.ch = nil
}
