package uverbs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/uverbs/abi"
	"github.com/goroce/goroce/verbs"
)

// Server serves one device on its control socket. It is safe for
// concurrent use.
type Server struct {
	dev  *roce.Device
	cfg  Config
	log  *slog.Logger
	path string
	ln   *net.UnixListener
	attr abi.DeviceAttr
	gids []abi.GIDEntry
	spin int64 // Config.Spin, resolved, in nanoseconds; 0: none
	// pollSpin has the workers receive from the link while they spin:
	// with one P (GOMAXPROCS=1 when Serve ran) the link's receive
	// goroutine cannot run until a spinning worker gives it that P, and
	// ib_send_lat's typical went from 31-36 us to 167-178 us without;
	// 14-16 us with it.
	pollSpin bool

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
	// The engine's events name QPs by number, CQs and SRQs by the
	// engine's objects: these route them to their session.
	byQPN map[uint32]*qpObj
	byCQ  map[verbs.CQ]*cqObj
	bySRQ map[verbs.SRQ]*srqObj
	cm    *cm.Agent // the connection manager, from the first rdma_cm id on
	// lingering are the listeners of destroyed listening ids (linger),
	// by address.
	lingering map[netip.AddrPort]*listenRec

	done chan struct{}
	wg   sync.WaitGroup
}

// Serve starts serving dev to other processes on the control socket
// Config.Dir/Config.Name.sock, until Close. dev must be an untraced
// device that nothing else uses for verbs while it is served (package cm
// may share it); Close leaves it open.
func Serve(dev *roce.Device, cfg *Config) (*Server, error) {
	if dev == nil {
		return nil, fmt.Errorf("uverbs: %w: Serve needs a device: open one with roce.Open", verbs.ErrNil)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Name == "" {
		c.Name = "goroce0"
	}
	if err := checkName(c.Name); err != nil {
		return nil, err
	}
	if c.Dir == "" {
		c.Dir = SocketDir()
	}
	if c.Mode == 0 {
		c.Mode = 0o600
	}
	if c.Mode&^0o666 != 0 || c.Mode&0o600 != 0o600 {
		return nil, fmt.Errorf("uverbs: %w: socket mode %#o: want read and write for the owner (0600), "+
			"and for the group or others only if they may use the device (0660, 0666)", verbs.ErrInvalidAttr, c.Mode)
	}
	if len(c.GIDs) == 0 {
		c.GIDs = rxeTable(dev.GIDs())
	}
	if len(c.GIDs) > abi.MaxGIDs {
		return nil, fmt.Errorf("uverbs: %w: %d GIDs: at most %d", verbs.ErrInvalidAttr, len(c.GIDs), abi.MaxGIDs)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{dev: dev, cfg: c, log: c.Logger, sessions: make(map[*session]struct{}),
		byQPN: make(map[uint32]*qpObj), byCQ: make(map[verbs.CQ]*cqObj), bySRQ: make(map[verbs.SRQ]*srqObj),
		lingering: make(map[netip.AddrPort]*listenRec),
		done:      make(chan struct{})}
	switch {
	case c.Spin == 0:
		s.spin = int64(DefaultSpin)
	case c.Spin > 0:
		s.spin = int64(c.Spin)
	}
	s.pollSpin = runtime.GOMAXPROCS(0) == 1
	s.attr = deviceAttr(c.Name, dev)
	for _, a := range c.GIDs {
		s.gids = append(s.gids, abi.GIDEntry{GID: verbs.GIDFromAddr(a), Type: abi.GIDTypeRoCEv2, Ifindex: uint32(c.Ifindex)})
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	s.wg.Add(2)
	go s.accept()
	go s.events()
	s.log.Info("device serving", "name", c.Name, "socket", s.path, "addr", dev.Addr())
	return s, nil
}

// rxeTable lays out a device's addresses as rxe lays out its GID table,
// so that the indices programs and scripts written for rxe0 name (-g 1,
// -x 1 for IPv4, 2 for IPv6, rdma-lib's index 1) name the same addresses
// here: index 1 the IPv4 address, then the IPv6 one; index 0, which rxe
// gives the interface's link-local IPv6 address (one goroce's device does
// not send from), holds the first of them again.
func rxeTable(addrs []netip.Addr) []netip.Addr {
	var v4, v6 netip.Addr
	for _, a := range addrs {
		switch a = a.Unmap(); {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	var t []netip.Addr
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			t = append(t, a)
		}
	}
	if len(t) == 0 {
		return addrs
	}
	return append([]netip.Addr{t[0]}, t...)
}

// Path returns the control socket's path.
func (s *Server) Path() string {
	if s == nil {
		return ""
	}
	return s.path
}

// Sessions returns how many programs have the device open.
func (s *Server) Sessions() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Listening returns the addresses and rdma_cm ports the programs on the
// device listen on (rdma_listen, and rlisten), sorted.
func (s *Server) Listening() []netip.AddrPort {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	var l []netip.AddrPort
	for _, ss := range sessions {
		ss.mu.Lock()
		for _, id := range ss.cmIDs {
			if id.listening && !id.destroyed {
				l = append(l, id.src)
			}
		}
		ss.mu.Unlock()
		l = append(l, ss.rs.listening()...)
	}
	slices.SortFunc(l, netip.AddrPort.Compare)
	return l
}

// listen makes the socket directory, checks it, and listens.
func (s *Server) listen() error {
	dir := s.cfg.Dir
	perm := os.FileMode(0o700)
	if s.cfg.Mode&0o060 != 0 {
		perm |= 0o050
	}
	if s.cfg.Mode&0o006 != 0 {
		perm |= 0o005
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("uverbs: socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("uverbs: socket directory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrDir, dir)
	case st != nil && int(st.Uid) != os.Getuid():
		return fmt.Errorf("%w: %s belongs to uid %d, not to this user (%d): choose another with GOROCE_DIR "+
			"or --dir", ErrDir, dir, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: others may write to %s (mode %#o): make it 0700", ErrDir, dir, fi.Mode().Perm())
	}
	if fi.Mode().Perm() != perm {
		if err := os.Chmod(dir, perm); err != nil {
			return fmt.Errorf("uverbs: socket directory: %w", err)
		}
	}
	path := filepath.Join(dir, s.cfg.Name+".sock")
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return fmt.Errorf("%w: a device already serves %s (stop it, or choose another --name)", ErrInUse, path)
	}
	os.Remove(path) // a socket left by a device that died
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("uverbs: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, s.cfg.Mode); err != nil {
		ln.Close()
		return fmt.Errorf("uverbs: socket mode: %w", err)
	}
	s.ln, s.path = ln, path
	return nil
}

// accept takes programs' connections until Close.
func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("accept", "err", err)
			}
			return
		}
		ss, err := newSession(s, c)
		if err != nil {
			s.log.Debug("session refused", "err", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			ss.conn.Close()
			continue
		}
		s.sessions[ss] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			ss.serve()
			s.mu.Lock()
			delete(s.sessions, ss)
			s.mu.Unlock()
		}()
	}
}

