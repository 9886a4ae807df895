package oob

import (
	"context"
	"net"
	"strconv"
)

// Sizes and counts of the pingpong exchange.
const (
	// DestLen is the size of one pingpong entry on the wire:
	// "%04x:%06x:%06x:%032x" and a NUL.
	DestLen = 52
	// DoneLen is the size of the closing message, "done" and a NUL.
	DoneLen = 5
	// SRQEntries is how many entries ibv_srq_pingpong sends per side
	// (MAX_QP), whatever its -q; the unused ones are zero entries.
	SRQEntries = 256
)

// Done is the closing message of both protocols.
const Done = "done\x00"

// maxQPN is the largest 24-bit QPN or PSN.
const maxQPN = 1<<24 - 1

const expectedDest = `"%04x:%06x:%06x:%032x\0" (lid:qpn:psn:gid, 52 bytes)`

// Dest is one pingpong entry: the address of a QP as the rdma-core examples
// announce it. GID holds the 16 raw bytes; for RoCEv2 it is the IPv4-mapped
// or IPv6 address of the QP (see verbs.GIDFromAddr). A Dest is a plain value.
type Dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

// Encode writes d's DestLen-byte wire form to b[:DestLen]. It fails with
// ErrInvalid if b is shorter or if QPN or PSN does not fit in 24 bits.
func (d *Dest) Encode(b []byte) error {
	if d == nil {
		return invalid("encode pingpong entry", "nil *Dest")
	}
	if len(b) < DestLen {
		return invalid("encode pingpong entry", "buffer of "+strconv.Itoa(len(b))+" bytes, need 52")
	}
	if d.QPN > maxQPN || d.PSN > maxQPN {
		return invalid("encode pingpong entry", "QPN 0x"+strconv.FormatUint(uint64(d.QPN), 16)+
			" or PSN 0x"+strconv.FormatUint(uint64(d.PSN), 16)+" wider than 24 bits")
	}
	putHex(b[0:4], uint64(d.LID))
	b[4] = ':'
	putHex(b[5:11], uint64(d.QPN))
	b[11] = ':'
	putHex(b[12:18], uint64(d.PSN))
	b[18] = ':'
	for i, g := range d.GID {
		b[19+2*i] = hexDigits[g>>4]
		b[20+2*i] = hexDigits[g&0xF]
	}
	b[51] = 0
	return nil
}

// ParseDest parses one DestLen-byte pingpong entry. Hex digits may be of
// either case; everything else must be exactly as Encode writes it. A bad
// entry gives an *Error wrapping ErrFormat.
func ParseDest(b []byte) (Dest, error) {
	const step = "parse pingpong entry"
	if len(b) != DestLen {
		return Dest{}, formatError(step, expectedDest, b, strconv.Itoa(len(b))+" bytes")
	}
	for _, i := range [...]int{4, 11, 18} {
		if b[i] != ':' {
			return Dest{}, formatError(step, expectedDest, b, "no ':' at offset "+strconv.Itoa(i))
		}
	}
	if b[51] != 0 {
		return Dest{}, formatError(step, expectedDest, b, "no NUL at offset 51")
	}
	var d Dest
	for _, f := range [...]struct {
		off, n int
		v      *uint32
	}{{5, 6, &d.QPN}, {12, 6, &d.PSN}} {
		v, bad, ok := getHex(b[f.off : f.off+f.n])
		if !ok {
			return Dest{}, formatError(step, expectedDest, b, "not a hex digit at offset "+strconv.Itoa(f.off+bad))
		}
		*f.v = uint32(v)
	}
	lid, bad, ok := getHex(b[0:4])
	if !ok {
		return Dest{}, formatError(step, expectedDest, b, "not a hex digit at offset "+strconv.Itoa(bad))
	}
	d.LID = uint16(lid)
	for i := range d.GID {
		v, bad, ok := getHex(b[19+2*i : 21+2*i])
		if !ok {
			return Dest{}, formatError(step, expectedDest, b, "not a hex digit at offset "+strconv.Itoa(19+2*i+bad))
		}
		d.GID[i] = byte(v)
	}
	return d, nil
}

// ParseDone checks the closing message.
func ParseDone(b []byte) error {
	if string(b) != Done {
		return formatError("parse done", `"done\0" (5 bytes)`, b, "")
	}
	return nil
}

// encodeDests writes entries wire entries: local, then zero entries.
func encodeDests(step string, local []Dest, entries int) ([]byte, error) {
	if entries < 1 || entries > SRQEntries {
		return nil, invalid(step, strconv.Itoa(entries)+" entries per side, want 1 to 256")
	}
	if len(local) > entries {
		return nil, invalid(step, strconv.Itoa(len(local))+" local entries for "+strconv.Itoa(entries)+" on the wire")
	}
	buf := make([]byte, entries*DestLen)
	var zero Dest
	for i := range entries {
		d := &zero
		if i < len(local) {
			d = &local[i]
		}
		if err := d.Encode(buf[i*DestLen:]); err != nil {
			return nil, restep(err, step+": entry "+strconv.Itoa(i))
		}
	}
	return buf, nil
}

