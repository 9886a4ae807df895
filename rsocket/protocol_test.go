package rsocket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// rawOpts are the Conn's options against a raw peer: an 8 KiB receive
// buffer (4 KiB halves) and 16 credits, so that the scripts are short.
var rawOpts = &Options{RecvBuffer: 8192, RecvQueue: 16}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestConversation scripts a librdmacm-like peer through a connection's
// life and checks every message the Conn sends: its connection data,
// data messages and their immediates, the credit messages and the SGL
// entries they write (in the peer's byte order), and the SHUTDOWN and
// DISCONNECT it reacts to and sends.
func TestConversation(t *testing.T) {
	for i, bigEndian := range []bool{false, true} {
		name := map[bool]string{false: "little-endian peer", true: "big-endian peer"}[bigEndian]
		t.Run(name, func(t *testing.T) {
			h := memHosts(t, transportNoFaults)
			p, c := newRawPeer(t, h, uint16(7600+i), bigEndian, rawOpts)
			if p.flags != flagIomap || p.credits != 16 || p.connSGL[2] != 2 || p.connFirst[2] != 4096 {
				t.Fatalf("conn data: flags %#x credits %d SGL %v first buffer %v", p.flags, p.credits, p.connSGL, p.connFirst)
			}
			conversation(t, p, c)
		})
	}
}

func conversation(t *testing.T, p *rawPeer, c *Conn) {
	// A small write: one data message, inline, into the peer's first
	// buffer.
	small := pattern(100, 1)
	if _, err := c.Write(small); err != nil {
		t.Fatal(err)
	}
	expectMsg(t, p, 100, 100)
	if !bytes.Equal(p.rbuf.Bytes()[:100], small) {
		t.Fatal("100-byte write: wrong bytes")
	}

	// A write larger than what is left of the peer's first buffer: the
	// rest of it, then (the Conn waiting, and giving credits meanwhile:
	// its second buffer half) the remainder once the peer publishes its
	// second half.
	big := pattern(4000, 2)
	done := writeAsync(c, big)
	expectMsg(t, p, 3996, 3996)
	expectMsg(t, p, 4<<29|16, 16)
	if a, k, n := p.sgeAt(1); a != p.connFirst[0]+4096 || uint64(k) != p.connFirst[1] || n != 4096 {
		t.Fatalf("the Conn's first SGL entry: %#x %#x %d, want %#x %#x 4096", a, k, n, p.connFirst[0]+4096, p.connFirst[1])
	}
	p.publish(p.rbuf.Addr()+4096, 4096, 2+rawCredits)
	expectMsg(t, p, 4, 4)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), small...), big...)
	if got := p.rbuf.Bytes()[:4100]; !bytes.Equal(got, want) {
		t.Fatalf("the peer's buffer: equal prefix %d of 4100", commonPrefix(got, want))
	}

	// Data from the peer: it fills the Conn's first half in two
	// messages; reading them frees the half, which the Conn publishes
	// again with credits for the two messages read.
	in := pattern(4096, 3)
	p.send(3000, in[:3000], p.connFirst[0], uint32(p.connFirst[1]))
	p.send(1096, in[3000:], p.connFirst[0]+3000, uint32(p.connFirst[1]))
	got := make([]byte, 0, 4096)
	for len(got) < 4096 {
		buf := make([]byte, 8192)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, in) {
		t.Fatal("read from the peer: wrong bytes")
	}
	expectMsg(t, p, 4<<29|(2+16), 16)
	if a, k, n := p.sgeAt(0); a != p.connFirst[0] || uint64(k) != p.connFirst[1] || n != 4096 {
		t.Fatalf("the Conn's second SGL entry: %#x %#x %d", a, k, n)
	}

	// SHUTDOWN from the peer: Read ends, Write goes on.
	p.send(7<<29|2, nil, 0, 0)
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer's SHUTDOWN: %d, %v", n, err)
	}
	if _, err := c.Write(pattern(10, 4)); err != nil {
		t.Fatalf("Write after the peer's SHUTDOWN: %v", err)
	}
	expectMsg(t, p, 10, 10)

	// Close: DISCONNECT, then the connection manager's DREQ.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectMsg(t, p, 7<<29, 0) // DISCONNECT
	select {
	case <-p.cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no DREQ after Close")
	}
}

