package uverbs

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// session is one program's open device: its control connection, its
// shared memory and its objects. Its handlers and its worker's drains run
// under mu.
type session struct {
	srv  *Server
	conn *net.UnixConn
	pid  int32
	uid  uint32
	log  *slog.Logger

	mu       sync.Mutex
	mem      int // the program-memory file
	rings    ringFile
	page     []byte // the session page, the first bytes of rings
	doorbell *os.File
	asyncFD  int // write end of the async event pipe
	next     uint32
	pds      map[uint32]*pdObj
	mrs      map[uint32]*mrObj
	mws      map[uint32]*mwObj
	chans    map[uint32]*chanObj
	cqs      map[uint32]*cqObj
	qps      map[uint32]*qpObj
	srqs     map[uint32]*srqObj
	ahs      map[uint32]*ahObj
	wqs      map[uint32]wqOwner // by doorbell bit
	freeDB   []uint32
	nextDB   uint32

	cmChans map[uint32]*cmChannel
	cmIDs   map[uint32]*cmID
	rs      rsState // rsockets (rsocket_linux.go)
	closed  bool    // torn down

	worker     sync.WaitGroup
	ctl        *worker // the scratch space of drains the requests make (handle)
	asyncLost  atomic.Uint64
	helloed    bool
	workerStop chan struct{}
}

// wqOwner is what a doorbell bit names: a QP or an SRQ.
type wqOwner interface{ isWQ() }

type pdObj struct {
	h  uint32
	pd verbs.PD
}

type mrObj struct {
	h      uint32
	pd     *pdObj
	mr     verbs.MR
	view   []byte // the pages of the region, mapped from the program-memory file
	addr   uint64 // the program's address of the region, and its length
	n      uint64
	iova   uint64
	access verbs.Access
}

type mwObj struct {
	h  uint32
	mw verbs.MW
}

type chanObj struct {
	h     uint32
	fd    int // write end of the channel's pipe
	users int
}

type cqObj struct {
	s    *session
	h    uint32
	cq   verbs.CQ
	sink *cqSink
	ch   *chanObj
}

type qpObj struct {
	s         *session
	h         uint32
	qp        verbs.QP
	typ       verbs.QPType
	scq, rcq  *cqObj
	srq       *srqObj
	db        uint32
	sigAll    bool
	cap       verbs.QPCap
	sq, rq    ring
	sqc       uint32     // the device's consumer index of sq
	rqc       uint32     // and of rq, under rqMu
	rqMu      sync.Mutex // rq's consumer side: the worker's drains, the engine's pulls (Pull)
	pullSGE   [32]verbs.SGE
	maxInline uint32
	mcast     []abi.McastReq // the groups ATTACH_MCAST attached it to (mcast_linux.go)
}

func (*qpObj) isWQ() {}

type srqObj struct {
	s      *session
	h      uint32
	srq    verbs.SRQ
	db     uint32
	maxWR  uint32
	maxSGE uint32
	limit  atomic.Uint32
	rq     ring
	rqc    uint32     // under rqMu
	rqMu   sync.Mutex // as qpObj's
	users  int
	sge    [32]verbs.SGE
}

func (*srqObj) isWQ() {}

type ahObj struct {
	h  uint32
	ah verbs.AH
}

// newSession takes a program's connection.
func newSession(srv *Server, c *net.UnixConn) (*session, error) {
	s := &session{srv: srv, conn: c, mem: -1, asyncFD: -1, rings: ringFile{fd: -1},
		pds: map[uint32]*pdObj{}, mrs: map[uint32]*mrObj{}, mws: map[uint32]*mwObj{}, chans: map[uint32]*chanObj{},
		cqs: map[uint32]*cqObj{}, qps: map[uint32]*qpObj{}, srqs: map[uint32]*srqObj{}, ahs: map[uint32]*ahObj{},
		wqs: map[uint32]wqOwner{}, workerStop: make(chan struct{}), cmChans: map[uint32]*cmChannel{},
		cmIDs: map[uint32]*cmID{}}
	s.rs.init()
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	s.pid, s.uid = cred.Pid, cred.Uid
	s.log = srv.log.With("pid", s.pid)
	return s, nil
}

