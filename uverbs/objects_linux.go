package uverbs

import (
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// The handlers of the control requests that make, change and free
// objects. Each runs under s.mu and returns the errno the verb returns.

func (s *session) allocPD(body []byte) (any, uint32) {
	if len(body) != 0 {
		return nil, abi.EINVAL
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	pd, err := s.srv.dev.AllocPD()
	if err != nil {
		return nil, errno(err)
	}
	s.pds[h] = &pdObj{h: h, pd: pd}
	return &abi.HandleReply{Handle: h}, 0
}

func (s *session) deallocPD(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	p := s.pds[req.Handle]
	if p == nil {
		return abi.EINVAL
	}
	if err := p.pd.Dealloc(); err != nil {
		return errno(err)
	}
	delete(s.pds, req.Handle)
	return 0
}

// Access flags of ibv_access_flags beyond goroce's.
const (
	accessOnDemand      = 1 << 6
	accessHugeTLB       = 1 << 7
	accessOptionalRange = 0x3ff00000 // IBV_ACCESS_OPTIONAL_RANGE: flags a device may ignore
)

// mrAccess checks a region's access flags: what goroce does not have is
// EOPNOTSUPP (on-demand paging) or ignored, as the kernel ignores them
// (the optional flags, the huge page hint); the engine refuses what it
// cannot grant (FLUSH_PERSISTENT: its memory is not persistent).
func mrAccess(a uint32) (verbs.Access, uint32) {
	a &^= accessOptionalRange | accessHugeTLB
	switch {
	case a&accessOnDemand != 0:
		return 0, abi.EOPNOTSUPP
	case a&^uint32(verbs.LocalWrite|verbs.RemoteAccess|verbs.MWBind|verbs.FlushAccess) != 0:
		return 0, abi.EINVAL
	}
	return verbs.Access(a), 0
}

// mapRegion maps the pages of [addr, addr+n) from the program-memory file
// and returns the mapping and the region's bytes in it.
func (s *session) mapRegion(addr, n uint64) ([]byte, []byte, uint32) {
	if n == 0 || n > s.srv.attr.MaxMRSize || addr+n < addr {
		return nil, nil, abi.EINVAL
	}
	start := addr &^ (pageSize - 1)
	end := (addr + n + pageSize - 1) &^ (pageSize - 1)
	if end > abi.MemFileSize || end < start {
		return nil, nil, abi.EFAULT
	}
	view, err := mapMem(s.mem, int64(start), int64(end-start))
	if err != nil {
		return nil, nil, abi.ENOMEM
	}
	off := addr - start
	return view, view[off : off+n : off+n], 0
}

func (s *session) regMR(body []byte) (any, uint32) {
	var req abi.RegMRReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	p := s.pds[req.PD]
	if p == nil {
		return nil, abi.EINVAL
	}
	access, e := mrAccess(req.Access)
	if e != 0 {
		return nil, e
	}
	if req.Addr%pageSize != req.IOVA%pageSize {
		return nil, abi.EINVAL // as the kernel's uverbs: the iova at the address's offset in its page
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	view, buf, e := s.mapRegion(req.Addr, req.Length)
	if e != 0 {
		return nil, e
	}
	m, err := roce.RegMRIOVA(p.pd, buf, req.IOVA, access)
	if err != nil {
		unix.Munmap(view)
		return nil, errno(err)
	}
	s.mrs[h] = &mrObj{h: h, pd: p, mr: m, view: view, addr: req.Addr, n: req.Length, iova: req.IOVA, access: access}
	return &abi.RegMRReply{Handle: h, LKey: m.LKey(), RKey: m.RKey()}, 0
}

// ibv_rereg_mr's flags.
const (
	reregTranslation = 1 << 0
	reregPD          = 1 << 1
	reregAccess      = 1 << 2
)

// reregMR changes a region by registering its new form and then
// deregistering the old one, so that a refusal leaves the old as it was.
// The keys change, as ibv_rereg_mr allows.
func (s *session) reregMR(body []byte) (any, uint32) {
	var req abi.ReregMRReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	m := s.mrs[req.Handle]
	if m == nil || req.Flags == 0 || req.Flags&^(reregTranslation|reregPD|reregAccess) != 0 {
		return nil, abi.EINVAL
	}
	p, access, addr, n, iova := m.pd, m.access, m.addr, m.n, m.iova
	if req.Flags&reregPD != 0 {
		if p = s.pds[req.PD]; p == nil {
			return nil, abi.EINVAL
		}
	}
	if req.Flags&reregAccess != 0 {
		var e uint32
		if access, e = mrAccess(req.Access); e != 0 {
			return nil, e
		}
	}
	if req.Flags&reregTranslation != 0 {
		addr, n, iova = req.Addr, req.Length, req.IOVA
	}
	view, buf, e := s.mapRegion(addr, n)
	if e != 0 {
		return nil, e
	}
	nm, err := roce.RegMRIOVA(p.pd, buf, iova, access)
	if err != nil {
		unix.Munmap(view)
		return nil, errno(err)
	}
	if err := m.mr.Dereg(); err != nil {
		nm.Dereg()
		unix.Munmap(view)
		return nil, errno(err)
	}
	unix.Munmap(m.view)
	*m = mrObj{h: m.h, pd: p, mr: nm, view: view, addr: addr, n: n, iova: iova, access: access}
	return &abi.RegMRReply{Handle: m.h, LKey: nm.LKey(), RKey: nm.RKey()}, 0
}

func (s *session) deregMR(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	m := s.mrs[req.Handle]
	if m == nil {
		return abi.EINVAL
	}
	if err := m.mr.Dereg(); err != nil {
		return errno(err)
	}
	unix.Munmap(m.view)
	delete(s.mrs, req.Handle)
	return 0
}

func (s *session) allocMW(body []byte) (any, uint32) {
	var req abi.AllocMWReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	p := s.pds[req.PD]
	if p == nil || req.Type != 1 && req.Type != 2 {
		return nil, abi.EINVAL
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	w, err := p.pd.AllocMW(verbs.MWType(req.Type))
	if err != nil {
		return nil, errno(err)
	}
	s.mws[h] = &mwObj{h: h, mw: w}
	return &abi.AllocMWReply{Handle: h, RKey: w.RKey()}, 0
}

func (s *session) deallocMW(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	w := s.mws[req.Handle]
	if w == nil {
		return abi.EINVAL
	}
	if err := w.mw.Dealloc(); err != nil {
		return errno(err)
	}
	delete(s.mws, req.Handle)
	return 0
}

func (s *session) createCompChannel(body []byte, fd int) (any, []int, uint32) {
	var req abi.CreateCompChannelReq
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
	s.chans[h] = &chanObj{h: h, fd: fd}
	return &abi.HandleReply{Handle: h}, nil, 0
}

func (s *session) destroyCompChannel(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	c := s.chans[req.Handle]
	switch {
	case c == nil:
		return abi.EINVAL
	case c.users > 0:
		return abi.EBUSY
	}
	unix.Close(c.fd)
	delete(s.chans, req.Handle)
	return 0
}

func (s *session) createAH(body []byte) (any, uint32) {
	var req abi.CreateAHReq
	if !decode(body, &req) {
		return nil, abi.EINVAL
	}
	p := s.pds[req.PD]
	if p == nil {
		return nil, abi.EINVAL
	}
	attr, e := s.ahAttr(&req.Attr)
	if e != 0 {
		return nil, e
	}
	h, ok := s.handle32()
	if !ok {
		return nil, abi.ENOMEM
	}
	ah, err := p.pd.CreateAH(attr)
	if err != nil {
		return nil, errno(err)
	}
	s.ahs[h] = &ahObj{h: h, ah: ah}
	return &abi.HandleReply{Handle: h}, 0
}

// ahAttr checks an address vector as the kernel does for RoCE: it must
// carry a GRH (RoCE addresses by GID) naming one of the port's GIDs, on
// port 1.
func (s *session) ahAttr(a *abi.AHAttr) (verbs.AHAttr, uint32) {
	if a.IsGlobal == 0 || int(a.SGIDIndex) >= len(s.srv.gids) || a.Port > 1 {
		return verbs.AHAttr{}, abi.EINVAL
	}
	// The source GID and the destination are of one family: the device
	// sends to an IPv6 peer from its IPv6 address, to an IPv4 one from its
	// IPv4 address.
	src := verbs.AddrFromGID(s.srv.gids[a.SGIDIndex].GID)
	if src.Is4() != verbs.AddrFromGID(a.DGID).Is4() {
		return verbs.AHAttr{}, abi.EINVAL
	}
	return verbs.AHAttr{DGID: a.DGID, SGIDIndex: a.SGIDIndex, FlowLabel: a.FlowLabel & 0xFFFFF, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, SL: a.SL, Port: 1}, 0
}

func (s *session) destroyAH(body []byte) uint32 {
	var req abi.HandleReq
	if !decode(body, &req) {
		return abi.EINVAL
	}
	a := s.ahs[req.Handle]
	if a == nil {
		return abi.EINVAL
	}
	if err := a.ah.Destroy(); err != nil {
		return errno(err)
	}
	delete(s.ahs, req.Handle)
	return 0
}