// events routes the engine's asynchronous events to the sessions whose
// objects they are about.
func (s *Server) events() {
	defer s.wg.Done()
	ch := s.dev.Events()
	for {
		select {
		case <-s.done:
			return
		case e := <-ch:
			s.route(e)
		}
	}
}

func (s *Server) route(e verbs.Event) {
	var ss *session
	var h uint32
	s.mu.Lock()
	switch {
	case e.CQ != nil:
		if c := s.byCQ[e.CQ]; c != nil {
			ss, h = c.s, c.h
		}
	case e.SRQ != nil:
		if r := s.bySRQ[e.SRQ]; r != nil {
			ss, h = r.s, r.h
		}
	default:
		if q := s.byQPN[e.QPN]; q != nil {
			ss, h = q.s, q.h
		}
	}
	s.mu.Unlock()
	if ss != nil {
		ss.asyncEvent(eventType(e.Type), h)
	}
}

// eventType returns ibv_event_type's number for an engine event.
func eventType(t verbs.EventType) uint32 {
	switch t {
	case verbs.EventCQErr:
		return abi.EventCQErr
	case verbs.EventQPFatal:
		return abi.EventQPFatal
	case verbs.EventQPReqErr:
		return abi.EventQPReqErr
	case verbs.EventQPAccessErr:
		return abi.EventQPAccessErr
	case verbs.EventCommEstablished:
		return abi.EventCommEst
	case verbs.EventSQDrained:
		return abi.EventSQDrained
	case verbs.EventLastWQEReached:
		return abi.EventQPLastWQE
	case verbs.EventSRQLimitReached:
		return abi.EventSRQLimitReached
	}
	return abi.EventDeviceFatal
}

// Close stops serving: it closes the socket, ends every session (as if
// each program had exited: their QPs destroyed, their regions
// deregistered) and waits for its goroutines. It leaves the device open.
// Closing again returns an error matching net.ErrClosed.
func (s *Server) Close() error {
	if s == nil {
		return fmt.Errorf("uverbs: %w: Close of a nil *Server", verbs.ErrNil)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return fmt.Errorf("uverbs: Close of a closed server: %w", net.ErrClosed)
	}
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	close(s.done)
	for _, ss := range sessions {
		ss.conn.Close()
	}
	s.wg.Wait()
	s.mu.Lock()
	a := s.cm
	s.cm = nil
	s.mu.Unlock()
	if a != nil {
		a.Close()
	}
	return err
}