func entriesWhat(n int) string {
	if n == 1 {
		return "1 pingpong entry"
	}
	return strconv.Itoa(n) + " pingpong entries"
}

// readDests reads and parses entries wire entries.
func readDests(ctx context.Context, s *stream, step string, entries int) ([]Dest, error) {
	buf := make([]byte, entries*DestLen)
	if err := s.readMsg(ctx, step, entriesWhat(entries), buf); err != nil {
		return nil, err
	}
	dests := make([]Dest, entries)
	for i := range dests {
		d, err := ParseDest(buf[i*DestLen : (i+1)*DestLen])
		if err != nil {
			return nil, restep(err, step+": entry "+strconv.Itoa(i)+" of "+strconv.Itoa(entries))
		}
		dests[i] = d
	}
	return dests, nil
}

// PingpongClient runs the client side of the rdma-core examples' exchange
// on conn: it writes the local entries (padded with zero entries to
// entries: 1 for rc, uc and ud, SRQEntries for srq), reads the server's
// entries, and writes "done\0". It returns all the server's entries. It
// does not close conn.
//
// The server has moved its QP to RTR before answering, so the caller may
// post sends as soon as this returns (the examples' client sends first).
func PingpongClient(ctx context.Context, conn net.Conn, local []Dest, entries int, cfg *Config) ([]Dest, error) {
	const step = "pingpong client"
	buf, err := encodeDests(step, local, entries)
	if err != nil {
		return nil, err
	}
	s := stream{conn: conn, cfg: cfg}
	log := cfg.logger()
	if err := s.writeMsg(ctx, step, entriesWhat(entries), buf); err != nil {
		return nil, err
	}
	remote, err := readDests(ctx, &s, step, entries)
	if err != nil {
		return nil, err
	}
	if err := s.writeMsg(ctx, step, `"done\0"`, []byte(Done)); err != nil {
		return nil, err
	}
	log.Debug("oob: pingpong client done", "entries", entries, "qpn", remote[0].QPN, "psn", remote[0].PSN)
	return remote, nil
}

// PingpongServer runs the server side of the rdma-core examples' exchange
// on an accepted connection, in two steps: ReadDests returns the client's
// entries, the caller brings its QPs to RTR with them, then Reply sends the
// local entries and waits for the client's "done\0". It is not safe for
// concurrent use.
type PingpongServer struct {
	s       stream
	entries int
	read    bool
}

// NewPingpongServer returns a server for conn exchanging entries entries
// per side (1 for rc, uc and ud; SRQEntries for srq). The server does not
// close conn.
func NewPingpongServer(conn net.Conn, entries int, cfg *Config) *PingpongServer {
	return &PingpongServer{s: stream{conn: conn, cfg: cfg}, entries: entries}
}

// ReadDests reads the client's entries.
func (p *PingpongServer) ReadDests(ctx context.Context) ([]Dest, error) {
	const step = "pingpong server"
	if p == nil {
		return nil, invalid(step, "nil *PingpongServer: use one from NewPingpongServer")
	}
	if p.entries < 1 || p.entries > SRQEntries {
		return nil, invalid(step, strconv.Itoa(p.entries)+" entries per side, want 1 to 256")
	}
	if p.read {
		return nil, invalid(step, "ReadDests called twice")
	}
	remote, err := readDests(ctx, &p.s, step, p.entries)
	if err != nil {
		return nil, err
	}
	p.read = true
	p.s.cfg.logger().Debug("oob: pingpong server read client", "entries", p.entries, "qpn", remote[0].QPN, "psn", remote[0].PSN)
	return remote, nil
}

// Reply writes the local entries (padded with zero entries) and waits for
// the client's "done\0". Call it after ReadDests, once the local QPs are
// ready to receive.
func (p *PingpongServer) Reply(ctx context.Context, local []Dest) error {
	const step = "pingpong server"
	if p == nil {
		return invalid(step, "nil *PingpongServer: use one from NewPingpongServer")
	}
	if !p.read {
		return invalid(step, "Reply called before ReadDests")
	}
	buf, err := encodeDests(step, local, p.entries)
	if err != nil {
		return err
	}
	if err := p.s.writeMsg(ctx, step, entriesWhat(p.entries), buf); err != nil {
		return err
	}
	var done [DoneLen]byte
	if err := p.s.readMsg(ctx, step, `"done\0"`, done[:]); err != nil {
		return err
	}
	if err := ParseDone(done[:]); err != nil {
		return restep(err, step+": closing message")
	}
	p.s.cfg.logger().Debug("oob: pingpong server done")
	return nil
}
