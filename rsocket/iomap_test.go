package rsocket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
)

// randomBytes returns n bytes from a seeded source.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// signal writes one byte on from and reads it on to: everything from
// wrote before has reached to (RC order), and to has taken what came
// before it.
func signal(t *testing.T, from, to *Conn) {
	t.Helper()
	if _, err := from.Write([]byte{'!'}); err != nil {
		t.Fatal(err)
	}
	to.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(to, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestIOMap maps buffers on one side, at a fixed offset, at offsets next
// to each other and at an offset Map chooses, writes them from the other
// with IOWrite (inline, from the send buffer, across two buffers, more
// than the send buffer holds), and checks every byte; then the other way.
func TestIOMap(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			checkNoLeak(t)
			h := be.open(t, transportNoFaults)
			o := &Options{IOMapSize: 4, SendBuffer: 64 << 10}
			c, s, _ := h.pair(t, o, o)

			a, b, d := make([]byte, 300<<10), make([]byte, 5000), make([]byte, 100)
			if off, err := s.Map(a, 0); off != 0 || err != nil {
				t.Fatalf("Map at 0: %d, %v", off, err)
			}
			if off, err := s.Map(b, int64(len(a))); off != int64(len(a)) || err != nil {
				t.Fatalf("Map at %d: %d, %v", len(a), off, err)
			}
			chosen, err := s.Map(d, -1)
			if err != nil || chosen < 0 {
				t.Fatalf("Map at -1: %d, %v", chosen, err)
			}
			signal(t, s, c)

			want := randomBytes(len(a)+len(b), 1)
			small := randomBytes(40, 2) // inline
			for _, w := range []struct {
				p   []byte
				off int64
			}{{want, 0}, {small, chosen + 10}} {
				if n, err := c.IOWrite(w.p, w.off); n != len(w.p) || err != nil {
					t.Fatalf("IOWrite of %d bytes at %d: %d, %v", len(w.p), w.off, n, err)
				}
			}
			signal(t, c, s)
			if !bytes.Equal(a, want[:len(a)]) || !bytes.Equal(b, want[len(a):]) {
				t.Errorf("the mapped buffers differ from what IOWrite wrote: equal prefixes %d and %d",
					commonPrefix(a, want), commonPrefix(b, want[len(a):]))
			}
			if !bytes.Equal(d[10:50], small) || d[9] != 0 || d[50] != 0 {
				t.Errorf("the buffer mapped at the chosen offset holds %x", d)
			}
			if st := c.Stats(); st.IOBytesSent != uint64(len(want)+len(small)) || st.IOWrites < 6 || st.IOMapsReceived != 3 {
				t.Errorf("the writer's stats: %+v", st)
			}
			if st := s.Stats(); st.IOMapsSent != 3 || st.MessagesReceived != 1 {
				t.Errorf("the mapper's stats: %+v", st)
			}

			// The other way, and the stream still works after it.
			e := make([]byte, 1000)
			if _, err := c.Map(e, 7); err != nil {
				t.Fatal(err)
			}
			signal(t, c, s)
			if n, err := s.IOWrite([]byte("over rdma"), 500); n != 9 || err != nil {
				t.Fatalf("IOWrite: %d, %v", n, err)
			}
			signal(t, s, c)
			if string(e[493:502]) != "over rdma" {
				t.Errorf("the client's mapped buffer holds %q", e[490:505])
			}
		})
	}
}

// TestIOMapUnmap fills the peer's one-entry table, unmaps, maps again,
// and checks that the writer follows the new entry and refuses the old.
func TestIOMapUnmap(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, s, _ := h.pair(t, &Options{IOMapSize: 1}, &Options{IOMapSize: 1})
	first, second := make([]byte, 64), make([]byte, 64)
	if _, err := s.Map(first, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Map(second, 100); !errors.Is(err, ErrIOMapFull) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Map into a full table: %v", err)
	}
	if err := s.Unmap(0); err != nil {
		t.Fatal(err)
	}
	if err := s.Unmap(0); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("a second Unmap: %v", err)
	}
	if _, err := s.Map(second, 100); err != nil {
		t.Fatal(err)
	}
	signal(t, s, c)
	if n, err := c.IOWrite([]byte("x"), 0); n != 0 || !errors.Is(err, ErrNotMapped) {
		t.Fatalf("IOWrite at the old offset: %d, %v", n, err)
	}
	if _, err := c.IOWrite([]byte("new"), 161); err != nil {
		t.Fatal(err)
	}
	signal(t, c, s)
	if string(second[61:]) != "new" || first[0] != 0 {
		t.Errorf("the buffers hold %q and %q", second[61:], first[:3])
	}
}

