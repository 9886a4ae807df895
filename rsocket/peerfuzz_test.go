package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// FuzzPeer plays a broken or hostile rsocket peer against a Conn that
// reads and writes all the while. A script is a run of 5-byte steps, each
// one message the raw peer sends:
//
//	kind%6  0 a WRITE with immediate of any operation and argument, with
//	          the length it names or another, anywhere in the Conn's
//	          first receive buffer or past it, with its key or a wrong one
//	        1 a plain RDMA WRITE into the Conn's target SGL and iomap table
//	        2 a SEND (rsockets never sends one)
//	        3 a control message of any code
//	        4 a credit message whose SGL entry says anything
//	        5 an iomap SGL message of any index and entry
//
// Then the peer disconnects. Whatever came, every message the Conn sends
// is one of the protocol's (checkMsg) and nothing panics or hangs: the
// Conn's reader ends within seconds, with io.EOF or a *net.OpError, its
// writer returns (deadlines bound a Write waiting for credits), and Close
// returns, and its queue pair is gone.
func FuzzPeer(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0x00, 0, 100, 0})             // 100 bytes of data, as it says
	f.Add([]byte{0, 0x01, 0, 100, 9})             // data whose length is not the immediate's
	f.Add([]byte{0, 0x02, 0, 10, 0})              // data with a wrong key
	f.Add([]byte{0, 0x00, 0x20, 0, 0})            // more data than the buffer holds
	f.Add([]byte{0, 0x20, 0, 1, 0})               // a reserved operation, taken as data
	f.Add([]byte{1, 0, 0, 0, 4, 0, 0, 0, 5, 1})   // writes into the target SGL, then data
	f.Add([]byte{2, 0, 0, 0, 8})                  // a SEND
	f.Add([]byte{3, 0, 2, 0, 0, 0, 0, 0, 7, 0})   // SHUTDOWN, then data after it
	f.Add([]byte{3, 0, 1, 0, 0, 3, 0, 9, 0, 0})   // KEEPALIVE, then an unknown control code
	f.Add([]byte{4, 0, 3, 200, 255})              // 255 credits and a new buffer
	f.Add([]byte{5, 0, 1, 0, 0, 5, 0, 200, 0, 0}) // iomap entries, in range and not
	// The Conn's device holds few QPs: a Conn whose QP outlived Close
	// would make a later Dial fail.
	h := memHostsMax(f, transportNoFaults, netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 16)
	var port atomic.Uint32
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 5*64 {
			script = script[:5*64]
		}
		p, conn := newRawPeer(t, h, uint16(7800+port.Add(1)%20000), len(script)%2 == 1, rawOpts)
		read, wrote := make(chan error, 1), make(chan error, 1)
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := conn.Read(buf); err != nil {
					read <- err
					return
				}
			}
		}()
		go func() {
			for range 8 {
				conn.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := conn.Write(make([]byte, 700)); err != nil {
					wrote <- err
					return
				}
			}
			wrote <- nil
		}()
		for s := script; len(s) >= 5 && p.fuzzStep(s[:5]); s = s[5:] {
		}
		p.cc.Close()
		for _, c := range []struct {
			what string
			ch   chan error
		}{{"Read", read}, {"Write", wrote}} {
			select {
			case err := <-c.ch:
				var oe *net.OpError
				if err != nil && err != io.EOF && !errors.As(err, &oe) {
					t.Errorf("%s: %v (%T), want io.EOF or a *net.OpError", c.what, err, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still blocked 10 s after the peer disconnected", c.what)
			}
		}
		closed := make(chan error, 1)
		go func() { closed <- conn.Close() }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close still blocked after 10 s")
		}
	})
}