func expectMsg(t *testing.T, p *rawPeer, imm, n uint32) {
	t.Helper()
	if gi, gn := p.recv(); gi != imm || gn != n {
		t.Fatalf("the peer got immediate %#x with %d bytes, want %#x with %d", gi, gn, imm, n)
	}
}

// TestPeerEnds checks how a Conn takes the ways a peer may end: an
// orderly DISCONNECT, a DREQ without one (its process died), a CloseWrite
// after the Conn's own.
func TestPeerEnds(t *testing.T) {
	h := memHosts(t, transportNoFaults)

	t.Run("DISCONNECT", func(t *testing.T) {
		p, c := newRawPeer(t, h, 7610, false, rawOpts)
		p.send(5, []byte("hello"), p.connFirst[0], uint32(p.connFirst[1]))
		p.send(7<<29, nil, 0, 0) // DISCONNECT
		buf := make([]byte, 100)
		if n, err := c.Read(buf); n != 5 || err != nil || string(buf[:5]) != "hello" {
			t.Fatalf("Read: %d %v %q", n, err, buf[:n])
		}
		if n, err := c.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Read after DISCONNECT: %d, %v", n, err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, ErrReset) {
			t.Fatalf("Write after DISCONNECT: %v, want ErrReset", err)
		}
	})

	t.Run("DREQ without DISCONNECT", func(t *testing.T) {
		p, c := newRawPeer(t, h, 7611, false, rawOpts)
		p.send(5, []byte("hello"), p.connFirst[0], uint32(p.connFirst[1]))
		readErr := make(chan error, 1)
		buf := make([]byte, 100)
		if n, err := c.Read(buf); n != 5 || err != nil {
			t.Fatalf("Read: %d %v", n, err)
		}
		go func() {
			_, err := c.Read(buf)
			readErr <- err
		}()
		time.Sleep(20 * time.Millisecond)
		p.cc.Close()
		select {
		case err := <-readErr:
			if !errors.Is(err, ErrReset) {
				t.Fatalf("blocked Read after the DREQ: %v, want ErrReset", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("blocked Read did not return after the peer's DREQ")
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, ErrReset) {
			t.Fatalf("Write after the DREQ: %v, want ErrReset", err)
		}
	})

	t.Run("SHUTDOWN after CloseWrite", func(t *testing.T) {
		p, c := newRawPeer(t, h, 7612, false, rawOpts)
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		expectMsg(t, p, 7<<29|2, 0)
		p.send(7<<29|2, nil, 0, 0)
		if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Fatalf("Read: %d, %v", n, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// Both sides shut down: the connection was over, no DISCONNECT.
		select {
		case <-p.cc.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("no DREQ after Close")
		}
		// What is left on the peer's CQ are its receives, flushed.
		wcs := make([]verbs.WC, 64)
		for _, wc := range wcs[:p.cq.Poll(wcs)] {
			if wc.Status != verbs.WRFlushErr {
				t.Fatalf("a message after both SHUTDOWNs: %v", &wc)
			}
		}
	})
}

// TestPeerMisbehaves checks that a peer breaking the protocol fails the
// connection with ErrProtocol rather than corrupting the stream.
func TestPeerMisbehaves(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	for i, c := range []struct {
		name   string
		script func(p *rawPeer)
	}{
		{"more data than the buffer published", func(p *rawPeer) {
			p.send(6000, make([]byte, 6000), p.connFirst[0], uint32(p.connFirst[1]))
		}},
		{"a data message longer than it says", func(p *rawPeer) {
			p.send(10, make([]byte, 20), p.connFirst[0], uint32(p.connFirst[1]))
		}},
		{"more messages than credits", func(p *rawPeer) {
			for range rawOpts.RecvQueue + 1 {
				p.send(1, []byte{1}, p.connFirst[0], uint32(p.connFirst[1]))
			}
		}},
		{"an SGL message of 8 bytes", func(p *rawPeer) {
			slot, key := p.nextSlot()
			p.send(4<<29|(1+rawCredits), make([]byte, 8), slot, key)
		}},
		{"an SGL entry of no bytes", func(p *rawPeer) {
			p.publish(p.rbuf.Addr()+4096, 0, 1+rawCredits)
		}},
		{"an SGL entry over one not used yet", func(p *rawPeer) {
			p.publish(p.rbuf.Addr()+4096, 4096, 1+rawCredits) // entry 1
			p.publish(p.rbuf.Addr(), 4096, 2+rawCredits)      // entry 0: the first buffer, unused
		}},
		{"a SEND instead of a WRITE with immediate", func(p *rawPeer) {
			must(t, p.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.Signaled}}))
			p.next()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, conn := newRawPeer(t, h, uint16(7620+i), false, rawOpts)
			c.script(p)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a peer not caught fails, not hangs
			buf := make([]byte, 1<<16)
			var err error
			for err == nil {
				_, err = conn.Read(buf)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Read: %v, want ErrProtocol", err)
			}
			if _, err := conn.Write([]byte("x")); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Write: %v, want ErrProtocol", err)
			}
		})
	}
}