// TestIOMapArgs checks every call's refusals: each a *net.OpError with
// the sentinel it documents, nothing sent, the connection still usable.
func TestIOMapArgs(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, s, _ := h.pair(t, &Options{IOMapSize: 2}, &Options{IOMapSize: 2})
	buf := make([]byte, 100)
	if _, err := s.Map(buf, 1000); err != nil {
		t.Fatal(err)
	}
	signal(t, s, c)
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"Map nil", func() error { _, err := s.Map(nil, 0); return err }, syscall.EINVAL},
		{"Map offset -2", func() error { _, err := s.Map(buf, -2); return err }, syscall.EINVAL},
		{"Map past the largest offset", func() error { _, err := s.Map(buf, math.MaxInt64-10); return err }, syscall.EINVAL},
		{"Map overlapping", func() error { _, err := s.Map(make([]byte, 10), 1095); return err }, syscall.EINVAL},
		{"IOWrite offset -1", func() error { _, err := c.IOWrite([]byte{1}, -1); return err }, syscall.EINVAL},
		{"IOWrite past the largest offset", func() error { _, err := c.IOWrite([]byte{1, 2}, math.MaxInt64); return err }, syscall.EINVAL},
		{"IOWrite unmapped", func() error { _, err := c.IOWrite([]byte{1}, 0); return err }, ErrNotMapped},
		{"IOWrite past the mapped end", func() error { _, err := c.IOWrite(make([]byte, 20), 1090); return err }, ErrNotMapped},
		{"IOWrite before the mapped start", func() error { _, err := c.IOWrite(make([]byte, 20), 990); return err }, ErrNotMapped},
		{"Unmap unmapped", func() error { return s.Unmap(1001) }, ErrNotMapped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var oe *net.OpError
			if !errors.As(err, &oe) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want a *net.OpError matching %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	// The connection still carries data.
	if n, err := c.IOWrite(nil, 5); n != 0 || err != nil {
		t.Fatalf("an empty IOWrite: %d, %v", n, err)
	}
	if n, err := c.IOWrite([]byte("ok"), 1098); n != 2 || err != nil {
		t.Fatalf("IOWrite at the mapped end: %d, %v", n, err)
	}
	signal(t, c, s)
	if string(buf[98:]) != "ok" {
		t.Errorf("the buffer ends %q", buf[98:])
	}
	if st := c.Stats(); st.IOBytesSent != 2 {
		t.Errorf("a refused IOWrite sent bytes: %+v", st)
	}

	c.Close()
	if _, err := c.Map(buf, 0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Map after Close: %v", err)
	}
	if _, err := c.IOWrite(buf, 1000); !errors.Is(err, net.ErrClosed) {
		t.Errorf("IOWrite after Close: %v", err)
	}
	if err := c.Unmap(0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Unmap after Close: %v", err)
	}
	c.SyncMapped()

	var nilConn *Conn
	if _, err := nilConn.Map(buf, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Map on a nil Conn: %v", err)
	}
	if _, err := new(Conn).IOWrite(buf, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IOWrite on a zero Conn: %v", err)
	}
	if err := nilConn.Unmap(0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Unmap on a nil Conn: %v", err)
	}
	nilConn.SyncMapped()
}

// TestIOMapNone: with librdmacm's default (no iomap table) on either
// side, Map and IOWrite say why they cannot.
func TestIOMapNone(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c, s, _ := h.pair(t, nil, &Options{IOMapSize: 1})
	if _, err := s.Map(make([]byte, 10), 0); !errors.Is(err, ErrIOMapFull) {
		t.Errorf("Map into a peer with no table: %v", err)
	}
	if _, err := c.Map(make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	signal(t, c, s)
	if _, err := c.IOWrite([]byte{1}, 0); !errors.Is(err, ErrNotMapped) {
		t.Errorf("IOWrite with no table: %v", err)
	}
	if _, err := s.IOWrite([]byte{1}, 0); err != nil {
		t.Errorf("IOWrite into the client's mapping: %v", err)
	}
}

// TestIOMapSizeOption checks the rounding of Options.IOMapSize to what
// rs_conn_data carries, and its limits.
func TestIOMapSizeOption(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 128: 128, 129: 128, 255: 128, 256: 256, 300: 256, 1000: 768, 32512: 32512} {
		o, err := (&Options{IOMapSize: n}).withDefaults()
		if err != nil || o.IOMapSize != want {
			t.Errorf("IOMapSize %d: %d, %v; want %d", n, o.IOMapSize, err, want)
		}
		if got := iomapEntries(iomapScale(want)); got != want {
			t.Errorf("%d entries scale to %#x and back to %d", want, iomapScale(want), got)
		}
	}
	for _, n := range []int{-1, 32513, math.MaxInt} {
		if _, err := (&Options{IOMapSize: n}).withDefaults(); !errors.Is(err, ErrOption) {
			t.Errorf("IOMapSize %d: %v", n, err)
		}
	}
}