// serve answers the program's requests until its connection ends, then
// frees everything the session holds.
func (s *session) serve() {
	defer s.teardown()
	buf := make([]byte, abi.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var out []byte
	for {
		// The first request must come soon; later ones whenever the
		// program likes.
		if !s.helloed {
			s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		} else {
			s.conn.SetReadDeadline(time.Time{})
		}
		n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds := receivedFDs(oob[:oobn])
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n < 8 {
			closeFDs(fds)
			s.log.Debug("bad request packet", "len", n, "flags", flags)
			return
		}
		var h abi.Header
		binary.Decode(buf, binary.NativeEndian, &h)
		body := buf[8:n]
		if int(h.Size) != len(body) {
			closeFDs(fds)
			s.log.Debug("request size mismatch", "op", h.Op, "size", h.Size, "got", len(body))
			return
		}
		if !s.helloed && h.Op != abi.OpHello && h.Op != abi.OpInfo {
			closeFDs(fds)
			return
		}
		reply, rfds, e := s.handle(h.Op, body, fds)
		out = out[:0]
		var rsize uint32
		if e == 0 && reply != nil {
			rsize = uint32(binary.Size(reply))
		}
		out, _ = binary.Append(out, binary.NativeEndian, abi.Reply{Errno: e, Size: rsize})
		if rsize > 0 {
			out, _ = binary.Append(out, binary.NativeEndian, reply)
		}
		var rights []byte
		if len(rfds) > 0 {
			rights = unix.UnixRights(rfds...)
		}
		if _, _, err := s.conn.WriteMsgUnix(out, rights, nil); err != nil {
			return
		}
		if h.Op == abi.OpHello && e != 0 {
			return
		}
	}
}

// receivedFDs returns the descriptors a packet carried.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// decode reads a request struct from body; it reports false when body is
// not its size.
func decode[T any](body []byte, v *T) bool {
	if len(body) != binary.Size(v) {
		return false
	}
	_, err := binary.Decode(body, binary.NativeEndian, v)
	return err == nil
}

// handle runs one request under s.mu; it returns the reply, the
// descriptors to send with it, and the errno.
func (s *session) handle(op abi.Op, body []byte, fds []int) (any, []int, uint32) {
	switch op {
	case abi.OpRSMap, abi.OpRSUnmap, abi.OpRSIOWrite:
		// These wait for the connection (its relay, its credits), not
		// for the session's objects: apart from s.mu
		// (rsiomap_linux.go).
		if len(fds) != 0 {
			closeFDs(fds)
			return nil, nil, abi.EINVAL
		}
		var r any
		var e uint32
		switch op {
		case abi.OpRSMap:
			r, e = s.rsMap(body)
		case abi.OpRSUnmap:
			e = s.rsUnmap(body)
		default:
			r, e = s.rsIOWrite(body)
		}
		return r, nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[abi.Op]int{abi.OpHello: 3, abi.OpCreateCompChannel: 1, abi.OpCMRegisterChannel: 1,
		abi.OpRSConnect: 1, abi.OpRSListen: 1, abi.OpRSAccept: 1, abi.OpRSBind: 1}[op]
	if len(fds) != want {
		closeFDs(fds)
		return nil, nil, abi.EINVAL
	}
	if s.page != nil && op != abi.OpInfo {
		// What the program posted before this call goes to the engine
		// before the call acts, as the kernel's ibv_post_send hands a
		// request to rxe (or a driver to its NIC, with its address
		// vector) before it returns: the sends of a program that posts
		// and then destroys the address handle or the QP at once
		// (mckey's sender) go, the receives of one that posts and then
		// moves the QP to RTR are there.
		if s.ctl == nil {
			s.ctl = &worker{s: s}
		}
		s.ctl.drainLocked()
	}
	r, rfds, err := s.dispatch(op, body, fds)
	if err != 0 {
		s.log.Debug("request refused", "op", op, "errno", err)
	}
	return r, rfds, err
}

func (s *session) dispatch(op abi.Op, body []byte, fds []int) (any, []int, uint32) {
	switch op {
	case abi.OpHello:
		return s.hello(body, fds)
	case abi.OpInfo:
		if len(body) != 0 {
			return nil, nil, abi.EINVAL
		}
		return s.info(), nil, 0
	case abi.OpQueryPort:
		var req abi.QueryPortReq
		if !decode(body, &req) || req.Port != 1 {
			return nil, nil, abi.EINVAL
		}
		p := portAttr(s.srv.dev, len(s.srv.gids))
		return &p, nil, 0
	case abi.OpCreateCompChannel:
		return s.createCompChannel(body, fds[0])
	case abi.OpCMRegisterChannel:
		return s.cmRegisterChannel(body, fds[0])
	}
	var r any
	var e uint32
	switch op {
	case abi.OpAllocPD:
		r, e = s.allocPD(body)
	case abi.OpDeallocPD:
		e = s.deallocPD(body)
	case abi.OpRegMR:
		r, e = s.regMR(body)
	case abi.OpReregMR:
		r, e = s.reregMR(body)
	case abi.OpDeregMR:
		e = s.deregMR(body)
	case abi.OpAllocMW:
		r, e = s.allocMW(body)
	case abi.OpDeallocMW:
		e = s.deallocMW(body)
	case abi.OpDestroyCompChannel:
		e = s.destroyCompChannel(body)
	case abi.OpCreateCQ:
		r, e = s.createCQ(body)
	case abi.OpResizeCQ:
		r, e = s.resizeCQ(body)
	case abi.OpDestroyCQ:
		e = s.destroyCQ(body)
	case abi.OpCreateQP:
		r, e = s.createQP(body)
	case abi.OpModifyQP:
		e = s.modifyQP(body)
	case abi.OpQueryQP:
		r, e = s.queryQP(body)
	case abi.OpDestroyQP:
		e = s.destroyQP(body)
	case abi.OpCreateSRQ:
		r, e = s.createSRQ(body)
	case abi.OpModifySRQ:
		e = s.modifySRQ(body)
	case abi.OpQuerySRQ:
		r, e = s.querySRQ(body)
	case abi.OpDestroySRQ:
		e = s.destroySRQ(body)
	case abi.OpCreateAH:
		r, e = s.createAH(body)
	case abi.OpDestroyAH:
		e = s.destroyAH(body)
	case abi.OpCMUnregisterChannel:
		e = s.cmUnregisterChannel(body)
	case abi.OpCMCreateID:
		r, e = s.cmCreateID(body)
	case abi.OpCMDestroyID:
		e = s.cmDestroyID(body)
	case abi.OpCMBind:
		e = s.cmBind(body)
	case abi.OpCMResolveAddr:
		e = s.cmResolveAddr(body)
	case abi.OpCMResolveRoute:
		e = s.cmResolveRoute(body)
	case abi.OpCMListen:
		e = s.cmListen(body)
	case abi.OpCMConnect:
		e = s.cmConnect(body)
	case abi.OpCMAccept:
		e = s.cmAccept(body)
	case abi.OpCMReject:
		e = s.cmReject(body)
	case abi.OpCMDisconnect:
		e = s.cmDisconnect(body)
	case abi.OpCMEstablish:
		e = s.cmEstablish(body)
	case abi.OpCMMigrate:
		e = s.cmMigrate(body)
	case abi.OpCMQuery:
		r, e = s.cmQuery(body)
	case abi.OpCMInitQPAttr:
		r, e = s.cmInitQPAttr(body)
	case abi.OpCMJoinMcast:
		e = s.cmJoinMcast(body)
	case abi.OpCMLeaveMcast:
		e = s.cmLeaveMcast(body)
	case abi.OpRSConnect:
		e = s.rsConnect(body, fds)
	case abi.OpRSListen:
		r, e = s.rsListen(body, fds)
	case abi.OpRSAccept:
		r, e = s.rsAccept(body, fds)
	case abi.OpRSStatus:
		e = s.rsStatus(body)
	case abi.OpRSBind:
		r, e = s.rsBind(body, fds) // rsdgram_linux.go
	case abi.OpRSOption:
		e = s.rsOption(body)
	case abi.OpAttachMcast:
		e = s.attachMcast(body) // mcast_linux.go
	case abi.OpDetachMcast:
		e = s.detachMcast(body)
	default:
		e = abi.ENOSYS
	}
	return r, nil, e
}

// hello sets the session up: its three descriptors are the program-memory
// file, the doorbell and the async event pipe.
func (s *session) hello(body []byte, fds []int) (any, []int, uint32) {
	var req abi.HelloReq
	if s.helloed || !decode(body, &req) {
		closeFDs(fds)
		return nil, nil, abi.EINVAL
	}
	if req.Version != abi.Version {
		closeFDs(fds)
		s.log.Warn("a program of another ABI version", "version", req.Version, "want", abi.Version)
		return nil, nil, abi.EPROTO
	}
	mem, db, async := fds[0], fds[1], fds[2]
	fail := func(e uint32, why string) (any, []int, uint32) {
		closeFDs(fds)
		s.log.Debug("hello refused", "why", why)
		return nil, nil, e
	}
	var st unix.Stat_t
	if unix.Fstat(mem, &st) != nil || st.Size < abi.MemFileSize {
		return fail(abi.EINVAL, "program-memory file too small")
	}
	if seals, err := unix.FcntlInt(uintptr(mem), unix.F_GET_SEALS, 0); err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return fail(abi.EINVAL, "program-memory file not sealed against shrinking")
	}
	if unix.Fstat(async, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fail(abi.EINVAL, "the async event descriptor is not a pipe")
	}
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", db)); err != nil || link != "anon_inode:[eventfd]" {
		return fail(abi.EINVAL, "the doorbell is not an eventfd")
	}
	if unix.SetNonblock(db, true) != nil || unix.SetNonblock(async, true) != nil {
		return fail(abi.EINVAL, "descriptors")
	}
	rings, err := newRingFile()
	if err != nil {
		return fail(abi.ENOMEM, err.Error())
	}
	_, page, err := rings.alloc(abi.SessionPageSize)
	if err != nil {
		rings.close()
		return fail(abi.ENOMEM, err.Error())
	}
	u32(page, offVersion).Store(abi.Version)
	s.mem, s.asyncFD, s.rings, s.page = mem, async, rings, page
	s.doorbell = os.NewFile(uintptr(db), "doorbell")
	s.helloed = true
	s.worker.Add(1)
	go s.work()
	s.log.Debug("session open", "uid", s.uid)
	return s.info(), []int{rings.fd}, 0
}

