package oob

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// captureMessages returns every message of the given kind in the pingpong
// and perftest captures, from both sides.
func captureMessages(tb testing.TB, kind msgKind) [][]byte {
	tb.Helper()
	var out [][]byte
	add := func(c *oobCapture, steps []step) {
		for i, m := range c.split(tb, steps) {
			if steps[i].kind == kind {
				out = append(out, m)
			}
		}
	}
	for name, plan := range perftestPlans {
		add(loadOOBCapture(tb, name), perftestSteps(plan))
	}
	for name, entries := range pingpongEntries {
		add(loadOOBCapture(tb, name), pingpongSteps(entries))
	}
	return out
}

// lowerHex lowercases the hex letters of a text message, which is what an
// encoder writes back.
func lowerHex(b []byte) []byte { return bytes.ToLower(b) }

// isSentinel reports whether err wraps one of the package's sentinels.
func isSentinel(err error) bool {
	for _, s := range []error{ErrFormat, ErrClosed, ErrTimeout, ErrVersion, ErrIO, ErrInvalid} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func FuzzParseDest(f *testing.F) {
	for _, m := range captureMessages(f, kEntries) {
		for i := 0; i < len(m) && i < 3*DestLen; i += DestLen {
			f.Add(m[i : i+DestLen])
		}
	}
	f.Add([]byte("0000:00000G:000000:00000000000000000000000000000000\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		var out [DestLen]byte
		if err := d.Encode(out[:]); err != nil {
			t.Fatalf("re-encode %+v: %v", d, err)
		}
		if !bytes.Equal(out[:], lowerHex(b)) {
			t.Fatalf("parse then encode: %q became %q", b, out)
		}
	})
}

func FuzzParsePerftestDest(f *testing.F) {
	for _, m := range captureMessages(f, kDest) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestDest(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		var out [PerftestDestLen]byte
		if err := d.Encode(out[:]); err != nil {
			t.Fatalf("re-encode %+v: %v", d, err)
		}
		if !bytes.Equal(out[:], lowerHex(b)) {
			t.Fatalf("parse then encode: %q became %q", b, out)
		}
	})
}