// TestIOMapWire checks the iomap messages against a raw peer, as
// librdmacm has them: the Conn announces its table, publishes a mapping
// into the peer's table (24 bytes, in the peer's byte order, with the
// iomap SGL immediate naming the entry) that the peer's RDMA WRITE then
// fills, and writes with IOWrite (a plain RDMA WRITE, no message) into a
// buffer the peer published.
func TestIOMapWire(t *testing.T) {
	for i, bigEndian := range []bool{false, true} {
		t.Run(map[bool]string{false: "little-endian peer", true: "big-endian peer"}[bigEndian], func(t *testing.T) {
			h := memHosts(t, transportNoFaults)
			p, c := newRawPeer(t, h, uint16(7640+i), bigEndian, &Options{RecvBuffer: 8192, RecvQueue: 16, IOMapSize: 3})
			if p.connIomap != 3 {
				t.Fatalf("the Conn announced an iomap table of %d", p.connIomap)
			}
			buf := make([]byte, 4000)
			off, err := c.Map(buf, -1)
			if err != nil {
				t.Fatal(err)
			}
			if imm, n := p.recv(); imm != 6<<29 || n != 24 {
				t.Fatalf("the iomap message: immediate %#x, %d bytes", imm, n)
			}
			eoff, addr, key, length := p.iomapAt(0)
			if int64(eoff) != off || length != 4000 {
				t.Fatalf("the published entry: offset %d (Map said %d), %d bytes", eoff, off, length)
			}
			p.writePlain([]byte("hello"), addr+1000, key)
			c.SyncMapped()
			if string(buf[1000:1005]) != "hello" {
				t.Fatalf("the mapped buffer holds %q", buf[998:1007])
			}

			// The peer maps the second half of its receive buffer at
			// offset 1<<40, entry 2 of the Conn's table.
			p.publishIomap(2, 2, 1<<40, p.rbuf.Addr()+6000, p.rbuf.RKey(), 100)
			if n, err := c.IOWrite([]byte("direct"), 1<<40+90); n != 6 || err != nil {
				t.Fatalf("IOWrite: %d, %v", n, err)
			}
			if _, err := c.IOWrite([]byte("past"), 1<<40+97); !errors.Is(err, ErrNotMapped) {
				t.Fatalf("IOWrite past the peer's buffer: %v", err)
			}
			if _, err := c.Write([]byte("after")); err != nil {
				t.Fatal(err)
			}
			// The credits: the second half of the receive buffer, and a
			// limit that gives back the credit the peer's iomap message
			// took. Then the data; no message came for the IOWrite.
			expectMsg(t, p, 4<<29|(1+16), 16)
			expectMsg(t, p, 5, 5)
			if got := string(p.rbuf.Bytes()[6090:6096]); got != "direct" {
				t.Fatalf("the peer's buffer holds %q", got)
			}
		})
	}
}