// fuzzStep sends the message step names (FuzzPeer) and reports whether
// the peer can go on: false once its QP failed.
func (p *rawPeer) fuzzStep(step []byte) bool {
	kind, b, x, y, z := step[0]%6, step[1], step[2], step[3], step[4]
	arg := uint32(x)<<8 | uint32(y)
	wr := verbs.SendWR{Opcode: verbs.OpWriteImm, Flags: verbs.Signaled}
	var data []byte
	switch kind {
	case 0:
		wr.Imm = msg(uint32(b>>5), arg)
		data = make([]byte, min(int(arg), 8192))
		if b&1 != 0 {
			data = make([]byte, int(z)*40)
		}
		wr.RemoteAddr, wr.RKey = p.connFirst[0]+uint64(z&31)*256, uint32(p.connFirst[1])
		if b&2 != 0 {
			wr.RKey++
		}
	case 1:
		wr.Opcode, data = verbs.OpWrite, make([]byte, int(z)%64)
		wr.RemoteAddr, wr.RKey = p.connSGL[0]+uint64(x)%128, uint32(p.connSGL[1])
	case 2:
		wr.Opcode, data = verbs.OpSend, make([]byte, int(z))
	case 3:
		wr.Imm = msg(opCtrl, arg)
	case 4:
		data = make([]byte, 16)
		binary.LittleEndian.PutUint64(data, p.rbuf.Addr()+uint64(x)*16)
		binary.LittleEndian.PutUint32(data[8:], p.rbuf.RKey()+uint32(b&1))
		binary.LittleEndian.PutUint32(data[12:], uint32(y)*64)
		wr.Imm = msg(opSGL, uint32(z))
		wr.RemoteAddr, wr.RKey = p.connSGL[0]+uint64(b%4)*16, uint32(p.connSGL[1])
	case 5:
		data = make([]byte, 24)
		binary.LittleEndian.PutUint64(data, uint64(y)<<12)
		binary.LittleEndian.PutUint64(data[8:], p.rbuf.Addr()+uint64(z)*8)
		binary.LittleEndian.PutUint32(data[16:], p.rbuf.RKey())
		binary.LittleEndian.PutUint32(data[20:], uint32(b)*32)
		wr.Imm = msg(opIomapSGL, uint32(x))
		wr.RemoteAddr, wr.RKey = p.connSGL[0]+p.connSGL[2]*16+uint64(x%4)*24, uint32(p.connSGL[1])
	}
	for i := range data {
		data[i] = byte(i) ^ y
	}
	p.load(&wr, data)
	if p.qp.PostSend([]verbs.SendWR{wr}) != nil {
		return false
	}
	return p.await()
}

// await waits for the completion of the peer's one send, taking (and
// replacing) the receives that come meanwhile, each checked, and reports
// whether it succeeded. A send still waiting after 2 s (a Conn out of
// receives answers RNR, and the peer retries for ever) ends the script.
func (p *rawPeer) await() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		wc, err := roce.PollOne(ctx, p.cq)
		if err != nil {
			return false // a failed completion: the QP is in error
		}
		if wc.Opcode&verbs.WCRecv == 0 {
			return true
		}
		p.checkMsg(&wc)
		if p.qp.PostRecv(make([]verbs.RecvWR, 1)) != nil {
			return false
		}
	}
}

// checkMsg checks a message the Conn sent, provoked or not: a WRITE with
// immediate of an operation a Conn sends (data as long as it says, a
// credit update with or without its SGL entry, a control message of a
// known code; no iomap entries, as the Conn maps no buffer here).
func (p *rawPeer) checkMsg(wc *verbs.WC) {
	p.t.Helper()
	if wc.Opcode != verbs.WCRecvRDMAWithIm || wc.Flags&verbs.WithImm == 0 {
		p.t.Errorf("the Conn sent a message other than a WRITE with immediate: %v", wc)
		return
	}
	op, arg := wc.Imm>>29, wc.Imm&msgDataMask
	switch {
	case op == opData && arg == wc.ByteLen && arg > 0:
	case op == opSGL && (wc.ByteLen == 0 || wc.ByteLen == 16):
	case op == opCtrl && arg <= ctrlShutdown && wc.ByteLen == 0:
	default:
		p.t.Errorf("the Conn sent immediate %#x with %d bytes", wc.Imm, wc.ByteLen)
	}
}
