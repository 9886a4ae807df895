package oob

import (
	"context"
	"errors"
	"net"
	"strconv"

	"github.com/goroce/goroce/bth"
)

// Role is the side of a connection: the client connects, the server
// accepts. A Role is a plain value.
type Role uint8

// Roles. In every perftest exchange the client writes first and the server
// reads first.
const (
	Client Role = iota + 1
	Server
)

// String returns "client" or "server".
func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Perftest is one side of perftest's TCP exchange on a connection, a method
// per step (see the package documentation for the order each tool uses).
// ExchangeVersions comes first: the peer's version decides the layout of
// later steps. A Perftest is not safe for concurrent use; it does not close
// its connection.
type Perftest struct {
	s       stream
	role    Role
	compat  Compat
	version bool // ExchangeVersions has succeeded
	first   PerftestDest
	hasDest bool
	buf     [PerftestDestLen]byte
	rbuf    [PerftestDestLen]byte
}

// NewPerftest returns a session for conn in the given role.
func NewPerftest(conn net.Conn, role Role, cfg *Config) *Perftest {
	return &Perftest{s: stream{conn: conn, cfg: cfg}, role: role}
}

// Peer returns what the peer's version implies; the zero Compat before
// ExchangeVersions.
func (p *Perftest) Peer() Compat {
	if p == nil {
		return Compat{}
	}
	return p.compat
}

// nilPerftest reports a step called on a nil *Perftest.
func nilPerftest(step string) error {
	return invalid("perftest "+step, "nil *Perftest: use one from NewPerftest")
}

// exchange moves one message each way in perftest's order: the client
// writes out then reads into in, the server reads then writes.
func (p *Perftest) exchange(ctx context.Context, step, what string, out, in []byte) error {
	step = "perftest " + p.role.String() + " " + step
	switch p.role {
	case Client:
		if err := p.s.writeMsg(ctx, step, what, out); err != nil {
			return err
		}
		return p.s.readMsg(ctx, step, what, in)
	case Server:
		if err := p.s.readMsg(ctx, step, what, in); err != nil {
			return err
		}
		return p.s.writeMsg(ctx, step, what, out)
	}
	return invalid(step, "role "+p.role.String()+" is neither Client nor Server")
}

func (p *Perftest) needVersion(step string) error {
	if p == nil {
		return nilPerftest(step)
	}
	if !p.version {
		return invalid("perftest "+step, "called before ExchangeVersions")
	}
	return nil
}

// ExchangeVersions swaps version strings (Config.PerftestVersion, "6.06" by
// default) and returns what the peer's implies. A peer older than
// Config.MinPeerVersion (5.70 by default) gives ErrVersion after the
// exchange, as perftest exits then.
func (p *Perftest) ExchangeVersions(ctx context.Context) (Compat, error) {
	const step = "exchange_versions"
	if p == nil {
		return Compat{}, nilPerftest(step)
	}
	cfg := p.s.cfg
	v := PerftestVersion
	minimum := MinPeerVersion
	if cfg != nil {
		if cfg.PerftestVersion != "" {
			v = cfg.PerftestVersion
		}
		if cfg.MinPeerVersion != 0 {
			minimum = cfg.MinPeerVersion
		}
	}
	var out, in [VersionLen]byte
	if err := EncodeVersion(out[:], v); err != nil {
		return Compat{}, err
	}
	if err := p.exchange(ctx, step, "version", out[:], in[:]); err != nil {
		return Compat{}, err
	}
	peer, err := ParseVersion(in[:])
	if err != nil {
		return Compat{}, restep(err, "perftest "+p.role.String()+" "+step)
	}
	c := CompatFor(peer)
	if c.Number < minimum {
		return c, &Error{
			Step:     "perftest " + p.role.String() + " " + step,
			Expected: "peer version " + strconv.FormatFloat(minimum, 'f', -1, 64) + " or later",
			Got:      strconv.Quote(peer),
			Err:      ErrVersion,
		}
	}
	p.compat, p.version = c, true
	p.s.cfg.logger().Debug("oob: perftest versions", "role", p.role, "local", v, "peer", peer)
	return c, nil
}