// TestSGLEntryWithItsMessage: the Conn takes a target SGL entry only from
// the SGL message that writes it, not from whatever the slot holds when a
// message with credits only comes. An entry written there by a plain RDMA
// WRITE (as the peer's device may be writing the next one at any time) is
// not used; the one published after it is.
func TestSGLEntryWithItsMessage(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	p, c := newRawPeer(t, h, 7640, false, rawOpts)
	slot, key := p.nextSlot()
	p.writePlain(p.sglEntry(p.rbuf.Addr()+6000, 100), slot, key)
	p.send(4<<29|(1+rawCredits), nil, 0, 0) // credits only

	// 5000 bytes: 4096 fill the first buffer, the rest waits for an entry.
	data := pattern(5000, 5)
	done := writeAsync(c, data)
	expectMsg(t, p, 4096, 4096)
	expectMsg(t, p, 4<<29|16, 16) // the Conn's credits and its second half
	p.publish(p.rbuf.Addr()+4096, 4096, 2+rawCredits)
	expectMsg(t, p, 904, 904)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := p.rbuf.Bytes()[:5000]; !bytes.Equal(got, data) {
		t.Fatalf("the peer's buffer: equal prefix %d of 5000", commonPrefix(got, data))
	}
}

// TestPeerVanishes cuts the link under an established connection, as
// when the peer's host dies: a Read waiting on the idle connection learns
// it from the keepalive's failed retries, and so does a Write; neither
// hangs, and Close returns within its linger.
func TestPeerVanishes(t *testing.T) {
	opts := &Options{KeepAlive: 20 * time.Millisecond, ACKTimeout: 8, Linger: 200 * time.Millisecond}
	for _, op := range []string{"read", "write"} {
		t.Run(op, func(t *testing.T) {
			checkNoLeak(t)
			h := memHosts(t, transportNoFaults)
			c, s, _ := h.pair(t, opts, opts)
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			errc := make(chan error, 1)
			go func() {
				var err error
				buf := make([]byte, 1024)
				for err == nil {
					if op == "read" {
						_, err = c.Read(buf)
					} else {
						_, err = c.Write(buf)
					}
				}
				errc <- err
			}()
			time.Sleep(10 * time.Millisecond)
			h.cut.Store(true)
			select {
			case err := <-errc:
				if !errors.Is(err, ErrConnLost) || !errors.Is(err, verbs.RetryExcErr) {
					t.Fatalf("%s: %v, want ErrConnLost with RETRY_EXC_ERR", op, err)
				}
				t.Logf("%s failed after %v: %v", op, time.Since(start).Round(time.Millisecond), err)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still blocked 10 s after the link was cut", op)
			}
			start = time.Now()
			c.Close()
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("Close took %v", el)
			}
		})
	}
}