func FuzzParsePerftestDestCM(f *testing.F) {
	for _, m := range cmHandshakes(f) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, gidIndex, err := ParsePerftestDestCM(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		var out [PerftestDestCMLen]byte
		if err := d.EncodeCM(out[:], gidIndex); err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(b)
		clear(want[20:24]) // the padding, which encoders zero
		if !bytes.Equal(out[:], want) {
			t.Fatalf("parse then encode: % x became % x", b, out)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	for _, m := range captureMessages(f, kVersion) {
		f.Add(m)
	}
	f.Add([]byte("5.33\x00garbage\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseVersion(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		var out [VersionLen]byte
		if err := EncodeVersion(out[:], v); err != nil {
			t.Fatalf("re-encode %q: %v", v, err)
		}
		if !bytes.Equal(out[:len(v)+1], b[:len(v)+1]) {
			t.Fatalf("parse then encode: %q became %q", b, out)
		}
		if v2, err := ParseVersion(out[:]); err != nil || v2 != v {
			t.Fatalf("round trip %q: %q, %v", v, v2, err)
		}
		_ = CompatFor(v)
	})
}

func FuzzParseMTU(f *testing.F) {
	for _, m := range captureMessages(f, kMTU) {
		f.Add(m)
	}
	f.Add([]byte("5\x00\xaa\xbb"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMTU(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		if !m.Valid() {
			t.Fatalf("parsed an invalid MTU %v", m)
		}
		out := make([]byte, len(b))
		if err := EncodeMTU(out, m); err != nil || !bytes.Equal(out[:2], b[:2]) {
			t.Fatalf("parse then encode: %q became %q (%v)", b, out, err)
		}
	})
}

func FuzzParseBWReport(f *testing.F) {
	var rep []byte
	for _, m := range captureMessages(f, kReport) {
		rep = append(rep, m...)
	}
	for i := 0; i+40 <= len(rep); i += 40 {
		f.Add(rep[i:i+40], true, false)
	}
	f.Add(rep[:36], false, false)
	f.Add(append(bytes.Clone(rep[:40]), rep[:32]...), true, true)
	f.Fuzz(func(t *testing.T, b []byte, iters64, perPort bool) {
		c := Compat{Iters64: iters64}
		r, err := ParseBWReport(b, c, perPort)
		if err != nil {
			if !errors.Is(err, ErrFormat) || len(b) == BWReportLen(c, perPort) {
				t.Fatalf("error %v for %d bytes", err, len(b))
			}
			return
		}
		out := make([]byte, len(b))
		if n, err := r.Encode(out, c, perPort); err != nil || n != len(b) || !bytes.Equal(out, b) {
			t.Fatalf("parse then encode: % x became % x (%d, %v)", b, out, n, err)
		}
	})
}

// memConn is a net.Conn whose peer's bytes are fixed in advance: reads
// come from r and end with io.EOF, writes are counted and dropped.
type memConn struct {
	r       *bytes.Reader
	written int
}

func (c *memConn) Read(b []byte) (int, error)         { return c.r.Read(b) }
func (c *memConn) Write(b []byte) (int, error)        { c.written += len(b); return len(b), nil }
func (c *memConn) Close() error                       { return nil }
func (c *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(t time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { return nil }

var _ net.Conn = (*memConn)(nil)

// planBytes is how many bytes each side sends in a plan, for a peer c.
func planBytes(plan []op, c Compat, perPort bool) int {
	n := 0
	for _, o := range plan {
		switch o {
		case opVersions:
			n += VersionLen
		case opSys:
			if c.SysData {
				n += 2 * SysDataLen
			}
		case opMTU:
			n += c.MTULen
		case opHandShake, opDests, opBarrier: // one QP
			n += PerftestDestLen
		case opReports:
			n += BWReportLen(c, perPort)
		case opClose:
			n += PerftestDestLen + DoneLen
		}
	}
	return n
}

// FuzzPerftestSession feeds arbitrary peer bytes to both roles of a full
// ib_write_bw exchange: every outcome must be success or a sentinel error,
// and success means the peer's bytes began with a whole exchange, which
// was read and nothing more.
func FuzzPerftestSession(f *testing.F) {
	c := loadOOBCapture(f, "rxe_write_bw")
	f.Add(c.server, true)
	f.Add(c.client, false)
	f.Add(c.server[:100], true)
	f.Fuzz(func(t *testing.T, peer []byte, asClient bool) {
		role, in := Server, decoded{sys: DefaultSysData, mtu: bth.MTU1024, dests: []PerftestDest{{QPN: 1}}}
		if asClient {
			role = Client
		}
		conn := &memConn{r: bytes.NewReader(peer)}
		p := NewPerftest(conn, role, &Config{MinPeerVersion: -1})
		plan := perftestPlans["rxe_write_bw"]
		_, err := runPlan(context.Background(), p, plan, in)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		want := planBytes(plan, p.Peer(), false)
		if read := len(peer) - conn.r.Len(); read != want || conn.written != want {
			t.Fatalf("success after reading %d and writing %d bytes; the exchange with %q is %d each way",
				read, conn.written, p.Peer().Version, want)
		}
	})
}

// FuzzPingpongSession feeds arbitrary peer bytes to both pingpong roles.
func FuzzPingpongSession(f *testing.F) {
	for _, name := range []string{"rxe_rc_pingpong_send", "rxe_srq_pingpong"} {
		c := loadOOBCapture(f, name)
		f.Add(c.server, true, uint16(pingpongEntries[name]))
		f.Add(c.client, false, uint16(pingpongEntries[name]))
	}
	f.Fuzz(func(t *testing.T, peer []byte, asClient bool, entries uint16) {
		conn := &memConn{r: bytes.NewReader(peer)}
		ctx := context.Background()
		var err error
		read, written := int(entries)*DestLen, int(entries)*DestLen
		if asClient {
			_, err = PingpongClient(ctx, conn, []Dest{{QPN: 7}}, int(entries), nil)
			written += DoneLen
		} else {
			s := NewPingpongServer(conn, int(entries), nil)
			if _, err = s.ReadDests(ctx); err == nil {
				err = s.Reply(ctx, []Dest{{QPN: 7}})
			}
			read += DoneLen
		}
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if got := len(peer) - conn.r.Len(); got != read || conn.written != written {
			t.Fatalf("success after reading %d and writing %d bytes, want %d and %d", got, conn.written, read, written)
		}
	})
}

func FuzzParseSysData(f *testing.F) {
	f.Add([]byte{0, 0, 0x10, 0, 0, 0, 0, 0x40})
	f.Add([]byte{0, 0, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSysData(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) || len(b) == 2*SysDataLen {
				t.Fatalf("error %v for %d bytes", err, len(b))
			}
			return
		}
		var out [2 * SysDataLen]byte
		if err := s.Encode(out[:]); err != nil || !bytes.Equal(out[:], b) {
			t.Fatalf("parse then encode: % x became % x (%v)", b, out, err)
		}
	})
}