// CheckSysData swaps cycle_buffer and cache_line_size and returns what
// both sides settle on, the larger of each. With a peer older than 5.32
// nothing is exchanged and local is returned.
func (p *Perftest) CheckSysData(ctx context.Context, local SysData) (SysData, error) {
	const step = "check_sys_data"
	if err := p.needVersion(step); err != nil {
		return SysData{}, err
	}
	if !p.compat.SysData {
		return local, nil
	}
	var out, in [2 * SysDataLen]byte
	if err := local.Encode(out[:]); err != nil {
		return SysData{}, err
	}
	if err := p.exchange(ctx, step, "cycle_buffer", out[:4], in[:4]); err != nil {
		return SysData{}, err
	}
	if err := p.exchange(ctx, step, "cache_line_size", out[4:], in[4:]); err != nil {
		return SysData{}, err
	}
	remote, err := ParseSysData(in[:])
	if err != nil {
		return SysData{}, err
	}
	agreed := local.Agree(remote)
	p.s.cfg.logger().Debug("oob: perftest sys data", "role", p.role,
		"cycle_buffer", agreed.CycleBuffer, "cache_line_size", agreed.CacheLineSize)
	return agreed, nil
}

// CheckMTU swaps path MTUs and returns the one both sides use: the
// smaller. With a peer older than 5.1 nothing is exchanged and local is
// returned.
func (p *Perftest) CheckMTU(ctx context.Context, local bth.MTU) (bth.MTU, error) {
	const step = "check_mtu"
	if err := p.needVersion(step); err != nil {
		return 0, err
	}
	if !local.Valid() {
		return 0, invalid("perftest "+step, "local MTU "+local.String()+" is not an ibv_mtu value")
	}
	n := p.compat.MTULen
	if n == 0 {
		return local, nil
	}
	var out, in [MTULenOld]byte
	if err := EncodeMTU(out[:n], local); err != nil {
		return 0, err
	}
	if err := p.exchange(ctx, step, "MTU", out[:n], in[:n]); err != nil {
		return 0, err
	}
	remote, err := ParseMTU(in[:n])
	if err != nil {
		return 0, restep(err, "perftest "+p.role.String()+" "+step)
	}
	agreed := AgreeMTU(local, remote)
	p.s.cfg.logger().Debug("oob: perftest MTU", "role", p.role, "local", local, "peer", remote, "agreed", agreed)
	return agreed, nil
}

// HandShake swaps one 108-byte per-QP entry (ctx_hand_shake) and returns
// the peer's. The first HandShake's local entry is also what Barrier and
// CloseConnection send later, unless ExchangeDests sets another.
func (p *Perftest) HandShake(ctx context.Context, local PerftestDest) (PerftestDest, error) {
	return p.handShake(ctx, "hand_shake", local)
}

func (p *Perftest) handShake(ctx context.Context, step string, local PerftestDest) (PerftestDest, error) {
	if err := p.needVersion(step); err != nil {
		return PerftestDest{}, err
	}
	if err := local.Encode(p.buf[:]); err != nil {
		return PerftestDest{}, err
	}
	if err := p.exchange(ctx, step, "handshake", p.buf[:], p.rbuf[:]); err != nil {
		return PerftestDest{}, err
	}
	remote, err := ParsePerftestDest(p.rbuf[:])
	if err != nil {
		return PerftestDest{}, restep(err, "perftest "+p.role.String()+" "+step)
	}
	if !p.hasDest {
		p.first, p.hasDest = local, true
	}
	p.s.cfg.logger().Debug("oob: perftest handshake", "role", p.role, "step", step,
		"qpn", local.QPN, "psn", local.PSN, "peer_qpn", remote.QPN, "peer_psn", remote.PSN)
	return remote, nil
}

// ExchangeDests runs one HandShake per local entry (one per QP, in order)
// and returns the peer's entries. local[0] becomes the entry Barrier and
// CloseConnection send.
func (p *Perftest) ExchangeDests(ctx context.Context, local []PerftestDest) ([]PerftestDest, error) {
	if p == nil {
		return nil, nilPerftest("exchange dests")
	}
	if len(local) == 0 {
		return nil, invalid("perftest exchange dests", "no local entries")
	}
	remote := make([]PerftestDest, len(local))
	for i := range local {
		step := "hand_shake (QP " + strconv.Itoa(i) + " of " + strconv.Itoa(len(local)) + ")"
		r, err := p.handShake(ctx, step, local[i])
		if err != nil {
			return nil, err
		}
		remote[i] = r
	}
	p.first, p.hasDest = local[0], true
	return remote, nil
}