// info describes the device.
func (s *session) info() *abi.HelloReply {
	r := &abi.HelloReply{Device: s.srv.attr, Port: portAttr(s.srv.dev, len(s.srv.gids)), GIDs: uint32(len(s.srv.gids))}
	copy(r.GID[:], s.srv.gids)
	return r
}

// handle allocates a handle.
func (s *session) handle32() (uint32, bool) {
	if s.next >= 1<<30-1 {
		return 0, false
	}
	s.next++
	return s.next, true
}

// asyncEvent sends an event to the program; one the pipe has no room for
// is lost (and counted).
func (s *session) asyncEvent(typ, h uint32) {
	if typ == abi.EventSRQLimitReached {
		s.mu.Lock()
		if r := s.srqs[h]; r != nil {
			r.limit.Store(0) // the event disarms the limit
		}
		s.mu.Unlock()
	}
	var b [8]byte
	binary.NativeEndian.PutUint32(b[0:], typ)
	binary.NativeEndian.PutUint32(b[4:], h)
	s.mu.Lock()
	fd := s.asyncFD
	s.mu.Unlock()
	if fd < 0 {
		return
	}
	if n, err := unix.Write(fd, b[:]); n != 8 || err != nil {
		s.asyncLost.Add(1)
	}
}

// teardown ends the session: as the kernel does for a process that
// exits, it destroys the QPs first, then what they used.
func (s *session) teardown() {
	s.conn.Close()
	s.rs.close() // its rsockets end, the peers see them close (rsocket_linux.go)
	s.mu.Lock()
	if s.doorbell != nil {
		close(s.workerStop)
		s.doorbell.Close()
	}
	s.mu.Unlock()
	s.worker.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	// rdma_cm's ids first, as the kernel's ucma closes a dead program's:
	// its connections get a DREQ, its listeners stop (and the agent then
	// answers their port's requests with a REJ).
	s.closed = true
	for _, id := range s.cmIDs {
		s.freeCMID(id)
	}
	for _, c := range s.cmChans {
		c.close()
	}
	for _, q := range s.qps {
		s.freeQP(q)
	}
	for _, r := range s.srqs {
		s.freeSRQ(r)
	}
	for _, c := range s.cqs {
		s.freeCQ(c)
	}
	for _, a := range s.ahs {
		a.ah.Destroy()
	}
	for _, w := range s.mws {
		w.mw.Dealloc()
	}
	for _, m := range s.mrs {
		if err := m.mr.Dereg(); err != nil {
			s.log.Warn("teardown: dereg", "err", err)
			continue // leave its view mapped: the engine may still reach it
		}
		unix.Munmap(m.view)
	}
	for _, p := range s.pds {
		p.pd.Dealloc()
	}
	for _, c := range s.chans {
		unix.Close(c.fd)
	}
	if s.asyncFD >= 0 {
		unix.Close(s.asyncFD)
		s.asyncFD = -1
	}
	if s.page != nil {
		unix.Munmap(s.page)
	}
	s.rings.close()
	if s.mem >= 0 {
		unix.Close(s.mem)
	}
	if s.helloed {
		s.log.Debug("session closed")
	}
}