// deviceAttr returns what ibv_query_device reports of dev.
func deviceAttr(name string, dev *roce.Device) abi.DeviceAttr {
	h := fnv.New32a()
	h.Write([]byte(name))
	a := dev.Addr().As16()
	h.Write(a[:])
	v := h.Sum32()
	// A locally administered EUI-64 (02:67:6f:ff:fe and 24 bits of the
	// name and address), as rxe makes its GUID from the MAC.
	guid := [8]byte{0x02, 0x67, 0x6f, 0xff, 0xfe, byte(v >> 16), byte(v >> 8), byte(v)}
	g := uint64(guid[0]) | uint64(guid[1])<<8 | uint64(guid[2])<<16 | uint64(guid[3])<<24 |
		uint64(guid[4])<<32 | uint64(guid[5])<<40 | uint64(guid[6])<<48 | uint64(guid[7])<<56
	return abi.DeviceAttr{
		Name: nameBytes(name), FwVer: nameBytes("goroce 1"), NodeGUID: g, SysImageGUID: g,
		MaxMRSize: 1 << 46, PageSizeCap: 0xfffff000, CapFlags: deviceCapFlags | uint64(dev.Caps()),
		VendorID: vendorID, VendorPartID: 1, HwVer: 1,
		MaxQP: roce.DefaultMaxQPs, MaxQPWR: roce.MaxWR, MaxSGE: roce.MaxSGE, MaxSGERd: roce.MaxSGE,
		MaxCQ: 1 << 16, MaxCQE: roce.MaxCQE, MaxMR: 1 << 18, MaxPD: 1 << 16,
		MaxQPRdAtom: roce.MaxRDAtomic, MaxResRdAtom: roce.MaxRDAtomic * 1024, MaxQPInitRd: roce.MaxRDAtomic,
		AtomicCap: 1, // IBV_ATOMIC_HCA: atomic with respect to the device's other atomics
		MaxMW:     1 << 16, MaxAH: 1 << 16, MaxSRQ: 1 << 16, MaxSRQWR: roce.MaxWR, MaxSRQSGE: roce.MaxSGE,
		MaxInline: roce.MaxInlineData, MaxPkeys: 1, LocalAckDly: 15, PortCnt: 1,
		MaxMcastGrp: roce.MaxMcastGroups, MaxMcastQPAttach: roce.MaxMcastQPAttach, MaxTotalMcastQPAttach: roce.MaxTotalMcastQPAttach,
	}
}

// vendorID is "gor" in ASCII, as siw's is "bmt": no provider library
// claims it, so programs such as perftest take their generic paths.
const vendorID = 0x676f72

// deviceCapFlags are the ibv_device_cap_flags goroce has, those rxe
// reports that the engine does too: the bad P_Key and Q_Key counters,
// the system image GUID, the port's active event, RNR NAK generation,
// solicited-only CQ notification, memory windows of both types and the
// memory management extensions (LOCAL_INV, SEND with invalidate).
const deviceCapFlags = 1<<1 | // IBV_DEVICE_BAD_PKEY_CNTR
	1<<2 | // IBV_DEVICE_BAD_QKEY_CNTR
	1<<10 | // IBV_DEVICE_PORT_ACTIVE_EVENT
	1<<11 | // IBV_DEVICE_SYS_IMAGE_GUID
	1<<12 | // IBV_DEVICE_RC_RNR_NAK_GEN
	1<<14 | // IBV_DEVICE_N_NOTIFY_CQ
	1<<17 | // IBV_DEVICE_MEM_WINDOW
	1<<21 | // IBV_DEVICE_MEM_MGT_EXTENSIONS
	1<<24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B

// portAttr returns what ibv_query_port reports of dev's one port.
func portAttr(dev *roce.Device, gids int) abi.PortAttr {
	mtu := dev.ActiveMTU()
	if !mtu.Valid() {
		mtu = bth.MTU1024
	}
	return abi.PortAttr{
		State: 4 /* ACTIVE */, MaxMTU: uint32(bth.MTU4096), ActiveMTU: uint32(mtu), GIDTblLen: uint32(gids),
		CapFlags: 1<<16 | 1<<26,                                                             // IBV_PORT_CM_SUP, IBV_PORT_IP_BASED_GIDS
		MaxMsgSz: verbs.MaxMsgSize, PkeyTblLen: 1, ActiveWidth: 2 /* 4X */, ActiveSpeed: 32, /* 10 Gb/s */
		PhysState: 5 /* LINK_UP */, LinkLayer: 2 /* ETHERNET */, MaxVLNum: 1,
	}
}