// TestDisconnectWithWriteInFlight: the peer sends DISCONNECT and then
// its DREQ while a credit message of the Conn's is still unacknowledged;
// the DREQ moves the QP to ERR and flushes that message. The flush must
// not turn the peer's orderly end into a lost connection: the Conn's
// receive CQ holds the DISCONNECT and its send CQ the flush, and
// whichever is polled first, the DISCONNECT decides.
func TestDisconnectWithWriteInFlight(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	p, c := newRawPeer(t, h, 7630, false, rawOpts)
	in := pattern(4096, 5)
	p.send(4096, in, p.connFirst[0], uint32(p.connFirst[1]))
	// From now on nothing the Conn sends arrives: its credit message
	// (for the half it is about to read) stays unacknowledged.
	h.mute.Store(&h.addrA)
	if n, err := io.ReadFull(c, make([]byte, 4096)); n != 4096 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	must(t, p.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWriteImm, Imm: 7 << 29}})) // DISCONNECT
	closed := make(chan error, 1)
	go func() { closed <- p.cc.Close() }()
	select {
	case <-c.cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the peer's DREQ did not end the Conn's connection")
	}
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after DISCONNECT and DREQ: %d, %v; want io.EOF", n, err)
	}
	h.mute.Store(nil)
	<-closed
}

// TestDisconnectThenSilence: the peer sends DISCONNECT and vanishes
// (no DREQ) while a credit message of the Conn's is unacknowledged, which
// fails after its retries. The orderly end came first: Read returns
// io.EOF.
func TestDisconnectThenSilence(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	p, c := newRawPeer(t, h, 7631, false, &Options{RecvBuffer: 8192, RecvQueue: 16, ACKTimeout: 8})
	p.send(4096, pattern(4096, 6), p.connFirst[0], uint32(p.connFirst[1]))
	h.mute.Store(&h.addrA)
	if n, err := io.ReadFull(c, make([]byte, 4096)); n != 4096 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	must(t, p.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWriteImm, Imm: 7 << 29}})) // DISCONNECT
	for deadline := time.Now().Add(10 * time.Second); c.s.ep.cq.empty(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the credit message did not fail in 10 s")
		}
	}
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after DISCONNECT and a failed write: %d, %v; want io.EOF", n, err)
	}
	h.mute.Store(nil)
}

// TestDisconnectACKLost: the peer's DISCONNECT arrives but the
// acknowledgment of it is lost, and the Conn is closed at once. An
// rsocket peer disconnects only once its DISCONNECT is acknowledged
// (rshutdown waits for every send), so Close must hold the QP until the
// peer's retransmission is acknowledged and the peer's DREQ comes.
// Without the hold the Conn's DREQ would come first, and the peer's
// DISCONNECT would be flushed here or, against a kernel peer whose QP a
// DREQ leaves alone, retried into nothing.
func TestDisconnectACKLost(t *testing.T) {
	h := memHosts(t, transportNoFaults)
	// The peer's QP retransmits within the path's ACK timeout (134 ms);
	// the Conn's is 537 ms, so it holds for 805 ms.
	p, c := newRawPeer(t, h, 7632, false, &Options{ACKTimeout: 17})
	h.mute.Store(&h.addrA)
	must(t, p.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpWriteImm, Imm: 7 << 29, Flags: verbs.Signaled}})) // DISCONNECT
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after DISCONNECT: %d, %v; want io.EOF", n, err)
	}
	h.mute.Store(nil)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := roce.PollOne(ctx, p.cq); err != nil {
		t.Fatalf("the peer's DISCONNECT: %v; want it acknowledged when retransmitted", err)
	}
	must(t, p.cc.Close())
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the peer's DREQ")
	}
}