// Barrier is perftest's synchronisation point: one more handshake with the
// first local entry, whose answer only means that the peer got there too.
func (p *Perftest) Barrier(ctx context.Context) error {
	return p.barrier(ctx, "barrier")
}

func (p *Perftest) barrier(ctx context.Context, step string) error {
	if p == nil {
		return nilPerftest(step)
	}
	if !p.hasDest {
		return invalid("perftest "+step, "called before any HandShake or ExchangeDests")
	}
	_, err := p.handShake(ctx, step, p.first)
	return err
}

// ExchangeBWReports swaps the BW reports (xchg_bw_reports), one message
// per field, and returns the peer's. Config.ReportPerPort adds the
// per-port fields.
func (p *Perftest) ExchangeBWReports(ctx context.Context, local BWReport) (BWReport, error) {
	const step = "xchg_bw_reports"
	if err := p.needVersion(step); err != nil {
		return BWReport{}, err
	}
	perPort := p.s.cfg != nil && p.s.cfg.ReportPerPort
	var out, in [9 * ReportFieldLen]byte
	n, err := local.Encode(out[:], p.compat, perPort)
	if err != nil {
		return BWReport{}, err
	}
	names := [...]string{"size", "iters", "bw_peak", "bw_avg", "msgRate_avg",
		"bw_avg_p1", "msgRate_avg_p1", "bw_avg_p2", "msgRate_avg_p2"}
	off := 0
	for i, size := range BWReportFields(p.compat, perPort) {
		if err := p.exchange(ctx, step, "report field "+names[i], out[off:off+size], in[off:off+size]); err != nil {
			return BWReport{}, err
		}
		off += size
	}
	remote, err := ParseBWReport(in[:n], p.compat, perPort)
	if err != nil {
		return BWReport{}, err
	}
	p.s.cfg.logger().Debug("oob: perftest BW reports", "role", p.role, "peer_size", remote.Size, "peer_iters", remote.Iters)
	return remote, nil
}

// CloseConnection ends the exchange as ctx_close_connection does: a
// handshake with the first local entry, then "done\0" each way. perftest
// up to 23.07 (version string 6.16; Debian 12's 4.5-0.17 announces 6.06)
// writes its "done\0" without reading the peer's and closes; from
// 23.10 on (6.17; Debian 13's 25.01 announces 6.24) it closes right after
// the handshake, without one. This side writes its "done\0" and reads the
// peer's (in the usual order: client writes first, server reads first),
// so that a peer that goes away early is noticed and an unbuffered
// transport cannot deadlock; and it takes the end of the connection in
// place of the peer's "done\0", as long as not a byte of it came: the
// handshake before it already showed that the peer got to the end. A
// write of "done\0" that a closed peer refuses is no error either. It
// does not close the connection.
func (p *Perftest) CloseConnection(ctx context.Context) error {
	if err := p.barrier(ctx, "close_connection handshake"); err != nil {
		return err
	}
	step := "perftest " + p.role.String() + " close_connection"
	const what = `"done\0"`
	var done [DoneLen]byte
	if p.role == Client {
		if err := p.s.writeMsg(ctx, step, what, []byte(Done)); err != nil {
			if peerClosed(err) {
				return p.closedWithoutDone("write")
			}
			return err
		}
	}
	if n, err := p.s.readMsgN(ctx, step, what, done[:]); err != nil {
		if n == 0 && peerClosed(err) {
			return p.closedWithoutDone("read")
		}
		return err
	}
	if err := ParseDone(done[:]); err != nil {
		return restep(err, step)
	}
	if p.role == Server {
		// The client has said "done\0" and may be gone already.
		if err := p.s.writeMsg(ctx, step, what, []byte(Done)); err != nil && !peerClosed(err) {
			return err
		}
	}
	p.s.cfg.logger().Debug("oob: perftest closed", "role", p.role)
	return nil
}

// closedWithoutDone notes a peer that closed after the closing handshake
// without a "done\0", as perftest 23.10 and later do.
func (p *Perftest) closedWithoutDone(op string) error {
	p.s.cfg.logger().Debug("oob: perftest closed; the peer sent no done (perftest 23.10 or later)", "role", p.role, "at", op)
	return nil
}

// peerClosed reports whether err says that the peer ended the connection
// (end of stream, reset, a write it refused), not this side.
func peerClosed(err error) bool {
	return errors.Is(err, ErrClosed) && !errors.Is(err, net.ErrClosed)
}