// TestIOMapHostilePeer publishes bogus entries into a Conn's iomap table
// from a raw peer: each is refused as a protocol error that ends the
// connection, and the Conn writes nothing anywhere.
func TestIOMapHostilePeer(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	for i, tc := range []struct {
		name        string
		slot, index uint32
		offset      uint64
		addr        uint64
		length      uint32
	}{
		{"index out of range", 0, 2, 0, 1 << 20, 100},
		{"index in the reserved bits", 0, 1 << 16, 0, 1 << 20, 100},
		{"no bytes", 1, 1, 0, 1 << 20, 0},
		{"offsets past the largest", 0, 0, math.MaxInt64 - 10, 1 << 20, math.MaxUint32},
		{"addresses past the largest", 1, 1, 0, math.MaxUint64 - 100, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := newRawPeer(t, h, uint16(7650+i), false, &Options{RecvBuffer: 8192, RecvQueue: 16, IOMapSize: 2})
			p.publishIomap(tc.slot, tc.index, tc.offset, tc.addr, p.rbuf.RKey(), tc.length)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Read after the bogus entry: %v, want ErrProtocol", err)
			} else {
				t.Log(err)
			}
			if _, err := c.IOWrite([]byte{1}, int64(tc.offset)); !errors.Is(err, ErrProtocol) {
				t.Fatalf("IOWrite after the bogus entry: %v, want ErrProtocol", err)
			}
			if st := c.Stats(); st.IOMapsReceived != 0 || st.IOWrites != 0 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

// TestListenerSetIOMapSize: a listener's SetIOMapSize (rsetsockopt's
// RDMA_IOMAPSIZE on a listening rsocket) gives the connections it
// accepts after it a table, and leaves those before it as they were.
func TestListenerSetIOMapSize(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	c1, _, ln := h.pair(t, nil, nil)
	if _, err := c1.Map(make([]byte, 10), 0); !errors.Is(err, ErrIOMapFull) {
		t.Fatalf("Map into a listener's connection with no table: %v", err)
	}
	for _, n := range []int{-1, maxIomapEntries + 1} {
		if err := ln.SetIOMapSize(n); !errors.Is(err, ErrOption) {
			t.Errorf("SetIOMapSize(%d): %v", n, err)
		}
	}
	if err := (*Listener)(nil).SetIOMapSize(1); err == nil {
		t.Error("SetIOMapSize on a nil Listener succeeded")
	}
	if err := ln.SetIOMapSize(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accepted := make(chan *Conn, 1)
	go func() {
		s, err := ln.AcceptContext(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- s
	}()
	d := &Dialer{}
	d.Agent = h.aa
	c2, err := d.Dial(ctx, h.a, netip.AddrPortFrom(h.addrB, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2 := <-accepted
	if s2 == nil {
		t.FailNow()
	}
	defer s2.Close()
	buf := make([]byte, 16)
	if _, err := c2.Map(buf, 0); err != nil {
		t.Fatalf("Map into a connection accepted after SetIOMapSize(1): %v", err)
	}
	signal(t, c2, s2)
	if _, err := s2.IOWrite([]byte("after"), 0); err != nil {
		t.Fatal(err)
	}
	signal(t, s2, c2)
	if string(buf[:5]) != "after" {
		t.Errorf("the mapped buffer holds %q", buf[:5])
	}
	if _, err := c1.Map(make([]byte, 10), 0); !errors.Is(err, ErrIOMapFull) {
		t.Errorf("the first connection has a table now: %v", err)
	}
}

// TestIOWriteNow checks that IOWriteNow writes what it can without
// waiting: all of a write the send buffer holds, part of one it does not,
// nothing, at once, while a Write the peer does not read for holds the
// connection's turn, and nothing past the write deadline.
func TestIOWriteNow(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	o := &Options{IOMapSize: 1, SendBuffer: 16 << 10}
	c, s, _ := h.pair(t, o, o)
	a := make([]byte, 256<<10)
	if _, err := s.Map(a, 0); err != nil {
		t.Fatal(err)
	}
	signal(t, s, c)

	small := randomBytes(4000, 3)
	if n, err := c.IOWriteNow(small, 0); n != len(small) || err != nil {
		t.Fatalf("IOWriteNow of %d bytes on an idle connection: %d, %v", len(small), n, err)
	}
	big := randomBytes(len(a), 4)
	n, err := c.IOWriteNow(big, 0)
	if err != nil || n == 0 || n >= len(big) {
		t.Fatalf("IOWriteNow of %d bytes through a 16 KiB send buffer: %d, %v; want part of it", len(big), n, err)
	}
	signal(t, c, s)
	if !bytes.Equal(a[:n], big[:n]) {
		t.Errorf("the mapped buffer differs from what IOWriteNow wrote: equal prefix %d of %d", commonPrefix(a, big), n)
	}

	// A Write of more than the peer's receive buffer waits for the peer
	// to read, holding the turn; IOWriteNow does not wait for it.
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 1<<20))
		wrote <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.IOWriteNow(small, 0)
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("IOWriteNow beside a Write the peer does not read: %d, %v for 10 s; want 0 and os.ErrDeadlineExceeded", n, err)
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if n, err := c.IOWriteNow(small, 0); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("IOWriteNow again: %d, %v", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("IOWriteNow took %v; it must not wait", d)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.CopyN(io.Discard, s, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the Write: %v", err)
	}

	// Past the write deadline, nothing goes, as with IOWrite.
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if n, err := c.IOWriteNow(small, 0); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("IOWriteNow past the write deadline: %d, %v", n, err)
	}
}
